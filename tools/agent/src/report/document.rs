//! The boot's one KTAP document: textpoke's self-test suite, read from the log lines its load
//! printed, then the mode's own suite.

use crate::platform::guest::{load, log};
use crate::platform::sys;
use crate::report::ktap::{self, Case, Ktap};

/// Loads textpoke; returns how that went and its self-test suite, read from the log lines the
/// load printed (there are some even when the self-test refused the load).
pub fn load_textpoke(params: &str) -> (Result<(), String>, Case) {
    load_textpoke_from("textpoke", params)
}

/// As [`load_textpoke`], from `MODULES/<path>.ko` ([`crate::platform::guest::MODULES`]).
pub fn load_textpoke_from(path: &str, params: &str) -> (Result<(), String>, Case) {
    let cursor = sys::dmesg_cursor().unwrap_or_default();
    let loaded = load(path, params);
    let lines = sys::dmesg_since(cursor).map(|(l, _)| l).unwrap_or_default();
    (loaded, ktap::selftest_suite(&lines))
}

/// Prints the boot's one KTAP document: the self-test's suite, then this mode's.
pub fn print_document(ktap: &mut Ktap, selftest: Case, suite: &str, cases: Vec<Case>) {
    if let Err(e) = ktap.print_suites(&[selftest, Case::group(suite, cases)]) {
        log(&format!("KTAP output failed: {e}"));
    }
}
