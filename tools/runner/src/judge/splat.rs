//! Detection of kernel splats (oopses, warnings, lockdep reports, stalls) in a console log.
//!
//! A splat fails a boot even when every KTAP result passed: a test can pass while the kernel
//! underneath it warned, deadlocked another CPU or corrupted a list.

use crate::judge::ktap::strip_console_prefix;

/// Substrings that mark a kernel problem, matched case-sensitively anywhere in a line.
///
/// Each needs its punctuation where it has some (`WARNING:` rather than `WARNING`), so a test
/// that merely talks about warnings (`ok 3 warns_on_bad_input`) does not trip it.
pub const PATTERNS: &[&str] = &[
    "Kernel panic",
    "BUG:",
    "WARNING:",
    "Oops",
    "Internal error:",
    "Call Trace:",
    "general protection fault",
    "Unable to handle kernel",
    "possible recursive locking",
    "circular locking dependency",
    "inconsistent lock state",
    "KASAN:",
    "UBSAN:",
    "self-detected stall",
    "rcu_preempt detected stalls",
    "rcu_sched detected stalls",
    "soft lockup",
    "hung_task",
    "blocked for more than",
    "refcount_t:",
    "list_add corruption",
    "kernel BUG at",
    // perf's clock (local_clock()) is no longer comparable across CPUs: every check that orders
    // executions on one CPU against records taken on another would judge noise.
    "sched_clock: Marking unstable",
];

/// The first sign of a kernel problem in a log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Splat {
    /// 1-based line number in the log.
    pub line: usize,
    /// The pattern that matched.
    pub pattern: &'static str,
    /// The line, without its printk prefix.
    pub text: String,
}

/// Finds the first line of `log` that matches one of [`PATTERNS`].
///
/// The runner's own annotations and the kernel's echo of its command line are skipped: both
/// quote user-supplied text, which is not the kernel saying something went wrong.
pub fn find(log: &str) -> Option<Splat> {
    log.lines().enumerate().find_map(|(i, raw)| {
        if raw.starts_with(crate::MARKER) {
            return None;
        }
        let line = strip_console_prefix(raw);
        // x86 echoes the command line early as `Command line:`, every arch later as
        // `Kernel command line:`.
        if line.starts_with("Kernel command line:") || line.starts_with("Command line:") {
            return None;
        }
        PATTERNS
            .iter()
            .find(|p| line.contains(*p))
            .map(|pattern| Splat {
                line: i + 1,
                pattern,
                text: line.trim().to_owned(),
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unstable_sched_clock_is_a_splat() {
        // kernel/sched/clock.c's line, as the clocksource watchdog's TSC verdict printed it.
        let log = "\
[  225.060000] clocksource: timekeeping watchdog on CPU1: Marking clocksource 'tsc' as unstable because the skew is too large:
[  225.061000] sched_clock: Marking unstable (225061000000, -1520)<-(225101000000, -39000)
";
        let s = find(log).unwrap();
        assert_eq!((s.line, s.pattern), (2, "sched_clock: Marking unstable"));
    }

    #[test]
    fn clean_log_has_no_splat() {
        let log = "\
[    0.000000] Linux version 6.12.0
[    0.010000] Kernel command line: console=ttyS0 panic_on_warn=1 oops=panic
[    0.500000] KTAP version 1
[    0.500001] 1..3
[    0.500002] ok 1 warns_on_bad_input
[    0.500003] ok 2 WARNING_free_path
[    0.500004] ok 3 no_oops_here # SKIP bug-free
";
        assert_eq!(find(log), None);
    }

    #[test]
    fn warning_needs_its_colon() {
        assert_eq!(
            find("ok 3 warns_on_bad_input\nok 4 WARNING handling\n"),
            None
        );
        let s = find("[    3.1] WARNING: CPU: 1 PID: 42 at kernel/foo.c:10 bar+0x1/0x2\n").unwrap();
        assert_eq!(s.pattern, "WARNING:");
        assert_eq!(s.line, 1);
        assert_eq!(
            s.text,
            "WARNING: CPU: 1 PID: 42 at kernel/foo.c:10 bar+0x1/0x2"
        );
    }

    #[test]
    fn lockdep_report_is_a_splat() {
        let log = "\
[    5.000000] ok 1 before
[    5.100000]
[    5.100001] ======================================================
[    5.100002] WARNING: possible circular locking dependency detected
[    5.100003] 6.12.0 #1 Not tainted
[    5.100004] ------------------------------------------------------
";
        let s = find(log).unwrap();
        assert_eq!(s.line, 4);
        assert_eq!(s.pattern, "WARNING:");

        let s = find("[    7.0] ============================================\n[    7.0] possible recursive locking detected\n").unwrap();
        assert_eq!((s.line, s.pattern), (2, "possible recursive locking"));
    }

    #[test]
    fn first_hit_wins_and_various_patterns_match() {
        let log = "boot\nrcu: INFO: rcu_preempt detected stalls on CPUs/tasks:\nKernel panic - not syncing\n";
        let s = find(log).unwrap();
        assert_eq!((s.line, s.pattern), (2, "rcu_preempt detected stalls"));
        for line in [
            "BUG: kernel NULL pointer dereference, address: 0000000000000008",
            "Oops: general protection fault, probably for non-canonical address",
            "Internal error: Oops - BUG: 00000000f2000800 [#1] PREEMPT SMP",
            "INFO: task init:1 blocked for more than 120 seconds.",
            "watchdog: BUG: soft lockup - CPU#0 stuck for 26s! [swapper/0:1]",
            "refcount_t: underflow; use-after-free.",
            "list_add corruption. prev->next should be next",
            "kernel BUG at mm/slub.c:123!",
            "Unable to handle kernel paging request at virtual address dead",
            "UBSAN: array-index-out-of-bounds in foo.c:1:2",
        ] {
            assert!(find(line).is_some(), "{line}");
        }
    }

    #[test]
    fn runner_annotations_and_command_line_are_not_scanned() {
        let log = format!(
            "{}command: qemu -append \"BUG: nope\"\n[    0.0] Command line: x=WARNING:\n\
             [    0.1] Kernel command line: x=WARNING:\n",
            crate::MARKER
        );
        assert_eq!(find(&log), None);
    }
}
