#!/usr/bin/env bash
# Every test, as `make test` runs it:
#
#   tools/test.sh [x86_64|arm64]        (both arches by default)
#
# The runner owns the plan (tools/runner/src/plan/manifest.rs): `textpoke-runner plan test`
# writes the manifest of every host check and boot this run must report on, and names the
# guests to build.
# This script only builds and runs commands; each host check's outcome is recorded with
# `textpoke-runner record`, each boot's by `textpoke-runner suite`, and the summary fails every
# planned check or boot that left no report. Nothing stops the run early: the last line is
# always the summary's `N passed, M failed`.
#
# 1. host: the workspace's tests (codecs, table, planner, model, record codec, installer,
#    runner, agent), loom on the pending table, the scripted mutants, a short fuzz run of every
#    target, clippy and rustfmt;
# 2. meanwhile, in the foreground: each guest (its kernel, modules, agent and initramfs), the
#    x86_64 and arm64 ones first; the planned boots start as soon as their guest is built, two
#    at a time (single-threaded TCG uses one host core each), while the later guests build;
#    one log per arch also goes through the kernel's own KTAP parser;
# 3. beside the boots: checkpatch on the kernel patch series, the table of kernel text writers
#    (docs/writers.md) against the patched source, perf built with the series'
#    cs-etm patch and its synthetic-trace decode, `make CLIPPY=1` of the modules (production
#    and debug builds) per arch. The host checks are mostly single-threaded (loom, the mutants,
#    the fuzz runs) and so are the module builds, so the lanes share the two cores instead of
#    taking turns; the host lane's output is printed when it ends. The boots come first on
#    the cores: the builds and checks beside them run at nice 5, the host lane at nice 10
#    (`yield_to_boots`, tools/lib.sh);
# 4. once the boots are over, the CoreSight decode of the arm64 -smp 2 boot's executions, and
#    the runner's summary. Every stage is timed (`timed`, tools/lib.sh) for the report's table.
#
# Exits non-zero if anything failed. Logs stay under the printed directory.
set -uo pipefail

. "$(dirname "$0")/lib.sh"
start_run "$(date +%Y%m%d-%H%M%S)"
cd "$top"

step "host: the runner"
build_runner
plan test "$out"

# Runs check NAME: the command after `--`, its output in NAME.log, its status recorded, its time
# a stage of the lane `lane` names (`main` unless the caller's lane says otherwise).
# Returns non-zero if the command failed or its status could not be recorded; the summary
# counts a check left unrecorded as failed, since the manifest plans it.
check() {
	local name=$1 reason=$2
	shift 3
	local log=$out/$name.log status=0 recorded=0
	timed "${lane:-main}" "$name" "$@" >"$log" 2>&1 || status=$?
	local why=$reason
	[ "$status" -eq 0 ] || why="$reason failed (exit $status): see $log"
	"$runner" record --out "$out" --name "$name" --status "$status" --reason "$why" --log "$log" ||
		recorded=$?
	[ "$status" -eq 0 ] || tail -n 20 "$log" >&2
	if [ "$recorded" -ne 0 ]; then
		echo "recording $name failed (exit $recorded): the summary counts it as never reported" >&2
		return 1
	fi
	[ "$status" -eq 0 ]
}

