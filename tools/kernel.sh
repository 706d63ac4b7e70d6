#!/usr/bin/env bash
# Builds a guest kernel from Debian's linux-source-6.12 and prints its object tree.
#
#   tools/kernel.sh <x86_64|arm64> [patched|unpatched|mitigations|kasan]
#
# Variants:
#   patched      Debian's source with tools/patches, tinyconfig + common.config + <arch>.config
#   unpatched    the same without the series (the check that textpoke refuses to load)
#   mitigations  patched + mitigations.config: IBT and Debian's CPU mitigations, return thunks
#                included, built with clang 19 (x86_64 only)
#   kasan        patched + kasan.config: KASAN and other debug checkers (`make test-debug`); on
#                arm64 also cfi.config, control-flow integrity and shadow call stacks as
#                Android's GKI builds them, so that ftrace runs without CALL_OPS, with clang 19
#
# The patched, unpatched and x86_64 kasan kernels are built with Debian's default clang (14),
# the others with clang 19 (LLVM=-19): what the kernel tree was built with is kept in its
# .textpoke-llvm, which tools/modules.sh builds the modules with.
#
# The last line of stdout is the object tree (the KDIR for `make -C $KDIR M=...`); progress goes
# to stderr. Everything lives under $TEXTPOKE_CACHE (default ~/.cache/textpoke):
#
#   kernel/patched/             Debian's source with tools/patches applied
#   kernel/patched/build-<arch> object tree for each arch (srctree is "..", so commands
#                               do not depend on where the cache is)
#   kernel/patched/build-<arch>-<variant>
#                               object trees of the variants built from the patched source
#   kernel/unpatched/           pristine source, and build-x86_64 for the negative check
#
# A build is keyed on a hash of (source version, patches, the options the config fragments set,
# this recipe's version): a fragment's comments, which say why an option is there, are not part
# of it, so rewording one rebuilds nothing. An unchanged key does nothing; a changed one rebuilds incrementally: patches are
# reverse-applied and re-applied, and the files whose contents that left as they were get their
# old times back, so only the files a new series changes look new; and the config is
# regenerated in place so Kbuild recompiles only what changed. A fragment's option that
# Kconfig does not keep (a missing dependency, a compiler that lacks a flag) fails the build;
# when fragments set the same option, the last one wins and is the one checked.
set -euo pipefail

arch=${1:?usage: tools/kernel.sh <x86_64|arm64> [patched|unpatched|mitigations|kasan]}
variant=${2:-patched}
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}
tarball=/usr/src/linux-source-6.12.tar.xz
# Bump when the way a kernel is produced changes in a way the inputs below do not show.
recipe=5
export PATH="$HOME/.cargo/bin:$PATH"

start=$(date +%s)
stage() { printf '[kernel %s/%s +%ss] %s\n' "$arch" "$variant" $(($(date +%s) - start)) "$*" >&2; }
die() { printf 'tools/kernel.sh: %s\n' "$*" >&2; exit 1; }

case $arch in
x86_64) image=arch/x86/boot/bzImage ;;
arm64) image=arch/arm64/boot/Image ;;
*) die "unknown arch '$arch' (x86_64 or arm64)" ;;
esac
case $variant in
patched | unpatched) llvm=1 ;;
kasan) llvm=$([ "$arch" = arm64 ] && echo -19 || echo 1) ;;
mitigations) [ "$arch" = x86_64 ] || die "the mitigations variant is x86_64 only"; llvm=-19 ;;
*) die "unknown variant '$variant' (patched, unpatched, mitigations or kasan)" ;;
esac
# The compiler: clang (Debian's default) for LLVM=1, clang-19 for LLVM=-19.
cc=clang$([ "$llvm" = 1 ] || echo "$llvm")
command -v "$cc" >/dev/null || die "$cc missing: run tools/install-deps.sh test"
# The Rust bindings are generated with the libclang of the same clang: the kernel's C flags
# are the compiler's (-fsanitize=kcfi for clang 19, an -enable-trivial-auto-var-init flag for
# clang 14), which another version refuses, and bindgen would otherwise load the newest
# libclang installed.
export LIBCLANG_PATH=/usr/lib/llvm-$("$cc" -dumpversion | cut -d. -f1)/lib
[ -d "$LIBCLANG_PATH" ] || die "$LIBCLANG_PATH missing (libclang of $cc): run tools/install-deps.sh"
# The variants other than `unpatched` are the patched source with more fragments. The arm64
# KASAN kernel is also the one without CALL_OPS: one kernel fewer to build than a CFI kernel of
# its own.
case $variant in
unpatched) source=unpatched extra=() ;;
patched) source=patched extra=() ;;
kasan)
	source=patched extra=("$top/tools/kconfig/kasan.config")
	if [ "$arch" = arm64 ]; then extra+=("$top/tools/kconfig/cfi.config"); fi
	;;
