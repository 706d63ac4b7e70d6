//! The benchmarks' report (`make bench`, `textpoke-runner bench-report`): reads the samples the
//! guest agent logged (`textpoke-bench: {json}` lines, one per flip: tools/agent/src/bench.rs),
//! and per arch writes a Markdown table with the spread of every (mode, N), the ratio of
//! textpoke's median time to every other mode's with a bootstrap confidence interval, the raw
//! samples as JSON, and an SVG plot of the distributions. The same logs may carry the
//! retarget benchmark's `textpoke-retarget:` lines (seed 004, see retarget.rs), the kernel
//! patching's `textpoke-kbench:` lines (kbench.rs) and the foreign traps' `textpoke-trapcost:`
//! lines (trapcost.rs): each has its section in the arch's report.
//!
//! The statistics are stats.rs's; the bootstrap is seeded per (N, mode) from [`SEED`], so a
//! report is reproducible from its samples.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::report::BootReport;
use crate::retarget::RetargetReport;
use crate::stats::{
    bootstrap_ratio_of_medians, fold_seed, median, Interval, SplitMix64, Spread, RESAMPLES,
};

/// Prefix of a sample line in the guest's log (after the printk prefix).
pub const PREFIX: &str = "textpoke-bench: ";
/// Seed of the bootstrap, mixed with N and the mode so that each interval has its own stream.
pub const SEED: u64 = 0x7e47_b0a7_5eed_2024;
/// Samples per mode and size the bench aims for; fewer is pointed out in the report.
pub const MIN_SAMPLES: usize = 20;
/// The mode the others are compared with.
pub const TEXTPOKE: &str = "textpoke";
/// The baseline mode: everything but the patching.
pub const IDLE: &str = "idle";
/// The modes, in the order tables and plots show them, with a label for people.
pub const MODES: [(&str, &str); 4] = [
    (TEXTPOKE, "textpoke"),
    ("static_key", "upstream static key"),
    ("nosync", "nosync + kick"),
    ("stop_machine", "stop_machine"),
];

/// One flip, as the agent logged it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Guest arch, as the runner names it (`x86_64`, `arm64`).
    pub arch: String,
    /// Online CPUs.
    pub cpus: u32,
    /// The mechanism (`textpoke`, `static_key`, `nosync`, `stop_machine`, `idle`).
    pub mode: String,
    /// Sites flipped at once.
    pub n: u32,
    /// Which round (every mode flips once per round, in turn).
    pub round: u32,
    /// Rounds planned at this size.
    #[serde(default)]
    pub rounds: u32,
    /// Wall time of the flip, in nanoseconds.
    pub ns: u64,
    /// Whether the flip switched the branches on (the others switch them off).
    #[serde(default)]
    pub on: bool,
    /// All-CPU sync rounds (textpoke counts its own; 0 where unknown).
    pub syncs: u64,
    /// `PERF_RECORD_TEXT_POKE` records emitted.
    pub records: u64,
    /// Function-call IPIs counted in `/proc/interrupts` around the flip, including what
    /// starting and stopping the executors costs.
    pub call_ipis: u64,
    /// The longest gap between two executions of a site on any CPU meanwhile, in nanoseconds.
    pub stall_ns: u64,
    /// textpoke only: traps the CPUs took during the flip, from the engine's counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traps: Option<u64>,
    /// textpoke only: the commit's time per part (`ns.<part>` of the engine's stats file, see
    /// `Part` in kernel/stats.rs), in nanoseconds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parts: BTreeMap<String, u64>,
    /// The executors' gap histograms before and during the flip (`textpoke-gaps:` lines,
    /// gaps.rs), if the log has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gaps: Option<crate::gaps::Gaps>,
}

/// The samples of a log, and the sample lines that could not be read (`line N: why`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    /// The samples, in log order.
    pub samples: Vec<Sample>,
    /// Unreadable sample lines.
    pub problems: Vec<String>,
}

/// Reads the `textpoke-bench:` lines of a console log.
pub fn parse_log(log: &str) -> Parsed {
    let (mut samples, mut problems) = parse_lines(log, PREFIX, |s: &mut Sample| {
        s.arch = runner_arch(&s.arch);
        Ok(())
    });
    problems.extend(crate::gaps::attach(log, &mut samples));
    Parsed { samples, problems }
}

/// The arch as the runner names it: the guest's `aarch64` is `arm64`.
pub(crate) fn runner_arch(arch: &str) -> String {
    if arch == "aarch64" {
        "arm64".into()
    } else {
        arch.into()
    }
}

/// Reads the lines of a console log that start (after the printk prefix) with `prefix` and
/// JSON for a `T`, which `check` may fix up or refuse. Returns the values in log order and the
/// lines that could not be read (`line N: why`).
pub(crate) fn parse_lines<T: serde::de::DeserializeOwned>(
    log: &str,
    prefix: &str,
    mut check: impl FnMut(&mut T) -> Result<(), String>,
) -> (Vec<T>, Vec<String>) {
    let (mut values, mut problems) = (Vec::new(), Vec::new());
    for (i, line) in log.lines().enumerate() {
        let line = crate::ktap::strip_console_prefix(line);
        let Some(json) = line.strip_prefix(prefix) else {
            continue;
        };
        match serde_json::from_str::<T>(json).map_err(|e| e.to_string()) {
            Ok(mut v) => match check(&mut v) {
                Ok(()) => values.push(v),
                Err(e) => problems.push(format!("line {}: {e}", i + 1)),
            },
            Err(e) => problems.push(format!("line {}: {e}", i + 1)),
        }
    }
    (values, problems)
}

