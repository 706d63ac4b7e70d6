//! The trap work on the other CPUs during a flip, seen from the executors
//! (samples/textpoke_bench.c), the same way for textpoke and for the kernel's own mechanism.
//!
//! Every executor sorts the gap between two of its executions of a site into histograms, for
//! the 5 ms before the flip and for the flip, and apart from the others the executions that an
//! exception or interrupt interrupted: the CPU tells, as the registers it saves on the stack
//! overwrite a mark left below the stack pointer (`stack_mark_set()` in the module). During a
//! flip those are the executions that trapped on a guard, and the IPIs and ticks that also come
//! before it, at the rate the window before shows; so the trapped executions are counted the
//! same way for the stock path, which counts none (upstream's `poke_int3_handler()` has no
//! counter), and for textpoke, where the engine's own counter checks the count. The median gap
//! of the interrupted executions during the flip, less the plain median before it, is what one
//! trapped execution costs more: on x86 the same exception entry and exit either way, then
//! upstream's handler or (after upstream's, which declines at once with no batch of its own)
//! textpoke's. On arm64 only textpoke guards anything: there the stock modes' count is the
//! check that the interrupts are subtracted right (it must be about 0).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::bench::section::{parse_lines, runner_arch};
use crate::bench::stats::{median, Spread};

/// The prefix of the agent's histogram lines (tools/agent/src/bench/mod.rs `gaps_json`).
pub const PREFIX: &str = "textpoke-gaps: ";

/// The fewest trapped executions per flip (median) whose cost the table gives: below it they
/// are the few interrupts the subtraction leaves (arm64's unguarded modes: 0 to 9 per flip).
pub const MIN_TO_COST: f64 = 100.0;

/// Buckets below this are one nanosecond wide (samples/textpoke_bench.c `gap_bucket()`).
const SUB: u32 = 16;

/// The executors' gap histograms of one flip, summed over CPUs: bucket to count.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Gaps {
    /// The 5 ms before the flip, plain executions.
    pub before: BTreeMap<u32, u64>,
    /// The 5 ms before the flip, executions an exception or interrupt interrupted.
    pub before_x: BTreeMap<u32, u64>,
    /// The flip, plain executions.
    pub flip: BTreeMap<u32, u64>,
    /// The flip, interrupted executions.
    pub flip_x: BTreeMap<u32, u64>,
}

/// A flip as the histograms see it: what joins a `textpoke-gaps:` line to it, where its
/// histograms go, and the engine's own trap count to check them against.
pub trait Flip {
    /// Its arch (as the runner names it), mode, N and round.
    fn key(&self) -> (&str, &str, u32, u32);
    /// Its histograms, if the log has them.
    fn gaps(&self) -> Option<&Gaps>;
    /// Where the histograms joined to it go.
    fn gaps_mut(&mut self) -> &mut Option<Gaps>;
    /// textpoke only: the traps the engine counted during the flip.
    fn engine_traps(&self) -> Option<u64>;
}

/// One `textpoke-gaps:` line: up to 40 (bucket, count) pairs of one histogram of one sample.
#[derive(Debug, Deserialize)]
struct Line {
    arch: String,
    mode: String,
    n: u32,
    round: u32,
    window: String,
    pairs: Vec<(u32, u64)>,
}

/// The nanoseconds bucket `b` starts at: below [`SUB`] one per nanosecond, then 16 per power
/// of two (the inverse of `gap_bucket()` in samples/textpoke_bench.c).
pub fn bucket_start(b: u32) -> f64 {
    if b < SUB {
        return f64::from(b);
    }
    let order = (b - SUB) / SUB + 4;
    let sub = (b - SUB) % SUB;
    f64::from(SUB + sub) * 2f64.powi(order as i32 - 4)
}

/// Where bucket `b` ends.
fn bucket_end(b: u32) -> f64 {
    if b < SUB {
        f64::from(b + 1)
    } else {
        bucket_start(b) + 2f64.powi(((b - SUB) / SUB) as i32)
    }
}

/// The median of a histogram, interpolating linearly inside its bucket; `None` if empty.
pub fn hist_median(h: &BTreeMap<u32, u64>) -> Option<f64> {
    let total: u64 = h.values().sum();
    if total == 0 {
        return None;
    }
    let half = total as f64 / 2.0;
    let mut below = 0u64;
    for (&b, &c) in h {
        if (below + c) as f64 >= half {
            let into = (half - below as f64) / c as f64;
            return Some(bucket_start(b) + into * (bucket_end(b) - bucket_start(b)));
        }
        below += c;
    }
    None
}

