//! Host model of the listener handshake (patch 0011, docs/protocol.md "When nobody listens").
//!
//! A patcher skips the records, and on arm64 the guards, when nobody listens for
//! `PERF_RECORD_TEXT_POKE`. That is invisible only if no listener can appear while a batch acts
//! on a stale "nobody": a listener opens its event, copies kernel text and then decodes with the
//! copy and the records, so a change made after its copy without a record leaves it decoding
//! stale code. The model checks, over every interleaving, that the copy plus the records always
//! agree with the text.
//!
//! The patcher commits its batches one after the other, each by the real plan
//! ([`Plan::with_protocol`]: [`plan::Protocol::Guarded`] if it found a listener,
//! [`plan::Protocol::Quiet`] if not), with `text_mutex` held as [`Locking`] says:
//!
//! - take `text_mutex`, decide (read the count of listeners);
//! - a guarded module batch releases `text_mutex` across each sync before its first record and
//!   takes it again for its next write or record, and keeps it from its first record to its end
//!   (the engine's own rule, [`plan::AcrossSyncs`], which `ModuleLocks` in kernel/batch.rs follows), so a listener may arrive between its
//!   guards and its first record but not after; a quiet one holds it to its end
//!   (`QuietLocks`); a kernel batch's caller holds it throughout either way (`CallerHeld`);
//! - every write and record is made under `text_mutex`, each record stamped from a global clock;
//!   between the parked section's start and end no other CPU runs, so no listener acts.
//!
//! Each listener:
//!
//! - is counted when its event is created (`perf_event_open()`): `count++`, one atomic step;
//! - receives every record emitted from a later step of its own on, its arrival: the moment its
//!   event has both a buffer and is enabled (perf delivers nothing to an event without either);
//! - arrives under `text_mutex` ([`Attach::UnderTextMutex`], patch 0011: `ring_buffer_attach()`
//!   and `_perf_event_enable()` take it for a `text_poke` event), one atomic step taken only
//!   while the patcher does not hold it (the listener does nothing else under the mutex, so this
//!   loses no interleaving); or, as the series first had it, takes `text_mutex` for its count
//!   instead and arrives at any moment ([`Attach::CountedAtOpen`], the control);
//! - copies the text at any later point, site by site in address order, each read taking a
//!   whole instruction at once ([`Reads::Insn`]) or, on x86, its first byte and its tail
//!   separately ([`Reads::Chunks`]), then reads the clock (the copy's time);
//! - may close at any point after it was counted (`count--`, not under `text_mutex`), after
//!   which nothing is checked for it: its records, if any, are dropped.
//!
//! When the patcher and every listener are done, the text must hold every batch's new
//! instructions, and each listener that did not close replays its records onto its copy exactly
//! as the guest's `replay` (tools/agent/src/scenarios/listener.rs) does: in time order, a record applies
//! if the copy holds its old bytes or a guard, is accepted without change if the copy already
//! holds its new bytes and the record was timed no later than the copy, and is a disagreement
//! otherwise; the replayed copy must equal the text.
//!
//! The negative control, [`Locking::Skipped`], is defect 12 (`SKIP_LISTENER_HANDSHAKE`,
//! `decided_early` in kernel/debug.rs): decide under `text_mutex`, release it, take it again and
//! commit by the stale answer.
//!
//! What it shows (tools/core/tests/listener_model.rs): with one listener, the handshake never
//! disagrees for module or kernel batches, and a listener that closes changes nothing else; the
//! skipped handshake is caught. Three assumptions are each needed, and the model finds a
//! disagreement without each: that a listener synchronizes with `text_mutex` when it starts to
//! receive records, not only when it is counted ([`Attach::CountedAtOpen`]: stock `perf record` opens
//! its event, then maps its buffer, then copies kcore, and a guarded batch that decided and
//! recorded in between, its heads written after the copy, leaves a guard in the copy that no
//! record completes); that the copy reads each instruction in one piece ([`Reads::Chunks`]);
//! and that no listener arrives between a site's record and its head write, which a second
//! listener arriving while an x86 module batch has released `text_mutex` across the sync
//! between its records and its heads would break: [`Locking::Module`] keeps the mutex from
//! the first record on, and [`Locking::ModuleReleasingAcrossSyncs`], which does not, is the
//! control that shows the window.
//!
//! States are deduplicated and the number of interleavings (paths from the start to an end
//! state) is counted over the state graph, which is acyclic: every step advances the patcher's
//! program or a listener's.
//!
//! Not covered: the CPUs executing the sites (the instruction-cache model, [`crate::model`],
//! covers those), memory ordering inside perf and the mutex (a mutex is sequentially
//! consistent), records lost to a full buffer (the guest counts lost records and fails on any).

