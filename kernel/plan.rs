// SPDX-License-Identifier: GPL-2.0

//! The step planner: the exact order of writes, syncs and perf records for a batch.
//!
//! The plan is a sequence of typed phases ([`Phase`]: the parked section, a run of writes of one
//! kind, a run of records, a sync, ...). The engine runs each kind of phase with a function of
//! its own, with real primitives, and the host model (`textpoke-core`'s `model`) executes the
//! same phases step by step ([`Phase::steps`]) against simulated CPUs with stale instruction
//! views, so what is proven on the host is what runs in the kernel.
//!
//! A batch has up to two sections, in this order: a parked section for the changes marked
//! parked (see [`Change::parked()`]), and a guarded section for every other change. A change whose
//! old and new instruction are equal is not a change: it gets no write, no guard and no record,
//! and does not open a section. A batch without parked changes has no parked section and plans
//! exactly the guarded section; a batch whose changes are all parked has no guarded section (no
//! [`Step::Publish`], no [`Step::Retire`]).
//!
//! # The parked section
//!
//! Some changes must not be made while another CPU may execute the site, guard or no guard. The
//! arch layer marks them (`parked: true`). On arm64 the Arm ARM allows an instruction to be
//! replaced while another CPU may execute it only when the old and the new instruction are both
//! among `B`, `BL`, `BRK`, `NOP`, `SVC`, `HVC`, `SMC` and `ISB`, so a change from or to anything
//! else (`RET`, `MOV X9, X30`) is parked: writing a `BRK` guard over a `RET`, or a `RET` over the
//! guard, is itself outside that rule. x86 parks nothing today. When the batch has parked changes
//! that are not no-ops, the plan starts with:
//!
//! 1. [`Step::Park`]: `stop_machine()`. Every step up to [`Step::Unpark`] runs inside its callback
//!    on one CPU, while every other CPU spins in the stopper with interrupts masked. The callback
//!    starts only once every CPU has arrived there.
//! 2. For every parked change, [`Step::WriteWhole`] (the whole new instruction over the old one,
//!    with its cache maintenance), then its [`Step::Emit`]: one `PERF_RECORD_TEXT_POKE`, old and
//!    new instruction, exactly as in the guarded section.
//! 3. [`Step::Unpark`]: the callback returns; no CPU leaves the stopper before it has. Every other
//!    CPU context-synchronizes (arm64: `ISB`) before it leaves, and the poking CPU has done so
//!    after its cache maintenance.
//!
//! Nobody executes a parked site between 1 and 3: the other CPUs run only the stopper's loop and
//! take no interrupt, and the poking CPU runs only the callback (sites never lie in the engine's
//! own text). So the writes are not concurrent with any execution, whatever the instructions, and
//! the record is unambiguous without a guard: every execution of the site by any CPU either
//! happened before that CPU was parked, when memory held only the old instruction, so it ran the
//! old one, before the record; or happens after that CPU's context synchronization at step 3,
//! which follows the write and its cache maintenance, so it runs the new one, after the record.
//! No execution traps and none falls between the two. As for upstream's `stop_machine()`
//! patching, code that NMIs (x86 NMIs, arm64 pseudo-NMIs) can reach is out of scope:
//! `stop_machine()` does not stop them.
//!
//! # The guarded section
//!
//! For the changes that are not parked (all of them, in a batch without parked changes), the plan
//! continues with:
//!
//! 1. [`Step::Publish`]: make every site's new instruction findable by the trap handler. It
//!    must come before any guard: a guard nobody can resolve kills the CPU that hits it.
//! 2. [`Step::WriteGuard`] for every site, then [`Step::Sync`]. After this sync no CPU can
//!    execute the old instruction of any site: its instruction stream either shows the guard
//!    (and it traps) or, later, the new instruction. This is what makes the record's timestamp
//!    meaningful.
//! 3. x86 only: [`Step::WriteTail`] for every site, the new instruction's bytes after the first.
//!    No CPU decodes them: byte 0 is `INT3` everywhere since the sync. They come one after the
//!    other, so the arch writes them together (one temporary-mm session per 16 on x86).
//! 4. [`Step::Emit`]: one `PERF_RECORD_TEXT_POKE` per site, old and new instruction. Before its
//!    timestamp a CPU executed the old instruction or trapped; after it, the new one or trapped;
//!    trapped executions behave as the new instruction. (No CPU decodes a tail, so whether a
//!    site's tail was written before or after another site's record changes nothing.)
//! 5. x86 only, if any tail was written: [`Step::Sync`], so no CPU can see the new first byte
//!    with a stale tail.
//! 6. [`Step::WriteHead`]: the new first byte over the guard (x86), or the whole new instruction
//!    (arm64, where a 4-byte instruction is written atomically).
//! 7. [`Step::Sync`], then [`Step::Retire`]: a CPU may still execute a stale guard until the
//!    sync, so the entries must stay findable until it has completed.
//!
//! Syncs are skipped only where nothing they would order was written (upstream
//! `text_poke_bp_batch` does the same): the middle sync when no tail changed (single-byte
//! instructions, or identical tails), the last one when no head was written (the new instruction
//! is itself `INT3`).
//!
//! [`Protocol`] also describes deliberately weak or broken protocols. They are negative controls:
//! the host model must catch each of them, and the kernel module runs them only when its debug
//! parameter asks for it, to show that the guest's ordering checker catches them too. A protocol
//! only decides the section of the changes that are not parked: the parked section above is the
//! same under every protocol and on every arch.

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used
)]