*) source=patched extra=("$top/tools/kconfig/$variant.config") ;;
esac
[ -f "$tarball" ] || die "$tarball missing: run tools/install-deps.sh"

src_version=$(dpkg-query -W -f='${Version}' linux-source-6.12)
patches=("$top"/tools/patches/*.patch)
fragments=("$top/tools/kconfig/common.config" "$top/tools/kconfig/$arch.config" "${extra[@]}")
key=$( {
	echo "recipe $recipe source $src_version variant $variant arch $arch llvm $llvm"
	[ "$source" = patched ] && cat "${patches[@]}"
	# The options alone, `# CONFIG_X is not set` included.
	grep -hE '^(CONFIG_|# CONFIG_[A-Z0-9_]+ is not set)' "${fragments[@]}"
} | sha256sum | cut -c1-16)

srcdir=$cache/kernel/$source
objname=build-$arch$([ "$variant" = "$source" ] || echo "-$variant")
objtree=$srcdir/$objname
kmake() { make -C "$srcdir" O="$objname" ARCH="$arch" LLVM="$llvm" "$@"; }

if [ -f "$objtree/.textpoke-key" ] && [ "$(cat "$objtree/.textpoke-key")" = "$key" ] &&
	[ -f "$objtree/$image" ]; then
	stage "up to date (key $key)"
	echo "$objtree"
	exit 0
fi

# Source tree: extracted once per Debian version.
if [ "$(cat "$srcdir/.textpoke-source" 2>/dev/null)" != "$src_version" ]; then
	stage "extracting linux-source-6.12 $src_version"
	rm -rf "$srcdir" "$srcdir.tmp"
	mkdir -p "$srcdir.tmp"
	tar -xf "$tarball" -C "$srcdir.tmp" --strip-components=1
	echo "$src_version" >"$srcdir.tmp/.textpoke-source"
	mv "$srcdir.tmp" "$srcdir"
fi

# Patch series: bring the applied set in line with tools/patches. Reverse-applying the old
# series (kept in the tree) touches only the files it changed.
if [ "$source" = patched ]; then
	applied=$srcdir/.textpoke-patches
	if ! diff -rq "$applied" "$top/tools/patches" >/dev/null 2>&1; then
		# The files the old series touched, kept with their times: those the new series leaves
		# as they were get their times back, so Kbuild recompiles only what it changed (a
		# changelog or one arch's file does not rebuild every kernel).
		kept=$srcdir.textpoke-kept
		rm -rf "$kept"
		mkdir -p "$kept"
		if [ -d "$applied" ]; then
			grep -h '^+++ b/' "$applied"/*.patch | cut -c7- | sort -u | while read -r f; do
				if [ -f "$srcdir/$f" ]; then
					mkdir -p "$kept/$(dirname "$f")"
					cp -p "$srcdir/$f" "$kept/$f"
				fi
			done
			stage "reverting the previously applied patch series"
			old_series=("$applied"/*.patch)
			for ((i = ${#old_series[@]} - 1; i >= 0; i--)); do
				p=${old_series[i]}
				patch -d "$srcdir" -p1 -R -s --no-backup-if-mismatch <"$p" ||
					die "cannot revert $(basename "$p"); remove $srcdir to start over"
			done
			rm -rf "$applied"
		fi
		for p in "${patches[@]}"; do
			stage "applying $(basename "$p")"
			patch -d "$srcdir" -p1 -s --forward --no-backup-if-mismatch <"$p" ||
				die "$(basename "$p") does not apply to linux-source-6.12 $src_version"
		done
		mkdir -p "$applied"
		cp "${patches[@]}" "$applied/"
		(cd "$kept" && find . -type f) | while read -r f; do
			if cmp -s "$kept/$f" "$srcdir/$f"; then
				touch -r "$kept/$f" "$srcdir/$f"
			fi
		done
		rm -rf "$kept"
	fi
elif [ ! -d "$objtree" ] && [ -f "$cache/kernel/patched/build-$arch/$image" ]; then
	# The unpatched kernel differs from the patched one in a handful of files: start from a
	# copy of the patched objects and make the files the series touches newer than them, so
	# Kbuild recompiles exactly those.
	stage "seeding from the patched $arch object tree"
	cp -a "$cache/kernel/patched/build-$arch" "$objtree.tmp"
	rm -f "$objtree.tmp/.textpoke-key"
	mv "$objtree.tmp" "$objtree"
	grep -h '^+++ b/' "$top"/tools/patches/*.patch | cut -c7- | sort -u | while read -r f; do
		# Files the series adds are not in this tree; under `set -e` a false `[ -f ]` as the
		# loop's last command failed the whole build (the series' last file is one).
		[ ! -f "$srcdir/$f" ] || touch "$srcdir/$f"
	done
fi

stage "configuring: tinyconfig + ${fragments[*]##*/}"
# Generate the config in a scratch object tree and copy it over only if it changed: running
# tinyconfig in the real one would rewrite include/config/ with tinyconfig's values and then
# back, touching every symbol and making Kbuild rebuild nearly everything.
scratch=$srcdir/$objname.config
rm -rf "$scratch"
mkdir -p "$objtree" "$scratch"
make -s -C "$srcdir" O="$objname.config" ARCH="$arch" LLVM="$llvm" tinyconfig >/dev/null
"$srcdir/scripts/kconfig/merge_config.sh" -m -O "$scratch" "$scratch/.config" "${fragments[@]}" >/dev/null
make -s -C "$srcdir" O="$objname.config" ARCH="$arch" LLVM="$llvm" olddefconfig >/dev/null
if ! cmp -s "$scratch/.config" "$objtree/.config"; then
	cp "$scratch/.config" "$objtree/.config"
