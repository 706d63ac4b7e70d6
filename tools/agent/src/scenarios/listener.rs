//! Whether a tracer listens: textpoke guards and records only when one does (patch 0011,
//! docs/protocol.md "When nobody listens"), and one that arrives in the middle of changes still
//! gets a copy of the text that its records keep right.
//!
//! The rest of the suite runs with a listener that records nothing ([`Listener`]), as a traced
//! machine would; this group closes it and checks:
//!
//! - `quiet_without_listener`: a scenario and a function-tracer toggle with nobody listening.
//!   Every batch is quiet; on arm64 none writes a guard and no execution traps (the CPU's own
//!   word: the stack mark of each logged execution), on x86 the guards stay; either way the text
//!   ends as the last commit left it (kcore), and the tracer's toggle leaves the kernel text as it
//!   was.
//! - `guarded_with_listener`: the same with a recorder listening: no quiet batch, guards on both
//!   arches, executions the CPU saw trap, one record per change the exerciser's batches list
//!   (site by site), and the kernel's records, replayed onto the kernel text read before, chain
//!   from it and end as the text is.
//! - `listener_mid_storm`: flips of the exerciser's keys and ftrace sites, function-tracer
//!   toggles and `sched_schedstats` flips run with nobody listening; at one of [`STARTS`] points
//!   a recorder opens (the listener appears), copies the text through kcore and collects records
//!   until the storm ends; its records are those timed from its last CPU's arrival on (one
//!   event per CPU, each arriving at its own moment: a batch done before the last arrival may
//!   have reached only some of them, and the copy holds its writes). Its copy, with each
//!   record replayed in time order, must agree with
//!   every record's old bytes (or already hold its new ones, if the copy was read after the
//!   change: records timed before the copy's end only) and end equal to the text. A batch that
//!   decided "nobody listens" and wrote after the copy without a record breaks one or the other.
//! - `listener_mid_storm_observed`: over the same starts the breakpoint observer
//!   (textpoke_agent::oracle::observer) watches the exerciser's first branch sites, which the storm
//!   flips, and judges every execution after each listener's copy against that listener's
//!   records alone, with the copy for a site it has none of: no violation. The storm's flips go
//!   on until one whole run of them began after the copy. Executions between
//!   the listener's start and its copy are not judged: a decoder has only the copy for them,
//!   which may hold a change recorded after the start already (as `perf record --kcore`
//!   copies after it enables its events), and an execution that passed its site before a
//!   batch that decided "nobody listens" and finished before the start can reach its path's
//!   breakpoint after the start.
//! - `two_listeners_mid_storm` ([`two_listeners`]): a first listener stays open while a second
//!   starts at each of [`SECOND_STARTS`] points of a run of the exerciser's flips, so every batch is
//!   guarded and records for the first when the second arrives. The second's copy with its
//!   records must end equal to the text.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use textpoke_agent::oracle::checks;
use textpoke_agent::oracle::observer::{self, Clock, Collected, Observer, Verdicts, Watched};
use textpoke_agent::platform::exerciser::{self, Site};
use textpoke_agent::platform::guest::{is_x86, log};
use textpoke_agent::platform::kcore::Kcore;
use textpoke_agent::platform::perf::{Listener, Recorder, RecorderConfig, TextPokeRec};
use textpoke_agent::platform::sys;
use textpoke_agent::report::ktap::Case;

use crate::scenarios::kernel_patching::{self, kernel_text};
use crate::scenarios::scenario::{engine_stats, region};

/// How every failure of the check on the listener's copy (its kcore snapshot and the records
/// after it, against the text) names it: the handshake control is caught only by those.
pub const COPY: &str = "the listener's copy";

/// The scenario without a listener.
const QUIET_SPEC: &str = "keys=4 sites=4 ftrace=8 flips=3 pokers=1";
/// The storm's scenario: long enough to be under way at every start.
const STORM_SPEC: &str = "keys=6 sites=4 ftrace=8 flips=9 pokers=2";
/// Listener starts per boot, spread over the storm.
pub const STARTS: usize = 6;
/// The function tracer's filter during the storm and the quiet toggle.
const FILTER: &str = "vfs_read vfs_write";

/// textpoke's counter `key`.
fn stat(key: &str) -> Result<u64, String> {
    exerciser::number(&engine_stats()?, key)
}

/// The counters the checks compare, before and after.
fn counters() -> Result<[u64; 6], String> {
    Ok([
        stat("batches")?,
        stat("quiet")?,
        stat("guards")?,
        stat("kernel.batches")?,
        stat("kernel.quiet")?,
        stat("kernel.guards")?,
    ])
}

/// What [`run_and_count`] saw.
struct Ran {
    /// textpoke's counters' deltas ([`counters`]).
    delta: [u64; 6],
    /// Executions the CPU saw trap.
    trapped: usize,
    /// The kernel text before the run (which it ends as), and where it starts.
    kernel_text: (u64, Vec<u8>),
    /// The kernel text while the function tracer was on.
    traced_text: Vec<u8>,
    /// The exerciser's batches.
    batches: Vec<exerciser::BatchLine>,
}

