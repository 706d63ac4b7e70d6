#!/usr/bin/env bash
# Runs every fuzz target for the given number of seconds each, on stable rustc.
#
# Usage: tools/fuzz/run.sh SECONDS_PER_TARGET [TARGET...]
#
# To run one target by hand, from this directory:
#   RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir . --target-dir ~/.cache/textpoke/cargo-fuzz/target \
#       record_parse -- -max_total_time=60
# (`--fuzz-dir .` is needed because cargo-fuzz otherwise looks for the project in `fuzz/` next to
# the first non-fuzz Cargo.toml above, the main workspace's.)
#
# cargo-fuzz needs `-Zsanitizer`, which stable rustc accepts with RUSTC_BOOTSTRAP=1 (stable ships
# the ASan runtime). Builds go to $TEXTPOKE_CACHE/cargo-fuzz/target and the corpora, seeded here
# from valid encodings, to $TEXTPOKE_CACHE/cargo-fuzz/corpus/TARGET; crash inputs land in
# tools/fuzz/artifacts/TARGET (ignored by git). Prints each target's execution count and whether
# it crashed, and exits non-zero if any target crashed, hung or failed to build.
set -euo pipefail

CARGO_FUZZ_VERSION=0.13.2

secs=${1:?usage: $0 SECONDS_PER_TARGET [TARGET...]}
shift
case "$secs" in
'' | *[!0-9]*)
	echo "$0: SECONDS_PER_TARGET must be a whole number, not '$secs'" >&2
	exit 2
	;;
esac
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(record_parse x86_decode arm64_decode)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TEXTPOKE_CACHE:-$HOME/.cache/textpoke}/cargo-fuzz
# This checkout's own target directory (see tools/test.sh); corpora are shared.
target_dir=$cache/target-$(printf %s "$here" | sha256sum | cut -c1-12)
cd "$here"

log() { printf '[fuzz] %s\n' "$*"; }

if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
	echo "$0: cargo-fuzz $CARGO_FUZZ_VERSION is not installed: run tools/install-deps.sh test" >&2
	exit 1
fi

export RUSTC_BOOTSTRAP=1

# Writes the bytes spelled in hex by the remaining arguments (spaces ignored) to file $1.
hex() {
	local file=$1
	shift
	local digits
	digits=$(printf '%s' "$*" | tr -d '[:space:]')
	printf '%b' "$(printf '%s' "$digits" | sed 's/\(..\)/\\x\1/g')" >"$file"
}

# Seeds each corpus with a few valid inputs, so the fuzzer starts past the parsers' first checks.
seed() {
	local dir=$cache/corpus/record_parse
	mkdir -p "$dir"
	# sample_type = TID|TIME|CPU|IDENTIFIER; the x86 golden record from the host tests.
	local x86_sample=8600010000000000
	local x86_poke='1400000001004000 001000c0ffffffff 05000500 0f1f440000 e9fb0f0000 0000
		d2040000d3040000 ab89674523010000 0100000000000000 2a00000000000000'
	local lost='0200000000003800 2a00000000000000 0300000000000000
		d2040000d3040000 ab89674523010000 0100000000000000 2a00000000000000'
	hex "$dir/x86_poke" "$x86_sample $x86_poke"
	hex "$dir/lost" "$x86_sample $lost"
	hex "$dir/stream" "$x86_sample $x86_poke $lost $x86_poke"
	# sample_type = every trailer field; the arm64 golden record.
	hex "$dir/arm64_poke" 'c602010000000000 1400000001005000 50341280 0080ffff 04000400 1f2003d5
		40000014 00000000 1100000022000000 3300000000000000 4400000000000000 5500000000000000
		0300000000000000 4400000000000000'
	# sample_type = TIME; a trampoline created, then removed.
	hex "$dir/trampoline" '0400000000000000
		1400000001002800 000020c0ffffffff 00000700 554889e55dc3cc 0000000000 9900000000000000
		1400000001002800 000020c0ffffffff 07000000 554889e55dc3cc 0000000000 9a00000000000000'
	# No trailer; a poke of nothing, then an unknown record.
	hex "$dir/empty" '0000000000000000 1400000001001800 000020c0ffffffff 00000000 00000000
		0c00000000001000 0700000008000000'

	dir=$cache/corpus/x86_decode
	mkdir -p "$dir"
	local site=001000c0ffffffff
	hex "$dir/int3" "$site cc"
	hex "$dir/nop2" "$site 6690"
	hex "$dir/nop5" "$site 0f1f440000"
	hex "$dir/jmp8" "$site eb10"
	hex "$dir/jmp32" "$site e9fb0f0000"
	hex "$dir/call32" "$site e8fbefffff"
	hex "$dir/ret" "$site c3"
	hex "$dir/ret_padded" "$site c3cccccccc"

	dir=$cache/corpus/arm64_decode
	mkdir -p "$dir"
	site=503412800080ffff
	hex "$dir/nop" "$site 1f2003d5"
	hex "$dir/b" "$site 40000014"
	hex "$dir/b_back" "$site ffffff17"
	hex "$dir/bl" "$site 40000094"
	hex "$dir/ret" "$site c0035fd6"
	hex "$dir/mov_x9_x30" "$site e9031eaa"
	hex "$dir/brk" "$site 000120d4"
}
seed

mkdir -p "$cache/logs"
log "building the fuzz targets"
if ! cargo fuzz build --fuzz-dir "$here" --target-dir "$target_dir" >"$cache/logs/build.log" 2>&1; then
	tail -n 30 "$cache/logs/build.log" >&2
	echo "[fuzz] build failed (log $cache/logs/build.log)" >&2
	exit 1
fi

failed=()
summary=()
for t in "${targets[@]}"; do
	log "running $t for ${secs}s"
	out=$cache/logs/$t.log
	status=0
	cargo fuzz run --fuzz-dir "$here" --target-dir "$target_dir" "$t" "$cache/corpus/$t" -- \
		-max_total_time="$secs" -timeout=10 -print_final_stats=1 >"$out" 2>&1 || status=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out" | tail -n 1)
	if [ "$status" -ne 0 ] || grep -qE '^SUMMARY: |^==[0-9]+== ?ERROR' "$out"; then
		summary+=("$t: ${execs:-?} executions, CRASHED (exit $status; log $out)")
		failed+=("$t")
		grep -E 'panicked at|^SUMMARY: |Test unit written to|^==[0-9]+== ?ERROR' "$out" | head -n 20 >&2 || true
	else
		summary+=("$t: ${execs:-?} executions, no crash")
	fi
done

for line in "${summary[@]}"; do
	echo "$line"
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "[fuzz] crashed: ${failed[*]}" >&2
	exit 1
fi
