//! The flips in the bench report: reads the samples the guest agent logged
//! (`textpoke-bench: {json}` lines, one per flip: tools/agent/src/bench/mod.rs) and the executors'
//! gap histograms joined to them (bench/gaps.rs), and per arch takes the spread of every (mode, N),
//! the ratio of textpoke's median time to every other mode's with a bootstrap confidence
//! interval, and the breakdown of textpoke's commits (bench/breakdown.rs). The bootstrap is seeded
//! per (N, mode) from the report's seed, so a report is reproducible from its samples.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::bench::breakdown;
use crate::bench::gaps;
use crate::bench::section::{
    parse_lines, ratio_ci_text, runner_arch, us, Headline, Log, Section, SEED,
};
use crate::bench::stats::{
    bootstrap_ratio_of_medians, fold_seed, median, Interval, Spread, RESAMPLES,
};

/// Prefix of a sample line in the guest's log (after the printk prefix).
pub const PREFIX: &str = "textpoke-bench: ";
/// Samples per mode and size the bench aims for; fewer is pointed out in the report.
pub const MIN_SAMPLES: usize = 20;
/// textpoke with nobody listening (the quiet path): the mode the others are compared with.
pub const TEXTPOKE: &str = "textpoke";
/// textpoke with a tracer listening (guarded and recorded), compared with the others too.
pub const LISTENED: &str = "textpoke_listened";
/// The baseline mode: everything but the patching.
pub const IDLE: &str = "idle";
/// The modes, in the order tables and plots show them, with a label for people.
pub const MODES: [(&str, &str); 5] = [
    (TEXTPOKE, "textpoke, nobody listening"),
    (LISTENED, "textpoke, a tracer listening"),
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
    /// bench/gaps.rs), if the log has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gaps: Option<gaps::Gaps>,
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
    problems.extend(gaps::attach(log, &mut samples));
    Parsed { samples, problems }
}

impl gaps::Flip for Sample {
    fn key(&self) -> (&str, &str, u32, u32) {
        (&self.arch, &self.mode, self.n, self.round)
    }

    fn gaps(&self) -> Option<&gaps::Gaps> {
        self.gaps.as_ref()
    }

    fn gaps_mut(&mut self) -> &mut Option<gaps::Gaps> {
        &mut self.gaps
    }

    fn engine_traps(&self) -> Option<u64> {
        self.traps
    }
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
    /// histograms (bench/gaps.rs), if the samples carry them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trapped: Option<gaps::Trapped>,
}

/// One of textpoke's modes' median time over another mode's at one N, with its confidence
/// interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    /// Sites per flip.
    pub n: u32,
    /// textpoke's mode ([`TEXTPOKE`] or [`LISTENED`]; reports written before the listener
    /// had only the first).
    #[serde(default = "textpoke_mode")]
    pub of: String,
    /// The mode it is compared with.
    pub mode: String,
    /// `median(of) / median(mode)`.
    pub ratio: f64,
    /// Its 95% bootstrap interval.
    pub ci95: Option<Interval>,
    /// Bootstrap resamples.
    pub resamples: usize,
    /// The bootstrap's seed.
    pub seed: u64,
}

fn textpoke_mode() -> String {
    TEXTPOKE.to_owned()
}

/// The comparisons the report makes: each of textpoke's modes against every other mode but
/// itself and `idle`, and nobody listening against the listened mode only from its side.
fn comparisons() -> impl Iterator<Item = (&'static str, &'static str)> {
    [TEXTPOKE, LISTENED].into_iter().flat_map(|of| {
        MODES
            .iter()
            .map(|(m, _)| *m)
            .filter(move |&m| m != of && !(of == TEXTPOKE && m == LISTENED))
            .map(move |m| (of, m))
    })
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

/// The flips of one arch: their part of `DIR/bench/bench-ARCH.json`, whose fields are at its
/// top level.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlipsReport {
    /// Where the samples came from: every log of the arch, whatever it had.
    pub sources: Vec<Source>,
    /// Per (mode, N), modes in [`MODES`] order then `idle`, N ascending.
    pub configs: Vec<ConfigStats>,
    /// Per N and comparison (`comparisons`).
    pub ratios: Vec<Ratio>,
    /// Every sample, in log order.
    pub samples: Vec<Sample>,
}

