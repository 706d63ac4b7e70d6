#!/usr/bin/env bash
# Installs everything textpoke's build and tests need on a Debian bookworm host (run as root).
#
#   tools/install-deps.sh [run|test]
#
# `run` (make run, make bench): the kernel toolchain, QEMU, perf, the Rust pieces the module
# and the guests need. `test` (make test, make test-debug) adds what only the tests need:
# cargo-fuzz, clang 19 for the kernels built as distributions build them (tools/kernel.sh:
# the x86_64 mitigations and arm64 kasan kernels), and OpenCSD's headers for the perf with the
# series' cs-etm patch (tools/perf.sh).
#
# Idempotent: each step first checks whether its result is already present, so the make
# targets call this unconditionally and a warm machine pays only for the checks.
#
# Every way out of this script says why on stderr: the steps that can fail print what failed
# and what to do, and anything else that fails is named by the ERR trap below. The host test
# tools/runner/tests/install_deps.rs runs this script against simulated machines (stub
# dpkg-query, dpkg, apt-get, apt-cache, rustup, cargo, bindgen first on PATH).
set -Eeuo pipefail

PROG=tools/install-deps.sh
trap 'printf "%s: line %d: \`%s\` failed (exit %d); stopping here\n" "$PROG" "$LINENO" "$BASH_COMMAND" "$?" >&2' ERR

log() { printf '[deps] %s\n' "$*"; }
fail() {
	trap - ERR
	printf '%s: %s\n' "$PROG" "$*" >&2
	exit 1
}

# Debian's 6.12 source as shipped by bookworm-security; the version is part of the kernel cache
# key, so a different version rebuilds instead of silently mixing objects.
KERNEL_SOURCE_VERSION=${KERNEL_SOURCE_VERSION:-6.12.117-1~deb12u1}
BINDGEN_VERSION=0.72.1
CARGO_FUZZ_VERSION=0.13.2
# Where apt's configuration lives; the host test points it at a scratch directory.
ETC=${TEXTPOKE_DEPS_ETC:-/etc}
CACHE=${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}
LOGDIR=$CACHE/logs
PROFILE=${1:-run}
case $PROFILE in
run | test) ;;
*) fail "unknown profile '$PROFILE' (run or test)" ;;
esac

need_root() {
	[ "$(id -u)" = 0 ] || fail "must run as root to install packages (try: sudo make ...)"
}

# The installed version of package $1, or nothing. dpkg-query exits 1 for a package it has
# never seen; that is an answer here, not an error.
installed_version() {
	dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null | awk '/install ok installed/ {print $4}' || true
}

APT_UPDATED=0
apt_update_once() {
	[ "$APT_UPDATED" = 0 ] || return 0
	log "apt-get update"
	if ! apt-get update -qq >>"$LOGDIR/apt.log" 2>&1; then
		tail -n 15 "$LOGDIR/apt.log" >&2
		fail "apt-get update failed (log: $LOGDIR/apt.log): check the network and $ETC/apt/sources.list*"
	fi
	APT_UPDATED=1
}

# apt-get install "$@", with its output in the log and its last lines shown if it fails.
apt_install() {
	apt_update_once
	log "installing $*"
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
		>>"$LOGDIR/apt.log" 2>&1; then
		tail -n 15 "$LOGDIR/apt.log" >&2
		fail "apt-get install $* failed (log: $LOGDIR/apt.log)"
	fi
}

apt_sources() {
	local f=$ETC/apt/sources.list.d/bookworm-backports.sources
	if ! grep -rqs 'bookworm-backports' "$ETC/apt/sources.list" "$ETC/apt/sources.list.d/"; then
		log "adding bookworm-backports to $f"
		mkdir -p "$(dirname "$f")"
		cat >"$f" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
		APT_UPDATED=0
	fi
	if ! dpkg --print-foreign-architectures | grep -qx arm64; then
		log "enabling the arm64 architecture for the guest's busybox and perf"
		dpkg --add-architecture arm64 || fail "dpkg --add-architecture arm64 failed"
		APT_UPDATED=0
	fi
}