/// Joins the `textpoke-gaps:` lines of a log to its samples (by arch, mode, N and round).
/// Returns the lines that could not be read or matched (`line N: why`).
pub fn attach<F: Flip>(log: &str, samples: &mut [F]) -> Vec<String> {
    let (lines, mut problems) = parse_lines(log, PREFIX, |_: &mut Line| Ok(()));
    for line in lines {
        let arch = runner_arch(&line.arch);
        let Some(s) = samples
            .iter_mut()
            .find(|s| s.key() == (arch.as_str(), line.mode.as_str(), line.n, line.round))
        else {
            problems.push(format!(
                "gaps of {} n={} round {} without their sample",
                line.mode, line.n, line.round
            ));
            continue;
        };
        let gaps = s.gaps_mut().get_or_insert_with(Gaps::default);
        let into = match line.window.as_str() {
            "before" => &mut gaps.before,
            "before_x" => &mut gaps.before_x,
            "flip" => &mut gaps.flip,
            "flip_x" => &mut gaps.flip_x,
            other => {
                problems.push(format!("gaps: unknown window `{other}`"));
                continue;
            }
        };
        for (b, c) in line.pairs {
            *into.entry(b).or_default() += c;
        }
    }
    problems
}

/// What one flip's histograms say.
#[derive(Clone, Debug, PartialEq)]
pub struct FlipTraps {
    /// The median plain gap before the flip, ns.
    pub plain_ns: f64,
    /// The interrupted executions of the flip, less as many as the window before had at its
    /// rate (the IPIs and ticks): the trapped executions.
    pub trapped: f64,
}

/// [`FlipTraps`] of one sample's histograms; `None` without a plain median.
pub fn flip_traps(g: &Gaps) -> Option<FlipTraps> {
    let plain_ns = hist_median(&g.before)?;
    let sum = |h: &BTreeMap<u32, u64>| h.values().sum::<u64>() as f64;
    let rate = sum(&g.before_x) / (sum(&g.before) + sum(&g.before_x));
    let expected = rate * (sum(&g.flip) + sum(&g.flip_x));
    Some(FlipTraps {
        plain_ns,
        trapped: (sum(&g.flip_x) - expected).max(0.0),
    })
}

/// The trap work of one (mode, N) over its samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trapped {
    /// Trapped executions per flip, over the samples.
    pub count: Spread,
    /// textpoke only: the median over the samples of that count divided by the engine's own
    /// trap counter for the same flip.
    pub vs_counter: Option<f64>,
    /// The median plain execution (the median over the samples of each one's), ns.
    pub plain_ns: f64,
    /// The median gap of the flips' interrupted executions, pooled over the samples, ns.
    pub trapped_ns: Option<f64>,
}

impl Trapped {
    /// What one trapped execution costs more than a plain one, ns.
    pub fn extra_ns(&self) -> Option<f64> {
        self.trapped_ns.map(|t| t - self.plain_ns)
    }
}

/// [`Trapped`] of the samples of one (mode, N); `None` if none carries histograms.
pub fn trapped<F: Flip>(samples: &[&F]) -> Option<Trapped> {
    let mut counts = Vec::new();
    let mut plains = Vec::new();
    let mut vs_counter = Vec::new();
    let mut pooled: BTreeMap<u32, u64> = BTreeMap::new();
    for s in samples {
        let Some((g, t)) = s.gaps().and_then(|g| Some((g, flip_traps(g)?))) else {
            continue;
        };
        counts.push(t.trapped);
        plains.push(t.plain_ns);
        if let Some(engine) = s.engine_traps().filter(|&e| e > 0) {
            vs_counter.push(t.trapped / engine as f64);
        }
        for (&b, &c) in &g.flip_x {
            *pooled.entry(b).or_default() += c;
        }
    }
    Some(Trapped {
        count: Spread::of(&counts)?,
        vs_counter: median(&vs_counter),
        plain_ns: median(&plains)?,
        trapped_ns: hist_median(&pooled),
    })
}

/// One row of the trap-work table: a (mode, N) whose samples carry histograms.
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    /// Sites per flip.
    pub n: u32,
    /// The mode's label for people.
    pub mode: &'a str,
    /// What its histograms say.
    pub trapped: &'a Trapped,
}

