//! Foreign traps in the bench report: what a kprobe hit costs with textpoke loaded and idle
//! against without it, measured in the same boot (tools/agent/src/bench/trapcost.rs driving
//! samples/textpoke_trapcost.c). On x86 every kernel-mode `INT3` reaches textpoke's trap
//! handler before kprobes; on arm64 kprobes' `BRK` immediates never reach it, so there the
//! comparison is a control.
//!
//! The agent logs one `textpoke-trapcost: {json}` line per run: N calls of a probed function
//! and N of its unprobed twin, timed, with textpoke loaded or not, the two states interleaved
//! round by round. A run's cost per hit is `(probed_ns - unprobed_ns) / N`, the probe's cost
//! without the call's. Per state: the median over the runs with its 95% bootstrap interval;
//! then the ratio of the medians, loaded over not loaded, with its 95% bootstrap interval
//! (both sides resampled: [`crate::bench::stats::bootstrap_ratio_of_medians`]), held against the
//! goal that a hit costs at most [`GOAL`] times as much with textpoke loaded. The report says
//! whether the interval shows the goal met, not met, or cannot tell; it asserts nothing.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::bench::section::{
    listed, parse_lines, ratio_text, runner_arch, samples_text, write_problems, Headline,
    SampleSection, SEED,
};
use crate::bench::stats::{
    bootstrap_median, bootstrap_ratio_of_medians, fold_seed, median, Interval, Spread, RESAMPLES,
};

/// Prefix of a sample line in the guest's log (after the printk prefix).
pub const PREFIX: &str = "textpoke-trapcost: ";
/// At most this many times a hit's cost without textpoke, with textpoke loaded and idle.
pub const GOAL: f64 = 1.05;
/// The state with textpoke loaded.
pub const LOADED: &str = "textpoke_loaded";
/// The state without textpoke.
pub const ABSENT: &str = "no_textpoke";
/// The states, in the order the report shows them, with a label for people.
pub const MODES: [(&str, &str); 2] = [(LOADED, "loaded"), (ABSENT, "not loaded")];

/// One run, as the agent logged it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrapcostSample {
    /// Guest arch, as the runner names it.
    pub arch: String,
    /// Online CPUs.
    pub cpus: u32,
    /// Which round (one run per state per round).
    pub round: u32,
    /// Rounds planned.
    #[serde(default)]
    pub rounds: u32,
    /// [`LOADED`] or [`ABSENT`].
    pub mode: String,
    /// Calls of each function (never 0: [`parse_log`] refuses that).
    pub n: u64,
    /// The probed function's loop, in nanoseconds.
    pub probed_ns: u64,
    /// The unprobed twin's loop, in nanoseconds.
    pub unprobed_ns: u64,
    /// Hits the kprobe's pre-handler counted during the run.
    pub hits: u64,
    /// Hits its post-handler counted.
    pub post_hits: u64,
}

impl TrapcostSample {
    /// Whether the run measured one hit per call, through both handlers; if not it measured
    /// something else, and the statistics leave it out.
    pub fn valid(&self) -> bool {
        self.hits == self.n && self.post_hits == self.n
    }

    /// What a hit added to a call, in nanoseconds.
    pub fn per_hit_ns(&self) -> f64 {
        (self.probed_ns as f64 - self.unprobed_ns as f64) / self.n as f64
    }

    /// What a call of the unprobed twin cost, in nanoseconds.
    pub fn per_call_ns(&self) -> f64 {
        self.unprobed_ns as f64 / self.n as f64
    }
}

/// Reads the `textpoke-trapcost:` lines of a console log: the samples in log order, and the
/// lines that could not be read (`line N: why`).
pub fn parse_log(log: &str) -> (Vec<TrapcostSample>, Vec<String>) {
    parse_lines(log, PREFIX, |s: &mut TrapcostSample| {
        if !MODES.iter().any(|(m, _)| *m == s.mode) {
            return Err(format!("unknown mode {}", s.mode));
        }
        // No cost per hit without calls.
        if s.n == 0 {
            return Err("n is 0".into());
        }
        s.arch = runner_arch(&s.arch);
        Ok(())
    })
}

