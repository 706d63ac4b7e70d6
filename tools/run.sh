#!/usr/bin/env bash
# The demo, as `make run` runs it: boots each arch once with the agent in `run` mode (one
# scenario: keys of static-key-like sites and ftrace-like call sites flipped by two pokers while
# every CPU executes them), then prints what happened and the checks' verdicts.
#
#   tools/run.sh [x86_64] [arm64]
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cache=${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}
export TEXTPOKE_CACHE=$cache PATH="$HOME/.cargo/bin:$PATH"
arches=${*:-x86_64 arm64}
out=$cache/runs/demo-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
cd "$top"

CARGO_TARGET_DIR=$cache/cargo-host cargo build --quiet --release -p textpoke-runner
runner=$cache/cargo-host/release/textpoke-runner

for arch in $arches; do
	echo "== building $arch (cached after the first run)"
	mapfile -t built < <(tools/guests.sh "$arch")
	echo "== booting $arch (-smp 2)"
	"$runner" boot --quiet --name "$arch-demo" --arch "$arch" --kernel "${built[0]}" \
		--initrd "${built[1]}" --out "$out" --smp 2 --append textpoke.mode=run \
		--require-doc textpoke_selftest textpoke_demo || true
	echo
	echo "-- $arch: what the demo did"
	sed -n 's/^\[ *[0-9.]*\] textpoke-agent: demo \(.*\)$/   \1/p' "$out/$arch-demo.log"
	echo
done
exec "$runner" summary "$out"