use crate::insn::InsnBytes;

/// The x86 guard: `INT3`.
pub const X86_GUARD: u8 = 0xcc;

/// Which architecture's protocol to plan.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Arch {
    /// x86-64: variable-length instructions, guard over the first byte.
    X86,
    /// arm64: 4-byte instructions, written whole.
    Arm64,
}

/// One site's change: the instruction there now and the one to install.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Change {
    /// The instruction currently at the site.
    pub old: InsnBytes,
    /// The instruction to install.
    pub new: InsnBytes,
    /// Whether the change must be made while every other CPU is parked (the parked section of
    /// the module documentation) rather than under a guard. The arch layer decides: on arm64,
    /// when the old or the new instruction is outside the set that may be modified concurrently
    /// with its execution.
    pub parked: bool,
}

impl AsRef<Change> for Change {
    fn as_ref(&self) -> &Change {
        self
    }
}

impl Change {
    /// A change made under a guard, while other CPUs run.
    pub const fn new(old: InsnBytes, new: InsnBytes) -> Self {
        Self {
            old,
            new,
            parked: false,
        }
    }

    /// A change made while every other CPU is parked (`parked: true`).
    pub const fn parked(old: InsnBytes, new: InsnBytes) -> Self {
        Self {
            old,
            new,
            parked: true,
        }
    }

    /// Whether the change writes the bytes that are there already: nothing to guard or write.
    pub(crate) fn is_noop(&self) -> bool {
        self.old == self.new
    }
}

