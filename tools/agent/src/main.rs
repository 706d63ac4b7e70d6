//! textpoke's guest agent: PID 1 of the test guest (exec'd by tools/guest/init).
//!
//! What it does is chosen on the kernel command line with `textpoke.mode=`:
//!
//! - `test` (default): the whole guest test suite, one KTAP document `textpoke_agent`;
//! - `run`: the demo, one scenario with its checks and a readable summary;
//! - `check=<what>`: a harness self-check that must make the run fail in a specific way
//!   (`not_ok`, `warn`, `hang`, `no_series`);
//! - `bench`: the benchmarks (see `bench`).
//!
//! Its KTAP document is printed in one piece at the end: module loads print the kernel's own
//! KTAP documents meanwhile, and two documents must not interleave. Progress goes to the log as
//! `textpoke-agent:` lines. The guest powers off at the end (QEMU runs with `-no-reboot`).

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;
use textpoke_agent::checks;
use textpoke_agent::exerciser::{self, Site};
use textpoke_agent::kcore::Kcore;
use textpoke_agent::ktap::{Case, Ktap};
use textpoke_agent::perf::{self, Drain, Recorder, RecorderConfig, TextPokeRec};
use textpoke_agent::realperf::Perf;
use textpoke_agent::sys;
use textpoke_agent::uapi::BAD_INPUT_CASES;
use textpoke_core::record::SampleIdLayout;

mod bench;

const MODULES: &str = "/lib/textpoke";
/// The exerciser's command for a scenario, when the agent runs it as perf's workload.
const RUN_SUBCOMMAND: &str = "exerciser-run";

fn log(msg: &str) {
    let line = format!("textpoke-agent: {msg}\n");
    // The kernel log serializes our lines with the kernel's; stdout would interleave mid-line.
    if sys::write_file("/dev/kmsg", line.as_bytes()).is_err() {
        print!("{line}");
    }
}

fn is_x86() -> bool {
    cfg!(target_arch = "x86_64")
}

fn load(name: &str, params: &str) -> Result<(), String> {
    let path = format!("{MODULES}/{name}.ko");
    sys::load_module(&path, params).map_err(|e| format!("loading {path}: {e}"))
}

/// The kernel text covering every site: `(base, length)`.
fn region(sites: &[Site]) -> (u64, usize) {
    let lo = sites.iter().map(|s| s.addr).min().unwrap_or(0);
    let hi = sites
        .iter()
        .map(|s| s.addr + s.len as u64)
        .max()
        .unwrap_or(0);
    (lo, (hi - lo) as usize)
}

fn engine_log() -> Result<Vec<TextPokeRec>, String> {
    let bytes = sys::read_file(exerciser::ENGINE_RECORDS)
        .map_err(|e| format!("reading engine log: {e}"))?;
    let layout = SampleIdLayout::new(perf::SAMPLE_TYPE);
    let mut d = Drain::default();
    d.add_stream(&bytes, layout, 0);
    if !d.errors.is_empty() {
        return Err(format!("engine log malformed: {:?}", d.errors));
    }
    Ok(d.pokes)
}

fn clear_engine_log() -> Result<(), String> {
    sys::write_file(exerciser::ENGINE_RECORDS, b"clear")
        .map(drop)
        .map_err(|e| format!("clearing engine log: {e}"))
}

/// Everything a scenario run left behind.
struct Evidence {
    run: Result<(), i32>,
    drain: Drain,
    engine: Result<Vec<TextPokeRec>, String>,
    before: Vec<u8>,
    after: Vec<u8>,
    result: std::collections::BTreeMap<String, String>,
    batches: Vec<exerciser::BatchLine>,
    execs: Vec<textpoke_agent::uapi::ExecRecord>,
}

/// The addresses of every exerciser site.
fn site_addrs(sites: &[Site]) -> HashSet<u64> {
    sites.iter().map(|s| s.addr).collect()
}

impl Evidence {
    /// The recorded pokes of exerciser sites (the kernel's own pokes left out).
    fn site_pokes(&self, sites: &[Site]) -> Vec<TextPokeRec> {
        let addrs = site_addrs(sites);
        self.drain
            .pokes
            .iter()
            .filter(|p| addrs.contains(&p.addr))
            .cloned()
            .collect()
    }
}