/// What one (mode, N) came to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigStats {
    /// The mechanism.
    pub mode: String,
    /// Sites per flip.
    pub n: u32,
    /// Rounds planned (the agent's), for comparing with the samples there are.
    pub rounds: u32,
    /// Time per flip, in nanoseconds.
    pub time_ns: Spread,
    /// Median all-CPU syncs per flip.
    pub syncs: f64,
    /// Median records per flip.
    pub records: f64,
    /// Median function-call IPIs per flip as counted, with the executors' own.
    pub call_ipis_raw: f64,
    /// Median function-call IPIs per flip minus the median of the `idle` samples at this N
    /// (what starting and stopping the executors costs), at least 0; `None` without `idle`
    /// samples.
    pub call_ipis: Option<f64>,
    /// Median worst stall per flip, in nanoseconds.
    pub stall_median_ns: f64,
    /// Worst stall over all flips, in nanoseconds.
    pub stall_max_ns: u64,
    /// textpoke only: median traps per flip, if the samples carry them.
    #[serde(default)]
    pub traps: Option<f64>,
    /// textpoke only: median nanoseconds per part of the commit, over the samples that carry
    /// the breakdown, by part.
    #[serde(default)]
    pub parts: BTreeMap<String, f64>,
    /// The trapped executions during the flips and what each cost, from the executors' gap
    /// histograms (gaps.rs), if the samples carry them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trapped: Option<crate::gaps::Trapped>,
}

/// textpoke's median time over another mode's at one N, with its confidence interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    /// Sites per flip.
    pub n: u32,
    /// The mode textpoke is compared with.
    pub mode: String,
    /// `median(textpoke) / median(mode)`.
    pub ratio: f64,
    /// Its 95% bootstrap interval.
    pub ci95: Option<Interval>,
    /// Bootstrap resamples.
    pub resamples: usize,
    /// The bootstrap's seed.
    pub seed: u64,
}

/// One boot the samples came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// Its console log.
    pub log: String,
    /// QEMU's wall time, from the boot's report, if there is one.
    pub seconds: Option<f64>,
    /// Sample lines that could not be read.
    pub problems: Vec<String>,
}

/// The bench of one arch: what `DIR/bench/bench-ARCH.json` holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArchReport {
    /// Guest arch.
    pub arch: String,
    /// Online CPUs.
    pub cpus: u32,
    /// Where the samples came from.
    pub sources: Vec<Source>,
    /// Per (mode, N), modes in [`MODES`] order then `idle`, N ascending.
    pub configs: Vec<ConfigStats>,
    /// Per N and non-textpoke mode.
    pub ratios: Vec<Ratio>,
    /// Every sample, in log order.
    pub samples: Vec<Sample>,
    /// The retarget benchmark (seed 004), if the logs have its lines; reports written before
    /// it existed have no such field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retarget: Option<RetargetReport>,
    /// The kernel's own patching through textpoke against the stock path (kbench.rs), if the
    /// logs have its lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kbench: Option<crate::kbench::KbenchReport>,
    /// A kprobe hit with textpoke loaded and without (trapcost.rs), if the logs have its lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign_traps: Option<crate::trapcost::TrapcostReport>,
}

fn mode_rank(mode: &str) -> usize {
    MODES
        .iter()
        .position(|(m, _)| *m == mode)
        .unwrap_or(MODES.len() + usize::from(mode != IDLE))
}

/// The label of a mode for people.
pub fn mode_label(mode: &str) -> &str {
    MODES
        .iter()
        .find(|(m, _)| *m == mode)
        .map_or(mode, |(_, l)| l)
}

fn seed_for(n: u32, mode: &str) -> u64 {
    fold_seed(SEED ^ u64::from(n), mode)
}

fn times(samples: &[Sample], mode: &str, n: u32) -> Vec<f64> {
    samples
        .iter()
        .filter(|s| s.mode == mode && s.n == n)
        .map(|s| s.ns as f64)
        .collect()
}

