//! The measurement of the commit that added the ioctl (32ff77e8cc, "perf/core: Implement fast
//! breakpoint modification via _IOC_MODIFY_ATTRIBUTES"), in the bench report: moving a hardware
//! breakpoint with `PERF_EVENT_IOC_MODIFY_ATTRIBUTES` ("modify") against closing the perf event and opening a
//! new one with a fresh ring buffer ("reopen"). The commit that added the ioctl reports it
//! about 10 times cheaper when the breakpoint never traps and about 4 times when it traps once
//! per retarget.
//!
//! The guest agent logs one `textpoke-retarget: {json}` line per sample (tools/agent/src/
//! retarget.rs): `n` retargets of one method, for one traps kind, the two methods interleaved
//! round by round. This module reads those lines, takes the spread of the time per retarget
//! per (traps, method), and per traps kind the ratio of the medians, reopen over modify, with
//! the same percentile bootstrap as the flips' ratios (see bench/stats.rs).

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::bench::section::{
    human_ns, listed, parse_lines, ratio_ci_text, runner_arch, samples_text, write_problems,
    Headline, SampleSection, SEED,
};
use crate::bench::stats::{
    bootstrap_ratio_of_medians, fold_seed, median, Interval, Spread, RESAMPLES,
};

/// Prefix of a sample line in the guest's log (after the printk prefix).
pub const PREFIX: &str = "textpoke-retarget: ";

/// Whether the breakpoint fires while it is being moved around.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Traps {
    /// The watched addresses never run: the retarget alone.
    Never,
    /// The agent runs the watched address once after each retarget: one debug exception and
    /// one perf sample per retarget.
    Always,
}

impl Traps {
    /// Both kinds, in the order the report shows them.
    pub const ALL: [Self; 2] = [Self::Never, Self::Always];

    /// The name the agent logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Never => "never",
            Self::Always => "always",
        }
    }

    /// The hits a sample of `n` retargets must find in the ring buffer: one per retarget if
    /// the breakpoint traps, none if it does not.
    pub fn expected_hits(self, n: u32) -> u64 {
        match self {
            Self::Never => 0,
            Self::Always => u64::from(n),
        }
    }
}

/// How the breakpoint moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// `PERF_EVENT_IOC_MODIFY_ATTRIBUTES` on the open event.
    Modify,
    /// `munmap` and `close`, then `perf_event_open` and `mmap`: what a tool did before the
    /// ioctl.
    Reopen,
}

impl Method {
    /// Both methods, in the order the report shows them.
    pub const ALL: [Self; 2] = [Self::Modify, Self::Reopen];

    /// The name the agent logs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Modify => "modify",
            Self::Reopen => "reopen",
        }
    }
}

/// One sample, as the agent logged it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetargetSample {
    /// Guest arch, as the runner names it (`x86_64`, `arm64`).
    pub arch: String,
    /// Online CPUs.
    pub cpus: u32,
    /// Whether the breakpoint traps.
    pub traps: Traps,
    /// How it moves.
    pub method: Method,
    /// Which round (every method samples once per round, in turn).
    pub round: u32,
    /// Rounds planned per traps kind.
    #[serde(default)]
    pub rounds: u32,
    /// Retargets in this sample (never 0: [`parse_log`] refuses that).
    pub n: u32,
    /// Wall time of all `n` retargets, in nanoseconds.
    pub ns: u64,
    /// Breakpoint samples the agent found in the ring buffer during this sample.
    pub hits: u64,
}

impl RetargetSample {
    /// Nanoseconds per retarget.
    pub fn per_retarget_ns(&self) -> f64 {
        self.ns as f64 / f64::from(self.n)
    }

    /// Whether the hits are what the traps kind says they must be; if not, the sample did not
    /// measure what it claims (a breakpoint that never fired, or one that fired when it should
    /// not have).
    pub fn hits_as_expected(&self) -> bool {
        self.hits == self.traps.expected_hits(self.n)
    }
}

/// Reads the `textpoke-retarget:` lines of a console log: the samples in log order, and the
/// lines that could not be read (`line N: why`).
pub fn parse_log(log: &str) -> (Vec<RetargetSample>, Vec<String>) {
    parse_lines(log, PREFIX, |s: &mut RetargetSample| {
        // No time per retarget without retargets.
        if s.n == 0 {
            return Err("n is 0".into());
        }
        s.arch = runner_arch(&s.arch);
        Ok(())
    })
}