/// Runs the exerciser's scenario `spec` and the function tracer on and off, and returns what it
/// saw, or any failure.
fn run_and_count(kcore: &Kcore, sites: &[Site], spec: &str) -> Result<Ran, String> {
    let (base, len) = kernel_text()?;
    let before_text = kcore.read(base, len).map_err(|e| format!("kcore: {e}"))?;
    let before = counters()?;
    exerciser::command(&format!("run {spec}")).map_err(|e| format!("run {spec}: errno {e}"))?;
    kernel_patching::filter(FILTER)?;
    kernel_patching::tracer("function")?;
    let traced_text = kcore.read(base, len).map_err(|e| format!("kcore: {e}"));
    kernel_patching::tracer("nop")?;
    kernel_patching::filter("")?;
    let traced_text = traced_text?;
    let after = counters()?;
    let after_text = kcore.read(base, len).map_err(|e| format!("kcore: {e}"))?;
    if let Some(a) = kernel_patching::first_difference(base, &before_text, &after_text) {
        return Err(format!(
            "the tracer's toggle left the kernel text changed at {a:#x}"
        ));
    }
    // Every site as its last batch left it (one poker: the batches are listed in commit order).
    let batches = exerciser::batches()?;
    for s in sites {
        let last = batches
            .iter()
            .flat_map(|b| b.changes.iter())
            .rfind(|(i, _)| *i == s.index);
        if let Some(&(_, to)) = last {
            let want = if to == 1 { &s.on } else { &s.off };
            let now = kcore
                .read(s.addr, s.len)
                .map_err(|e| format!("kcore at {:#x}: {e}", s.addr))?;
            if now != *want {
                return Err(format!(
                    "site {} holds {now:02x?}, its last batch wrote {want:02x?}",
                    s.index
                ));
            }
        }
    }
    let trapped = exerciser::executions()
        .map_err(|e| format!("executions: {e}"))?
        .iter()
        .filter(|e| e.cpu_trapped())
        .count();
    let mut delta = [0; 6];
    for (d, (a, b)) in delta.iter_mut().zip(after.iter().zip(before.iter())) {
        *d = a.saturating_sub(*b);
    }
    Ok(Ran {
        delta,
        trapped,
        kernel_text: (base, before_text),
        traced_text,
        batches,
    })
}

/// The regions of the kernel text that the tracer's toggle changed (`before` against
/// `traced`, arm64's ops literals aside: data, which nobody records) and that `pokes` do not
/// record both ways: each needs a record that wrote what `traced` holds there, and one that
/// wrote it back. Returns their addresses and the number of regions.
///
/// kcore is the oracle: the text while the tracer was on says which changes the kernel made,
/// whoever made them, so a record missing at one site cannot hide behind records elsewhere.
fn unrecorded_kernel_changes(
    base: u64,
    before: &[u8],
    traced: &[u8],
    pokes: &[TextPokeRec],
) -> (Vec<u64>, usize) {
    let mut before = before.to_vec();
    if !is_x86() {
        kernel_patching::copy_ftrace_literals(&mut before, traced);
    }
    unrecorded_changes(base, &before, traced, pokes)
}

/// As [`unrecorded_kernel_changes`], every difference an instruction's.
fn unrecorded_changes(
    base: u64,
    before: &[u8],
    traced: &[u8],
    pokes: &[TextPokeRec],
) -> (Vec<u64>, usize) {
    // Differing bytes, gathered into regions: bytes an instruction's old and new encodings
    // share (a zero of an x86 `CALL`'s offset, say) split no change in two.
    let mut regions: Vec<(usize, usize)> = Vec::new();
    for off in (0..before.len().min(traced.len())).filter(|&o| before[o] != traced[o]) {
        match regions.last_mut() {
            Some((_, end)) if off <= *end + 4 => *end = off + 1,
            _ => regions.push((off, off + 1)),
        }
    }
    let covers = |p: &TextPokeRec, bytes: &[u8], (s, e): (usize, usize)| {
        let (start, end) = (base + s as u64, base + e as u64);
        start >= p.addr
            && end <= p.addr + bytes.len() as u64
            && bytes[(start - p.addr) as usize..(end - p.addr) as usize] == traced[s..e]
    };
    let unrecorded = regions
        .iter()
        .filter(|&&r| {
            let written = pokes.iter().any(|p| covers(p, &p.new, r));
            let written_back = pokes.iter().any(|p| covers(p, &p.old, r));
            !(written && written_back)
        })
        .map(|&(s, _)| base + s as u64)
        .collect();
    (unrecorded, regions.len())
}

fn quiet_case(kcore: &Kcore, sites: &[Site]) -> Case {
    const NAME: &str = "quiet_without_listener";
    let (d, trapped) = match run_and_count(kcore, sites, QUIET_SPEC) {
        Ok(ran) => (ran.delta, ran.trapped),
        Err(e) => return Case::fail(NAME, e),
    };
    let [batches, quiet, guards, kbatches, kquiet, kguards] = d;
    let line = format!(
        "nobody listening: {batches} batches, {quiet} quiet, {guards} guards; kernel: {kbatches} \
         batches, {kquiet} quiet, {kguards} guards; {trapped} executions the CPU saw trap"
    );
    log(&format!("listener: {line}"));
    let problem = if batches == 0 || kbatches == 0 {
        Some("no batch committed".to_owned())
    } else if quiet != batches || kquiet != kbatches {
        Some("a batch was guarded with nobody listening".to_owned())
    } else if !is_x86() && (guards > 0 || kguards > 0 || trapped > 0) {
        Some("arm64 wrote a guard, or an execution trapped, with nobody listening".to_owned())
    } else if is_x86() && guards == 0 {
        Some("x86 wrote no guard: its quiet batches must keep them".to_owned())
    } else {
        None
    };
    match problem {
        Some(p) => Case::fail(NAME, format!("{p}: {line}")),
        None => Case::pass(NAME).with_log(line),
    }
}

/// What [`guarded_case`] says when a change of the kernel's reached the listener without its
/// records.
pub const UNRECORDED_KERNEL_CHANGES: &str = "changes of the kernel text without their records";

