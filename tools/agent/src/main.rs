//! textpoke's guest agent: PID 1 of the test guest (exec'd by tools/guest/init).
//!
//! What it does is chosen on the kernel command line with `textpoke.mode=`:
//!
//! - `test` (default): the whole guest test suite;
//! - `run`: the demo, one scenario with its checks and a readable summary;
//! - `check=<what>`: a harness self-check that must make the run fail in a specific way
//!   (`not_ok`, `warn`, `hang`, `no_series`, `kmemleak`, ...);
//! - `bench`: the benchmarks (see `bench`);
//! - `stress`: load and unload textpoke and the exerciser 100 times, trying to unload them while
//!   batches are live (see `stress`).
//!
//! Each mode prints one KTAP document, at the end and in one piece, whose suites are
//! `textpoke_selftest` (textpoke's load-time self-test, read from the log lines it printed
//! while loading) and the mode's own (`textpoke_agent`, `textpoke_demo`, `textpoke_bench`,
//! `textpoke_stress`): one document per boot, which the kernel's own KTAP parser reads in full.
//! Progress goes to the log as `textpoke-agent:` lines. The guest powers off at the end (QEMU
//! runs with `-no-reboot`).
//!
//! The modes are driven from here; what they run lives in two folders, on top of the library
//! (`textpoke_agent`: `platform`, `oracle`, `report`):
//!
//! - [`scenarios`]: the test suite's groups (one scenario and its judgement, the observed
//!   scenario, bad input, the outsider, the kernel's own suites and patching, hotplug, the
//!   listener, the negative controls), the unload-stress mode and its faults, and the boot's
//!   plan of cases;
//! - [`mod@bench`]: the benchmarks (the flips, the kernel's own patching, the foreign traps'
//!   cost, retargeting a hardware breakpoint).

use std::path::Path;
use std::process::ExitCode;
use textpoke_agent::oracle::checks;
use textpoke_agent::platform::exerciser::{self, Site};
use textpoke_agent::platform::guest::{load, log, timed};
use textpoke_agent::platform::kcore::Kcore;
use textpoke_agent::platform::perf::TextPokeRec;
use textpoke_agent::platform::realperf::Perf;
use textpoke_agent::platform::sys;
use textpoke_agent::report::document::{load_textpoke, load_textpoke_from, print_document};
use textpoke_agent::report::ktap::{Case, Ktap};

mod bench;
mod scenarios;

use scenarios::scenario::{self, region, Evidence, SCENARIOS};
use scenarios::{
    badinput, controls, faults, groups, hotplug, kernel_patching, kselftest, listener, new_text,
    observed, outsider, plan, stock_recorder, stress, writers,
};

/// The exerciser's command for a scenario, when the agent runs it as perf's workload.
const RUN_SUBCOMMAND: &str = "exerciser-run";

/// [`print_document`], with the mode's cases held to the boot's plan (see [`plan::Plan`]).
fn print_planned(
    ktap: &mut Ktap,
    selftest: Case,
    suite: &str,
    plan: &plan::Plan,
    cases: Vec<Case>,
) {
    print_document(ktap, selftest, suite, plan.reconcile(cases));
}

