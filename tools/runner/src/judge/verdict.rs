//! From a console log and the way QEMU ended to a verdict, and from a verdict to whether a
//! boot met its expectation.
//!
//! QEMU's exit status says little on its own: under `-no-reboot` a guest that reboots and a
//! kernel that panics with `panic=-1` both make QEMU exit 0, so a boot passes only on what the
//! console shows.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::judge::ktap::{self, Document, Status};
use crate::judge::splat::{self, Splat};
use crate::platform::qemu::Outcome;
use crate::MARKER;

/// What a boot amounted to. The order of the variants is the order of precedence: the first
/// that applies is the verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// QEMU was still running at the deadline and was killed.
    Timeout,
    /// QEMU exited with a non-zero status, died of a signal, or could not be started.
    QemuExit,
    /// The console shows a kernel problem: an oops, warning, lockdep report, stall...
    Splat,
    /// No KTAP document at all, or a required one is absent.
    MissingKtap,
    /// A test failed, or a document is malformed or truncated.
    NotOk,
    /// Everything present passed or was skipped, and nothing went wrong around it.
    Pass,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Timeout => "timeout",
            Self::QemuExit => "qemu-exit",
            Self::Splat => "splat",
            Self::MissingKtap => "missing-ktap",
            Self::NotOk => "not-ok",
            Self::Pass => "pass",
        })
    }
}

/// Leaf-test counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Passing tests.
    pub passed: usize,
    /// Failing tests (including `not ok` parents whose subtests all passed).
    pub failed: usize,
    /// Skipped tests.
    pub skipped: usize,
}

/// The analysis of one boot's console log.
#[derive(Clone, Debug)]
pub struct Judgement {
    /// The verdict.
    pub verdict: Verdict,
    /// Why, for a person.
    pub reason: String,
    /// Every KTAP document in the log.
    pub documents: Vec<Document>,
    /// The first kernel problem on the console, if any.
    pub splat: Option<Splat>,
    /// Counts over all documents.
    pub counts: Counts,
    /// Paths of failing tests over all documents.
    pub failing_tests: Vec<String>,
    /// Paths of skipped tests over all documents.
    pub skipped_tests: Vec<String>,
}

/// How many items of a list a reason quotes before it says "and N more".
const QUOTE: usize = 5;

fn quote_list(items: &[String]) -> String {
    let mut s = items
        .iter()
        .take(QUOTE)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > QUOTE {
        s.push_str(&format!(" and {} more", items.len() - QUOTE));
    }
    s
}

/// Judges a console log (as written by the runner, or any saved serial log).
///
/// `require` names what must be present: a KTAP document (see [`crate::judge::ktap`] for how a
/// document gets its name) or a suite, that is a top-level subtest of an unnamed document, as
/// the one document each textpoke guest prints holds `textpoke_selftest` and `textpoke_agent`.
pub fn judge(log: &str, outcome: &Outcome, require: &[String]) -> Judgement {
    let documents = ktap::parse(log);
    let splat = splat::find(log);
    let mut counts = Counts::default();
    let mut failing_tests = Vec::new();
    let mut skipped_tests = Vec::new();
    let mut problems = Vec::new();
    for doc in &documents {
        counts.passed += doc.passed();
        counts.failed += doc.failed();
        counts.skipped += doc.skipped();
        failing_tests.extend(
            doc.tests
                .iter()
                .filter(|t| t.status == Status::Fail)
                .map(|t| t.path.clone()),
        );
        skipped_tests.extend(
            doc.tests
                .iter()
                .filter(|t| t.status == Status::Skip)
                .map(|t| t.path.clone()),
        );
        problems.extend(doc.problems.iter().map(|p| format!("{}: {p}", doc.label())));
    }
    let present = |name: &String| {
        documents.iter().any(|d| {
            d.name.as_ref() == Some(name)
                || (d.name.is_none()
                    && d.tests.iter().any(|t| {
                        t.path == *name
                            || t.path
                                .strip_prefix(name.as_str())
                                .is_some_and(|rest| rest.starts_with('/'))
                    }))
        })
    };
    let missing_docs: Vec<String> = require
        .iter()
        .filter(|name| !present(name))
        .cloned()
        .collect();

    let (verdict, reason) = if let Some(why) = outcome.timeout() {
        (Verdict::Timeout, why)
    } else if let Some(why) = match outcome {
        Outcome::Exited(0) | Outcome::Unknown | Outcome::TimedOut(_) | Outcome::Silent(_) => None,
        Outcome::Exited(code) => Some(format!("qemu exited with status {code}")),
        Outcome::Signalled(sig) => Some(format!("qemu killed by signal {sig}")),
        Outcome::SpawnFailed(err) => Some(format!("qemu could not be started: {err}")),
    } {
        (Verdict::QemuExit, why)
    } else if let Some(s) = &splat {
        (
            Verdict::Splat,
            format!("kernel splat at log line {}: {}", s.line, s.text),
        )
    } else if documents.is_empty() {
        (
            Verdict::MissingKtap,
            "no KTAP document on the console".to_owned(),
        )
    } else if !missing_docs.is_empty() {
        let found: Vec<String> = documents.iter().map(Document::label).collect();
        (
            Verdict::MissingKtap,
            format!(
                "required KTAP document(s) or suite(s) missing: {} (found: {})",
                missing_docs.join(", "),
                found.join(", ")
            ),
        )
    } else if !failing_tests.is_empty() || !problems.is_empty() {
        let mut parts = Vec::new();
        if !failing_tests.is_empty() {
            parts.push(format!(
                "{} failed: {}",
                failing_tests.len(),
                quote_list(&failing_tests)
            ));
        }
        if !problems.is_empty() {
            parts.push(format!("KTAP problems: {}", quote_list(&problems)));
        }
        (Verdict::NotOk, parts.join("; "))
    } else {
        (
            Verdict::Pass,
            format!(
                "{} passed, {} skipped in {} KTAP document(s)",
                counts.passed,
                counts.skipped,
                documents.len()
            ),
        )
    };
    Judgement {
        verdict,
        reason,
        documents,
        splat,
        counts,
        failing_tests,
        skipped_tests,
    }
}

