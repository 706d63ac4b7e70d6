//! The breakdown of textpoke's commits in the flips section: where a commit's time goes, per
//! part of the engine's plan (`ns.<part>` of its stats file, `Part` in kernel/stats.rs), as the
//! textpoke samples carry it, with the traps the CPUs took meanwhile.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::bench::section::us;
use crate::bench::stats::median;

/// The part that is the whole commit.
const TOTAL: &str = "total";

/// The parts of a commit in the breakdown, in plan order, with their column headings; the
/// engine's other parts (`ns.*`) go to "rest".
const PARTS: [(&str, &str); 12] = [
    ("check", "check"),
    ("table", "pending table"),
    ("guard", "guards"),
    ("sync1", "sync 1"),
    ("emit", "records"),
    ("tail", "tails"),
    ("sync2", "sync 2"),
    ("head", "heads"),
    ("sync3", "sync 3"),
    ("whole", "whole writes"),
    ("park", "parked"),
    ("release", "release"),
];

/// The median of each part over the samples that have it, from each sample's nanoseconds per
/// part.
pub fn median_parts(samples: &[&BTreeMap<String, u64>]) -> BTreeMap<String, f64> {
    let names: BTreeSet<&String> = samples.iter().flat_map(|s| s.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| {
            let v: Vec<f64> = samples
                .iter()
                .filter_map(|s| s.get(name).map(|&ns| ns as f64))
                .collect();
            Some((name.clone(), median(&v)?))
        })
        .collect()
}

/// One size's row: textpoke's medians at that N.
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    /// Sites per flip.
    pub n: u32,
    /// Median nanoseconds per part ([`median_parts`]).
    pub parts: &'a BTreeMap<String, f64>,
    /// Median traps per flip, if the samples carry them.
    pub traps: Option<f64>,
}

/// The breakdown of textpoke's commits per N in `arch`: median µs per part, and the median
/// traps; `None` if no row has the commit's total (logs from before the breakdown).
pub fn markdown(arch: &str, rows: &[Row]) -> Option<String> {
    let rows: Vec<&Row> = rows
        .iter()
        .filter(|c| c.parts.contains_key(TOTAL))
        .collect();
    if rows.is_empty() {
        return None;
    }
    // Only the parts some size spends time in.
    let cols: Vec<(&str, &str)> = PARTS
        .iter()
        .copied()
        .filter(|(k, _)| {
            rows.iter()
                .any(|c| c.parts.get(*k).is_some_and(|&v| v > 0.0))
        })
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "#### {arch}: where a textpoke commit's time goes (median µs per part over the samples)\n"
    );
    let heads: Vec<&str> = cols.iter().map(|(_, h)| *h).collect();
    let _ = writeln!(
        out,
        "| N | commit | {} | rest | traps during the flip |",
        heads.join(" | ")
    );
    let _ = writeln!(out, "|---:|---:|{}---:|---:|", "---:|".repeat(cols.len()));
    for c in rows {
        let total = c.parts.get(TOTAL).copied().unwrap_or(0.0);
        let named: f64 = cols
            .iter()
            .filter_map(|(k, _)| c.parts.get(*k))
            .sum::<f64>();
        let cells: Vec<String> = cols
            .iter()
            .map(|(k, _)| us(c.parts.get(*k).copied().unwrap_or(0.0)))
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            c.n,
            us(total),
            cells.join(" | "),
            // Medians do not add up: what the named parts' medians leave of the total's.
            us((total - named).max(0.0)),
            c.traps
                .map_or_else(|| "n/a".to_owned(), |t| format!("{t:.0}")),
        );
    }
    let _ = writeln!(
        out,
        "\n- Per part the median over the flips of one size, so the parts need not add up to the \
         commit's median; \"rest\" is what they leave of it. Parts: kernel/stats.rs `Part`."
    );
    Some(out)
}
