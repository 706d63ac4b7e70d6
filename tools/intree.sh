#!/usr/bin/env bash
# Builds textpoke in a kernel tree, as a distribution would, and boots the result.
#
#   tools/intree.sh <x86_64|arm64>
#
# The directory goes to drivers/misc/textpoke of a copy of the patched kernel tree, its Kconfig
# is sourced from drivers/misc/Kconfig, and the kernel is configured with CONFIG_TEXTPOKE=m,
# CONFIG_TEXTPOKE_SAMPLES=m and CONFIG_TEXTPOKE_DEBUG_PROTOCOL unset, the options a user picks in
# menuconfig. The same files the out-of-tree build (tools/modules.sh) compiles are compiled here
# by the kernel's own rules, with the options from Kconfig instead of make variables. The
# kernel and modules so built then boot the guest suite (without the negative controls, which
# need the debug build) and the runner judges the boot as in `make test`.
#
# Not part of `make test`: the new configuration makes Kbuild rebuild the kernel in the copy
# (825 s for x86_64 on 2 busy cores; about 1 GB under $TEXTPOKE_CACHE/intree, removed
# afterwards).
set -euo pipefail

arch=${1:?usage: tools/intree.sh <x86_64|arm64>}
case $arch in
x86_64) srcarch=x86 image=arch/x86/boot/bzImage triple=x86_64-unknown-linux-musl ;;
arm64) srcarch=arm64 image=arch/arm64/boot/Image triple=aarch64-unknown-linux-musl ;;
*) echo "tools/intree.sh: unknown arch $arch" >&2; exit 1 ;;
esac
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}
build=$cache/build/$(printf %s "$top" | sha256sum | cut -c1-12)
export PATH="$HOME/.cargo/bin:$PATH"

# The patched tree, configured and built out of tree (O=) by tools/kernel.sh.
kdir=$("$top/tools/kernel.sh" "$arch" patched | tail -n 1)
src=$(cd "$kdir/.." && pwd)
obj=$(basename "$kdir")
work=$cache/intree/$arch
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

echo "[intree $arch] copying the kernel tree (sources hard-linked, objects copied)" >&2
# Sources are only read by an O= build, so links are safe; the two files edited below are
# replaced, not written through. The object tree is copied, to the same place relative to the
# sources (Kbuild then names the sources `../`, so every recorded command line still matches),
# and only what the new options touch is rebuilt.
rsync -a --link-dest="$src" --exclude='/build-*' "$src/" "$work/src/"
cp -a "$kdir" "$work/src/$obj"

dest=$work/src/drivers/misc/textpoke
mkdir -p "$dest"
rsync -a \
	--include='/Makefile' --include='/Kconfig' \
	--include='/kernel/***' --include='/arch/***' --include='/rust/***' --include='/samples/***' \
	--exclude='*' "$top/" "$dest/"
for f in Kconfig Makefile; do
	cp "$work/src/drivers/misc/$f" "$work/src/drivers/misc/$f.new"
	mv "$work/src/drivers/misc/$f.new" "$work/src/drivers/misc/$f"
done
printf '\nmenu "textpoke"\nsource "drivers/misc/textpoke/Kconfig"\nendmenu\n' >>"$work/src/drivers/misc/Kconfig"
printf 'obj-$(CONFIG_TEXTPOKE)\t\t+= textpoke/\n' >>"$work/src/drivers/misc/Makefile"

kmake() { make -s -C "$work/src" O="$obj" ARCH="$arch" LLVM=1 "$@"; }
echo "[intree $arch] configuring: TEXTPOKE=m TEXTPOKE_SAMPLES=m TEXTPOKE_DEBUG_PROTOCOL=n" >&2
"$work/src/scripts/config" --file "$work/src/$obj/.config" \
	-m TEXTPOKE -m TEXTPOKE_SAMPLES -d TEXTPOKE_DEBUG_PROTOCOL
kmake olddefconfig
for want in CONFIG_TEXTPOKE=m CONFIG_TEXTPOKE_SAMPLES=m '# CONFIG_TEXTPOKE_DEBUG_PROTOCOL is not set'; do
	if ! grep -qx "$want" "$work/src/$obj/.config"; then
		echo "tools/intree.sh: Kconfig did not take '$want' (see $work/src/$obj/.config)" >&2
		exit 1
	fi
done

echo "[intree $arch] building the kernel and its modules" >&2
start=$(date +%s)
kmake -j"$(nproc)" all
mods=$work/src/$obj/drivers/misc/textpoke
for ko in textpoke.ko samples/textpoke_exerciser.ko samples/textpoke_bench.ko samples/textpoke_outsider.ko \
	samples/textpoke_keys.ko samples/textpoke_trapcost.ko; do
	[ -f "$mods/$ko" ] || { echo "tools/intree.sh: the in-tree build made no $ko" >&2; exit 1; }
done
echo "[intree $arch] built in $(($(date +%s) - start)) s: $(cd "$mods" && find . -name '*.ko' | sort | tr '\n' ' ')" >&2

echo "[intree $arch] booting the in-tree kernel and modules" >&2
CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=rust-lld \
	CARGO_TARGET_DIR="$build/cargo-guest" \
	cargo build --quiet --manifest-path "$top/Cargo.toml" -p textpoke-agent --profile guest --target "$triple" >&2
CARGO_TARGET_DIR="$build/cargo-host" \
	cargo build --quiet --release --manifest-path "$top/Cargo.toml" -p textpoke-runner >&2
initramfs=$work/initramfs.cpio
# As tools/guests.sh does: the kernel's own modules the suite loads, as this tree built them.
"$top/tools/initramfs.sh" "$arch" "$mods" \
	"$build/cargo-guest/$triple/guest/textpoke-agent" "$initramfs" --kernel-tree "$work/src/$obj" >&2
"$build/cargo-host/release/textpoke-runner" boot --name "intree-$arch" --arch "$arch" \
	--kernel "$work/src/$obj/$image" --initrd "$initramfs" --out "$cache/runs/intree" --smp 2 \
	--append "textpoke.mode=test textpoke.groups=scenario_one_poker,scenario_concurrent_pokers,scenario_observed,real_perf,bad_input,outsider,kernel_patching,cpu_hotplug,listener" \
	--require textpoke_selftest textpoke_agent
echo "[intree $arch] the in-tree build of arch/$srcarch booted and passed" >&2
