//! The benchmarks' report (`make bench`, `textpoke-runner bench-report`): reads every console
//! log of a run directory and per arch writes `bench-ARCH.md`, `.json` and `.svg`.
//!
//! The report is made of sections, each its own module behind [`Section`]: the flips
//! (`textpoke-bench:` lines, bench/flips.rs, with the breakdown of textpoke's commits,
//! bench/breakdown.rs, and the executors' trap work, bench/gaps.rs), the retarget benchmark
//! (`textpoke-retarget:`, bench/retarget.rs), the kernel's own patching (`textpoke-kbench:`,
//! bench/kbench.rs) and the foreign traps (`textpoke-trapcost:`, bench/trapcost.rs). This module
//! only composes them: [`ArchReport`] is the one place that lists them; reading, analysing and
//! showing go through the trait. The statistics are bench/stats.rs's and the plot bench/svg.rs's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::bench::flips::FlipsReport;
use crate::bench::kbench::KbenchReport;
use crate::bench::retarget::RetargetReport;
use crate::bench::section::{merge_into, Headline, Log, Section};
use crate::bench::svg;
use crate::bench::trapcost::TrapcostReport;
use crate::rundir::boot_report::BootReport;
use crate::rundir::layout as rundir;

/// The bench of one arch: what `DIR/bench/bench-ARCH.json` holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "ArchReportJson")]
pub struct ArchReport {
    /// Guest arch.
    pub arch: String,
    /// Online CPUs: the most any section that tells them saw.
    pub cpus: u32,
    /// The flips; their fields are at the top level of the JSON, where they were before the
    /// other sections existed.
    #[serde(flatten)]
    pub flips: FlipsReport,
    /// The retarget benchmark (PERF_EVENT_IOC_MODIFY_ATTRIBUTES), if the logs have its lines; reports written before
    /// it existed have no such field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retarget: Option<RetargetReport>,
    /// The kernel's own patching through textpoke against the stock path, if the logs have its
    /// lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kbench: Option<KbenchReport>,
    /// A kprobe hit with textpoke loaded and without, if the logs have its lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign_traps: Option<TrapcostReport>,
}

/// [`ArchReport`] as it is read from JSON. serde reads a flattened field through a buffer that
/// cannot take the gap histograms' keys, JSON strings, as numbers; so the flips' fields are read
/// one by one here instead.
#[derive(Deserialize)]
struct ArchReportJson {
    arch: String,
    cpus: u32,
    sources: Vec<crate::bench::flips::Source>,
    configs: Vec<crate::bench::flips::ConfigStats>,
    ratios: Vec<crate::bench::flips::Ratio>,
    samples: Vec<crate::bench::flips::Sample>,
    #[serde(default)]
    retarget: Option<RetargetReport>,
    #[serde(default)]
    kbench: Option<KbenchReport>,
    #[serde(default)]
    foreign_traps: Option<TrapcostReport>,
}

impl From<ArchReportJson> for ArchReport {
    fn from(j: ArchReportJson) -> Self {
        Self {
            arch: j.arch,
            cpus: j.cpus,
            flips: FlipsReport {
                sources: j.sources,
                configs: j.configs,
                ratios: j.ratios,
                samples: j.samples,
            },
            retarget: j.retarget,
            kbench: j.kbench,
            foreign_traps: j.foreign_traps,
        }
    }
}

/// The sections, listed here (and in [`ArchReportJson`]) and nowhere else: a new section is a
/// field of [`ArchReport`] and a line in each of these.
impl ArchReport {
    /// The prefixes of the sections' lines, in the order the report shows them.
    fn prefixes() -> [&'static str; 4] {
        [
            FlipsReport::prefix(),
            RetargetReport::prefix(),
            KbenchReport::prefix(),
            TrapcostReport::prefix(),
        ]
    }

    /// What each section reads of one console log.
    fn read(log: &Log) -> Self {
        Self {
            arch: String::new(),
            cpus: 0,
            flips: FlipsReport::read(log).unwrap_or_default(),
            retarget: RetargetReport::read(log),
            kbench: KbenchReport::read(log),
            foreign_traps: TrapcostReport::read(log),
        }
    }

    /// Adds what each section read of another log of the arch.
    fn merge(&mut self, other: Self) {
        let Self {
            arch: _,
            cpus: _,
            flips,
            retarget,
            kbench,
            foreign_traps,
        } = other;
        self.flips.merge(flips);
        merge_into(&mut self.retarget, retarget);
        merge_into(&mut self.kbench, kbench);
        merge_into(&mut self.foreign_traps, foreign_traps);
    }

