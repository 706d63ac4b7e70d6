//! CPUs that come and go while textpoke patches.
//!
//! A thread takes the last online CPU offline and brings it back, again and again, while a
//! scenario's batches commit under executors and then while the function tracer toggles and a
//! static key flips through textpoke. Every check of those runs applies unchanged: each record
//! replays onto kcore, every site ends as its last commit left it, no execution breaks the
//! ordering invariant (an executor whose CPU goes offline is moved elsewhere by the scheduler
//! and goes on). A module's batch holds the CPU-hotplug read lock for its whole commit, so an
//! offline or online waits for it; a kernel batch does not (its caller holds `text_mutex`, and
//! its syncs reach whichever CPUs are online), so a CPU can come online while the kernel's
//! guards stand and must trap on them correctly.
//!
//! An operation counts as overlapping a batch when textpoke's count of committed module batches
//! moved while it was under way: a batch ended during it. Kernel batches do not count: an
//! operation makes some of its own (keys the kernel flips as CPUs come and go).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use textpoke_agent::platform::exerciser::Site;
use textpoke_agent::platform::guest::{self, log};
use textpoke_agent::platform::kcore::Kcore;
use textpoke_agent::platform::perf::{Recorder, RecorderConfig, TextPokeRec};
use textpoke_agent::platform::sys;
use textpoke_agent::report::ktap::Case;

use crate::scenarios::{kernel_patching, scenario};

/// The scenario run while CPUs come and go: every kind of site, pokers (which stay off the CPU
/// that comes and goes: `avoid=` and `pokers=`, added by [`cases`]); an odd number of flips, so
/// that the text ends changed and its replay proves something, and few enough that the
/// executors' log holds every execution during a batch (the run repeats instead).
const SPEC: &str = "keys=6 sites=4 ftrace=8 flips=9";

/// How long the scenario is run again and again to reach [`MIN_OVERLAPPING`].
const SCENARIO_LIMIT: std::time::Duration = std::time::Duration::from_secs(420);

/// Hotplug operations (an offline or an online) that must overlap a batch in a boot.
pub const MIN_OVERLAPPING: usize = 200;

/// What the hotplug thread did.
#[derive(Default, Debug)]
struct Tally {
    /// Offline and online operations that succeeded.
    ops: usize,
    /// Of those, the ones during which a batch ended.
    overlapping: usize,
    /// The first failure, if any.
    error: Option<String>,
}

/// textpoke's module batches committed so far. Not the kernel's: an operation makes kernel
/// batches of its own (keys the kernel flips as CPUs come and go), which would count every
/// operation as overlapping one.
fn batches() -> u64 {
    scenario::engine_stats()
        .ok()
        .and_then(|s| s.get("batches")?.parse::<u64>().ok())
        .unwrap_or(0)
}

/// Takes CPU `cpu` offline and online until told to stop.
struct Hotplugger {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
    tally: Arc<Mutex<Tally>>,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.ops += other.ops;
        self.overlapping += other.overlapping;
        if self.error.is_none() {
            self.error = other.error;
        }
    }
}

impl Hotplugger {
    fn start(cpu: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Mutex::new(Tally::default()));
        let (s, t) = (stop.clone(), tally.clone());
        let thread = std::thread::spawn(move || {
            let path = format!("/sys/devices/system/cpu/cpu{cpu}/online");
            let mut online = true;
            while !s.load(Ordering::Relaxed) {
                let before = batches();
                let want = if online { "0" } else { "1" };
                let done = sys::write_file(&path, want.as_bytes());
                let after = batches();
                let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
                match done {
                    Ok(_) => {
                        online = !online;
                        t.ops += 1;
                        t.overlapping += usize::from(after != before);
                    }
                    Err(e) => {
                        t.error
                            .get_or_insert(format!("writing {want} to {path}: {e}"));
                        break;
                    }
                }
            }
            if !online {
                if let Err(e) = sys::write_file(&path, b"1") {
                    let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
                    t.error
                        .get_or_insert(format!("bringing cpu{cpu} back: {e}"));
                }
            }
        });
        Self {
            stop,
            thread,
            tally,
        }
    }

    /// Operations so far during which a batch ended.
    fn overlapping(&self) -> usize {
        self.tally
            .lock()
            .map(|t| t.overlapping)
            .unwrap_or_else(|e| e.into_inner().overlapping)
    }

    fn stop(self) -> Tally {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        Arc::try_unwrap(self.tally)
            .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
            .unwrap_or_default()
    }
}

