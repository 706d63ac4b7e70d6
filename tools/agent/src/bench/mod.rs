//! Benchmarks (`textpoke.mode=bench`, from `make bench`): textpoke against the kernel's own
//! text-patching mechanisms, in the same boot, on the same kind of sites, under the same load
//! (samples/textpoke_bench.c).
//!
//! For every size N the agent runs rounds: in each round every mode flips the N sites once, in
//! a fixed order (textpoke with nobody listening, textpoke with a tracer listening, upstream
//! static key, then on arm64 nosync and stop_machine, then `idle`, the baseline), so the modes
//! are interleaved (ABAB...) and share whatever the emulator and the host were doing at the
//! time. textpoke's two modes are the same batch: `textpoke` is what a machine nobody traces
//! pays (the quiet path: no record, and on arm64 no guard), `textpoke_listened` what a traced
//! one pays (a `text_poke` perf event is open around the flip, so the batch guards and records,
//! kernel/batch.rs, `Batch::commit_with`). Every flip is one sample, one
//! `textpoke-bench:` JSON line in the log: its time, the all-CPU sync rounds (textpoke counts
//! its own; the others' are known: see the module), the records it emitted, the function-call
//! IPIs counted in `/proc/interrupts` around it (raw: the host subtracts the `idle` samples'
//! median) and the worst stall an executor saw. The runner turns them into tables and plots
//! (`textpoke-runner bench-report`). Nothing here is asserted on timing: the KTAP cases only
//! check that each measurement ran.
//!
//! After the flips, with textpoke_bench unloaded so that nothing holds textpoke, the foreign
//! traps: a kprobe hit's cost with textpoke loaded and without it (bench/trapcost.rs).
//!
//! `textpoke.bench_reps=K` on the kernel command line runs K rounds at every size (and of the
//! foreign traps) and `textpoke.bench_sizes=1,16` only those sizes, `textpoke.bench_only=kernel`
//! only the kernel's own patching (bench/kbench.rs), `textpoke.bench_only=flips` only the flips
//! and `textpoke.bench_only=foreign_traps` only the foreign traps (for a quick look;
//! `make bench` uses none of them).

use std::collections::BTreeMap;
use textpoke_agent::platform::guest;
use textpoke_agent::platform::sys;
use textpoke_agent::report::document::{load_textpoke, print_document};
use textpoke_agent::report::ktap::{Case, Ktap};

mod kbench;
mod retarget;
mod trapcost;

const DIR: &str = "/sys/kernel/debug/textpoke_bench";
const SIZES: [u32; 4] = [1, 16, 256, 4096];
/// textpoke's mode in samples/textpoke_bench.c, and its sample with nobody listening.
const TEXTPOKE: &str = "textpoke";
/// textpoke's sample with a `text_poke` perf event open (tools/runner/src/bench/flips.rs reads both).
const LISTENED: &str = "textpoke_listened";

/// Rounds at size `n`: at least 20 samples per mode and size, except arm64 at 4096 sites, where
/// under TCG one round (every mode once) takes over three minutes (every text write is a fixmap
/// mapping with a broadcast TLB flush, which waits for every vCPU's turn): there, as many as
/// keep the whole boot within about 20 minutes.
fn rounds(n: u32) -> u32 {
    if cfg!(target_arch = "aarch64") {
        if n >= 4096 {
            4
        } else {
            20
        }
    } else {
        30
    }
}

/// The arch as the runner names it.
fn arch() -> &'static str {
    if cfg!(target_arch = "aarch64") {
        "arm64"
    } else {
        std::env::consts::ARCH
    }
}

fn log(line: &str) {
    let _ = sys::write_file("/dev/kmsg", format!("{line}\n").as_bytes());
}

fn control(command: &str) -> Result<(), String> {
    sys::write_file(format!("{DIR}/control"), command.as_bytes())
        .map(drop)
        .map_err(|e| format!("`{command}`: {e}"))
}

/// One line of the module's `result`:
/// `mode n rep nsecs syncs records max_stall_ns on q=<hist> qx=<hist> f=<hist> fx=<hist>`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rep {
    nsecs: u64,
    syncs: u64,
    records: u64,
    stall_ns: u64,
    on: bool,
    /// The executors' gap histograms before and during the flip, as (bucket, count) pairs:
    /// the plain executions', and (`_x`) those an exception or interrupt interrupted.
    before: Vec<(u32, u64)>,
    before_x: Vec<(u32, u64)>,
    flip: Vec<(u32, u64)>,
    flip_x: Vec<(u32, u64)>,
}