host_tests() {
	CARGO_TARGET_DIR=$build/cargo-host cargo test --workspace --release 2>&1 || return 1
}
# The loom models of the pending table. The test file is `#![cfg(loom)]`: built without that
# cfg it holds no test and passes, so every model must also report what it explored.
loom_models() {
	local log want have
	log=$(mktemp)
	env RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$build/cargo-loom" \
		cargo test --release -p textpoke-core --test pending_loom -- --nocapture --test-threads 1 \
		2>&1 | tee "$log" || {
		rm -f "$log"
		return 1
	}
	want=$(grep -c '^#\[test\]' tools/core/tests/pending_loom.rs)
	have=$(grep -cE '^test [^ ]+ \.\.\. loom explored [0-9]+ interleavings$' "$log")
	rm -f "$log"
	if [ "$have" -ne "$want" ]; then
		echo "loom: $have of the $want models reported the interleavings they explored"
		return 1
	fi
}
rustfmt_all() {
	cargo fmt --all --check &&
		rustfmt --check --edition 2021 kernel/*.rs arch/*/*.rs rust/*.rs samples/*.rs samples/exerciser/*.rs
}
# The host lane: every host check, in order.
host_lane() {
	local lane=host
	step "host: cargo test --workspace --release"
	check host-tests "cargo test --workspace --release" -- host_tests
	awk '/^test result:/ {p += $4; f += $6} END {printf "host tests: %d passed, %d failed\n", p, f}' \
		"$out/host-tests.log"

	step "host: loom model checking of the pending-instruction table"
	check loom "loom (--cfg loom) on the pending table" -- loom_models
	# libtest prints `test NAME ... ` before running a test, so with --nocapture each model's
	# `loom explored N interleavings` ends that line.
	sed -nE 's/^test ([^ ]+) \.\.\. (loom explored [0-9]+ interleavings)$/\2 of \1/p' "$out/loom.log"

	step "host: the mutants of the shared source must be caught"
	check mutants "the mutants" -- \
		env CARGO_TARGET_DIR="$build/cargo-host" cargo run --quiet --release -p textpoke-mutants -- \
		--target-dir "$build/cargo-mutants"
	tail -n 1 "$out/mutants.log"

	step "host: fuzz smoke run (10 s per target)"
	check fuzz-smoke "the fuzz smoke run" -- tools/fuzz/run.sh 10

	step "host: clippy and rustfmt"
	check clippy "clippy -D warnings" -- env CARGO_TARGET_DIR="$build/cargo-clippy" \
		cargo clippy --quiet --workspace --all-targets -- -D warnings
	check rustfmt "rustfmt" -- rustfmt_all
	# A failed check is the summary's to report: any other status means the lane itself died.
	return 0
}
host_log=$out/host-lane.out
step "host checks, in the background (their output follows when they end)"
(
	yield_to_boots 10
	host_lane
) >"$host_log" 2>&1 &
host_pid=$!

# The boots start as soon as their guest is built, each arch's patched one first, while the
# later kernels and guests build: the runner reads the guests from a file this script appends
# to, and runs the planned boots two at a time as their guests come (`suite --artifacts-from`).
artifacts_file=$out/artifacts.list
: >"$artifacts_file"
announce() { printf '%s\n' "$1" >>"$artifacts_file"; }
step "guests: the planned boots, two at a time as their guests are built (logs: $out)"
"$runner" suite --out "$out" --artifacts-from "$artifacts_file" \
	--kunit "$cache/kernel/patched/tools/testing/kunit/kunit.py" &
suite_pid=$!
# Everything below runs beside the boots, at a lower priority than theirs.
yield_to_boots 5

guest_step() { step "guests: building $1 ($2)"; }
build_guests guest_step announce
echo done >>"$artifacts_file"

# The checks below run beside the boots: the patched kernels are built by now.
declare -A kdir
for arch in $arches; do
	kdir[$arch]=$(tools/kernel.sh "$arch" | tail -n 1) || kdir[$arch]=
done

# checkpatch.pl of the kernel source the patches apply to: every patch --strict clean but for
# the Signed-off-by the series does not carry.
checkpatch() {
	local src=$cache/kernel/patched
	[ -x "$src/scripts/checkpatch.pl" ] || { echo "no $src/scripts/checkpatch.pl (kernel build failed?)"; return 1; }
	# Absolute paths: given tools/patches/..., checkpatch takes the patch for a file of the tree.
	perl "$src/scripts/checkpatch.pl" --strict --no-signoff --no-tree --terse "$top"/tools/patches/*.patch
}
step "checkpatch --strict on tools/patches"
check checkpatch "checkpatch.pl --strict on the patch series" -- checkpatch

# docs/writers.md names every writer of kernel text in the patched source, and nothing else.
step "the writers of kernel text in docs/writers.md"
check writers "docs/writers.md against the patched source" -- \
	"$runner" writers --tree "$cache/kernel/patched" --table docs/writers.md
tail -n 1 "$out/writers.log"

# perf with the series' cs-etm patch (0012), built from the patched source: a synthetic
# CoreSight trace whose kernel text is poked mid-way must decode to the truth, and a dropped or
# late record must fail the comparison (tools/etm's ignored tests, in CPU-wide traces too and
# on a boot-shaped dataset of observed executions). Every ignored test of the crate must have
# run and passed, and the in-order one must fail with Debian's perf.
perf_cs_etm() {
	local src=$cache/kernel/patched log want have
	[ -f "$src/tools/perf/Makefile.perf" ] || { echo "no patched source in $src (kernel build failed?)"; return 1; }
	tools/perf.sh "$src" "$build/perf" || return 1
	log=$(mktemp)
	env TEXTPOKE_PERF="$build/perf/perf" CARGO_TARGET_DIR="$build/cargo-etm" \
		cargo test --release -p textpoke-etm -- --ignored 2>&1 | tee "$log" || {
		rm -f "$log"
		return 1
	}
	want=$(cat tools/etm/tests/*.rs | grep -c '^#\[ignore')
	have=$(grep -cE '^test [^ ]+ \.\.\. ok$' "$log")
	if [ "$want" -eq 0 ] || [ "$have" -ne "$want" ]; then
		rm -f "$log"
		echo "perf-cs-etm: $have of the $want tests that need the patched perf passed"
		return 1
	fi
	# The control: Debian's perf, without the patch, must fail the in-order test, and by
	# decoding the poked site wrongly (the comparison's message), not for any other reason.
	env -u TEXTPOKE_PERF CARGO_TARGET_DIR="$build/cargo-etm" \
		cargo test --release -p textpoke-etm --test perf_decode -- --ignored --exact \
		timestamped_text_poke_is_applied_in_time_order >"$log" 2>&1
	if ! grep -q '^test timestamped_text_poke_is_applied_in_time_order \.\.\. FAILED$' "$log" ||
		! grep -q 'instructions differ first at #' "$log"; then
		cat "$log"
		rm -f "$log"
		echo "perf-cs-etm: Debian's perf was not caught decoding the poked site wrongly"
		return 1
	fi
	rm -f "$log"
	echo "perf-cs-etm: Debian's perf, without the patch, decodes the poked site wrongly (caught)"
}
step "perf with the cs-etm patch: build, and decode across a text poke"
check perf-cs-etm "the patched perf's decode across a TEXT_POKE" -- perf_cs_etm
grep -E '^(test result:|perf-cs-etm: )' "$out/perf-cs-etm.log" | tail -n 2

# Both builds of the modules, under clippy, must be free of warnings.
lint() {
	local arch=$1 flavor
	[ -n "${kdir[$arch]}" ] || { echo "the $arch kernel failed to build"; return 1; }
	for flavor in production debug; do
		local dir=$build/modules-clippy/$arch-$flavor
		if ! CLIPPY=1 TEXTPOKE_KDIR=${kdir[$arch]} TEXTPOKE_MODULES_OUT=$dir \
			tools/modules.sh "$arch" patched "$flavor" >/dev/null 2>"$out/clippy-$arch-$flavor.log"; then
			cat "$out/clippy-$arch-$flavor.log"
			rm -rf "$dir"
			return 1
		fi
		if grep -qiE 'warning|error' "$out/clippy-$arch-$flavor.log"; then
			cat "$out/clippy-$arch-$flavor.log"
			# Kbuild does not repeat the diagnostics of objects it does not rebuild: start the
			# next lint from scratch so that it reports these again.
			rm -rf "$dir"
			return 1
		fi
	done
	# The production build's trap path calls nothing a kprobe could be placed on.
	"$runner" trap-path "$build/modules-clippy/$arch-production/textpoke.ko" || return 1
	echo "$arch: no warnings in either build; the trap path is closed to kprobes"
}
for arch in $arches; do
	step "lint: make CLIPPY=1 modules ($arch, production and debug)"
	check "lint-$arch" "make CLIPPY=1 of the $arch modules" -- lint "$arch"
done

step "guests: waiting for the boots to end"
# The suite's own status is the summary's to report (a failed boot is a failed report).
timed main "waiting for the boots" wait "$suite_pid" || true

# The arm64 -smp 2 boot printed what its breakpoint observer saw: traced as an ETM would trace
# it, the patched perf must decode every execution to its path with the boot's records, and
# wrong paths without them and with BEFORE/AFTER pairs whose AFTER follows the write
# (tools/etm/src/observed.rs).
if [[ " $arches " == *" arm64 "* ]]; then
	step "etm: the arm64-smp2 boot's executions, traced and decoded by perf"
	check etm-observed "the decode of the arm64-smp2 boot's executions" -- \
		env TEXTPOKE_PERF="$build/perf/perf" "$runner" etm-observed \
		--log "$out/arm64-smp2.log" --work "$build/etm-observed"
	cat "$out/etm-observed.log"
fi

step "host checks: waiting for them to end"
host_status=0
timed main "waiting for the host lane" wait "$host_pid" || host_status=$?
cat "$host_log"
if [ "$host_status" -ne 0 ]; then
	echo "the host lane died (exit $host_status): the checks it did not record count as failed" >&2
fi

step "summary"
exec "$runner" summary "$out"