fn run_scenario(spec: &str, sites: &[Site], kcore: &Kcore) -> Result<Evidence, String> {
    let (base, len) = region(sites);
    clear_engine_log()?;
    let before = kcore
        .read(base, len)
        .map_err(|e| format!("kcore before: {e}"))?;
    let mut recorder = Recorder::open(&RecorderConfig { data_pages: 512 })
        .map_err(|e| format!("opening the TEXT_POKE recorder: {e}"))?;
    log(&format!("scenario {spec}"));
    let run = exerciser::command(&format!("run {spec}"));
    let drain = recorder.drain();
    recorder.close();
    let after = kcore
        .read(base, len)
        .map_err(|e| format!("kcore after: {e}"))?;
    Ok(Evidence {
        run,
        drain,
        engine: engine_log(),
        before,
        after,
        result: exerciser::result().map_err(|e| format!("result: {e}"))?,
        batches: exerciser::batches().map_err(|e| format!("batches: {e}"))?,
        execs: exerciser::executions().map_err(|e| format!("executions: {e}"))?,
    })
}

/// Runs a scenario and judges it, as a KTAP subtest.
fn scenario_case(name: &str, spec: &str, sites: &[Site], kcore: &Kcore) -> Case {
    match run_scenario(spec, sites, kcore) {
        Ok(ev) => judge(name, spec, &ev, sites),
        Err(e) => Case::fail(name, e),
    }
}

/// The checks of one scenario's evidence.
fn judge(name: &str, spec: &str, ev: &Evidence, sites: &[Site]) -> Case {
    let ours = ev.site_pokes(sites);
    let mut children = Vec::new();
    let committed = ev.batches.iter().filter(|b| b.errno == 0).count();
    children.push(Case::check(
        "run_completed",
        ev.run.is_ok() && committed == ev.batches.len() && !ev.batches.is_empty(),
        format!(
            "command: {:?}, {committed} of {} batches committed",
            ev.run,
            ev.batches.len()
        ),
    ));
    children.push(Case::check(
        "perf_records_not_lost",
        ev.drain.is_clean(),
        format!(
            "lost {} records ({} events), {} full buffers, errors {:?}",
            ev.drain.lost_records, ev.drain.lost_events, ev.drain.full_buffers, ev.drain.errors
        ),
    ));
    let changed: u64 = ev.batches.iter().map(|b| b.sites).sum();
    children.push(Case::check(
        "one_record_per_site_change",
        ours.len() as u64 == changed && changed > 0,
        format!("{} records for {changed} site changes", ours.len()),
    ));
    children.push(match &ev.engine {
        Ok(engine) => match checks::same_pokes("perf", &ours, "engine log", engine) {
            Ok(n) => {
                Case::pass("records_match_engine_log").with_log(format!("{n} records matched"))
            }
            Err(e) => Case::fail("records_match_engine_log", e),
        },
        Err(e) => Case::fail("records_match_engine_log", e.clone()),
    });
    let (base, _) = region(sites);
    children.push(match checks::replay(base, &ev.before, &ev.after, &ours) {
        Ok(n) => Case::pass("kcore_replay_exact")
            .with_log(format!("{n} records replayed onto the kcore snapshot")),
        Err(e) => Case::fail("kcore_replay_exact", e),
    });
    match checks::timelines(sites, &ours) {
        Ok(lines) => {
            let r = checks::check_ordering(sites, &lines, &ev.execs);
            let mut c = Case::check(
                "ordering_no_violations",
                r.violations == 0 && r.checked > 0,
                format!(
                    "{} violations in {} executions: {:?}",
                    r.violations, r.checked, r.examples
                ),
            )
            .with_log(format!(
                "{} executions checked against {} records",
                r.checked,
                ours.len()
            ));
            for (kind, [old, new, trapped]) in &r.by_kind {
                c = c.with_log(format!("{kind}: old {old}, new {new}, trapped {trapped}"));
            }
            children.push(c);
        }
        Err(e) => children.push(Case::fail("ordering_no_violations", e)),
    }
    for (key, value) in &ev.result {
        if let Some(kind) = key.strip_prefix("executions.") {
            if value != "0" {
                let trapped = exerciser::number(&ev.result, &format!("trapped.{kind}"));
                children.push(Case::check(
                    format!("trap_path_taken_{kind}"),
                    trapped > 0,
                    format!("no {kind} execution trapped: the guarded window was never hit"),
                ));
            }
        }
    }
    if spec.contains("pokers=") && !spec.contains("pokers=1") {
        // Concurrent pokers must really have had batches in flight at the same time.
        let overlap = checks::max_overlap(ev.batches.iter().map(|b| (b.start, b.end)));
        children.push(
            Case::check(
                "batches_in_flight_together",
                overlap >= 2,
                format!("at most {overlap} batch in flight at any time"),
            )
            .with_log(format!("up to {overlap} batches were in flight at once")),
        );
    }
    children.push(Case::check(
        "stable_executions_consistent",
        exerciser::number(&ev.result, "stable_violations") == 0,
        format!(
            "{} executions outside batches ran a non-committed instruction",
            exerciser::number(&ev.result, "stable_violations")
        ),
    ));
    let mut case = Case::group(name, children).with_log(format!("spec {spec}"));
    for key in [
        "batches",
        "sites_changed",
        "syncs",
        "records",
        "logged",
        "log_dropped",
        "late_traps",
        "nsecs",
    ] {
        case = case.with_log(format!(
            "{key} {}",
            ev.result.get(key).map_or("?", String::as_str)
        ));
    }
    case
}