use crate::model::ARM64_GUARD;
use crate::plan::{self, Arch, Change, Plan, Step, X86_GUARD};
use std::collections::HashMap;

/// How the batch holds `text_mutex` around its decision and its steps.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Locking {
    /// A module batch (`Batch::commit`): decides under `text_mutex`; guarded, it releases the
    /// mutex across each sync until it emits its first record and keeps it from then to its end
    /// (x86 then holds it across the sync between the records and the heads), so a listener
    /// arrives before a site's record or after its head, never between the two; quiet, it holds
    /// it to its end.
    Module,
    /// A kernel batch (`Batch::commit_kernel`): the caller holds `text_mutex` from before the
    /// decision to after the last step, guarded or quiet.
    Caller,
    /// Negative control: a guarded module batch that releases `text_mutex` across every sync,
    /// the sync between its records and its heads too.
    ModuleReleasingAcrossSyncs,
    /// Negative control, defect 12: decides under `text_mutex`, releases it, takes it again and
    /// commits by the stale answer (then as [`Locking::Module`]).
    Skipped,
}

/// Where a listener synchronizes with `text_mutex`: it is counted when its event is created and
/// receives records from a later step of its own (its arrival: a buffer and the event enabled),
/// before its copy.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Attach {
    /// Counted with no lock; arrives under `text_mutex` (patch 0011).
    UnderTextMutex,
    /// Counted under `text_mutex`; arrives at any moment: the control.
    CountedAtOpen,
}

/// How the listener's copy reads each site.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reads {
    /// A whole instruction at once.
    Insn,
    /// x86: the first byte, then the tail, each at once (a copy that a write may fall between);
    /// arm64 as [`Reads::Insn`] (a word is read whole).
    Chunks,
}

/// One batch: `(site, change)` in the order the batch lists them.
pub type BatchChanges = Vec<(usize, Change)>;

/// The system under test: the patcher's batches and the listeners.
#[derive(Clone, Debug)]
pub struct Scenario {
    arch: Arch,
    /// Text before the first batch, per site.
    initial: Vec<Vec<u8>>,
    /// Text after the last batch, per site.
    last: Vec<Vec<u8>>,
    /// Per batch, the program if it finds nobody (`[0]`) and if it finds a listener (`[1]`).
    programs: Vec<[Vec<Op>; 2]>,
    /// Per listener, whether it may close.
    listeners: Vec<bool>,
    attach: Attach,
    reads: Reads,
}

/// One step of the patcher.
#[derive(Clone, PartialEq, Eq, Debug)]
enum Op {
    Lock,
    Unlock,
    /// Start and end a parked section (`stop_machine()`): no other CPU runs in between, so no
    /// listener acts.
    Park,
    Unpark,
    /// Read the count of listeners: the batch is guarded if it is not zero.
    Decide,
    Write {
        site: usize,
        text: Vec<u8>,
    },
    Emit {
        site: usize,
        old: Vec<u8>,
        new: Vec<u8>,
    },
}