/// A histogram field's value: `bucket:count` pairs separated by commas, or nothing.
fn parse_hist(text: &str) -> Option<Vec<(u32, u64)>> {
    text.split(',')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (b, c) = pair.split_once(':')?;
            Some((b.parse().ok()?, c.parse().ok()?))
        })
        .collect()
}

fn parse_rep(line: &str) -> Option<Rep> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let [_, _, _, nsecs, syncs, records, stall, on, q, qx, f, fx] = w.as_slice() else {
        return None;
    };
    Some(Rep {
        nsecs: nsecs.parse().ok()?,
        syncs: syncs.parse().ok()?,
        records: records.parse().ok()?,
        stall_ns: stall.parse().ok()?,
        on: *on == "1",
        before: parse_hist(q.strip_prefix("q=")?)?,
        before_x: parse_hist(qx.strip_prefix("qx=")?)?,
        flip: parse_hist(f.strip_prefix("f=")?)?,
        flip_x: parse_hist(fx.strip_prefix("fx=")?)?,
    })
}

/// Histogram pairs per `textpoke-gaps:` line: the console takes lines of at most 1024 bytes
/// (`/dev/kmsg` refuses longer ones), and a pair is at most 18 bytes.
const PAIRS_PER_LINE: usize = 40;

/// A sample's gap histograms as `textpoke-gaps:` JSON lines, each with the sample's place and up
/// to [`PAIRS_PER_LINE`] pairs of one window (the runner joins them: tools/runner/src/bench/gaps.rs).
/// A window without pairs still gets a line, so that the runner knows it was measured.
fn gaps_json(p: &Place, rep: &Rep) -> Vec<String> {
    let mut lines = Vec::new();
    for (window, hist) in [
        ("before", &rep.before),
        ("before_x", &rep.before_x),
        ("flip", &rep.flip),
        ("flip_x", &rep.flip_x),
    ] {
        let chunks: Vec<&[(u32, u64)]> = if hist.is_empty() {
            vec![&[]]
        } else {
            hist.chunks(PAIRS_PER_LINE).collect()
        };
        for chunk in chunks {
            let pairs: Vec<String> = chunk.iter().map(|(b, c)| format!("[{b},{c}]")).collect();
            lines.push(format!(
                "{{\"arch\":\"{}\",\"mode\":\"{}\",\"n\":{},\"round\":{},\"window\":\"{window}\",\
                 \"pairs\":[{}]}}",
                arch(),
                p.mode,
                p.n,
                p.round,
                pairs.join(",")
            ));
        }
    }
    lines
}

/// Where a sample came from: which mode, size and round, of how many rounds, on how many CPUs.
struct Place<'a> {
    mode: &'a str,
    n: u32,
    round: u32,
    rounds: u32,
    cpus: usize,
}

/// What the engine's counters say a textpoke sample did: nanoseconds per part of its commit
/// (the stats file's `ns.<part>`, by part) and the traps the other CPUs took meanwhile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Engine {
    parts: BTreeMap<String, u64>,
    traps: u64,
}

/// The engine's counters now (kernel/stats.rs): `ns.*` by part, and `traps.cpu*` summed.
fn engine_counters() -> Result<Engine, String> {
    counters_of(&crate::scenarios::scenario::engine_stats()?)
}

/// [`engine_counters`] of the stats file's `map`.
fn counters_of(map: &BTreeMap<String, String>) -> Result<Engine, String> {
    let mut out = Engine::default();
    for key in map.keys() {
        let value = textpoke_agent::platform::exerciser::number(map, key)?;
        if let Some(part) = key.strip_prefix("ns.") {
            out.parts.insert(part.to_owned(), value);
        } else if key.starts_with("traps.cpu") {
            out.traps += value;
        }
    }
    if !out.parts.contains_key("total") {
        return Err("the engine's stats have no `ns.total`".to_owned());
    }
    Ok(out)
}

/// What happened between `before` and `after`.
fn engine_delta(before: &Engine, after: &Engine) -> Result<Engine, String> {
    let mut parts = BTreeMap::new();
    for (part, &a) in &after.parts {
        let b = before
            .parts
            .get(part)
            .ok_or_else(|| format!("`ns.{part}` appeared during a sample"))?;
        parts.insert(part.clone(), a.saturating_sub(*b));
    }
    Ok(Engine {
        parts,
        traps: after.traps.saturating_sub(before.traps),
    })
}