/// Which protocol a plan follows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Protocol {
    /// The guarded protocol described in the module documentation.
    Guarded,
    /// Broken on purpose: every record is emitted before the sync that makes the guards visible,
    /// so a CPU with a stale view can still execute the old instruction after the record.
    RecordBeforeGuardSync,
    /// Broken on purpose (x86): no sync between the tails and the first bytes, so a CPU can see
    /// a new first byte with a stale tail.
    HeadBeforeTailSync,
    /// Broken on purpose: upstream arm64's "nosync" patching plus a record. Each site gets its
    /// whole new instruction written directly, then its record; one sync at the end.
    UnguardedNosync,
    /// Weak on purpose: the pair of records proposed on LKML in January 2019 (the text_poke() record thread) around an unguarded change. Between
    /// [`Step::Publish`] and [`Step::Retire`], like every protocol's section: per site a BEFORE
    /// record ([`Step::EmitBefore`]) then the whole new instruction ([`Step::WriteWhole`]); one
    /// sync; then per site an AFTER record ([`Step::EmitAfter`]).
    ///
    /// Its records never lie about order: no CPU can run the new instruction before the site's
    /// BEFORE (it is not in memory yet), nor the old one after its AFTER (the sync precedes it).
    /// But between the two a CPU may run either, and nothing in the records says which: the host
    /// model counts those executions as ambiguous, where the single-record protocols leave none.
    /// Like [`Protocol::UnguardedNosync`] it writes without a guard, so on x86 a CPU can also see
    /// the new instruction torn.
    BeforeAfter,
    /// For when no tracer listens (no perf event asks for `PERF_RECORD_TEXT_POKE`): no record,
    /// and on arm64 no guard. arm64 writes each whole new instruction ([`Step::WriteWhole`]) and
    /// syncs once, as upstream's "nosync" patching does: allowed under execution for the
    /// changes that are not parked, which are exactly those the Arm ARM lets a CPU see change
    /// while it executes them. x86 keeps the guarded section, which a torn instruction rules
    /// out, without its records. The parked section is the same, without its records.
    ///
    /// Nobody can see the difference: the records are what a listener reads the text by, and
    /// the caller plans this only while it holds `text_mutex` from the moment it found no
    /// listener until the plan's last step, which a listener's arrival waits for
    /// (docs/protocol.md, "When nobody listens").
    Quiet,
}

/// One step of a plan; `usize` fields index the batch's changes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Step {
    /// Start the parked section: `stop_machine()`. Every step up to [`Step::Unpark`] runs in its
    /// callback, on one CPU, while every other CPU spins with interrupts masked.
    Park,
    /// End the parked section: the callback returns, and every other CPU context-synchronizes
    /// (arm64: `ISB`) before it resumes.
    Unpark,
    /// Insert the batch into the pending-instruction table.
    Publish,
    /// Replace the site's instruction (x86: its first byte) with the guard.
    WriteGuard(usize),
    /// Make every CPU's instruction stream reflect every write so far, and wait for it.
    Sync,
    /// x86: write the new instruction's bytes after the first.
    WriteTail(usize),
    /// Emit `PERF_RECORD_TEXT_POKE` with the site's old and new instruction.
    Emit(usize),
    /// Replace the guard with the new instruction (x86: its first byte; arm64: all of it).
    WriteHead(usize),
    /// Write the whole new instruction over the old one, unguarded: in the parked section, where
    /// nobody executes the site, or in [`Protocol::UnguardedNosync`] and
    /// [`Protocol::BeforeAfter`], which do it while other CPUs run.
    WriteWhole(usize),
    /// [`Protocol::BeforeAfter`]'s BEFORE record: the site is about to change (the kernel emits a
    /// `PERF_RECORD_TEXT_POKE` whose old and new bytes are both the old instruction).
    EmitBefore(usize),
    /// [`Protocol::BeforeAfter`]'s AFTER record: the site's change is complete (a
    /// `PERF_RECORD_TEXT_POKE` with the old and the new instruction).
    EmitAfter(usize),
    /// Remove the batch from the pending-instruction table.
    Retire,
}

/// A write that a [`Phase::Writes`] makes at each of its changes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Write {
    /// [`Step::WriteGuard`].
    Guard,
    /// [`Step::WriteTail`] (x86).
    Tail,
    /// [`Step::WriteHead`].
    Head,
    /// [`Step::WriteWhole`].
    Whole,
}

impl Write {
    /// This write's step at change `i`.
    pub const fn step(self, i: usize) -> Step {
        match self {
            Self::Guard => Step::WriteGuard(i),
            Self::Tail => Step::WriteTail(i),
            Self::Head => Step::WriteHead(i),
            Self::Whole => Step::WriteWhole(i),
        }
    }
}

/// A record that a [`Phase::Records`] emits for each of its changes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Record {
    /// [`Step::Emit`]: the change, old and new instruction.
    Change,
    /// [`Step::EmitAfter`]: [`Protocol::BeforeAfter`]'s AFTER record.
    After,
}

impl Record {
    /// This record's step for change `i`.
    pub const fn step(self, i: usize) -> Step {
        match self {
            Self::Change => Step::Emit(i),
            Self::After => Step::EmitAfter(i),
        }
    }
}

