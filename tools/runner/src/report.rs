//! The per-boot JSON report and the summary over a directory of them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::judge::{Counts, Judgement, Verdict};
use crate::qemu::Arch;
use crate::suite::Expected;

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

/// A `DIR/*.json` file: its path and its report, or why it could not be read.
pub type Entry = (PathBuf, Result<BootReport, String>);

/// Reads every report in `dir` (its `*.json` but the manifest), sorted by file name.
pub fn read_dir(dir: &Path) -> std::io::Result<Vec<Entry>> {
    Ok(crate::rundir::files(dir, crate::rundir::is_report)?
        .into_iter()
        .map(|p| {
            let report = std::fs::read_to_string(&p)
                .map_err(|e| e.to_string())
                .and_then(|s| serde_json::from_str(&s).map_err(|e| e.to_string()));
            (p, report)
        })
        .collect())
}

/// Renders the summary of a set of reports. `planned` is every report the run was planned to
/// produce (its manifest's boots, kunit.py cross-checks and host checks); each one missing
/// counts as a failure, named. Returns the text, whose last line is exactly
/// `N passed, M failed`, and whether everything came out as expected.
pub fn summary(entries: &[Entry], planned: &[Expected]) -> (String, bool) {
    let reports: Vec<&BootReport> = entries
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .collect();
    let unreadable: Vec<(&PathBuf, &String)> = entries
        .iter()
        .filter_map(|(p, r)| r.as_ref().err().map(|e| (p, e)))
        .collect();
    // A report that is there but unreadable already counts as one failure.
    let missing: Vec<&Expected> = planned
        .iter()
        .filter(|e| !reports.iter().any(|r| r.name == e.name))
        .filter(|e| {
            !unreadable
                .iter()
                .any(|(p, _)| crate::rundir::report_name(p) == Some(e.name.as_str()))
        })
        .collect();

    let header = [
        "NAME", "ARCH", "SMP", "VERDICT", "EXPECTED", "PASS", "FAIL", "SKIP", "SECS", "RESULT",
        "LOG",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in &reports {
        rows.push(vec![
            r.name.clone(),
            r.arch.to_string(),
            r.smp.to_string(),
            r.verdict.to_string(),
            r.expected.to_string(),
            r.counts.passed.to_string(),
            r.counts.failed.to_string(),
            r.counts.skipped.to_string(),
            format!("{:.1}", r.seconds),
            if r.ok { "ok" } else { "FAILED" }.to_owned(),
            if r.ok { String::new() } else { r.log.clone() },
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|row| row[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }

    let failing: Vec<&&BootReport> = reports.iter().filter(|r| !r.ok).collect();
    let failing_tests: Vec<String> = failing
        .iter()
        .flat_map(|r| {
            r.failing_tests
                .iter()
                .map(move |t| format!("  {}: {t}", r.name))
        })
        .collect();
    if !failing_tests.is_empty() {
        let _ = writeln!(out, "\nFailing KTAP tests:");
        for t in &failing_tests {
            let _ = writeln!(out, "{t}");
        }
    }
    if !missing.is_empty() {
        let _ = writeln!(out, "\nPlanned but never reported:");
        for e in &missing {
            let _ = writeln!(
                out,
                "  {}: never reported ({})",
                e.name,
                e.source.why_missing()
            );
        }
    }
    if !failing.is_empty() || !unreadable.is_empty() {
        let _ = writeln!(out, "\nFailed:");
        for r in &failing {
            let _ = writeln!(out, "  {}: {} (log: {})", r.name, r.reason, r.log);
        }
        for (p, e) in &unreadable {
            let _ = writeln!(out, "  {}: unreadable report: {e}", p.display());
        }
    }

    let mut t = tally(reports.iter().copied());
    t.failed += unreadable.len() + missing.len();
    let _ = writeln!(out, "\n{} skipped", t.skipped);
    let _ = writeln!(out, "{} passed, {} failed", t.passed, t.failed);
    let all_ok = t.failed == 0 && failing.is_empty() && unreadable.is_empty() && missing.is_empty();
    (out, all_ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::Source;

    fn expected(name: &str, source: Source) -> Expected {
        Expected {
            name: name.to_owned(),
            source,
        }
    }

    fn report(
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
    fn summary_text_and_exit() {
        use Verdict::*;
        let entries: Vec<Entry> = vec![
            (
                PathBuf::from("out/a.json"),
                Ok(report("a", Pass, Pass, (4, 0, 1))),
            ),
            (
                PathBuf::from("out/b.json"),
                Ok(report("b", NotOk, NotOk, (1, 1, 0))),
            ),
        ];
        let (text, ok) = summary(&entries, &[]);
        assert!(ok, "{text}");
        assert_eq!(text.lines().last(), Some("5 passed, 0 failed"));
        assert!(text.contains("\n1 skipped\n"), "{text}");
        assert!(!text.contains("Failing"), "{text}");
        assert!(
            text.starts_with("NAME  ARCH    SMP  VERDICT  EXPECTED"),
            "{text}"
        );

        let mut bad = report("c", Pass, Splat, (3, 0, 0));
        bad.reason = "kernel splat at log line 9: WARNING: x".into();
        let entries: Vec<Entry> = vec![
            (
                PathBuf::from("out/a.json"),
                Ok(report("a", Pass, NotOk, (4, 1, 0))),
            ),
            (PathBuf::from("out/c.json"), Ok(bad)),
            (
                PathBuf::from("out/d.json"),
                Err("expected value at line 1".into()),
            ),
        ];
        let (text, ok) = summary(&entries, &[]);
        assert!(!ok);
        assert_eq!(text.lines().last(), Some("7 passed, 3 failed"));
        assert!(
            text.contains("Failing KTAP tests:\n  a: suite/t0\n"),
            "{text}"
        );
        assert!(
            text.contains("  c: kernel splat at log line 9: WARNING: x (log: out/c.log)"),
            "{text}"
        );
        assert!(text.contains("out/d.json: unreadable report"), "{text}");
    }

    #[test]
    fn ok_false_fails_the_summary_even_without_a_failed_count() {
        let mut r = report("a", Verdict::Pass, Verdict::Pass, (2, 0, 0));
        r.ok = false; // e.g. `--expect-log` not found
        let (text, ok) = summary(&[(PathBuf::from("a.json"), Ok(r))], &[]);
        assert!(!ok);
        assert_eq!(text.lines().last(), Some("2 passed, 1 failed"));
    }

    #[test]
    fn a_planned_boot_without_a_report_fails_by_name() {
        let entries: Vec<Entry> = vec![(
            PathBuf::from("out/x86_64-smp2.json"),
            Ok(report(
                "x86_64-smp2",
                Verdict::Pass,
                Verdict::Pass,
                (4, 0, 0),
            )),
        )];
        let planned = [
            expected("x86_64-smp2", Source::Boot),
            expected("arm64-smp2", Source::Boot),
        ];
        let (text, ok) = summary(&entries, &planned);
        assert!(!ok, "{text}");
        assert!(
            text.contains(
                "Planned but never reported:\n  arm64-smp2: never reported (boot: its guest was \
                 not built, or the suite did not run it)\n"
            ),
            "{text}"
        );
        assert_eq!(text.lines().last(), Some("4 passed, 1 failed"));
        let (text, ok) = summary(&entries, &planned[..1]);
        assert!(ok, "{text}");
    }

    #[test]
    fn a_planned_host_check_without_a_report_fails_by_name() {
        let entries: Vec<Entry> = vec![
            (
                PathBuf::from("out/clippy.json"),
                Ok(report("clippy", Verdict::Pass, Verdict::Pass, (1, 0, 0))),
            ),
            (
                PathBuf::from("out/rustfmt.json"),
                Err("EOF while parsing a value at line 3".into()),
            ),
        ];
        let planned = [
            expected("clippy", Source::HostCheck),
            expected("loom", Source::HostCheck),
            expected("rustfmt", Source::HostCheck),
        ];
        let (text, ok) = summary(&entries, &planned);
        assert!(!ok, "{text}");
        assert!(
            text.contains("\n  loom: never reported (host check: its lane died"),
            "{text}"
        );
        // A report that is there but unreadable fails once, as unreadable.
        assert!(!text.contains("rustfmt: never reported"), "{text}");
        assert!(
            text.contains("out/rustfmt.json: unreadable report"),
            "{text}"
        );
        assert_eq!(text.lines().last(), Some("1 passed, 2 failed"));
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
