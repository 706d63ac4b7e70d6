#!/usr/bin/env bash
# The debug-kernel tests, as `make test-debug` runs them:
#
#   tools/test-debug.sh [x86_64|arm64]        (both arches by default)
#
# On the `kasan` kernel (tools/kconfig/kasan.config: KASAN, lockdep, DEBUG_ATOMIC_SLEEP, a
# preemptible build booted with the test kernel's model, preempt=none, DEBUG_PREEMPT,
# DEBUG_LIST, DEBUG_OBJECTS, fault injection and kmemleak), booted with panic_on_warn=1, per
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

. "$(dirname "$0")/lib.sh"
start_run "$(date +%Y%m%d-%H%M%S)-debug"
cd "$top"

step "host: the runner"
build_runner
plan test-debug "$out"

guest_step() { step "guests: building $1 ($2)"; }
build_guests guest_step

step "guests: the planned boots, two at a time (logs: $out)"
"$runner" suite --out "$out" "${artifacts[@]}"

step "summary"
exec "$runner" summary "$out"
