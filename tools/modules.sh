#!/usr/bin/env bash
# Builds textpoke's modules for one arch, out of tree, and prints the directory holding them.
#
#   tools/modules.sh <x86_64|arm64> [patched|unpatched]
#
# Kbuild in 6.12 writes objects next to the sources (M= has no separate output directory), so
# the module sources are mirrored (mtimes preserved, so Kbuild stays incremental) into
# $TEXTPOKE_CACHE/modules/<arch>[-unpatched]/ and built there against the matching kernel.
# CLIPPY=1 in the environment runs clippy-driver instead of rustc, as for in-tree code;
# TEXTPOKE_MODULES_OUT builds somewhere else (tools/test.sh lints in its own tree);
# TEXTPOKE_KDIR names the kernel tree a caller has already brought up to date.
set -euo pipefail

arch=${1:?usage: tools/modules.sh <x86_64|arm64> [patched|unpatched]}
variant=${2:-patched}
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}
export PATH="$HOME/.cargo/bin:$PATH"

kdir=${TEXTPOKE_KDIR:-$("$top/tools/kernel.sh" "$arch" "$variant" | tail -n 1)}
out=${TEXTPOKE_MODULES_OUT:-$cache/modules/$arch$([ "$variant" = patched ] || echo "-$variant")}
mkdir -p "$out"
rsync -a --delete \
	--include='/Makefile' --include='/Kbuild' \
	--include='/kernel/***' --include='/arch/***' --include='/rust/***' --include='/samples/***' \
	--include='/tools/' --include='/tools/harness/***' \
	--exclude='*' \
	--filter='P *.o' --filter='P *.ko' --filter='P .*.cmd' --filter='P *.mod' --filter='P *.mod.c' \
	--filter='P *.d' --filter='P *.rmeta' --filter='P Module.symvers' --filter='P modules.order' \
	"$top/" "$out/"
make -s -C "$kdir" M="$out" ARCH="$arch" LLVM=1 ${CLIPPY:+CLIPPY=1} modules >&2
echo "$out"