impl Scenario {
    /// `batches`, committed one after the other on `arch` with `text_mutex` held as `locking`
    /// says, and no listener yet ([`Scenario::listener`]). Each change's old instruction must be
    /// what its site holds when its batch commits: the first change of a site gives its initial
    /// text. `None` if they are inconsistent or a site appears twice in one batch.
    pub fn new(arch: Arch, locking: Locking, batches: Vec<BatchChanges>) -> Option<Self> {
        let sites = batches.iter().flatten().map(|&(s, _)| s + 1).max()?;
        let mut initial: Vec<Option<Vec<u8>>> = vec![None; sites];
        let mut cur: Vec<Option<Vec<u8>>> = vec![None; sites];
        let mut programs = Vec::new();
        for batch in &batches {
            for (k, &(site, change)) in batch.iter().enumerate() {
                if batch[..k].iter().any(|&(s, _)| s == site) {
                    return None;
                }
                let old = change.old.as_slice().to_vec();
                match &cur[site] {
                    Some(text) if *text != old => return None,
                    Some(_) => {}
                    None => initial[site] = Some(old.clone()),
                }
                cur[site] = Some(old);
            }
            let before: Vec<Vec<u8>> = cur.iter().map(|t| t.clone().unwrap_or_default()).collect();
            let quiet = program(arch, locking, false, batch, &before);
            let guarded = program(arch, locking, true, batch, &before);
            for &(site, change) in batch {
                cur[site] = Some(change.new.as_slice().to_vec());
            }
            programs.push([quiet, guarded]);
        }
        Some(Self {
            arch,
            initial: initial.into_iter().map(Option::unwrap_or_default).collect(),
            last: cur.into_iter().map(Option::unwrap_or_default).collect(),
            programs,
            listeners: Vec::new(),
            attach: Attach::UnderTextMutex,
            reads: Reads::Insn,
        })
    }

    /// Adds a listener; `may_close`: it may also close at any point after it was counted.
    pub fn listener(mut self, may_close: bool) -> Self {
        self.listeners.push(may_close);
        self
    }

    /// Where listeners synchronize with `text_mutex` (default [`Attach::UnderTextMutex`]).
    pub fn attach(mut self, attach: Attach) -> Self {
        self.attach = attach;
        self
    }

    /// How listeners read the text (default [`Reads::Insn`]).
    pub fn reads(mut self, reads: Reads) -> Self {
        self.reads = reads;
        self
    }

    /// The reads of one copy: `(site, byte range)` in address order.
    fn units(&self) -> Vec<(usize, std::ops::Range<usize>)> {
        self.initial
            .iter()
            .enumerate()
            .flat_map(|(site, text)| {
                let split = self.reads == Reads::Chunks && self.arch == Arch::X86 && text.len() > 1;
                if split {
                    vec![(site, 0..1), (site, 1..text.len())]
                } else {
                    vec![(site, 0..text.len())]
                }
            })
            .collect()
    }

    fn is_guard(&self, bytes: &[u8]) -> bool {
        // As the guest's `is_guard`: x86 `INT3` first, arm64 `BRK #0x008`.
        match self.arch {
            Arch::X86 => bytes.first() == Some(&X86_GUARD),
            Arch::Arm64 => bytes == ARM64_GUARD,
        }
    }
}

/// The patcher's steps for one batch whose sites hold `before`: the plan of the protocol its
/// decision picks, with `text_mutex` taken and released as `locking` says.
fn program(
    arch: Arch,
    locking: Locking,
    guarded: bool,
    batch: &[(usize, Change)],
    before: &[Vec<u8>],
) -> Vec<Op> {
    let protocol = if guarded {
        plan::Protocol::Guarded
    } else {
        plan::Protocol::Quiet
    };
    let changes: Vec<Change> = batch.iter().map(|&(_, c)| c).collect();
    let mut text: Vec<Vec<u8>> = before.to_vec();
    let mut ops = vec![Op::Lock, Op::Decide];
    if locking == Locking::Skipped {
        // defect 12: the answer is kept, the mutex is not.
        ops.extend([Op::Unlock, Op::Lock]);
    }
    // When the batch lets go of `text_mutex` across a sync: the engine's own rule.
    let holder = match locking {
        Locking::Caller => plan::TextHolder::Caller,
        Locking::Module | Locking::ModuleReleasingAcrossSyncs | Locking::Skipped => {
            plan::TextHolder::Commit
        }
    };
    let mut across = plan::AcrossSyncs::at_start(holder, guarded);
    let mut held = true;
    for step in Plan::with_protocol(arch, protocol, &changes).steps() {
        let written = |i: usize, text: &[Vec<u8>]| {
            let (site, c) = batch[i];
            let mut t = text[site].clone();
            match step {
                Step::WriteGuard(_) => match arch {
                    Arch::X86 => t[0] = X86_GUARD,
                    Arch::Arm64 => t = ARM64_GUARD.to_vec(),
                },
                Step::WriteTail(_) => t[1..].copy_from_slice(c.new.tail()),
                Step::WriteHead(_) if arch == Arch::X86 => t[0] = c.new.head(),
                _ => t = c.new.as_slice().to_vec(),
            }
            (site, t)
        };
        let op = match step {
            Step::WriteGuard(i) | Step::WriteTail(i) | Step::WriteHead(i) | Step::WriteWhole(i) => {
                let (site, t) = written(i, &text);
                text[site] = t.clone();
                Op::Write { site, text: t }
            }
            Step::Emit(i) | Step::EmitBefore(i) | Step::EmitAfter(i) => {
                // The control keeps releasing where the engine holds.
                if locking != Locking::ModuleReleasingAcrossSyncs {
                    across.recorded();
                }
                let (site, c) = batch[i];
                Op::Emit {
                    site,
                    old: c.old.as_slice().to_vec(),
                    new: c.new.as_slice().to_vec(),
                }
            }
            Step::Sync if across.releases() && held => {
                held = false;
                ops.push(Op::Unlock);
                continue;
            }
            Step::Park => Op::Park,
            Step::Unpark => Op::Unpark,
            Step::Sync | Step::Publish | Step::Retire => continue,
        };
        if !held {
            ops.push(Op::Lock);
            held = true;
        }
        ops.push(op);
    }
    if held {
        ops.push(Op::Unlock);
    }
    ops
}

