//! Host model of SMP instruction-cache incoherence, run against the engine's plan.
//!
//! QEMU keeps emulated code coherent, so a guest can never show an incoherence bug: the
//! protocol is proven here instead. The model has one poker executing a batch's steps (the
//! real [`Plan`] for the real protocol) and `N` CPUs that execute the batch's sites. Each CPU
//! sees text through a private view that may be stale:
//!
//! - a write changes memory, not the views;
//! - a CPU may refresh any part of its view from memory at any time (a cache refill);
//! - a sync refreshes every CPU's whole view (x86: the IPI's serializing instruction; arm64:
//!   cache maintenance plus the IPI's context synchronization);
//! - taking a trap refreshes the trapping CPU's view (exception entry and return are context
//!   synchronizing);
//! - between [`Step::Park`] and [`Step::Unpark`] (a parked section, `stop_machine()`) no CPU
//!   executes, refills or traps: only the poker moves; `Unpark` refreshes every CPU's whole view
//!   (each CPU's `ISB` before it leaves the stopper).
//!
//! x86 views are kept per chunk, the first byte and the tail, so a CPU can see a new first byte
//! with a stale tail. arm64 instructions are a single 4-byte chunk (single-copy atomic).
//!
//! Every execution of a site by a CPU is classified: the old instruction, the new one, trapped
//! (the handler looked the address up and emulated the new instruction), ambiguous (see below),
//! or a violation. The checked invariant (commit e17d43b93e54, which added the record): an execution that did not trap sees the old
//! instruction only before the site's `PERF_RECORD_TEXT_POKE` and the new one only after it; a
//! trapped execution must find its site in the table and behaves as the new instruction; nothing
//! ever sees a mix of the two; when the plan is done every site holds the new instruction.
//!
//! arm64 adds the Arm ARM's rule for concurrent modification and execution of instructions: a
//! write may replace an instruction that another CPU can execute only when the old and the new
//! word are both among `B`, `BL`, `BRK`, `NOP`, `SVC`, `HVC`, `SMC` and `ISB`
//! ([`arm64_concurrently_modifiable`], written from the encodings, independently of the codec).
//! Any other write outside a parked section is [`Violation::UnsafeConcurrentModification`]: every
//! modelled CPU can fetch every site at any time outside a parked section, the poker excepted
//! (it is not one of the `N` CPUs).
//!
//! Ambiguity is judged from a decoder's point of view, with only the records. With one record per
//! site the decoder is never in doubt: an untrapped execution ran the old instruction if it came
//! before the record and the new one after it (if the hardware did otherwise, that is a
//! violation above, not ambiguity), and a trapped one shows its trap. With
//! [`plan::Protocol::BeforeAfter`]'s two records the records only say "old" before the BEFORE
//! record and "new" after the AFTER record: an untrapped execution between them is consistent
//! with both and is counted as [`Outcome::Ambiguous`], whichever the CPU really ran. For that
//! protocol the ordering violations keep their meaning relative to the record that settles the
//! question: [`Violation::NewBeforeRecord`] is the new instruction before the site's BEFORE
//! record, [`Violation::OldAfterRecord`] the old one after its AFTER record.
//!
//! A stream of two batches on different sites ([`Batch::stream`]) models when a batch's entries
//! leave the table ([`Retirement`]). The last sync of a guarded plan makes no change take
//! effect: once the last write is made a CPU fetches the new instruction or meets the guard,
//! traps and is emulated as the new one. That sync only makes it safe to retire the entries,
//! and any later sync does as well: retired at the next batch's first sync (after that batch's
//! guards), a batch returns after its last write, one sync sooner. Each batch is checked where
//! it returns ([`Violation::StaleAtReturn`]): every CPU must execute its sites as the new
//! instruction, by fetching it or by trapping on a guard its entry still resolves. The engine
//! retires at its own last sync today (docs/protocol.md, "Fewer syncs").
//!
//! Executions do not change the state (except that a trap refreshes the view), so each state is
//! checked for every (CPU, site) execution and only writes, refreshes and traps branch. That
//! keeps exhaustive exploration cheap for small sizes; [`random_walks`] covers larger ones.
//!
//! Not covered: the memory ordering of the table itself (loom covers it), the real cost or
//! latency of anything, instructions other than the batch's sites, interrupts that nest traps,
//! NMIs during a parked section, whether the arch layer marks the right changes parked (the
//! model plans the flags it is given; the arm64 rule catches a wrong one in the batch under
//! test), and hardware behaviour beyond "a view is some past value of memory until synchronized".

