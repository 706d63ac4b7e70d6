//! The summary of a run directory (`textpoke-runner summary`): its reports against the plan
//! in its manifest, a table of them, and the totals, whose last line is `N passed, M failed`.

use std::fmt::Write as _;
use std::path::Path;

use crate::plan::manifest::Expected;
use crate::rundir::boot_report::{tally, BootReport, Entry, Tally};

/// What a run directory's reports come to against its plan.
#[derive(Clone, Debug)]
pub struct Tallied<'a> {
    /// The reports that could be read, in the entries' order.
    pub reports: Vec<&'a BootReport>,
    /// The reports that are there but could not be read, with why.
    pub unreadable: Vec<(&'a Path, &'a str)>,
    /// The planned reports that are not there, in the plan's order.
    pub missing: Vec<&'a Expected>,
    /// The reports no plan asked for: their results do not count, and each is a failure.
    pub unplanned: Vec<&'a BootReport>,
    /// The planned reports that expected another verdict than the plan did, with the plan's.
    pub disagreeing: Vec<(&'a BootReport, &'a Expected)>,
    /// The totals of the planned reports, each unreadable, missing, unplanned or disagreeing
    /// report counted as one failure.
    pub tally: Tally,
}

impl Tallied<'_> {
    /// Whether everything came out as expected.
    pub fn ok(&self) -> bool {
        self.tally.failed == 0
            && self.reports.iter().all(|r| r.ok)
            && self.unreadable.is_empty()
            && self.missing.is_empty()
            && self.unplanned.is_empty()
            && self.disagreeing.is_empty()
    }
}

/// Adds up `entries` against `planned`, every report the run was planned to produce (its
/// manifest's boots, kunit.py cross-checks and host checks).
pub fn tally_run<'a>(entries: &'a [Entry], planned: &'a [Expected]) -> Tallied<'a> {
    let reports: Vec<&BootReport> = entries
        .iter()
        .filter_map(|e| e.report.as_ref().ok())
        .collect();
    let unreadable: Vec<(&Path, &str)> = entries
        .iter()
        .filter_map(|e| {
            e.report
                .as_ref()
                .err()
                .map(|why| (e.path.as_path(), why.as_str()))
        })
        .collect();
    // A report that is there but unreadable already counts as one failure.
    let missing: Vec<&Expected> = planned
        .iter()
        .filter(|e| !reports.iter().any(|r| r.name == e.name))
        .filter(|e| {
            !unreadable
                .iter()
                .any(|(p, _)| crate::rundir::layout::report_name(p) == Some(e.name.as_str()))
        })
        .collect();
    let plan_of = |r: &BootReport| planned.iter().find(|e| e.name == r.name);
    let unplanned: Vec<&BootReport> = reports
        .iter()
        .copied()
        .filter(|r| plan_of(r).is_none())
        .collect();
    let disagreeing: Vec<(&BootReport, &Expected)> = reports
        .iter()
        .filter_map(|r| {
            plan_of(r)
                .filter(|e| e.expect != r.expected)
                .map(|e| (*r, e))
        })
        .collect();
    let mut tally = tally(reports.iter().copied().filter(|r| plan_of(r).is_some()));
    tally.failed += unreadable.len() + missing.len() + unplanned.len() + disagreeing.len();
    Tallied {
        reports,
        unreadable,
        missing,
        unplanned,
        disagreeing,
        tally,
    }
}

