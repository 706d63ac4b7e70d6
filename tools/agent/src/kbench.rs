//! The kernel's own patching through textpoke against its stock path, in the same boot: the
//! function tracer on every function, turned on and off, and `kernel.sched_schedstats` (the
//! 56-site key of the 2019 batching work; 65 sites in this kernel) turned on and off.
//!
//! Each round runs every workload once with textpoke loaded (so the kernel hands it the
//! changes: kernel/patcher.rs) and once with it unloaded (the stock path: x86's own `INT3`
//! batches of at most 256 sites, arm64's unguarded writes), the two orders alternating from
//! round to round (ABBA...). Every (round, path, workload) is one `textpoke-kbench:` JSON line:
//! its wall time, the function-call IPIs counted in `/proc/interrupts` around it, and with
//! textpoke its own counters (sites, batches, all-CPU syncs, records, traps). The runner turns
//! them into the table (tools/runner/src/kbench.rs). Nothing is asserted on timing: the KTAP
//! cases check that each measurement ran and that textpoke made the changes.

use std::time::Instant;
use textpoke_agent::ktap::Case;
use textpoke_agent::sys;

/// Prefix of a sample line.
pub const PREFIX: &str = "textpoke-kbench: ";
/// Rounds: every workload on each path once per round.
const ROUNDS: u32 = 10;

/// The workloads, in the order each round runs them.
const WORKLOADS: [&str; 4] = [
    "ftrace_all_on",
    "ftrace_all_off",
    "schedstats_on",
    "schedstats_off",
];

fn workload(name: &str) -> Result<(), String> {
    use crate::kernel_patching::{filter, tracer, write};
    let schedstats = "/proc/sys/kernel/sched_schedstats";
    match name {
        "ftrace_all_on" => filter("").and_then(|()| tracer("function")),
        "ftrace_all_off" => tracer("nop"),
        "schedstats_on" => write(schedstats, "1"),
        "schedstats_off" => write(schedstats, "0"),
        other => Err(format!("unknown workload {other}")),
    }
}

/// Loads or unloads textpoke so that the kernel's changes take `path`.
fn take_path(path: &str) -> Result<(), String> {
    let loaded = std::path::Path::new("/sys/module/textpoke").exists();
    match (path, loaded) {
        ("textpoke", false) => crate::load("textpoke", ""),
        ("stock", true) => sys::unload_module("textpoke").map_err(|e| format!("unload: {e}")),
        _ => Ok(()),
    }
}

/// Runs the rounds, logging each sample with `log`; returns the KTAP cases.
pub fn run(arch: &str, cpus: usize, log: fn(&str)) -> Vec<Case> {
    let mut failures = Vec::new();
    let mut taken_by_textpoke = 0u64;
    let mut samples = 0u32;
    for round in 0..ROUNDS {
        let order = if round % 2 == 0 {
            ["textpoke", "stock"]
        } else {
            ["stock", "textpoke"]
        };
        for path in order {
            if let Err(e) = take_path(path) {
                failures.push(format!("round {round}, {path}: {e}"));
                continue;
            }
            for w in WORKLOADS {
                let counters = crate::kernel_patching::counters;
                let (c0, ipis0) = (counters(), super::bench::call_ipis());
                let start = Instant::now();
                let done = workload(w);
                let ns = start.elapsed().as_nanos();
                let (c1, ipis1) = (counters(), super::bench::call_ipis());
                if let Err(e) = done {
                    failures.push(format!("round {round}, {path}, {w}: {e}"));
                    continue;
                }
                // `counters()` keeps textpoke's `kernel.*` lines, prefix and all.
                let moved = crate::kernel_patching::counters_moved(&c0, &c1);
                let d = |k: &str| moved.get(&format!("kernel.{k}")).copied().unwrap_or(0);
                taken_by_textpoke += if path == "textpoke" { d("sites") } else { 0 };
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
    let _ = crate::kernel_patching::tracer("nop");
    let _ = take_path("stock");
    let expected = ROUNDS * 2 * WORKLOADS.len() as u32;
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