/// Batches of the exerciser and the kernel with a listener open: guarded, trapping, and every
/// change recorded (each change the tracer's toggle made in the kernel text recorded both ways,
/// and the records chaining from the text and back to it).
pub fn guarded_case(kcore: &Kcore, sites: &[Site]) -> Case {
    const NAME: &str = "guarded_with_listener";
    let mut recorder = match Recorder::open_monotonic(&RecorderConfig { data_pages: 64 }) {
        Ok(r) => r,
        Err(e) => return Case::fail(NAME, format!("opening a recorder: {e}")),
    };
    let ran = run_and_count(kcore, sites, QUIET_SPEC);
    let drain = recorder.drain();
    drop(recorder);
    let ran = match ran {
        Ok(x) => x,
        Err(e) => return Case::fail(NAME, e),
    };
    let [batches, quiet, guards, kbatches, kquiet, kguards] = ran.delta;
    // The run leaves the kernel text as it found it, so the replay below passes with no record
    // of the kernel's: the text while the tracer was on says which changes need one.
    let (unrecorded, regions) = unrecorded_kernel_changes(
        ran.kernel_text.0,
        &ran.kernel_text.1,
        &ran.traced_text,
        &drain.pokes,
    );
    let line = format!(
        "a listener: {batches} batches, {quiet} quiet, {guards} guards; kernel: {kbatches} \
         batches, {kquiet} quiet, {kguards} guards, {regions} regions of its text changed and \
         back; {} executions the CPU saw trap; {} records",
        ran.trapped,
        drain.pokes.len()
    );
    log(&format!("listener: {line}"));
    let problem = if drain.lost_events > 0 || !drain.errors.is_empty() {
        Some(format!(
            "perf lost {} records, errors {:?}",
            drain.lost_events, drain.errors
        ))
    } else if batches == 0 || kbatches == 0 || quiet > 0 || kquiet > 0 {
        Some("no batch, or a quiet one, with a listener".to_owned())
    } else if guards == 0 || kguards == 0 || ran.trapped == 0 || regions == 0 {
        Some(
            "no guard written, no execution trapped, or no kernel text changed, with a listener"
                .to_owned(),
        )
    } else if let [first, ..] = unrecorded[..] {
        Some(format!(
            "{} of {regions} {UNRECORDED_KERNEL_CHANGES} (written and written back), the first \
             at {first:#x}",
            unrecorded.len()
        ))
    } else {
        // The run leaves the kernel text as it found it (`run_and_count`), so the kernel's
        // records, replayed onto it, must chain from it and end as it is.
        let (base, text) = &ran.kernel_text;
        crate::scenarios::scenario::one_record_per_change(&ran.batches, sites, &drain.pokes)
            .and_then(|_| checks::replay(*base, text, text, &drain.pokes))
            .err()
    };
    match problem {
        Some(p) => Case::fail(NAME, format!("{p}: {line}")),
        None => Case::pass(NAME).with_log(line),
    }
}

/// What one listener start saw.
#[derive(Debug, Default)]
pub struct Start {
    /// Records replayed onto the copy.
    pub replayed: usize,
    /// Records the copy already held when it was read.
    pub already: usize,
    /// Records timed before the listener's last arrival, whose writes the copy holds
    /// ([`from_last_arrival`]).
    pub early: usize,
}

/// Replays `pokes` (time order, on `CLOCK_MONOTONIC`) onto `copy`, a copy of `[base, base +
/// copy.len())` read before `copied_by`, site by site. A site's copy was read at one moment, so it
/// holds the text as some number `k` of the site's records left it (the first record's old bytes
/// for none), where each of those `k` was timed before `copied_by`, or it holds the guard of the
/// `k`-th change under way. From there on every record's old bytes must be what the replay left,
/// a chain with no unrecorded change in it.
pub fn replay(
    base: u64,
    copy: &mut [u8],
    pokes: &[TextPokeRec],
    copied_by: u64,
) -> Result<Start, String> {
    let mut s = Start::default();
    // The sites in the copy, each with its records in time order.
    let mut sites: std::collections::BTreeMap<(usize, usize), Vec<&TextPokeRec>> =
        std::collections::BTreeMap::new();
    for p in pokes {
        let Some(off) = p
            .addr
            .checked_sub(base)
            .and_then(|o| usize::try_from(o).ok())
        else {
            continue;
        };
        if copy.get(off..off.saturating_add(p.new.len())).is_some() {
            sites.entry((off, p.new.len())).or_default().push(p);
        }
    }
    for ((off, len), recs) in sites {
        let at = &mut copy[off..off + len];
        let states = std::iter::once(&recs[0].old).chain(recs.iter().map(|r| &r.new));
        // How many of the records the copy holds already: only records timed before the copy
        // was done can be in it.
        let timed_before = recs.iter().take_while(|r| r.time <= copied_by).count();
        let k = states
            .take(timed_before + 1)
            .enumerate()
            .find(|(k, state)| *at == ***state || (*k < recs.len() && is_guard(at)))
            .map(|(k, _)| k)
            .ok_or_else(|| {
                format!(
                    "the record at {:#x} (time {}) changes {:02x?} to {:02x?}, but \
                     {COPY} holds {at:02x?}, no text that record or one before it \
                     left there",
                    recs[0].addr, recs[0].time, recs[0].old, recs[0].new
                )
            })?;
        s.already += k;
        for (j, r) in recs.iter().enumerate().skip(k) {
            // A guard in the copy: it was read while the site's guarded change was under way,
            // and this record completes it.
            if *at != *r.old && !(j == k && is_guard(at)) {
                return Err(format!(
                    "the record at {:#x} (time {}) changes {:02x?} to {:02x?}, but \
                     {COPY} with the records before it holds {at:02x?}",
                    r.addr, r.time, r.old, r.new
                ));
            }
            at.copy_from_slice(&r.new);
            s.replayed += 1;
        }
    }
    Ok(s)
}