    /// The sections the report has, in the order it shows them.
    pub fn sections(&self) -> Vec<&dyn Section> {
        let mut v: Vec<&dyn Section> = vec![&self.flips];
        v.extend(self.retarget.as_ref().map(|s| s as &dyn Section));
        v.extend(self.kbench.as_ref().map(|s| s as &dyn Section));
        v.extend(self.foreign_traps.as_ref().map(|s| s as &dyn Section));
        v
    }

    fn sections_mut(&mut self) -> Vec<&mut dyn Section> {
        let mut v: Vec<&mut dyn Section> = vec![&mut self.flips];
        v.extend(self.retarget.as_mut().map(|s| s as &mut dyn Section));
        v.extend(self.kbench.as_mut().map(|s| s as &mut dyn Section));
        v.extend(self.foreign_traps.as_mut().map(|s| s as &mut dyn Section));
        v
    }
}

impl ArchReport {
    /// Analyses every section once all the logs of the arch are read.
    fn analyse(&mut self) {
        for s in self.sections_mut() {
            s.analyse();
        }
        self.cpus = self
            .sections()
            .iter()
            .filter_map(|s| s.cpus())
            .max()
            .unwrap_or(0);
    }

    /// The ratios the sections stand on, with their intervals, in the order the report shows
    /// them.
    pub fn headlines(&self) -> Vec<Headline> {
        self.sections().iter().flat_map(|s| s.headlines()).collect()
    }
}

/// QEMU's wall time for the boot that wrote `log`, from its report, if it has one.
fn boot_seconds(log: &Path) -> Option<f64> {
    std::fs::read_to_string(rundir::report_of_log(log))
        .ok()
        .and_then(|s| serde_json::from_str::<BootReport>(&s).ok())
        .map(|r| r.seconds)
}

/// Reads every console log of `dir` (`*.log`) and returns a report per arch found in them,
/// x86_64 first.
pub fn read_dir(dir: &Path) -> Result<Vec<ArchReport>, String> {
    let logs = rundir::files(dir, rundir::is_log)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut by_arch: BTreeMap<String, ArchReport> = BTreeMap::new();
    for path in logs {
        let bytes =
            std::fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let text = String::from_utf8_lossy(&bytes);
        let part = ArchReport::read(&Log {
            path: &path,
            text: &text,
            seconds: boot_seconds(&path),
        });
        // One boot, one arch: the first sample of any kind names it.
        let Some(arch) = part
            .sections()
            .iter()
            .find_map(|s| s.arch())
            .map(str::to_owned)
        else {
            continue;
        };
        by_arch
            .entry(arch.clone())
            .or_insert_with(|| ArchReport {
                arch,
                ..ArchReport::default()
            })
            .merge(part);
    }
    if by_arch.is_empty() {
        let prefixes = ArchReport::prefixes().map(|p| format!("`{}`", p.trim_end()));
        let (last, rest) = prefixes.split_last().expect("there are sections");
        return Err(format!(
            "no {} or {last} lines in any log of {}",
            rest.join(", "),
            dir.display()
        ));
    }
    let mut reports: Vec<ArchReport> = by_arch
        .into_values()
        .map(|mut r| {
            r.analyse();
            r
        })
        .collect();
    reports.sort_by_key(|r| r.arch != "x86_64");
    Ok(reports)
}

/// The Markdown for one arch: each section's, in turn.
pub fn markdown(r: &ArchReport) -> String {
    let mut out = String::new();
    for md in r
        .sections()
        .iter()
        .filter_map(|s| s.markdown(&r.arch, r.cpus))
    {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&md);
    }
    out
}

