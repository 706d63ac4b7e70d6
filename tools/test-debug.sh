#!/usr/bin/env bash
# The debug-kernel tests, as `make test-debug` runs them:
#
#   tools/test-debug.sh [x86_64|arm64]        (both arches by default)
#
# On the `kasan` kernel (tools/kconfig/kasan.config: KASAN, lockdep, DEBUG_ATOMIC_SLEEP, full
# preemption with DEBUG_PREEMPT, DEBUG_LIST, DEBUG_OBJECTS), booted with panic_on_warn=1, per
# arch at -smp 4:
#  - the guest test suite (textpoke.mode=test): the scenarios, perf, bad input, unloading;
#  - the unload stress (textpoke.mode=stress): 100 cycles of loading textpoke and the
#    exerciser and trying to unload both while batches and executors are live.
# Any KASAN, lockdep or other kernel report is a splat that fails its boot.
#
# Like tools/test.sh, this script only builds: the runner plans the boots
# (`textpoke-runner plan test-debug`), runs them two at a time and summarises; the last line is
# the summary's `N passed, M failed`. Exits non-zero if anything failed; logs stay under the
# printed directory.
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cache=${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}
# This checkout's build products (see tools/test.sh).
build=$cache/build/$(printf %s "$top" | sha256sum | cut -c1-12)
export TEXTPOKE_CACHE=$cache PATH="$HOME/.cargo/bin:$PATH"
arches=${*:-x86_64 arm64}
out=$cache/runs/$(date +%Y%m%d-%H%M%S)-debug
mkdir -p "$out"
start=$(date +%s)
step() { printf '\n== [+%ss] %s\n' $(($(date +%s) - start)) "$*"; }
cd "$top"

step "host: the runner"
if ! CARGO_TARGET_DIR=$build/cargo-host cargo build --quiet --release -p textpoke-runner; then
	echo "tools/test-debug.sh: building textpoke-runner failed: nothing can be judged" >&2
	exit 1
fi
runner=$build/cargo-host/release/textpoke-runner
arch_args=()
for arch in $arches; do arch_args+=(--arch "$arch"); done
if ! mapfile -t needed < <("$runner" plan test-debug "${arch_args[@]}" --out "$out") || [ ${#needed[@]} -eq 0 ]; then
	echo "tools/test-debug.sh: textpoke-runner plan test-debug failed" >&2
	exit 1
fi

artifacts=()
for guest in "${needed[@]}"; do
	read -r arch variant <<<"$guest"
	step "guests: building $arch ($variant)"
	if built=$(tools/guests.sh "$arch" "$variant"); then
		mapfile -t paths <<<"$built"
		artifacts+=(--artifact "$arch:$variant:${paths[0]}:${paths[1]}")
	else
		echo "building the $arch $variant guest failed: its boots will be reported as never run" >&2
	fi
done

step "guests: the planned boots, two at a time (logs: $out)"
"$runner" suite --out "$out" "${artifacts[@]}"

step "summary"
exec "$runner" summary "$out"