/// Which of a batch's changes a phase covers. A no-op change is in none.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Which {
    /// The parked ones: the parked section's.
    Parked,
    /// Those that are not parked: the guarded section's.
    Unparked,
    /// Of those, the ones with a tail to write: x86, where the new tail differs from the old.
    NewTail,
    /// Of those, the ones with a head to write: all but an x86 change to the guard itself
    /// (`INT3` is complete once the guard is there).
    NewHead,
}

/// The changes a phase covers, in batch order, each with its index in the batch: an iterator
/// that filters the batch as it goes, without allocating.
#[derive(Debug)]
pub struct Changes<'a, C = Change> {
    arch: Arch,
    changes: &'a [C],
    which: Which,
    next: usize,
}

// By hand: a derive would require `C: Clone`, and a `Changes` only holds a shared slice of them.
impl<C> Clone for Changes<'_, C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<C> Copy for Changes<'_, C> {}

impl<'a, C: AsRef<Change>> Changes<'a, C> {
    const fn new(arch: Arch, changes: &'a [C], which: Which) -> Self {
        Self {
            arch,
            changes,
            which,
            next: 0,
        }
    }

    /// Whether `change` is one of these.
    fn covers(&self, change: &Change) -> bool {
        let parked = change.parked;
        !change.is_noop()
            && match self.which {
                Which::Parked => parked,
                Which::Unparked => !parked,
                Which::NewTail => {
                    !parked && self.arch == Arch::X86 && change.new.tail() != change.old.tail()
                }
                Which::NewHead => {
                    !parked && (self.arch == Arch::Arm64 || change.new.head() != X86_GUARD)
                }
            }
    }

    /// Whether any change is one of these.
    fn any(&self) -> bool {
        self.changes
            .iter()
            .any(|change| self.covers(change.as_ref()))
    }

    /// These changes, if a phase of them is due: the section has `guards` and any change is
    /// one of these.
    fn filter_due(self, guards: bool) -> Option<Self> {
        (guards && self.any()).then_some(self)
    }
}