use crate::insn::InsnBytes;
use crate::plan::{self, Arch, Change, Plan, Recovery, Repair, Step, Stranded, X86_GUARD};
use std::collections::HashSet;

/// arm64 `BRK #0x008` (the guard immediate our kernel patch reserves), little-endian.
pub const ARM64_GUARD: [u8; 4] = 0xd420_0100u32.to_le_bytes();

/// The protocol the poker follows: one of the planner's protocols, or the guarded plan with
/// the table of the 2019 arm64 prototype.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Protocol {
    /// The engine's plan, exactly as `kernel/plan.rs` produces it for `protocol`: the guarded
    /// one, or one of its deliberately broken variants (negative controls).
    Plan(plan::Protocol),
    /// Negative control: the guarded plan with a table of one (address, instruction) slot,
    /// overwritten per site, as in the 2019 arm64 prototype.
    SingleSlotTable,
}

/// What went wrong in an execution, in a write or at the end.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Violation {
    /// A CPU executed the old instruction after the site's record (with BEFORE/AFTER records:
    /// after its AFTER record).
    OldAfterRecord,
    /// A CPU executed the new instruction (without trapping) before the site's record (with
    /// BEFORE/AFTER records: before its BEFORE record).
    NewBeforeRecord,
    /// A CPU executed a mix of old and new bytes.
    Torn,
    /// A CPU trapped on a guard the table could not resolve (in the kernel: an oops).
    UnhandledTrap,
    /// The plan ended with a site not holding its new instruction (after a failed write: not
    /// holding the instruction its record says, or still a guard).
    FinalText,
    /// The plan (or its recovery) ended with a CPU that may still fetch something other than
    /// the text: a write the caller returns over, not yet synced. The kernel's callers expect
    /// the change in effect on return.
    StaleAtReturn,
    /// arm64: the poker replaced or installed a word outside the concurrently modifiable set
    /// ([`arm64_concurrently_modifiable`]) while other CPUs could fetch the site, that is outside
    /// a parked section. Counted once per state in which the poker's next step is such a write.
    UnsafeConcurrentModification,
}

/// Whether the Arm ARM allows the arm64 instruction `word` to be replaced, or to replace another,
/// while another CPU may execute it: `B`, `BL`, `BRK`, `NOP`, `SVC`, `HVC`, `SMC` and `ISB`
/// (Arm ARM, "Concurrent modification and execution of instructions"). The rule needs both the
/// old and the new instruction in this set.
///
/// Written from the Arm ARM's encodings, not from the engine's codec, so the model checks the
/// codec's classification instead of repeating it.
pub fn arm64_concurrently_modifiable(word: u32) -> bool {
    // B / BL: op 0 / 1, 00101, imm26.
    let b = word & 0xfc00_0000 == 0x1400_0000;
    let bl = word & 0xfc00_0000 == 0x9400_0000;
    // Exception generation: 11010100, opc, imm16, op2 = 000, LL.
    let exception = |opc: u32, ll: u32| word & 0xffe0_001f == 0xd400_0000 | opc << 21 | ll;
    let svc = exception(0b000, 0b01);
    let hvc = exception(0b000, 0b10);
    let smc = exception(0b000, 0b11);
    let brk = exception(0b001, 0b00);
    // NOP: HINT #0 exactly (other hints are not NOP, even where they execute as one).
    let nop = word == 0xd503_201f;
    // ISB: 1101010100 0 00 011 0011 CRm 110 11111, any option CRm (reserved ones act as SY).
    let isb = word & 0xffff_f0ff == 0xd503_30df;
    b || bl || svc || hvc || smc || brk || nop || isb
}

/// [`arm64_concurrently_modifiable`] for an instruction's bytes in memory (little-endian); false
/// for anything but 4 bytes.
fn arm64_modifiable_bytes(bytes: &[u8]) -> bool {
    <[u8; 4]>::try_from(bytes).is_ok_and(|w| arm64_concurrently_modifiable(u32::from_le_bytes(w)))
}

