#!/usr/bin/env bash
# Copies Debian's real programs the guests run, with the dynamic loader and every shared library
# they load, into a guest root directory (used by tools/initramfs.sh):
#
#   tools/debian-bundle.sh <x86_64|arm64> <root-dir>
#
# - perf, as /usr/bin/perf, on both arches;
# - on x86_64, the programs of GNU and Debian that the kernel's livepatch selftests call and
#   busybox lacks or implements without the options they use (KSELFTEST_PROGRAMS below), in
#   /usr/lib/kselftest/bin, which the agent puts first in the selftests' PATH and nobody else's.
#   Only the x86 guests have livepatch (arm64 has none in 6.12);
# - on both arches, util-linux's chrt there too, which ftracetest's wakeup tracer cases run.
#
# Why Debian's binaries and not a perf built from the guest kernel's tools/perf: they are the
# programs people actually run, and building perf needs a pile of -dev packages per arch.
#
# x86_64 takes the host's own programs (linux-perf 6.12 from bookworm-backports, installed by
# tools/install-deps.sh). arm64 downloads linux-perf:arm64 of the same version plus the arm64
# packages that provide its libraries into $TEXTPOKE_CACHE/debs/arm64-perf/, unpacks them (never
# installs them) into a cached sysroot, and copies from there.
#
# Libraries are found the way the guest's ld.so will look for them, by walking DT_NEEDED
# recursively with readelf rather than trusting ldd (which runs the host's loader, cannot work
# for a foreign arch, and has an output format of its own). The guest has no /etc/ld.so.cache,
# so every library must sit in one of glibc's built-in directories: Debian's ld.so searches
# /lib/<triplet>, /usr/lib/<triplet>, /lib and /usr/lib. Each library is copied to its
# canonical path (directory symlinks such as merged-/usr's /lib -> usr/lib resolved, since /lib
# is a real directory in the guest), with a symlink named after the soname next to it, and the
# program interpreter named in PT_INTERP (/lib64/ld-linux-x86-64.so.2,
# /lib/ld-linux-aarch64.so.1) is a symlink to the canonical loader.
#
# Prints progress to stderr; prints nothing on stdout.
set -euo pipefail

usage() {
	echo "usage: tools/debian-bundle.sh <x86_64|arm64> <root-dir>" >&2
	exit 2
}
[ $# -eq 2 ] || usage
arch=$1
dest=$2
cache=${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}

log() { printf '[debian-bundle %s] %s\n' "$arch" "$*" >&2; }
die() {
	printf 'tools/debian-bundle.sh: %s\n' "$*" >&2
	exit 1
}

# The perf the guests run must understand the 6.12 kernel's records (PERF_RECORD_TEXT_POKE,
# --kcore): the version Debian ships for it.
PERF_SERIES=6.12

case "$arch" in
x86_64) triplet=x86_64-linux-gnu ;;
arm64) triplet=aarch64-linux-gnu ;;
*) usage ;;
esac

# GNU readelf reads every ELF target; llvm-readelf (always installed with the kernel's LLVM
# toolchain) prints the same lines for what is parsed here.
READELF=$(command -v readelf || command -v llvm-readelf) || die "neither readelf nor llvm-readelf found"

# Where the files come from: "" for the host's own root, or an unpacked arm64 sysroot.
sysroot=

