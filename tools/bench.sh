#!/usr/bin/env bash
# The benchmarks, as `make bench` runs them (not part of `make test`):
#
#   tools/bench.sh [x86_64] [arm64]
#
# Builds what the runner plans (`textpoke-runner plan bench`: one boot per arch at -smp 4 with
# the agent in `bench` mode, tools/agent/src/bench/mod.rs driving samples/textpoke_bench.c) and hands
# it to the runner, which boots, then prints a table per arch with textpoke's cost relative to
# the kernel's own mechanisms measured in the same boot (median, interquartile range, ratio with
# a bootstrap interval: tools/runner/src/bench/report.rs) and writes the tables, the raw samples and a
# plot per arch to <run>/bench/bench-<arch>.{md,json,svg}, which this copies to
# $TEXTPOKE_CACHE/bench/. Under TCG the arm64 boot takes about 20 minutes.
set -euo pipefail

. "$(dirname "$0")/lib.sh"
start_run "bench-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$cache/bench"
cd "$top"

build_runner
plan bench "$out"
guest_step() { echo "== building $1"; }
build_guests guest_step
echo "== benchmarking (-smp 4; x86_64 a few minutes, arm64 about 20 under TCG)"
status=0
"$runner" suite --out "$out" "${artifacts[@]}" --jobs 1 --verbose || status=$?
if [ -d "$out/bench" ]; then
	cp "$out"/bench/bench-* "$cache/bench/"
	echo "(tables, samples and plots: $cache/bench/bench-<arch>.{md,json,svg}; logs: $out)"
fi
exit "$status"