/// How one execution went.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// Executed the old instruction.
    Old,
    /// Executed the new instruction.
    New,
    /// Trapped on the guard and emulated the new instruction.
    Trapped,
    /// Executed the old or the new instruction, untrapped, between the site's BEFORE and AFTER
    /// records: a decoder holding only the records cannot tell which.
    Ambiguous,
    /// Broke the invariant.
    Bad(Violation),
}

/// Counters of an exploration.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Distinct states visited.
    pub states: usize,
    /// Executions classified (one per state, CPU and site).
    pub executions: usize,
    /// Executions classified as the old instruction.
    pub old: usize,
    /// Executions classified as the new instruction.
    pub new: usize,
    /// Executions that trapped and were emulated.
    pub trapped: usize,
    /// Executions a decoder holding only the records cannot classify ([`Outcome::Ambiguous`]);
    /// not counted in `old` or `new`.
    pub ambiguous: usize,
    /// Every distinct violation found, with how often it was seen.
    pub violations: Vec<(Violation, usize)>,
}

impl Report {
    fn count(&mut self, outcome: Outcome) {
        self.executions += 1;
        match outcome {
            Outcome::Old => self.old += 1,
            Outcome::New => self.new += 1,
            Outcome::Trapped => self.trapped += 1,
            Outcome::Ambiguous => self.ambiguous += 1,
            Outcome::Bad(v) => self.violation(v),
        }
    }

    fn violation(&mut self, v: Violation) {
        match self.violations.iter_mut().find(|(seen, _)| *seen == v) {
            Some((_, n)) => *n += 1,
            None => self.violations.push((v, 1)),
        }
    }

    /// Whether violation `v` was found.
    pub fn found(&self, v: Violation) -> bool {
        self.violations.iter().any(|(seen, _)| *seen == v)
    }
}

/// How a commit whose write failed takes its guards out, when the model makes writes fail
/// ([`Batch::failing`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Recover {
    /// The planner's [`Recovery`], as the engine runs it.
    Plan,
    /// Negative control: each guarded site written whole with the instruction its record says,
    /// then one sync (what the engine did before it followed the plan's rules).
    WholeOverGuard,
    /// Negative control: the planner's recovery, told that nothing was written since the last
    /// sync (what the engine told it before it counted the plan's unsynced writes).
    PlanForgettingWrites,
}

/// One step of a recovery in the model: the planner's, or the negative control's.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Undo {
    Repair(Repair),
    Whole(usize),
}

/// One step of the poker in the model: a plan's step, or where a batch of a stream
/// ([`Batch::stream`]) touches the table or returns to its caller. `(lo, hi)` are the batch's
/// sites, `lo..hi`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Poke {
    /// A step of a plan, its sites' indices those of the model.
    Plan(Step),
    /// [`Step::Publish`] of the sites `lo..hi`.
    Publish(usize, usize),
    /// [`Step::Retire`] of the sites `lo..hi`.
    Retire(usize, usize),
    /// The batch of the sites `lo..hi` returns to its caller, which expects its changes in
    /// effect: every CPU executes each of its sites as the new instruction, by fetching it or
    /// by trapping on a guard the table resolves ([`Violation::StaleAtReturn`] otherwise).
    Return(usize, usize),
}

/// When a batch of a stream retires its entries from the pending-instruction table.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Retirement {
    /// As the plan says: a sync after its last write, then the retirement, then the return
    /// (upstream's `text_poke_bp_batch()`).
    Plan,
    /// The batch returns after its last write; its entries stay published until the next
    /// batch's first sync (after that batch's guards), which every CPU's view then reflects,
    /// and retire right after it. The stream's last batch keeps its plan's sync and retirement
    /// (the bounded background sync when no batch follows).
    AtNextSync,
    /// Negative control: the last sync dropped, the entries retired right after the last
    /// write, before any sync.
    WithoutSync,
}

/// The batch under test.
#[derive(Clone, Debug)]
pub struct Batch {
    arch: Arch,
    changes: Vec<Change>,
    steps: Vec<Poke>,
    protocol: Protocol,
    /// Whether any write may fail, and how the commit then recovers.
    failing: Option<Recover>,
}

