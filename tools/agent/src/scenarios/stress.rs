//! `textpoke.mode=stress`: load and unload textpoke and the exerciser [`CYCLES`] times, and in
//! every cycle try to unload both while a scenario's batches and executors are live.
//!
//! A cycle loads textpoke (its self-test runs at every load) and the exerciser (with a few sites
//! per pool, [`EXERCISER_PARAMS`]), opens a listener in every other cycle (so that half the
//! cycles' batches are guarded and recorded, half quiet), starts a small scenario in a thread (the exerciser's `run`
//! command blocks until it is done) and, while it runs, keeps calling `delete_module` on the
//! exerciser and on textpoke: each call must be refused with `EAGAIN` (the exerciser is pinned by
//! its open control file and by every batch holding its sites; textpoke by the exerciser's use of
//! it and by every batch). An attempt counts as made with a batch live when textpoke's reference
//! count is above its idle value (the one reference the exerciser's use of it takes; batches
//! take the others, and nothing holds textpoke's files open in this mode) both just before and
//! just after it; the executors run from before the first batch to after the last, so they are
//! live then too. A cycle whose scenario ended before such an attempt runs it
//! again, up to [`RUNS_PER_CYCLE`] times. When the scenario is over both modules must unload.
//!
//! The last attempt of a scenario can race with its end: the `run` command may return between
//! the reference-count check and `delete_module`, and then the unload rightly succeeds. Such a
//! late unload is counted, not failed, unless a batch was still live after it (textpoke's count
//! above its idle value): that would be a batch outliving the module whose text it changes.
//!
//! `textpoke.stress_cycles=N` on the kernel command line runs N cycles instead of [`CYCLES`].
//!
//! After the cycles, allocation failures are injected into every API call, commit and kernel
//! change, and kmemleak scans for what the whole boot left behind (`scenarios/faults.rs`).
//!
//! A crash ends the boot before the document is printed, and the runner fails the boot on the
//! splat or on the missing suite: a printed document means no cycle crashed.

use crate::scenarios::faults;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use textpoke_agent::platform::exerciser;
use textpoke_agent::platform::guest::{load, log};
use textpoke_agent::platform::kcore::Kcore;
use textpoke_agent::platform::sys;
use textpoke_agent::report::document::{load_textpoke, print_document};
use textpoke_agent::report::ktap::Case;

/// Load and unload cycles, unless the command line says otherwise.
pub const CYCLES: usize = 100;
/// The scenario each cycle runs: every kind of site, two pokers so that batches overlap, and
/// small enough that a cycle takes a second or two under TCG with KASAN.
pub const SPEC: &str = "keys=3 sites=4 ftrace=4 flips=3 pokers=2";
/// The exerciser's parameters: [`SPEC`] needs 4 sites of each pool, and registering all ~5000
/// at each load would make the loads, not the unloads, what the cycles measure.
const EXERCISER_PARAMS: &str = "pool_sites=16";
/// Scenarios a cycle runs at most to make one unload attempt with a batch live.
const RUNS_PER_CYCLE: usize = 5;
/// Unload attempts per scenario, at most; each is two `delete_module` calls.
const ATTEMPTS_PER_RUN: usize = 50;
/// Once the scenario is over: how often, and how far apart, a refused unload is retried (the
/// last reference may be dropped a moment after the `run` command returned).
const IDLE_RETRIES: usize = 100;
const IDLE_RETRY_DELAY: Duration = Duration::from_millis(20);

/// What one `delete_module` call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unload {
    /// Unloaded.
    Done,
    /// Refused with this errno.
    Refused(i32),
}

impl Unload {
    fn of(name: &str) -> Self {
        match sys::unload_module(name) {
            Ok(()) => Self::Done,
            Err(e) => Self::Refused(e.raw_os_error().unwrap_or(-1)),
        }
    }
}

/// One unload attempt made while a scenario ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BusyAttempt {
    /// The exerciser's unload.
    pub exerciser: Unload,
    /// textpoke's unload.
    pub textpoke: Unload,
    /// Whether textpoke's reference count was above its idle value (a batch live) before and
    /// after the attempt.
    pub batch_live: bool,
}

