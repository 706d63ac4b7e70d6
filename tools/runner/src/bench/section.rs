//! What the sections of the bench report share: the [`Section`] trait the composer
//! (bench/report.rs) drives them through, and [`SampleSection`], which implements it for the
//! sections that are lists of samples; reading their `textpoke-*: {json}` lines out of a console
//! log, the bootstrap's base seed, and how they write times, ratios and the samples they leave out.
//!
//! Each section (the flips, bench/flips.rs; the retarget benchmark, bench/retarget.rs; the kernel's
//! own patching, bench/kbench.rs; the foreign traps, bench/trapcost.rs) reads its own lines of
//! every console log, is merged per arch over the logs of that arch, computes its statistics once,
//! and then shows as a part of `bench-ARCH.md`, of `bench-ARCH.json` (its serde form, under its
//! field of the arch's report), and as the ratios a results table quotes.

use std::fmt::Write as _;
use std::path::Path;

use crate::bench::stats::Interval;

/// Seed of every bootstrap of the bench report: each section folds its own text into it
/// ([`crate::bench::stats::fold_seed`]) so that each interval has its own stream, and a report is
/// reproducible from its samples.
pub const SEED: u64 = 0x7e47_b0a7_5eed_2024;

/// One console log of a run directory, as the sections read it.
#[derive(Clone, Copy, Debug)]
pub struct Log<'a> {
    /// Where it is: sections name it in their problems.
    pub path: &'a Path,
    /// Its text.
    pub text: &'a str,
    /// QEMU's wall time for the boot that wrote it, from the boot's report, if there is one.
    pub seconds: Option<f64>,
}

/// A ratio that a section stands on, for a results table.
#[derive(Clone, Debug, PartialEq)]
pub struct Headline {
    /// What is divided by what, for people.
    pub what: String,
    /// The ratio of the medians.
    pub ratio: f64,
    /// Its 95% bootstrap interval.
    pub ci95: Option<Interval>,
}

/// One section of an arch's bench report.
///
/// The composer reads every console log with [`Section::read`], takes the arch of the log from
/// the first section that has a sample ([`Section::arch`]), [`Section::merge`]s the log's part
/// into that arch's, and once every log is read calls [`Section::analyse`]. Then it only shows
/// the section: [`Section::markdown`], [`Section::headlines`], and its JSON, which is its serde
/// form.
pub trait Section {
    /// Prefix of the section's lines in a console log (after the printk prefix).
    fn prefix() -> &'static str
    where
        Self: Sized;

    /// The section's lines of one console log, not analysed yet; `None` if the log has none
    /// (neither a sample nor an unreadable line).
    fn read(log: &Log) -> Option<Self>
    where
        Self: Sized;

    /// The arch its first sample names, as the runner names it.
    fn arch(&self) -> Option<&str>;

    /// Adds what [`Section::read`] read of another log of the same arch.
    fn merge(&mut self, other: Self)
    where
        Self: Sized;

    /// Computes the statistics of the samples read.
    fn analyse(&mut self);

    /// The online CPUs its samples ran on, if the arch's report is to take them from this
    /// section: the report shows the most any such section saw.
    fn cpus(&self) -> Option<u32> {
        None
    }

    /// The section's Markdown in the report of `arch` (`cpus` CPUs), or `None` if it has nothing
    /// to show.
    fn markdown(&self, arch: &str, cpus: u32) -> Option<String>;

    /// Its ratios with their intervals, in the order its Markdown shows them.
    fn headlines(&self) -> Vec<Headline>;
}

/// A section that is its samples, one a line of the log, and the lines it could not read: every
/// such section reads, merges and analyses them alike, so [`Section`] comes with this trait and
/// each section gives only what differs.
///
/// The unreadable lines survive [`Section::analyse`]: they name their logs, which
/// [`SampleSection::analysed`] never sees.
pub trait SampleSection: Default {
    /// What one line holds.
    type Sample;