/// Those of `pokes` timed from `cut` on.
pub fn from_last_arrival(pokes: &[TextPokeRec], cut: u64) -> Vec<TextPokeRec> {
    pokes.iter().filter(|p| p.time >= cut).cloned().collect()
}

/// The listener's copy of `[base, base + copy.len())`, read before `copied_by`, with its
/// records replayed ([`replay`]), against `now`, the text at the end: `Ok` if it ends equal to
/// it with the records from some moment of the listener's last arrival on.
///
/// The last of a recorder's per-CPU events arrives at a moment known only to lie in `arrival`:
/// after [`Recorder::arriving_from`], before its open returned. A batch done before that
/// moment may have reached only the events of the CPUs that had arrived (a record of it lost
/// and the site's chain broken), and the copy, read after, holds its writes; from that moment
/// on every record arrives. So the replay is tried with every record, then from each end of
/// `arrival` on (once if they are one moment), and the first that ends equal to the text is the
/// listener's. Every cut lies before the copy was read, so a change after the copy still needs
/// its record.
pub fn replay_from_arrival(
    base: u64,
    copy: &[u8],
    now: &[u8],
    pokes: &[TextPokeRec],
    copied_by: u64,
    (from, by): (u64, u64),
) -> Result<Start, String> {
    let mut failed = Vec::new();
    let mut cuts = vec![
        (0, "with every record"),
        (from, "from the last arrival's earliest moment on"),
        (by, "from its latest moment on"),
    ];
    cuts.dedup_by_key(|(cut, _)| *cut);
    for (cut, what) in cuts {
        let kept = from_last_arrival(pokes, cut);
        let mut replayed = copy.to_vec();
        let outcome = replay(base, &mut replayed, &kept, copied_by).and_then(|s| {
            // arm64 ftrace's ops literals are data, which nobody records (as for every
            // transition of `kernel_patching`).
            if !is_x86() {
                kernel_patching::copy_ftrace_literals(&mut replayed, now);
            }
            match kernel_patching::first_difference(base, now, &replayed) {
                Some(a) => {
                    let at = (a - base) as usize;
                    let bytes = |b: &[u8]| b[at..(at + 8).min(b.len())].to_vec();
                    let here: Vec<String> = kept
                        .iter()
                        .filter(|p| p.addr <= a && a < p.addr + p.new.len() as u64)
                        .map(|p| format!("{:02x?} to {:02x?} at {}", p.old, p.new, p.time))
                        .collect();
                    Err(format!(
                        "{COPY} with its {} records ends unlike the text at {a:#x}: {:02x?}, \
                         the text {:02x?}; its records there: {here:?}",
                        kept.len(),
                        bytes(&replayed),
                        bytes(now),
                    ))
                }
                None => Ok(s),
            }
        });
        match outcome {
            Ok(s) => {
                return Ok(Start {
                    early: pokes.len() - kept.len(),
                    ..s
                })
            }
            Err(e) => failed.push(format!("{what}: {e}")),
        }
    }
    Err(failed.join("; "))
}

/// Whether `bytes` begin with textpoke's guard (x86 `INT3`, arm64 `BRK #0x008`).
pub fn is_guard(bytes: &[u8]) -> bool {
    if is_x86() {
        bytes.first() == Some(&0xcc)
    } else {
        bytes.get(..4) == Some(&0xd420_0100u32.to_le_bytes()[..])
    }
}

/// Toggles the function tracer and `sched_schedstats` until `stop`.
fn kernel_storm(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Result<usize, String>> {
    std::thread::spawn(move || {
        let mut n = 0;
        kernel_patching::filter(FILTER)?;
        while !stop.load(Ordering::Relaxed) {
            kernel_patching::tracer("function")?;
            kernel_patching::write("/proc/sys/kernel/sched_schedstats", "1")?;
            kernel_patching::tracer("nop")?;
            kernel_patching::write("/proc/sys/kernel/sched_schedstats", "0")?;
            n += 1;
        }
        kernel_patching::filter("")?;
        Ok(n)
    })
}

/// What a storm is made of.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Storm {
    /// The exerciser's flips and the kernel's own changes (function tracer, `sched_schedstats`).
    ModuleAndKernel,
    /// The exerciser's flips alone. The handshake control's: the kernel's updates hold
    /// `text_mutex` for a whole function-tracer toggle, and a listener's count waits behind
    /// them, so it would seldom land in the window the seeded defect opens; and the recorder's
    /// buffers are small, so that it is open and has copied the text well within that window.
    ModuleOnly,
}

/// What the breakpoint observer saw over the starts: the executions after each listener's copy,
/// judged against that listener's records.
#[derive(Debug, Default)]
pub struct Watch {
    /// The verdicts, summed over the starts.
    pub verdicts: Verdicts,
    /// Hits collected.
    pub hits: usize,
    /// Hits after the listeners' copies.
    pub judged: usize,
    /// Sweep steps taken.
    pub steps: u64,
    /// Hits perf lost.
    pub lost: u64,
    /// Unparsable output records.
    pub bad: u64,
    /// What went wrong: the observer not starting or its sweep failing, a record or copy the
    /// verdicts cannot use.
    pub errors: Vec<String>,
}

/// Executions a passing `listener_mid_storm_observed` judges, over all the starts of a boot.
pub const MIN_JUDGED: u64 = 500;