/// `engine`'s fields of a sample's JSON object (`,"traps":N,"parts":{...}`), or nothing.
fn engine_json(engine: Option<&Engine>) -> String {
    let Some(e) = engine else {
        return String::new();
    };
    let parts: Vec<String> = e
        .parts
        .iter()
        .map(|(part, ns)| format!("\"{part}\":{ns}"))
        .collect();
    format!(",\"traps\":{},\"parts\":{{{}}}", e.traps, parts.join(","))
}

/// A sample as the JSON object the runner reads (tools/runner/src/bench/report.rs).
fn sample_json(p: &Place, rep: &Rep, call_ipis: u64, engine: Option<&Engine>) -> String {
    format!(
        "{{\"arch\":\"{}\",\"cpus\":{},\"mode\":\"{}\",\"n\":{},\"round\":{},\"rounds\":{},\
         \"ns\":{},\"on\":{},\"syncs\":{},\"records\":{},\"call_ipis\":{call_ipis},\"stall_ns\":{}{}}}",
        arch(),
        p.cpus,
        p.mode,
        p.n,
        p.round,
        p.rounds,
        rep.nsecs,
        rep.on,
        rep.syncs,
        rep.records,
        rep.stall_ns,
        engine_json(engine)
    )
}

/// Flips `mode`'s `n` sites once and returns what the module measured, the function-call
/// IPIs taken meanwhile (raw: with what starting and stopping the executors costs) and, for
/// textpoke, what the engine's counters say of it.
///
/// A textpoke sample fails unless it emitted what its mode says: a record per site with a
/// listener, none without; otherwise the two columns would not measure what they are named for.
fn sample(mode: &str, n: u32) -> Result<(Rep, u64, Option<Engine>), String> {
    let (module_mode, listener) = match mode {
        LISTENED => (
            TEXTPOKE,
            Some(
                textpoke_agent::platform::perf::Listener::open()
                    .map_err(|e| format!("opening a listener: {e}"))?,
            ),
        ),
        other => (other, None),
    };
    let engine_before = if module_mode == TEXTPOKE {
        Some(engine_counters()?)
    } else {
        None
    };
    let before = sys::call_ipis()?;
    control(&format!("run mode={module_mode} n={n} reps=1"))?;
    let ipis = sys::call_ipis()?.saturating_sub(before);
    let engine = match engine_before {
        Some(b) => Some(engine_delta(&b, &engine_counters()?)?),
        None => None,
    };
    let text = sys::read_text(format!("{DIR}/result")).map_err(|e| e.to_string())?;
    let rep = text
        .lines()
        .find_map(parse_rep)
        .ok_or_else(|| format!("{mode} n={n}: no result in {text:?}"))?;
    drop(listener);
    if module_mode == TEXTPOKE {
        let want = if mode == LISTENED { u64::from(n) } else { 0 };
        if rep.records != want {
            return Err(format!("{mode} n={n}: {} records, not {want}", rep.records));
        }
    }
    Ok((rep, ipis, engine))
}

/// A comma-separated list of sizes from the command line, or all of them.
fn sizes() -> Vec<u32> {
    sys::cmdline_param("textpoke.bench_sizes")
        .map(|s| s.split(',').filter_map(|v| v.trim().parse().ok()).collect())
        .unwrap_or_else(|| SIZES.to_vec())
}