/// What one (traps, method) came to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetargetStats {
    /// Whether the breakpoint trapped.
    pub traps: Traps,
    /// How it moved.
    pub method: Method,
    /// Rounds planned (the agent's), for comparing with the samples there are.
    pub rounds: u32,
    /// Time per retarget (a sample's `ns / n`), in nanoseconds; its `samples` is the number
    /// of samples.
    pub per_retarget_ns: Spread,
    /// Median hits per sample.
    pub hits: f64,
}

/// `median(reopen) / median(modify)` of the time per retarget for one traps kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetargetRatio {
    /// Whether the breakpoint trapped.
    pub traps: Traps,
    /// How many times cheaper the ioctl is.
    pub ratio: f64,
    /// Its 95% bootstrap interval.
    pub ci95: Option<Interval>,
    /// Bootstrap resamples.
    pub resamples: usize,
    /// The bootstrap's seed.
    pub seed: u64,
}

/// The retarget benchmark of one arch: the `retarget` part of `bench-ARCH.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RetargetReport {
    /// Per (traps, method), in [`Traps::ALL`] then [`Method::ALL`] order.
    pub stats: Vec<RetargetStats>,
    /// Per traps kind that has samples of both methods.
    pub ratios: Vec<RetargetRatio>,
    /// Every sample, in log order.
    pub samples: Vec<RetargetSample>,
    /// Sample lines that could not be read (`LOG: line N: why`); [`analyse`] leaves this
    /// empty for the caller, who knows the logs.
    #[serde(default)]
    pub problems: Vec<String>,
}

/// The bootstrap's seed for a traps kind: the report's [`SEED`] folded with the kind's name
/// (FNV-1a steps, as bench/flips.rs seeds each (N, mode)), so that each kind has its own stream and
/// a report is reproducible from its samples.
fn seed_for(traps: Traps) -> u64 {
    fold_seed(SEED, &format!("retarget {}", traps.name()))
}

fn per_retarget(samples: &[RetargetSample], traps: Traps, method: Method) -> Vec<f64> {
    samples
        .iter()
        .filter(|s| s.traps == traps && s.method == method)
        .map(RetargetSample::per_retarget_ns)
        .collect()
}

/// Computes the statistics of one arch's samples.
pub fn analyse(samples: Vec<RetargetSample>) -> RetargetReport {
    let mut stats = Vec::new();
    for traps in Traps::ALL {
        for method in Method::ALL {
            let Some(per_retarget_ns) = Spread::of(&per_retarget(&samples, traps, method)) else {
                continue;
            };
            let of = || {
                samples
                    .iter()
                    .filter(move |s| s.traps == traps && s.method == method)
            };
            stats.push(RetargetStats {
                traps,
                method,
                rounds: of().map(|s| s.rounds).max().unwrap_or(0),
                per_retarget_ns,
                hits: median(&of().map(|s| s.hits as f64).collect::<Vec<_>>()).unwrap_or(0.0),
            });
        }
    }
    let mut ratios = Vec::new();
    for traps in Traps::ALL {
        let reopen = per_retarget(&samples, traps, Method::Reopen);
        let modify = per_retarget(&samples, traps, Method::Modify);
        let (Some(a), Some(b)) = (median(&reopen), median(&modify)) else {
            continue;
        };
        if b <= 0.0 {
            continue;
        }
        let seed = seed_for(traps);
        ratios.push(RetargetRatio {
            traps,
            ratio: a / b,
            ci95: bootstrap_ratio_of_medians(&reopen, &modify, RESAMPLES, seed),
            resamples: RESAMPLES,
            seed,
        });
    }
    RetargetReport {
        stats,
        ratios,
        samples,
        problems: Vec::new(),
    }
}

impl RetargetReport {
    /// The statistics of (traps, method).
    pub fn stats(&self, traps: Traps, method: Method) -> Option<&RetargetStats> {
        self.stats
            .iter()
            .find(|s| s.traps == traps && s.method == method)
    }

    /// The ratio for a traps kind.
    pub fn ratio(&self, traps: Traps) -> Option<&RetargetRatio> {
        self.ratios.iter().find(|r| r.traps == traps)
    }

    /// The samples whose hits are not what their traps kind expects, in log order.
    pub fn mismatches(&self) -> Vec<&RetargetSample> {
        self.samples
            .iter()
            .filter(|s| !s.hits_as_expected())
            .collect()
    }
}