/// Computes the statistics of one arch's samples.
pub fn analyse(arch: &str, samples: Vec<Sample>, sources: Vec<Source>) -> ArchReport {
    // Modes in table order, then N ascending.
    let keys: BTreeSet<(usize, u32, String)> = samples
        .iter()
        .map(|s| (mode_rank(&s.mode), s.n, s.mode.clone()))
        .collect();
    let idle_ipis: BTreeMap<u32, f64> = samples
        .iter()
        .filter(|s| s.mode == IDLE)
        .map(|s| s.n)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter_map(|n| {
            let v: Vec<f64> = samples
                .iter()
                .filter(|s| s.mode == IDLE && s.n == n)
                .map(|s| s.call_ipis as f64)
                .collect();
            Some((n, median(&v)?))
        })
        .collect();
    let mut configs = Vec::new();
    for (_, n, mode) in &keys {
        let of: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.mode == *mode && s.n == *n)
            .collect();
        let col = |f: fn(&Sample) -> f64| median(&of.iter().map(|s| f(s)).collect::<Vec<_>>());
        let Some(time_ns) = Spread::of(&times(&samples, mode, *n)) else {
            continue;
        };
        let raw = col(|s| s.call_ipis as f64).unwrap_or(0.0);
        configs.push(ConfigStats {
            mode: mode.clone(),
            n: *n,
            rounds: of.iter().map(|s| s.rounds).max().unwrap_or(0),
            time_ns,
            syncs: col(|s| s.syncs as f64).unwrap_or(0.0),
            records: col(|s| s.records as f64).unwrap_or(0.0),
            call_ipis_raw: raw,
            call_ipis: idle_ipis.get(n).map(|b| (raw - b).max(0.0)),
            stall_median_ns: col(|s| s.stall_ns as f64).unwrap_or(0.0),
            stall_max_ns: of.iter().map(|s| s.stall_ns).max().unwrap_or(0),
            traps: median(
                &of.iter()
                    .filter_map(|s| s.traps.map(|t| t as f64))
                    .collect::<Vec<_>>(),
            ),
            parts: median_parts(&of),
            trapped: crate::gaps::trapped(&of),
        });
    }
    let mut ratios = Vec::new();
    let sizes: BTreeSet<u32> = samples.iter().map(|s| s.n).collect();
    for &n in &sizes {
        let tp = times(&samples, TEXTPOKE, n);
        for (mode, _) in MODES.iter().skip(1) {
            let other = times(&samples, mode, n);
            let (Some(a), Some(b)) = (median(&tp), median(&other)) else {
                continue;
            };
            if b <= 0.0 {
                continue;
            }
            let seed = seed_for(n, mode);
            ratios.push(Ratio {
                n,
                mode: (*mode).to_owned(),
                ratio: a / b,
                ci95: bootstrap_ratio_of_medians(&tp, &other, RESAMPLES, seed),
                resamples: RESAMPLES,
                seed,
            });
        }
    }
    ArchReport {
        arch: arch.to_owned(),
        cpus: samples.iter().map(|s| s.cpus).max().unwrap_or(0),
        sources,
        configs,
        ratios,
        samples,
        retarget: None,
        kbench: None,
        foreign_traps: None,
    }
}

impl ArchReport {
    /// The statistics of (mode, N).
    pub fn config(&self, mode: &str, n: u32) -> Option<&ConfigStats> {
        self.configs.iter().find(|c| c.mode == mode && c.n == n)
    }

    /// textpoke's ratio to `mode` at `n`.
    pub fn ratio(&self, mode: &str, n: u32) -> Option<&Ratio> {
        self.ratios.iter().find(|r| r.mode == mode && r.n == n)
    }

    /// The sizes measured, ascending.
    pub fn sizes(&self) -> Vec<u32> {
        self.configs
            .iter()
            .map(|c| c.n)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// The modes measured (but `idle`), in [`MODES`] order.
    pub fn modes(&self) -> Vec<&str> {
        let mut v: Vec<&str> = Vec::new();
        for c in &self.configs {
            if c.mode != IDLE && !v.contains(&c.mode.as_str()) {
                v.push(&c.mode);
            }
        }
        v
    }
}

/// The median of each part over the samples that have it.
fn median_parts(samples: &[&Sample]) -> BTreeMap<String, f64> {
    let names: BTreeSet<&String> = samples.iter().flat_map(|s| s.parts.keys()).collect();
    names
        .into_iter()
        .filter_map(|name| {
            let v: Vec<f64> = samples
                .iter()
                .filter_map(|s| s.parts.get(name).map(|&ns| ns as f64))
                .collect();
            Some((name.clone(), median(&v)?))
        })
        .collect()
}

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

/// The breakdown of textpoke's commits per N: median µs per part, and the median traps.
pub fn breakdown_markdown(r: &ArchReport) -> Option<String> {
    let rows: Vec<&ConfigStats> = r
        .configs
        .iter()
        .filter(|c| c.mode == TEXTPOKE && c.parts.contains_key("total"))
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
        "#### {}: where a textpoke commit's time goes (median µs per part over the samples)\n",
        r.arch
    );
    let heads: Vec<&str> = cols.iter().map(|(_, h)| *h).collect();
    let _ = writeln!(
        out,
        "| N | commit | {} | rest | traps during the flip |",
        heads.join(" | ")
    );
    let _ = writeln!(out, "|---:|---:|{}---:|---:|", "---:|".repeat(cols.len()));
    for c in rows {
        let total = c.parts.get("total").copied().unwrap_or(0.0);
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

fn us(ns: f64) -> String {
    format!("{:.0}", ns / 1000.0)
}

/// A ratio to three significant figures or two decimals, whichever is shorter: `0.55`,
/// `26.5`, `1201`.
pub fn ratio_text(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn ratio_cell(r: Option<&Ratio>) -> String {
    match r {
        None => "n/a".into(),
        Some(r) => match r.ci95 {
            Some(ci) => format!(
                "{} ({}–{})",
                ratio_text(r.ratio),
                ratio_text(ci.lo),
                ratio_text(ci.hi)
            ),
            None => ratio_text(r.ratio),
        },
    }
}

fn spread_cell(s: &Spread) -> String {
    format!("{} ({}–{})", us(s.median), us(s.p25), us(s.p75))
}

fn stall_cell(c: &ConfigStats) -> String {
    format!("{} ({})", us(c.stall_median_ns), us(c.stall_max_ns as f64))
}

fn ipis_cell(c: &ConfigStats) -> String {
    c.call_ipis
        .map_or_else(|| "n/a".into(), |v| format!("{v:.0}"))
}

/// The Markdown for one arch: a heading, the table, and what it rests on; then the retarget
/// benchmark's section, if there is one.
pub fn markdown(r: &ArchReport) -> String {
    // A boot may have run the retarget benchmark only: no empty flips table then.
    let mut out = if r.configs.is_empty() {
        String::new()
    } else {
        flips_markdown(r)
    };
    if let Some(retarget) = &r.retarget {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&crate::retarget::markdown(retarget));
    }
    if let Some(kbench) = &r.kbench {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&crate::kbench::markdown(kbench));
    }
    if let Some(foreign) = &r.foreign_traps {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&crate::trapcost::markdown(foreign));
    }
    out
}