/// The trap-work table of `arch`, or `None` without rows.
pub fn markdown(arch: &str, rows: &[Row]) -> Option<String> {
    if rows.is_empty() {
        return None;
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "#### {arch}: trap work on the other CPUs during a flip, seen by the executors\n"
    );
    let _ = writeln!(
        out,
        "| N | mode | trapped executions per flip, median (p25–p75) | ÷ textpoke's counter | \
         plain execution ns | trapped execution ns | a trap's extra ns |"
    );
    let _ = writeln!(out, "|---:|---|---:|---:|---:|---:|---:|");
    for c in rows {
        let t = c.trapped;
        // Without traps the interrupted executions are the ticks and IPIs the subtraction
        // leaves (a few per flip, each a vCPU switch long): no trap to cost.
        let ns = |v: Option<f64>| match v {
            Some(v) if t.count.median >= MIN_TO_COST => format!("{v:.0}"),
            _ => "n/a".to_owned(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} ({:.0}–{:.0}) | {} | {:.0} | {} | {} |",
            c.n,
            c.mode,
            t.count.median,
            t.count.p25,
            t.count.p75,
            t.vs_counter
                .map_or_else(|| "".to_owned(), |v| format!("{v:.3}")),
            t.plain_ns,
            ns(t.trapped_ns),
            ns(t.extra_ns()),
        );
    }
    let _ = writeln!(
        out,
        "\n- Trapped executions: those of the flip that an exception or interrupt interrupted \
         (the registers the CPU saves overwrite a mark below the executor's stack pointer), \
         less as many as the 5 ms before the flip had at the same rate (the IPIs and ticks). \
         Checked against textpoke's own trap counter (\"÷ textpoke's counter\"); upstream \
         counts none. A plain execution: the median gap between two executions before the \
         flip; a trapped one: the median of the interrupted executions' gaps during the flip, \
         pooled over the flips (6% buckets); its extra: the difference. On x86 both paths take \
         the same exception entry and exit, so the difference of the extras is the handlers'; \
         n/a where the median flip has fewer than {MIN_TO_COST} trapped executions (arm64's \
         unguarded modes: what is left is interrupts, tools/runner/src/bench/gaps.rs)."
    );
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_match_the_module() {
        // gap_bucket() in samples/textpoke_bench.c: 16 ns is bucket 16, 31 ns bucket 31,
        // 32..33 ns bucket 32, 2^29 ns bucket 16 + 25 * 16 = 416.
        assert_eq!(bucket_start(3), 3.0);
        assert_eq!(bucket_start(16), 16.0);
        assert_eq!(bucket_start(31), 31.0);
        assert_eq!(bucket_end(31), 32.0);
        assert_eq!(bucket_start(32), 32.0);
        assert_eq!(bucket_end(32), 34.0);
        assert_eq!(bucket_start(59), 27.0 * 4.0);
        assert_eq!(bucket_start(416), 2f64.powi(29));
        assert_eq!(bucket_start(431), 31.0 * 2f64.powi(25));
    }

    fn hist(pairs: &[(u32, u64)]) -> BTreeMap<u32, u64> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn median_interpolates_in_its_bucket() {
        assert_eq!(hist_median(&BTreeMap::new()), None);
        // 10 gaps in bucket 83 (304..320 ns): the median is in its middle.
        assert_eq!(hist_median(&hist(&[(83, 10)])), Some(312.0));
        assert_eq!(hist_median(&hist(&[(3, 1), (5, 1)])), Some(4.0));
    }

    /// Histograms before and during a flip: (plain, interrupted) each.
    type Pairs<'a> = &'a [(u32, u64)];
    fn gaps(before: (Pairs, Pairs), flip: (Pairs, Pairs)) -> Gaps {
        Gaps {
            before: hist(before.0),
            before_x: hist(before.1),
            flip: hist(flip.0),
            flip_x: hist(flip.1),
        }
    }

    #[test]
    fn trapped_executions_are_the_interrupted_ones_less_the_usual_rate() {
        // Plain executions at 304..320 ns (bucket 83); interrupted ones at 2048..2176 ns
        // (bucket 128): 1 in 1000 before the flip (a tick), 502 of 2502 during it.
        let g = gaps(
            (&[(83, 999)], &[(128, 1)]),
            (&[(83, 1990), (130, 10)], &[(128, 502)]),
        );
        let t = flip_traps(&g).unwrap();
        assert_eq!(t.plain_ns, 304.0 + 16.0 * 499.5 / 999.0);
        // 502 interrupted, of which 2.502 expected at the rate before; the 10 slow plain ones
        // (code retranslated after a write, say) are no traps, however slow.
        assert!((t.trapped - (502.0 - 2502.0 / 1000.0)).abs() < 1e-9);
        // Fewer interrupted than the rate before predicts: none trapped, not fewer than none.
        let quiet = gaps((&[(83, 90)], &[(128, 10)]), (&[(83, 100)], &[(128, 5)]));
        assert_eq!(flip_traps(&quiet).unwrap().trapped, 0.0);
        // No plain gaps before the flip: no plain median, no estimate.
        assert_eq!(
            flip_traps(&gaps((&[], &[(128, 1)]), (&[], &[(128, 5)]))),
            None
        );
    }

    /// A flip of 16 sites on x86_64.
    struct Sample {
        mode: String,
        round: u32,
        traps: Option<u64>,
        gaps: Option<Gaps>,
    }

    impl Flip for Sample {
        fn key(&self) -> (&str, &str, u32, u32) {
            ("x86_64", &self.mode, 16, self.round)
        }
        fn gaps(&self) -> Option<&Gaps> {
            self.gaps.as_ref()
        }
        fn gaps_mut(&mut self) -> &mut Option<Gaps> {
            &mut self.gaps
        }
        fn engine_traps(&self) -> Option<u64> {
            self.traps
        }
    }

    fn sample(mode: &str, round: u32, traps: Option<u64>, g: Option<Gaps>) -> Sample {
        Sample {
            mode: mode.into(),
            round,
            traps,
            gaps: g,
        }
    }

    #[test]
    fn lines_join_their_samples() {
        let log = "[    1.0] textpoke-gaps: {\"arch\":\"x86_64\",\"mode\":\"textpoke\",\"n\":16,\
                   \"round\":1,\"window\":\"before\",\"pairs\":[[83,10]]}\n\
                   [    1.1] textpoke-gaps: {\"arch\":\"x86_64\",\"mode\":\"textpoke\",\"n\":16,\
                   \"round\":1,\"window\":\"before\",\"pairs\":[[83,5],[85,1]]}\n\
                   [    1.2] textpoke-gaps: {\"arch\":\"x86_64\",\"mode\":\"textpoke\",\"n\":16,\
                   \"round\":1,\"window\":\"flip_x\",\"pairs\":[[128,2]]}\n\
                   [    1.3] textpoke-gaps: {\"arch\":\"x86_64\",\"mode\":\"textpoke\",\"n\":16,\
                   \"round\":7,\"window\":\"flip\",\"pairs\":[]}\n\
                   [    1.4] textpoke-gaps: {\"arch\":\"x86_64\",\"mode\":\"textpoke\",\"n\":16,\
                   \"round\":1,\"window\":\"after\",\"pairs\":[]}\n";
        let mut samples = vec![
            sample("textpoke", 0, None, None),
            sample("textpoke", 1, None, None),
        ];
        let problems = attach(log, &mut samples);
        assert_eq!(samples[0].gaps, None);
        assert_eq!(
            samples[1].gaps,
            Some(gaps((&[(83, 15), (85, 1)], &[]), (&[], &[(128, 2)])))
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("round 7 without their sample"));
        assert!(problems[1].contains("unknown window `after`"));
    }

    #[test]
    fn trapped_per_config_checks_the_counter() {
        let g = gaps((&[(83, 1000)], &[]), (&[(83, 1000)], &[(128, 400)]));
        let samples = [
            sample("textpoke", 0, Some(400), Some(g.clone())),
            sample("textpoke", 1, Some(500), Some(g)),
            sample("textpoke", 2, Some(7), None),
        ];
        let refs: Vec<&Sample> = samples.iter().collect();
        let t = trapped(&refs).unwrap();
        assert_eq!(t.count.samples, 2);
        assert_eq!(t.count.median, 400.0);
        assert_eq!(t.vs_counter, Some((1.0 + 0.8) / 2.0));
        assert_eq!(t.trapped_ns, Some(2112.0));
        assert_eq!(t.extra_ns(), Some(2112.0 - t.plain_ns));
        // No histograms at all: nothing to say.
        assert_eq!(trapped(&refs[2..]), None);
    }
}