/// A count that is a median, so possibly halfway between two: `256`, `12.5`.
fn count_text(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Mismatched samples named in the report before the rest are only counted.
const MISMATCHES_LISTED: usize = 8;

/// The Markdown section: a table per (traps, method), the ratios, and what they rest on.
pub fn markdown(r: &RetargetReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### Retargeting a hardware breakpoint (PERF_EVENT_IOC_MODIFY_ATTRIBUTES)\n"
    );
    if let Some(first) = r.samples.first() {
        let cpus = r.samples.iter().map(|s| s.cpus).max().unwrap_or(0);
        let n = r.samples.iter().map(|s| s.n).max().unwrap_or(0);
        let _ = writeln!(
            out,
            "{}, {cpus} CPUs (QEMU TCG), up to {n} retargets per sample.\n",
            first.arch
        );
    }
    let _ = writeln!(
        out,
        "\"modify\" moves the breakpoint of an open perf event to the next address with \
         `PERF_EVENT_IOC_MODIFY_ATTRIBUTES`; \"reopen\" does what a tool had to before that \
         ioctl: `munmap` and `close` the event, then `perf_event_open` and `mmap` a new one. \
         \"never\": the watched addresses never run; \"always\": the agent runs the watched \
         address once after each retarget, so the breakpoint traps once per retarget. The commit \
         that added the ioctl reported modify about 10× cheaper than reopen when \
         the breakpoint never traps and about 4× when it always does, on hardware.\n"
    );
    if r.stats.is_empty() {
        let _ = writeln!(out, "No readable samples.");
    } else {
        let _ = writeln!(
            out,
            "| traps | method | samples | median per retarget | IQR (p25–p75) | min–max | \
             hits per sample |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|");
        for s in &r.stats {
            let t = &s.per_retarget_ns;
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {}–{} | {}–{} | {} |",
                s.traps.name(),
                s.method.name(),
                samples_text(t.samples, s.rounds),
                human_ns(t.median),
                human_ns(t.p25),
                human_ns(t.p75),
                human_ns(t.min),
                human_ns(t.max),
                count_text(s.hits),
            );
        }
        let mismatches = r.mismatches();
        if !mismatches.is_empty() {
            let named = mismatches.iter().map(|s| {
                format!(
                    "{}/{} round {}: {} hits (want {})",
                    s.traps.name(),
                    s.method.name(),
                    s.round,
                    s.hits,
                    s.traps.expected_hits(s.n)
                )
            });
            let _ = writeln!(
                out,
                "\n**{} of {} samples have other hits than their traps kind expects** (n for \
                 always, 0 for never), so they did not measure what they claim: {}.",
                mismatches.len(),
                r.samples.len(),
                listed(named, MISMATCHES_LISTED),
            );
        }
    }
    if !r.ratios.is_empty() {
        let _ = writeln!(out, "\n| traps | reopen ÷ modify (95% CI) |");
        let _ = writeln!(out, "|---|---:|");
        for ratio in &r.ratios {
            let cell = ratio_ci_text(ratio.ratio, ratio.ci95);
            let _ = writeln!(out, "| {} | {cell} |", ratio.traps.name());
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "- Per retarget: a sample's wall time over its retargets (with the calls, for always); \
         the rounds interleave the methods (modify, reopen, modify, ...) in the same boot."
    );
    let _ = writeln!(
        out,
        "- Ratio: reopen's median per retarget over modify's; 95% CI by percentile bootstrap \
         ({RESAMPLES} resamples of each side, SplitMix64 seeded per traps kind)."
    );
    let _ = writeln!(
        out,
        "- Under TCG the debug exceptions and system calls are emulated: compare the ratios with \
         the commit's, not the times."
    );
    write_problems(&mut out, &r.problems);
    out
}

impl SampleSection for RetargetReport {
    type Sample = RetargetSample;

    const PREFIX: &'static str = PREFIX;

    fn parse(text: &str) -> (Vec<RetargetSample>, Vec<String>) {
        parse_log(text)
    }

    fn analysed(samples: Vec<RetargetSample>) -> Self {
        analyse(samples)
    }

    fn samples(&self) -> &[RetargetSample] {
        &self.samples
    }

    fn parts_mut(&mut self) -> (&mut Vec<RetargetSample>, &mut Vec<String>) {
        (&mut self.samples, &mut self.problems)
    }

