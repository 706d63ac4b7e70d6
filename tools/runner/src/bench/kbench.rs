//! The kernel's own patching through textpoke against its stock path, in the bench report:
//! the function tracer on every function and `kernel.sched_schedstats`, each turned on and off
//! (tools/agent/src/bench/kbench.rs logs one `textpoke-kbench: {json}` line per round, path and
//! workload, three paths interleaved: textpoke with nobody listening, textpoke with a tracer
//! listening, stock). Per workload and textpoke path: the sites textpoke changed, the spread of
//! the time on each path, the ratio of the medians (textpoke over stock) with the same
//! percentile bootstrap as the flips' ratios (see bench/stats.rs), the median function-call IPIs,
//! all-CPU syncs, records and traps.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::bench::section::{
    human_ns, parse_lines, ratio_text, runner_arch, Headline, SampleSection, SEED,
};
use crate::bench::stats::{
    bootstrap_ratio_of_medians, fold_seed, median, Interval, Spread, RESAMPLES,
};

/// Prefix of a sample line in the guest's log (after the printk prefix).
pub const PREFIX: &str = "textpoke-kbench: ";

/// The workloads, in the order the report shows them.
pub const WORKLOADS: [&str; 4] = [
    "ftrace_all_on",
    "ftrace_all_off",
    "schedstats_on",
    "schedstats_off",
];

/// textpoke's paths, in the order the report shows them: loaded with nobody listening (the
/// quiet path), and loaded with a `text_poke` perf event open.
pub const TEXTPOKE_PATHS: [&str; 2] = ["textpoke", "textpoke_listened"];
/// The kernel's own path: textpoke unloaded.
pub const STOCK: &str = "stock";

/// One sample, as the agent logged it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KbenchSample {
    /// Guest arch, as the runner names it.
    pub arch: String,
    /// Online CPUs.
    pub cpus: u32,
    /// Which round.
    pub round: u32,
    /// Rounds planned.
    pub rounds: u32,
    /// One of [`TEXTPOKE_PATHS`] (loaded, the kernel's patcher) or [`STOCK`] (unloaded).
    pub path: String,
    /// What the kernel was asked to do.
    pub workload: String,
    /// Wall time of the request, in nanoseconds.
    pub ns: u64,
    /// Function-call IPIs counted in `/proc/interrupts` around it, every CPU.
    pub call_ipis: u64,
    /// textpoke's counters' deltas (0 on the stock path).
    pub sites: u64,
    /// Kernel batches textpoke committed.
    pub batches: u64,
    /// All-CPU syncs textpoke made.
    pub syncs: u64,
    /// Records textpoke emitted.
    pub records: u64,
    /// Traps on textpoke's guards of the kernel's changes.
    pub traps: u64,
}

/// Reads the `textpoke-kbench:` lines of a console log: the samples in log order, and the lines
/// that could not be read (`line N: why`).
pub fn parse_log(log: &str) -> (Vec<KbenchSample>, Vec<String>) {
    parse_lines(log, PREFIX, |s: &mut KbenchSample| {
        if !TEXTPOKE_PATHS.contains(&s.path.as_str()) && s.path != STOCK {
            return Err(format!("unknown path {}", s.path));
        }
        s.arch = runner_arch(&s.arch);
        Ok(())
    })
}

/// One workload's row on one of textpoke's paths.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KbenchRow {
    /// The workload.
    pub workload: String,
    /// textpoke's path (one of [`TEXTPOKE_PATHS`]; reports written before the listener had
    /// only the first).
    #[serde(default = "quiet_path")]
    pub path: String,
    /// Median sites textpoke changed.
    pub sites: f64,
    /// Time with textpoke.
    pub textpoke: Spread,
    /// Time on the stock path.
    pub stock: Spread,
    /// `median(textpoke) / median(stock)`.
    pub ratio: f64,
    /// Its 95% bootstrap interval.
    pub ci95: Option<Interval>,
    /// Median all-CPU syncs textpoke made, and its median batches.
    pub syncs: f64,
    /// Median kernel batches textpoke committed.
    pub batches: f64,
    /// Median function-call IPIs with textpoke and on the stock path.
    pub ipis_textpoke: f64,
    /// See `ipis_textpoke`.
    pub ipis_stock: f64,
    /// Median records textpoke emitted.
    #[serde(default)]
    pub records: f64,
    /// Median traps on textpoke's guards.
    pub traps: f64,
}

