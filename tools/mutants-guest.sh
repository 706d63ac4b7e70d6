#!/usr/bin/env bash
# `make mutants-guest`: builds the runner and the mutation tool, then boots each kernel-only
# mutant (tools/mutants/src/guest.rs says how, and judges). Extra arguments go to the tool
# (`--only NAME`...). Not part of `make test`: minutes per mutant under TCG.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$top"
build_runner
CARGO_TARGET_DIR=$build/cargo-host cargo build --quiet --release -p textpoke-mutants
exec "$build/cargo-host/release/textpoke-mutants" --guest "$runner" "$@"