impl Watch {
    /// The observer's run of one start: `copy` is the listener's copy of the sites' region
    /// from `base`, read by `copied_by` (`CLOCK_MONOTONIC`, the clock of the hits and the
    /// records).
    fn add(
        &mut self,
        sites: &[Site],
        watched: &[Watched],
        (base, copy): (u64, &[u8]),
        pokes: &[TextPokeRec],
        copied_by: u64,
        c: Collected,
    ) {
        self.hits += c.hits.len();
        self.steps += c.steps;
        self.lost += c.lost;
        self.bad += c.bad;
        self.errors.extend(c.error);
        let after: Vec<_> = c.hits.into_iter().filter(|h| h.time > copied_by).collect();
        self.judged += after.len();
        let judged = (|| {
            let timelines = checks::timelines(sites, pokes)?;
            let unrecorded: Vec<Watched> = watched
                .iter()
                .filter(|w| !timelines.contains_key(&w.index))
                .cloned()
                .collect();
            let initial = crate::scenarios::observed::paths_in(base, copy, &unrecorded)?;
            Ok::<_, String>(observer::judge(
                watched,
                &timelines,
                &initial,
                &after,
                observer::HITS_REPEAT,
            ))
        })();
        match judged {
            Ok(v) => self.verdicts.add(v),
            Err(e) => self.errors.push(e),
        }
    }

    /// One line of it.
    fn line(&self) -> String {
        format!(
            "{} hits in {} sweep steps, {} after the listeners' copies, judged against their \
             records: {}, lost {}, unparsable {}",
            self.hits,
            self.steps,
            self.judged,
            self.verdicts.counts(),
            self.lost,
            self.bad
        )
    }

    /// The case's verdict on it.
    fn case(&self) -> Case {
        const NAME: &str = "listener_mid_storm_observed";
        let (v, line) = (&self.verdicts, self.line());
        let problem = if !self.errors.is_empty() || self.lost > 0 || self.bad > 0 {
            Some(format!(
                "errors {:?}, {} lost, {} unparsable",
                self.errors, self.lost, self.bad
            ))
        } else if v.violations > 0 {
            Some(format!("{} violations: {:?}", v.violations, v.examples))
        } else if v.classified() < MIN_JUDGED {
            Some(format!(
                "{} executions judged, fewer than {MIN_JUDGED}",
                v.classified()
            ))
        } else if v.met_guard == 0 {
            Some("no judged execution met a guard".to_owned())
        } else {
            None
        };
        match problem {
            Some(p) => Case::fail(NAME, format!("{p}: {line}")),
            None => Case::pass(NAME).with_log(line),
        }
    }
}

/// One listener start, `delay` into a storm: its copy plus its records against the text, and,
/// with `watch`, the observer's verdicts on the executions of `watched` after the copy, added
/// to `watch`.
pub fn one_start(
    kcore: &Kcore,
    sites: &[Site],
    delay: Duration,
    storm: Storm,
    watch: Option<(&[Watched], &mut Watch)>,
) -> Result<(Start, usize), String> {
    // The sites first: they are read at once, before a batch's writes that a broken handshake
    // would leave unrecorded.
    let regions = [region(sites), kernel_text()?];
    let observing = watch.as_ref().map(|(w, _)| {
        Observer::start(observer::Config {
            sites: w.to_vec(),
            dwell: crate::scenarios::observed::DWELL,
            clock: Clock::Monotonic,
        })
    });
    let stop = Arc::new(AtomicBool::new(false));
    let kernel = match storm {
        Storm::ModuleAndKernel => Some(kernel_storm(stop.clone())),
        Storm::ModuleOnly => None,
    };
    // With the observer, the exerciser runs its storm again until one whole run began after the
    // copy, so that every start has executions to judge however long its copy took.
    let copied = Arc::new(AtomicBool::new(false));
    let again = watch.is_some();
    let flips = {
        let copied = copied.clone();
        std::thread::spawn(move || loop {
            let after_copy = copied.load(Ordering::Acquire);
            exerciser::command(&format!("run {STORM_SPEC}"))?;
            if !again || after_copy {
                break Ok(());
            }
        })
    };
    std::thread::sleep(delay);
    // The kernel's storm records thousands of changes; the exerciser's alone, hundreds, in
    // buffers that map fast enough for the seeded defect's window (see `Storm::ModuleOnly`).
    let data_pages = match storm {
        Storm::ModuleAndKernel => 1024,
        Storm::ModuleOnly => 64,
    };
    let opened = Recorder::open_monotonic(&RecorderConfig { data_pages });
    let arrived_by = sys::monotonic_ns();
    let copies: Result<Vec<Vec<u8>>, String> = regions
        .iter()
        .map(|&(base, len)| kcore.read(base, len).map_err(|e| format!("kcore: {e}")))
        .collect();
    let copied_by = sys::monotonic_ns();
    copied.store(true, Ordering::Release);
    let ran: Result<(), i32> = flips.join().unwrap_or(Err(-1));
    let collected = observing.map(|o| o.map(Observer::stop));
    stop.store(true, Ordering::Relaxed);
    let toggles = match kernel {
        Some(k) => k
            .join()
            .unwrap_or(Err("the kernel storm panicked".into()))?,
        None => 0,
    };
    let rec = opened.map_err(|e| format!("opening the recorder: {e}"))?;
    ran.map_err(|e| format!("run {STORM_SPEC}: errno {e}"))?;
    let arrival = (rec.arriving_from(), arrived_by);
    let drain = rec.drain_whole()?;
    let copies = copies?;
    // The observer's, with its copy taken after the arrival's end.
    let observed = from_last_arrival(&drain.pokes, arrival.0);
    if let (Some((watched, watch)), Some(collected)) = (watch, collected) {
        match collected {
            Ok(c) => watch.add(
                sites,
                watched,
                (regions[0].0, &copies[0]),
                &observed,
                copied_by,
                c,
            ),
            Err(e) => watch.errors.push(format!("starting the observer: {e}")),
        }
    }
    let mut total = Start::default();
    for (i, (&(base, len), copy)) in regions.iter().zip(copies).enumerate() {
        let now = kcore.read(base, len).map_err(|e| format!("kcore: {e}"))?;
        let s = replay_from_arrival(base, &copy, &now, &drain.pokes, copied_by, arrival)?;
        // With the observer a whole run of the exerciser's flips began after the copy, with
        // the listener there: its batches were guarded and recorded.
        if again && i == 0 && s.replayed == 0 {
            return Err(
                "no record of the exerciser's batches reached the listener, though a whole run \
                 of them began after its copy"
                    .to_owned(),
            );
        }
        total.early += s.early;
        total.replayed += s.replayed;
        total.already += s.already;
    }
    Ok((total, toggles))
}