    /// Prefix of the section's lines in a console log (after the printk prefix).
    const PREFIX: &'static str;

    /// The samples of a console log, in log order, and the lines that could not be read
    /// (`line N: why`).
    fn parse(text: &str) -> (Vec<Self::Sample>, Vec<String>);

    /// The statistics of one arch's samples, with no unreadable lines.
    fn analysed(samples: Vec<Self::Sample>) -> Self;

    /// The samples, in log order.
    fn samples(&self) -> &[Self::Sample];

    /// The samples and the unreadable lines (`LOG: line N: why`).
    fn parts_mut(&mut self) -> (&mut Vec<Self::Sample>, &mut Vec<String>);

    /// The arch a sample names, as the runner names it.
    fn arch_of(sample: &Self::Sample) -> &str;

    /// The online CPUs a sample ran on, if the arch's report is to take them from this section
    /// ([`Section::cpus`]).
    fn cpus_of(_sample: &Self::Sample) -> Option<u32> {
        None
    }

    /// The section's Markdown, which is the same in every arch's report.
    fn section_markdown(&self) -> String;

    /// [`Section::headlines`].
    fn section_headlines(&self) -> Vec<Headline>;
}

impl<T: SampleSection> Section for T {
    fn prefix() -> &'static str {
        T::PREFIX
    }

    fn read(log: &Log) -> Option<Self> {
        let (samples, problems) = T::parse(log.text);
        if samples.is_empty() && problems.is_empty() {
            return None;
        }
        let mut part = T::default();
        let (into_samples, into_problems) = part.parts_mut();
        *into_samples = samples;
        *into_problems = in_log(log, problems);
        Some(part)
    }

    fn arch(&self) -> Option<&str> {
        self.samples().first().map(T::arch_of)
    }

    fn merge(&mut self, mut other: Self) {
        let (samples, problems) = self.parts_mut();
        let (other_samples, other_problems) = other.parts_mut();
        samples.append(other_samples);
        problems.append(other_problems);
    }

    fn analyse(&mut self) {
        let (samples, problems) = self.parts_mut();
        let (samples, problems) = (std::mem::take(samples), std::mem::take(problems));
        *self = T::analysed(samples);
        *self.parts_mut().1 = problems;
    }

    fn cpus(&self) -> Option<u32> {
        self.samples().iter().filter_map(T::cpus_of).max()
    }

    fn markdown(&self, _arch: &str, _cpus: u32) -> Option<String> {
        Some(self.section_markdown())
    }

    fn headlines(&self) -> Vec<Headline> {
        self.section_headlines()
    }
}

/// Adds a log's part of a section that an arch's report may lack to that arch's.
pub fn merge_into<S: Section>(into: &mut Option<S>, part: Option<S>) {
    match (into.as_mut(), part) {
        (Some(into), Some(part)) => into.merge(part),
        (None, part) => *into = part,
        (Some(_), None) => {}
    }
}

/// Names `problems` (`line N: why`) after the log they are in (`LOG: line N: why`), for a
/// section that gathers them over all the logs of an arch.
pub fn in_log(log: &Log, problems: Vec<String>) -> Vec<String> {
    problems
        .into_iter()
        .map(|p| format!("{}: {p}", log.path.display()))
        .collect()
}

/// The arch as the runner names it: the guest's `aarch64` is `arm64`.
pub fn runner_arch(arch: &str) -> String {
    if arch == "aarch64" {
        "arm64".into()
    } else {
        arch.into()
    }
}