impl Batch {
    /// The steps `protocol` takes to apply `changes` on `arch`.
    pub fn new(arch: Arch, protocol: Protocol, changes: Vec<Change>) -> Self {
        let plan_protocol = match protocol {
            Protocol::Plan(p) => p,
            Protocol::SingleSlotTable => plan::Protocol::Guarded,
        };
        let n = changes.len();
        let steps = Plan::with_protocol(arch, plan_protocol, &changes)
            .steps()
            .map(|s| poke(s, 0, n))
            .collect();
        Self {
            arch,
            changes,
            steps,
            protocol,
            failing: None,
        }
    }

    /// Two guarded batches, `first` then `second` on other sites, each by its plan, the
    /// first one's entries retired as `retirement` says. Each returns to its caller
    /// ([`Poke::Return`]) where its plan ends, or after its last write if its retirement is
    /// put off.
    ///
    /// # Panics
    ///
    /// If a plan of `protocol` does not end with a sync and the retirement, or the second one
    /// has no sync (a plan that guards nothing).
    pub fn stream(
        arch: Arch,
        protocol: plan::Protocol,
        first: Vec<Change>,
        second: Vec<Change>,
        retirement: Retirement,
    ) -> Self {
        let (na, nb) = (first.len(), second.len());
        let plan = |changes: &[Change], lo: usize| -> Vec<Poke> {
            Plan::with_protocol(arch, protocol, changes)
                .steps()
                .map(|s| poke(shift(s, lo), lo, lo + changes.len()))
                .collect()
        };
        let mut a = plan(&first, 0);
        let mut b = plan(&second, na);
        let tail = [Poke::Plan(Step::Sync), Poke::Retire(0, na)];
        assert!(a.ends_with(&tail), "the first plan ends {:?}", a.last());
        match retirement {
            Retirement::Plan => a.push(Poke::Return(0, na)),
            Retirement::AtNextSync => {
                a.truncate(a.len() - tail.len());
                a.push(Poke::Return(0, na));
                let sync = b
                    .iter()
                    .position(|s| matches!(s, Poke::Plan(Step::Sync | Step::Unpark)))
                    .expect("the second plan syncs");
                b.insert(sync + 1, Poke::Retire(0, na));
            }
            Retirement::WithoutSync => {
                a.truncate(a.len() - tail.len());
                a.push(Poke::Retire(0, na));
                a.push(Poke::Return(0, na));
            }
        }
        b.push(Poke::Return(na, na + nb));
        a.extend(b);
        Self {
            arch,
            changes: first.into_iter().chain(second).collect(),
            steps: a,
            protocol: Protocol::Plan(protocol),
            failing: None,
        }
    }

    /// How many all-CPU syncs the poker makes (a parked section's end included).
    pub fn syncs(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Poke::Plan(Step::Sync | Step::Unpark)))
            .count()
    }

    /// The same batch, with every write of its plan also failing in one branch of the
    /// exploration (the writes before it made, it and the rest not), after which the poker takes
    /// the guards out as `recover` says and retires the batch. Every site must then hold what
    /// its record says (the new instruction if its record went out, the old one otherwise), and
    /// no execution meanwhile may break the invariant.
    pub fn failing(mut self, recover: Recover) -> Self {
        self.failing = Some(recover);
        self
    }

    fn chunks(&self) -> usize {
        match self.arch {
            Arch::X86 => 2,
            Arch::Arm64 => 1,
        }
    }

    /// Bytes of chunk `k` of instruction `insn`.
    fn chunk(&self, insn: &[u8], k: usize) -> Vec<u8> {
        match (self.arch, k) {
            (Arch::X86, 0) => insn[..1].to_vec(),
            (Arch::X86, _) => insn[1..].to_vec(),
            (Arch::Arm64, _) => insn.to_vec(),
        }
    }

    fn guard(&self, site: usize) -> Vec<u8> {
        match self.arch {
            Arch::X86 => {
                let mut bytes = self.changes[site].old.as_slice().to_vec();
                bytes[0] = X86_GUARD;
                bytes
            }
            Arch::Arm64 => ARM64_GUARD.to_vec(),
        }
    }

    fn is_guard(&self, bytes: &[u8]) -> bool {
        match self.arch {
            Arch::X86 => bytes[0] == X86_GUARD,
            Arch::Arm64 => bytes == ARM64_GUARD,
        }
    }
}

