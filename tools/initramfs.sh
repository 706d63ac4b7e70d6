#!/usr/bin/env bash
# Builds the initramfs a textpoke test guest boots from.
#
#   tools/initramfs.sh <x86_64|arm64> <modules-dir> <agent-binary> <out.cpio> [--no-perf]
#                      [--debug-textpoke <textpoke.ko>] [--kernel-tree <kernel object tree>]
#
# Contents:
#   /init                  tools/guest/init (mounts, users, then execs the agent)
#   /bin/busybox           static busybox; /init creates the applet links at boot, which is
#                          faster to pack and unpack than hundreds of links in the archive
#   /bin/textpoke-agent    the guest agent (static)
#   /lib/textpoke/*.ko     every .ko under <modules-dir>, flattened to its file name
#   /lib/textpoke/debug/textpoke.ko
#                          the debug build of textpoke, if given (the negative controls)
#   /lib/textpoke/*.ko     with --kernel-tree, the kernel's own modules the suite loads
#                          (KERNEL_KOS: its static-key selftest, run while textpoke is the
#                          kernel's patcher), from the tree that kernel was built in
#   /lib/modules/<release> with --kernel-tree, every module of that kernel, installed with its
#                          modules.dep so that modprobe finds them (ftracetest's sample
#                          modules, kprobes' KUnit suite)
#   /usr/share/kselftest/ftrace
#                          with --kernel-tree, ftracetest and its test cases from that kernel's
#                          source (tools/testing/selftests/ftrace)
#   /usr/share/kselftest/livepatch
#                          with --kernel-tree of a kernel with CONFIG_LIVEPATCH, the livepatch
#                          selftests of that kernel's source, their test modules built against
#                          it, and their getpid hammer built static
#   /usr/bin/perf + libs   Debian's real perf with its loader and library closure, and on x86_64
#                          the programs the livepatch selftests need beyond busybox, from
#                          tools/debian-bundle.sh (left out with --no-perf)
#   /dev/console           for /init's stdin/stdout/stderr before devtmpfs is mounted
#                          (written by hand: no mknod, so no root needed)
#
# The archive is newc and uncompressed: QEMU hands it over with -initrd, and the guest unpacks
# it faster than it could decompress it under TCG.
#
# Incremental: the tree is staged in $TEXTPOKE_CACHE/initramfs/<arch>/root, and the cpio is
# rewritten only when the hash of the staged tree (contents, modes, links) or of this script
# changed, or <out.cpio> was modified or removed since it was written. Progress goes to
# stderr.
set -euo pipefail

usage() {
	echo "usage: tools/initramfs.sh <x86_64|arm64> <modules-dir> <agent-binary> <out.cpio> [--no-perf] [--debug-textpoke <ko>] [--kernel-tree <dir>]" >&2
	exit 2
}

# The kernel's own modules the guest suite loads (tools/agent/src/scenarios/kernel_patching.rs), as paths
# in its object tree; CONFIG_TEST_STATIC_KEYS=m (tools/kconfig/common.config) builds them.
KERNEL_KOS=(lib/test_static_key_base.ko lib/test_static_keys.ko)

perf=1
debug_ko=
kernel_tree=
args=()
while [ $# -gt 0 ]; do
	case "$1" in
	--no-perf) perf=0 ;;
	--debug-textpoke)
		[ $# -ge 2 ] || usage
		debug_ko=$2
		shift
		;;
	--kernel-tree)
		[ $# -ge 2 ] || usage
		kernel_tree=$2
		shift
		;;
	-h | --help) usage ;;
	-*) echo "tools/initramfs.sh: unknown option $1" >&2 && usage ;;
	*) args+=("$1") ;;
	esac
	shift
done
[ ${#args[@]} -eq 4 ] || usage
arch=${args[0]}
moddir=${args[1]}
agent=${args[2]}
out=${args[3]}

top=$(cd "$(dirname "$0")/.." && pwd)
cache=${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}
work=$cache/initramfs/$arch
stage=$work/root

log() { printf '[initramfs %s] %s\n' "$arch" "$*" >&2; }
die() {
	printf 'tools/initramfs.sh: %s\n' "$*" >&2
	exit 1
}

# ELF e_machine as the two little-endian bytes at offset 18, to catch a binary built for the
# other arch here rather than as an "Exec format error" deep in a guest boot.
case "$arch" in
x86_64) machine="3e 00" ;;
arm64) machine="b7 00" ;;
*) usage ;;
esac
elf_machine() { od -An -tx1 -j18 -N2 "$1" | tr -s ' ' | sed 's/^ //; s/ $//'; }
is_elf() { [ "$(od -An -tx1 -N4 "$1" | tr -d ' \n')" = 7f454c46 ]; }