/// A record as a listener receives it.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Rec {
    site: usize,
    old: Vec<u8>,
    new: Vec<u8>,
    time: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Phase {
    /// Not counted yet.
    Waiting,
    /// Counted, not receiving records yet.
    Counted,
    /// Receiving records; copying.
    Receiving,
    /// Closed: nothing is checked for it.
    Closed,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Listener {
    phase: Phase,
    /// The first record it receives (an index into [`State::records`]).
    from: usize,
    /// Its copy so far, per site (unread bytes are zero).
    copy: Vec<Vec<u8>>,
    /// Reads of the copy done.
    read: usize,
    /// The clock after its last read.
    copied_by: Option<u32>,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct State {
    /// The batch the patcher is at, and its next step.
    batch: usize,
    pc: usize,
    /// This batch's decision (guarded), once made.
    guarded: Option<bool>,
    /// Whether the patcher holds `text_mutex`.
    held: bool,
    /// Inside a parked section: only the patcher runs.
    parked: bool,
    text: Vec<Vec<u8>>,
    count: usize,
    clock: u32,
    records: Vec<Rec>,
    listeners: Vec<Listener>,
    /// Per batch decided: whether it was guarded, and whether a listener had closed by then.
    decisions: Vec<(bool, bool)>,
}

/// Counters of an exploration.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Distinct states visited.
    pub states: usize,
    /// Distinct end states (the patcher and every listener done).
    pub ends: usize,
    /// Interleavings: paths from the start to an end state.
    pub interleavings: u128,
    /// Interleavings ending in a disagreement.
    pub disagreeing: u128,
    /// End states in which a listener's copy and records disagree with the text, or the text
    /// is not every batch's new instructions.
    pub disagreements: usize,
    /// The first disagreement found: what went wrong, and the steps that led there.
    pub counterexample: Option<String>,
    /// Over end states: batches that decided quiet, and guarded.
    pub quiet: usize,
    /// See `quiet`.
    pub guarded: usize,
    /// Over end states: batches that decided after a listener had closed, and of those the
    /// quiet ones.
    pub after_close: usize,
    /// See `after_close`.
    pub quiet_after_close: usize,
    /// Over end states and checked listeners: records applied to the copy's old bytes, to a
    /// guard in the copy, and accepted as already in the copy.
    pub over_old: usize,
    /// See `over_old`.
    pub over_guard: usize,
    /// See `over_old`.
    pub already: usize,
    /// Over end states: listeners that closed (and were not checked).
    pub closed: usize,
}

impl Report {
    /// One line for `--nocapture`.
    pub fn summary(&self) -> String {
        format!(
            "{} states, {} end states, {} interleavings: {} disagreements ({} interleavings); \
             batches quiet {} guarded {}; records over old bytes {}, over a guard {}, already \
             in the copy {}; listeners closed {}, batches after a close {} ({} quiet)",
            self.states,
            self.ends,
            self.interleavings,
            self.disagreements,
            self.disagreeing,
            self.quiet,
            self.guarded,
            self.over_old,
            self.over_guard,
            self.already,
            self.closed,
            self.after_close,
            self.quiet_after_close
        )
    }
}

/// Explores every interleaving of `scenario`.
pub fn exhaustive(scenario: &Scenario) -> Report {
    let mut x = Explorer {
        s: scenario,
        units: scenario.units(),
        memo: HashMap::new(),
        trail: Vec::new(),
        report: Report::default(),
    };
    let start = State {
        batch: 0,
        pc: 0,
        guarded: None,
        held: false,
        parked: false,
        text: scenario.initial.clone(),
        count: 0,
        clock: 0,
        records: Vec::new(),
        listeners: scenario
            .listeners
            .iter()
            .map(|_| Listener {
                phase: Phase::Waiting,
                from: 0,
                copy: scenario.initial.iter().map(|t| vec![0; t.len()]).collect(),
                read: 0,
                copied_by: None,
            })
            .collect(),
        decisions: Vec::new(),
    };
    let (all, bad) = x.paths(&start);
    x.report.interleavings = all;
    x.report.disagreeing = bad;
    x.report.states = x.memo.len();
    x.report
}

struct Explorer<'a> {
    s: &'a Scenario,
    units: Vec<(usize, std::ops::Range<usize>)>,
    /// Per state: interleavings from it to an end, and of those the disagreeing ones.
    memo: HashMap<State, (u128, u128)>,
    /// The steps from the start to the state being explored.
    trail: Vec<String>,
    report: Report,
}