impl<'a, C: AsRef<Change>> Iterator for Changes<'a, C> {
    type Item = (usize, &'a C);

    fn next(&mut self) -> Option<(usize, &'a C)> {
        while let Some(item) = self.changes.get(self.next) {
            let index = self.next;
            self.next = self.next.saturating_add(1);
            if self.covers(item.as_ref()) {
                return Some((index, item));
            }
        }
        None
    }
}

/// One phase of a plan: a run of steps of one kind over a set of changes, or one step alone.
/// The engine runs each kind of phase with a function of its own, the writes of a phase handed
/// to the arch together; [`Phase::steps`] spells a phase out step by step, as the host model
/// executes it.
#[derive(Debug)]
pub enum Phase<'a, C = Change> {
    /// The parked section: [`Step::Park`], then per change its whole new instruction
    /// ([`Step::WriteWhole`]) followed, if `records`, by its record ([`Step::Emit`]), then
    /// [`Step::Unpark`].
    Parked {
        /// The parked changes.
        changes: Changes<'a, C>,
        /// Whether each write is followed by its record (every protocol's but
        /// [`Protocol::Quiet`]).
        records: bool,
    },
    /// [`Step::Publish`].
    Publish,
    /// One write per change, all of one kind, one after the other.
    Writes(Write, Changes<'a, C>),
    /// One record per change, all of one kind, one after the other.
    Records(Record, Changes<'a, C>),
    /// [`Protocol::UnguardedNosync`]: per change its whole new instruction, then its record.
    WriteThenRecord(Changes<'a, C>),
    /// [`Protocol::BeforeAfter`]: per change its BEFORE record, then its whole new instruction.
    AnnounceThenWrite(Changes<'a, C>),
    /// [`Step::Sync`].
    Sync,
    /// [`Step::Retire`].
    Retire,
}

impl<C> Clone for Phase<'_, C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<C> Copy for Phase<'_, C> {}

impl<'a, C: AsRef<Change>> Phase<'a, C> {
    /// The phase's steps, in order.
    pub fn steps(self) -> PhaseSteps<'a, C> {
        PhaseSteps {
            phase: self,
            at: At::Start,
        }
    }
}

/// Where [`PhaseSteps`] stands.
#[derive(Clone, Copy, Debug)]
enum At {
    /// Before the phase's first step.
    Start,
    /// Among its changes.
    Changes,
    /// The current change's second step is due.
    Second(Step),
    /// After the last change: the closing step, if any, is due.
    End,
    /// Past the end.
    Done,
}

/// The steps of one [`Phase`], in order ([`Phase::steps`]).
#[derive(Clone, Debug)]
pub struct PhaseSteps<'a, C = Change> {
    phase: Phase<'a, C>,
    at: At,
}

impl<C: AsRef<Change>> Iterator for PhaseSteps<'_, C> {
    type Item = Step;

    fn next(&mut self) -> Option<Step> {
        loop {
            match self.at {
                At::Start => {
                    self.at = At::Changes;
                    let alone = match self.phase {
                        Phase::Parked { .. } => return Some(Step::Park),
                        Phase::Publish => Step::Publish,
                        Phase::Sync => Step::Sync,
                        Phase::Retire => Step::Retire,
                        _ => continue,
                    };
                    self.at = At::Done;
                    return Some(alone);
                }
                At::Second(step) => {
                    self.at = At::Changes;
                    return Some(step);
                }
                At::Changes => {
                    let (first, second) = match &mut self.phase {
                        Phase::Parked { changes, records } => {
                            let records = *records;
                            changes.next().map(|(i, _)| {
                                (Step::WriteWhole(i), records.then_some(Step::Emit(i)))
                            })
                        }
                        Phase::Writes(write, changes) => {
                            let write = *write;
                            changes.next().map(|(i, _)| (write.step(i), None))
                        }
                        Phase::Records(record, changes) => {
                            let record = *record;
                            changes.next().map(|(i, _)| (record.step(i), None))
                        }
                        Phase::WriteThenRecord(changes) => changes
                            .next()
                            .map(|(i, _)| (Step::WriteWhole(i), Some(Step::Emit(i)))),
                        Phase::AnnounceThenWrite(changes) => changes
                            .next()
                            .map(|(i, _)| (Step::EmitBefore(i), Some(Step::WriteWhole(i)))),
                        Phase::Publish | Phase::Sync | Phase::Retire => None,
                    }
                    .unzip();
                    match first {
                        Some(step) => {
                            if let Some(second) = second.flatten() {
                                self.at = At::Second(second);
                            }
                            return Some(step);
                        }
                        None => self.at = At::End,
                    }
                }
                At::End => {
                    self.at = At::Done;
                    if let Phase::Parked { .. } = self.phase {
                        return Some(Step::Unpark);
                    }
                }
                At::Done => return None,
            }
        }
    }
}

/// The phases of one batch, in order, computed without allocating.
///
/// The batch is any slice of items that are (or hold) a [`Change`], so that a caller can keep
/// each change with whatever else it knows about the site.
#[derive(Clone, Debug)]
pub struct Plan<'a, C = Change> {
    phases: core::array::IntoIter<Option<Phase<'a, C>>, 11>,
}

impl<'a, C: AsRef<Change>> Plan<'a, C> {
    /// Plans the batch `changes` for `arch` with the guarded protocol.
    pub fn new(arch: Arch, changes: &'a [C]) -> Self {
        Self::with_protocol(arch, Protocol::Guarded, changes)
    }