/// The deadline scheduler's fair server of CPU `cpu`, off for as long as this lives.
///
/// The guest kernel's bandwidth accounting of the fair server underflows when that CPU goes
/// offline and online again and again (a `WARN` in `inactive_task_timer()`,
/// kernel/sched/deadline.c, seen on arm64 with no change of textpoke's under way): the server's
/// inactive timer, armed as the CPU dies, fires after its runqueue's bandwidth was reset. That
/// is the scheduler's, not what this group tests, so the server is off on that CPU meanwhile
/// (runtime 0 through `/sys/kernel/debug/sched/fair_server`, where `dl_server_stop()` and
/// `dl_server_start()` do nothing) and its runtime is put back after.
///
/// The write itself must find the server running: 6.12's `sched_fair_server_write()` calls
/// `dl_server_stop()` whether or not the server is active (mainline tests
/// `dl_server_active()` first), and stopping a server that already stopped takes its bandwidth
/// off the runqueue a second time (a `WARN` in `__sub_running_bw()`, seen on arm64 at the write).
/// A task of the fair class running on that CPU keeps its server started, so the write is made
/// while one spins there.
struct FairServerOff {
    path: String,
    runtime: String,
}

impl FairServerOff {
    /// Turns it off; `Ok(None)` if this kernel has no fair server to turn off.
    fn new(cpu: u32) -> Result<Option<Self>, String> {
        let path = format!("/sys/kernel/debug/sched/fair_server/cpu{cpu}/runtime");
        let Ok(runtime) = sys::read_text(&path) else {
            return Ok(None);
        };
        on_busy_cpu(cpu, || sys::write_file(&path, b"0"))
            .map_err(|e| format!("writing 0 to {path}: {e}"))?;
        Ok(Some(Self {
            path,
            runtime: runtime.trim().to_owned(),
        }))
    }

    /// Puts its runtime back (the CPU must be online).
    fn restore(self) -> Result<(), String> {
        sys::write_file(&self.path, self.runtime.as_bytes())
            .map(drop)
            .map_err(|e| format!("writing {} back to {}: {e}", self.runtime, self.path))
    }
}

/// Runs `f` while a thread of the fair class spins on CPU `cpu` (see [`FairServerOff`]); not
/// at all if no thread could be pinned there.
fn on_busy_cpu<T>(cpu: u32, f: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
    let stop = Arc::new(AtomicBool::new(false));
    let (pinned_tx, pinned) = std::sync::mpsc::channel();
    let spinner = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            // Returns once the thread runs on `cpu`: the kernel migrates the caller first.
            let on = sys::set_affinity(&[cpu]);
            let spin = on.is_ok();
            let _ = pinned_tx.send(on);
            while spin && !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    let on = pinned
        .recv()
        .unwrap_or_else(|_| Err(std::io::Error::other("the spinning thread died")))
        .map_err(|e| std::io::Error::other(format!("pinning a thread to cpu{cpu}: {e}")));
    let out = on.and_then(|()| f());
    stop.store(true, Ordering::Relaxed);
    let _ = spinner.join();
    out
}