/// [`STARTS`] listener starts spread over storms: `Ok(summary)` if every copy agreed. With
/// `watch`, the observer watches the first branch sites through each start (see the module's
/// documentation) and its verdicts are added there.
pub fn mid_storm(
    kcore: &Kcore,
    sites: &[Site],
    storm: Storm,
    mut watch: Option<&mut Watch>,
) -> Result<String, String> {
    let watched = match watch {
        Some(_) => crate::scenarios::observed::watched(sites)?,
        None => Vec::new(),
    };
    let start = Instant::now();
    let (mut replayed, mut already, mut early, mut toggles) = (0, 0, 0, 0);
    for k in 0..STARTS {
        // From the storm's first moments to well into it.
        let delay = Duration::from_millis(50 + 150 * k as u64);
        let observing = watch.as_deref_mut().map(|w| (watched.as_slice(), w));
        let (s, t) = one_start(kcore, sites, delay, storm, observing)
            .map_err(|e| format!("start {k} ({} ms in): {e}", delay.as_millis()))?;
        replayed += s.replayed;
        already += s.already;
        early += s.early;
        toggles += t;
    }
    Ok(format!(
        "{STARTS} listeners started mid-storm ({toggles} tracer and schedstats toggles beside \
         `{STORM_SPEC}`): {replayed} records replayed onto their copies, {already} already in \
         them, {early} before their last CPU's arrival left to the copies; every copy equal to \
         the text at its end, in {:.1} s",
        start.elapsed().as_secs_f64()
    ))
}

/// The name of [`two_listeners`]'s case.
pub const TWO_LISTENERS: &str = "two_listeners_mid_storm";
/// How many times [`two_listeners`] starts its second listener: each start is a fraction of a
/// second, and the window a broken batch would open is one sync of each batch.
const SECOND_STARTS: usize = 16;

/// A first listener stays open (counted, with no buffer) while a second starts at each of
/// [`SECOND_STARTS`] points of a run of the exerciser's flips: its copy of the exerciser's text with
/// its records must end equal to the text, and the flips after its copy must have reached it.
///
/// The flips go round groups of four sites, one batch per group, and stop one flip after the
/// copy, of the group after the one in flight at the copy: no site the copy may have caught
/// mid-change is changed again, whose record would otherwise paper over a missing one (a
/// record's old bytes are accepted over a guard in the copy). Only the exerciser's batches run:
/// a kernel batch's caller holds `text_mutex` throughout, so only a module batch has syncs a
/// listener could arrive across (`AcrossSyncs` in kernel/plan.rs). A guarded
/// x86 module batch that let go of `text_mutex` across the sync between its records and its
/// heads would let the second listener copy a guard whose record it missed (the listener
/// model's `a_listener_counted_between_an_x86_record_and_its_head_misses_it`; seeded defect
/// 17's control).
pub fn two_listeners(kcore: &Kcore, sites: &[Site]) -> Result<String, String> {
    let groups: Vec<String> = sites
        .chunks(4)
        .map(|g| {
            let indices: Vec<String> = g.iter().map(|s| s.index.to_string()).collect();
            format!("flip {}", indices.join(" "))
        })
        .collect();
    if groups.len() < 2 {
        return Err(format!("{} sites make fewer than two groups", sites.len()));
    }
    let _first = Listener::open().map_err(|e| format!("opening the first listener: {e}"))?;
    let (base, len) = region(sites);
    let started = Instant::now();
    let (mut replayed, mut already, mut flips) = (0, 0, 0);
    for k in 0..SECOND_STARTS {
        let delay = Duration::from_millis(20 + 15 * k as u64);
        let copied = Arc::new(AtomicBool::new(false));
        let flipper = {
            let (copied, groups) = (copied.clone(), groups.clone());
            std::thread::spawn(move || -> Result<usize, String> {
                let mut n = 0;
                loop {
                    let after_copy = copied.load(Ordering::Acquire);
                    let cmd = &groups[n % groups.len()];
                    exerciser::command(cmd).map_err(|e| format!("{cmd}: errno {e}"))?;
                    n += 1;
                    if after_copy {
                        break Ok(n);
                    }
                }
            })
        };
        std::thread::sleep(delay);
        let opened = Recorder::open_monotonic(&RecorderConfig { data_pages: 64 });
        let arrived_by = sys::monotonic_ns();
        let copy = kcore.read(base, len).map_err(|e| format!("kcore: {e}"));
        let copied_by = sys::monotonic_ns();
        copied.store(true, Ordering::Release);
        let ran = flipper
            .join()
            .unwrap_or_else(|_| Err("the flipper panicked".into()));
        let rec = opened.map_err(|e| format!("opening the second listener: {e}"))?;
        flips += ran?;
        let arrival = (rec.arriving_from(), arrived_by);
        let drain = rec.drain_whole()?;
        let now = kcore.read(base, len).map_err(|e| format!("kcore: {e}"))?;
        let at = |e: String| format!("start {k} ({} ms in): {e}", delay.as_millis());
        let s = replay_from_arrival(base, &copy?, &now, &drain.pokes, copied_by, arrival)
            .map_err(at)?;
        if s.replayed == 0 {
            return Err(at(
                "no record of the flips after its copy reached the second listener".into(),
            ));
        }
        replayed += s.replayed;
        already += s.already;
    }
    Ok(format!(
        "a first listener open throughout; {SECOND_STARTS} second listeners started among {flips} \
         batches of flips of {} groups: {replayed} records replayed onto their copies, \
         {already} already in them; every copy equal to the text at its end, in {:.1} s",
        groups.len(),
        started.elapsed().as_secs_f64()
    ))
}