/// `step` of a plan of the sites `lo..hi` as the model runs it.
fn poke(step: Step, lo: usize, hi: usize) -> Poke {
    match step {
        Step::Publish => Poke::Publish(lo, hi),
        Step::Retire => Poke::Retire(lo, hi),
        s => Poke::Plan(s),
    }
}

/// `step` with its site index moved up by `by`.
fn shift(step: Step, by: usize) -> Step {
    match step {
        Step::WriteGuard(i) => Step::WriteGuard(i + by),
        Step::WriteTail(i) => Step::WriteTail(i + by),
        Step::Emit(i) => Step::Emit(i + by),
        Step::WriteHead(i) => Step::WriteHead(i + by),
        Step::WriteWhole(i) => Step::WriteWhole(i + by),
        Step::EmitBefore(i) => Step::EmitBefore(i + by),
        Step::EmitAfter(i) => Step::EmitAfter(i + by),
        s @ (Step::Park | Step::Unpark | Step::Publish | Step::Sync | Step::Retire) => s,
    }
}

/// One point of the exploration.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct State {
    /// Next poker step.
    pc: usize,
    /// Text in memory, per site.
    mem: Vec<Vec<u8>>,
    /// What each CPU would fetch, per site (`cpu * sites + site`).
    views: Vec<Vec<u8>>,
    /// Sites whose record has been emitted (with BEFORE/AFTER records: the AFTER one).
    recorded: Vec<bool>,
    /// Sites whose BEFORE record has been emitted (only [`plan::Protocol::BeforeAfter`]).
    announced: Vec<bool>,
    /// Inside a parked section: no CPU executes.
    parked: bool,
    /// Sites the per-address table resolves (the real engine: all of a batch, or none of it).
    published: Vec<bool>,
    /// The single-slot table's current site.
    slot: Option<usize>,
    /// After a failed write: where each site stood then, and the recovery's steps still to do.
    failed: Option<(Vec<Stranded>, Vec<Undo>)>,
}

impl State {
    fn initial(batch: &Batch, cpus: usize) -> Self {
        let mem: Vec<Vec<u8>> = batch
            .changes
            .iter()
            .map(|c| c.old.as_slice().to_vec())
            .collect();
        let views = (0..cpus).flat_map(|_| mem.iter().cloned()).collect();
        Self {
            pc: 0,
            recorded: vec![false; mem.len()],
            announced: vec![false; mem.len()],
            parked: false,
            mem,
            views,
            published: vec![false; batch.changes.len()],
            slot: None,
            failed: None,
        }
    }

    fn sites(&self) -> usize {
        self.mem.len()
    }

    fn sync_all(&mut self) {
        let sites = self.sites();
        for (i, view) in self.views.iter_mut().enumerate() {
            *view = self.mem[i % sites].clone();
        }
    }

    fn refresh_cpu(&mut self, cpu: usize) {
        let sites = self.sites();
        for site in 0..sites {
            self.views[cpu * sites + site] = self.mem[site].clone();
        }
    }

    /// If `step` writes text: its site, and the site's whole text once written.
    fn written(&self, batch: &Batch, step: Poke) -> Option<(usize, Vec<u8>)> {
        let Poke::Plan(step) = step else {
            return None;
        };
        let (site, text) = match step {
            Step::WriteGuard(i) => {
                let guard = batch.guard(i);
                let text = match batch.arch {
                    Arch::X86 => {
                        let mut text = self.mem[i].clone();
                        text[0] = guard[0];
                        text
                    }
                    Arch::Arm64 => guard,
                };
                (i, text)
            }
            Step::WriteTail(i) => {
                let mut text = self.mem[i].clone();
                text[1..].copy_from_slice(batch.changes[i].new.tail());
                (i, text)
            }
            Step::WriteHead(i) => match batch.arch {
                Arch::X86 => {
                    let mut text = self.mem[i].clone();
                    text[0] = batch.changes[i].new.head();
                    (i, text)
                }
                Arch::Arm64 => (i, batch.changes[i].new.as_slice().to_vec()),
            },
            Step::WriteWhole(i) => (i, batch.changes[i].new.as_slice().to_vec()),
            Step::Park
            | Step::Unpark
            | Step::Publish
            | Step::Sync
            | Step::Emit(_)
            | Step::EmitBefore(_)
            | Step::EmitAfter(_)
            | Step::Retire => return None,
        };
        Some((site, text))
    }