/// Most runs of the broken scenario before the checker must have seen the broken engine.
///
/// Whether an unguarded write is observed depends on where TCG switches vCPUs: at x86 `-smp 2`
/// one run of [`BROKEN_SCENARIO`] has caught it in 0 to 38 of every thousand executions, so a
/// single run can come out clean. More load, not a weaker check: the case still fails unless
/// a violation is seen.
const BROKEN_RUNS: usize = 5;

/// The deliberately broken engine, under the same load: the checker must see it.
fn broken_case(name: &str, protocol: u32, spec: &str, sites: &[Site], kcore: &Kcore) -> Case {
    if let Err(e) = sys::set_module_param("textpoke", "debug_protocol", &protocol.to_string()) {
        return Case::fail(name, format!("setting debug_protocol: {e}"));
    }
    let mut runs = Vec::new();
    let outcome = loop {
        let r = run_scenario(spec, sites, kcore).and_then(|ev| {
            let lines = checks::timelines(sites, &ev.site_pokes(sites))?;
            Ok(checks::check_ordering(sites, &lines, &ev.execs))
        });
        match r {
            Ok(r) => {
                runs.push(format!(
                    "debug_protocol={protocol}: {} violations in {} executions",
                    r.violations, r.checked
                ));
                if r.violations > 0 || runs.len() == BROKEN_RUNS {
                    break Ok(r.violations > 0);
                }
            }
            Err(e) => break Err(e),
        }
    };
    let reset = sys::set_module_param("textpoke", "debug_protocol", "0");
    let case = match (outcome, reset) {
        (Ok(caught), Ok(())) => Case::check(
            name,
            caught,
            format!(
                "the checker saw no violation in {} runs of a broken engine",
                runs.len()
            ),
        ),
        (Err(e), _) => Case::fail(name, e),
        (_, Err(e)) => Case::fail(name, format!("resetting debug_protocol: {e}")),
    };
    runs.into_iter().fold(case, Case::with_log)
}

fn errno_named(name: &str) -> i32 {
    match name {
        "ENOENT" => libc::ENOENT,
        "EADDRINUSE" => libc::EADDRINUSE,
        "EPERM" => libc::EPERM,
        "EOPNOTSUPP" => libc::EOPNOTSUPP,
        "EMSGSIZE" => libc::EMSGSIZE,
        "ERANGE" => libc::ERANGE,
        "EILSEQ" => libc::EILSEQ,
        "EFAULT" => libc::EFAULT,
        "EEXIST" => libc::EEXIST,
        "EBUSY" => libc::EBUSY,
        "ENODATA" => libc::ENODATA,
        "E2BIG" => libc::E2BIG,
        "EALREADY" => libc::EALREADY,
        _ => -1,
    }
}

/// Runs `action` and checks that it fails with `errno`, logs a textpoke line containing
/// `log_needle`, and leaves the sites' text unchanged.
fn refused(
    name: &str,
    sites: &[Site],
    kcore: &Kcore,
    errno: i32,
    log_needle: &str,
    action: impl FnOnce() -> Result<(), i32>,
) -> Case {
    let (base, len) = region(sites);
    let before = kcore.read(base, len);
    let cursor = sys::dmesg_cursor().unwrap_or_default();
    let got = action();
    let lines = sys::dmesg_since(cursor).map(|(l, _)| l).unwrap_or_default();
    let after = kcore.read(base, len);
    let logged = lines.iter().any(|l| l.contains(log_needle));
    let unchanged = matches!((&before, &after), (Ok(b), Ok(a)) if a == b);
    Case::check(
        name,
        got == Err(errno) && logged && unchanged,
        format!(
            "expected errno {errno}, got {got:?}; log line containing {log_needle:?}: {logged}; text unchanged: {unchanged}"
        ),
    )
}