/// What one state came to, over its valid runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModeStats {
    /// [`LOADED`] or [`ABSENT`].
    pub mode: String,
    /// Rounds planned (the agent's), for comparing with the runs there are.
    pub rounds: u32,
    /// Cost per hit; its `samples` is the number of valid runs.
    pub per_hit_ns: Spread,
    /// The 95% bootstrap interval of the median per hit.
    pub median_ci95: Option<Interval>,
    /// Median cost of a call of the unprobed twin, in nanoseconds: what was subtracted.
    pub call_ns: f64,
    /// The bootstrap's seed.
    pub seed: u64,
}

/// Whether a ratio's interval shows the goal met.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The whole interval is at or below the goal.
    Met,
    /// The whole interval is above the goal.
    NotMet,
    /// The interval straddles the goal, or there is none: these runs cannot tell.
    NotSeparated,
}

impl Verdict {
    /// The verdict of an interval against `goal`.
    pub fn of(ci: Option<Interval>, goal: f64) -> Self {
        match ci {
            Some(ci) if ci.hi <= goal => Self::Met,
            Some(ci) if ci.lo > goal => Self::NotMet,
            _ => Self::NotSeparated,
        }
    }

    /// The words the report uses.
    pub fn text(self) -> &'static str {
        match self {
            Self::Met => "met",
            Self::NotMet => "not met",
            Self::NotSeparated => "not separated",
        }
    }
}

/// `median(loaded) / median(not loaded)` of the cost per hit, against the goal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrapcostRatio {
    /// The ratio of the medians.
    pub ratio: f64,
    /// Its 95% bootstrap interval.
    pub ci95: Option<Interval>,
    /// The most the goal allows.
    pub goal: f64,
    /// What the interval says of the goal.
    pub verdict: Verdict,
    /// Bootstrap resamples.
    pub resamples: usize,
    /// The bootstrap's seed.
    pub seed: u64,
}

/// The ratio of `median(loaded) / median(absent)` with its interval and verdict against
/// [`GOAL`]; `None` if a side is empty or `absent`'s median is not positive.
pub fn ratio_of(loaded: &[f64], absent: &[f64], seed: u64) -> Option<TrapcostRatio> {
    let (a, b) = (median(loaded)?, median(absent)?);
    if b <= 0.0 {
        return None;
    }
    let ci95 = bootstrap_ratio_of_medians(loaded, absent, RESAMPLES, seed);
    Some(TrapcostRatio {
        ratio: a / b,
        ci95,
        goal: GOAL,
        verdict: Verdict::of(ci95, GOAL),
        resamples: RESAMPLES,
        seed,
    })
}

/// The foreign-traps measurement of one arch: the `foreign_traps` part of `bench-ARCH.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrapcostReport {
    /// Per state with valid runs, in [`MODES`] order.
    pub stats: Vec<ModeStats>,
    /// Loaded over not loaded, if both have valid runs.
    pub ratio: Option<TrapcostRatio>,
    /// Every sample, in log order, the invalid ones too.
    pub samples: Vec<TrapcostSample>,
    /// Sample lines that could not be read (`LOG: line N: why`); [`analyse`] leaves this empty
    /// for the caller, who knows the logs.
    #[serde(default)]
    pub problems: Vec<String>,
}

fn seed_for(what: &str) -> u64 {
    fold_seed(SEED, &format!("foreign_traps {what}"))
}

fn per_hit(samples: &[TrapcostSample], mode: &str) -> Vec<f64> {
    samples
        .iter()
        .filter(|s| s.mode == mode && s.valid())
        .map(TrapcostSample::per_hit_ns)
        .collect()
}

/// Computes the statistics of one arch's samples.
pub fn analyse(samples: Vec<TrapcostSample>) -> TrapcostReport {
    let mut stats = Vec::new();
    for (mode, _) in MODES {
        let values = per_hit(&samples, mode);
        let Some(per_hit_ns) = Spread::of(&values) else {
            continue;
        };
        let of = || samples.iter().filter(move |s| s.mode == mode);
        let calls: Vec<f64> = of()
            .filter(|s| s.valid())
            .map(TrapcostSample::per_call_ns)
            .collect();
        let seed = seed_for(mode);
        stats.push(ModeStats {
            mode: mode.to_owned(),
            rounds: of().map(|s| s.rounds).max().unwrap_or(0),
            per_hit_ns,
            median_ci95: bootstrap_median(&values, RESAMPLES, seed),
            call_ns: median(&calls).unwrap_or(0.0),
            seed,
        });
    }
    let ratio = ratio_of(
        &per_hit(&samples, LOADED),
        &per_hit(&samples, ABSENT),
        seed_for("ratio"),
    );
    TrapcostReport {
        stats,
        ratio,
        samples,
        problems: Vec::new(),
    }
}