    /// Whether the poker's next step breaks the arm64 rule for concurrent modification and
    /// execution: it writes, outside a parked section (so other CPUs can fetch the site), over
    /// or with a word outside [`arm64_concurrently_modifiable`].
    fn unsafe_write(&self, batch: &Batch, cpus: usize) -> bool {
        if batch.arch != Arch::Arm64 || self.parked || cpus == 0 {
            return false;
        }
        let Some(&step) = batch.steps.get(self.pc) else {
            return false;
        };
        self.written(batch, step).is_some_and(|(site, text)| {
            !arm64_modifiable_bytes(&self.mem[site]) || !arm64_modifiable_bytes(&text)
        })
    }

    /// The state in which the poker's next step, a write, fails instead: where each site stands
    /// is read from memory, as the engine reads the text, and the recovery planned from it.
    fn fail(&self, batch: &Batch, recover: Recover) -> Option<State> {
        let step = *batch.steps.get(self.pc)?;
        self.written(batch, step)?;
        let stranded: Vec<Stranded> = batch
            .changes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let recorded = self.recorded[i];
                let target = if recorded { c.new } else { c.old };
                let tail = self.mem[i].get(1..);
                Stranded {
                    guarded: batch.is_guard(&self.mem[i]),
                    recorded,
                    tail_done: tail == target.as_slice().get(1..),
                    tail_written: batch.arch == Arch::X86 && tail != c.old.as_slice().get(1..),
                }
            })
            .collect();
        // Whether the plan wrote since its last sync, the failing write included (it may have
        // made some of its bytes).
        let unsynced = batch.steps[..=self.pc]
            .iter()
            .rev()
            .take_while(|s| !matches!(s, Poke::Plan(Step::Sync | Step::Unpark)))
            .any(|s| self.written(batch, *s).is_some());
        let undo = match recover {
            Recover::Plan | Recover::PlanForgettingWrites => Recovery::new(
                batch.arch,
                &batch.changes,
                &stranded,
                unsynced && recover == Recover::Plan,
            )
            .map(Undo::Repair)
            .collect(),
            Recover::WholeOverGuard => {
                let mut v: Vec<Undo> = (0..stranded.len())
                    .filter(|&i| stranded[i].guarded)
                    .map(Undo::Whole)
                    .collect();
                v.push(Undo::Repair(Repair::Sync));
                v
            }
        };
        let mut next = self.clone();
        next.failed = Some((stranded, undo));
        Some(next)
    }

    /// The recovery's next step, applied; `None` when it is done (the batch then retires).
    fn undo(&self, batch: &Batch) -> Option<State> {
        let (stranded, undo) = self.failed.as_ref()?;
        let (&first, rest) = undo.split_first()?;
        let mut next = self.clone();
        let target = |i: usize| stranded[i].target(&batch.changes[i]);
        match first {
            Undo::Repair(Repair::Sync) => next.sync_all(),
            Undo::Repair(Repair::Tail(i)) => next.mem[i][1..].copy_from_slice(target(i).tail()),
            Undo::Repair(Repair::Head(i)) => match batch.arch {
                Arch::X86 => next.mem[i][0] = target(i).head(),
                Arch::Arm64 => next.mem[i] = target(i).as_slice().to_vec(),
            },
            Undo::Whole(i) => next.mem[i] = target(i).as_slice().to_vec(),
        }
        next.failed = Some((stranded.clone(), rest.to_vec()));
        if rest.is_empty() {
            next.published.fill(false);
        }
        Some(next)
    }

    /// The poker's next step, applied; `None` when the plan is done.
    fn step(&self, batch: &Batch) -> Option<State> {
        if self.failed.is_some() {
            return self.undo(batch);
        }
        let step = *batch.steps.get(self.pc)?;
        let mut next = self.clone();
        next.pc += 1;
        if let Some((site, text)) = self.written(batch, step) {
            next.mem[site] = text;
        }
        let step = match step {
            Poke::Plan(s) => s,
            Poke::Publish(lo, hi) => {
                next.published[lo..hi].fill(true);
                return Some(next);
            }
            Poke::Retire(lo, hi) => {
                next.published[lo..hi].fill(false);
                next.slot = None;
                return Some(next);
            }
            Poke::Return(..) => return Some(next),
        };
        match step {
            Step::Park => next.parked = true,
            Step::Unpark => {
                next.parked = false;
                next.sync_all();
            }
            Step::WriteGuard(i) => {
                if batch.protocol == Protocol::SingleSlotTable {
                    next.slot = Some(i);
                }
            }
            Step::Sync => next.sync_all(),
            Step::Emit(i) | Step::EmitAfter(i) => next.recorded[i] = true,
            Step::EmitBefore(i) => next.announced[i] = true,
            // Plans publish and retire through `poke()`.
            Step::Publish | Step::Retire => unreachable!("a plan's table step is a Poke"),
            Step::WriteTail(_) | Step::WriteHead(_) | Step::WriteWhole(_) => {}
        }
        Some(next)
    }

    /// Whether every CPU executes each site of `lo..hi` as its new instruction: its view holds
    /// the text, which is the new instruction, or a guard the table resolves.
    fn in_effect(&self, batch: &Batch, lo: usize, hi: usize) -> bool {
        let sites = self.sites();
        (lo..hi).all(|site| {
            self.mem[site] == batch.changes[site].new.as_slice()
                && self
                    .views
                    .iter()
                    .skip(site)
                    .step_by(sites)
                    .all(|v| *v == self.mem[site] || (batch.is_guard(v) && self.published[site]))
        })
    }

    /// Classifies CPU `cpu` executing site `site` now.
    fn execute(&self, batch: &Batch, cpu: usize, site: usize) -> Outcome {
        let view = &self.views[cpu * self.sites() + site];
        let change = &batch.changes[site];
        if batch.is_guard(view) {
            // The single slot is keyed by address, as in the 2019 prototype's handler: a guard at
            // any other site is not recognized.
            let resolved = match batch.protocol {
                Protocol::SingleSlotTable => self.slot == Some(site),
                Protocol::Plan(_) => self.published[site],
            };
            return if resolved {
                Outcome::Trapped
            } else {
                Outcome::Bad(Violation::UnhandledTrap)
            };
        }
        // Between a BEFORE and its AFTER record the records allow either instruction.
        let undecided = self.announced[site] && !self.recorded[site];
        if view.as_slice() == change.old.as_slice() {
            if self.recorded[site] {
                Outcome::Bad(Violation::OldAfterRecord)
            } else if undecided {
                Outcome::Ambiguous
            } else {
                Outcome::Old
            }
        } else if view.as_slice() == change.new.as_slice() {
            if self.recorded[site] {
                Outcome::New
            } else if undecided {
                Outcome::Ambiguous
            } else {
                Outcome::Bad(Violation::NewBeforeRecord)
            }
        } else {
            Outcome::Bad(Violation::Torn)
        }
    }

    /// Every state one nondeterministic action away, and this state's executions, counted.
    fn explore(&self, batch: &Batch, cpus: usize, report: &mut Report) -> Vec<State> {
        let sites = self.sites();
        let mut next = Vec::new();
        // In a parked section every CPU spins in the stopper: no execution, refill or trap.
        let running = if self.parked { 0 } else { cpus };
        for cpu in 0..running {
            for site in 0..sites {
                let outcome = self.execute(batch, cpu, site);
                report.count(outcome);
                if outcome == Outcome::Trapped {
                    let mut s = self.clone();
                    s.refresh_cpu(cpu);
                    if s != *self {
                        next.push(s);
                    }
                }
                // A cache refill of any stale chunk.
                let view = &self.views[cpu * sites + site];
                for k in 0..batch.chunks() {
                    let fresh = batch.chunk(&self.mem[site], k);
                    if batch.chunk(view, k) != fresh {
                        let mut s = self.clone();
                        let v = &mut s.views[cpu * sites + site];
                        match (batch.arch, k) {
                            (Arch::X86, 0) => v[0] = fresh[0],
                            (Arch::X86, _) => v[1..].copy_from_slice(&fresh),
                            (Arch::Arm64, _) => *v = fresh,
                        }
                        next.push(s);
                    }
                }
            }
        }
        if self.failed.is_none() && self.unsafe_write(batch, cpus) {
            report.violation(Violation::UnsafeConcurrentModification);
        }
        if let (None, Some(&Poke::Return(lo, hi))) = (&self.failed, batch.steps.get(self.pc)) {
            if !self.in_effect(batch, lo, hi) {
                report.violation(Violation::StaleAtReturn);
            }
        }
        if let Some(recover) = batch.failing.filter(|_| self.failed.is_none()) {
            next.extend(self.fail(batch, recover));
        }
        match self.step(batch) {
            Some(s) => next.push(s),
            None => {
                for (site, change) in batch.changes.iter().enumerate() {
                    let want = match &self.failed {
                        Some((stranded, _)) => stranded[site].target(change),
                        None => change.new,
                    };
                    if self.mem[site] != want.as_slice() {
                        report.violation(Violation::FinalText);
                    }
                }
                if self
                    .views
                    .iter()
                    .enumerate()
                    .any(|(i, v)| *v != self.mem[i % self.sites()])
                {
                    report.violation(Violation::StaleAtReturn);
                }
            }
        }
        next
    }
}