elf_needed() { "$READELF" -dW "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'; }
elf_runpath() { "$READELF" -dW "$1" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]$/\2/p'; }
elf_interp() { "$READELF" -lW "$1" | sed -n 's/.*\[Requesting program interpreter: \(.*\)\]$/\1/p'; }
is_elf() { [ "$(head -c 4 "$1" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; }

# Canonical guest path of guest path $1: symlinks resolved inside $sysroot. Relative symlinks
# resolve inside it; an absolute one (none in the packages used) would escape to the host,
# which is caught here rather than silently copying host files into an arm64 guest.
canon() {
	local p
	p=$(realpath -e "$sysroot$1") || return 1
	case "$p" in
	"$sysroot"/*) printf '%s\n' "${p#"$sysroot"}" ;;
	*) die "$1 resolves outside the sysroot $sysroot: $p" ;;
	esac
}

# Finds library $1 as ld.so would for an object in directory $2 with RUNPATH/RPATH $3, and
# prints the guest path of the directory it is in. The glibc-hwcaps and legacy hwcap
# subdirectories are not searched: Debian ships none of perf's libraries there.
find_lib() {
	local so=$1 origin=$2 runpath=$3 d
	local dirs=()
	if [ -n "$runpath" ]; then
		IFS=: read -r -a dirs <<<"${runpath//\$ORIGIN/$origin}"
	fi
	dirs+=("/lib/$triplet" "/usr/lib/$triplet" /lib /usr/lib)
	for d in "${dirs[@]}"; do
		if [ -e "$sysroot$d/$so" ]; then
			printf '%s\n' "$d"
			return 0
		fi
	done
	return 1
}

# Copies canonical guest file $1 into $dest (once).
install_file() {
	[ -e "$dest$1" ] && return 0
	mkdir -p "$dest$(dirname "$1")"
	cp -p "$sysroot$1" "$dest$1"
}

# Makes guest path $1 a symlink to canonical guest file $2 (relative when in the same
# directory, as ld.so's own soname links are).
install_link() {
	local link=$1 target=$2
	[ "$link" = "$target" ] && return 0
	[ -L "$dest$link" ] || [ -e "$dest$link" ] && return 0
	mkdir -p "$dest$(dirname "$link")"
	if [ "$(dirname "$link")" = "$(dirname "$target")" ]; then
		ln -s "$(basename "$target")" "$dest$link"
	else
		ln -s "$target" "$dest$link"
	fi
}

# Walks the DT_NEEDED closure of guest file $1 (already canonical) and copies everything, the
# program itself to guest path $2.
# Sets the global array `missing` to "soname (needed by file)" for what could not be found,
# so the arm64 path can fetch more packages and walk again; copies nothing in that case.
declare -a missing
closure() {
	local -A seen=()
	local -a queue=("$1") plan=()
	local f so dir c rp interp
	missing=()
	seen[$1]=1
	interp=$(elf_interp "$sysroot$1")
	[ -n "$interp" ] || die "$1 has no PT_INTERP: not a dynamically linked program?"
	if c=$(canon "$interp"); then
		plan+=("link $interp $c" "file $c")
		seen[$c]=1
	else
		missing+=("$(basename "$interp") (interpreter of $1)")
	fi
	while [ ${#queue[@]} -gt 0 ]; do
		f=${queue[0]}
		queue=("${queue[@]:1}")
		rp=$(elf_runpath "$sysroot$f")
		for so in $(elf_needed "$sysroot$f"); do
			if ! dir=$(find_lib "$so" "$(dirname "$f")" "$rp"); then
				missing+=("$so (needed by $f)")
				continue
			fi
			c=$(canon "$dir/$so")
			# The soname link lives in the canonical form of the directory it was found
			# in, which is still one of ld.so's search directories (/lib/<triplet> ->
			# /usr/lib/<triplet> on a merged-/usr host).
			plan+=("link $(canon "$dir")/$so $c")
			if [ -z "${seen[$c]:-}" ]; then
				seen[$c]=1
				plan+=("file $c")
				queue+=("$c")
			fi
		done
	done
	[ ${#missing[@]} -eq 0 ] || return 0
	local kind a b
	for c in "${plan[@]}"; do
		read -r kind a b <<<"$c"
		case "$kind" in
		file) install_file "$a" ;;
		link) install_link "$a" "$b" ;;
		esac
	done
	mkdir -p "$dest$(dirname "$2")"
	cp -p "$sysroot$1" "$dest$2"
	log "$2 ($1) with $((${#seen[@]} - 1)) shared objects"
}

# Picks the real perf binary under $sysroot. Debian's unversioned linux-perf package
# (bookworm's 6.1, and the 6.12 backport used here) ships the ELF program itself as
# /usr/bin/perf; it only keeps a dpkg-divert of /usr/bin/perf to /usr/bin/perf.wrapper so that
# an old linux-base cannot put its wrapper back (linux-base 4.9 removed the wrappers, "as
# linux-perf now provides an unversioned perf command"). Before that, versioned packages
# (linux-perf-5.10 in bullseye) shipped /usr/bin/perf_X.Y behind linux-base's shell wrapper,
# which exec'd perf_<major.minor of the running kernel>; Ubuntu's linux-tools keep it in
# /usr/lib/linux-tools[-/]<release>/perf. The guest runs 6.12, so that is the version wanted
# when there is a wrapper.
find_perf() {
	local c
	for c in "$sysroot/usr/bin/perf" "$sysroot/usr/bin/perf_$PERF_SERIES" \
		"$sysroot"/usr/lib/linux-tools-"$PERF_SERIES"*/perf "$sysroot"/usr/lib/linux-tools/"$PERF_SERIES"*/perf; do
		if [ -f "$c" ] && is_elf "$c"; then
			canon "${c#"$sysroot"}"
			return 0
		fi
	done
	return 1
}

# --- x86_64: the host's programs --------------------------------------------------------------

# What the livepatch selftests (tools/testing/selftests/livepatch/functions.sh and test-*.sh)
# need beyond busybox: bash (arrays, [[ ]], process substitution), GNU date (--rfc-3339=ns, the
# canary that finds a test's kernel messages), procps' sysctl (--values), getconf
# (_NPROCESSORS_ONLN), GNU stat (--format; called as /bin/stat, which is linked here), kmod's
# modinfo and insmod (one program, copied once, which acts as the name it is run by; the
# expected kernel messages of the cases whose load must fail quote kmod insmod's error line) and
# GNU diff (--label, for the difference a failing case prints).
# chrt (util-linux) is ftracetest's, for its wakeup tracer cases: both arches.
KSELFTEST_PROGRAMS=(bash date sysctl getconf stat modinfo insmod diff chrt)
KSELFTEST_BIN=/usr/lib/kselftest/bin

bundle_host() {
	[ "$(dpkg --print-architecture)" = amd64 ] || die "the x86_64 perf is the host's own: this host is not amd64"
	local perf ver
	ver=$(dpkg-query -W -f='${Version}' linux-perf 2>/dev/null) || ver=
	case "$ver" in
	"$PERF_SERIES".*) ;;
	*) die "linux-perf $PERF_SERIES is not installed (have '${ver:-none}'): run tools/install-deps.sh" ;;
	esac
	perf=$(find_perf) || die "no perf ELF binary found behind /usr/bin/perf"
	# perf itself goes to /usr/bin/perf whatever Debian calls it.
	closure "$perf" /usr/bin/perf
	[ ${#missing[@]} -eq 0 ] || die "libraries not found on the host: ${missing[*]}"
	local p path c
	# The name each program file was first copied as: one program under several names (kmod's
	# modinfo and insmod) is copied once, its other names symlinks to it.
	local -A copied=()
	for p in "${KSELFTEST_PROGRAMS[@]}"; do
		path=$(command -v "$p") || die "$p is not installed: run tools/install-deps.sh"
		c=$(canon "$path")
		if [ -n "${copied[$c]:-}" ]; then
			ln -s "${copied[$c]}" "$dest$KSELFTEST_BIN/$p"
			log "$KSELFTEST_BIN/$p -> ${copied[$c]} ($c)"
			continue
		fi
		closure "$c" "$KSELFTEST_BIN/$p"
		[ ${#missing[@]} -eq 0 ] || die "libraries not found on the host: ${missing[*]}"
		copied[$c]=$p
	done
	# functions.sh calls /bin/stat by its path. busybox's stat, which it replaces, takes the
	# same -c formats, the only ones anything else in the guests uses.
	mkdir -p "$dest/bin"
	ln -s "$KSELFTEST_BIN/stat" "$dest/bin/stat"
}

# --- arm64: Debian's arm64 packages, unpacked -----------------------------------------------

debs=$cache/debs/arm64-perf

# apt downloads as the unprivileged _apt user, which cannot write into a cache under /root:
# fetch into a directory it owns, then move the files (as tools/install-deps.sh does). Callers
# check for the .deb they need, so a failed download is reported there.
apt_download() {
	local tmp
	tmp=$(mktemp -d)
	chown _apt "$tmp" 2>/dev/null || true
	(cd "$tmp" && apt-get download -qq "$@") || true
	find "$tmp" -maxdepth 1 -name '*.deb' -exec mv -t "$debs" {} +
	rm -rf "$tmp"
}

# The cached .deb of arm64 package $1, if any.
cached_deb() { find "$debs" -maxdepth 1 -name "${1}_*_arm64.deb" | sort | tail -n 1; }

# Unpacks packages $@ (names, no arch) into the sysroot, downloading those not cached in one
# apt-get call (each call loads apt's whole cache, about a second). Version: apt's candidate;
# whatever is cached stays until the cache is cleared (delete $debs to refresh). linux-perf
# itself is pinned separately, in bundle_arm64.
fetch() {
	local name deb
	local -a get=()
	for name in "$@"; do
		[ -n "$(cached_deb "$name")" ] || get+=("$name:arm64")
	done
	if [ ${#get[@]} -gt 0 ]; then
		log "downloading ${get[*]}"
		apt_download "${get[@]}"
	fi
	for name in "$@"; do
		deb=$(cached_deb "$name")
		[ -n "$deb" ] || die "apt-get download $name:arm64 failed (apt-get update needed?)"
		unpack "$name" "$deb"
	done
}

# Unpacks $2 into the sysroot and records the file list and version of package $1.
unpack() {
	dpkg-deb -x "$2" "$sysroot"
	mkdir -p "$sysroot/.pkgs"
	dpkg-deb -f "$2" Version >"$sysroot/.pkgs/$1.version"
	dpkg-deb -c "$2" | awk '{ sub(/^\./, "", $6); print $6 }' >"$sysroot/.pkgs/$1.list"
}

# The arm64 package owning sysroot file $1, from the recorded file lists.
owner() {
	local l
	l=$(grep -lxF -- "$1" "$sysroot"/.pkgs/*.list | head -n 1) || return 1
	basename "$l" .list
}

# Prints the arm64 packages that provide the libraries in the global `missing` list.
#
# First the host's dpkg database: its amd64 library of the same soname comes from the package
# of the same name (Debian names library packages after the soname, not the arch), and
# tools/install-deps.sh installed the amd64 perf with all of them. An arch-specific soname
# such as libunwind-aarch64.so.8 has no amd64 twin; for those, fall back to every Depends of
# the package that needs it, which must list the provider (a few extra .debs fetched, none of
# them copied into the guest unless something needs their files).
providers() {
	local ht m so needer p
	local -A needers=() found=()
	ht=$(uname -m)-linux-gnu
	local -a paths=()
	for m in "${missing[@]}"; do
		so=${m%% *}
		needer=${m##* }
		needers[$so]=${needer%)}
		paths+=("/lib/$ht/$so" "/usr/lib/$ht/$so")
	done
	# One query for all (it reads the whole database); unknown paths only make it exit 1.
	while read -r p so; do
		p=${p%%:*}
		found[$(basename "$so")]=1
		printf '%s\n' "$p"
	done < <(dpkg-query -S "${paths[@]}" 2>/dev/null | sed -n 's/^\([^ ,]*\): \(.*\)$/\1 \2/p')
	for so in "${!needers[@]}"; do
		[ -z "${found[$so]:-}" ] || continue
		p=$(owner "${needers[$so]}") || continue
		# The unpacked version's Depends, not the candidate's (linux-perf's candidate is
		# bookworm's 6.1, whose Depends differ).
		apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
			--no-replaces --no-enhances "$p:arm64=$(cat "$sysroot/.pkgs/$p.version")" 2>/dev/null |
			sed -n 's/^ *|\?\(Pre\)\?Depends: \([^<][^ ]*\)$/\2/p' | grep -v ':any$' | sed 's/:arm64$//'
	done
}

bundle_arm64() {
	command -v apt-get >/dev/null || die "apt-get is needed to fetch the arm64 packages"
	local ver deb
	mkdir -p "$debs"
	# The host's perf version, so both guests run the same perf; else the newest in
	# bookworm-backports (bookworm's own linux-perf is 6.1).
	ver=$(dpkg-query -W -f='${Version}' linux-perf 2>/dev/null) || ver=
	case "$ver" in "$PERF_SERIES".*) ;; *) ver= ;; esac
	deb=$(find "$debs" -maxdepth 1 -name "linux-perf_${ver:-$PERF_SERIES.}*_arm64.deb" | sort | tail -n 1)
	if [ -z "$deb" ]; then
		log "downloading linux-perf:arm64 ${ver:-from bookworm-backports}"
		if [ -n "$ver" ]; then apt_download "linux-perf:arm64=$ver"; else apt_download linux-perf:arm64/bookworm-backports; fi
		deb=$(find "$debs" -maxdepth 1 -name "linux-perf_${ver:-$PERF_SERIES.}*_arm64.deb" | sort | tail -n 1)
		[ -n "$deb" ] || die "could not download linux-perf:arm64 ${ver:-from bookworm-backports} (apt-get update needed?)"
	fi
	# One sysroot per perf version, so a new perf never sees a stale library set.
	sysroot=$cache/initramfs/arm64/perf-sysroot/$(basename "$deb" .deb)
	mkdir -p "$sysroot"
	[ -e "$sysroot/.pkgs/linux-perf.list" ] || unpack linux-perf "$deb"
	# Every glibc program needs libc6 (the loader is in it, and PT_INTERP is not a soname the
	# host can map).
	[ -e "$sysroot/.pkgs/libc6.list" ] || fetch libc6
	local perf round p
	local -a new
	perf=$(find_perf) || die "no perf ELF binary in $deb"
	# Each round walks the closure as far as the unpacked packages reach, then fetches the
	# packages of the libraries it could not find.
	for round in $(seq 1 20); do
		closure "$perf" /usr/bin/perf
		[ ${#missing[@]} -gt 0 ] || break
		new=()
		for p in $(providers | sort -u); do
			[ -e "$sysroot/.pkgs/$p.list" ] || new+=("$p")
		done
		[ ${#new[@]} -gt 0 ] || die "no arm64 package found for: ${missing[*]} (round $round)"
		fetch "${new[@]}"
	done
	[ ${#missing[@]} -eq 0 ] || die "the arm64 library closure did not settle: ${missing[*]}"
	# ftracetest's chrt: util-linux's, which needs only libc.
	[ -e "$sysroot/.pkgs/util-linux.list" ] || fetch util-linux
	closure "$(canon /usr/bin/chrt)" "$KSELFTEST_BIN/chrt"
	[ ${#missing[@]} -eq 0 ] || die "chrt's libraries are not in the arm64 sysroot: ${missing[*]}"
}

# Walking the closure forks a few hundred readelf/realpath processes (about 2 s), so the
# finished bundle is kept and copied while its inputs are unchanged: this script, and the
# host's perf and package database (x86_64) or the unpacked arm64 package set (arm64).
bundle_key() {
	sha256sum "$0" | cut -d' ' -f1
	case "$arch" in
	x86_64) stat -L -c '%n %s %Y' /usr/bin/perf /var/lib/dpkg/status ;;
	arm64)
		# Both are absent before the first run.
		find "$debs" -maxdepth 1 -name 'linux-perf_*_arm64.deb' 2>/dev/null | sort || true
		find "$cache/initramfs/arm64/perf-sysroot" -path '*/.pkgs/*.list' 2>/dev/null | sort || true
		;;
	esac
}

mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
out=$dest
bundle=$cache/initramfs/$arch/debian-bundle
key=$(bundle_key | sha256sum | cut -d' ' -f1)
if [ ! -f "$bundle.key" ] || [ "$(cat "$bundle.key")" != "$key" ]; then
	rm -rf "$bundle" "$bundle.key"
	mkdir -p "$bundle"
	dest=$bundle
	case "$arch" in
	x86_64) bundle_host ;;
	arm64) bundle_arm64 ;;
	esac
	# Recomputed: fetching packages changes the arm64 key.
	bundle_key | sha256sum | cut -d' ' -f1 >"$bundle.key"
else
	log "cached bundle: $(du -sh "$bundle" | cut -f1)"
fi
cp -a "$bundle/." "$out/"