/// Reads the lines of a console log that start (after the printk prefix) with `prefix` and
/// JSON for a `T`, which `check` may fix up or refuse. Returns the values in log order and the
/// lines that could not be read (`line N: why`).
pub fn parse_lines<T: serde::de::DeserializeOwned>(
    log: &str,
    prefix: &str,
    mut check: impl FnMut(&mut T) -> Result<(), String>,
) -> (Vec<T>, Vec<String>) {
    let (mut values, mut problems) = (Vec::new(), Vec::new());
    for (i, line) in log.lines().enumerate() {
        let line = crate::judge::ktap::strip_console_prefix(line);
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

/// How many samples a row of a section's table rests on: `20`, or `17 of 20` when there are
/// fewer than the rounds the agent planned, which means it stopped early (see its KTAP case).
pub fn samples_text(samples: usize, rounds: u32) -> String {
    if samples < rounds as usize {
        format!("{samples} of {rounds}")
    } else {
        samples.to_string()
    }
}

/// The first `most` of `items` and a count of the rest, `a; b; and 3 more`: a section names the
/// samples it left out, but not so many that they drown its table.
pub fn listed(items: impl IntoIterator<Item = String>, most: usize) -> String {
    let items: Vec<String> = items.into_iter().collect();
    let more = items.len().saturating_sub(most);
    let mut text = items[..items.len().min(most)].join("; ");
    if more > 0 {
        let _ = write!(text, "; and {more} more");
    }
    text
}

/// Ends a section's notes with its unreadable lines, if it has any: a sample that could not be
/// read is missing from the statistics, and the report says so.
pub fn write_problems(out: &mut String, problems: &[String]) {
    if !problems.is_empty() {
        let _ = writeln!(
            out,
            "- {} unreadable sample lines: {}.",
            problems.len(),
            problems.join("; ")
        );
    }
}

/// Nanoseconds as whole microseconds, for the flips' tables.
pub fn us(ns: f64) -> String {
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

/// A ratio with its interval, `2.96 (2.90–3.01)`, or alone without one.
pub fn ratio_ci_text(ratio: f64, ci95: Option<Interval>) -> String {
    match ci95 {
        Some(ci) => format!(
            "{} ({}–{})",
            ratio_text(ratio),
            ratio_text(ci.lo),
            ratio_text(ci.hi)
        ),
        None => ratio_text(ratio),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_ratios() {
        assert_eq!(human_ns(9_727_000.0), "9.7 ms");
        assert_eq!(human_ns(100_157_231_000.0), "100 s");
        assert_eq!(human_ns(2e7), "20 ms");
        assert_eq!(human_ns(500_000.0), "500 µs");
        assert_eq!(
            [0.554, 2.0, 26.5, 1201.27].map(ratio_text),
            ["0.55", "2.00", "26.5", "1201"]
        );
        assert_eq!(ratio_ci_text(26.54, None), "26.5");
        assert_eq!(
            ratio_ci_text(2.0, Some(Interval { lo: 1.954, hi: 2.1 })),
            "2.00 (1.95–2.10)"
        );
    }

    #[test]
    fn lists_and_counts() {
        assert_eq!(samples_text(20, 20), "20");
        assert_eq!(samples_text(21, 20), "21");
        assert_eq!(samples_text(17, 20), "17 of 20");
        let items = |n: usize| (0..n).map(|i| i.to_string());
        assert_eq!(listed(items(0), 2), "");
        assert_eq!(listed(items(2), 2), "0; 1");
        assert_eq!(listed(items(5), 2), "0; 1; and 3 more");
        let mut out = String::new();
        write_problems(&mut out, &[]);
        assert_eq!(out, "");
        write_problems(&mut out, &["a: line 1: x".into(), "b: line 2: y".into()]);
        assert_eq!(
            out,
            "- 2 unreadable sample lines: a: line 1: x; b: line 2: y.\n"
        );
    }

    #[test]
    fn problems_name_their_log() {
        let log = Log {
            path: Path::new("/runs/1/x86_64-bench.log"),
            text: "",
            seconds: None,
        };
        assert_eq!(
            in_log(&log, vec!["line 5: n is 0".into()]),
            ["/runs/1/x86_64-bench.log: line 5: n is 0"]
        );
    }
}