/// Runs every measurement and prints the boot's KTAP document, whose second suite is
/// `textpoke_bench`.
pub fn run(ktap: &mut Ktap) {
    let cpus = sys::online_cpus().map(|c| c.len()).unwrap_or(0);
    let only = sys::cmdline_param("textpoke.bench_only");
    if only.as_deref() == Some("kernel") {
        guest::log("bench: the kernel's own patching only");
        let cases = kbench::run(arch(), cpus, log);
        let (_, selftest) = load_textpoke("kernel_patcher=0");
        print_document(ktap, selftest, "textpoke_bench", cases);
        return;
    }
    if only.as_deref() == Some("foreign_traps") {
        guest::log("bench: the foreign traps only");
        // Loaded first for its self-test's suite; the section leaves it loaded.
        let (loaded, selftest) = load_textpoke("");
        let mut cases = vec![Case::check("load", loaded.is_ok(), format!("{loaded:?}"))];
        cases.extend(trapcost::run(arch(), cpus, log));
        print_document(ktap, selftest, "textpoke_bench", cases);
        return;
    }
    let mut cases = Vec::new();
    if only.as_deref() == Some("flips") {
        guest::log("bench: the flips only");
    } else {
        guest::log("bench: retargeting a hardware breakpoint (PERF_EVENT_IOC_MODIFY_ATTRIBUTES)");
        cases.extend(retarget::run(arch(), cpus, log));
        guest::log("bench: the kernel's own patching, through textpoke and stock");
        cases.extend(kbench::run(arch(), cpus, log));
    }
    // The flips compare textpoke with the kernel's own static keys, which must then take the
    // stock path: textpoke is not the kernel's patcher here.
    let (loaded, selftest) = load_textpoke("kernel_patcher=0");
    let loaded = loaded.and_then(|()| guest::load("textpoke_bench", ""));
    cases.push(Case::check("load", loaded.is_ok(), format!("{loaded:?}")));
    if loaded.is_ok() {
        let modes: &[&str] = if cfg!(target_arch = "aarch64") {
            &[
                TEXTPOKE,
                LISTENED,
                "static_key",
                "nosync",
                "stop_machine",
                "idle",
            ]
        } else {
            &[TEXTPOKE, LISTENED, "static_key", "idle"]
        };
        let reps_override: Option<u32> =
            sys::cmdline_param("textpoke.bench_reps").and_then(|v| v.parse().ok());
        for n in sizes() {
            let rounds = reps_override.unwrap_or_else(|| rounds(n)).max(1);
            guest::log(&format!("bench: {rounds} rounds of {modes:?} at n={n}"));
            // Per mode: samples taken, and the first error (after which the mode stops).
            let mut done: BTreeMap<&str, (u32, Option<String>)> = BTreeMap::new();
            if let Err(e) = control("reset") {
                cases.push(Case::fail(format!("reset_n{n}"), e));
                continue;
            }
            for round in 0..rounds {
                if n >= 256 {
                    guest::log(&format!("bench: n={n} round {}/{rounds}", round + 1));
                }
                for &mode in modes {
                    let entry = done.entry(mode).or_default();
                    if entry.1.is_some() {
                        continue;
                    }
                    match sample(mode, n) {
                        Ok((rep, ipis, engine)) => {
                            let place = Place {
                                mode,
                                n,
                                round,
                                rounds,
                                cpus,
                            };
                            log(&format!(
                                "textpoke-bench: {}",
                                sample_json(&place, &rep, ipis, engine.as_ref())
                            ));
                            for line in gaps_json(&place, &rep) {
                                log(&format!("textpoke-gaps: {line}"));
                            }
                            entry.0 += 1;
                        }
                        Err(e) => entry.1 = Some(e),
                    }
                }
            }
            for &mode in modes {
                let name = format!("{mode}_n{n}");
                match done.remove(mode).unwrap_or_default() {
                    (_, Some(e)) => cases.push(Case::fail(name, e)),
                    (k, None) => cases.push(Case::check(
                        name,
                        k == rounds,
                        format!("{k} samples of {rounds}"),
                    )),
                }
            }
        }
        if let Err(e) = control("reset") {
            cases.push(Case::fail("reset", e));
        }
    }
    if only.as_deref() != Some("flips") {
        // The foreign traps unload textpoke in every round: nothing may hold it.
        if loaded.is_ok() {
            let unloaded = sys::unload_module("textpoke_bench");
            cases.push(Case::check(
                "unload_textpoke_bench",
                unloaded.is_ok(),
                format!("{unloaded:?}"),
            ));
        }
        cases.extend(trapcost::run(arch(), cpus, log));
    }
    print_document(ktap, selftest, "textpoke_bench", cases);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_line() {
        assert_eq!(
            parse_rep("textpoke 16 0 407941 2 16 24254 1 q=3:10,97:2 qx=120:1 f= fx=130:4"),
            Some(Rep {
                nsecs: 407941,
                syncs: 2,
                records: 16,
                stall_ns: 24254,
                on: true,
                before: vec![(3, 10), (97, 2)],
                before_x: vec![(120, 1)],
                flip: vec![],
                flip_x: vec![(130, 4)],
            })
        );
        assert_eq!(parse_rep("textpoke 16 0 407941 2 16 24254 1"), None);
        assert_eq!(parse_rep("textpoke 16 0 407941 2 16 24254 1 q= f="), None);
        assert_eq!(
            parse_rep("textpoke 16 0 x 2 16 24254 0 q= qx= f= fx="),
            None
        );
        assert_eq!(
            parse_rep("textpoke 16 0 1 2 16 24254 0 q=3 qx= f= fx="),
            None
        );
        assert_eq!(
            parse_rep("textpoke 16 0 1 2 16 24254 0 f= qx= q= fx="),
            None
        );
    }

    fn parse_engine_counters(text: &str) -> Result<Engine, String> {
        counters_of(&textpoke_agent::platform::exerciser::key_values(text))
    }

    #[test]
    fn engine_counters_and_their_json() {
        let before = parse_engine_counters(
            "batches 1\nns.guard 10\nns.total 100\ntraps.ret 3\ntraps.cpu0 2\ntraps.cpu1 5\n",
        )
        .unwrap();
        assert_eq!(before.traps, 7);
        let after = parse_engine_counters(
            "batches 2\nns.guard 25\nns.total 180\ntraps.ret 4\ntraps.cpu0 2\ntraps.cpu1 9\n",
        )
        .unwrap();
        let d = engine_delta(&before, &after).unwrap();
        assert_eq!(d.traps, 4);
        assert_eq!(
            engine_json(Some(&d)),
            ",\"traps\":4,\"parts\":{\"guard\":15,\"total\":80}"
        );
        assert_eq!(engine_json(None), "");
        // Fail closed: no `ns.total`, or a value that is not a number.
        assert!(parse_engine_counters("batches 1\n").is_err());
        assert!(parse_engine_counters("ns.total x\n").is_err());
        let mut grown = after.clone();
        grown.parts.insert("new".into(), 1);
        assert!(engine_delta(&before, &grown).is_err());
    }

    #[test]
    fn sample_line_is_json_the_runner_reads() {
        let rep =
            parse_rep("static_key 4096 3 2969931 0 0 8644 0 q=40:7 qx= f=40:5 fx=120:1").unwrap();
        let place = Place {
            mode: "static_key",
            n: 4096,
            round: 3,
            rounds: 20,
            cpus: 4,
        };
        let json = sample_json(&place, &rep, 291, None);
        assert!(json.starts_with(&format!("{{\"arch\":\"{}\",\"cpus\":4,", arch())));
        assert!(json.ends_with(
            "\"round\":3,\"rounds\":20,\"ns\":2969931,\"on\":false,\"syncs\":0,\"records\":0,\
             \"call_ipis\":291,\"stall_ns\":8644}"
        ));
        let gaps = gaps_json(&place, &rep);
        assert_eq!(gaps.len(), 4);
        assert!(
            gaps[0].ends_with("\"n\":4096,\"round\":3,\"window\":\"before\",\"pairs\":[[40,7]]}")
        );
        assert!(gaps[1].ends_with("\"window\":\"before_x\",\"pairs\":[]}"));
        assert!(gaps[2].ends_with("\"window\":\"flip\",\"pairs\":[[40,5]]}"));
        assert!(gaps[3].ends_with("\"window\":\"flip_x\",\"pairs\":[[120,1]]}"));
    }

    #[test]
    fn gap_lines_fit_the_console() {
        // The longest histogram the module can print: every bucket, with the largest counts.
        let hist: Vec<(u32, u64)> = (0..432).map(|b| (b, u64::from(u32::MAX))).collect();
        let rep = Rep {
            nsecs: 1,
            syncs: 0,
            records: 0,
            stall_ns: 0,
            on: false,
            before: hist.clone(),
            before_x: hist.clone(),
            flip: Vec::new(),
            flip_x: Vec::new(),
        };
        let place = Place {
            mode: "stop_machine",
            n: 4096,
            round: 999,
            rounds: 1000,
            cpus: 4,
        };
        let lines = gaps_json(&place, &rep);
        // 432 pairs in lines of 40 twice, and one line for each empty window.
        assert_eq!(lines.len(), 11 + 11 + 1 + 1);
        for line in &lines {
            assert!(
                line.len() + "textpoke-gaps: \n".len() < 1024,
                "{}",
                line.len()
            );
        }
        assert!(lines[22].ends_with("\"window\":\"flip\",\"pairs\":[]}"));
    }
}