/// Renders the summary of a set of reports. `planned` is every report the run was planned to
/// produce (its manifest's boots, kunit.py cross-checks and host checks); each one missing
/// counts as a failure, named. Returns the text, whose last line is exactly
/// `N passed, M failed`, and whether everything came out as expected.
pub fn summary(entries: &[Entry], planned: &[Expected]) -> (String, bool) {
    let run = tally_run(entries, planned);
    let Tallied {
        reports,
        unreadable,
        missing,
        unplanned,
        disagreeing,
        tally: t,
    } = &run;

    let header = [
        "NAME", "ARCH", "SMP", "VERDICT", "EXPECTED", "PASS", "FAIL", "SKIP", "SECS", "RESULT",
        "LOG",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in reports {
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
        for e in missing {
            let _ = writeln!(
                out,
                "  {}: never reported ({})",
                e.name,
                e.source.why_missing()
            );
        }
    }
    if !unplanned.is_empty() {
        let _ = writeln!(out, "\nReported but never planned (not counted):");
        for r in unplanned {
            let _ = writeln!(out, "  {}: no plan names it (log: {})", r.name, r.log);
        }
    }
    if !disagreeing.is_empty() {
        let _ = writeln!(out, "\nExpected another verdict than the plan:");
        for (r, e) in disagreeing {
            let _ = writeln!(
                out,
                "  {}: expected {}, the plan says {}",
                r.name, r.expected, e.expect
            );
        }
    }
    if !failing.is_empty() || !unreadable.is_empty() {
        let _ = writeln!(out, "\nFailed:");
        for r in &failing {
            let _ = writeln!(out, "  {}: {} (log: {})", r.name, r.reason, r.log);
        }
        for (p, e) in unreadable {
            let _ = writeln!(out, "  {}: unreadable report: {e}", p.display());
        }
    }

    let _ = writeln!(out, "\n{} skipped", t.skipped);
    let _ = writeln!(out, "{} passed, {} failed", t.passed, t.failed);
    (out, run.ok())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::judge::verdict::Verdict;
    use crate::plan::manifest::Source;
    use crate::rundir::boot_report::tests::report;

    fn expected(name: &str, source: Source) -> Expected {
        Expected {
            name: name.to_owned(),
            source,
            expect: Verdict::Pass,
        }
    }

    /// Each entry's report planned as it expects.
    fn planned_as_reported(entries: &[Entry]) -> Vec<Expected> {
        entries
            .iter()
            .filter_map(|e| e.report.as_ref().ok())
            .map(|r| Expected {
                expect: r.expected,
                ..expected(&r.name, Source::Boot)
            })
            .collect()
    }

    fn entry(path: &str, report: Result<BootReport, String>) -> Entry {
        Entry {
            path: PathBuf::from(path),
            report,
        }
    }

    #[test]
    fn summary_text_and_exit() {
        use Verdict::*;
        let entries: Vec<Entry> = vec![
            entry("out/a.json", Ok(report("a", Pass, Pass, (4, 0, 1)))),
            entry("out/b.json", Ok(report("b", NotOk, NotOk, (1, 1, 0)))),
        ];
        let (text, ok) = summary(&entries, &planned_as_reported(&entries));
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
            entry("out/a.json", Ok(report("a", Pass, NotOk, (4, 1, 0)))),
            entry("out/c.json", Ok(bad)),
            entry("out/d.json", Err("expected value at line 1".into())),
        ];
        let (text, ok) = summary(&entries, &planned_as_reported(&entries));
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
        let entries = [entry("a.json", Ok(r))];
        let (text, ok) = summary(&entries, &planned_as_reported(&entries));
        assert!(!ok);
        assert_eq!(text.lines().last(), Some("2 passed, 1 failed"));
    }

    /// A report no plan names fails, and its passes do not count; one whose expectation is
    /// not the plan's fails, however it judged itself.
    #[test]
    fn unplanned_or_self_expecting_reports_fail() {
        use Verdict::*;
        let entries = [
            entry("out/a.json", Ok(report("a", Pass, Pass, (4, 0, 0)))),
            entry("out/stray.json", Ok(report("stray", Pass, Pass, (9, 0, 0)))),
        ];
        let (text, ok) = summary(&entries, &[expected("a", Source::Boot)]);
        assert!(!ok, "{text}");
        assert!(
            text.contains("Reported but never planned (not counted):\n  stray: no plan names it"),
            "{text}"
        );
        assert_eq!(text.lines().last(), Some("4 passed, 1 failed"));
        // `b` judged itself ok against NotOk; the plan wanted a pass.
        let entries = [entry(
            "out/b.json",
            Ok(report("b", NotOk, NotOk, (1, 1, 0))),
        )];
        let (text, ok) = summary(&entries, &[expected("b", Source::Boot)]);
        assert!(!ok, "{text}");
        assert!(
            text.contains("  b: expected not-ok, the plan says pass"),
            "{text}"
        );
        assert_eq!(text.lines().last(), Some("1 passed, 1 failed"));
    }

    #[test]
    fn a_planned_boot_without_a_report_fails_by_name() {
        let entries: Vec<Entry> = vec![entry(
            "out/x86_64-smp2.json",
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
            entry(
                "out/clippy.json",
                Ok(report("clippy", Verdict::Pass, Verdict::Pass, (1, 0, 0))),
            ),
            entry(
                "out/rustfmt.json",
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
}
