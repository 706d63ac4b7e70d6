#!/usr/bin/env bash
# The demo, as `make run` runs it: boots each arch once with the agent in `run` mode (one
# scenario: keys of static-key-like sites and ftrace-like call sites flipped by two pokers while
# every CPU executes them), then prints what happened and the checks' verdicts.
#
#   tools/run.sh [x86_64] [arm64]
#
# It builds only what the demo boots need (`textpoke-runner plan run`): no unpatched kernel,
# no host test suite.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
start_run "demo-$(date +%Y%m%d-%H%M%S)"
cd "$top"

echo "== building the runner"
build_runner
plan run "$out"
guest_step() { echo "== building $1 (cached after the first run)"; }
build_guests guest_step
echo "== booting (-smp 2; logs: $out)"
"$runner" suite --out "$out" "${artifacts[@]}" --verbose || true
echo
exec "$runner" summary "$out"