fn flips_markdown(r: &ArchReport) -> String {
    let mut out = String::new();
    let sizes = r.sizes();
    let modes = r.modes();
    let _ = writeln!(
        out,
        "### {}, {} CPUs (QEMU TCG): time per batch, median (p25–p75) over the samples, IPIs per batch\n",
        r.arch, r.cpus
    );
    if r.arch == "x86_64" && modes == [TEXTPOKE, "static_key"] {
        let _ = writeln!(
            out,
            "| N | samples | textpoke µs | upstream static key µs | time ratio (95% CI) | textpoke syncs | \
             textpoke call IPIs | upstream call IPIs | IPI ratio | stall textpoke µs | \
             stall upstream µs |"
        );
        let _ = writeln!(
            out,
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for &n in &sizes {
            let (Some(t), Some(u)) = (r.config(TEXTPOKE, n), r.config("static_key", n)) else {
                continue;
            };
            let samples = if t.time_ns.samples == u.time_ns.samples {
                t.time_ns.samples.to_string()
            } else {
                format!("{}/{}", t.time_ns.samples, u.time_ns.samples)
            };
            let ipi_ratio = match (t.call_ipis, u.call_ipis) {
                (Some(a), Some(b)) if b > 0.0 => ratio_text(a / b),
                _ => "n/a".into(),
            };
            let _ = writeln!(
                out,
                "| {n} | {samples} | {} | {} | {} | {:.0} | {} | {} | {ipi_ratio} | {} | {} |",
                spread_cell(&t.time_ns),
                spread_cell(&u.time_ns),
                ratio_cell(r.ratio("static_key", n)),
                t.syncs,
                ipis_cell(t),
                ipis_cell(u),
                stall_cell(t),
                stall_cell(u),
            );
        }
    } else {
        let _ = writeln!(
            out,
            "| N | mode | samples | µs/batch | textpoke ÷ mode (95% CI) | call IPIs/batch | \
             stall µs | TEXT_POKE stream |"
        );
        let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|---:|---|");
        for &n in &sizes {
            for mode in &modes {
                let Some(c) = r.config(mode, n) else {
                    continue;
                };
                let ratio = if *mode == TEXTPOKE {
                    "1".to_owned()
                } else {
                    ratio_cell(r.ratio(mode, n))
                };
                // make test replays textpoke's stream onto /proc/kcore; here only the count.
                let stream = if c.records >= f64::from(n) {
                    format!(
                        "yes, {:.0} record{} per batch",
                        c.records,
                        if n > 1 { "s" } else { "" }
                    )
                } else {
                    "none".into()
                };
                let _ = writeln!(
                    out,
                    "| {n} | {} | {} | {} | {ratio} | {} | {} | {stream} |",
                    mode_label(mode),
                    c.time_ns.samples,
                    spread_cell(&c.time_ns),
                    ipis_cell(c),
                    stall_cell(c),
                );
            }
        }
    }
    let _ = writeln!(out);
    let order: Vec<&str> = modes.iter().map(|m| mode_label(m)).collect();
    let _ = writeln!(
        out,
        "- Every round flips the N sites once per mode, in turn ({}, idle): the modes are \
         interleaved in the same boot; each mode alternates switching on and off.",
        order.join(", ")
    );
    let _ = writeln!(
        out,
        "- Time ratio: textpoke's median over the other's; 95% CI by percentile bootstrap \
         ({RESAMPLES} resamples of each side, SplitMix64 seeded per N and mode)."
    );
    let _ = writeln!(
        out,
        "- Call IPIs: the median per flip counted in `/proc/interrupts`, minus the median of the \
         idle samples at the same N (starting and stopping the executors). Stall: per flip, the \
         longest gap between two executions on any CPU; its median over the flips, and in \
         parentheses the worst. When the host deschedules QEMU the guest's clock jumps, which \
         inflates a flip's time and its stall together: the worst stalls are mostly that."
    );
    let short: Vec<String> = sizes
        .iter()
        .filter_map(|&n| {
            let of_n = || r.configs.iter().filter(|c| c.n == n && c.mode != IDLE);
            let fewest = of_n().map(|c| c.time_ns.samples).min()?;
            let planned = of_n().map(|c| c.rounds).max().unwrap_or(0);
            (fewest < MIN_SAMPLES).then(|| format!("N={n}: {fewest} (of {planned} rounds planned)"))
        })
        .collect();
    if !short.is_empty() {
        let _ = writeln!(
            out,
            "- Fewer than {MIN_SAMPLES} samples per mode: {}. The agent plans fewer rounds only \
             where one round takes minutes under TCG (arm64 at 4096 sites, to keep the boot near \
             20 minutes) or when told to (`textpoke.bench_reps=`); fewer samples than rounds \
             means flips failed (see the KTAP results).",
            short.join("; ")
        );
    }
    for s in &r.sources {
        let _ = writeln!(
            out,
            "- Boot: {}{}.",
            s.seconds
                .map_or_else(|| "time unknown".to_owned(), |t| format!("{t:.0} s")),
            if s.problems.is_empty() {
                String::new()
            } else {
                format!(", {} unreadable sample lines", s.problems.len())
            }
        );
    }
    let _ = writeln!(
        out,
        "- Single-threaded TCG on a shared host: the emulator's round-robin scheduling dominates \
         the times; compare ratios and counts, not microseconds."
    );
    if let Some(breakdown) = breakdown_markdown(r) {
        let _ = writeln!(out);
        out.push_str(&breakdown);
    }
    if let Some(traps) = crate::gaps::markdown(r) {
        let _ = writeln!(out);
        out.push_str(&traps);
    }
    out
}

/// Mode colours in the plot, in [`MODES`] order.
const COLOURS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

fn colour(mode: &str) -> &'static str {
    COLOURS.get(mode_rank(mode)).copied().unwrap_or("#7f7f7f")
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A duration for an axis or a tooltip: `500 µs`, `9.7 ms`, `100 s`.
pub fn human_ns(ns: f64) -> String {
    let (v, unit) = if ns >= 1e9 {
        (ns / 1e9, "s")
    } else if ns >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    if v >= 10.0 || v.fract().abs() < 1e-9 {
        format!("{v:.0} {unit}")
    } else {
        format!("{v:.1} {unit}")
    }
}

/// Ticks for a log axis from `lo` to `hi` (positive): powers of ten, with 2 and 5 (or every
/// digit) in between when the range is narrow.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let steps: [&[f64]; 3] = [
        &[1.0],
        &[1.0, 2.0, 5.0],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
    ];
    let mut best = Vec::new();
    for mantissas in steps {
        let mut ticks = Vec::new();
        for e in (lo.log10().floor() as i32)..=(hi.log10().ceil() as i32) {
            for m in mantissas {
                let t = m * 10f64.powi(e);
                if t >= lo && t <= hi {
                    ticks.push(t);
                }
            }
        }
        best = ticks;
        if best.len() >= 3 {
            break;
        }
    }
    best
}