fn bad_input_cases(sites: &[Site], kcore: &Kcore) -> Case {
    let mut children = Vec::new();
    for (case, errno) in BAD_INPUT_CASES {
        if *case == "misaligned" && is_x86() {
            children.push(Case::skip(
                *case,
                "x86 instructions have no alignment requirement",
            ));
            continue;
        }
        children.push(refused(
            case,
            sites,
            kcore,
            errno_named(errno),
            "textpoke: ",
            || exerciser::command(&format!("bad {case}")),
        ));
    }
    // Userspace needs root for everything: debugfs is root-only and the files want CAP_SYS_ADMIN.
    let nonroot = sys::run_as_user(65534, || {
        match std::fs::OpenOptions::new()
            .write(true)
            .open("/sys/kernel/debug/textpoke_exerciser/control")
        {
            Ok(_) => 0,
            Err(e) => e.raw_os_error().unwrap_or(255),
        }
    });
    children.push(Case::check(
        "non_root_access",
        matches!(nonroot, Ok(code) if code == libc::EACCES || code == libc::EPERM),
        format!("unprivileged open of the control file gave {nonroot:?}"),
    ));
    // A batch in flight pins the module owning its sites, and textpoke itself.
    children.push(refused(
        "unload_with_batch_in_flight",
        sites,
        kcore,
        libc::EAGAIN,
        "holding an uncommitted batch",
        || {
            exerciser::command("hold 0")?;
            let r = sys::unload_module("textpoke_exerciser")
                .map_err(|e| e.raw_os_error().unwrap_or(-1));
            let r2 = sys::unload_module("textpoke").map_err(|e| e.raw_os_error().unwrap_or(-1));
            exerciser::command("release")?;
            if r2 != Err(libc::EAGAIN) {
                return Err(-2);
            }
            r
        },
    ));
    children.push(refused(
        "unload_with_executors_running",
        sites,
        kcore,
        libc::EAGAIN,
        "executors running",
        || {
            exerciser::command("executors start")?;
            let r = sys::unload_module("textpoke_exerciser")
                .map_err(|e| e.raw_os_error().unwrap_or(-1));
            exerciser::command("executors stop")?;
            r
        },
    ));
    Case::group("bad_input", children)
}

/// Debian's perf records our pokes (and, on x86, the kernel's own) exactly like our reader.
fn real_perf_cases(spec: &str, sites: &[Site]) -> Vec<Case> {
    let Ok(perf) = Perf::locate() else {
        return vec![Case::skip("real_perf", "no perf binary in this guest")];
    };
    let mut out = Vec::new();
    let addrs = site_addrs(sites);
    // Our pokes: perf's workload is this agent, running one scenario.
    let ours = (|| -> Result<Case, String> {
        clear_engine_log()?;
        let me = std::env::current_exe().map_err(|e| e.to_string())?;
        let dir = Path::new("/tmp/perf-ours");
        let _ = std::fs::remove_dir_all(dir);
        perf.record(
            dir,
            &[me.to_string_lossy().as_ref(), RUN_SUBCOMMAND, spec],
            &["--no-bpf-event"],
        )
        .map_err(|e| format!("perf record: {e}"))?;
        let pokes = perf
            .script_text_pokes(dir)
            .map_err(|e| format!("perf script: {e}"))?;
        let engine = engine_log()?;
        let seen: Vec<TextPokeRec> = pokes
            .iter()
            .filter(|p| addrs.contains(&p.addr))
            .map(|p| TextPokeRec {
                addr: p.addr,
                old: p.old.clone(),
                new: p.new.clone(),
                time: p.time_ns.unwrap_or(0),
                ..TextPokeRec::default()
            })
            .collect();
        let n = checks::same_pokes("perf script", &seen, "engine log", &engine)?;
        Ok(
            Case::check("real_perf_matches_engine_log", n > 0, "no records")
                .with_log(format!("{n} perf script records matched the engine log")),
        )
    })();
    out.push(ours.unwrap_or_else(|e| Case::fail("real_perf_matches_engine_log", e)));
    // The kernel's own pokes, as a control of the pipeline: enabling the function tracer
    // patches every traced function. x86 records them; arm64 emits no record at all.
    let control = (|| -> Result<Case, String> {
        let dir = Path::new("/tmp/perf-ftrace");
        let _ = std::fs::remove_dir_all(dir);
        let t = "/sys/kernel/debug/tracing/current_tracer";
        let cmd = format!("echo function > {t}; echo nop > {t}");
        perf.record(dir, &["/bin/sh", "-c", &cmd], &["--no-bpf-event"])
            .map_err(|e| format!("perf record: {e}"))?;
        let n = perf
            .script_text_pokes(dir)
            .map_err(|e| format!("perf script: {e}"))?
            .len();
        Ok(if is_x86() {
            Case::check(
                "real_perf_sees_kernel_ftrace_pokes",
                n > 1000,
                format!("only {n} records"),
            )
            .with_log(format!(
                "{n} TEXT_POKE records from the kernel's own ftrace patching"
            ))
        } else {
            Case::check(
                "arm64_kernel_ftrace_emits_no_records",
                n == 0,
                format!("{n} records: upstream arm64 was expected to emit none"),
            )
            .with_log("upstream arm64 patches ftrace sites without PERF_RECORD_TEXT_POKE")
        })
    })();
    out.push(control.unwrap_or_else(|e| Case::fail("real_perf_kernel_control", e)));
    out
}