/// Where a mode goes in tables and plots: [`MODES`] order, then `idle`, then any other.
pub(crate) fn mode_rank(mode: &str) -> usize {
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

/// The bootstrap's seed of a comparison.
fn seed_for(n: u32, of: &str, mode: &str) -> u64 {
    fold_seed(SEED ^ u64::from(n), &format!("{of} {mode}"))
}

/// The times of the flips of (mode, N), in nanoseconds, in log order.
pub(crate) fn times(samples: &[Sample], mode: &str, n: u32) -> Vec<f64> {
    samples
        .iter()
        .filter(|s| s.mode == mode && s.n == n)
        .map(|s| s.ns as f64)
        .collect()
}

/// Computes the statistics of one arch's samples.
pub fn analyse(samples: Vec<Sample>, sources: Vec<Source>) -> FlipsReport {
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
            parts: breakdown::median_parts(&of.iter().map(|s| &s.parts).collect::<Vec<_>>()),
            trapped: gaps::trapped(&of),
        });
    }
    let mut ratios = Vec::new();
    let sizes: BTreeSet<u32> = samples.iter().map(|s| s.n).collect();
    for &n in &sizes {
        for (of, mode) in comparisons() {
            let tp = times(&samples, of, n);
            let other = times(&samples, mode, n);
            let (Some(a), Some(b)) = (median(&tp), median(&other)) else {
                continue;
            };
            if b <= 0.0 {
                continue;
            }
            let seed = seed_for(n, of, mode);
            ratios.push(Ratio {
                n,
                of: of.to_owned(),
                mode: mode.to_owned(),
                ratio: a / b,
                ci95: bootstrap_ratio_of_medians(&tp, &other, RESAMPLES, seed),
                resamples: RESAMPLES,
                seed,
            });
        }
    }
    FlipsReport {
        sources,
        configs,
        ratios,
        samples,
    }
}

impl FlipsReport {
    /// The statistics of (mode, N).
    pub fn config(&self, mode: &str, n: u32) -> Option<&ConfigStats> {
        self.configs.iter().find(|c| c.mode == mode && c.n == n)
    }