/// The SVG plot for one arch: per N a panel with a log-scale time axis, and per mode its
/// samples (jittered), a box from p25 to p75 with the median, and whiskers to min and max.
pub fn svg(r: &ArchReport) -> String {
    let sizes = r.sizes();
    let modes = r.modes();
    let (panel_w, panel_h, gap) = (230.0, 360.0, 60.0);
    let (left, top, bottom) = (70.0, 100.0, 40.0);
    let width = left + sizes.len().max(1) as f64 * (panel_w + gap);
    let height = top + panel_h + bottom;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(
        out,
        "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{left}\" y=\"24\" \
         font-size=\"16\" font-weight=\"bold\">{}, {} CPUs, QEMU TCG: time per batch of N sites \
         (log scale)</text>",
        xml_escape(&r.arch),
        r.cpus
    );
    let _ = writeln!(
        out,
        "<text x=\"{left}\" y=\"44\" fill=\"#555\">each dot one flip; box p25–p75, thick line \
         the median, whiskers min–max; modes interleaved round by round in one boot</text>"
    );
    let mut lx = left;
    for mode in &modes {
        let _ = writeln!(
            out,
            "<rect x=\"{lx}\" y=\"58\" width=\"14\" height=\"14\" fill=\"{}\"/><text x=\"{}\" \
             y=\"70\">{}</text>",
            colour(mode),
            lx + 20.0,
            xml_escape(mode_label(mode))
        );
        lx += 40.0 + 7.5 * mode_label(mode).chars().count() as f64;
    }
    let mut jitter = SplitMix64::new(SEED);
    for (p, &n) in sizes.iter().enumerate() {
        let x0 = left + p as f64 * (panel_w + gap);
        let values: Vec<f64> = r
            .samples
            .iter()
            .filter(|s| s.n == n && s.mode != IDLE && s.ns > 0)
            .map(|s| s.ns as f64)
            .collect();
        let (Some(lo), Some(hi)) = (
            values.iter().copied().reduce(f64::min),
            values.iter().copied().reduce(f64::max),
        ) else {
            continue;
        };
        let flips = r
            .configs
            .iter()
            .filter(|c| c.n == n && c.mode != IDLE)
            .map(|c| c.time_ns.samples)
            .min()
            .unwrap_or(0);
        let (llo, lhi) = (lo.log10(), hi.log10());
        let pad = ((lhi - llo) * 0.06).max(0.03);
        let (llo, lhi) = (llo - pad, lhi + pad);
        let y = |ns: f64| top + panel_h * (1.0 - (ns.max(1.0).log10() - llo) / (lhi - llo));
        let _ = writeln!(
            out,
            "<rect x=\"{x0}\" y=\"{top}\" width=\"{panel_w}\" height=\"{panel_h}\" fill=\"none\" \
             stroke=\"#999\"/>\n<text x=\"{x0}\" y=\"{:.1}\" font-weight=\"bold\">N = {n}</text>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\">{flips} flips \
             per mode</text>",
            top - 8.0,
            x0 + panel_w,
            top - 8.0
        );
        for t in log_ticks(10f64.powf(llo), 10f64.powf(lhi)) {
            let ty = y(t);
            let _ = writeln!(
                out,
                "<line x1=\"{x0}\" x2=\"{:.1}\" y1=\"{ty:.1}\" y2=\"{ty:.1}\" stroke=\"#e5e5e5\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#555\">{}</text>",
                x0 + panel_w,
                x0 - 4.0,
                ty + 4.0,
                human_ns(t)
            );
        }
        let col_w = panel_w / modes.len().max(1) as f64;
        for (m, mode) in modes.iter().enumerate() {
            let Some(c) = r.config(mode, n) else {
                continue;
            };
            let cx = x0 + col_w * (m as f64 + 0.5);
            let colour = colour(mode);
            let s = &c.time_ns;
            let half = col_w * 0.3;
            let _ = writeln!(
                out,
                "<g><title>{} N={n}: median {}, p25–p75 {}–{}, min {}, max {}, {} samples</title>",
                xml_escape(mode_label(mode)),
                human_ns(s.median),
                human_ns(s.p25),
                human_ns(s.p75),
                human_ns(s.min),
                human_ns(s.max),
                s.samples
            );
            let _ = writeln!(
                out,
                "<line x1=\"{cx:.1}\" x2=\"{cx:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\"/>\
                 <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\"/>\
                 <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\"/>",
                y(s.min),
                y(s.max),
                cx - half / 2.0,
                cx + half / 2.0,
                y(s.min),
                y(s.min),
                cx - half / 2.0,
                cx + half / 2.0,
                y(s.max),
                y(s.max),
            );
            let _ = writeln!(
                out,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\" \
                 fill-opacity=\"0.12\" stroke=\"{colour}\"/><line x1=\"{:.1}\" x2=\"{:.1}\" \
                 y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-width=\"3\"/>",
                cx - half,
                y(s.p75),
                2.0 * half,
                (y(s.p25) - y(s.p75)).max(0.5),
                cx - half,
                cx + half,
                y(s.median),
                y(s.median),
            );
            for v in times(&r.samples, mode, n) {
                let dx = (jitter.next_u64() as f64 / u64::MAX as f64 - 0.5) * half * 1.6;
                let _ = writeln!(
                    out,
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{colour}\" \
                     fill-opacity=\"0.55\"/>",
                    cx + dx,
                    y(v)
                );
            }
            let _ = writeln!(out, "</g>");
        }
        if let Some(ratio) = r.ratio("static_key", n) {
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#333\">textpoke ÷ \
                 static key: {}</text>",
                x0 + panel_w / 2.0,
                top + panel_h + 20.0,
                ratio_cell(Some(ratio))
            );
        }
    }
    let _ = writeln!(
        out,
        "<text transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\" \
         fill=\"#555\">time per batch</text>\n</svg>",
        top + panel_h / 2.0
    );
    out
}

