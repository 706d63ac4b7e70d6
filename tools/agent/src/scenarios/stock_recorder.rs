//! The stock recorder in a storm: Debian's `perf record --kcore -a`, started again and again
//! while the function tracer is turned on and off for every function it can trace, back to
//! back; each copy of the kernel text perf made, with perf's records replayed onto it, against
//! the text (patch 0011's point of synchronization; docs/protocol.md "When nobody listens").
//!
//! perf opens its `text_poke` event enabled, maps the buffers, then copies `/proc/kcore` into
//! `kcore_dir/` (`__cmd_record()` in tools/perf/builtin-record.c), and perf delivers nothing to
//! an event that has no buffer yet. A guarded batch that found the event counted and emitted its
//! records before the buffer was there, with its writes made after the copy read the site,
//! leaves a guard or the old instruction in the copy that no record completes. An update of
//! every traceable function spans, from its first record to its last write, the mapping and the
//! start of the copy.
//!
//! Each of [`STARTS`] starts: the storm runs; perf starts some time into it; the storm stops
//! before its next toggle once perf's `kcore_dir` exists (the copy has begun), so that after the
//! copy began only the batch under way then changes the text, and a guard it left in the copy
//! is completed by its own record or by none; the workload (this agent, waiting for the storm to
//! end) then lets perf finish. The copy with perf's records replayed onto it (as
//! [`listener::replay`] does, any record possibly in the copy already) must equal the kernel
//! text; or, failing that, the copy with the records timed from the moment the recorder's last
//! event had its buffer: a recorder with one event per CPU receives part of the records of a
//! batch that ran while its events got their buffers one by one, and that batch is done before
//! the copy (docs/protocol.md, "When nobody listens"). How many starts needed that is logged.
//! Nobody else listens meanwhile: the suite's own listener is closed for the group.
//!
//! perf takes few steps between its open and its mapping, so a batch seldom falls between them
//! (`perf_record_mid_storm` passes with the listener synchronized at its open too, as the series
//! first did). `mapped_late_mid_storm` draws that gap out to [`GAP`] with this agent's own
//! recorder, which takes perf's steps in perf's order (events opened enabled, buffers mapped
//! later, then the copy; `Recorder::open_monotonic_mapped_late`), over the same storm, each of its
//! copies judged the same way; it stops the storm as it starts copying. With the listener
//! synchronized where it can first receive records, the mapping waits for the update under way
//! and the copy holds its writes; synchronized only at the open, the records that update emitted
//! in the gap reach nobody, and the copy holds its guards.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use textpoke_agent::platform::guest::{is_x86, log};
use textpoke_agent::platform::kcore::Kcore;
use textpoke_agent::platform::perf::{Listener, Recorder, RecorderConfig, TextPokeRec};
use textpoke_agent::platform::realperf::Perf;
use textpoke_agent::platform::sys;
use textpoke_agent::report::ktap::Case;

use crate::scenarios::kernel_patching::{self, kernel_text, TRACING};
use crate::scenarios::listener;

/// Starts of each recorder.
pub const STARTS: usize = 8;

/// How long the recorder of `mapped_late_mid_storm` waits between opening its events and mapping
/// their buffers: most of one update of every function.
const GAP: Duration = Duration::from_millis(500);

/// perf's output directory (perf renames a non-empty one to `DIR.old`).
const DIR: &str = "/tmp/perf-storm";

/// Created when the storm has stopped: the workload's cue to end.
const STOPPED: &str = "/tmp/perf-storm-stopped";

/// The subcommand of this agent that perf runs as its workload: it waits until its argument
/// exists.
pub const WAIT_SUBCOMMAND: &str = "wait-for";

