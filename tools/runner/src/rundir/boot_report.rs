//! The per-boot JSON report (`DIR/NAME.json`), reading a directory of them, and adding them up.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::judge::verdict::{Counts, Judgement, Verdict};
use crate::platform::qemu::Arch;

/// One KTAP document, as recorded in a report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentReport {
    /// Its name, if it has one.
    pub name: Option<String>,
    /// Line of its version line in the log.
    pub line: usize,
    /// Passing tests.
    pub passed: usize,
    /// Failing tests.
    pub failed: usize,
    /// Skipped tests.
    pub skipped: usize,
    /// Its structural problems, as `line N: what`.
    pub problems: Vec<String>,
}

/// The first splat, as recorded in a report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplatReport {
    /// Line in the log.
    pub line: usize,
    /// The line's text.
    pub text: String,
}

/// What `boot` writes to `DIR/NAME.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BootReport {
    /// The boot's name (`--name`).
    pub name: String,
    /// Guest architecture.
    pub arch: Arch,
    /// Number of guest CPUs.
    pub smp: u32,
    /// Guest memory in MiB.
    pub mem_mb: u32,
    /// What the boot amounted to.
    pub verdict: Verdict,
    /// What it was expected to amount to (`--expect`).
    pub expected: Verdict,
    /// A string the console was required to contain (`--expect-log`).
    #[serde(default)]
    pub expect_log: Option<String>,
    /// Whether the verdict (and log) met the expectation: the boot's result as a check.
    pub ok: bool,
    /// Why, for a person.
    pub reason: String,
    /// Test counts over all KTAP documents.
    pub counts: Counts,
    /// Paths of failing tests.
    #[serde(default)]
    pub failing_tests: Vec<String>,
    /// Every KTAP document seen.
    #[serde(default)]
    pub documents: Vec<DocumentReport>,
    /// The first splat, if any.
    #[serde(default)]
    pub splat: Option<SplatReport>,
    /// Path of the console log.
    pub log: String,
    /// Wall time from QEMU's start to its end, in seconds.
    pub seconds: f64,
    /// When QEMU started, in seconds since the Unix epoch (0 in a host check's report, and in
    /// reports written before boots said it): the stage table puts the boot on its time line.
    #[serde(default)]
    pub started: f64,
    /// The longest the console stayed silent, in seconds (0 in a host check's report, and in
    /// reports written before boots said it): the margin under the boot's silence limit.
    #[serde(default)]
    pub longest_silence: f64,
    /// QEMU's exit status, if it exited by itself.
    #[serde(default)]
    pub qemu_status: Option<i32>,
    /// The QEMU command line, program first.
    #[serde(default)]
    pub command: Vec<String>,
}

/// Everything about a boot but the judgement, for [`BootReport::new`].
#[derive(Clone, Debug)]
pub struct BootInfo {
    /// The boot's name.
    pub name: String,
    /// Guest architecture.
    pub arch: Arch,
    /// Guest CPUs.
    pub smp: u32,
    /// Guest memory in MiB.
    pub mem_mb: u32,
    /// Expected verdict.
    pub expected: Verdict,
    /// Required console text.
    pub expect_log: Option<String>,
    /// Log path.
    pub log: String,
    /// Wall time in seconds.
    pub seconds: f64,
    /// When QEMU started, in seconds since the Unix epoch.
    pub started: f64,
    /// The longest the console stayed silent, in seconds.
    pub longest_silence: f64,
    /// QEMU's exit status.
    pub qemu_status: Option<i32>,
    /// QEMU command line.
    pub command: Vec<String>,
}

impl BootReport {
    /// Assembles a report from a judgement and the result of checking it.
    pub fn new(info: BootInfo, judgement: &Judgement, ok: bool, reason: String) -> Self {
        Self {
            name: info.name,
            arch: info.arch,
            smp: info.smp,
            mem_mb: info.mem_mb,
            verdict: judgement.verdict,
            expected: info.expected,
            expect_log: info.expect_log,
            ok,
            reason,
            counts: judgement.counts,
            failing_tests: judgement.failing_tests.clone(),
            documents: judgement
                .documents
                .iter()
                .map(|d| DocumentReport {
                    name: d.name.clone(),
                    line: d.line,
                    passed: d.passed(),
                    failed: d.failed(),
                    skipped: d.skipped(),
                    problems: d.problems.iter().map(ToString::to_string).collect(),
                })
                .collect(),
            splat: judgement.splat.as_ref().map(|s| SplatReport {
                line: s.line,
                text: s.text.clone(),
            }),
            log: info.log,
            seconds: info.seconds,
            started: info.started,
            longest_silence: info.longest_silence,
            qemu_status: info.qemu_status,
            command: info.command,
        }
    }
}