    /// Plans the batch `changes` for `arch` with `protocol`: the parked section, then the
    /// section of the other changes as `protocol` has it (module documentation), each phase
    /// present only if it has something to do.
    pub fn with_protocol(arch: Arch, protocol: Protocol, changes: &'a [C]) -> Self {
        let which = |which| Changes::new(arch, changes, which);
        let (parked, unparked) = (which(Which::Parked), which(Which::Unparked));
        // Whether the section of the changes that are not parked puts guards in front of them.
        let guards = match protocol {
            Protocol::Guarded | Protocol::RecordBeforeGuardSync | Protocol::HeadBeforeTailSync => {
                true
            }
            Protocol::Quiet => arch == Arch::X86,
            Protocol::UnguardedNosync | Protocol::BeforeAfter => false,
        };
        let first = match protocol {
            Protocol::UnguardedNosync => Phase::WriteThenRecord(unparked),
            Protocol::BeforeAfter => Phase::AnnounceThenWrite(unparked),
            _ if guards => Phase::Writes(Write::Guard, unparked),
            _ => Phase::Writes(Write::Whole, unparked),
        };
        let early = (protocol == Protocol::RecordBeforeGuardSync)
            .then_some(Phase::Records(Record::Change, unparked));
        let records = match protocol {
            Protocol::Guarded | Protocol::HeadBeforeTailSync => {
                Some(Phase::Records(Record::Change, unparked))
            }
            Protocol::BeforeAfter => Some(Phase::Records(Record::After, unparked)),
            // Early, with their writes, or none.
            Protocol::RecordBeforeGuardSync | Protocol::UnguardedNosync | Protocol::Quiet => None,
        };
        let tails = which(Which::NewTail).filter_due(guards);
        let heads = which(Which::NewHead).filter_due(guards);
        let tail_sync = tails.is_some() && protocol != Protocol::HeadBeforeTailSync;
        // A batch whose changes are all parked, or no change, has no such section.
        let any_unparked = unparked.any();
        let section = |phase: Option<Phase<'a, C>>| phase.filter(|_| any_unparked);
        Self {
            phases: [
                parked.any().then_some(Phase::Parked {
                    changes: parked,
                    records: protocol != Protocol::Quiet,
                }),
                section(Some(Phase::Publish)),
                section(Some(first)),
                section(early),
                // After the guards (or the unguarded writes).
                section(Some(Phase::Sync)),
                section(tails.map(|tails| Phase::Writes(Write::Tail, tails))),
                section(records),
                section(tail_sync.then_some(Phase::Sync)),
                section(heads.map(|heads| Phase::Writes(Write::Head, heads))),
                section(heads.map(|_| Phase::Sync)),
                section(Some(Phase::Retire)),
            ]
            .into_iter(),
        }
    }

    /// The plan's steps, phase after phase.
    pub fn steps(self) -> impl Iterator<Item = Step> + 'a
    where
        C: 'a,
    {
        self.flat_map(Phase::steps)
    }
}

impl<'a, C: AsRef<Change>> Iterator for Plan<'a, C> {
    type Item = Phase<'a, C>;

    fn next(&mut self) -> Option<Phase<'a, C>> {
        self.phases.by_ref().flatten().next()
    }
}

/// Where a site of a commit that failed part way stands, as read back from the text (see
/// [`Recovery`]).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Debug)]
pub struct Stranded {
    /// It holds the guard.
    pub guarded: bool,
    /// Its record went out: it goes on to its new instruction; otherwise back to its old one.
    pub recorded: bool,
    /// x86: the bytes behind the guard are already its target's.
    pub tail_done: bool,
    /// x86: the bytes behind the guard are no longer the old instruction's: the plan wrote the
    /// new tail, which a CPU may not have refetched since (the plan's next sync did not come).
    pub tail_written: bool,
}

impl Stranded {
    /// The instruction the site ends with.
    pub fn target(&self, change: &Change) -> InsnBytes {
        if self.recorded {
            change.new
        } else {
            change.old
        }
    }
}

/// One step of a [`Recovery`]; `usize` fields index the batch's changes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Repair {
    /// x86: write the target's bytes after the first, behind the guard.
    Tail(usize),
    /// Make every CPU's instruction stream reflect every write so far, and wait for it.
    Sync,
    /// Replace the guard with the target's head (x86: its first byte; arm64: all of it).
    Head(usize),
}

