#!/usr/bin/env bash
# Installs everything textpoke's build and tests need on a Debian bookworm host (run as root).
#
# Idempotent: each step first checks whether its result is already present, so the make targets
# can call this unconditionally and a warm machine pays only for the checks.
set -euo pipefail

log() { printf '[deps] %s\n' "$*"; }

# Debian's 6.12 source as shipped by bookworm-security; the version is part of the kernel cache
# key, so a different version rebuilds instead of silently mixing objects.
KERNEL_SOURCE_VERSION=${KERNEL_SOURCE_VERSION:-6.12.117-1~deb12u1}
BINDGEN_VERSION=0.72.1

need_root() {
	if [ "$(id -u)" != 0 ]; then
		echo "tools/install-deps.sh: must run as root to install packages" >&2
		exit 1
	fi
}

apt_sources() {
	local f=/etc/apt/sources.list.d/bookworm-backports.sources
	if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
		log "adding bookworm-backports to $f"
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
		log "enabling the arm64 architecture for the guest's busybox"
		dpkg --add-architecture arm64
		APT_UPDATED=0
	fi
}

APT_UPDATED=${APT_UPDATED:-0}
apt_update_once() {
	if [ "$APT_UPDATED" = 0 ]; then
		log "apt-get update"
		apt-get update -qq
		APT_UPDATED=1
	fi
}

installed_version() { dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null | awk '/install ok installed/ {print $4}'; }

apt_packages() {
	local base=(clang lld llvm libclang-dev flex bison bc libelf-dev libssl-dev cpio kmod
		busybox-static zstd xz-utils python3 rsync file)
	local missing=()
	local p
	for p in "${base[@]}"; do
		[ -n "$(installed_version "$p")" ] || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		apt_update_once
		log "installing ${missing[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	fi
	local have
	have=$(installed_version linux-source-6.12)
	if [ "$have" != "$KERNEL_SOURCE_VERSION" ]; then
		apt_update_once
		log "installing linux-source-6.12=$KERNEL_SOURCE_VERSION"
		if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			"linux-source-6.12=$KERNEL_SOURCE_VERSION" >/dev/null; then
			# The security archive keeps a few versions only. Another one is worth a try: the
			# kernel cache is keyed on the version, and tools/kernel.sh says so clearly if a
			# patch of the series no longer applies.
			log "linux-source-6.12 $KERNEL_SOURCE_VERSION is not available; using ${have:-the current one}"
			[ -n "$have" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
				--no-install-recommends linux-source-6.12 >/dev/null
		fi
	fi

	# QEMU 10 and perf 6.12 come from backports: bookworm's QEMU 7.2 conflicts with the image's
	# qemu-utils 10, and bookworm's perf 6.1 predates nothing we need but does not match the
	# 6.12 guest kernel.
	local bpo=()
	case "$(installed_version qemu-system-x86)" in *bpo12*) ;; *) bpo+=(qemu-system-x86) ;; esac
	case "$(installed_version qemu-system-arm)" in *bpo12*) ;; *) bpo+=(qemu-system-arm) ;; esac
	case "$(installed_version linux-perf)" in 6.12*) ;; *) bpo+=(linux-perf) ;; esac
	if [ ${#bpo[@]} -gt 0 ]; then
		apt_update_once
		log "installing ${bpo[*]} from bookworm-backports"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			-t bookworm-backports "${bpo[@]}" >/dev/null
	fi
}

# The arm64 guest needs an arm64 busybox; it is only unpacked into the initramfs, never
# installed, so download the .deb into the cache.
arm64_busybox() {
	local dir="$1/debs"
	if ! ls "$dir"/busybox-static_*_arm64.deb >/dev/null 2>&1; then
		apt_update_once
		mkdir -p "$dir"
		log "downloading busybox-static:arm64"
		# apt downloads as the unprivileged _apt user, which cannot write into a cache
		# under /root: fetch into a directory it owns, then move the file.
		local tmp
		tmp=$(mktemp -d)
		chown _apt "$tmp" 2>/dev/null || true
		(cd "$tmp" && apt-get download -qq busybox-static:arm64)
		mv "$tmp"/busybox-static_*_arm64.deb "$dir"/
		rm -rf "$tmp"
	fi
}

rust_tools() {
	export PATH="$HOME/.cargo/bin:$PATH"
	if ! command -v rustup >/dev/null; then
		echo "tools/install-deps.sh: rustup is required (the machine's Rust toolchain)" >&2
		exit 1
	fi
	local comps
	comps=$(rustup component list --installed)
	for c in rust-src rustfmt clippy; do
		grep -q "^$c" <<<"$comps" || { log "rustup component add $c"; rustup component add "$c" >/dev/null; }
	done
	local targets
	targets=$(rustup target list --installed)
	for t in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
		grep -qx "$t" <<<"$targets" || { log "rustup target add $t"; rustup target add "$t" >/dev/null; }
	done
	if ! bindgen --version 2>/dev/null | grep -q "$BINDGEN_VERSION"; then
		log "cargo install bindgen-cli $BINDGEN_VERSION"
		cargo install --locked --quiet --version "$BINDGEN_VERSION" bindgen-cli
	fi
}

main() {
	local cache="${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}"
	need_root
	apt_sources
	apt_packages
	arm64_busybox "$cache"
	rust_tools
	log "all dependencies present"
}

main "$@"
