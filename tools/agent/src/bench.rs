//! Benchmarks (`textpoke.mode=bench`, from `make bench`): textpoke against the kernel's own
//! text-patching mechanisms, in the same boot, on the same kind of sites, under the same load
//! (samples/textpoke_bench.c).
//!
//! For every size N and mode the agent runs a few repetitions and reports the median time per
//! batch, the all-CPU sync rounds per batch (textpoke counts its own; the others' are known:
//! see the module), the function-call IPIs per batch counted in `/proc/interrupts`, and the
//! worst stall an executor saw. Each measurement is one `textpoke-bench:` JSON line in the log,
//! which tools/bench.sh turns into tables. Nothing here is asserted on timing: the KTAP cases
//! only check that each measurement ran.

use std::collections::BTreeMap;
use textpoke_agent::ktap::{Case, Ktap};
use textpoke_agent::sys;

const DIR: &str = "/sys/kernel/debug/textpoke_bench";
const SIZES: [u32; 4] = [1, 16, 256, 4096];

fn log(line: &str) {
    let _ = sys::write_file("/dev/kmsg", format!("{line}\n").as_bytes());
}

/// Function-call IPIs taken so far, summed over CPUs (x86 `CAL`, arm64 `IPI1`).
fn call_ipis() -> u64 {
    sys::interrupt_rows()
        .map(|rows| {
            rows.iter()
                .filter(|r| r.description.contains("Function call"))
                .map(|r| r.total())
                .sum()
        })
        .unwrap_or(0)
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// Runs `reps` repetitions of `mode` with `n` sites and returns the function-call IPIs taken
/// meanwhile; `Err` if the run was refused.
fn run_counting_ipis(mode: &str, n: u32, reps: u32) -> Result<u64, String> {
    let before = call_ipis();
    sys::write_file(
        format!("{DIR}/control"),
        format!("run mode={mode} n={n} reps={reps}").as_bytes(),
    )
    .map_err(|e| format!("{mode} n={n}: {e}"))?;
    Ok(call_ipis().saturating_sub(before))
}

/// One (mode, N) measurement as a JSON object, with `baseline` function-call IPIs per run
/// (what starting and stopping the executors costs) subtracted; `Err` if it could not run.
fn measure(mode: &str, n: u32, reps: u32, baseline: f64) -> Result<String, String> {
    let ipis = run_counting_ipis(mode, n, reps)?;
    let text = sys::read_text(format!("{DIR}/result")).map_err(|e| e.to_string())?;
    let mut cols: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if let [_, _, _, nsecs, syncs, records, stall] = w.as_slice() {
            for (k, v) in [
                ("nsecs", nsecs),
                ("syncs", syncs),
                ("records", records),
                ("stall", stall),
            ] {
                cols.entry(k).or_default().push(v.parse().unwrap_or(0));
            }
        }
    }
    let get = |k: &str| cols.get(k).cloned().unwrap_or_default();
    let runs = get("nsecs").len() as u64;
    if runs == 0 {
        return Err(format!("{mode} n={n}: no result"));
    }
    Ok(format!(
        "{{\"arch\":\"{}\",\"mode\":\"{mode}\",\"n\":{n},\"reps\":{runs},\"median_ns\":{},\"syncs_per_batch\":{},\
         \"records_per_batch\":{},\"call_ipis_per_batch\":{:.1},\"cpus\":{},\"max_stall_ns\":{}}}",
        std::env::consts::ARCH,
        median(get("nsecs")),
        median(get("syncs")),
        median(get("records")),
        (ipis as f64 / runs as f64 - baseline).max(0.0),
        sys::online_cpus().map(|c| c.len()).unwrap_or(0),
        get("stall").into_iter().max().unwrap_or(0)
    ))
}

/// Function-call IPIs per run of the `idle` mode: the noise the other modes subtract.
fn idle_ipis(n: u32, reps: u32) -> Result<f64, String> {
    Ok(run_counting_ipis("idle", n, reps)? as f64 / f64::from(reps))
}

/// Runs every measurement and prints the KTAP document `textpoke_bench`.
pub fn run(ktap: &mut Ktap) {
    let mut cases = Vec::new();
    let loaded = super::load("textpoke", "").and_then(|()| super::load("textpoke_bench", ""));
    cases.push(Case::check("load", loaded.is_ok(), format!("{loaded:?}")));
    if loaded.is_ok() {
        let modes: &[&str] = if cfg!(target_arch = "aarch64") {
            &["textpoke", "static_key", "nosync", "stop_machine"]
        } else {
            &["textpoke", "static_key"]
        };
        for n in SIZES {
            // Under TCG the big arm64 batches take tens of seconds each (every text write is a
            // fixmap mapping with a broadcast TLB flush, which waits for every vCPU's turn).
            let reps = match n {
                4096 => 1,
                256 => 3,
                _ => 5,
            };
            let baseline = match idle_ipis(n, reps) {
                Ok(b) => b,
                Err(e) => {
                    cases.push(Case::fail(format!("idle_n{n}"), e));
                    continue;
                }
            };
            for mode in modes {
                let name = format!("{mode}_n{n}");
                match measure(mode, n, reps, baseline) {
                    Ok(json) => {
                        log(&format!("textpoke-bench: {json}"));
                        cases.push(Case::pass(name));
                    }
                    Err(e) => cases.push(Case::fail(name, e)),
                }
            }
        }
    }
    let _ = ktap.print_document("textpoke_bench", &cases);
}
