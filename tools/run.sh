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

top=$(cd "$(dirname "$0")/.." && pwd)
cache=${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}
# This checkout's build products: objects and cargo's fingerprints record source paths and mtimes,
# so two checkouts sharing them (a clean clone and a working tree) would take each other's for
# up to date.
build=$cache/build/$(printf %s "$top" | sha256sum | cut -c1-12)
export TEXTPOKE_CACHE=$cache PATH="$HOME/.cargo/bin:$PATH"
arches=${*:-x86_64 arm64}
out=$cache/runs/demo-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
cd "$top"

echo "== building the runner"
CARGO_TARGET_DIR=$build/cargo-host cargo build --quiet --release -p textpoke-runner
runner=$build/cargo-host/release/textpoke-runner

arch_args=()
for arch in $arches; do arch_args+=(--arch "$arch"); done
mapfile -t needed < <("$runner" plan run "${arch_args[@]}" --out "$out")
artifacts=()
for guest in "${needed[@]}"; do
	read -r arch variant <<<"$guest"
	echo "== building $arch (cached after the first run)"
	if built=$(tools/guests.sh "$arch" "$variant"); then
		mapfile -t paths <<<"$built"
		artifacts+=(--artifact "$arch:$variant:${paths[0]}:${paths[1]}")
	else
		echo "building the $arch guest failed: its demo boot will be reported as never run" >&2
	fi
done
echo "== booting (-smp 2; logs: $out)"
"$runner" suite --out "$out" "${artifacts[@]}" --verbose || true
echo
exec "$runner" summary "$out"
