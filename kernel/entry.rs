// SPDX-License-Identifier: GPL-2.0

//! One change of a batch as the engine holds it ([`Entry`]), and what a commit learns of each
//! ([`CommitState`]): the types the pending table, the trap handler, the kernel's change queue
//! and the batches share, below all of them.

use crate::current_arch;
use crate::pending::Pending;
use crate::plan::{Change, Stranded};
use kernel::prelude::*;

/// Most sites in one batch (`TEXTPOKE_MAX_BATCH` in kernel/textpoke.h).
pub(crate) const MAX_SITES: usize = 4096;

/// One change of a batch: the site, the new instruction as the trap handler emulates it, and
/// the old and new bytes the plan and the record use. The pending table holds these.
#[derive(Clone, Copy)]
pub(crate) struct Entry {
    /// The site's first byte.
    pub(crate) addr: u64,
    /// The new instruction, accepted at `addr`.
    pub(crate) insn: current_arch::Insn,
    /// The site's old and new instruction, and whether the change is parked.
    pub(crate) change: Change,
    /// Whether the change is the kernel's own (`patcher.rs`), for the trap counters.
    pub(crate) kernel: bool,
    /// What the seeded trap defects emulate instead (debug builds only, see `debug.rs`).
    #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
    pub(crate) wrong: Wrong,
}

/// The instructions the seeded trap defects emulate instead of the new one.
#[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
#[derive(Clone, Copy)]
pub(crate) struct Wrong {
    /// The site's old instruction.
    pub(crate) old: current_arch::Insn,
    /// Another site's new instruction (this site's own until the batch is committed).
    pub(crate) other: current_arch::Insn,
}

impl Entry {
    /// The change of the site at `addr` to `insn` (accepted there), from `change.old`; the
    /// kernel's own if `kernel`.
    pub(crate) fn new(
        addr: u64,
        insn: current_arch::Insn,
        change: Change,
        kernel: bool,
    ) -> Result<Self> {
        Ok(Self {
            addr,
            insn,
            change,
            kernel,
            #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
            wrong: Wrong {
                old: <current_arch::CurrentArch as crate::arch::Arch>::accept(
                    addr,
                    change.old.as_slice(),
                )
                .map_err(crate::errno::insn)?,
                other: insn,
            },
        })
    }
}

impl Pending for Entry {
    fn addr(&self) -> u64 {
        self.addr
    }
    fn size(&self) -> u64 {
        self.change.new.len() as u64
    }
}

impl AsRef<Change> for Entry {
    fn as_ref(&self) -> &Change {
        &self.change
    }
}

/// What a commit learns of each change's site, one slot per change, allocated as the changes
/// are added so that the commit itself allocates nothing.
///
/// The kernel's own changes are committed from callers that cannot fail (the jump-label and
/// ftrace hooks of the patch series): once a commit starts, there is nobody left to hand a
/// change back to, so a commit that could fail to allocate would leave the kernel's text as it
/// was while the kernel believes it changed.
pub(crate) struct CommitState {
    /// Per change, whether its record went out and where its site stands after a failed step.
    pub(crate) sites: KVVec<Stranded>,
    /// Per change, whether another patcher wrote over its guard (`Run::check_guards`).
    pub(crate) conflict: KVVec<bool>,
    /// Per change, when and on which CPU a parked section emitted its record (`Run::parked`).
    pub(crate) emitted: KVVec<(u64, usize)>,
}

impl CommitState {
    /// No slots.
    pub(crate) const fn new() -> Self {
        Self {
            sites: KVVec::new(),
            conflict: KVVec::new(),
            emitted: KVVec::new(),
        }
    }

    /// The number of changes with a slot.
    pub(crate) fn len(&self) -> usize {
        self.sites.len()
    }

    /// Makes room for one more change, so that the next [`CommitState::push`] cannot fail.
    pub(crate) fn reserve(&mut self, n: usize) -> Result {
        self.sites.reserve(n, GFP_KERNEL)?;
        self.conflict.reserve(n, GFP_KERNEL)?;
        self.emitted.reserve(n, GFP_KERNEL)?;
        Ok(())
    }

    /// Adds one change's slot.
    pub(crate) fn push(&mut self) -> Result {
        self.reserve(1)?;
        self.sites.push(Stranded::default(), GFP_KERNEL)?;
        self.conflict.push(false, GFP_KERNEL)?;
        self.emitted.push((0, 0), GFP_KERNEL)?;
        Ok(())
    }

    /// Keeps the first `n` slots, dropping a push that its change did not follow.
    pub(crate) fn truncate(&mut self, n: usize) {
        if n < self.sites.len() {
            // SAFETY: `n` is below the length, so the first `n` slots are initialized; `Stranded`
            // is `Copy`, so forgetting the rest is what dropping them would do.
            unsafe { self.sites.set_len(n) };
        }
        if n < self.conflict.len() {
            // SAFETY: As above, for `bool`.
            unsafe { self.conflict.set_len(n) };
        }
        if n < self.emitted.len() {
            // SAFETY: As above, for a pair of integers.
            unsafe { self.emitted.set_len(n) };
        }
    }

    /// Sets every slot to "nothing learned yet", as a commit starts.
    pub(crate) fn reset(&mut self) {
        self.sites.iter_mut().for_each(|s| *s = Stranded::default());
        self.conflict.iter_mut().for_each(|c| *c = false);
    }
}