    fn arch_of(sample: &RetargetSample) -> &str {
        &sample.arch
    }

    /// Without flips the CPUs come from the retarget samples.
    fn cpus_of(sample: &RetargetSample) -> Option<u32> {
        Some(sample.cpus)
    }

    fn section_markdown(&self) -> String {
        markdown(self)
    }

    fn section_headlines(&self) -> Vec<Headline> {
        self.ratios
            .iter()
            .map(|r| Headline {
                what: format!(
                    "retargeting a breakpoint, reopen ÷ modify, traps {}",
                    r.traps.name()
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
    use crate::bench::section::ratio_text;

    fn sample(traps: Traps, method: Method, round: u32, n: u32, ns: u64) -> RetargetSample {
        RetargetSample {
            arch: "x86_64".into(),
            cpus: 4,
            traps,
            method,
            round,
            rounds: 3,
            n,
            ns,
            hits: traps.expected_hits(n),
        }
    }

    /// Three rounds of each (traps, method), modify 1 µs per retarget (± 10 ns by round),
    /// reopen 10 µs when never trapping and 4 µs when always.
    pub(crate) fn samples() -> Vec<RetargetSample> {
        let mut v = Vec::new();
        for round in 0..3u32 {
            let step = 10 * u64::from(round);
            for (traps, reopen) in [(Traps::Never, 10_000), (Traps::Always, 4_000)] {
                v.push(sample(
                    traps,
                    Method::Modify,
                    round,
                    100,
                    100 * (1_000 + step),
                ));
                v.push(sample(
                    traps,
                    Method::Reopen,
                    round,
                    100,
                    100 * (reopen + step),
                ));
            }
        }
        v
    }

    #[test]
    fn parses_sample_lines_of_a_console_log() {
        let log = "[    1.000000] textpoke-agent: mode bench\n\
            [   12.345678] textpoke-retarget: {\"arch\":\"aarch64\",\"cpus\":4,\"traps\":\"never\",\"method\":\"modify\",\"round\":3,\"rounds\":20,\"n\":500,\"ns\":123456789,\"hits\":0}\r\n\
            [   12.4] textpoke-bench: {\"arch\":\"arm64\",\"cpus\":4,\"mode\":\"idle\",\"n\":16,\"round\":0,\"ns\":10,\"syncs\":0,\"records\":0,\"call_ipis\":4,\"stall_ns\":1}\n\
            [   12.5] textpoke-retarget: {\"arch\":\"x86_64\",\"cpus\":2,\"traps\":\"always\",\"method\":\"reopen\",\"round\":0,\"n\":4,\"ns\":10,\"hits\":4}\n\
            [   13.0] textpoke-retarget: {\"arch\":\"arm64\",\"cpus\":4,\"traps\n\
            textpoke-retarget: {\"arch\":\"arm64\",\"cpus\":4,\"traps\":\"sometimes\",\"method\":\"modify\",\"round\":0,\"n\":4,\"ns\":10,\"hits\":0}\n\
            textpoke-retarget: {\"arch\":\"arm64\",\"cpus\":4,\"traps\":\"never\",\"method\":\"modify\",\"round\":0,\"n\":0,\"ns\":10,\"hits\":0}\n";
        let (samples, problems) = parse_log(log);
        assert_eq!(samples.len(), 2, "{samples:?}");
        let s = &samples[0];
        assert_eq!(s.arch, "arm64");
        assert_eq!((s.traps, s.method), (Traps::Never, Method::Modify));
        assert_eq!(
            (s.round, s.rounds, s.n, s.ns, s.hits),
            (3, 20, 500, 123456789, 0)
        );
        // `rounds` may be missing.
        assert_eq!((samples[1].rounds, samples[1].traps), (0, Traps::Always));
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].starts_with("line 5:"), "{problems:?}");
        assert!(problems[1].starts_with("line 6:"), "{problems:?}");
        assert_eq!(problems[2], "line 7: n is 0");
        // The flips' parser leaves these lines alone.
        assert_eq!(crate::bench::flips::parse_log(log).samples.len(), 1);
    }

    #[test]
    fn stats_are_per_retarget() {
        let r = analyse(samples());
        assert_eq!(r.stats.len(), 4);
        // Traps kinds, then methods, in order.
        let order: Vec<(Traps, Method)> = r.stats.iter().map(|s| (s.traps, s.method)).collect();
        assert_eq!(
            order,
            [
                (Traps::Never, Method::Modify),
                (Traps::Never, Method::Reopen),
                (Traps::Always, Method::Modify),
                (Traps::Always, Method::Reopen),
            ]
        );
        let m = r.stats(Traps::Never, Method::Modify).unwrap();
        // 100_000, 101_000, 102_000 ns over 100 retargets each.
        let t = &m.per_retarget_ns;
        assert_eq!(
            (t.min, t.median, t.max, t.samples),
            (1_000.0, 1_010.0, 1_020.0, 3)
        );
        assert_eq!((m.rounds, m.hits), (3, 0.0));
        assert_eq!(r.stats(Traps::Always, Method::Reopen).unwrap().hits, 100.0);
        // An even count: the median is the mean of the middle two.
        let even = analyse(vec![
            sample(Traps::Never, Method::Modify, 0, 4, 4_000),
            sample(Traps::Never, Method::Modify, 1, 2, 4_000),
        ]);
        let s = even.stats(Traps::Never, Method::Modify).unwrap();
        assert_eq!(s.per_retarget_ns.median, 1_500.0);
        // One method only: no ratio, and nothing panics on the way to Markdown.
        assert!(even.ratios.is_empty());
        assert!(markdown(&even).contains("| never | modify | 2 of 3 | 1.5 µs |"));
        let empty = analyse(Vec::new());
        assert!(empty.stats.is_empty() && empty.ratios.is_empty());
        assert!(markdown(&empty).contains("No readable samples."));
    }

    #[test]
    fn ratios_are_deterministic_and_covered_by_their_intervals() {
        let r = analyse(samples());
        assert_eq!(r.ratios.len(), 2);
        let never = r.ratio(Traps::Never).unwrap();
        assert!((never.ratio - 10_010.0 / 1_010.0).abs() < 1e-12);
        let always = r.ratio(Traps::Always).unwrap();
        assert!((always.ratio - 4_010.0 / 1_010.0).abs() < 1e-12);
        for ratio in [never, always] {
            let ci = ratio.ci95.unwrap();
            assert!(ci.lo <= ratio.ratio && ratio.ratio <= ci.hi, "{ratio:?}");
            assert_eq!(ratio.resamples, RESAMPLES);
        }
        // Every resampled ratio lies between the extreme ratios.
        let ci = never.ci95.unwrap();
        assert!(
            ci.lo >= 10_000.0 / 1_020.0 && ci.hi <= 10_020.0 / 1_000.0,
            "{ci:?}"
        );
        // Each kind its own seed, the same every time.
        assert_ne!(never.seed, always.seed);
        assert_eq!(never.seed, seed_for(Traps::Never));
        assert_eq!(analyse(r.samples.clone()), r);
        let md = markdown(&r);
        assert!(md.starts_with(
            "### Retargeting a hardware breakpoint (PERF_EVENT_IOC_MODIFY_ATTRIBUTES)\n"
        ));
        assert!(md.contains("| never | reopen | 3 | 10 µs | 10 µs–10 µs | 10 µs–10 µs | 0 |"));
        assert!(
            md.contains(&format!(
                "| never | {} ({}–{}) |",
                ratio_text(never.ratio),
                ratio_text(ci.lo),
                ratio_text(ci.hi)
            )),
            "{md}"
        );
        assert!(!md.contains("did not measure"), "{md}");
    }

    #[test]
    fn hits_other_than_expected_are_flagged() {
        let mut v = samples();
        // A breakpoint that did not fire every time, and one that fired when it must not.
        v[2].hits = 97;
        v[0].hits = 1;
        let r = analyse(v);
        let bad: Vec<(Traps, Method, u64)> = r
            .mismatches()
            .iter()
            .map(|s| (s.traps, s.method, s.hits))
            .collect();
        assert_eq!(
            bad,
            [
                (Traps::Never, Method::Modify, 1),
                (Traps::Always, Method::Modify, 97)
            ]
        );
        let md = markdown(&r);
        assert!(
            md.contains(
                "**2 of 12 samples have other hits than their traps kind expects** (n for always, \
                 0 for never), so they did not measure what they claim: never/modify round 0: 1 \
                 hits (want 0); always/modify round 0: 97 hits (want 100)."
            ),
            "{md}"
        );
    }
}
