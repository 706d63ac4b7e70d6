// SPDX-License-Identifier: GPL-2.0

//! The step planner: the exact order of writes, syncs and perf records for a batch.
//!
//! The engine executes these steps verbatim with real primitives, and the host model
//! (`textpoke-core`'s `model`) executes the same steps against simulated CPUs with stale
//! instruction views, so what is proven on the host is what runs in the kernel.
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

    fn is_noop(&self) -> bool {
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

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Park,
    Parked,
    Unpark,
    Publish,
    Unguarded,
    Announced,
    AfterSync,
    AfterRecords,
    Guards,
    GuardSync,
    Tails,
    Records,
    TailSync,
    Heads,
    HeadSync,
    Retire,
    Done,
}

/// The steps of one batch, in order, computed lazily without allocating.
///
/// The batch is any slice of items that are (or hold) a [`Change`], so that a caller can keep
/// each change with whatever else it knows about the site.
#[derive(Clone, Debug)]
pub struct Plan<'a, C = Change> {
    arch: Arch,
    protocol: Protocol,
    changes: &'a [C],
    phase: Phase,
    /// Next change to consider in the current phase.
    next: usize,
    /// In `Parked` and `Unguarded`, whether the current change's record is still due.
    record_due: bool,
    /// In `Announced`, whether the current change's write is still due (its BEFORE went out).
    write_due: bool,
    wrote_guard: bool,
    wrote_tail: bool,
    wrote_head: bool,
}

impl<'a, C: AsRef<Change>> Plan<'a, C> {
    /// Plans the batch `changes` for `arch` with the guarded protocol.
    pub fn new(arch: Arch, changes: &'a [C]) -> Self {
        Self::with_protocol(arch, Protocol::Guarded, changes)
    }

    /// Plans the batch `changes` for `arch` with `protocol`.
    pub fn with_protocol(arch: Arch, protocol: Protocol, changes: &'a [C]) -> Self {
        Self {
            arch,
            protocol,
            changes,
            phase: Phase::Park,
            next: 0,
            record_due: false,
            write_due: false,
            wrote_guard: false,
            wrote_tail: false,
            wrote_head: false,
        }
    }

    /// Next change at or after `self.next` that is not a no-op and belongs to the current
    /// section (parked in `Parked`, not parked elsewhere), and advances past it.
    fn next_change(&mut self) -> Option<(usize, &'a Change)> {
        let parked = self.phase == Phase::Parked;
        while let Some(change) = self.changes.get(self.next).map(AsRef::as_ref) {
            let index = self.next;
            self.next = self.next.saturating_add(1);
            if !change.is_noop() && change.parked == parked {
                return Some((index, change));
            }
        }
        None
    }

    fn enter(&mut self, phase: Phase) {
        self.phase = phase;
        self.next = 0;
        self.record_due = false;
        self.write_due = false;
    }

    /// Whether the plan emits records: every protocol's but [`Protocol::Quiet`].
    fn records(&self) -> bool {
        self.protocol != Protocol::Quiet
    }

    fn tail_changes(change: &Change) -> bool {
        change.new.tail() != change.old.tail()
    }

    fn head_needed(&self, change: &Change) -> bool {
        match self.arch {
            // A new instruction that is itself `INT3` is complete once the guard is there.
            Arch::X86 => change.new.head() != X86_GUARD,
            Arch::Arm64 => true,
        }
    }
}