/// Writes `bench-ARCH.md`, `.json` and `.svg` for each report into `to`; returns their paths.
pub fn write(reports: &[ArchReport], to: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let mut written = Vec::new();
    for r in reports {
        let json = serde_json::to_string_pretty(r).map_err(|e| e.to_string())? + "\n";
        // No plot without flips (a boot that ran only the retarget benchmark).
        let svg = (!r.flips.configs.is_empty()).then(|| svg::plot(&r.arch, r.cpus, &r.flips));
        let files = [
            ("md", Some(markdown(r))),
            ("json", Some(json)),
            ("svg", svg),
        ];
        for (ext, text) in files.into_iter().filter_map(|(e, t)| Some((e, t?))) {
            let path = rundir::bench_file(to, &r.arch, ext);
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
    use crate::bench::{retarget, trapcost};

    /// The report of an arch whose logs have only flips.
    fn flips_only(arch: &str, samples: Vec<crate::bench::flips::Sample>) -> ArchReport {
        let mut r = ArchReport {
            arch: arch.into(),
            flips: FlipsReport {
                samples,
                ..FlipsReport::default()
            },
            ..ArchReport::default()
        };
        r.analyse();
        r
    }

    #[test]
    fn a_report_with_gap_histograms_reads_back() {
        let dir = std::env::temp_dir().join(format!("textpoke-bench-gaps-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut log = String::new();
        for (mode, ns) in [("textpoke", 300), ("static_key", 100)] {
            log.push_str(&format!(
                "[ 1.0] textpoke-bench: {{\"arch\":\"x86_64\",\"cpus\":2,\"mode\":\"{mode}\",\
                 \"n\":16,\"round\":0,\"ns\":{ns},\"syncs\":3,\"records\":16,\"call_ipis\":4,\
                 \"stall_ns\":1}}\n"
            ));
            for (window, bucket) in [("before", 83), ("flip_x", 128)] {
                log.push_str(&format!(
                    "[ 1.1] textpoke-gaps: {{\"arch\":\"x86_64\",\"mode\":\"{mode}\",\"n\":16,\
                     \"round\":0,\"window\":\"{window}\",\"pairs\":[[{bucket},400]]}}\n"
                ));
            }
        }
        std::fs::write(dir.join("x86_64-bench.log"), log).unwrap();
        let reports = read_dir(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        let r = &reports.unwrap()[0];
        assert!(r.flips.samples.iter().all(|s| s.gaps.is_some()));
        assert!(r.flips.configs.iter().all(|c| c.trapped.is_some()));
        let json = serde_json::to_string_pretty(r).unwrap();
        let back: ArchReport = serde_json::from_str(&json).unwrap();
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            serde_json::from_str::<serde_json::Value>(&json).unwrap()
        );
        assert_eq!(back.flips.samples, r.flips.samples);
    }

    #[test]
    fn arch_reports_without_retarget_still_read() {
        let bench = crate::bench::flips::parse_log(
            "textpoke-bench: {\"arch\":\"x86_64\",\"cpus\":4,\"mode\":\"textpoke\",\"n\":16,\"round\":0,\"ns\":10,\"syncs\":0,\"records\":16,\"call_ipis\":4,\"stall_ns\":1}\n",
        );
        let plain = flips_only("x86_64", bench.samples);
        assert_eq!(plain.retarget, None);
        let json = serde_json::to_string(&plain).unwrap();
        // Older reports have no such field, and a report without retarget lines writes none.
        assert!(!json.contains("retarget"), "{json}");
        assert_eq!(serde_json::from_str::<ArchReport>(&json).unwrap(), plain);
        let mut with = plain.clone();
        with.retarget = Some(retarget::analyse(retarget::tests::samples()));
        let json = serde_json::to_string(&with).unwrap();
        let back = serde_json::from_str::<ArchReport>(&json).unwrap();
        // serde_json reads some floats one ulp off (without its `float_roundtrip`), so compare
        // as JSON read the same way.
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            serde_json::from_str::<serde_json::Value>(&json).unwrap()
        );
        assert_eq!(back.retarget.unwrap().samples, retarget::tests::samples());
        assert!(markdown(&with).contains("(PERF_EVENT_IOC_MODIFY_ATTRIBUTES)"));
        assert!(!markdown(&plain).contains("(PERF_EVENT_IOC_MODIFY_ATTRIBUTES)"));
    }

    #[test]
    fn read_dir_reports_an_arch_with_only_retarget_lines() {
        let dir = std::env::temp_dir().join(format!("textpoke-retarget-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let line = |arch: &str, traps: &str, method: &str, ns: u64, hits: u32| {
            format!(
                "[    5.0] textpoke-retarget: {{\"arch\":\"{arch}\",\"cpus\":2,\"traps\":\"{traps}\",\
                 \"method\":\"{method}\",\"round\":0,\"rounds\":1,\"n\":4,\"ns\":{ns},\"hits\":{hits}}}\n"
            )
        };
        let x86: String = [
            line("x86_64", "never", "modify", 400, 0),
            line("x86_64", "never", "reopen", 4000, 0),
            line("x86_64", "always", "modify", 800, 4),
            line("x86_64", "always", "reopen", 3200, 4),
            "[    6.0] textpoke-retarget: {\n".into(),
        ]
        .concat();
        let arm = "[    1.0] textpoke-bench: {\"arch\":\"aarch64\",\"cpus\":4,\"mode\":\"textpoke\",\"n\":16,\"round\":0,\"ns\":10,\"syncs\":0,\"records\":16,\"call_ipis\":4,\"stall_ns\":1}\n";
        std::fs::write(dir.join("a-x86_64.log"), x86).unwrap();
        std::fs::write(dir.join("b-arm64.log"), arm).unwrap();
        std::fs::write(dir.join("c-none.log"), "nothing here\n").unwrap();
        let reports = read_dir(&dir);
        let to = dir.join("bench");
        let written = reports.as_ref().ok().map(|r| write(r, &to));
        let _ = std::fs::remove_dir_all(&dir);
        let reports = reports.unwrap();
        assert_eq!(reports.len(), 2);
        let x86 = &reports[0];
        assert_eq!((x86.arch.as_str(), x86.cpus), ("x86_64", 2));
        assert!(x86.flips.configs.is_empty() && x86.flips.samples.is_empty());
        let rt = x86.retarget.as_ref().unwrap();
        assert_eq!(rt.samples.len(), 4);
        assert_eq!(rt.ratio(retarget::Traps::Never).unwrap().ratio, 10.0);
        assert_eq!(rt.ratio(retarget::Traps::Always).unwrap().ratio, 4.0);
        assert_eq!(rt.problems.len(), 1);
        // The log is named: the report's problems come from every log of the arch.
        assert!(
            rt.problems[0].contains("a-x86_64.log: line 5: "),
            "{:?}",
            rt.problems
        );
        let md = markdown(x86);
        // No empty flips table, only the retarget section.
        assert!(
            md.starts_with(
                "### Retargeting a hardware breakpoint (PERF_EVENT_IOC_MODIFY_ATTRIBUTES)\n"
            ),
            "{md}"
        );
        assert!(md.contains("x86_64, 2 CPUs (QEMU TCG)"), "{md}");
        assert!(md.contains("- 1 unreadable sample lines: "), "{md}");
        assert_eq!(reports[1].arch, "arm64");
        assert_eq!(reports[1].retarget, None);
        // Markdown and JSON for both; no plot without flips.
        let written = written.unwrap().unwrap();
        let names: Vec<String> = written
            .iter()
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect();
        assert_eq!(
            names,
            [
                "bench-x86_64.md",
                "bench-x86_64.json",
                "bench-arm64.md",
                "bench-arm64.json",
                "bench-arm64.svg"
            ]
        );
        // Neither kind of line: the error names both.
        let empty =
            std::env::temp_dir().join(format!("textpoke-retarget-empty-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        std::fs::write(empty.join("x.log"), "nothing\n").unwrap();
        let err = read_dir(&empty).unwrap_err();
        let _ = std::fs::remove_dir_all(&empty);
        assert!(
            err.contains("`textpoke-bench:`") && err.contains("`textpoke-retarget:`"),
            "{err}"
        );
    }

    #[test]
    fn read_dir_reports_an_arch_with_only_foreign_trap_lines() {
        let dir = std::env::temp_dir().join(format!("textpoke-trapcost-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let prefix = trapcost::PREFIX;
        let line = |mode: &str, round: u32, probed: u64| {
            format!(
                "[   50.0] {prefix}{{\"arch\":\"aarch64\",\"cpus\":4,\"round\":{round},\
                 \"rounds\":2,\"mode\":\"{mode}\",\"n\":100,\"probed_ns\":{probed},\
                 \"unprobed_ns\":500,\"hits\":100,\"post_hits\":100}}\n"
            )
        };
        let log: String = [
            line(trapcost::LOADED, 0, 100_500),
            line(trapcost::ABSENT, 0, 100_500),
            line(trapcost::LOADED, 1, 110_500),
            line(trapcost::ABSENT, 1, 110_500),
            format!("[   51.0] {prefix}{{\n"),
        ]
        .concat();
        std::fs::write(dir.join("arm64-bench.log"), log).unwrap();
        let reports = read_dir(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        let reports = reports.unwrap();
        assert_eq!(reports.len(), 1);
        let r = &reports[0];
        assert_eq!((r.arch.as_str(), r.cpus), ("arm64", 4));
        assert!(r.flips.configs.is_empty() && r.retarget.is_none() && r.kbench.is_none());
        let f = r.foreign_traps.as_ref().unwrap();
        assert_eq!(f.samples.len(), 4);
        assert_eq!(
            f.stats(trapcost::LOADED).unwrap().per_hit_ns.median,
            1_050.0
        );
        assert_eq!(f.ratio.as_ref().unwrap().ratio, 1.0);
        assert_eq!(f.problems.len(), 1);
        assert!(
            f.problems[0].contains("arm64-bench.log: line 5: "),
            "{:?}",
            f.problems
        );
        let md = markdown(r);
        assert!(
            md.starts_with("### Foreign traps: a kprobe hit with textpoke loaded and without\n"),
            "{md}"
        );
        assert!(md.contains("this is the control"), "{md}");
        assert!(md.contains("- 1 unreadable sample lines: "), "{md}");
        // In the JSON and back; a report without these lines writes no such field, and older
        // reports, which have none, still read.
        let json = serde_json::to_string(r).unwrap();
        let back: ArchReport = serde_json::from_str(&json).unwrap();
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            serde_json::from_str::<serde_json::Value>(&json).unwrap()
        );
        let mut plain = r.clone();
        plain.foreign_traps = None;
        let json = serde_json::to_string(&plain).unwrap();
        assert!(!json.contains("foreign_traps"), "{json}");
        assert_eq!(serde_json::from_str::<ArchReport>(&json).unwrap(), plain);
    }
}
