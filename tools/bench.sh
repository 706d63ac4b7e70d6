#!/usr/bin/env bash
# The benchmarks, as `make bench` runs them (not part of `make test`):
#
#   tools/bench.sh [x86_64] [arm64]
#
# Boots each arch at -smp 4 with the agent in `bench` mode (tools/agent/src/bench.rs, driving
# samples/textpoke_bench.c), then prints a table per arch with textpoke's cost relative to the
# kernel's own mechanisms measured in the same boot, and writes the raw measurements as JSON to
# $TEXTPOKE_CACHE/bench/<arch>.json. The RCU stall timeout is raised because under TCG one
# arm64 batch of 4096 sites takes tens of seconds with upstream's mechanism as with ours.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cache=${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}
export TEXTPOKE_CACHE=$cache PATH="$HOME/.cargo/bin:$PATH"
arches=${*:-x86_64 arm64}
out=$cache/runs/bench-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out" "$cache/bench"
cd "$top"

CARGO_TARGET_DIR=$cache/cargo-host cargo build --quiet --release -p textpoke-runner
runner=$cache/cargo-host/release/textpoke-runner

for arch in $arches; do
	echo "== building $arch"
	mapfile -t built < <(tools/guests.sh "$arch")
	echo "== benchmarking $arch (-smp 4; several minutes under TCG)"
	"$runner" boot --quiet --name "$arch-bench" --arch "$arch" --kernel "${built[0]}" \
		--initrd "${built[1]}" --out "$out" --smp 4 --timeout 2400 \
		--append "textpoke.mode=bench rcupdate.rcu_cpu_stall_timeout=300" \
		--require-doc textpoke_bench
	sed -n 's/^\[ *[0-9.]*\] textpoke-bench: //p' "$out/$arch-bench.log" |
		python3 -c 'import json,sys; print(json.dumps([json.loads(l) for l in sys.stdin], indent=1))' \
			>"$cache/bench/$arch.json"
	python3 "$top/tools/bench_table.py" "$cache/bench/$arch.json"
	echo "(raw: $cache/bench/$arch.json, log: $out/$arch-bench.log)"
done