/// Everything the cycles did, for the verdicts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Cycles planned.
    pub planned: usize,
    /// Cycles that ran to the end.
    pub cycles: usize,
    /// Why the cycles stopped early, if they did.
    pub stopped: Option<String>,
    /// Cycles whose load-time self-test did not pass.
    pub selftest_failures: Vec<usize>,
    /// Scenarios run.
    pub runs: usize,
    /// Scenarios that failed: cycle and errno.
    pub run_failures: Vec<(usize, i32)>,
    /// Unload attempts while a scenario ran.
    pub attempts: usize,
    /// Of those, the ones with a batch live before and after.
    pub attempts_live: usize,
    /// `delete_module` calls refused with `EAGAIN` while a scenario ran.
    pub refusals: usize,
    /// Unloads that raced with the end of the scenario and succeeded, with no batch left.
    pub late: usize,
    /// Calls while a scenario ran that did anything else (another errno, or an unload with a
    /// batch still live after it): cycle, module, outcome.
    pub wrong: Vec<(usize, &'static str, Unload)>,
    /// Cycles in which no attempt was made with a batch live.
    pub unobserved: Vec<usize>,
    /// Modules unloaded once idle.
    pub unloads: usize,
    /// Refusals of those before they succeeded.
    pub idle_retries: usize,
    /// Unloads that failed once idle: cycle, module, outcome.
    pub unload_failures: Vec<(usize, &'static str, Unload)>,
}

impl Tally {
    /// Counts one attempt made while cycle `cycle`'s scenario ran.
    pub fn busy(&mut self, cycle: usize, a: BusyAttempt) {
        self.attempts += 1;
        self.attempts_live += usize::from(a.batch_live);
        for (module, outcome) in [
            ("textpoke_exerciser", a.exerciser),
            ("textpoke", a.textpoke),
        ] {
            match outcome {
                Unload::Refused(libc::EAGAIN) => self.refusals += 1,
                Unload::Done if !a.batch_live => self.late += 1,
                _ => {
                    log(&format!(
                        "stress: cycle {cycle}: unloading {module} while busy: {outcome:?} (batch live after: {})",
                        a.batch_live
                    ));
                    self.wrong.push((cycle, module, outcome));
                }
            }
        }
    }

    /// The stress suite's cases.
    pub fn cases(&self, seconds: f64) -> Vec<Case> {
        let first = |v: &[(usize, &'static str, Unload)]| {
            v.iter()
                .take(5)
                .map(|(c, m, u)| format!("cycle {c}: {m}: {u:?}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        vec![
            Case::check(
                "cycles_completed",
                self.cycles == self.planned && self.planned > 0 && self.stopped.is_none(),
                format!(
                    "{} of {} cycles: {}",
                    self.cycles,
                    self.planned,
                    self.stopped.as_deref().unwrap_or("stopped")
                ),
            )
            .with_log(format!(
                "{} load/unload cycles of textpoke and the exerciser in {seconds:.1} s, no crash",
                self.cycles
            )),
            Case::check(
                "selftest_passed_at_every_load",
                self.selftest_failures.is_empty(),
                format!(
                    "the load-time self-test failed in cycles {:?}",
                    self.selftest_failures
                ),
            ),
            Case::check(
                "scenarios_ran",
                self.run_failures.is_empty() && self.runs >= self.cycles,
                format!(
                    "{} of {} scenarios failed (cycle, errno): {:?}",
                    self.run_failures.len(),
                    self.runs,
                    self.run_failures.iter().take(5).collect::<Vec<_>>()
                ),
            )
            .with_log(format!("{} scenarios `{SPEC}`", self.runs)),
            Case::check(
                "unload_refused_while_busy",
                self.wrong.is_empty() && self.attempts > 0,
                format!(
                    "{} of {} delete_module calls while a scenario ran were not refused with EAGAIN: {}",
                    self.wrong.len(),
                    2 * self.attempts,
                    first(&self.wrong)
                ),
            )
            .with_log(format!(
                "{} unload attempts of both modules while a scenario ran: {} refusals with EAGAIN, {} late unloads as it ended",
                self.attempts, self.refusals, self.late
            )),
            Case::check(
                "batches_live_at_unload_attempts",
                self.unobserved.is_empty() && self.cycles > 0,
                format!(
                    "no attempt with a batch live in cycles {:?}",
                    self.unobserved
                ),
            )
            .with_log(format!(
                "{} of the attempts had a batch live before and after (textpoke's refcount above idle)",
                self.attempts_live
            )),
            Case::check(
                "unloaded_when_idle",
                self.unload_failures.is_empty() && self.unloads + self.late == 2 * self.cycles,
                format!(
                    "{} unloads failed once idle: {}",
                    self.unload_failures.len(),
                    first(&self.unload_failures)
                ),
            )
            .with_log(format!(
                "{} unloads once idle, after {} EAGAIN retries",
                self.unloads, self.idle_retries
            )),
        ]
    }
}

/// The reference count of module `name` (`/sys/module/NAME/refcnt`), or `None` if unreadable.
fn refcount(name: &str) -> Option<u64> {
    sys::read_text(format!("/sys/module/{name}/refcnt"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Runs the scenario in a thread and tries to unload both modules while it runs; returns
/// whether an attempt was made with a batch live, that is with textpoke's reference count above
/// `idle`.
fn busy_run(cycle: usize, idle: u64, t: &mut Tally) -> bool {
    let done = Arc::new(AtomicBool::new(false));
    let worker = {
        let done = done.clone();
        std::thread::spawn(move || {
            let r = exerciser::command(&format!("run {SPEC}"));
            done.store(true, Ordering::Release);
            r
        })
    };
    let mut live = false;
    let mut attempts = 0;
    while !done.load(Ordering::Acquire) && attempts < ATTEMPTS_PER_RUN {
        if refcount("textpoke").unwrap_or(0) <= idle {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let exerciser = Unload::of("textpoke_exerciser");
        let textpoke = Unload::of("textpoke");
        // With textpoke unloaded there is no count to read, and no batch either.
        let batch_live = refcount("textpoke").unwrap_or(0) > idle;
        t.busy(
            cycle,
            BusyAttempt {
                exerciser,
                textpoke,
                batch_live,
            },
        );
        live |= batch_live;
        attempts += 1;
        if exerciser == Unload::Done || textpoke == Unload::Done {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let r = worker.join().unwrap_or(Err(-1));
    t.runs += 1;
    if let Err(errno) = r {
        t.run_failures.push((cycle, errno));
    }
    live
}

/// Whether module `name` is loaded.
fn is_loaded(name: &str) -> bool {
    std::path::Path::new(&format!("/sys/module/{name}")).exists()
}

/// Unloads `name` once nothing uses it, retrying a refusal a few times; nothing to do if a late
/// attempt unloaded it already.
fn unload_idle(cycle: usize, name: &'static str, t: &mut Tally, late: bool) {
    if late && !is_loaded(name) {
        return;
    }
    for _ in 0..IDLE_RETRIES {
        match Unload::of(name) {
            Unload::Done => {
                t.unloads += 1;
                return;
            }
            Unload::Refused(libc::EAGAIN) => {
                t.idle_retries += 1;
                std::thread::sleep(IDLE_RETRY_DELAY);
            }
            other => {
                t.unload_failures.push((cycle, name, other));
                return;
            }
        }
    }
    t.unload_failures
        .push((cycle, name, Unload::Refused(libc::EAGAIN)));
}

/// One cycle; `Err` if the next one cannot start.
fn cycle(i: usize, t: &mut Tally, first_selftest: &mut Option<Case>) -> Result<(), String> {
    let (loaded, selftest) = load_textpoke("");
    if !selftest.passed() {
        t.selftest_failures.push(i);
    }
    first_selftest.get_or_insert(selftest);
    loaded.map_err(|e| format!("cycle {i}: {e}"))?;
    load("textpoke_exerciser", EXERCISER_PARAMS).map_err(|e| format!("cycle {i}: {e}"))?;
    // The exerciser's use of textpoke holds one reference; nothing else should yet.
    let idle = refcount("textpoke").ok_or(format!("cycle {i}: textpoke has no refcnt"))?;
    let late_before = t.late;
    let mut live = false;
    // Every other cycle with a listener: its batches guarded and recorded, the others quiet.
    let listening = (i % 2 == 1)
        .then(textpoke_agent::platform::perf::Listener::open)
        .transpose()
        .map_err(|e| format!("cycle {i}: opening a listener: {e}"))?;
    for _ in 0..RUNS_PER_CYCLE {
        live |= busy_run(i, idle, t);
        if live || !is_loaded("textpoke_exerciser") {
            break;
        }
    }
    drop(listening);
    if !live {
        t.unobserved.push(i);
    }
    let late = t.late > late_before;
    unload_idle(i, "textpoke_exerciser", t, late);
    unload_idle(i, "textpoke", t, late);
    // A module still loaded would make the next load fail with EEXIST: stop here instead.
    for m in ["textpoke_exerciser", "textpoke"] {
        if is_loaded(m) {
            return Err(format!("cycle {i}: {m} is still loaded"));
        }
    }
    t.cycles += 1;
    Ok(())
}

/// The stress mode: the cycles, then one KTAP document with the first load's self-test and
/// the `textpoke_stress` suite.
pub fn run(ktap: &mut textpoke_agent::report::ktap::Ktap) {
    let start = Instant::now();
    let planned = sys::cmdline_param("textpoke.stress_cycles")
        .and_then(|n| n.parse().ok())
        .unwrap_or(CYCLES);
    let mut t = Tally {
        planned,
        ..Tally::default()
    };
    let mut selftest = None;
    faults::kmemleak_clear();
    log(&format!("stress: {planned} cycles, scenario `{SPEC}`"));
    for i in 0..planned {
        if let Err(e) = cycle(i, &mut t, &mut selftest) {
            log(&format!("stress: stopping: {e}"));
            t.stopped = Some(e);
            break;
        }
        if (i + 1) % 10 == 0 {
            log(&format!(
                "stress: {} cycles in {:.1} s: {} attempts while busy ({} with a batch live), {} refusals, {} late unloads, {} wrong",
                i + 1,
                start.elapsed().as_secs_f64(),
                t.attempts,
                t.attempts_live,
                t.refusals,
                t.late,
                t.wrong.len()
            ));
        }
    }
    let selftest = selftest.unwrap_or_else(|| Case::fail("textpoke_selftest", "never loaded"));
    let mut cases = t.cases(start.elapsed().as_secs_f64());
    // Allocation failures injected, then kmemleak's verdict on everything since the start.
    let started = Instant::now();
    match Kcore::open() {
        Ok(kcore) => cases.extend(faults::cases(&kcore)),
        Err(e) => cases.push(Case::fail("fault_injection", format!("/proc/kcore: {e}"))),
    }
    log(&format!(
        "stress: fault injection in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    cases.push(faults::kmemleak_case());
    print_document(ktap, selftest, "textpoke_stress", cases);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(ex: Unload, tp: Unload, live: bool) -> BusyAttempt {
        BusyAttempt {
            exerciser: ex,
            textpoke: tp,
            batch_live: live,
        }
    }

    fn passed(t: &Tally) -> Vec<(String, bool)> {
        t.cases(1.0)
            .into_iter()
            .map(|c| (c.name.clone(), c.passed()))
            .collect()
    }

    /// The tally of `n` cycles that each ran a scenario and unloaded both modules.
    fn ran(n: usize) -> Tally {
        Tally {
            planned: n,
            cycles: n,
            runs: n,
            unloads: 2 * n,
            ..Tally::default()
        }
    }

    #[test]
    fn a_clean_run_passes_every_case() {
        let mut t = ran(CYCLES);
        for c in 0..CYCLES {
            t.busy(
                c,
                attempt(
                    Unload::Refused(libc::EAGAIN),
                    Unload::Refused(libc::EAGAIN),
                    true,
                ),
            );
        }
        assert_eq!(t.refusals, 2 * CYCLES);
        assert!(passed(&t).iter().all(|(_, ok)| *ok), "{:?}", passed(&t));
    }

    #[test]
    fn a_late_unload_as_the_scenario_ends_passes() {
        let mut t = Tally {
            unloads: 0,
            ..ran(1)
        };
        t.busy(
            0,
            attempt(
                Unload::Refused(libc::EAGAIN),
                Unload::Refused(libc::EAGAIN),
                true,
            ),
        );
        // The scenario ended between the check and the calls: both modules went, no batch left.
        t.busy(0, attempt(Unload::Done, Unload::Done, false));
        assert_eq!((t.refusals, t.late, t.wrong.len()), (2, 2, 0));
        assert!(passed(&t).iter().all(|(_, ok)| *ok), "{:?}", passed(&t));
    }

    #[test]
    fn an_unload_under_a_batch_fails() {
        let mut t = ran(CYCLES);
        t.busy(
            7,
            attempt(Unload::Done, Unload::Refused(libc::EAGAIN), true),
        );
        t.busy(
            8,
            attempt(
                Unload::Refused(libc::EAGAIN),
                Unload::Refused(libc::EBUSY),
                false,
            ),
        );
        assert_eq!(t.refusals, 2);
        assert_eq!(t.attempts_live, 1);
        let failed: Vec<String> = passed(&t)
            .into_iter()
            .filter(|(_, ok)| !ok)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(failed, ["unload_refused_while_busy"]);
    }

    #[test]
    fn missing_cycles_unobserved_batches_and_stuck_modules_fail() {
        let t = Tally {
            planned: CYCLES,
            cycles: 3,
            stopped: Some("cycle 3: loading: EEXIST".into()),
            runs: 3,
            attempts: 3,
            refusals: 6,
            unobserved: vec![1],
            unloads: 5,
            unload_failures: vec![(2, "textpoke", Unload::Refused(libc::EAGAIN))],
            ..Tally::default()
        };
        let failed: Vec<String> = passed(&t)
            .into_iter()
            .filter(|(_, ok)| !ok)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            failed,
            [
                "cycles_completed",
                "batches_live_at_unload_attempts",
                "unloaded_when_idle"
            ]
        );
    }
}