impl Explorer<'_> {
    fn paths(&mut self, state: &State) -> (u128, u128) {
        if let Some(&n) = self.memo.get(state) {
            return n;
        }
        let next = self.successors(state);
        let n = if next.is_empty() {
            let bad = u128::from(self.end(state));
            (1, bad)
        } else {
            let mut n = (0u128, 0u128);
            for (label, s) in next {
                self.trail.push(label);
                let (a, b) = self.paths(&s);
                self.trail.pop();
                n = (n.0.saturating_add(a), n.1.saturating_add(b));
            }
            n
        };
        self.memo.insert(state.clone(), n);
        n
    }

    /// Every state one step away, with the step's description.
    fn successors(&self, st: &State) -> Vec<(String, State)> {
        let mut next = Vec::new();
        if let Some(p) = self.patcher(st) {
            next.push(p);
        }
        if st.parked {
            return next;
        }
        for (l, who) in st.listeners.iter().enumerate() {
            let mut s = st.clone();
            let me = &mut s.listeners[l];
            match who.phase {
                Phase::Waiting if self.s.attach == Attach::UnderTextMutex || !st.held => {
                    s.count += 1;
                    me.phase = Phase::Counted;
                    next.push((format!("L{l} counted (count {})", s.count), s));
                }
                Phase::Waiting | Phase::Closed => {}
                Phase::Counted if self.s.attach == Attach::CountedAtOpen || !st.held => {
                    me.phase = Phase::Receiving;
                    me.from = st.records.len();
                    next.push((format!("L{l} arrives: receives records from here"), s));
                }
                Phase::Counted => {}
                Phase::Receiving => {
                    if let Some((site, range)) = self.units.get(who.read).cloned() {
                        let bytes = &st.text[site][range.clone()];
                        me.copy[site][range.clone()].copy_from_slice(bytes);
                        me.read += 1;
                        let label = format!("L{l} reads site {site} bytes {range:?}: {bytes:02x?}");
                        next.push((label, s));
                    } else if who.copied_by.is_none() {
                        me.copied_by = Some(st.clock);
                        s.clock += 1;
                        next.push((format!("L{l} copy done, clock {}", st.clock), s));
                    }
                }
            }
            if self.s.listeners[l] && matches!(who.phase, Phase::Counted | Phase::Receiving) {
                let mut s = st.clone();
                s.count -= 1;
                s.listeners[l].phase = Phase::Closed;
                next.push((format!("L{l} closes (count {})", s.count), s));
            }
        }
        next
    }

    /// The patcher's next step, if it has one.
    fn patcher(&self, st: &State) -> Option<(String, State)> {
        let b = st.batch;
        let program = &self.s.programs.get(b)?[usize::from(st.guarded.unwrap_or(false))];
        let mut s = st.clone();
        let Some(op) = program.get(st.pc) else {
            s.batch += 1;
            s.pc = 0;
            s.guarded = None;
            return self.patcher(&s);
        };
        s.pc += 1;
        let label = match op {
            Op::Lock => {
                if st.held {
                    return None;
                }
                s.held = true;
                format!("b{b} takes text_mutex")
            }
            Op::Unlock => {
                s.held = false;
                format!("b{b} releases text_mutex")
            }
            Op::Park => {
                s.parked = true;
                format!("b{b} parks the other CPUs")
            }
            Op::Unpark => {
                s.parked = false;
                format!("b{b} lets the other CPUs go")
            }
            Op::Decide => {
                let guarded = st.count > 0;
                let closed = st.listeners.iter().any(|l| l.phase == Phase::Closed);
                s.guarded = Some(guarded);
                s.decisions.push((guarded, closed));
                format!(
                    "b{b} decides {} (count {})",
                    if guarded { "guarded" } else { "quiet" },
                    st.count
                )
            }
            Op::Write { site, text } => {
                s.text[*site] = text.clone();
                format!("b{b} writes site {site}: {text:02x?}")
            }
            Op::Emit { site, old, new } => {
                s.records.push(Rec {
                    site: *site,
                    old: old.clone(),
                    new: new.clone(),
                    time: st.clock,
                });
                s.clock += 1;
                format!(
                    "b{b} records site {site} {old:02x?} -> {new:02x?}, clock {}",
                    st.clock
                )
            }
        };
        Some((label, s))
    }

    /// Checks an end state; true if it disagrees.
    fn end(&mut self, st: &State) -> bool {
        let r = &mut self.report;
        r.ends += 1;
        for &(guarded, after_close) in &st.decisions {
            if guarded {
                r.guarded += 1;
            } else {
                r.quiet += 1;
            }
            if after_close {
                r.after_close += 1;
                r.quiet_after_close += usize::from(!guarded);
            }
        }
        let mut problem = None;
        if st.text != self.s.last {
            problem = Some(format!(
                "the text ends as {:02x?}, not {:02x?}",
                st.text, self.s.last
            ));
        }
        for (l, who) in st.listeners.iter().enumerate() {
            if who.phase == Phase::Closed {
                self.report.closed += 1;
                continue;
            }
            let copied_by = who.copied_by.unwrap_or(u32::MAX);
            match self.replay(&who.copy, &st.records[who.from..], copied_by) {
                Ok(copy) if copy == st.text => {}
                Ok(copy) => {
                    problem.get_or_insert(format!(
                        "L{l}'s copy with its records ends as {copy:02x?}, the text is {:02x?}",
                        st.text
                    ));
                }
                Err(e) => {
                    problem.get_or_insert(format!("L{l}: {e}"));
                }
            }
        }
        let Some(p) = problem else {
            return false;
        };
        self.report.disagreements += 1;
        if self.report.counterexample.is_none() {
            self.report.counterexample = Some(format!("{p}\n  {}", self.trail.join("\n  ")));
        }
        true
    }

    /// The guest's replay (tools/agent/src/scenarios/listener.rs `replay`), onto a copy of the sites.
    fn replay(
        &mut self,
        copy: &[Vec<u8>],
        records: &[Rec],
        copied_by: u32,
    ) -> Result<Vec<Vec<u8>>, String> {
        let mut copy = copy.to_vec();
        for p in records {
            let at = &mut copy[p.site];
            if *at == p.old || self.s.is_guard(at) {
                if *at == p.old {
                    self.report.over_old += 1;
                } else {
                    self.report.over_guard += 1;
                }
                at.clone_from(&p.new);
            } else if *at == p.new && p.time <= copied_by {
                self.report.already += 1;
            } else {
                return Err(format!(
                    "the record of site {} (clock {}) changes {:02x?} to {:02x?}, but the copy \
                     (clock {copied_by}) holds {at:02x?}",
                    p.site, p.time, p.old, p.new
                ));
            }
        }
        Ok(copy)
    }
}
