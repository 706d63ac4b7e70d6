#!/usr/bin/env bash
# Every test, as `make test` runs it:
#
#   tools/test.sh [x86_64|arm64]        (both arches by default)
#
# 1. host: the workspace's tests (codecs, table, planner, model, record codec, runner, agent),
#    the loom model checking of the pending table, a short fuzz run of every target, rustfmt;
# 2. guests: for each arch, boots at -smp 2 and -smp 4 running the guest test suite
#    (tools/agent), two boots at a time (single-threaded TCG uses one host core each);
# 3. harness checks (with x86_64): boots that must fail in a given way: a module reporting
#    `not ok`, a guest that never powers off, a WARN_ON, a kernel without the patch series;
# 4. the runner's summary, whose last line is `N passed, M failed`.
#
# Exits non-zero if anything failed. Logs of every boot stay under the printed directory.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cache=${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}
export TEXTPOKE_CACHE=$cache PATH="$HOME/.cargo/bin:$PATH"
arches=${*:-x86_64 arm64}
out=$cache/runs/$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
start=$(date +%s)
step() { printf '\n== [+%ss] %s\n' $(($(date +%s) - start)) "$*"; }
cd "$top"

step "host: cargo test --workspace --release"
CARGO_TARGET_DIR=$cache/cargo-host cargo test --workspace --release 2>&1 | tee "$out/host-tests.log" |
	grep -E '^(test result|running|error|failures:|---- )' || true
if grep -qE '^test result: FAILED|^error' "$out/host-tests.log" || ! grep -q '^test result: ok' "$out/host-tests.log"; then
	echo "host tests failed: see $out/host-tests.log" >&2
	exit 1
fi
awk '/^test result:/ {p += $4; f += $6} END {printf "host tests: %d passed, %d failed\n", p, f}' "$out/host-tests.log"

step "host: loom model checking of the pending-instruction table"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=$cache/cargo-loom \
	cargo test --release -p textpoke-core --test pending_loom -- --nocapture --test-threads 1 2>&1 |
	tee "$out/loom.log" | grep -E '^(test |loom explored|test result)' || true
grep -q '^test result: ok' "$out/loom.log" || { echo "loom failed: see $out/loom.log" >&2; exit 1; }

step "host: fuzz smoke run (10 s per target)"
tools/fuzz/run.sh 10

step "host: clippy"
CARGO_TARGET_DIR=$cache/cargo-clippy cargo clippy --quiet --workspace --all-targets -- -D warnings

step "host: rustfmt"
cargo fmt --all --check
rustfmt --check --edition 2021 kernel/*.rs arch/*/*.rs rust/*.rs samples/*.rs samples/exerciser/*.rs

declare -A kdir
for arch in $arches; do
	step "kernel: $arch (patched)"
	kdir[$arch]=$(tools/kernel.sh "$arch" | tail -n 1)
done

step "lint: make CLIPPY=1 modules"
for arch in $arches; do
	lint=$cache/modules-clippy/$arch
	CLIPPY=1 TEXTPOKE_KDIR=${kdir[$arch]} TEXTPOKE_MODULES_OUT=$lint tools/modules.sh "$arch" \
		>/dev/null 2>"$out/clippy-$arch.log"
	if grep -iE 'warning|error' "$out/clippy-$arch.log"; then
		echo "clippy or compiler warnings for $arch: see $out/clippy-$arch.log" >&2
		# Kbuild does not repeat the diagnostics of objects it does not rebuild: start the
		# next lint from scratch so that it reports these again.
		rm -rf "$lint"
		exit 1
	fi
	echo "$arch: no warnings"
done

step "host: runner"
CARGO_TARGET_DIR=$cache/cargo-host cargo build --quiet --release -p textpoke-runner
runner=$cache/cargo-host/release/textpoke-runner

declare -A kernel initrd
for arch in $arches; do
	step "guests: building $arch"
	mapfile -t built < <(tools/guests.sh "$arch")
	kernel[$arch]=${built[0]} initrd[$arch]=${built[1]}
done
harness=
if [[ " $arches " == *" x86_64 "* ]]; then
	step "guests: building x86_64 without the patch series (harness check)"
	mapfile -t built < <(tools/guests.sh x86_64 unpatched)
	kernel[unpatched]=${built[0]} initrd[unpatched]=${built[1]}
	harness=1
fi

# name|arch|kernel-key|expected log text|runner arguments (split on spaces)
boots=()
for arch in $arches; do
	boots+=("$arch-smp2|$arch|$arch||--smp 2 --require-doc textpoke_selftest textpoke_agent")
	boots+=("$arch-smp4|$arch|$arch||--smp 4 --mem 2048 --require-doc textpoke_selftest textpoke_agent")
done
if [ -n "$harness" ]; then
	boots+=("harness-not-ok|x86_64|x86_64|a_test_that_fails|--append textpoke.mode=check=not_ok --expect not-ok")
	boots+=("harness-hang|x86_64|x86_64||--append textpoke.mode=check=hang --expect timeout --timeout 40")
	boots+=("harness-warn|x86_64|x86_64|harness_warn|--append textpoke.mode=check=warn --expect splat")
	boots+=("harness-no-series|x86_64|unpatched|lacks the textpoke patch series|--append textpoke.mode=check=no_series --expect not-ok")
fi

boot() {
	local name=$1 arch=$2 key=$3 expect_log=$4
	local -a args
	read -ra args <<<"$5"
	"$runner" boot --quiet --name "$name" --arch "$arch" --kernel "${kernel[$key]}" \
		--initrd "${initrd[$key]}" --out "$out" "${args[@]}" ${expect_log:+--expect-log "$expect_log"}
}

step "guests: ${#boots[@]} boots, two at a time (logs: $out)"
running=0
for b in "${boots[@]}"; do
	IFS='|' read -r name arch key expect_log args <<<"$b"
	boot "$name" "$arch" "$key" "$expect_log" "$args" &
	running=$((running + 1))
	if [ "$running" -ge 2 ]; then
		wait -n || true
		running=$((running - 1))
	fi
done
wait || true

step "summary"
exec "$runner" summary "$out"
