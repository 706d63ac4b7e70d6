//! Benchmarks (`textpoke.mode=bench`): see `make bench`.

use textpoke_agent::ktap::{Case, Ktap};

/// Runs the benchmarks and prints their table.
pub fn run(ktap: &mut Ktap) {
    let _ = ktap.print_document("textpoke_bench", &[Case::skip("bench", "not built yet")]);
}