# The kernel's livepatch selftests, as tools/testing/selftests/livepatch's Makefile installs
# them: the scripts in /usr/share/kselftest/livepatch, their modules in test_modules/ below it
# (built out of tree against $kernel_tree in a directory of this output's own, mirrored so that
# Kbuild stays incremental), and the getpid hammer test-syscall.sh runs. The programs the scripts
# call beyond busybox come with tools/debian-bundle.sh, for x86_64 only: the only guest kernel
# with livepatch (arm64 has none in 6.12).
pack_livepatch_selftests() {
	local src=$selftests/livepatch dst=$stage/usr/share/kselftest/livepatch
	local mods=${out%.cpio}.livepatch-modules
	[ "$arch" = x86_64 ] || die "the livepatch selftests are packed for x86_64 guests only"
	[ -d "$src/test_modules" ] || die "no livepatch selftests under $src"
	mkdir -p "$mods" "$dst/test_modules"
	rsync -a --delete --filter='P *.o' --filter='P *.ko' --filter='P .*.cmd' --filter='P *.mod' \
		--filter='P *.mod.c' --filter='P Module.symvers' --filter='P modules.order' \
		"$src/test_modules/" "$mods/"
	make -s -C "$kernel_tree" M="$mods" ARCH="$karch" LLVM="$llvm" modules >&2 ||
		die "building the livepatch test modules against $kernel_tree failed"
	install -m 0644 "$mods"/*.ko "$dst/test_modules/"
	install -m 0644 "$src/functions.sh" "$src/settings" "$dst/"
	install -m 0755 "$src"/test-*.sh "$dst/"
	clang -static -O2 -o "$dst/test_klp-call_getpid" "$src/test_klp-call_getpid.c" ||
		die "building test_klp-call_getpid failed"
}

[ -d "$moddir" ] || die "modules directory $moddir does not exist"
[ -f "$agent" ] || die "agent $agent does not exist"
if is_elf "$agent" && [ "$(elf_machine "$agent")" != "$machine" ]; then
	die "agent $agent is not an $arch ELF binary"
fi

mkdir -p "$work"
# Two builds of the same arch would share the staging tree.
exec 9>"$work/.lock"
flock 9

# --- busybox ----------------------------------------------------------------------------------

busybox_binary() {
	case "$arch" in
	x86_64)
		# The host is amd64 and has Debian's busybox-static (tools/install-deps.sh).
		[ -x /bin/busybox ] || die "/bin/busybox missing: install busybox-static (tools/install-deps.sh)"
		is_elf /bin/busybox && "$READELF" -lW /bin/busybox | grep -q INTERP &&
			die "/bin/busybox is dynamically linked: install busybox-static"
		echo /bin/busybox
		;;
	arm64)
		# Downloaded (not installed) by tools/install-deps.sh; unpacked once per .deb.
		local deb dir
		deb=$(find "$cache/debs" -maxdepth 1 -name 'busybox-static_*_arm64.deb' | sort | tail -n 1)
		[ -n "$deb" ] || die "no busybox-static arm64 .deb in $cache/debs: run tools/install-deps.sh"
		dir=$work/busybox/$(basename "$deb" .deb)
		if [ ! -x "$dir/bin/busybox" ]; then
			rm -rf "$dir"
			mkdir -p "$dir"
			dpkg-deb -x "$deb" "$dir"
		fi
		echo "$dir/bin/busybox"
		;;
	esac
}

READELF=$(command -v readelf || command -v llvm-readelf) || die "neither readelf nor llvm-readelf found"

# --- staging ----------------------------------------------------------------------------------

# Rebuilt from scratch each time (tens of MB of copies, well under a second) so nothing stale
# survives; the cpio itself is what is cached.
rm -rf "$stage"
mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,lib/textpoke,dev,proc,sys,tmp,root,etc}
chmod 1777 "$stage/tmp"
chmod 0700 "$stage/root"

bb=$(busybox_binary)
[ "$(elf_machine "$bb")" = "$machine" ] || die "$bb is not an $arch binary"
cp "$bb" "$stage/bin/busybox"
chmod 0755 "$stage/bin/busybox"

install -m 0755 "$top/tools/guest/init" "$stage/init"
install -m 0755 "$agent" "$stage/bin/textpoke-agent"

nko=0
while IFS= read -r -d '' ko; do
	name=$(basename "$ko")
	[ ! -e "$stage/lib/textpoke/$name" ] || die "two modules named $name under $moddir"
	[ "$(elf_machine "$ko")" = "$machine" ] || die "$ko is not an $arch module"
	install -m 0644 "$ko" "$stage/lib/textpoke/$name"
	nko=$((nko + 1))
done < <(find "$moddir" -name '*.ko' -type f -print0 | sort -z)
for rel in ${kernel_tree:+"${KERNEL_KOS[@]}"}; do
	ko=$kernel_tree/$rel
	name=$(basename "$ko")
	[ -f "$ko" ] || die "kernel module $ko does not exist (a kernel config option missing?)"
	[ ! -e "$stage/lib/textpoke/$name" ] || die "two modules named $name"
	[ "$(elf_machine "$ko")" = "$machine" ] || die "$ko is not an $arch module"
	install -m 0644 "$ko" "$stage/lib/textpoke/$name"
done
[ "$nko" -gt 0 ] || log "warning: no .ko files under $moddir"
if [ -n "$kernel_tree" ]; then
	# The compiler the kernel was built with (tools/kernel.sh), for the strip.
	llvm=$(cat "$kernel_tree/.textpoke-llvm" 2>/dev/null || echo 1)
	karch=$([ "$arch" = x86_64 ] && echo x86_64 || echo arm64)
	make -s -C "$kernel_tree" ARCH="$karch" LLVM="$llvm" INSTALL_MOD_PATH="$stage" \
		INSTALL_MOD_STRIP=1 modules_install >&2 ||
		die "installing the modules of $kernel_tree failed"
	# The links back into the build tree mean nothing in the guest.
	rm -f "$stage"/lib/modules/*/build "$stage"/lib/modules/*/source
	selftests=$kernel_tree/source/tools/testing/selftests
	[ -x "$selftests/ftrace/ftracetest" ] || die "no ftracetest under $selftests"
	mkdir -p "$stage/usr/share/kselftest"
	cp -r "$selftests/ftrace" "$stage/usr/share/kselftest/ftrace"
	if grep -qx CONFIG_LIVEPATCH=y "$kernel_tree/.config"; then
		pack_livepatch_selftests
	fi
fi
if [ -n "$debug_ko" ]; then
	[ -f "$debug_ko" ] || die "debug textpoke $debug_ko does not exist"
	[ "$(elf_machine "$debug_ko")" = "$machine" ] || die "$debug_ko is not an $arch module"
	mkdir -p "$stage/lib/textpoke/debug"
	install -m 0644 "$debug_ko" "$stage/lib/textpoke/debug/textpoke.ko"
fi

if [ "$perf" = 1 ]; then
	"$top/tools/debian-bundle.sh" "$arch" "$stage"
fi

# --- cpio -------------------------------------------------------------------------------------

# What the archive is made of: every path with its type, mode and link target, every file's
# contents, and this script (which decides how they are packed).
inputs_hash() {
	{
		sha256sum "$0" | cut -d' ' -f1
		(cd "$stage" && find . -printf '%y %m %p %l\n' | LC_ALL=C sort)
		(cd "$stage" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
	} | sha256sum | cut -d' ' -f1
}

# One newc header plus its NUL-terminated, 4-byte padded name (no data: only for nodes and the
# trailer). Fields: ino mode uid gid nlink mtime filesize devmajor devminor rdevmajor rdevminor
# namesize check.
newc_entry() {
	local name=$1 ino=$2 mode=$3 rmaj=$4 rmin=$5
	local namesize=$((${#name} + 1))
	printf '070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X' \
		"$ino" "$mode" 0 0 1 0 0 0 0 "$rmaj" "$rmin" "$namesize" 0
	printf '%s\0' "$name"
	head -c $(((4 - (110 + namesize) % 4) % 4)) /dev/zero
}

# The kernel opens /dev/console on the initramfs before running /init; without the node /init
# starts with no stdin/stdout/stderr and nothing it prints reaches the serial console. Today's
# guest kernels (CONFIG_INITRAMFS_SOURCE="") also carry the kernel's default built-in archive,
# which has the node, but a kernel built with its own INITRAMFS_SOURCE would not, so the
# archive brings its own. Creating it with mknod would need root, so it goes in a second,
# hand-written archive appended to the first: the kernel unpacks concatenated archives in order
# (the first one created /dev), skipping the zero padding between them.
console_archive() {
	newc_entry dev/console 1 $((0020000 | 0600)) 5 1
	newc_entry 'TRAILER!!!' 0 0 0 0
}

# Every mtime to the epoch: the archive then depends only on what is in it.
find "$stage" -exec touch -h -d @0 {} +

hash=$(inputs_hash)
stamp=$work/stamp-$(realpath -m "$out" | sha256sum | cut -c1-16)
if [ -f "$out" ] && [ -f "$stamp" ] &&
	[ "$(cat "$stamp")" = "$hash $(stat -c '%s %Y' "$out")" ]; then
	log "up to date: $out ($(du -h "$out" | cut -f1))"
	exit 0
fi

log "packing $(cd "$stage" && find . -type f | wc -l) files, $(du -sh "$stage" | cut -f1) ($nko modules, perf: $([ "$perf" = 1 ] && echo yes || echo no))"
mkdir -p "$(dirname "$out")"
tmp=$out.tmp.$$
trap 'rm -f "$tmp"' EXIT
{
	# -R 0:0: everything owned by root whoever builds it; --reproducible: inode and device
	# numbers from a counter, so (with the mtimes above) the same tree packs to the same bytes.
	(cd "$stage" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort |
		cpio --quiet -o -H newc -R 0:0 --reproducible)
	console_archive
} >"$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "$hash $(stat -c '%s %Y' "$out")" >"$stamp"
log "wrote $out ($(du -h "$out" | cut -f1))"