/// How a commit whose write failed takes its guards out: by the plan's own rules, so that no
/// CPU can execute a torn instruction, and every site ends as its record says.
///
/// A site that holds the guard goes to its new instruction if its record went out (a decoder
/// switched to it at the record), to its old one otherwise; every other site is whole already.
/// As in the guarded section, on x86 the tails go first, while every guard stands, then a
/// sync if any tail behind a guard changed since the guards' sync (written now, or by the plan
/// before it failed), so that no CPU can see a head with a stale tail; then the heads; then a
/// sync, after which no CPU executes a guard and the batch may retire. That last sync comes too
/// when no guard is left but the plan wrote since its last sync (a quiet arm64 batch's nosync
/// writes): the caller must not return before every CPU fetches what was written, as the plan's
/// own final sync ensures when nothing fails. Writing each site whole
/// over its guard instead (what a single write of the target would do) lets a CPU that
/// refetches the first byte see it with a stale tail: the host model catches that as a torn
/// execution.
#[derive(Clone, Debug)]
pub struct Recovery<'a, C = Change> {
    arch: Arch,
    changes: &'a [C],
    sites: &'a [Stranded],
    phase: RecoveryPhase,
    next: usize,
    wrote: bool,
    /// The plan wrote since its last sync, before it failed.
    unsynced: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RecoveryPhase {
    Tails,
    TailSync,
    Heads,
    HeadSync,
    Done,
}

impl<'a, C: AsRef<Change>> Recovery<'a, C> {
    /// The recovery of the batch `changes` on `arch`, whose sites stand as `sites` says (one
    /// per change; a missing one counts as not guarded), after a plan that wrote since its last
    /// sync if `unsynced` (a write that failed part way counts: some of its bytes may be made).
    pub fn new(arch: Arch, changes: &'a [C], sites: &'a [Stranded], unsynced: bool) -> Self {
        Self {
            arch,
            changes,
            sites,
            phase: RecoveryPhase::Tails,
            next: 0,
            wrote: false,
            unsynced,
        }
    }

    /// Next guarded site at or after `self.next` for which `wanted` holds, and advances past it.
    fn next_site(&mut self, wanted: impl Fn(Arch, &Change, &Stranded) -> bool) -> Option<usize> {
        while let Some(change) = self.changes.get(self.next).map(AsRef::as_ref) {
            let index = self.next;
            self.next = self.next.saturating_add(1);
            let site = self.sites.get(index).copied().unwrap_or_default();
            if site.guarded && wanted(self.arch, change, &site) {
                return Some(index);
            }
        }
        None
    }

    fn enter(&mut self, phase: RecoveryPhase) {
        self.phase = phase;
        self.next = 0;
    }
}

impl<C: AsRef<Change>> Iterator for Recovery<'_, C> {
    type Item = Repair;

    fn next(&mut self) -> Option<Repair> {
        loop {
            match self.phase {
                RecoveryPhase::Tails => {
                    let tail = |arch, change: &Change, site: &Stranded| {
                        arch == Arch::X86
                            && !site.tail_done
                            && !site.target(change).tail().is_empty()
                    };
                    match self.next_site(tail) {
                        Some(i) => {
                            self.wrote = true;
                            return Some(Repair::Tail(i));
                        }
                        None => self.enter(RecoveryPhase::TailSync),
                    }
                }
                RecoveryPhase::TailSync => {
                    self.enter(RecoveryPhase::Heads);
                    let stale = self.sites.iter().any(|s| s.guarded && s.tail_written);
                    if core::mem::take(&mut self.wrote) || stale {
                        // It syncs what the plan wrote too.
                        self.unsynced = false;
                        return Some(Repair::Sync);
                    }
                }
                RecoveryPhase::Heads => match self.next_site(|_, _, _| true) {
                    Some(i) => {
                        self.wrote = true;
                        return Some(Repair::Head(i));
                    }
                    None => self.enter(RecoveryPhase::HeadSync),
                },
                RecoveryPhase::HeadSync => {
                    self.enter(RecoveryPhase::Done);
                    let unsynced = core::mem::take(&mut self.unsynced);
                    if core::mem::take(&mut self.wrote) || unsynced {
                        return Some(Repair::Sync);
                    }
                }
                RecoveryPhase::Done => return None,
            }
        }
    }
}