fn quiet_path() -> String {
    TEXTPOKE_PATHS[0].to_owned()
}

/// The kernel benchmark of one arch: the `kbench` part of `bench-ARCH.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KbenchReport {
    /// Per workload and textpoke path with samples on it and on the stock path, in
    /// [`WORKLOADS`] order, then [`TEXTPOKE_PATHS`] order.
    pub rows: Vec<KbenchRow>,
    /// Every sample, in log order.
    pub samples: Vec<KbenchSample>,
    /// Sample lines that could not be read.
    #[serde(default)]
    pub problems: Vec<String>,
}

fn values(samples: &[KbenchSample], w: &str, path: &str, f: fn(&KbenchSample) -> u64) -> Vec<f64> {
    samples
        .iter()
        .filter(|s| s.workload == w && s.path == path)
        .map(|s| f(s) as f64)
        .collect()
}

/// Computes the rows of one arch's samples.
pub fn analyse(samples: Vec<KbenchSample>) -> KbenchReport {
    let mut rows = Vec::new();
    for w in WORKLOADS {
        for path in TEXTPOKE_PATHS {
            let (a, b) = (
                values(&samples, w, path, |s| s.ns),
                values(&samples, w, STOCK, |s| s.ns),
            );
            let (Some(textpoke), Some(stock)) = (Spread::of(&a), Spread::of(&b)) else {
                continue;
            };
            if stock.median <= 0.0 {
                continue;
            }
            let med = |path: &str, f: fn(&KbenchSample) -> u64| {
                median(&values(&samples, w, path, f)).unwrap_or(0.0)
            };
            rows.push(KbenchRow {
                workload: w.to_owned(),
                path: path.to_owned(),
                sites: med(path, |s| s.sites),
                ratio: textpoke.median / stock.median,
                ci95: bootstrap_ratio_of_medians(
                    &a,
                    &b,
                    RESAMPLES,
                    fold_seed(SEED, &format!("kbench {w} {path}")),
                ),
                textpoke,
                stock,
                syncs: med(path, |s| s.syncs),
                batches: med(path, |s| s.batches),
                ipis_textpoke: med(path, |s| s.call_ipis),
                ipis_stock: med(STOCK, |s| s.call_ipis),
                records: med(path, |s| s.records),
                traps: med(path, |s| s.traps),
            });
        }
    }
    KbenchReport {
        rows,
        samples,
        problems: Vec::new(),
    }
}

/// The Markdown section.
pub fn markdown(r: &KbenchReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### The kernel's own patching: textpoke against the stock path\n"
    );
    if let Some(first) = r.samples.first() {
        let rounds = r.samples.iter().map(|s| s.rounds).max().unwrap_or(0);
        let _ = writeln!(
            out,
            "{}, {} CPUs (QEMU TCG), {rounds} rounds, the three paths interleaved (each round \
             turns their order). textpoke is loaded, so the kernel hands it its jump label and \
             ftrace changes (kernel/patcher.rs), with nobody listening (the quiet path: no \
             record; on arm64 no guard) or with a tracer listening (a `text_poke` perf event \
             open: guarded and recorded); \"stock\": unloaded (x86: the kernel's own INT3 \
             batches of at most 256 sites, 3 syncs each; arm64: unguarded writes, no record). \
             IPIs are the function-call interrupts of every CPU around the request, whatever \
             sent them.\n",
            first.arch, first.cpus
        );
    }
    if r.rows.is_empty() {
        let _ = writeln!(out, "No workload has samples on both paths.");
        return out;
    }
    let _ = writeln!(
        out,
        "| workload | listener | sites | textpoke median (IQR) | stock median (IQR) | \
         textpoke / stock (95% CI) | textpoke batches, syncs | records | IPIs textpoke / stock \
         | traps |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in &r.rows {
        let ci = row.ci95.as_ref().map_or_else(
            || "n/a".to_owned(),
            |i| format!("{}–{}", ratio_text(i.lo), ratio_text(i.hi)),
        );
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {} ({}–{}) | {} ({}–{}) | {} ({ci}) | {:.0}, {:.0} | {:.0} | {:.0} / {:.0} | {:.0} |",
            row.workload,
            if row.path == TEXTPOKE_PATHS[0] { "none" } else { "yes" },
            row.sites,
            human_ns(row.textpoke.median),
            human_ns(row.textpoke.p25),
            human_ns(row.textpoke.p75),
            human_ns(row.stock.median),
            human_ns(row.stock.p25),
            human_ns(row.stock.p75),
            ratio_text(row.ratio),
            row.batches,
            row.syncs,
            row.records,
            row.ipis_textpoke,
            row.ipis_stock,
            row.traps,
        );
    }
    if !r.problems.is_empty() {
        let _ = writeln!(out, "\nUnreadable sample lines: {}", r.problems.join("; "));
    }
    out
}

