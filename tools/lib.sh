# SPDX-License-Identifier: GPL-2.0
#
# What tools/run.sh, tools/test.sh, tools/boots.sh and tools/bench.sh share: sourced, not
# run. Each of them plans its boots with the runner and builds only the guests the plan names.
#
# Sets: top (the checkout), cache ($TEXTPOKE_CACHE), build (this checkout's build products),
# arches (the script's arguments, or both), and exports TEXTPOKE_CACHE and PATH; start_run sets
# out and start.

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}
# This checkout's build products: objects and cargo's fingerprints record source paths and mtimes,
# so two checkouts sharing them (a clean clone and a working tree) would take each other's for
# up to date.
build=$cache/build/$(printf %s "$top" | sha256sum | cut -c1-12)
export TEXTPOKE_CACHE=$cache PATH="$HOME/.cargo/bin:$PATH"
arches=${*:-x86_64 arm64}

# start_run NAME: this run's log directory, `out` ($cache/runs/NAME, created), and the start
# time `step` counts from.
start_run() {
	out=$cache/runs/$1
	mkdir -p "$out"
	start=$(date +%s)
}

# step TEXT: a heading with the seconds since start_run.
step() { printf '\n== [+%ss] %s\n' $(($(date +%s) - start)) "$*"; }

# timed LANE NAME COMMAND...: runs COMMAND (a program or a function of the script), then records
# its wall time, the CPU time of the processes it ran and its exit status as a stage of the run
# (`textpoke-runner stage`, which appends to the run directory's stages.jsonl) for the stage
# table of `textpoke-runner report`. LANE names the part of the script that ran it (`main`, or
# `host` for the host lane beside it). Returns COMMAND's status; a stage that could not be
# recorded is said on stderr and leaves the run as it is (the table then lacks that row only).
#
# COMMAND runs in a subshell of its own, whose `times` (the user and system time of the
# processes it waited for) is then the command's alone: the script's own `times` would also take
# in a background lane that happened to end meanwhile. `wait` must run in the script's shell, and
# is timed without CPU time.
timed() {
	local lane=$1 name=$2 t0 status=0 times_out
	local -a cpu=()
	shift 2
	t0=$(date +%s.%N)
	if [ "$1" = wait ]; then
		"$@" || status=$?
	else
		times_out=$(mktemp)
		("$@" && times >"$times_out" || {
			s=$?
			times >"$times_out"
			exit "$s"
		}) || status=$?
		cpu=(--cpu "$(sed -n 2p "$times_out")")
		rm -f "$times_out"
	fi
	"$runner" stage --out "$out" --lane "$lane" --name "$name" --started "$t0" \
		--ended "$(date +%s.%N)" "${cpu[@]}" --status "$status" >&2 ||
		echo "$(basename "$0"): the stage '$name' could not be recorded" >&2
	return "$status"
}

# yield_to_boots LEVEL: lowers the priority of this shell, and so of every command it starts
# after, to nice LEVEL. The boots run at the priority they were started with (0): their
# time limits are in wall-clock seconds and single-threaded TCG needs a whole host core per
# boot, so what runs beside them on the two cores must take what they leave. Scripts start
# the runner's suite first, then yield: the guest builds (the next boots' critical path) to
# level 5, the host lane (which nothing waits for until the summary) to 10.
yield_to_boots() {
	renice -n "$1" -p "$BASHPID" >/dev/null ||
		echo "$(basename "$0"): could not lower the priority of the work beside the boots" >&2
}

# build_runner: builds textpoke-runner and sets `runner`, or says why not and exits.
build_runner() {
	if ! CARGO_TARGET_DIR=$build/cargo-host cargo build --quiet --release -p textpoke-runner; then
		echo "$(basename "$0"): building textpoke-runner failed: nothing can be judged" >&2
		exit 1
	fi
	runner=$build/cargo-host/release/textpoke-runner
}

# plan SUITE OUT: the runner's plan of SUITE for $arches, which writes OUT's manifest of the
# boots to judge; sets `needed`, the guests it names ("ARCH VARIANT" lines), or exits.
plan() {
	local suite=$1 dir=$2 arch
	local -a arch_args=()
	for arch in $arches; do arch_args+=(--arch "$arch"); done
	if ! mapfile -t needed < <("$runner" plan "$suite" "${arch_args[@]}" --out "$dir") ||
		[ ${#needed[@]} -eq 0 ]; then
		echo "$(basename "$0"): textpoke-runner plan $suite failed" >&2
		exit 1
	fi
}

# build_guests [EACH] [ANNOUNCE]: builds each guest of `needed` (its kernel with tools/kernel.sh,
# then the rest with tools/guests.sh, each a timed stage) and sets `artifacts`, the runner's
# --artifact arguments. EACH, if given, is a command run first with the guest's arch and variant
# (a step heading); ANNOUNCE, if given, one run with each built guest's ARCH:VARIANT:KERNEL:INITRD
# (to start its boots while the next guest builds). A guest that fails to build is left out, said
# so: the runner then reports its boots as never run.
build_guests() {
	local each=${1:-} announce=${2:-} guest arch variant built artifact
	local -a paths
	artifacts=()
	for guest in "${needed[@]}"; do
		read -r arch variant <<<"$guest"
		[ -z "$each" ] || "$each" "$arch" "$variant"
		# The kernel alone first, for the stage table (tools/guests.sh finds it up to date).
		if timed main "kernel $arch $variant" tools/kernel.sh "$arch" "$variant" >/dev/null &&
			built=$(timed main "guest $arch $variant" tools/guests.sh "$arch" "$variant"); then
			mapfile -t paths <<<"$built"
			artifact=$arch:$variant:${paths[0]}:${paths[1]}
			artifacts+=(--artifact "$artifact")
			[ -z "$announce" ] || "$announce" "$artifact"
		else
			echo "building the $arch $variant guest failed: its boots will be reported as never run" >&2
		fi
	done
}