/// The scenarios of the test suite. Sizes are chosen for single-threaded TCG, where every
/// all-CPU sync waits for each vCPU's turn: enough batches for thousands of trapped executions
/// of every kind, few enough to finish in seconds.
const SCENARIOS: &[(&str, &str)] = &[
    (
        "scenario_one_poker",
        "keys=6 sites=8 ftrace=16 flips=6 pokers=1",
    ),
    (
        "scenario_concurrent_pokers",
        "keys=9 sites=4 ftrace=8 flips=6 pokers=3",
    ),
];

/// The load under which the deliberately broken engine must be caught.
const BROKEN_SCENARIO: &str = "keys=6 sites=8 ftrace=16 flips=4 pokers=1";

fn test_suite(ktap: &mut Ktap) {
    let mut cases = Vec::new();
    let loaded = load("textpoke", "");
    cases.push(Case::check(
        "load_textpoke",
        loaded.is_ok(),
        format!("{loaded:?}"),
    ));
    let ex = loaded.and_then(|()| load("textpoke_exerciser", ""));
    cases.push(Case::check("load_exerciser", ex.is_ok(), format!("{ex:?}")));
    let setup = ex.and_then(|()| {
        let sites = exerciser::sites().map_err(|e| format!("sites: {e}"))?;
        let kcore = Kcore::open().map_err(|e| format!("/proc/kcore: {e}"))?;
        Ok((sites, kcore))
    });
    match setup {
        Ok((sites, kcore)) => {
            cases.push(Case::pass("sites_listed").with_log(format!("{} sites", sites.len())));
            for (name, spec) in SCENARIOS {
                cases.push(scenario_case(name, spec, &sites, &kcore));
            }
            // Upstream arm64's unguarded "nosync" writes, with a record: the checker must see a
            // CPU run the new instruction before the record. (A record emitted before the guard
            // sync is a real bug too, but QEMU keeps code coherent, so no vCPU can show it; the
            // host model covers it.)
            cases.push(broken_case(
                "broken_unguarded_nosync_is_caught",
                3,
                BROKEN_SCENARIO,
                &sites,
                &kcore,
            ));
            cases.extend(real_perf_cases(SCENARIOS[0].1, &sites));
            cases.push(bad_input_cases(&sites, &kcore));
            let unloaded = sys::unload_module("textpoke_exerciser")
                .and_then(|()| sys::unload_module("textpoke"));
            cases.push(Case::check(
                "unload",
                unloaded.is_ok(),
                format!("{unloaded:?}"),
            ));
        }
        Err(e) => cases.push(Case::fail("sites_listed", e)),
    }
    if let Err(e) = ktap.print_document("textpoke_agent", &cases) {
        log(&format!("KTAP output failed: {e}"));
    }
}