/// Debian's perf records our pokes (and, on x86, the kernel's own) as the text says they
/// happened: its records chain from `/proc/kcore` before a scenario to `/proc/kcore` after it.
fn real_perf_cases(spec: &str, sites: &[Site], kcore: &Kcore) -> Vec<Case> {
    let perf = match Perf::locate() {
        Ok(perf) => perf,
        Err(e) => {
            return vec![
                Case::fail(
                    "real_perf_records_match_text",
                    format!("no perf in this guest: {e}"),
                ),
                Case::fail(
                    "real_perf_sees_kernel_ftrace_pokes",
                    format!("no perf in this guest: {e}"),
                ),
                Case::fail(
                    "real_perf_maps_new_module",
                    format!("no perf in this guest: {e}"),
                ),
            ]
        }
    };
    let mut out = Vec::new();
    // Our pokes: perf's workload is this agent, running one scenario.
    let ours = (|| -> Result<Case, String> {
        let (base, len) = region(sites);
        let before = kcore
            .read(base, len)
            .map_err(|e| format!("kcore before: {e}"))?;
        log("real perf: recording a scenario");
        let me = std::env::current_exe().map_err(|e| e.to_string())?;
        let dir = Path::new("/tmp/perf-ours");
        let _ = std::fs::remove_dir_all(dir);
        // Side-band events only (`-e dummy`; `--kcore` adds the text-poke event): samples of
        // every CPU would only compete with the records for the ring buffer, and on a slow
        // debug kernel perf has been seen to lose records that way.
        perf.record(
            dir,
            &[me.to_string_lossy().as_ref(), RUN_SUBCOMMAND, spec],
            &["--no-bpf-event", "-e", "dummy"],
        )
        .map_err(|e| format!("perf record: {e}"))?;
        let after = kcore
            .read(base, len)
            .map_err(|e| format!("kcore after: {e}"))?;
        let pokes = perf
            .script_text_pokes(dir)
            .map_err(|e| format!("perf script: {e}"))?;
        let seen: Vec<TextPokeRec> = pokes
            .iter()
            .filter(|p| sites.iter().any(|s| s.addr == p.addr))
            .map(|p| TextPokeRec {
                addr: p.addr,
                old: p.old.clone(),
                new: p.new.clone(),
                time: p.time_ns.unwrap_or(0),
                ..TextPokeRec::default()
            })
            .collect();
        let n = checks::records_match_text(sites, base, &before, &after, &seen)?;
        Ok(Case::check(
            "real_perf_records_match_text",
            n > 0 && before != after,
            "no records, or no change",
        )
        .with_log(format!(
            "{n} perf script records chain from kcore before to kcore after"
        )))
    })();
    out.push(ours.unwrap_or_else(|e| Case::fail("real_perf_records_match_text", e)));
    // The kernel's own pokes: enabling the function tracer patches every traced function,
    // through textpoke (x86 and arm64) while it is loaded.
    let control = (|| -> Result<Case, String> {
        log("real perf: recording the function tracer's patching");
        let dir = Path::new("/tmp/perf-ftrace");
        let _ = std::fs::remove_dir_all(dir);
        let t = "/sys/kernel/debug/tracing/current_tracer";
        let cmd = format!("echo function > {t}; echo nop > {t}");
        // Side-band only, as above: a KASAN kernel's sampling on every CPU made perf lose a
        // chunk here (arm64 test-debug).
        perf.record(
            dir,
            &["/bin/sh", "-c", &cmd],
            &["--no-bpf-event", "-e", "dummy"],
        )
        .map_err(|e| format!("perf record: {e}"))?;
        let n = perf
            .script_text_pokes(dir)
            .map_err(|e| format!("perf script: {e}"))?
            .len();
        // With textpoke loaded, arm64 records them too (upstream arm64 records none: see
        // `kernel_patching::stock_cases`).
        Ok(Case::check(
            "real_perf_sees_kernel_ftrace_pokes",
            n > 1000,
            format!("only {n} records"),
        )
        .with_log(format!(
            "{n} TEXT_POKE records from the kernel's own ftrace patching"
        )))
    })();
    out.push(control.unwrap_or_else(|e| Case::fail("real_perf_sees_kernel_ftrace_pokes", e)));
    log("real perf: recording a module loaded mid-trace");
    out.push(new_text::real_perf_case(&perf));
    log("real perf: done");
    out
}

