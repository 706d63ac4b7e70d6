#!/usr/bin/env bash
# Builds everything a guest boot needs for one arch and prints the paths, one per line:
#
#   tools/guests.sh <x86_64|arm64> [patched|unpatched|mitigations|kasan]
#   -> kernel image, initramfs
#
# The variant names the kernel (tools/kernel.sh); every variant but `unpatched` gets perf, and
# `patched` the debug build of textpoke too.
#
# Each step is cached and incremental: the kernel (tools/kernel.sh), the modules
# (tools/modules.sh), the static guest agent (cargo, in $TEXTPOKE_CACHE/build/<checkout>/cargo-guest) and the
# initramfs (tools/initramfs.sh). Progress goes to stderr.
set -euo pipefail

arch=${1:?usage: tools/guests.sh <x86_64|arm64> [patched|unpatched|mitigations|kasan]}
variant=${2:-patched}
top=$(cd "$(dirname "$0")/.." && pwd)
cache=${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}
# This checkout's build products: objects and cargo's fingerprints record source paths and mtimes,
# so two checkouts sharing them (a clean clone and a working tree) would take each other's for
# up to date.
build=$cache/build/$(printf %s "$top" | sha256sum | cut -c1-12)
export PATH="$HOME/.cargo/bin:$PATH"

case $arch in
x86_64) triple=x86_64-unknown-linux-musl image=arch/x86/boot/bzImage ;;
arm64) triple=aarch64-unknown-linux-musl image=arch/arm64/boot/Image ;;
*) echo "tools/guests.sh: unknown arch $arch" >&2; exit 1 ;;
esac

kdir=$("$top/tools/kernel.sh" "$arch" "$variant" | tail -n 1)
modules=$(TEXTPOKE_KDIR=$kdir "$top/tools/modules.sh" "$arch" "$variant" | tail -n 1)
extra=()
if [ "$variant" != unpatched ]; then
	# The debug build of textpoke, for the negative controls (the agent loads it after the
	# tests of the production build) and the harness boots of seeded defects: only the
	# patched kernel's boots run them (tools/runner/src/plan/manifest.rs), so only its guest
	# carries it.
	if [ "$variant" = patched ]; then
		debug=$(TEXTPOKE_KDIR=$kdir "$top/tools/modules.sh" "$arch" "$variant" debug | tail -n 1)
		extra+=(--debug-textpoke "$debug/textpoke.ko")
	fi
	# The kernel's own modules the suite loads (its static-key selftest).
	extra+=(--kernel-tree "$kdir")
else
	# The unpatched kernel only serves the check that textpoke refuses to load: no perf.
	extra+=(--no-perf)
fi

echo "[guest $arch] agent ($triple)" >&2
# rust-lld links the aarch64 musl binary on an x86 host without a cross toolchain.
CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=rust-lld \
	CARGO_TARGET_DIR="$build/cargo-guest" \
	cargo build --quiet --manifest-path "$top/Cargo.toml" -p textpoke-agent --profile guest --target "$triple" >&2
agent=$build/cargo-guest/$triple/guest/textpoke-agent

initramfs=$build/initramfs-$arch-$variant.cpio
"$top/tools/initramfs.sh" "$arch" "$modules" "$agent" "$initramfs" "${extra[@]}" >&2

echo "$kdir/$image"
echo "$initramfs"