/// Whether a boot met its expectation: the verdict is `expected`, if `expect_log` is given some
/// console line contains it (the runner's own annotations do not count, since they quote the
/// command line), and a boot expected to pass skipped nothing: every planned boot runs on an
/// arch where each of its tests means something, so a SKIP there is a result that went
/// missing. Returns the answer and a reason for a person.
pub fn check(
    judgement: &Judgement,
    log: &str,
    expected: Verdict,
    expect_log: Option<&str>,
) -> (bool, String) {
    let got = judgement.verdict;
    if got != expected {
        return (
            false,
            format!("expected {expected}, got {got}: {}", judgement.reason),
        );
    }
    if let Some(needle) = expect_log {
        let found = log
            .lines()
            .filter(|l| !l.starts_with(MARKER))
            .any(|l| l.contains(needle));
        if !found {
            return (
                false,
                format!("{got} as expected, but the console never printed `{needle}`"),
            );
        }
    }
    if expected == Verdict::Pass && !judgement.skipped_tests.is_empty() {
        return (
            false,
            format!("unexpected SKIP: {}", quote_list(&judgement.skipped_tests)),
        );
    }
    if expected == Verdict::Pass {
        (true, judgement.reason.clone())
    } else {
        (true, format!("{got} as expected: {}", judgement.reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSING: &str = "\
[    0.000000] Linux version 6.12.0
[    1.000000] KTAP version 1
[    1.000001] 1..2
[    1.000002] # textpoke_selftest
[    1.000003] ok 1 a
[    1.000004] ok 2 b # SKIP no arm64
[    2.000000] reboot: Restarting system
";

    fn verdict(log: &str, outcome: Outcome) -> Verdict {
        judge(log, &outcome, &[]).verdict
    }

    #[test]
    fn pass() {
        let j = judge(
            PASSING,
            &Outcome::Exited(0),
            &["textpoke_selftest".to_owned()],
        );
        assert_eq!(j.verdict, Verdict::Pass, "{}", j.reason);
        assert_eq!(
            j.counts,
            Counts {
                passed: 1,
                failed: 0,
                skipped: 1
            }
        );
        assert!(j.failing_tests.is_empty());
        assert_eq!(j.skipped_tests, ["textpoke_selftest/b"]);
        assert_eq!(j.reason, "1 passed, 1 skipped in 1 KTAP document(s)");
        // A boot expected to pass may not skip anything.
        let (ok, why) = check(&j, PASSING, Verdict::Pass, None);
        assert!(!ok);
        assert_eq!(why, "unexpected SKIP: textpoke_selftest/b");

        let clean = PASSING.replace(" # SKIP no arm64", "");
        let j = judge(&clean, &Outcome::Exited(0), &[]);
        assert!(check(&j, &clean, Verdict::Pass, None).0);
        assert!(check(&j, &clean, Verdict::Pass, Some("Restarting")).0);
        let (ok, why) = check(&j, &clean, Verdict::Pass, Some("nope"));
        assert!(!ok);
        assert!(why.contains("never printed `nope`"), "{why}");
        let (ok, why) = check(&j, &clean, Verdict::NotOk, None);
        assert!(!ok);
        assert!(why.starts_with("expected not-ok, got pass"), "{why}");
    }

    #[test]
    fn required_suites_of_one_document() {
        let log = "KTAP version 1\n1..2\n    KTAP version 1\n    # Subtest: textpoke_selftest\n    1..1\n    ok 1 a\nok 1 textpoke_selftest\n    KTAP version 1\n    # Subtest: textpoke_agent\n    1..1\n    ok 1 b\nok 2 textpoke_agent\n";
        let need = |names: &[&str]| {
            let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
            judge(log, &Outcome::Exited(0), &names).verdict
        };
        assert_eq!(
            need(&["textpoke_selftest", "textpoke_agent"]),
            Verdict::Pass
        );
        assert_eq!(need(&["textpoke_demo"]), Verdict::MissingKtap);
        // A prefix of a suite's name is not that suite.
        assert_eq!(need(&["textpoke"]), Verdict::MissingKtap);
    }

    #[test]
    fn precedence() {
        let splat = format!("{PASSING}[    3.0] WARNING: CPU: 0 PID: 1 at x.c:1\n");
        assert_eq!(verdict(&splat, Outcome::TimedOut(900)), Verdict::Timeout);
        assert_eq!(verdict(&splat, Outcome::Exited(1)), Verdict::QemuExit);
        assert_eq!(verdict(&splat, Outcome::Signalled(9)), Verdict::QemuExit);
        assert_eq!(
            verdict(&splat, Outcome::SpawnFailed("no such file".into())),
            Verdict::QemuExit
        );
        assert_eq!(verdict(&splat, Outcome::Exited(0)), Verdict::Splat);
        assert_eq!(verdict(&splat, Outcome::Unknown), Verdict::Splat);
        assert_eq!(verdict(PASSING, Outcome::Unknown), Verdict::Pass);
    }

    #[test]
    fn splat_reason_names_the_line() {
        let log =
            format!("{PASSING}[    3.0] BUG: sleeping function called from invalid context\n");
        let j = judge(&log, &Outcome::Exited(0), &[]);
        assert_eq!(j.verdict, Verdict::Splat);
        assert_eq!(
            j.reason,
            "kernel splat at log line 8: BUG: sleeping function called from invalid context"
        );
        assert!(check(&j, &log, Verdict::Splat, Some("sleeping function")).0);
    }

    #[test]
    fn missing_ktap() {
        let j = judge(
            "Linux version 6.12\nreboot: Restarting\n",
            &Outcome::Exited(0),
            &[],
        );
        assert_eq!(j.verdict, Verdict::MissingKtap);
        let j = judge(PASSING, &Outcome::Exited(0), &["textpoke_agent".to_owned()]);
        assert_eq!(j.verdict, Verdict::MissingKtap);
        assert!(j.reason.contains("textpoke_agent"), "{}", j.reason);
        assert!(
            j.reason.contains("found: textpoke_selftest"),
            "{}",
            j.reason
        );
    }

    #[test]
    fn not_ok_lists_failures_and_problems() {
        let log = "KTAP version 1\n1..3\n# agent\nok 1 a\nnot ok 2 b\n";
        let j = judge(log, &Outcome::Exited(0), &[]);
        assert_eq!(j.verdict, Verdict::NotOk);
        assert_eq!(j.failing_tests, ["agent/b"]);
        assert_eq!(
            j.counts,
            Counts {
                passed: 1,
                failed: 1,
                skipped: 0
            }
        );
        assert!(
            j.reason
                .starts_with("1 failed: agent/b; KTAP problems: agent: line 5: document planned 3"),
            "{}",
            j.reason
        );

        // Truncation alone, with nothing failing, is still not ok.
        let j = judge("KTAP version 1\n1..2\nok 1 a\n", &Outcome::Exited(0), &[]);
        assert_eq!(j.verdict, Verdict::NotOk);
        assert!(j.failing_tests.is_empty());
    }

    #[test]
    fn expect_log_ignores_runner_annotations() {
        let log = format!("{MARKER}command: qemu -append needle\n{PASSING}");
        let j = judge(&log, &Outcome::Exited(0), &[]);
        assert!(!check(&j, &log, Verdict::Pass, Some("needle")).0);
    }
}