fn test_suite(ktap: &mut Ktap) {
    // The groups this boot runs, as the runner planned them (`textpoke.groups=`).
    let asked = match groups::asked(sys::cmdline_param("textpoke.groups").as_deref()) {
        Ok(asked) => asked,
        Err(e) => {
            log(&e);
            let not_run = Case::fail("textpoke_selftest", "not run: the command line is wrong");
            print_document(
                ktap,
                not_run,
                "textpoke_agent",
                vec![Case::fail("groups_asked", e)],
            );
            return;
        }
    };
    let runs = |name: &str| asked.iter().any(|g| g.name == name);
    log(&format!(
        "groups: {}",
        asked.iter().map(|g| g.name).collect::<Vec<_>>().join(" ")
    ));
    let plan = plan::Plan::test(&asked);
    let mut cases = Vec::new();
    // On the stock path first, before textpoke is ever loaded.
    let kernel_suites =
        runs("kernel_suites").then(|| timed("kernel_suites_stock", kselftest::stock));
    let (loaded, selftest) = timed("load_textpoke", || load_textpoke(""));
    cases.push(Case::check(
        "load_textpoke",
        loaded.is_ok(),
        format!("{loaded:?}"),
    ));
    let ex = timed("load_exerciser", || {
        loaded.and_then(|()| load("textpoke_exerciser", ""))
    });
    cases.push(Case::check("load_exerciser", ex.is_ok(), format!("{ex:?}")));
    let setup = timed("sites_listed", || ex.and_then(|()| sites_and_kcore()));
    match setup {
        Ok((sites, kcore)) => {
            cases.push(Case::pass("sites_listed").with_log(format!("{} sites", sites.len())));
            // A listener for the whole suite, as on a traced machine: textpoke guards and
            // records. The listener group closes it for its own checks.
            let mut listening = match timed(
                "suite_listener",
                textpoke_agent::platform::perf::Listener::open,
            ) {
                Ok(l) => Some(l),
                Err(e) => {
                    log(&format!("opening the suite's listener: {e}"));
                    None
                }
            };
            let cpus = sys::online_cpus().map_or(0, |c| c.len());
            for (name, spec, min_trapped) in SCENARIOS.iter().filter(|s| runs(s.0)) {
                cases.push(timed(name, || match scenario::Shape::parse(spec) {
                    Ok(shape) => {
                        let traps = scenario::TrapsWanted::for_spec(*min_trapped, &shape, cpus);
                        scenario::case(
                            name,
                            spec,
                            &shape,
                            traps,
                            &sites,
                            &kcore,
                            scenario::Cpus::Steady,
                        )
                    }
                    Err(e) => Case::fail(*name, e),
                }));
            }
            if runs("scenario_observed") {
                cases.push(timed("scenario_observed", || {
                    observed::case(&sites, &kcore)
                }));
            }
            if runs("real_perf") {
                cases.extend(timed("real_perf", || {
                    real_perf_cases(SCENARIOS[0].1, &sites, &kcore)
                }));
            }
            if runs("bad_input") {
                cases.push(timed("bad_input", || badinput::cases(&sites, &kcore)));
            }
            if runs("outsider") {
                cases.push(timed("outsider", || outsider::cases(&sites, &kcore)));
            }
            if let Some(stock) = &kernel_suites {
                cases.push(timed("kernel_suites", || {
                    kselftest::with_textpoke(stock, &kcore)
                }));
            }
            if runs("kernel_patching") {
                cases.push(timed("kernel_patching", || kernel_patching::cases(&kcore)));
            }
            if runs("other_writers") {
                cases.push(timed("other_writers", || writers::cases(&kcore)));
                cases.push(timed("new_text", || new_text::cases(&kcore)));
            }
            if runs("cpu_hotplug") {
                cases.push(timed("cpu_hotplug", || hotplug::cases(&sites, &kcore)));
            }
            if runs("listener") {
                cases.push(timed("listener", || {
                    listener::cases(&sites, &kcore, &mut listening)
                }));
            }
            if runs("stock_recorder") {
                cases.push(timed("stock_recorder", || {
                    stock_recorder::cases(&kcore, &mut listening)
                }));
            }
            if runs("negative_controls") {
                // Each control records, or runs with nobody listening on purpose.
                listening = None;
                cases.push(timed("negative_controls", || controls::cases(&kcore)));
            }
            drop(listening);
            let unloaded = sys::unload_module("textpoke_exerciser");
            match &unloaded {
                // textpoke alone now: only the kernel's pin can keep it loaded.
                Ok(()) => cases.push(timed(
                    "unload_refused_mid_update",
                    kernel_patching::unload_refused_mid_update,
                )),
                Err(e) => cases.push(Case::fail(
                    "unload_refused_mid_update",
                    format!("the exerciser did not unload, so textpoke is not alone: {e}"),
                )),
            }
            let unloaded = unloaded.and_then(|()| sys::unload_module("textpoke"));
            cases.push(Case::check(
                "unload",
                unloaded.is_ok(),
                format!("{unloaded:?}"),
            ));
            cases.push(timed("stock_after_unload", || {
                kernel_patching::stock_cases(&kcore)
            }));
        }
        Err(e) => cases.push(Case::fail("sites_listed", e)),
    }
    print_planned(ktap, selftest, "textpoke_agent", &plan, cases);
}