impl SampleSection for KbenchReport {
    type Sample = KbenchSample;

    const PREFIX: &'static str = PREFIX;

    fn parse(text: &str) -> (Vec<KbenchSample>, Vec<String>) {
        parse_log(text)
    }

    fn analysed(samples: Vec<KbenchSample>) -> Self {
        analyse(samples)
    }

    fn samples(&self) -> &[KbenchSample] {
        &self.samples
    }

    fn parts_mut(&mut self) -> (&mut Vec<KbenchSample>, &mut Vec<String>) {
        (&mut self.samples, &mut self.problems)
    }

    fn arch_of(sample: &KbenchSample) -> &str {
        &sample.arch
    }

    fn section_markdown(&self) -> String {
        markdown(self)
    }

    fn section_headlines(&self) -> Vec<Headline> {
        self.rows
            .iter()
            .map(|r| Headline {
                what: format!(
                    "kernel patching, textpoke ({}) ÷ stock, {}",
                    if r.path == TEXTPOKE_PATHS[0] {
                        "nobody listening"
                    } else {
                        "a tracer listening"
                    },
                    r.workload
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

    fn line(path: &str, w: &str, round: u32, ns: u64) -> String {
        format!(
            "[ 1.0] {PREFIX}{{\"arch\":\"aarch64\",\"cpus\":2,\"round\":{round},\"rounds\":2,\
             \"path\":\"{path}\",\"workload\":\"{w}\",\"ns\":{ns},\"call_ipis\":7,\"sites\":65,\
             \"batches\":1,\"syncs\":2,\"records\":65,\"traps\":3}}\n"
        )
    }

    #[test]
    fn rows_pair_the_paths_per_workload() {
        let log = [
            line("textpoke", "schedstats_on", 0, 300),
            line("stock", "schedstats_on", 0, 100),
            line("stock", "schedstats_on", 1, 100),
            line("textpoke", "schedstats_on", 1, 300),
            line("textpoke", "ftrace_all_on", 0, 5),
            line("textpoke_listened", "schedstats_on", 0, 600),
            "[ 1.0] textpoke-kbench: {\"path\":\"elsewhere\"}\n".to_owned(),
        ]
        .concat();
        let (samples, problems) = parse_log(&log);
        assert_eq!(samples.len(), 6);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(samples[0].arch, "arm64");
        let r = analyse(samples);
        // ftrace_all_on has no stock sample: no row.
        assert_eq!(r.rows.len(), 2);
        let row = &r.rows[0];
        assert_eq!(
            (row.workload.as_str(), row.path.as_str()),
            ("schedstats_on", "textpoke")
        );
        assert!((row.ratio - 3.0).abs() < 1e-9);
        assert_eq!((row.sites, row.syncs, row.batches), (65.0, 2.0, 1.0));
        let listened = &r.rows[1];
        assert_eq!(listened.path, "textpoke_listened");
        assert!((listened.ratio - 6.0).abs() < 1e-9);
        let md = markdown(&r);
        assert!(md.contains("| schedstats_on | none | 65 |"), "{md}");
        assert!(md.contains("| schedstats_on | yes | 65 |"), "{md}");
    }
}