/// Explores every interleaving of `batch` with `cpus` CPUs.
pub fn exhaustive(batch: &Batch, cpus: usize) -> Report {
    search(batch, cpus, None)
}

/// Explores interleavings of `batch` with `cpus` CPUs until violation `want` shows up.
///
/// For negative controls: the report says how many states it took to catch the protocol.
pub fn until(batch: &Batch, cpus: usize, want: Violation) -> Report {
    search(batch, cpus, Some(want))
}

fn search(batch: &Batch, cpus: usize, stop: Option<Violation>) -> Report {
    let mut report = Report::default();
    let mut seen = HashSet::new();
    let mut stack = vec![State::initial(batch, cpus)];
    while let Some(state) = stack.pop() {
        if !seen.insert(state.clone()) {
            continue;
        }
        report.states += 1;
        for next in state.explore(batch, cpus, &mut report) {
            if !seen.contains(&next) {
                stack.push(next);
            }
        }
        if stop.is_some_and(|v| report.found(v)) {
            break;
        }
    }
    report
}

/// Runs `walks` random interleavings of `batch` with `cpus` CPUs to the end of the plan.
///
/// `seed` makes runs reproducible (a small xorshift generator, so no dependency).
pub fn random_walks(batch: &Batch, cpus: usize, walks: usize, seed: u64) -> Report {
    let mut report = Report::default();
    let mut rng = seed | 1;
    let mut rand = move |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    for _ in 0..walks {
        let mut state = State::initial(batch, cpus);
        loop {
            report.states += 1;
            let next = state.explore(batch, cpus, &mut report);
            let done = state.pc >= batch.steps.len()
                && state
                    .failed
                    .as_ref()
                    .is_none_or(|(_, undo)| undo.is_empty());
            if next.is_empty() || (done && rand(4) == 0) {
                break;
            }
            // Favour the poker now and then so walks reach the end of the plan.
            state = if !done && rand(3) == 0 {
                next.last().cloned().unwrap_or(state)
            } else {
                next[rand(next.len())].clone()
            };
        }
    }
    report
}

/// A change from `old` to `new` bytes, made under a guard.
pub fn change(old: &[u8], new: &[u8]) -> Change {
    Change::new(
        InsnBytes::new(old).expect("test instruction within MAX_INSN_LEN"),
        InsnBytes::new(new).expect("test instruction within MAX_INSN_LEN"),
    )
}

/// A change from `old` to `new` bytes, made in a parked section.
pub fn parked(old: &[u8], new: &[u8]) -> Change {
    Change {
        parked: true,
        ..change(old, new)
    }
}