fi
rm -rf "$scratch"
# What the fragments ask for, the last setting of each option winning (as in merge_config.sh).
wanted=$(cat "${fragments[@]}" | sed -n 's/^\(CONFIG_[A-Z0-9_]*=.*\)$/\1/p; s/^# \(CONFIG_[A-Z0-9_]*\) is not set$/\1=n/p' |
	awk -F= '{ if (!($1 in v)) order[n++] = $1; v[$1] = $0 } END { for (i = 0; i < n; i++) print v[order[i]] }')
missing=$(printf '%s\n' "$wanted" |
	while IFS= read -r want; do
		sym=${want%%=*} val=${want#*=}
		if [ "$val" = n ]; then
			if grep -q "^$sym=" "$objtree/.config"; then echo "$sym should be unset"; fi
		elif ! grep -qx "$sym=$val" "$objtree/.config"; then
			echo "$want did not stick"
		fi
	done)
[ -z "$missing" ] || die "config fragment options rejected by Kconfig (missing dependency?):
$missing"

stage "building (log: $objtree/build.log)"
(
	while sleep 60; do
		stage "still building: $(grep -c '^  [A-Z]' "$objtree/build.log" 2>/dev/null || echo 0) steps so far"
	done
) &
heartbeat=$!
trap 'kill $heartbeat 2>/dev/null || true' EXIT
if ! kmake -j"$(nproc)" >"$objtree/build.log" 2>&1; then
	tail -40 "$objtree/build.log" >&2
	die "kernel build failed; full log in $objtree/build.log"
fi
kill $heartbeat 2>/dev/null || true
echo "$llvm" >"$objtree/.textpoke-llvm"
echo "$key" >"$objtree/.textpoke-key"
stage "done: $objtree/$image"
echo "$objtree"
