#!/usr/bin/env bash
# Builds textpoke's modules for one arch, out of tree, and prints the directory holding them.
#
#   tools/modules.sh <x86_64|arm64> [patched|unpatched|mitigations|kasan] [production|debug]
#
# `debug` builds with CONFIG_TEXTPOKE_DEBUG_PROTOCOL=y (the seeded defects the negative controls
# select), into its own directory; `production` (the default) without it.
#
# Kbuild in 6.12 writes objects next to the sources (M= has no separate output directory), so
# the module sources are mirrored (mtimes preserved, so Kbuild stays incremental) into
# $TEXTPOKE_CACHE/modules/<arch>[-unpatched]/ and built there against the matching kernel.
# CLIPPY=1 in the environment runs clippy-driver instead of rustc, as for in-tree code;
# TEXTPOKE_MODULES_OUT builds somewhere else (tools/test.sh lints in its own tree);
# TEXTPOKE_KDIR names the kernel tree a caller has already brought up to date.
set -euo pipefail

arch=${1:?usage: tools/modules.sh <x86_64|arm64> [patched|unpatched|mitigations|kasan] [production|debug]}
variant=${2:-patched}
flavor=${3:-production}
case $flavor in
production) options=() ;;
debug) options=(CONFIG_TEXTPOKE_DEBUG_PROTOCOL=y) ;;
*) echo "tools/modules.sh: unknown build '$flavor' (production or debug)" >&2; exit 1 ;;
esac
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}
# This checkout's build products: objects and cargo's fingerprints record source paths and mtimes,
# so two checkouts sharing them (a clean clone and a working tree) would take each other's for
# up to date.
build=$cache/build/$(printf %s "$top" | sha256sum | cut -c1-12)
export PATH="$HOME/.cargo/bin:$PATH"

kdir=${TEXTPOKE_KDIR:-$("$top/tools/kernel.sh" "$arch" "$variant" | tail -n 1)}
out=${TEXTPOKE_MODULES_OUT:-$build/modules/$arch$([ "$variant" = patched ] || echo "-$variant")$([ "$flavor" = production ] || echo "-$flavor")}
mkdir -p "$out"
# rsync takes the first filter rule that matches: the build products' protect rules must come
# before the includes of their directories, or `--delete` removes every object and each run
# rebuilds everything.
rsync -a --delete \
	--filter='P *.o' --filter='P *.ko' --filter='P .*.cmd' --filter='P *.mod' --filter='P *.mod.c' \
	--filter='P *.d' --filter='P *.rmeta' --filter='P Module.symvers' --filter='P modules.order' \
	--include='/Makefile' --include='/Kbuild' --include='/Kconfig' \
	--include='/kernel/***' --include='/arch/***' --include='/rust/***' --include='/samples/***' \
	--include='/tools/' --include='/tools/harness/***' \
	--exclude='*' \
	"$top/" "$out/"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The compiler the kernel was built with (tools/kernel.sh).
llvm=$(cat "$kdir/.textpoke-llvm" 2>/dev/null || echo 1)
make -s -C "$kdir" M="$out" ARCH="$arch" LLVM="$llvm" ${CLIPPY:+CLIPPY=1} "${options[@]}" modules 2>&1 |
	tee "$log" >&2
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
# The modules must be objtool-clean (IBT, return thunks, retpolines on the mitigations kernel).
# Kbuild does not repeat an object's warnings once it is built: drop the objects so that the
# next build reports them again.
if grep -q 'warning: objtool:' "$log"; then
	echo "tools/modules.sh: objtool warned about the $arch ($variant, $flavor) modules: see above" >&2
	rm -rf "$out"
	exit 1
fi
echo "$out"
