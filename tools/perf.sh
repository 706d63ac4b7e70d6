#!/usr/bin/env bash
# Build perf with CoreSight (OpenCSD) decoding from a kernel source tree, for the etm
# crate's perf decode tests (tools/etm, TEXTPOKE_PERF).
#
# usage: tools/perf.sh SRC OUT [MAKE-ARGS...]
#   SRC  a kernel source tree (e.g. Debian's linux-source-6.12, with tools/patches applied)
#   OUT  the output directory; the binary is OUT/perf
#
# Only what cs_etm decoding needs is built: OpenCSD (libopencsd-dev), libelf for symbols
# and zlib. Everything else perf would detect on the host is switched off, so the binary
# does not depend on which optional libraries the host happens to have; in particular the
# BPF skeletons, which need clang and bpftool, and the scripting engines.
#
# Then: TEXTPOKE_PERF=OUT/perf cargo test -p textpoke-etm
set -euo pipefail

if [ $# -lt 2 ]; then
	echo "usage: $0 SRC OUT [MAKE-ARGS...]" >&2
	exit 2
fi
src=$(realpath "$1")
mkdir -p "$2"
out=$(realpath "$2")
shift 2

if [ ! -f "$src/tools/perf/Makefile.perf" ]; then
	echo "$src has no tools/perf/Makefile.perf" >&2
	exit 1
fi

opts=(
	CORESIGHT=1
	NO_LIBPYTHON=1 NO_LIBPERL=1 NO_LIBTRACEEVENT=1 NO_JEVENTS=1
	NO_LIBBPF=1 BUILD_BPF_SKEL=0
	NO_LIBUNWIND=1 NO_LIBDW_DWARF_UNWIND=1 NO_DWARF=1 NO_LIBDEBUGINFOD=1
	NO_SLANG=1 NO_GTK2=1 NO_LIBNUMA=1 NO_LIBAUDIT=1 NO_LIBCRYPTO=1 NO_LIBCAP=1
	NO_LIBBABELTRACE=1 NO_CAPSTONE=1 NO_LIBLLVM=1 NO_DEMANGLE=1 NO_LZMA=1
	NO_LIBZSTD=1 NO_LIBPFM4=1 NO_JVMTI=1 NO_SDT=1 NO_AIO=1
	NO_BACKTRACE=1
)

# Lowest priority: the build shares the machine with other work.
nice -n 19 make -C "$src/tools/perf" O="$out" -j"$(nproc)" "${opts[@]}" "$@"

if ! "$out/perf" version --build-options | grep -Eq '^ *libopencsd: \[ on +\]'; then
	echo "$out/perf was built without OpenCSD" >&2
	exit 1
fi
echo "built $out/perf"