/// Totals over a set of boots, as the summary's last lines state them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Passing leaf tests of boots expected to pass, plus harness checks that came out as
    /// expected.
    pub passed: usize,
    /// Failing leaf tests of boots expected to pass, plus one for each such boot that failed
    /// without a failing test to show for it (timeout, splat, missing or truncated document),
    /// plus harness checks that did not come out as expected.
    pub failed: usize,
    /// Skipped leaf tests of boots expected to pass.
    pub skipped: usize,
}

/// Adds up a set of boots.
///
/// A boot expected to pass contributes its tests; a boot expected to end some other way is a
/// check of the harness itself and contributes one result, since its tests failing is the
/// point.
pub fn tally<'a>(reports: impl IntoIterator<Item = &'a BootReport>) -> Tally {
    let mut t = Tally::default();
    for r in reports {
        if r.expected == Verdict::Pass {
            t.passed += r.counts.passed;
            t.failed += r.counts.failed;
            t.skipped += r.counts.skipped;
            if !r.ok && r.counts.failed == 0 {
                t.failed += 1;
            }
        } else if r.ok {
            t.passed += 1;
        } else {
            t.failed += 1;
        }
    }
    t
}

/// A report file of a run directory: its path and its report, or why it could not be read.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The file.
    pub path: PathBuf,
    /// What it holds.
    pub report: Result<BootReport, String>,
}

/// Reads every report in `dir` (its `*.json` but the manifest), sorted by file name.
pub fn read_dir(dir: &Path) -> std::io::Result<Vec<Entry>> {
    Ok(
        crate::rundir::layout::files(dir, crate::rundir::layout::is_report)?
            .into_iter()
            .map(|p| {
                let report = std::fs::read_to_string(&p)
                    .map_err(|e| e.to_string())
                    .and_then(|s| serde_json::from_str(&s).map_err(|e| e.to_string()));
                Entry { path: p, report }
            })
            .collect(),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A report of boot `name` expected to come out as `expected` that came out as `verdict`
    /// with `counts` (passed, failed, skipped).
    pub(crate) fn report(
        name: &str,
        expected: Verdict,
        verdict: Verdict,
        counts: (usize, usize, usize),
    ) -> BootReport {
        BootReport {
            name: name.to_owned(),
            arch: Arch::X86_64,
            smp: 2,
            mem_mb: 1024,
            verdict,
            expected,
            expect_log: None,
            ok: verdict == expected,
            reason: format!("{verdict}"),
            counts: Counts {
                passed: counts.0,
                failed: counts.1,
                skipped: counts.2,
            },
            failing_tests: (0..counts.1).map(|i| format!("suite/t{i}")).collect(),
            documents: Vec::new(),
            splat: None,
            log: format!("out/{name}.log"),
            seconds: 12.34,
            started: 0.0,
            longest_silence: 0.0,
            qemu_status: Some(0),
            command: vec!["qemu-system-x86_64".into()],
        }
    }

    #[test]
    fn tally_counts_tests_and_checks() {
        use Verdict::*;
        let reports = [
            report("x86-smp2", Pass, Pass, (10, 0, 2)),
            report("x86-smp4", Pass, NotOk, (8, 2, 0)),
            report("arm64-hang", Pass, Timeout, (3, 0, 0)),
            report("check-notok", NotOk, NotOk, (1, 1, 0)),
            report("check-warn", Splat, Pass, (5, 0, 0)),
        ];
        assert_eq!(
            tally(&reports),
            Tally {
                passed: 10 + 8 + 3 + 1,
                failed: 2 + 1 + 1,
                skipped: 2
            }
        );
    }

    #[test]
    fn json_round_trip_and_field_names() {
        let r = report("a", Verdict::MissingKtap, Verdict::NotOk, (1, 1, 0));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["arch"], "x86_64");
        assert_eq!(json["verdict"], "not-ok");
        assert_eq!(json["expected"], "missing-ktap");
        assert_eq!(json["counts"]["failed"], 1);
        assert_eq!(json["ok"], false);
        let back: BootReport = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
    }
}
