// SPDX-License-Identifier: GPL-2.0

//! The step planner: the exact order of writes, syncs and perf records for a guarded batch.
//!
//! The engine executes these steps verbatim with real primitives, and the host model
//! (`textpoke-core`'s `model`) executes the same steps against simulated CPUs with stale
//! instruction views, so what is proven on the host is what runs in the kernel.
//!
//! For a batch of changes the plan is:
//!
//! 1. [`Step::Publish`]: make every site's new instruction findable by the trap handler. It
//!    must come first: a guard nobody can resolve kills the CPU that hits it.
//! 2. [`Step::WriteGuard`] for every site, then [`Step::Sync`]. After this sync no CPU can
//!    execute the old instruction of any site: its instruction stream either shows the guard
//!    (and it traps) or, later, the new instruction. This is what makes the record's timestamp
//!    meaningful.
//! 3. x86 only: [`Step::WriteTail`], the new instruction's bytes after the first. No CPU decodes
//!    them: byte 0 is `INT3` everywhere since the sync.
//! 4. [`Step::Emit`]: one `PERF_RECORD_TEXT_POKE` per site, old and new instruction. Before its
//!    timestamp a CPU executed the old instruction or trapped; after it, the new one or trapped;
//!    trapped executions behave as the new instruction.
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
//! is itself `INT3`). A change whose old and new instruction are equal is not a change: it gets
//! no guard, no record and no write.
//!
//! [`Protocol`] also describes deliberately broken protocols. They are negative controls: the
//! host model must catch each of them, and the kernel module runs them only when its debug
//! parameter asks for it, to show that the guest's ordering checker catches them too.

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
}

impl Change {
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
}

/// One step of a plan; `usize` fields index the batch's changes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Step {
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
    /// Write the whole new instruction over the old one, unguarded (only
    /// [`Protocol::UnguardedNosync`] does this).
    WriteWhole(usize),
    /// Remove the batch from the pending-instruction table.
    Retire,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Publish,
    Unguarded,
    Guards,
    GuardSync,
    TailsAndRecords,
    TailSync,
    Heads,
    HeadSync,
    Retire,
    Done,
}

/// The steps of one batch, in order, computed lazily without allocating.
#[derive(Clone, Debug)]
pub struct Plan<'a> {
    arch: Arch,
    protocol: Protocol,
    changes: &'a [Change],
    phase: Phase,
    /// Next change to consider in the current phase.
    next: usize,
    /// In `TailsAndRecords` (x86), whether the current change's record is still due.
    record_due: bool,
    wrote_guard: bool,
    wrote_tail: bool,
    wrote_head: bool,
}

impl<'a> Plan<'a> {
    /// Plans the batch `changes` for `arch` with the guarded protocol.
    pub fn new(arch: Arch, changes: &'a [Change]) -> Self {
        Self::with_protocol(arch, Protocol::Guarded, changes)
    }

    /// Plans the batch `changes` for `arch` with `protocol`.
    pub fn with_protocol(arch: Arch, protocol: Protocol, changes: &'a [Change]) -> Self {
        Self {
            arch,
            protocol,
            changes,
            phase: Phase::Publish,
            next: 0,
            record_due: false,
            wrote_guard: false,
            wrote_tail: false,
            wrote_head: false,
        }
    }

    /// Next change at or after `self.next` that is not a no-op, and advances past it.
    fn next_change(&mut self) -> Option<(usize, &'a Change)> {
        while let Some(change) = self.changes.get(self.next) {
            let index = self.next;
            self.next = self.next.saturating_add(1);
            if !change.is_noop() {
                return Some((index, change));
            }
        }
        None
    }

    fn enter(&mut self, phase: Phase) {
        self.phase = phase;
        self.next = 0;
        self.record_due = false;
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

impl Iterator for Plan<'_> {
    type Item = Step;

    fn next(&mut self) -> Option<Step> {
        loop {
            match self.phase {
                Phase::Publish => {
                    self.enter(match self.protocol {
                        Protocol::UnguardedNosync => Phase::Unguarded,
                        _ => Phase::Guards,
                    });
                    if self.changes.iter().all(Change::is_noop) {
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
                            self.record_due = true;
                            return Some(Step::WriteWhole(i));
                        }
                        None => self.enter(Phase::HeadSync),
                    }
                }
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
                    self.enter(Phase::TailsAndRecords);
                    if self.wrote_guard {
                        return Some(Step::Sync);
                    }
                }
                Phase::TailsAndRecords => {
                    if self.record_due {
                        // `next` already moved past the change whose tail was just written.
                        self.record_due = false;
                        return Some(Step::Emit(self.next.saturating_sub(1)));
                    }
                    match self.next_change() {
                        Some((i, change)) => {
                            let record = self.protocol != Protocol::RecordBeforeGuardSync;
                            if self.arch == Arch::X86 && Self::tail_changes(change) {
                                self.wrote_tail = true;
                                self.record_due = record;
                                return Some(Step::WriteTail(i));
                            }
                            if record {
                                return Some(Step::Emit(i));
                            }
                        }
                        None => self.enter(Phase::TailSync),
                    }
                }
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

/// What a plan costs: the numbers the benchmarks compare against upstream.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Cost {
    /// All-CPU syncs (machine-wide IPI rounds).
    pub syncs: usize,
    /// Text writes (guards, tails and heads).
    pub writes: usize,
    /// `PERF_RECORD_TEXT_POKE` records.
    pub records: usize,
}

impl Cost {
    /// Counts the steps of `plan`.
    pub fn of(plan: Plan<'_>) -> Self {
        plan.fold(Self::default(), |mut cost, step| {
            match step {
                Step::Sync => cost.syncs = cost.syncs.saturating_add(1),
                Step::WriteGuard(_)
                | Step::WriteTail(_)
                | Step::WriteHead(_)
                | Step::WriteWhole(_) => cost.writes = cost.writes.saturating_add(1),
                Step::Emit(_) => cost.records = cost.records.saturating_add(1),
                Step::Publish | Step::Retire => {}
            }
            cost
        })
    }
}