/// `textpoke.mode=controls`: the negative controls alone, for counting how reliably each defect
/// is caught over many boots (docs/results.md); `make test` runs them inside the full suite.
fn controls_only(ktap: &mut Ktap) {
    let mut cases = Vec::new();
    let (loaded, selftest) = load_textpoke("");
    let ready = loaded
        .and_then(|()| load("textpoke_exerciser", ""))
        .and_then(|()| Kcore::open().map_err(|e| format!("/proc/kcore: {e}")));
    match ready {
        Ok(kcore) => cases.push(controls::cases(&kcore)),
        Err(e) => cases.push(Case::fail("controls_setup", e)),
    }
    print_planned(
        ktap,
        selftest,
        "textpoke_agent",
        &plan::Plan::controls_only(),
        cases,
    );
}

/// Logs what a scenario did, for people: `textpoke-agent: demo ...` lines.
fn narrate(spec: &str, ev: &Evidence, sites: &[Site]) {
    let say = |line: String| log(&format!("demo {line}"));
    // Narration only: a missing key reads as 0 here, the checks fail on it.
    let n = |key: &str| ev.result(key).unwrap_or(0);
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
    let (loaded, selftest) = load_textpoke("");
    let setup = loaded
        .and_then(|()| load("textpoke_exerciser", ""))
        .and_then(|()| {
            Ok((
                exerciser::sites().map_err(|e| e.to_string())?,
                Kcore::open().map_err(|e| e.to_string())?,
            ))
        });
    match setup {
        Ok((sites, kcore)) => {
            let spec = "keys=6 sites=8 ftrace=16 flips=9 pokers=2";
            let run = scenario::Shape::parse(spec)
                .and_then(|shape| Ok((shape, scenario::run(spec, &sites, &kcore)?)));
            match run {
                Ok((shape, ev)) => {
                    narrate(spec, &ev, &sites);
                    let cpus = sys::online_cpus().map_or(0, |c| c.len());
                    let traps = scenario::TrapsWanted::for_spec(1, &shape, cpus);
                    let case = scenario::judge("demo_scenario", spec, &shape, traps, &ev, &sites);
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
    print_planned(ktap, selftest, "textpoke_demo", &plan::Plan::demo(), cases);
}

/// The loaded exerciser's sites, and `/proc/kcore` to read them through.
fn sites_and_kcore() -> Result<(Vec<Site>, Kcore), String> {
    let sites = exerciser::sites().map_err(|e| format!("sites: {e}"))?;
    let kcore = Kcore::open().map_err(|e| format!("/proc/kcore: {e}"))?;
    Ok((sites, kcore))
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
            let (r, selftest) = load_textpoke("");
            let case = Case::check("load_textpoke", r.is_ok(), format!("{r:?}"));
            print_document(ktap, selftest, "textpoke_agent", vec![case]);
        }
        // The bad-input group on a kernel the command line wrongly says has return thunks
        // (`textpoke.return_thunks=1` on the patched kernel): the group's check that the
        // runner and the exerciser agree must fail it, naming both.
        "return_thunks_claimed" => {
            let (r, selftest) = load_textpoke("");
            let case = r
                .and_then(|()| load("textpoke_exerciser", ""))
                .and_then(|()| sites_and_kcore())
                .map(|(sites, kcore)| badinput::cases(&sites, &kcore))
                .unwrap_or_else(|e| Case::fail("bad_input_setup", e));
            print_document(ktap, selftest, "textpoke_agent", vec![case]);
        }
        // arm64: a `BRK #0x008` that is no guard of textpoke's must be reported (the kernel
        // dies with "Oops - BRK"), not hidden; with the debug build's defect 10 it is
        // swallowed, and the agent lives on to say so.
        "foreign_brk" | "foreign_brk_swallowed" => {
            let swallow = what == "foreign_brk_swallowed";
            let (case, selftest) = foreign_brk(swallow);
            print_document(ktap, selftest, "textpoke_agent", vec![case]);
        }
        // arm64: with textpoke loaded and unloaded again, the kernel's trap hook is back at its
        // default, and a `BRK #0x008` must meet the stock kernel ("Oops - BRK"); on a kernel
        // with control-flow integrity a default of the wrong type dies as a CFI failure instead.
        "foreign_brk_unloaded" => {
            let (case, selftest) = foreign_brk_unloaded();
            print_document(ktap, selftest, "textpoke_agent", vec![case]);
        }
        // A module that leaks, unloaded before kmemleak scans (the KASAN kernel's): the unload
        // stress's kmemleak check must count its leaks as textpoke's (code that is gone) and
        // fail. Without the module's leaks it passes, and the boot with it.
        "kmemleak" => {
            faults::kmemleak_clear();
            let leaked = load("harness_leak", "").and_then(|()| {
                sys::unload_module("harness_leak")
                    .map_err(|e| format!("unloading harness_leak: {e}"))
            });
            let case = match leaked {
                Ok(()) => faults::kmemleak_case(),
                Err(e) => Case::fail("harness_leak", e),
            };
            if let Err(e) = ktap.print_suites(&[Case::group("textpoke_agent", vec![case])]) {
                log(&format!("KTAP output failed: {e}"));
            }
        }
        other => log(&format!("unknown check {other}")),
    }
}

/// The case of the harness boot that runs a `BRK #0x008` with textpoke unloaded (see
/// [`harness_check`]) and lived to tell, and the self-test suite of the textpoke it loaded.
fn foreign_brk_unloaded() -> (Case, Case) {
    let (r, selftest) = load_textpoke("");
    let setup = r.and_then(|()| {
        sys::unload_module("textpoke").map_err(|e| format!("unloading textpoke: {e}"))
    });
    let case = brk_survived(
        "foreign_brk_unloaded",
        setup,
        "executing a BRK #0x008 with textpoke unloaded",
        || load("harness_brk", "").map_err(|e| format!("harness_brk did not load ({e})")),
        "the CPU came back from BRK #0x008 with textpoke unloaded: the kernel hid it",
    );
    (case, selftest)
}

/// The case of a harness boot that runs a foreign `BRK #0x008` (see [`harness_check`]) and
/// lived to tell, and the self-test suite of the textpoke it loaded. (The runner also wants
/// the line the outsider prints after a swallowed BRK, which only the kernel can print.)
fn foreign_brk(swallow: bool) -> (Case, Case) {
    let module = if swallow {
        controls::DEBUG_TEXTPOKE
    } else {
        "textpoke"
    };
    let (r, selftest) = load_textpoke_from(module, "");
    let setup = r
        .and_then(|()| load("textpoke_outsider", ""))
        .and_then(|()| {
            if swallow {
                let mode = textpoke_core::defects::SWALLOW_FOREIGN.mode;
                sys::set_module_param("textpoke", "debug_protocol", &mode.to_string())
                    .map_err(|e| format!("setting debug_protocol={mode}: {e}"))?;
            }
            Ok(())
        });
    let case = brk_survived(
        "foreign_brk",
        setup,
        "executing a BRK #0x008 that is no guard of textpoke's",
        || {
            sys::write_file("/sys/kernel/debug/textpoke_outsider/control", b"brk")
                .map(|_| ())
                .map_err(|e| format!("the BRK command failed ({e})"))
        },
        "the CPU came back from a foreign BRK #0x008: it was swallowed",
    );
    (case, selftest)
}

/// The failing case of a harness boot that executes a `BRK #0x008` with `brk` once `setup`
/// succeeded (logging `what` first), and is meant to die in it. Only a `brk` that returned
/// counts as survived (`NAME_reported`, saying `survived`); a setup that failed
/// (`NAME_setup`) or a `brk` that failed (`NAME_command`) is a case of its own, so that a boot
/// in which no BRK ran can never read as one that lived through it.
fn brk_survived(
    name: &str,
    setup: Result<(), String>,
    what: &str,
    brk: impl FnOnce() -> Result<(), String>,
    survived: &str,
) -> Case {
    if let Err(e) = setup {
        return Case::fail(
            format!("{name}_setup"),
            format!("no BRK ran, the setup failed: {e}"),
        );
    }
    log(what);
    match brk() {
        Ok(()) => Case::fail(format!("{name}_reported"), survived),
        Err(e) => Case::fail(
            format!("{name}_command"),
            format!("{e}: the BRK may not have run"),
        ),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(stock_recorder::WAIT_SUBCOMMAND) {
        // perf's workload in the stock recorder's group: wait for the storm to end.
        let path = args.get(2).map_or("", String::as_str);
        return if stock_recorder::wait_for(path) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    if args.get(1).map(String::as_str) == Some(new_text::CYCLE_SUBCOMMAND) {
        // perf's workload: a module loaded, run and unloaded (scenarios/new_text.rs).
        return match new_text::cycle() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
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
        "stress" => stress::run(&mut ktap),
        "controls" => controls_only(&mut ktap),
        m if m.starts_with("check=") => harness_check(&mut ktap, &m["check=".len()..]),
        _ => test_suite(&mut ktap),
    }
    log("done, rebooting");
    sys::reboot()
}