apt_packages() {
	local base=(clang lld llvm libclang-dev flex bison bc libelf-dev libssl-dev cpio kmod
		busybox-static zstd xz-utils python3 rsync file procps)
	local missing=() p
	for p in "${base[@]}"; do
		[ -n "$(installed_version "$p")" ] || missing+=("$p")
	done
	if [ "$PROFILE" = test ]; then
		# clang 19 for the kernels built as distributions build them; OpenCSD's headers for
		# the perf that tools/perf.sh builds with the series' cs-etm patch.
		for p in clang-19 lld-19 llvm-19 libclang-19-dev libopencsd-dev; do
			[ -n "$(installed_version "$p")" ] || missing+=("$p")
		done
	fi
	[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"

	# The pinned source if the archive still has it (the security archive keeps a few
	# versions only), else the archive's current one: the kernel cache is keyed on the
	# version, and tools/kernel.sh says so clearly if a patch no longer applies.
	local have
	have=$(installed_version linux-source-6.12)
	if [ "$have" != "$KERNEL_SOURCE_VERSION" ]; then
		apt_update_once
		if apt-cache show "linux-source-6.12=$KERNEL_SOURCE_VERSION" >/dev/null 2>&1; then
			apt_install "linux-source-6.12=$KERNEL_SOURCE_VERSION"
		elif [ -n "$have" ]; then
			log "linux-source-6.12 $KERNEL_SOURCE_VERSION is gone from the archive; keeping the installed $have"
		else
			log "linux-source-6.12 $KERNEL_SOURCE_VERSION is gone from the archive; installing the archive's current one"
			apt_install linux-source-6.12
		fi
	fi

	# QEMU 10 and perf 6.12 come from backports: bookworm's QEMU 7.2 conflicts with the image's
	# qemu-utils 10, and bookworm's perf 6.1 does not match the 6.12 guest kernel.
	local bpo=()
	case "$(installed_version qemu-system-x86)" in *bpo12*) ;; *) bpo+=(qemu-system-x86) ;; esac
	case "$(installed_version qemu-system-arm)" in *bpo12*) ;; *) bpo+=(qemu-system-arm) ;; esac
	case "$(installed_version linux-perf)" in 6.12*) ;; *) bpo+=(linux-perf) ;; esac
	[ ${#bpo[@]} -eq 0 ] || apt_install -t bookworm-backports "${bpo[@]}"
}

# The arm64 guest needs an arm64 busybox; it is only unpacked into the initramfs, never
# installed, so download the .deb into the cache.
arm64_busybox() {
	local dir=$CACHE/debs
	if ! ls "$dir"/busybox-static_*_arm64.deb >/dev/null 2>&1; then
		apt_update_once
		mkdir -p "$dir"
		log "downloading busybox-static:arm64"
		# apt downloads as the unprivileged _apt user, which cannot write into a cache
		# under /root: fetch into a directory it owns, then move the file.
		local tmp
		tmp=$(mktemp -d)
		chown _apt "$tmp" 2>/dev/null || true
		if ! (cd "$tmp" && apt-get download -qq busybox-static:arm64) >>"$LOGDIR/apt.log" 2>&1; then
			rm -rf "$tmp"
			fail "apt-get download busybox-static:arm64 failed (log: $LOGDIR/apt.log)"
		fi
		mv "$tmp"/busybox-static_*_arm64.deb "$dir"/
		rm -rf "$tmp"
	fi
}

# cargo install "$@" quietly, with the build's last lines shown if it fails.
cargo_install() {
	log "cargo install $*"
	if ! cargo install --locked --quiet "$@" >>"$LOGDIR/cargo-install.log" 2>&1; then
		tail -n 15 "$LOGDIR/cargo-install.log" >&2
		fail "cargo install $* failed (log: $LOGDIR/cargo-install.log)"
	fi
}

rust_tools() {
	export PATH="$HOME/.cargo/bin:$PATH"
	command -v rustup >/dev/null ||
		fail "rustup is required (the machine's Rust toolchain): install it from https://rustup.rs"
	command -v cargo >/dev/null || fail "cargo is required: install it with rustup"
	local comps targets c t
	comps=$(rustup component list --installed) || fail "rustup component list failed"
	for c in rust-src rustfmt clippy; do
		grep -q "^$c" <<<"$comps" && continue
		log "rustup component add $c"
		rustup component add "$c" >/dev/null || fail "rustup component add $c failed"
	done
	targets=$(rustup target list --installed) || fail "rustup target list failed"
	for t in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
		grep -qx "$t" <<<"$targets" && continue
		log "rustup target add $t"
		rustup target add "$t" >/dev/null || fail "rustup target add $t failed"
	done
	# The kernel build runs bindgen; a missing one fails deep inside Kbuild otherwise.
	if ! bindgen --version 2>/dev/null | grep -q "$BINDGEN_VERSION"; then
		cargo_install --version "$BINDGEN_VERSION" bindgen-cli
		bindgen --version 2>/dev/null | grep -q "$BINDGEN_VERSION" ||
			fail "bindgen $BINDGEN_VERSION is still not on PATH after cargo install ($HOME/.cargo/bin)"
	fi
	if [ "$PROFILE" = test ] &&
		[ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
		cargo_install --force --version "$CARGO_FUZZ_VERSION" cargo-fuzz
	fi
}

main() {
	need_root
	mkdir -p "$LOGDIR" || fail "cannot create $LOGDIR (TEXTPOKE_CACHE=$CACHE)"
	apt_sources
	apt_packages
	arm64_busybox
	rust_tools
	log "all dependencies present ($PROFILE)"
}

main
