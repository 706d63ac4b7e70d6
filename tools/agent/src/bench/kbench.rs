//! The kernel's own patching through textpoke against its stock path, in the same boot: the
//! function tracer on every function, turned on and off, and `kernel.sched_schedstats` (the
//! 56-site key of the 2019 batching work; 65 sites in this kernel) turned on and off.
//!
//! Each round runs every workload once on each of three paths: textpoke loaded with nobody
//! listening (so the kernel hands it the changes, kernel/patcher.rs, and they take the quiet
//! path), textpoke loaded with a `text_poke` perf event open (guarded and recorded, as on a
//! traced machine), and textpoke unloaded (the stock path: x86's own `INT3` batches of at most
//! 256 sites, arm64's unguarded writes). The order turns from round to round, and every other
//! round runs backwards: over six rounds each path takes each place twice.
//! Every (round, path, workload) is one `textpoke-kbench:` JSON line:
//! its wall time, the function-call IPIs counted in `/proc/interrupts` around it, and with
//! textpoke its own counters (sites, batches, all-CPU syncs, records, traps). The runner turns
//! them into the table (tools/runner/src/bench/kbench.rs). Nothing is asserted on timing: the KTAP
//! cases check that each measurement ran and that textpoke made the changes.

use std::time::Instant;
use textpoke_agent::platform::guest;
use textpoke_agent::platform::sys;
use textpoke_agent::report::ktap::Case;

/// Prefix of a sample line.
pub const PREFIX: &str = "textpoke-kbench: ";
/// Rounds: every workload on each path once per round.
const ROUNDS: u32 = 10;

/// The function tracer's workloads, run once per round.
const FTRACE: [&str; 2] = ["ftrace_all_on", "ftrace_all_off"];
/// `sched_schedstats`' workloads, run [`SCHEDSTATS_PAIRS`] times per round, after the tracer's.
const SCHEDSTATS: [&str; 2] = ["schedstats_on", "schedstats_off"];
/// How many times a round turns `sched_schedstats` on and off: one of its changes takes a few
/// milliseconds under TCG, and its samples spread over twice that on either path (the
/// emulator's scheduling), where the function tracer's take seconds. A thousand samples per path
/// narrow the ratio's interval to what can tell a tenth of the stock path's cost, for half a
/// minute a boot.
const SCHEDSTATS_PAIRS: usize = 100;

/// The workloads, in the order each round runs them.
fn workloads() -> impl Iterator<Item = &'static str> {
    FTRACE
        .into_iter()
        .chain((0..SCHEDSTATS_PAIRS).flat_map(|_| SCHEDSTATS))
}

fn workload(name: &str) -> Result<(), String> {
    use crate::scenarios::kernel_patching::{filter, tracer, write};
    let schedstats = "/proc/sys/kernel/sched_schedstats";
    match name {
        "ftrace_all_on" => filter("").and_then(|()| tracer("function")),
        "ftrace_all_off" => tracer("nop"),
        "schedstats_on" => write(schedstats, "1"),
        "schedstats_off" => write(schedstats, "0"),
        other => Err(format!("unknown workload {other}")),
    }
}

/// The paths, in the order of round 0.
const PATHS: [&str; 3] = ["textpoke", "textpoke_listened", "stock"];

/// The paths in round `round`'s order: turned by the round, every other round backwards.
fn order(round: u32) -> [&'static str; 3] {
    let mut order = PATHS;
    order.rotate_left((round / 2) as usize % PATHS.len());
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

/// Loads or unloads textpoke so that the kernel's changes take `path`; for
/// `textpoke_listened`, opens the listener the path holds while its workloads run.
fn take_path(path: &str) -> Result<Option<textpoke_agent::platform::perf::Listener>, String> {
    let loaded = std::path::Path::new("/sys/module/textpoke").exists();
    match (path, loaded) {
        ("textpoke" | "textpoke_listened", false) => guest::load("textpoke", "")?,
        ("stock", true) => sys::unload_module("textpoke").map_err(|e| format!("unload: {e}"))?,
        _ => {}
    }
    if path != "textpoke_listened" {
        return Ok(None);
    }
    textpoke_agent::platform::perf::Listener::open()
        .map(Some)
        .map_err(|e| format!("opening a listener: {e}"))
}

/// Runs the rounds, logging each sample with `log`; returns the KTAP cases.
pub fn run(arch: &str, cpus: usize, log: fn(&str)) -> Vec<Case> {
    let mut failures = Vec::new();
    let mut taken_by_textpoke = 0u64;
    let mut samples = 0u32;
    for round in 0..ROUNDS {
        for path in order(round) {
            let _listener = match take_path(path) {
                Ok(listener) => listener,
                Err(e) => {
                    failures.push(format!("round {round}, {path}: {e}"));
                    continue;
                }
            };
            for w in workloads() {
                let counters = crate::scenarios::kernel_patching::counters;
                let (c0, ipis0) = (counters(), sys::call_ipis());
                let start = Instant::now();
                let done = workload(w);
                let ns = start.elapsed().as_nanos();
                let (c1, ipis1) = (counters(), sys::call_ipis());
                let (ipis0, ipis1) = match (done, ipis0, ipis1) {
                    (Ok(()), Ok(a), Ok(b)) => (a, b),
                    (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                        failures.push(format!("round {round}, {path}, {w}: {e}"));
                        continue;
                    }
                };
                // `counters()` keeps textpoke's `kernel.*` lines, prefix and all.
                let moved = crate::scenarios::kernel_patching::counters_moved(&c0, &c1);
                let d = |k: &str| moved.get(&format!("kernel.{k}")).copied().unwrap_or(0);
                if path != "stock" {
                    taken_by_textpoke += d("sites");
                    // Each textpoke path must be what it is named for: records with a
                    // listener, none without.
                    let listened = path == "textpoke_listened";
                    if d("sites") > 0 && (d("records") > 0) != listened {
                        failures.push(format!(
                            "round {round}, {path}, {w}: {} records for {} sites",
                            d("records"),
                            d("sites")
                        ));
                    }
                }
                samples += 1;
                log(&format!(
                    "{PREFIX}{{\"arch\":\"{arch}\",\"cpus\":{cpus},\"round\":{round},\"rounds\":{ROUNDS},\
                     \"path\":\"{path}\",\"workload\":\"{w}\",\"ns\":{ns},\"call_ipis\":{},\
                     \"sites\":{},\"batches\":{},\"syncs\":{},\"records\":{},\"traps\":{}}}",
                    ipis1.saturating_sub(ipis0),
                    d("sites"),
                    d("batches"),
                    d("syncs"),
                    d("records"),
                    d("traps"),
                ));
            }
        }
    }
    // Leave the kernel as found: textpoke unloaded, tracer off.
    let _ = crate::scenarios::kernel_patching::tracer("nop");
    let _ = take_path("stock");
    let expected = ROUNDS * PATHS.len() as u32 * workloads().count() as u32;
    vec![
        Case::check(
            "kernel_patching_samples",
            failures.is_empty() && samples == expected,
            format!("{samples} samples of {expected}; {failures:?}"),
        ),
        Case::check(
            "kernel_patching_through_textpoke",
            taken_by_textpoke > 0,
            "textpoke made none of the kernel's changes",
        )
        .with_log(format!(
            "textpoke made {taken_by_textpoke} of the kernel's changes"
        )),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_takes_every_place_twice_in_six_rounds() {
        for path in PATHS {
            for place in 0..PATHS.len() {
                let times = (0..6).filter(|&r| order(r)[place] == path).count();
                assert_eq!(times, 2, "{path} at place {place}");
            }
        }
    }
}