/// What a plan costs: the numbers the benchmarks compare against upstream.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Cost {
    /// All-CPU syncs (machine-wide IPI rounds). Parked sections are not counted here.
    pub syncs: usize,
    /// Text writes (guards, tails, heads and whole instructions, parked or not).
    pub writes: usize,
    /// `PERF_RECORD_TEXT_POKE` records (BEFORE and AFTER records count one each).
    pub records: usize,
    /// Parked sections (`stop_machine()` rounds): 0 or 1 per batch. Counted apart from
    /// [`Cost::syncs`] because it costs more than an IPI round: every CPU stops, with interrupts
    /// masked, for as long as the section's writes and records take.
    pub parked: usize,
}

impl Cost {
    /// Counts the steps of `plan`.
    pub fn of<C: AsRef<Change>>(plan: Plan<'_, C>) -> Self {
        plan.flat_map(Phase::steps)
            .fold(Self::default(), |mut cost, step| {
                match step {
                    Step::Sync => cost.syncs = cost.syncs.saturating_add(1),
                    Step::WriteGuard(_)
                    | Step::WriteTail(_)
                    | Step::WriteHead(_)
                    | Step::WriteWhole(_) => cost.writes = cost.writes.saturating_add(1),
                    Step::Emit(_) | Step::EmitBefore(_) | Step::EmitAfter(_) => {
                        cost.records = cost.records.saturating_add(1)
                    }
                    Step::Park => cost.parked = cost.parked.saturating_add(1),
                    Step::Publish | Step::Retire | Step::Unpark => {}
                }
                cost
            })
    }
}

/// Who takes `text_mutex` for a commit.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum TextHolder {
    /// The commit takes it itself: a module's batch (`Batch::commit`).
    Commit,
    /// Its caller holds it from before the decision to after the last step: a batch of the
    /// kernel's own changes (`Batch::commit_kernel`), as upstream's `text_poke_bp_batch()` runs
    /// under its caller's `text_mutex`.
    Caller,
}

/// Whether a commit lets go of `text_mutex` across its next [`Step::Sync`]: the one rule the
/// engine's locks follow (`ModuleLocks` in kernel/batch.rs) and the host model of the listener
/// handshake runs (`textpoke-core`'s `listener`), so that what the model proves is what the
/// kernel does.
///
/// A listener starts to receive records under `text_mutex` (patch 0011), so while a commit
/// holds it, no listener arrives. Before a guarded batch's first record an arriving listener
/// copies each site with its old instruction or its guard, and receives every record; releasing
/// the mutex across those syncs lets other batches and the kernel's pokers write meanwhile.
/// From its first record on, a listener that arrived would copy a site whose record it missed
/// before its head is written (x86 syncs between its records and its heads), and nothing would
/// complete that guard in its copy: held to the end. After a failed step as well: recovery's
/// writes undo guards whose records went out or never will. docs/protocol.md, "When nobody
/// listens", gives the whole argument.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AcrossSyncs {
    /// Released across a sync: other batches and the kernel's pokers write meanwhile.
    Released,
    /// Held from now to the commit's end, syncs included.
    Held,
}

impl AcrossSyncs {
    /// At a commit's start: a module's batch that found a listener (it guards and records)
    /// releases across its syncs until its first record; a quiet one holds `text_mutex` to its
    /// end, since a listener that arrived in between would copy writes it gets no records of;
    /// a kernel batch's caller holds it throughout.
    pub fn at_start(holder: TextHolder, listening: bool) -> Self {
        match holder {
            TextHolder::Commit if listening => Self::Released,
            TextHolder::Commit | TextHolder::Caller => Self::Held,
        }
    }

    /// A record went out: held from now to the end.
    pub fn recorded(&mut self) {
        *self = Self::Held;
    }

    /// A step failed: held from now to the end, recovery included. Recovery's writes complete or
    /// undo changes whose records went out (or never will), so a listener arriving among them
    /// would copy a guard that is then taken out with no record for it; and a kprobe armed at a
    /// site recovery has restored would trap into the batch, still published, and its handler
    /// would never run.
    pub fn failed(&mut self) {
        *self = Self::Held;
    }

    /// Whether the next sync lets go of `text_mutex`.
    pub fn releases(self) -> bool {
        self == Self::Released
    }
}