/// The group; `listening` is the suite's own listener, closed for its length.
pub fn cases(sites: &[Site], kcore: &Kcore, listening: &mut Option<Listener>) -> Case {
    *listening = None;
    let mut children = vec![quiet_case(kcore, sites), guarded_case(kcore, sites)];
    let mut watch = Watch::default();
    children.push(
        match mid_storm(kcore, sites, Storm::ModuleAndKernel, Some(&mut watch)) {
            Ok(line) => Case::pass("listener_mid_storm").with_log(line),
            Err(e) => Case::fail("listener_mid_storm", e),
        },
    );
    log(&format!("listener: observer: {}", watch.line()));
    children.push(watch.case());
    children.push(match two_listeners(kcore, sites) {
        Ok(line) => Case::pass(TWO_LISTENERS).with_log(line),
        Err(e) => Case::fail(TWO_LISTENERS, e),
    });
    *listening = Listener::open().ok();
    Case::group("listener", children)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poke(addr: u64, old: &[u8], new: &[u8], time: u64) -> TextPokeRec {
        TextPokeRec {
            addr,
            old: old.to_vec(),
            new: new.to_vec(),
            time,
            ..TextPokeRec::default()
        }
    }

    /// A branch site at 0x100 (`off` 0, `on` 1) as the exerciser lists it and the observer
    /// watches it, and a hit of its path `path` at `time` that read `word` at the site.
    fn watched_site() -> (Site, Watched) {
        let site = Site {
            index: 7,
            kind: "b".into(),
            addr: 0x100,
            len: 1,
            off: vec![0],
            on: vec![1],
        };
        let w = Watched {
            index: 7,
            addr: 0x100,
            on: vec![1],
            off: vec![0],
            taken: 0x140,
            fall: 0x101,
        };
        (site, w)
    }

    fn hit(time: u64, w: &Watched, path: u8) -> observer::ObsHit {
        observer::ObsHit {
            time,
            cpu: 0,
            seen: textpoke_agent::platform::bpf::SiteWord {
                bp_addr: if path == 1 { w.taken } else { w.fall },
                site: w.addr,
                word: 0,
                fingerprint: time,
            },
        }
    }

    fn collected(hits: Vec<observer::ObsHit>) -> Collected {
        Collected {
            hits,
            ..Collected::default()
        }
    }

    #[test]
    fn the_observer_judges_only_executions_after_the_copy() {
        let (site, w) = watched_site();
        // The listener's one record: off to on at 50; an unguarded execution of `on` at 40 is a
        // violation if judged.
        let pokes = [poke(0x100, &[0], &[1], 50)];
        let mut judged = Watch::default();
        judged.add(
            std::slice::from_ref(&site),
            std::slice::from_ref(&w),
            (0x100, &[0]),
            &pokes,
            30,
            collected(vec![hit(40, &w, 1), hit(60, &w, 1)]),
        );
        assert!(judged.errors.is_empty(), "{:?}", judged.errors);
        assert_eq!((judged.hits, judged.judged), (2, 2));
        assert_eq!(
            (judged.verdicts.violations, judged.verdicts.new_ran),
            (1, 1)
        );
        // Read after 40: that execution is before the copy, and not judged.
        let mut after = Watch::default();
        after.add(
            std::slice::from_ref(&site),
            std::slice::from_ref(&w),
            (0x100, &[0]),
            &pokes,
            45,
            collected(vec![hit(40, &w, 1), hit(60, &w, 1)]),
        );
        assert_eq!((after.hits, after.judged), (2, 1));
        assert_eq!((after.verdicts.violations, after.verdicts.new_ran), (0, 1));
    }

    #[test]
    fn a_site_without_records_keeps_the_path_its_copy_holds() {
        let (site, w) = watched_site();
        let mut watch = Watch::default();
        watch.add(
            std::slice::from_ref(&site),
            std::slice::from_ref(&w),
            (0x100, &[1]),
            &[],
            10,
            collected(vec![hit(20, &w, 1), hit(30, &w, 0)]),
        );
        assert!(watch.errors.is_empty(), "{:?}", watch.errors);
        // `on` in effect: its execution agrees, the fall-through's is undecided.
        assert_eq!((watch.verdicts.old_ran, watch.verdicts.undecided), (1, 1));
        // A copy that holds neither instruction is an error, not a verdict.
        let mut bad = Watch::default();
        bad.add(
            std::slice::from_ref(&site),
            std::slice::from_ref(&w),
            (0x100, &[9]),
            &[],
            10,
            collected(vec![hit(20, &w, 1)]),
        );
        assert_eq!(bad.errors.len(), 1);
        assert_eq!(bad.verdicts.classified(), 0);
    }

    #[test]
    fn the_observed_case_wants_judged_executions_guards_and_no_violation() {
        let pass = Watch {
            verdicts: Verdicts {
                new_ran: MIN_JUDGED,
                met_guard: 1,
                ..Verdicts::default()
            },
            ..Watch::default()
        };
        assert!(pass.case().passed());
        let few = Watch {
            verdicts: Verdicts {
                new_ran: MIN_JUDGED - 1,
                met_guard: 1,
                ..Verdicts::default()
            },
            ..Watch::default()
        };
        assert!(!few.case().passed());
        let violated = Watch {
            verdicts: Verdicts {
                new_ran: MIN_JUDGED,
                met_guard: 1,
                violations: 1,
                ..Verdicts::default()
            },
            ..Watch::default()
        };
        assert!(!violated.case().passed());
        let unguarded = Watch {
            verdicts: Verdicts {
                new_ran: MIN_JUDGED,
                ..Verdicts::default()
            },
            ..Watch::default()
        };
        assert!(!unguarded.case().passed());
        let lost = Watch { lost: 1, ..pass };
        assert!(!lost.case().passed());
    }

    #[test]
    fn a_copy_read_after_a_change_may_hold_it_already() {
        let mut copy = vec![1, 1, 2, 2];
        let pokes = [
            poke(0x100, &[1, 1], &[3, 3], 5),
            poke(0x102, &[0, 0], &[2, 2], 9),
        ];
        let s = replay(0x100, &mut copy, &pokes, 10).unwrap();
        assert_eq!((s.replayed, s.already), (1, 1));
        assert_eq!(copy, [3, 3, 2, 2]);
    }

    #[test]
    fn an_unrecorded_change_after_the_copy_is_caught() {
        // The copy holds 0; the text was changed to 1 unrecorded after it, then recorded back.
        let mut copy = vec![0];
        let pokes = [poke(0x100, &[1], &[0], 20)];
        assert!(replay(0x100, &mut copy, &pokes, 10).is_err());
        // Had that record been timed before the copy was read, the copy may hold its result.
        let mut copy = vec![0];
        assert!(replay(0x100, &mut copy, &pokes, 30).is_ok());
    }

    #[test]
    fn a_copy_read_after_several_changes_of_a_site_may_hold_them() {
        // Stub to list to the tracer's function, both before the copy was read: it holds the
        // function; then the tracer goes off after it.
        let pokes = [
            poke(0x100, &[0], &[1], 5),
            poke(0x100, &[1], &[2], 6),
            poke(0x100, &[2], &[1], 20),
            poke(0x100, &[1], &[0], 21),
        ];
        let mut copy = vec![2];
        let s = replay(0x100, &mut copy, &pokes, 10).unwrap();
        assert_eq!((s.replayed, s.already), (2, 2));
        assert_eq!(copy, [0]);
        // Those before the copy must have been timed before it.
        let mut copy = vec![2];
        assert!(replay(0x100, &mut copy, &pokes, 5).is_err());
    }

    #[test]
    fn the_replay_takes_the_records_from_the_last_arrival_on() {
        // A batch on an arrived CPU turned the site on at 5, after the last arrival began (4)
        // but before it ended, one on a CPU whose event had not arrived turned it off at 6 (its
        // record lost), the open returned at 10, and a batch turned the site on again at 12;
        // the copy, read by 20, holds it on, as the text does.
        let pokes = [poke(0x100, &[0], &[1], 5), poke(0x100, &[0], &[1], 12)];
        let s = replay_from_arrival(0x100, &[1], &[1], &pokes, 20, (4, 10)).unwrap();
        assert_eq!((s.replayed, s.already, s.early), (0, 1, 1));
        // Every cut fails for a change after the copy without its record.
        let pokes = [poke(0x100, &[0], &[1], 5), poke(0x100, &[0], &[1], 30)];
        let e = replay_from_arrival(0x100, &[1], &[1], &pokes, 20, (4, 10)).unwrap_err();
        assert_eq!(e.matches(COPY).count(), 3, "{e}");
    }

    #[test]
    fn each_change_of_the_text_needs_its_records_both_ways() {
        // An x86 NOP5 turned into a CALL whose offset shares two zero bytes with it, at 0x102,
        // and back; bytes elsewhere unchanged.
        let nop = [0x0f, 0x1f, 0x44, 0x00, 0x00];
        let call = [0xe8, 0x10, 0x20, 0x00, 0x00];
        let before = [[0x90; 2].as_slice(), &nop, &[0x90; 3]].concat();
        let traced = [[0x90; 2].as_slice(), &call, &[0x90; 3]].concat();
        let on = poke(0x102, &nop, &call, 1);
        let off = poke(0x102, &call, &nop, 2);
        let (un, regions) = unrecorded_changes(0x100, &before, &traced, &[on.clone(), off.clone()]);
        assert_eq!((un, regions), (vec![], 1));
        // Either record missing, or both, leaves the change unrecorded.
        for pokes in [vec![on.clone()], vec![off], vec![]] {
            assert_eq!(
                unrecorded_changes(0x100, &before, &traced, &pokes).0,
                [0x102]
            );
        }
        // A record elsewhere does not stand in for it.
        let elsewhere = poke(0x200, &nop, &call, 3);
        assert_eq!(
            unrecorded_changes(0x100, &before, &traced, &[on, elsewhere]).0,
            [0x102]
        );
        // Nothing changed: nothing to record.
        assert_eq!(
            unrecorded_changes(0x100, &before, &before, &[]),
            (vec![], 0)
        );
    }

    #[test]
    fn an_unrecorded_change_between_two_records_is_caught() {
        let pokes = [poke(0x100, &[0], &[1], 20), poke(0x100, &[2], &[3], 21)];
        let mut copy = vec![0];
        assert!(replay(0x100, &mut copy, &pokes, 10).is_err());
    }
}