/// Reads every console log of `dir` (`*.log`) and returns a report per arch found in them,
/// x86_64 first.
pub fn read_dir(dir: &Path) -> Result<Vec<ArchReport>, String> {
    let logs = crate::rundir::files(dir, crate::rundir::is_log)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    type Arch = (
        Vec<Sample>,
        Vec<Source>,
        Option<RetargetReport>,
        Option<crate::kbench::KbenchReport>,
        Option<crate::trapcost::TrapcostReport>,
    );
    let mut by_arch: BTreeMap<String, Arch> = BTreeMap::new();
    for log in logs {
        let bytes =
            std::fs::read(&log).map_err(|e| format!("cannot read {}: {e}", log.display()))?;
        let text = String::from_utf8_lossy(&bytes);
        let parsed = parse_log(&text);
        let (retarget, retarget_problems) = crate::retarget::parse_log(&text);
        let (kbench, kbench_problems) = crate::kbench::parse_log(&text);
        let (foreign, foreign_problems) = crate::trapcost::parse_log(&text);
        // One boot, one arch: the first sample of any kind names it.
        let Some(arch) = parsed
            .samples
            .first()
            .map(|s| &s.arch)
            .or_else(|| retarget.first().map(|s| &s.arch))
            .or_else(|| kbench.first().map(|s| &s.arch))
            .or_else(|| foreign.first().map(|s| &s.arch))
            .cloned()
        else {
            continue;
        };
        let seconds = std::fs::read_to_string(crate::rundir::report_of_log(&log))
            .ok()
            .and_then(|s| serde_json::from_str::<BootReport>(&s).ok())
            .map(|r| r.seconds);
        let entry = by_arch.entry(arch).or_default();
        entry.1.push(Source {
            log: log.display().to_string(),
            seconds,
            problems: parsed.problems,
        });
        entry.0.extend(parsed.samples);
        if !retarget.is_empty() || !retarget_problems.is_empty() {
            // Analysed once the arch's logs are all read; the problems name their log here.
            let part = entry.2.get_or_insert_with(RetargetReport::default);
            part.samples.extend(retarget);
            part.problems.extend(
                retarget_problems
                    .into_iter()
                    .map(|p| format!("{}: {p}", log.display())),
            );
        }
        if !kbench.is_empty() || !kbench_problems.is_empty() {
            let part = entry.3.get_or_insert_with(Default::default);
            part.samples.extend(kbench);
            part.problems.extend(
                kbench_problems
                    .into_iter()
                    .map(|p| format!("{}: {p}", log.display())),
            );
        }
        if !foreign.is_empty() || !foreign_problems.is_empty() {
            let part = entry.4.get_or_insert_with(Default::default);
            part.samples.extend(foreign);
            part.problems.extend(
                foreign_problems
                    .into_iter()
                    .map(|p| format!("{}: {p}", log.display())),
            );
        }
    }
    if by_arch.is_empty() {
        return Err(format!(
            "no `{}`, `{}`, `{}` or `{}` lines in any log of {}",
            PREFIX.trim_end(),
            crate::retarget::PREFIX.trim_end(),
            crate::kbench::PREFIX.trim_end(),
            crate::trapcost::PREFIX.trim_end(),
            dir.display()
        ));
    }
    let mut reports: Vec<ArchReport> = by_arch
        .into_iter()
        .map(|(arch, (samples, sources, retarget, kbench, foreign))| {
            let mut r = analyse(&arch, samples, sources);
            if let Some(part) = retarget {
                let mut done = crate::retarget::analyse(part.samples);
                done.problems = part.problems;
                // Without flips the CPUs come from the retarget samples.
                r.cpus = r
                    .cpus
                    .max(done.samples.iter().map(|s| s.cpus).max().unwrap_or(0));
                r.retarget = Some(done);
            }
            if let Some(part) = kbench {
                let mut done = crate::kbench::analyse(part.samples);
                done.problems = part.problems;
                r.kbench = Some(done);
            }
            if let Some(part) = foreign {
                let mut done = crate::trapcost::analyse(part.samples);
                done.problems = part.problems;
                // Without flips the CPUs come from these samples.
                r.cpus = r
                    .cpus
                    .max(done.samples.iter().map(|s| s.cpus).max().unwrap_or(0));
                r.foreign_traps = Some(done);
            }
            r
        })
        .collect();
    reports.sort_by_key(|r| r.arch != "x86_64");
    Ok(reports)
}