impl TrapcostReport {
    /// The statistics of a state.
    pub fn stats(&self, mode: &str) -> Option<&ModeStats> {
        self.stats.iter().find(|s| s.mode == mode)
    }

    /// The samples that did not count one hit per call, in log order.
    pub fn invalid(&self) -> Vec<&TrapcostSample> {
        self.samples.iter().filter(|s| !s.valid()).collect()
    }
}

fn label(mode: &str) -> &str {
    MODES
        .iter()
        .find(|(m, _)| *m == mode)
        .map_or(mode, |(_, l)| l)
}

/// A duration to three significant figures (`12.4 µs`, `987 ns`, `4.00 ns`): the states may
/// differ by a few percent, finer than the flips' tables show times.
fn ns3(ns: f64) -> String {
    let (v, unit) = if ns.abs() >= 1e6 {
        (ns / 1e6, "ms")
    } else if ns.abs() >= 1e3 {
        (ns / 1e3, "µs")
    } else {
        (ns, "ns")
    };
    format!("{} {unit}", ratio_text(v))
}

fn interval_text(ci: Option<Interval>, text: fn(f64) -> String) -> String {
    ci.map_or_else(
        || "no interval".to_owned(),
        |i| format!("{}–{}", text(i.lo), text(i.hi)),
    )
}

/// Invalid runs named in the report before the rest are only counted.
const INVALID_LISTED: usize = 8;