/// The workload: waits until `path` exists, for at most ten minutes.
pub fn wait_for(path: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(600);
    while Instant::now() < deadline {
        if Path::new(path).exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// What one start saw.
#[derive(Debug, Default)]
struct Start {
    /// The tracer's toggles the storm made.
    toggles: usize,
    /// Records of the kernel text perf wrote.
    records: usize,
    /// Of them, replayed onto the copy; the rest were in it already.
    replayed: usize,
    /// Sites of the copy that held a guard.
    guards: usize,
    /// Whether the records before the recorder's last buffer were a part of a batch's.
    partial: bool,
}

/// Turns the function tracer on and off, each toggle an update of every traceable function,
/// until `stop` or, with `perf`, until perf has begun its copy (`kcore_dir` exists); then
/// creates [`STOPPED`]. Returns the toggles made.
fn storm(stop: Arc<AtomicBool>, perf: bool) -> std::thread::JoinHandle<Result<usize, String>> {
    std::thread::spawn(move || {
        let copying = Path::new(DIR).join("kcore_dir");
        let mut on = false;
        let mut n = 0;
        let result = loop {
            if stop.load(Ordering::Acquire) || (perf && copying.exists()) {
                break Ok(n);
            }
            on = !on;
            if let Err(e) = kernel_patching::tracer(if on { "function" } else { "nop" }) {
                break Err(e);
            }
            n += 1;
        };
        let created = std::fs::write(STOPPED, b"").map_err(|e| format!("{STOPPED}: {e}"));
        result.and_then(|n| created.map(|()| n))
    })
}

/// When perf's `kcore_dir` first exists (`CLOCK_MONOTONIC`), polled every millisecond until
/// `stop`: perf makes it once every buffer is mapped, right before its copy.
fn kcore_dir_seen(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Option<u64>> {
    std::thread::spawn(move || {
        let copying = Path::new(DIR).join("kcore_dir");
        while !stop.load(Ordering::Acquire) {
            if copying.exists() {
                return Some(sys::monotonic_ns());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    })
}

/// Judges a recorder's `copy` of the kernel text `(base, len)` and the `pokes` it received,
/// against the text now: the copy was read before `copied_by`, every event of the recorder had
/// its buffer by `arrived`, and the storm made `toggles` toggles.
///
/// With every record, or else with those timed from `arrived` on
/// ([`listener::replay_from_arrival`]): a recorder with one event per CPU receives part of the
/// records of a batch that ran while its events got their buffers one by one, a batch done
/// before the copy (docs/protocol.md, "When nobody listens").
fn judge(
    (base, len): (u64, usize),
    kcore: &Kcore,
    copy: Vec<u8>,
    pokes: &[TextPokeRec],
    (copied_by, arrived): (u64, u64),
    toggles: usize,
) -> Result<Start, String> {
    let now = kcore.read(base, len).map_err(|e| format!("kcore: {e}"))?;
    let guards = copy_guards(&copy, &now);
    let pokes: Vec<TextPokeRec> = pokes
        .iter()
        .filter(|p| p.addr >= base && p.addr < base + len as u64)
        .cloned()
        .collect();
    let replayed =
        listener::replay_from_arrival(base, &copy, &now, &pokes, copied_by, (arrived, arrived))
            .map_err(|e| format!("{e} ({guards} guards in the copy)"))?;
    let partial = replayed.early > 0;
    if partial {
        log(&format!(
            "stock recorder: {} records before the recorder's last buffer (at {arrived}) were a \
             part of a batch's",
            replayed.early
        ));
    }
    Ok(Start {
        toggles,
        records: pokes.len(),
        replayed: replayed.replayed,
        guards,
        partial,
    })
}

/// One start of perf, `delay` into the storm.
fn perf_start(perf: &Perf, kcore: &Kcore, delay: Duration) -> Result<Start, String> {
    for d in [DIR, &format!("{DIR}.old")] {
        let _ = std::fs::remove_dir_all(d);
    }
    let _ = std::fs::remove_file(STOPPED);
    let (base, len) = kernel_text()?;
    let stop = Arc::new(AtomicBool::new(false));
    let storm = storm(stop.clone(), true);
    let seen = kcore_dir_seen(stop.clone());
    std::thread::sleep(delay);
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    // Side-band events only (`-e dummy`; `--kcore` adds the text-poke event), in buffers large
    // enough for updates of every function, timed on our clock.
    let recorded = perf.record(
        Path::new(DIR),
        &[me.to_string_lossy().as_ref(), WAIT_SUBCOMMAND, STOPPED],
        &["--no-bpf-event", "-e", "dummy", "-m", "16384", "-k", "mono"],
    );
    stop.store(true, Ordering::Release);
    let toggles = storm.join().unwrap_or(Err("the storm panicked".into()))?;
    let seen = seen.join().ok().flatten();
    recorded.map_err(|e| format!("perf record: {e}"))?;
    let arrived = seen.ok_or("perf made no kcore_dir")?;
    let copy_file = Path::new(DIR).join("kcore_dir/kcore");
    let copy = Kcore::open_path(&copy_file)
        .and_then(|k| k.read(base, len))
        .map_err(|e| format!("perf's copy {}: {e}", copy_file.display()))?;
    let pokes: Vec<TextPokeRec> = perf
        .script_text_pokes(Path::new(DIR))
        .map_err(|e| format!("perf script: {e}"))?
        .into_iter()
        .map(|p| TextPokeRec {
            addr: p.addr,
            old: p.old,
            new: p.new,
            time: p.time_ns.unwrap_or(0),
            ..TextPokeRec::default()
        })
        .collect();
    // When perf's copy ended is not known: any record may be in it already.
    judge(
        (base, len),
        kcore,
        copy,
        &pokes,
        (u64::MAX, arrived),
        toggles,
    )
}

/// One start of the recorder that maps late, `delay` into the storm.
fn late_start(kcore: &Kcore, delay: Duration) -> Result<Start, String> {
    let text = kernel_text()?;
    let stop = Arc::new(AtomicBool::new(false));
    let storm = storm(stop.clone(), false);
    std::thread::sleep(delay);
    let opened = Recorder::open_monotonic_mapped_late(&RecorderConfig { data_pages: 1024 }, GAP);
    let arrived = sys::monotonic_ns();
    // From here on only the update under way changes the text.
    stop.store(true, Ordering::Release);
    let copy = kcore
        .read(text.0, text.1)
        .map_err(|e| format!("kcore: {e}"));
    let copied_by = sys::monotonic_ns();
    let toggles = storm.join().unwrap_or(Err("the storm panicked".into()))?;
    let recorder = opened.map_err(|e| format!("opening the recorder: {e}"))?;
    let drain = recorder.drain_whole()?;
    judge(
        text,
        kcore,
        copy?,
        &drain.pokes,
        (copied_by, arrived),
        toggles,
    )
}

/// `STARTS` starts of `one`, each some time into its storm, as a case.
fn starts(name: &str, what: &str, mut one: impl FnMut(Duration) -> Result<Start, String>) -> Case {
    let started = Instant::now();
    let mut total = Start::default();
    let mut partial = 0;
    let mut failed = Vec::new();
    for k in 0..STARTS {
        let delay = Duration::from_millis(100 * k as u64);
        match one(delay) {
            Ok(s) => {
                log(&format!(
                    "stock recorder: {name} start {k} ({} ms in): {} toggles, {} records, {} \
                     replayed, {} guards in the copy{}",
                    delay.as_millis(),
                    s.toggles,
                    s.records,
                    s.replayed,
                    s.guards,
                    if s.partial {
                        ", judged from the last buffer on"
                    } else {
                        ""
                    }
                ));
                partial += usize::from(s.partial);
                total.toggles += s.toggles;
                total.records += s.records;
                total.replayed += s.replayed;
                total.guards += s.guards;
            }
            Err(e) => {
                let e = format!("start {k} ({} ms in): {e}", delay.as_millis());
                log(&format!("stock recorder: {name} {e}"));
                failed.push(e);
            }
        }
    }
    if let Some(first) = failed.first() {
        return Case::fail(
            name,
            format!(
                "{} of {STARTS} starts failed, the first: {first}",
                failed.len()
            ),
        );
    }
    // Every start must have met the storm: else nothing here could have gone wrong.
    if total.toggles < STARTS {
        return Case::fail(
            name,
            format!(
                "the storm made {} toggles over {STARTS} starts: too few to judge",
                total.toggles
            ),
        );
    }
    Case::pass(name).with_log(format!(
        "{STARTS} {what} started mid-storm ({} toggles of the function tracer on every \
         function): {} records, {} replayed onto the copies, {} guards in them, every copy \
         equal to the text at its end ({partial} with the records from the recorder's last \
         buffer on), in {:.1} s",
        total.toggles,
        total.records,
        total.replayed,
        total.guards,
        started.elapsed().as_secs_f64()
    ))
}

/// The places where `copy` holds a guard and `now` does not: read while a batch was under way.
fn copy_guards(copy: &[u8], now: &[u8]) -> usize {
    let (step, width) = if is_x86() { (1, 1) } else { (4, 4) };
    let n = copy.len().min(now.len());
    (0..n.saturating_sub(width - 1))
        .step_by(step)
        .filter(|&i| {
            let at = i..i + width;
            listener::is_guard(&copy[at.clone()]) && !listener::is_guard(&now[at])
        })
        .count()
}

/// The group; `listening` is the suite's own listener, closed for its length.
pub fn cases(kcore: &Kcore, listening: &mut Option<Listener>) -> Case {
    *listening = None;
    let setup = (|| -> Result<Perf, String> {
        let perf = Perf::locate().map_err(|e| format!("no perf in this guest: {e}"))?;
        kernel_patching::filter("")?;
        // The tracer patches every function; nothing needs what it would trace.
        kernel_patching::write(&format!("{TRACING}/tracing_on"), "0")?;
        Ok(perf)
    })();
    let children = match setup {
        Ok(perf) => vec![
            starts("perf_record_mid_storm", "perf record --kcore -a", |d| {
                perf_start(&perf, kcore, d)
            }),
            starts("mapped_late_mid_storm", "recorders mapping late", |d| {
                late_start(kcore, d)
            }),
        ],
        Err(e) => vec![Case::fail("stock_recorder_setup", e)],
    };
    let restored = kernel_patching::tracer("nop")
        .and_then(|()| kernel_patching::write(&format!("{TRACING}/tracing_on"), "1"));
    let mut children = children;
    if let Err(e) = restored {
        children.push(Case::fail("stock_recorder_restore", e));
    }
    *listening = Listener::open().ok();
    Case::group("stock_recorder", children)
}