impl<C: AsRef<Change>> Iterator for Plan<'_, C> {
    type Item = Step;

    fn next(&mut self) -> Option<Step> {
        loop {
            match self.phase {
                Phase::Park => {
                    if self
                        .changes
                        .iter()
                        .map(AsRef::as_ref)
                        .any(|c| c.parked && !c.is_noop())
                    {
                        self.enter(Phase::Parked);
                        return Some(Step::Park);
                    }
                    self.enter(Phase::Publish);
                }
                Phase::Parked => {
                    if self.record_due {
                        self.record_due = false;
                        return Some(Step::Emit(self.next.saturating_sub(1)));
                    }
                    match self.next_change() {
                        Some((i, _)) => {
                            self.record_due = self.records();
                            return Some(Step::WriteWhole(i));
                        }
                        None => self.enter(Phase::Unpark),
                    }
                }
                Phase::Unpark => {
                    self.enter(Phase::Publish);
                    return Some(Step::Unpark);
                }
                Phase::Publish => {
                    self.enter(match (self.protocol, self.arch) {
                        (Protocol::UnguardedNosync, _) | (Protocol::Quiet, Arch::Arm64) => {
                            Phase::Unguarded
                        }
                        (Protocol::BeforeAfter, _) => Phase::Announced,
                        _ => Phase::Guards,
                    });
                    if self
                        .changes
                        .iter()
                        .map(AsRef::as_ref)
                        .all(|c| c.is_noop() || c.parked)
                    {
                        self.phase = Phase::Done;
                        return None;
                    }
                    return Some(Step::Publish);
                }
                Phase::Unguarded => {
                    if self.record_due {
                        self.record_due = false;
                        return Some(Step::Emit(self.next.saturating_sub(1)));
                    }
                    match self.next_change() {
                        Some((i, _)) => {
                            self.wrote_head = true;
                            self.record_due = self.records();
                            return Some(Step::WriteWhole(i));
                        }
                        None => self.enter(Phase::HeadSync),
                    }
                }
                Phase::Announced => {
                    if self.write_due {
                        self.write_due = false;
                        self.wrote_head = true;
                        return Some(Step::WriteWhole(self.next.saturating_sub(1)));
                    }
                    match self.next_change() {
                        Some((i, _)) => {
                            self.write_due = true;
                            return Some(Step::EmitBefore(i));
                        }
                        None => self.enter(Phase::AfterSync),
                    }
                }
                Phase::AfterSync => {
                    self.enter(Phase::AfterRecords);
                    if self.wrote_head {
                        return Some(Step::Sync);
                    }
                }
                Phase::AfterRecords => match self.next_change() {
                    Some((i, _)) => return Some(Step::EmitAfter(i)),
                    None => self.enter(Phase::Retire),
                },
                Phase::Guards => match self.next_change() {
                    Some((i, _)) => {
                        self.wrote_guard = true;
                        return Some(Step::WriteGuard(i));
                    }
                    None => self.enter(Phase::GuardSync),
                },
                Phase::GuardSync => {
                    if self.protocol == Protocol::RecordBeforeGuardSync {
                        // The broken order: every record, then the sync.
                        if let Some((i, _)) = self.next_change() {
                            return Some(Step::Emit(i));
                        }
                    }
                    self.enter(Phase::Tails);
                    if self.wrote_guard {
                        return Some(Step::Sync);
                    }
                }
                Phase::Tails => match self.next_change() {
                    Some((i, change)) => {
                        if self.arch == Arch::X86 && Self::tail_changes(change) {
                            self.wrote_tail = true;
                            return Some(Step::WriteTail(i));
                        }
                    }
                    None => self.enter(if self.protocol == Protocol::RecordBeforeGuardSync {
                        Phase::TailSync
                    } else {
                        Phase::Records
                    }),
                },
                Phase::Records => match self.next_change() {
                    Some((i, _)) if self.records() => return Some(Step::Emit(i)),
                    Some(_) => {}
                    None => self.enter(Phase::TailSync),
                },
                Phase::TailSync => {
                    self.enter(Phase::Heads);
                    if self.wrote_tail && self.protocol != Protocol::HeadBeforeTailSync {
                        return Some(Step::Sync);
                    }
                }
                Phase::Heads => match self.next_change() {
                    Some((i, change)) => {
                        if self.head_needed(change) {
                            self.wrote_head = true;
                            return Some(Step::WriteHead(i));
                        }
                    }
                    None => self.enter(Phase::HeadSync),
                },
                Phase::HeadSync => {
                    self.enter(Phase::Retire);
                    if self.wrote_head {
                        return Some(Step::Sync);
                    }
                }
                Phase::Retire => {
                    self.phase = Phase::Done;
                    return Some(Step::Retire);
                }
                Phase::Done => return None,
            }
        }
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
/// sync, after which no CPU executes a guard and the batch may retire. Writing each site whole
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
    /// per change; a missing one counts as not guarded).
    pub fn new(arch: Arch, changes: &'a [C], sites: &'a [Stranded]) -> Self {
        Self {
            arch,
            changes,
            sites,
            phase: RecoveryPhase::Tails,
            next: 0,
            wrote: false,
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
                    if core::mem::take(&mut self.wrote) {
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
        plan.fold(Self::default(), |mut cost, step| {
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