/// Writes `bench-ARCH.md`, `.json` and `.svg` for each report into `to`; returns their paths.
pub fn write(reports: &[ArchReport], to: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let mut written = Vec::new();
    for r in reports {
        let json = serde_json::to_string_pretty(r).map_err(|e| e.to_string())? + "\n";
        // No plot without flips (a boot that ran only the retarget benchmark).
        let svg = (!r.configs.is_empty()).then(|| svg(r));
        let files = [
            ("md", Some(markdown(r))),
            ("json", Some(json)),
            ("svg", svg),
        ];
        for (ext, text) in files.into_iter().filter_map(|(e, t)| Some((e, t?))) {
            let path = crate::rundir::bench_file(to, &r.arch, ext);
            std::fs::write(&path, text)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            written.push(path);
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(mode: &str, n: u32, round: u32, ns: u64, ipis: u64) -> Sample {
        Sample {
            arch: "x86_64".into(),
            cpus: 4,
            mode: mode.into(),
            n,
            round,
            rounds: 3,
            ns,
            on: round.is_multiple_of(2),
            syncs: if mode == TEXTPOKE { 3 } else { 0 },
            records: if mode == TEXTPOKE { u64::from(n) } else { 0 },
            call_ipis: ipis,
            stall_ns: 1000 * u64::from(round + 1),
            traps: None,
            parts: BTreeMap::new(),
            gaps: None,
        }
    }

    #[test]
    fn breakdown_takes_medians_per_part() {
        let mut samples = Vec::new();
        for round in 0..3u32 {
            let mut t = sample(TEXTPOKE, 256, round, 9000, 3);
            let k = u64::from(round);
            t.traps = Some(10 + k);
            t.parts = [
                ("guard", 1000 + k),
                ("sync1", 2000),
                ("tail", 0),
                ("total", 9000 + k * 1000),
            ]
            .iter()
            .map(|(p, v)| ((*p).to_owned(), *v))
            .collect();
            samples.push(t);
            samples.push(sample("static_key", 256, round, 3000, 3));
        }
        let r = analyse("x86_64", samples, Vec::new());
        let c = r.config(TEXTPOKE, 256).unwrap();
        assert_eq!(c.traps, Some(11.0));
        assert_eq!(c.parts.get("guard"), Some(&1001.0));
        assert_eq!(r.config("static_key", 256).unwrap().traps, None);
        let md = breakdown_markdown(&r).unwrap();
        // The tails took no time at any size: no column.
        assert!(md.contains("| N | commit | guards | sync 1 | rest | traps during the flip |"));
        // 10 µs total, 1 guards, 2 sync 1, 7 rest, 11 traps.
        assert!(md.contains("| 256 | 10 | 1 | 2 | 7 | 11 |"), "{md}");
        assert!(markdown(&r).contains(&md));
        // Without the breakdown (older logs), no table.
        let plain = analyse(
            "x86_64",
            vec![
                sample(TEXTPOKE, 1, 0, 10, 0),
                sample("static_key", 1, 0, 5, 0),
            ],
            Vec::new(),
        );
        assert_eq!(breakdown_markdown(&plain), None);
    }

    #[test]
    fn parses_sample_lines_of_a_console_log() {
        let log = "[    1.000000] textpoke-agent: mode bench\n\
            [   12.345678] textpoke-bench: {\"arch\":\"aarch64\",\"cpus\":4,\"mode\":\"textpoke\",\"n\":16,\"round\":0,\"rounds\":20,\"ns\":407941,\"on\":true,\"syncs\":2,\"records\":16,\"call_ipis\":12,\"stall_ns\":24254}\r\n\
            [   12.5] textpoke-bench: {\"arch\":\"arm64\",\"cpus\":4,\"mode\":\"idle\",\"n\":16,\"round\":0,\"ns\":10,\"syncs\":0,\"records\":0,\"call_ipis\":4,\"stall_ns\":1}\n\
            [   13.0] textpoke-bench: {\"arch\":\"arm64\",\"cpus\":4,\"mode\n\
            textpoke-bench: not json\n";
        let p = parse_log(log);
        assert_eq!(p.samples.len(), 2);
        assert_eq!(p.samples[0].arch, "arm64");
        assert_eq!(p.samples[0].ns, 407941);
        assert!(p.samples[0].on);
        assert_eq!((p.samples[1].rounds, p.samples[1].on), (0, false));
        assert_eq!(p.problems.len(), 2);
        assert!(p.problems[0].starts_with("line 4:"), "{:?}", p.problems);
    }

    #[test]
    fn analysis_subtracts_the_idle_baseline_and_compares_with_textpoke() {
        let mut samples = Vec::new();
        for round in 0..3 {
            let step = 2000 * u64::from(round);
            samples.push(sample(TEXTPOKE, 16, round, 300_000 + step, 15));
            samples.push(sample("static_key", 16, round, 100_000 + step, 13));
            samples.push(sample(IDLE, 16, round, 5_000, 6));
        }
        let r = analyse("x86_64", samples, Vec::new());
        assert_eq!(r.modes(), [TEXTPOKE, "static_key"]);
        assert_eq!(r.sizes(), [16]);
        let t = r.config(TEXTPOKE, 16).unwrap();
        assert_eq!(t.time_ns.median, 302_000.0);
        assert_eq!((t.call_ipis, t.syncs, t.records), (Some(9.0), 3.0, 16.0));
        assert_eq!(t.stall_max_ns, 3000);
        assert_eq!(r.config("static_key", 16).unwrap().call_ipis, Some(7.0));
        let ratio = r.ratio("static_key", 16).unwrap();
        assert!((ratio.ratio - 302.0 / 102.0).abs() < 1e-12);
        let ci = ratio.ci95.unwrap();
        assert!(ci.lo <= ratio.ratio && ratio.ratio <= ci.hi, "{ci:?}");
        assert!(ci.lo >= 300.0 / 104.0 && ci.hi <= 304.0 / 100.0, "{ci:?}");
        // The same samples give the same report.
        assert_eq!(analyse("x86_64", r.samples.clone(), Vec::new()), r);
        let md = markdown(&r);
        let row = md.lines().find(|l| l.starts_with("| 16 |")).unwrap();
        assert!(
            row.starts_with("| 16 | 3 | 302 (301–303) | 102 (101–103) | 2.96 ("),
            "{row}"
        );
        assert!(
            row.ends_with(") | 3 | 9 | 7 | 1.29 | 2 (3) | 2 (3) |"),
            "{row}"
        );
        assert!(
            md.contains("Fewer than 20 samples per mode: N=16: 3 (of 3 rounds planned)."),
            "{md}"
        );
        let svg = svg(&r);
        assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<circle").count(), 6);
        // arm64's layout: a row per mode.
        let mut arm = r.clone();
        arm.arch = "arm64".into();
        let md = markdown(&arm);
        assert!(
            md.contains("| 16 | upstream static key | 3 | 102 (101–103) | 2.96 ("),
            "{md}"
        );
        assert!(md.contains("| yes, 16 records per batch |"), "{md}");
    }

    #[test]
    fn axis_ticks_and_durations() {
        assert_eq!(log_ticks(1e4, 1e8), [1e4, 1e5, 1e6, 1e7, 1e8]);
        assert_eq!(log_ticks(8e6, 3.1e7), [8e6, 9e6, 1e7, 2e7, 3e7]);
        assert_eq!(log_ticks(9e6, 2.1e7), [9e6, 1e7, 2e7]);
        assert_eq!(human_ns(9_727_000.0), "9.7 ms");
        assert_eq!(human_ns(100_157_231_000.0), "100 s");
        assert_eq!(human_ns(2e7), "20 ms");
        assert_eq!(human_ns(500_000.0), "500 µs");
        assert_eq!(
            [0.554, 2.0, 26.5, 1201.27].map(ratio_text),
            ["0.55", "2.00", "26.5", "1201"]
        );
    }
}