/// The Markdown section.
pub fn markdown(r: &TrapcostReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### Foreign traps: a kprobe hit with textpoke loaded and without\n"
    );
    if let Some(first) = r.samples.first() {
        let cpus = r.samples.iter().map(|s| s.cpus).max().unwrap_or(0);
        let rounds = r.samples.iter().map(|s| s.rounds).max().unwrap_or(0);
        let n = r.samples.iter().map(|s| s.n).max().unwrap_or(0);
        let _ = writeln!(
            out,
            "{}, {cpus} CPUs (QEMU TCG), {rounds} rounds of {n} hits, textpoke loaded and \
             unloaded (`delete_module`) in turn. {}\n",
            first.arch,
            if first.arch == "arm64" {
                "On arm64 kprobes' `BRK` immediates never reach textpoke's handler: this is the \
                 control, where the ratio should be 1."
            } else {
                "On x86 every kernel-mode `INT3` reaches textpoke's trap handler before kprobes, \
                 so textpoke's lookups are paid on every hit."
            }
        );
    }
    if r.stats.is_empty() {
        let _ = writeln!(out, "No valid runs.");
    } else {
        let _ = writeln!(
            out,
            "| textpoke | runs | per hit, median (95% CI) | IQR (p25–p75) | min–max | call alone |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
        for s in &r.stats {
            let t = &s.per_hit_ns;
            let _ = writeln!(
                out,
                "| {} | {} | {} ({}) | {}–{} | {}–{} | {} |",
                label(&s.mode),
                samples_text(t.samples, s.rounds),
                ns3(t.median),
                interval_text(s.median_ci95, ns3),
                ns3(t.p25),
                ns3(t.p75),
                ns3(t.min),
                ns3(t.max),
                ns3(s.call_ns),
            );
        }
    }
    match &r.ratio {
        Some(ratio) => {
            let _ = writeln!(out, "\n| loaded ÷ not loaded (95% CI) | goal | verdict |");
            let _ = writeln!(out, "|---:|---:|---|");
            let _ = writeln!(
                out,
                "| {} ({}) | ≤ {} | {} |",
                ratio_text(ratio.ratio),
                interval_text(ratio.ci95, ratio_text),
                ratio_text(ratio.goal),
                ratio.verdict.text()
            );
        }
        None if !r.stats.is_empty() => {
            let _ = writeln!(
                out,
                "\nNo ratio: it needs valid runs in both states and a positive median per hit \
                 without textpoke."
            );
        }
        None => {}
    }
    let invalid = r.invalid();
    if !invalid.is_empty() {
        let named = invalid.iter().map(|s| {
            format!(
                "{} round {}: {} and {} post-handler hits of {} calls",
                label(&s.mode),
                s.round,
                s.hits,
                s.post_hits,
                s.n
            )
        });
        let _ = writeln!(
            out,
            "\n**{} of {} runs did not count one hit per call** and are left out: {}.",
            invalid.len(),
            r.samples.len(),
            listed(named, INVALID_LISTED),
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "- Per hit: a run's probed loop less its unprobed loop (the same function, no probe), \
         over its N calls; \"call alone\" is the unprobed loop's median per call. The states \
         alternate round by round in the same boot."
    );
    let _ = writeln!(
        out,
        "- 95% CIs by percentile bootstrap ({RESAMPLES} resamples, SplitMix64 seeded per state \
         and for the ratio); the ratio's resamples draw both states."
    );
    let _ = writeln!(
        out,
        "- Goal: with textpoke loaded and idle a hit costs at most {} times as much as without \
         it. \"met\": the ratio's interval ends at or below {0}; \"not met\": it starts above; \
         \"not separated\": it straddles {0}, so these runs cannot tell.",
        ratio_text(GOAL)
    );
    let _ = writeln!(
        out,
        "- Under TCG the exceptions are emulated: the times are the emulator's, and the ratio \
         need not be what hardware shows."
    );
    write_problems(&mut out, &r.problems);
    out
}

impl SampleSection for TrapcostReport {
    type Sample = TrapcostSample;

    const PREFIX: &'static str = PREFIX;

    fn parse(text: &str) -> (Vec<TrapcostSample>, Vec<String>) {
        parse_log(text)
    }

    fn analysed(samples: Vec<TrapcostSample>) -> Self {
        analyse(samples)
    }

    fn samples(&self) -> &[TrapcostSample] {
        &self.samples
    }

    fn parts_mut(&mut self) -> (&mut Vec<TrapcostSample>, &mut Vec<String>) {
        (&mut self.samples, &mut self.problems)
    }

    fn arch_of(sample: &TrapcostSample) -> &str {
        &sample.arch
    }

    /// Without flips the CPUs come from these samples.
    fn cpus_of(sample: &TrapcostSample) -> Option<u32> {
        Some(sample.cpus)
    }

    fn section_markdown(&self) -> String {
        markdown(self)
    }

    fn section_headlines(&self) -> Vec<Headline> {
        self.ratio
            .iter()
            .map(|r| Headline {
                what: format!(
                    "a kprobe hit, textpoke loaded ÷ not loaded (goal ≤ {}: {})",
                    ratio_text(r.goal),
                    r.verdict.text()
                ),
                ratio: r.ratio,
                ci95: r.ci95,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::stats::SplitMix64;

    fn sample(mode: &str, round: u32, per_hit_ns: u64) -> TrapcostSample {
        let n = 1000;
        TrapcostSample {
            arch: "x86_64".into(),
            cpus: 4,
            round,
            rounds: 20,
            mode: mode.into(),
            n,
            probed_ns: n * (per_hit_ns + 3),
            unprobed_ns: n * 3,
            hits: n,
            post_hits: n,
        }
    }

    /// `count` costs per hit around `centre`, each within `spread` of it (uniform), from a
    /// fixed stream.
    fn noisy(rng: &mut SplitMix64, count: usize, centre: f64, spread: f64) -> Vec<f64> {
        (0..count)
            .map(|_| centre + spread * (2.0 * rng.next_u64() as f64 / u64::MAX as f64 - 1.0))
            .collect()
    }

    #[test]
    fn parses_sample_lines_of_a_console_log() {
        let log = "[    1.0] textpoke-agent: mode bench\n\
            [   40.1] textpoke-trapcost: {\"arch\":\"aarch64\",\"cpus\":4,\"round\":0,\"rounds\":20,\"mode\":\"textpoke_loaded\",\"n\":20000,\"probed_ns\":400060000,\"unprobed_ns\":60000,\"hits\":20000,\"post_hits\":20000}\r\n\
            [   40.2] textpoke-trapcost: {\"arch\":\"arm64\",\"cpus\":4,\"round\":0,\"mode\":\"no_textpoke\",\"n\":20000,\"probed_ns\":2,\"unprobed_ns\":1,\"hits\":19999,\"post_hits\":20000}\n\
            [   40.3] textpoke-trapcost: {\"arch\":\"arm64\",\"cpus\":4,\"round\":1,\"mode\":\"textpoke_idle\",\"n\":1,\"probed_ns\":2,\"unprobed_ns\":1,\"hits\":1,\"post_hits\":1}\n\
            [   40.4] textpoke-trapcost: {\"arch\":\"arm64\",\"cpus\":4,\"round\":1,\"mode\":\"no_textpoke\",\"n\":0,\"probed_ns\":2,\"unprobed_ns\":1,\"hits\":0,\"post_hits\":0}\n\
            [   40.5] textpoke-trapcost: {\"arch\":\"arm64\",\"cpus\":4,\"round\":1,\"mode\n\
            [   40.6] textpoke-bench: {\"arch\":\"arm64\",\"cpus\":4,\"mode\":\"idle\",\"n\":16,\"round\":0,\"ns\":10,\"syncs\":0,\"records\":0,\"call_ipis\":4,\"stall_ns\":1}\n";
        let (samples, problems) = parse_log(log);
        assert_eq!(samples.len(), 2, "{samples:?}");
        let s = &samples[0];
        assert_eq!((s.arch.as_str(), s.mode.as_str()), ("arm64", LOADED));
        assert_eq!((s.round, s.rounds, s.n), (0, 20, 20000));
        assert!(s.valid());
        assert_eq!(s.per_hit_ns(), 20_000.0);
        assert_eq!(s.per_call_ns(), 3.0);
        // `rounds` may be missing; an invalid run is read (and flagged), not dropped.
        assert_eq!(samples[1].rounds, 0);
        assert!(!samples[1].valid());
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert_eq!(problems[0], "line 4: unknown mode textpoke_idle");
        assert_eq!(problems[1], "line 5: n is 0");
        assert!(problems[2].starts_with("line 6:"), "{problems:?}");
        // Neither of the other sections' parsers takes these lines, nor this one theirs.
        assert_eq!(crate::bench::flips::parse_log(log).samples.len(), 1);
        assert!(crate::bench::flips::parse_log(log).problems.is_empty());
    }

    #[test]
    fn identical_distributions_give_a_ratio_near_1() {
        let mut rng = SplitMix64::new(7);
        let loaded = noisy(&mut rng, 20, 10_000.0, 500.0);
        let absent = noisy(&mut rng, 20, 10_000.0, 500.0);
        let r = ratio_of(&loaded, &absent, 1).unwrap();
        let ci = r.ci95.unwrap();
        assert!((r.ratio - 1.0).abs() < 0.05, "{r:?}");
        assert!(ci.lo <= 1.0 && 1.0 <= ci.hi, "{r:?}");
        assert!(ci.lo <= r.ratio && r.ratio <= ci.hi, "{r:?}");
        // ±20% noise over 20 runs a side cannot place the ratio within 5% of 1.
        let loaded = noisy(&mut rng, 20, 10_000.0, 2_000.0);
        let absent = noisy(&mut rng, 20, 10_000.0, 2_000.0);
        let r = ratio_of(&loaded, &absent, 1).unwrap();
        let ci = r.ci95.unwrap();
        assert!(ci.lo <= 1.0 && 1.0 <= ci.hi && ci.hi > GOAL, "{r:?}");
        assert_eq!(r.verdict, Verdict::NotSeparated, "{r:?}");
        // ±0.5% can.
        let loaded = noisy(&mut rng, 20, 10_000.0, 50.0);
        let absent = noisy(&mut rng, 20, 10_000.0, 50.0);
        let r = ratio_of(&loaded, &absent, 1).unwrap();
        assert!(r.ci95.unwrap().hi <= GOAL, "{r:?}");
        assert_eq!(r.verdict, Verdict::Met);
        // The same samples and seed, the same interval.
        assert_eq!(ratio_of(&loaded, &absent, 1), Some(r));
    }

    #[test]
    fn a_ten_percent_shift_is_detected() {
        let mut rng = SplitMix64::new(11);
        let loaded = noisy(&mut rng, 20, 11_000.0, 300.0);
        let absent = noisy(&mut rng, 20, 10_000.0, 300.0);
        let r = ratio_of(&loaded, &absent, 2).unwrap();
        let ci = r.ci95.unwrap();
        assert!((r.ratio - 1.1).abs() < 0.03, "{r:?}");
        assert!(ci.lo > GOAL, "{r:?}");
        assert_eq!(r.verdict, Verdict::NotMet);
        // The other way round it is as clear: textpoke cheaper.
        let r = ratio_of(&absent, &loaded, 2).unwrap();
        assert!(r.ci95.unwrap().hi < 1.0, "{r:?}");
        assert_eq!(r.verdict, Verdict::Met);
    }

    #[test]
    fn durations_keep_three_figures() {
        assert_eq!(
            [4.0, 987.4, 1_234.0, 12_380.0, 123_456.0, 2_500_000.0].map(ns3),
            ["4.00 ns", "987 ns", "1.23 µs", "12.4 µs", "123 µs", "2.50 ms"]
        );
    }

    #[test]
    fn verdicts_follow_the_interval() {
        let v = |lo, hi| Verdict::of(Some(Interval { lo, hi }), GOAL);
        assert_eq!(v(0.98, 1.05), Verdict::Met);
        assert_eq!(v(1.0, 1.06), Verdict::NotSeparated);
        assert_eq!(v(1.05, 1.2), Verdict::NotSeparated);
        assert_eq!(v(1.06, 1.2), Verdict::NotMet);
        assert_eq!(Verdict::of(None, GOAL), Verdict::NotSeparated);
        assert_eq!(ratio_of(&[], &[1.0], 1), None);
        assert_eq!(ratio_of(&[1.0], &[0.0, -1.0, 0.0], 1), None);
    }

    #[test]
    fn report_leaves_invalid_runs_out_and_says_so() {
        let mut samples = Vec::new();
        for round in 0..5u32 {
            let step = u64::from(round);
            samples.push(sample(LOADED, round, 10_300 + step));
            samples.push(sample(ABSENT, round, 10_000 + step));
        }
        // A run whose probe missed a hit: its cost would be a probed loop with one call fewer
        // trapping, so it is left out.
        let mut missed = sample(LOADED, 5, 1);
        missed.hits -= 1;
        samples.push(missed);
        let r = analyse(samples);
        assert_eq!(r.invalid().len(), 1);
        let loaded = r.stats(LOADED).unwrap();
        assert_eq!(loaded.per_hit_ns.samples, 5);
        assert_eq!(loaded.per_hit_ns.median, 10_302.0);
        assert_eq!(loaded.call_ns, 3.0);
        let ci = loaded.median_ci95.unwrap();
        assert!(ci.lo >= 10_300.0 && ci.hi <= 10_304.0, "{ci:?}");
        assert_eq!(r.stats(ABSENT).unwrap().per_hit_ns.median, 10_002.0);
        let ratio = r.ratio.as_ref().unwrap();
        assert!((ratio.ratio - 10_302.0 / 10_002.0).abs() < 1e-12);
        assert_eq!(ratio.verdict, Verdict::Met);
        assert_ne!(loaded.seed, r.stats(ABSENT).unwrap().seed);
        assert_ne!(loaded.seed, ratio.seed);
        // The same samples give the same report.
        assert_eq!(analyse(r.samples.clone()), r);
        let md = markdown(&r);
        assert!(
            md.starts_with("### Foreign traps: a kprobe hit with textpoke loaded and without\n"),
            "{md}"
        );
        assert!(
            md.contains("x86_64, 4 CPUs (QEMU TCG), 20 rounds of 1000 hits"),
            "{md}"
        );
        assert!(
            md.contains("| loaded | 5 of 20 | 10.3 µs (10.3 µs–10.3 µs) | 10.3 µs–10.3 µs |"),
            "{md}"
        );
        assert!(md.contains("| 3.00 ns |"), "{md}");
        assert!(md.contains("| 1.03 (1.03–1.03) | ≤ 1.05 | met |"), "{md}");
        assert!(
            md.contains(
                "**1 of 11 runs did not count one hit per call** and are left out: loaded \
                 round 5: 999 and 1000 post-handler hits of 1000 calls."
            ),
            "{md}"
        );
        // One state only: no ratio, and it says why.
        let one = analyse(vec![sample(ABSENT, 0, 5)]);
        assert_eq!(one.ratio, None);
        assert!(markdown(&one).contains("No ratio:"));
        let none = analyse(Vec::new());
        assert!(markdown(&none).contains("No valid runs."));
    }
}