/// A CPU's records after it went offline and came back (patch 0014): a recorder with an event
/// per CPU is opened, `cpu` goes offline and comes back, and the static-key sample's keys are
/// flipped by a thread on `cpu`, then flipped back by one on `stayed`'s first CPU, which never
/// left. Each flip changes the same sites, textpoke recording each change on the CPU that makes
/// it, so the recorder must hold as many records of each in the sample's text, those of the
/// first in `cpu`'s buffer (the kernel flips keys of its own as CPUs come and go, recorded
/// too). 6.12 left the event of a CPU that had been offline off for good: the records
/// made there went nowhere, with the recorder still counted as listening.
fn records_from_returned_cpu(cpu: u32, stayed: &[u32]) -> Case {
    const NAME: &str = "records_from_a_cpu_that_came_back";
    const KEYS_CONTROL: &str = "/sys/kernel/debug/textpoke_keys/control";
    let online = format!("/sys/devices/system/cpu/cpu{cpu}/online");
    let run = || -> Result<String, String> {
        let &other = stayed.first().ok_or("no CPU that stays online")?;
        let (lo, len) = kernel_patching::module_text("textpoke_keys")?;
        let in_sample = |p: &TextPokeRec| p.addr >= lo && p.addr < lo + len as u64;
        let mut recorder = Recorder::open(&RecorderConfig { data_pages: 64 })
            .map_err(|e| format!("opening a recorder on every CPU: {e}"))?;
        sys::write_file(&online, b"0").map_err(|e| format!("taking cpu{cpu} offline: {e}"))?;
        sys::write_file(&online, b"1").map_err(|e| format!("bringing cpu{cpu} back: {e}"))?;
        let mut flip_on = |on: u32| -> Result<Vec<TextPokeRec>, String> {
            sys::set_affinity(&[on]).map_err(|e| format!("moving to cpu{on}: {e}"))?;
            let flipped = sys::write_file(KEYS_CONTROL, b"flip");
            sys::set_affinity(stayed).map_err(|e| format!("leaving cpu{on}: {e}"))?;
            flipped.map_err(|e| format!("flipping the keys on cpu{on}: {e}"))?;
            let drain = recorder.drain();
            if !drain.is_clean() {
                return Err(format!("the recorder lost records or failed: {drain:?}"));
            }
            Ok(drain.pokes.into_iter().filter(in_sample).collect())
        };
        let back = flip_on(cpu)?;
        let stay = flip_on(other)?;
        let in_its_buffer = back.iter().filter(|p| p.cpu_of_buffer == cpu).count();
        let line = format!(
            "{} records of the flip on cpu{cpu} after it came back ({in_its_buffer} in its \
             buffer), {} of the flip back on cpu{other}",
            back.len(),
            stay.len()
        );
        if !stay.is_empty() && back.len() == stay.len() && in_its_buffer == back.len() {
            Ok(line)
        } else {
            Err(line)
        }
    };
    let loaded = guest::load("textpoke_keys", "");
    let outcome = loaded.and_then(|()| run());
    let unloaded = sys::unload_module("textpoke_keys");
    match (outcome, unloaded) {
        (Ok(line), Ok(_)) => Case::pass(NAME).with_log(line),
        (Err(e), _) => Case::fail(NAME, e),
        (Ok(_), Err(e)) => Case::fail(NAME, format!("unloading textpoke_keys: {e}")),
    }
}