    /// textpoke's mode `of`'s ratio to `mode` at `n`.
    pub fn ratio(&self, of: &str, mode: &str, n: u32) -> Option<&Ratio> {
        self.ratios
            .iter()
            .find(|r| r.of == of && r.mode == mode && r.n == n)
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

    /// The breakdown of textpoke's commits in `arch` (bench/breakdown.rs), if the samples carry it.
    fn breakdown_markdown(&self, arch: &str) -> Option<String> {
        let rows: Vec<breakdown::Row> = self
            .configs
            .iter()
            .filter(|c| c.mode == TEXTPOKE)
            .map(|c| breakdown::Row {
                n: c.n,
                parts: &c.parts,
                traps: c.traps,
            })
            .collect();
        breakdown::markdown(arch, &rows)
    }

    /// The trap-work table of `arch` (bench/gaps.rs), if the samples carry histograms.
    fn gaps_markdown(&self, arch: &str) -> Option<String> {
        let rows: Vec<gaps::Row> = self
            .configs
            .iter()
            .filter(|c| c.mode != IDLE)
            .filter_map(|c| {
                Some(gaps::Row {
                    n: c.n,
                    mode: mode_label(&c.mode),
                    trapped: c.trapped.as_ref()?,
                })
            })
            .collect();
        gaps::markdown(arch, &rows)
    }

    /// The flips' Markdown for `arch` (`cpus` CPUs): a heading, the table, and what it rests
    /// on; then the breakdown and the trap work, where the samples carry them.
    fn flips_markdown(&self, arch: &str, cpus: u32) -> String {
        let mut out = String::new();
        let sizes = self.sizes();
        let modes = self.modes();
        let _ = writeln!(
            out,
            "### {arch}, {cpus} CPUs (QEMU TCG): time per batch, median (p25–p75) over the samples, IPIs per batch\n"
        );
        let _ = writeln!(
            out,
            "| N | mode | samples | µs/batch | textpoke ÷ mode (95% CI) | \
             textpoke listened ÷ mode (95% CI) | syncs | call IPIs/batch | stall µs | \
             TEXT_POKE stream |"
        );
        let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|");
        for &n in &sizes {
            for mode in &modes {
                let Some(c) = self.config(mode, n) else {
                    continue;
                };
                // The listened mode is compared with nobody listening from its own side only.
                let against = |of: &str| match (of, *mode) {
                    _ if *mode == of => "1".to_owned(),
                    (TEXTPOKE, LISTENED) => "–".to_owned(),
                    _ => ratio_cell(self.ratio(of, mode, n)),
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
                    "| {n} | {} | {} | {} | {} | {} | {:.0} | {} | {} | {stream} |",
                    mode_label(mode),
                    c.time_ns.samples,
                    spread_cell(&c.time_ns),
                    against(TEXTPOKE),
                    against(LISTENED),
                    c.syncs,
                    ipis_cell(c),
                    stall_cell(c),
                );
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
            "- Time ratio: textpoke's median (nobody listening, or a tracer listening: a \
             `text_poke` perf event open around the flip) over the other's; 95% CI by percentile \
             bootstrap \
             ({RESAMPLES} resamples of each side, SplitMix64 seeded per N and comparison)."
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
                let of_n = || self.configs.iter().filter(|c| c.n == n && c.mode != IDLE);
                let fewest = of_n().map(|c| c.time_ns.samples).min()?;
                let planned = of_n().map(|c| c.rounds).max().unwrap_or(0);
                (fewest < MIN_SAMPLES)
                    .then(|| format!("N={n}: {fewest} (of {planned} rounds planned)"))
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
        for s in &self.sources {
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
        if let Some(breakdown) = self.breakdown_markdown(arch) {
            let _ = writeln!(out);
            out.push_str(&breakdown);
        }
        if let Some(traps) = self.gaps_markdown(arch) {
            let _ = writeln!(out);
            out.push_str(&traps);
        }
        out
    }
}

/// A ratio's cell: the ratio with its interval, or `n/a` without a ratio.
pub(crate) fn ratio_cell(r: Option<&Ratio>) -> String {
    r.map_or_else(|| "n/a".into(), |r| ratio_ci_text(r.ratio, r.ci95))
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

impl Section for FlipsReport {
    fn prefix() -> &'static str {
        PREFIX
    }

    /// Every log of the arch is a source of its report, with the flips' unreadable lines of it,
    /// even if it has no flip: so a log has a part here whenever the arch's report takes it.
    fn read(log: &Log) -> Option<Self> {
        let parsed = parse_log(log.text);
        Some(Self {
            sources: vec![Source {
                log: log.path.display().to_string(),
                seconds: log.seconds,
                problems: parsed.problems,
            }],
            samples: parsed.samples,
            ..Self::default()
        })
    }

    fn arch(&self) -> Option<&str> {
        self.samples.first().map(|s| s.arch.as_str())
    }

    fn merge(&mut self, other: Self) {
        self.sources.extend(other.sources);
        self.samples.extend(other.samples);
    }

    fn analyse(&mut self) {
        let samples = std::mem::take(&mut self.samples);
        let sources = std::mem::take(&mut self.sources);
        *self = analyse(samples, sources);
    }

    fn cpus(&self) -> Option<u32> {
        self.samples.iter().map(|s| s.cpus).max()
    }

    /// A boot may have run the other benchmarks only: no empty flips table then.
    fn markdown(&self, arch: &str, cpus: u32) -> Option<String> {
        (!self.configs.is_empty()).then(|| self.flips_markdown(arch, cpus))
    }

    fn headlines(&self) -> Vec<Headline> {
        self.ratios
            .iter()
            .map(|r| Headline {
                what: format!(
                    "flip time, {} ÷ {}, N = {}",
                    mode_label(&r.of),
                    mode_label(&r.mode),
                    r.n
                ),
                ratio: r.ratio,
                ci95: r.ci95,
            })
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A flip of `mode` on x86_64 at 4 CPUs.
    pub(crate) fn sample(mode: &str, n: u32, round: u32, ns: u64, ipis: u64) -> Sample {
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
        let r = analyse(samples, Vec::new());
        let c = r.config(TEXTPOKE, 256).unwrap();
        assert_eq!(c.traps, Some(11.0));
        assert_eq!(c.parts.get("guard"), Some(&1001.0));
        assert_eq!(r.config("static_key", 256).unwrap().traps, None);
        let md = r.breakdown_markdown("x86_64").unwrap();
        // The tails took no time at any size: no column.
        assert!(md.contains("| N | commit | guards | sync 1 | rest | traps during the flip |"));
        // 10 µs total, 1 guards, 2 sync 1, 7 rest, 11 traps.
        assert!(md.contains("| 256 | 10 | 1 | 2 | 7 | 11 |"), "{md}");
        assert!(r.flips_markdown("x86_64", 4).contains(&md));
        // Without the breakdown (older logs), no table.
        let plain = analyse(
            vec![
                sample(TEXTPOKE, 1, 0, 10, 0),
                sample("static_key", 1, 0, 5, 0),
            ],
            Vec::new(),
        );
        assert_eq!(plain.breakdown_markdown("x86_64"), None);
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

    /// Three rounds at N = 16 of textpoke (300 µs, 15 IPIs), textpoke listened (600 µs, 15
    /// IPIs), the static key (100 µs, 13 IPIs) and idle (5 µs, 6 IPIs), the times 2 µs longer
    /// each round.
    pub(crate) fn idle_baseline_samples() -> Vec<Sample> {
        let mut samples = Vec::new();
        for round in 0..3 {
            let step = 2000 * u64::from(round);
            let mut quiet = sample(TEXTPOKE, 16, round, 300_000 + step, 15);
            quiet.records = 0;
            samples.push(quiet);
            let mut listened = sample(LISTENED, 16, round, 600_000 + step, 15);
            (listened.syncs, listened.records) = (3, 16);
            samples.push(listened);
            samples.push(sample("static_key", 16, round, 100_000 + step, 13));
            samples.push(sample(IDLE, 16, round, 5_000, 6));
        }
        samples
    }

    #[test]
    fn analysis_subtracts_the_idle_baseline_and_compares_with_textpoke() {
        let r = analyse(idle_baseline_samples(), Vec::new());
        assert_eq!(r.modes(), [TEXTPOKE, LISTENED, "static_key"]);
        assert_eq!(r.sizes(), [16]);
        let t = r.config(TEXTPOKE, 16).unwrap();
        assert_eq!(t.time_ns.median, 302_000.0);
        assert_eq!((t.call_ipis, t.syncs, t.records), (Some(9.0), 3.0, 0.0));
        assert_eq!(t.stall_max_ns, 3000);
        assert_eq!(r.config("static_key", 16).unwrap().call_ipis, Some(7.0));
        let ratio = r.ratio(TEXTPOKE, "static_key", 16).unwrap();
        assert!((ratio.ratio - 302.0 / 102.0).abs() < 1e-12);
        let ci = ratio.ci95.unwrap();
        assert!(ci.lo <= ratio.ratio && ratio.ratio <= ci.hi, "{ci:?}");
        assert!(ci.lo >= 300.0 / 104.0 && ci.hi <= 304.0 / 100.0, "{ci:?}");
        // The listened mode against the static key and against nobody listening; not the
        // other way round.
        let listened = r.ratio(LISTENED, "static_key", 16).unwrap();
        assert!((listened.ratio - 602.0 / 102.0).abs() < 1e-12);
        let cost = r.ratio(LISTENED, TEXTPOKE, 16).unwrap();
        assert!((cost.ratio - 602.0 / 302.0).abs() < 1e-12);
        assert!(r.ratio(TEXTPOKE, LISTENED, 16).is_none());
        assert_ne!(listened.seed, ratio.seed);
        // The same samples give the same report.
        assert_eq!(analyse(r.samples.clone(), Vec::new()), r);
        let md = r.flips_markdown("x86_64", 4);
        let row = |label: &str| {
            let head = format!("| 16 | {label} |");
            md.lines()
                .find(|l| l.starts_with(&head))
                .unwrap_or_else(|| panic!("no {head} in {md}"))
                .to_owned()
        };
        let quiet = row("textpoke, nobody listening");
        assert!(
            quiet.contains("| 3 | 302 (301–303) | 1 | 1.99 ("),
            "{quiet}"
        );
        assert!(quiet.ends_with(") | 3 | 9 | 2 (3) | none |"), "{quiet}");
        let traced = row("textpoke, a tracer listening");
        assert!(traced.contains("| 602 (601–603) | – | 1 | 3 |"), "{traced}");
        assert!(
            traced.ends_with("| yes, 16 records per batch |"),
            "{traced}"
        );
        let key = row("upstream static key");
        assert!(key.contains("| 102 (101–103) | 2.96 ("), "{key}");
        assert!(key.contains(") | 5.90 ("), "{key}");
        assert!(
            md.contains("Fewer than 20 samples per mode: N=16: 3 (of 3 rounds planned)."),
            "{md}"
        );
    }
}
