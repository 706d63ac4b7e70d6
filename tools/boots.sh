#!/usr/bin/env bash
# The make targets that are only guest boots, as the runner plans them:
#
#   tools/boots.sh test-debug [x86_64|arm64]    (`make test-debug`; both arches by default)
#   tools/boots.sh test-full [x86_64|arm64]     (`make test-full`)
#
# What each suite boots, and why, is the runner's plan (`Suite` and `plan` in
# tools/runner/src/plan/manifest.rs):
#  - test-debug: the guest test suite and the 100-cycle unload stress on the KASAN + lockdep
#    kernel, per arch at -smp 4, under panic_on_warn;
#  - test-full: the guest test suite at -smp 2 with all of the kernel's ftracetest directories
#    that change text, with and without textpoke (hours under TCG).
#
# Like tools/test.sh, this script only builds: the runner plans the boots
# (`textpoke-runner plan SUITE`), runs them two at a time and summarises; the last line is
# the summary's `N passed, M failed`. Exits non-zero if anything failed; logs stay under the
# printed directory.
set -uo pipefail

suite=${1:?usage: tools/boots.sh test-debug|test-full [ARCH...]}
shift
. "$(dirname "$0")/lib.sh"
start_run "$(date +%Y%m%d-%H%M%S)-${suite#test-}"
cd "$top"

step "host: the runner"
build_runner
plan "$suite" "$out"

# The boots start as soon as their guest is built, while the next one builds (as in
# tools/test.sh).
artifacts_file=$out/artifacts.list
: >"$artifacts_file"
announce() { printf '%s\n' "$1" >>"$artifacts_file"; }
step "guests: the planned boots, two at a time as their guests are built (logs: $out)"
"$runner" suite --out "$out" --artifacts-from "$artifacts_file" &
suite_pid=$!
# The guest builds run beside the boots, at a lower priority than theirs.
yield_to_boots 5

guest_step() { step "guests: building $1 ($2)"; }
build_guests guest_step announce
echo done >>"$artifacts_file"

step "guests: waiting for the boots to end"
# The suite's own status is the summary's to report (a failed boot is a failed report).
timed main "waiting for the boots" wait "$suite_pid" || true

step "summary"
exec "$runner" summary "$out"