/// Every hotplug case, as one group.
pub fn cases(sites: &[Site], kcore: &Kcore) -> Case {
    const NAME: &str = "cpu_hotplug";
    let cpus = match sys::online_cpus() {
        Ok(c) => c,
        Err(e) => return Case::fail(NAME, format!("online CPUs: {e}")),
    };
    let Some(&cpu) = cpus.iter().filter(|&&c| c != 0).max() else {
        return Case::fail(NAME, "no CPU but CPU 0 to take offline");
    };
    log(&format!(
        "hotplug: cpu{cpu} goes offline and online meanwhile"
    ));
    // Every patcher the group runs stays off that CPU: the agent (whose writes make the
    // kernel's changes) and the exerciser's pokers. perf's per-CPU events stop for good when
    // their CPU goes offline, so a record emitted there afterwards would reach no recorder, as
    // it would reach no `perf record`. The executors run there too, and meet the guards.
    let others: Vec<u32> = cpus.iter().copied().filter(|&c| c != cpu).collect();
    if let Err(e) = sys::set_affinity(&others) {
        return Case::fail(NAME, format!("keeping the agent off cpu{cpu}: {e}"));
    }
    // Where the scheduler refuses (it may, for want of bandwidth elsewhere), the group runs with
    // the server on, as a kernel that lacks it would.
    let fair = FairServerOff::new(cpu).unwrap_or_else(|e| {
        log(&format!("hotplug: the fair server stays on: {e}"));
        None
    });
    let start = Instant::now();
    let plug = Hotplugger::start(cpu);
    // Two pokers, whose batches must overlap (the scenario's `batches_in_flight_together`), but
    // at two CPUs one: both would share the CPU that stays, and overlap only when the scheduler
    // happens to preempt one mid-batch.
    let pokers = if cpus.len() > 2 { 2 } else { 1 };
    let spec = format!("{SPEC} pokers={pokers} avoid={cpu}");
    // Executions that trap: one per guarded kind, but at two CPUs none can be asked for. The
    // CPU that stays runs the pokers, and once the other has gone offline every executor too
    // (the scheduler moves a bound thread off a dying CPU for good): an executor there never
    // runs while a poker's guard stands.
    let traps = if cpus.len() > 2 {
        scenario::TrapsWanted::EachKind(1)
    } else {
        log("hotplug: two CPUs: no trapped execution is asked of the scenario's kinds");
        scenario::TrapsWanted::Nothing
    };
    // The scenario again and again until enough operations overlapped a batch (or its time is
    // up): every run is judged in full, and each check is one case for all of them, so that the
    // boot's plan does not depend on how many runs that took.
    let shape = scenario::Shape::parse(&spec);
    let mut runs = Vec::new();
    loop {
        let name = format!("run_{}", runs.len());
        let shape = match &shape {
            Ok(shape) => shape,
            Err(e) => {
                runs.push(Case::fail(name, e.clone()));
                break;
            }
        };
        // CPUs go offline and online under these runs.
        runs.push(scenario::case(
            &name,
            &spec,
            shape,
            traps,
            sites,
            kcore,
            scenario::Cpus::Changing,
        ));
        if plug.overlapping() >= MIN_OVERLAPPING || start.elapsed() > SCENARIO_LIMIT {
            break;
        }
    }
    let mut children = vec![Case::merge_runs("hotplug_scenario", runs)];
    let t = std::cell::RefCell::new(plug.stop());
    // The kernel's transitions with the CPU coming and going during each change only: their
    // text is read before and after with every CPU online, so that the keys the kernel flips
    // as CPUs come and go (x86's IPI shorthand) stand as they did.
    let around = |f: &dyn Fn() -> Result<(), String>| {
        let plug = Hotplugger::start(cpu);
        let r = f();
        t.borrow_mut().add(plug.stop());
        r
    };
    children.extend(kernel_patching::hotplug_transitions(kcore, &around));
    children.push(records_from_returned_cpu(cpu, &others));
    let t = t.into_inner();
    if let Some(Err(e)) = fair.map(FairServerOff::restore) {
        children.push(Case::fail("hotplug_fair_server_restored", e));
    }
    if let Err(e) = sys::set_affinity(&cpus) {
        children.push(Case::fail(
            "hotplug_affinity_restored",
            format!("letting the agent back on every CPU: {e}"),
        ));
    }
    let back = sys::online_cpus().map(|c| c.len()).unwrap_or(0);
    let line = format!(
        "cpu{cpu} taken offline or brought online {} times in {:.0} s, {} of them while a \
         batch ended",
        t.ops,
        start.elapsed().as_secs_f64(),
        t.overlapping
    );
    log(&format!("hotplug: {line}"));
    children.push(match t.error {
        Some(e) => Case::fail("hotplug_operations", e),
        None => Case::check(
            "hotplug_operations",
            t.overlapping >= MIN_OVERLAPPING && back == cpus.len(),
            format!(
                "{line}: fewer than {MIN_OVERLAPPING} overlapping a batch, or {back} of {} CPUs \
                 online at the end",
                cpus.len()
            ),
        )
        .with_log(line),
    });
    Case::group(NAME, children)
}