/// Logs what a scenario did, for people: `textpoke-agent: demo ...` lines.
fn narrate(spec: &str, ev: &Evidence, sites: &[Site]) {
    let say = |line: String| log(&format!("demo {line}"));
    let n = |key: &str| exerciser::number(&ev.result, key);
    say(format!("scenario: {spec}"));
    say(format!(
        "{} batches changed {} sites with {} all-CPU syncs ({:.1} per batch) in {:.2} s",
        n("batches"),
        n("sites_changed"),
        n("syncs"),
        n("syncs") as f64 / n("batches").max(1) as f64,
        n("nsecs") as f64 / 1e9
    ));
    let times: Vec<u64> = ev.batches.iter().map(|b| b.nsecs).collect();
    if !times.is_empty() {
        let mean = times.iter().sum::<u64>() / times.len() as u64;
        say(format!(
            "batch commit time: mean {} us, max {} us",
            mean / 1000,
            times.iter().max().unwrap_or(&0) / 1000
        ));
    }
    let ours = ev.site_pokes(sites).len();
    say(format!(
        "perf recorded {ours} PERF_RECORD_TEXT_POKE records on {} CPUs (lost: {})",
        sys::online_cpus().map(|c| c.len()).unwrap_or(0),
        ev.drain.lost_records
    ));
    for (key, value) in &ev.result {
        if let Some(kind) = key.strip_prefix("executions.").filter(|_| value != "0") {
            say(format!(
                "{kind:>10}: {value} executions, {} while their batch was in flight, {} trapped and emulated",
                n(&format!("windowed.{kind}")),
                n(&format!("trapped.{kind}"))
            ));
        }
    }
}

/// The demo: one scenario, checked, with a summary anyone can read.
fn demo(ktap: &mut Ktap) {
    let mut cases = Vec::new();
    let setup = load("textpoke", "")
        .and_then(|()| load("textpoke_exerciser", ""))
        .and_then(|()| {
            Ok((
                exerciser::sites().map_err(|e| e.to_string())?,
                Kcore::open().map_err(|e| e.to_string())?,
            ))
        });
    match setup {
        Ok((sites, kcore)) => {
            let spec = "keys=6 sites=8 ftrace=16 flips=10 pokers=2";
            match run_scenario(spec, &sites, &kcore) {
                Ok(ev) => {
                    narrate(spec, &ev, &sites);
                    let case = judge("demo_scenario", spec, &ev, &sites);
                    log(&format!(
                        "demo checks: {}",
                        if case.passed() {
                            "all passed"
                        } else {
                            "FAILED (see KTAP)"
                        }
                    ));
                    cases.push(case);
                }
                Err(e) => cases.push(Case::fail("demo_scenario", e)),
            }
        }
        Err(e) => cases.push(Case::fail("demo_setup", e)),
    }
    if let Err(e) = ktap.print_document("textpoke_demo", &cases) {
        log(&format!("KTAP output failed: {e}"));
    }
}

/// Harness self-checks: each must make the run fail in its own way.
fn harness_check(ktap: &mut Ktap, what: &str) {
    match what {
        "not_ok" => {
            let r = load("harness_not_ok", "");
            log(&format!("harness_not_ok loaded: {r:?}"));
        }
        "warn" => {
            let r = load("harness_warn", "");
            log(&format!(
                "harness_warn returned (should have panicked): {r:?}"
            ));
        }
        "hang" => {
            log("hanging on purpose: the runner must time out");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        "no_series" => {
            let r = load("textpoke", "");
            let case = Case::check("load_textpoke", r.is_ok(), format!("{r:?}"));
            let _ = ktap.print_document("textpoke_agent", &[case]);
        }
        other => log(&format!("unknown check {other}")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(RUN_SUBCOMMAND) {
        // perf's workload: run one scenario and report its success as the exit status.
        let spec = args.get(2).map_or("", String::as_str);
        return match exerciser::command(&format!("run {spec}")) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        };
    }
    let mut ktap = Ktap::kmsg().unwrap_or_else(|_| Ktap::new(Box::new(std::io::stdout())));
    let mode = sys::cmdline_param("textpoke.mode").unwrap_or_else(|| "test".into());
    log(&format!("mode {mode}"));
    match mode.as_str() {
        "run" => demo(&mut ktap),
        "bench" => bench::run(&mut ktap),
        m if m.starts_with("check=") => harness_check(&mut ktap, &m["check=".len()..]),
        _ => test_suite(&mut ktap),
    }
    log("done, rebooting");
    sys::reboot()
}
