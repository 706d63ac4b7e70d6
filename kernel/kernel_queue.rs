// SPDX-License-Identifier: GPL-2.0

//! The queue of the kernel's own changes between its queue and apply calls (`patcher.rs`),
//! kept by the engine.

use crate::entry::{CommitState, Entry};
use crate::patch_series::TextHeld;
use core::cell::UnsafeCell;
use kernel::prelude::*;

/// Why a change goes back to the kernel's stock path.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Declined {
    /// Old and new instruction are the same.
    Unchanged,
    /// The text could not be read, or the length is not an instruction's.
    Unreadable,
    /// The new instruction is not listed at the site, or is the guard.
    NewNotListed,
    /// The instruction there now is not listed.
    OldNotListed,
    /// The change may not be made under execution.
    MustPark,
    /// No room in the queue, even emptied: its pre-sized memory was lost (cannot happen; see
    /// [`KERNEL_MIN_SITES`]).
    NoRoom,
}

/// The changes the queue holds room for from load on, and keeps room for: growing past it
/// may fail for lack of memory, and then what is queued is committed first, so the change
/// goes into the emptied queue. A change is never handed back for lack of memory: on arm64
/// the stock path writes with no guard and no record, which a listening tracer would miss.
/// Upstream's x86 batch holds a page of changes (`TP_VEC_MAX`); this is as many of ours.
pub(crate) const KERNEL_MIN_SITES: usize = 256;

/// Most of the kernel's changes in one batch: enabling the function tracer on every function
/// (some 17000 on x86, 13000 on arm64 here) takes three batches on x86 and two on arm64, 9 and
/// 4 syncs, where the 4096 of a module's batch (`TEXTPOKE_MAX_BATCH`) took five and four. A
/// batch's guards stand until its last write, so the traps on other CPUs grow with its size:
/// twice as many would save x86 three more syncs for several times the traps, and take more
/// time than it saved under TCG.
pub(crate) const KERNEL_MAX_SITES: usize = 8192;

/// What the kernel handed over since its last apply.
pub(crate) struct State {
    /// The changes, in the order they came (`kvmalloc`ed: up to [`KERNEL_MAX_SITES`]).
    pub(crate) entries: KVVec<Entry>,
    /// What the commit will learn of each change's site, grown with `entries` so that the
    /// commit allocates nothing ([`CommitState`] says why).
    pub(crate) state: CommitState,
    /// The highest address queued (0: none): a change at least an instruction's length above
    /// it cannot repeat or overlap one.
    pub(crate) top: u64,
    /// Changes handed back since the last apply, and why the first was.
    pub(crate) declined: u64,
    pub(crate) first_declined: Option<(u64, Declined)>,
}

impl State {
    /// Makes room for one more change in both `entries` and `state`, so that neither push
    /// after it can fail. Within the room kept, it allocates nothing.
    pub(crate) fn room_for_one(&mut self) -> bool {
        if self.entries.len() >= self.entries.capacity() && crate::debug::refuses_queue_growth() {
            return false;
        }
        self.entries.reserve(1, GFP_KERNEL).is_ok() && self.state.reserve(1).is_ok()
    }

    /// Gives the queue, emptied by a commit, its room back: the committed batch's `entries` and
    /// `state` (emptied), or, where they grew past [`KERNEL_MIN_SITES`], fresh ones of that
    /// room, so that a transition of thousands of changes (the function tracer on every
    /// function) does not keep its memory while textpoke is loaded. If those cannot be had, the
    /// batch's, larger, serve. A queue that is not empty (it cannot be) keeps what it has.
    pub(crate) fn reuse(&mut self, mut entries: KVVec<Entry>, mut state: CommitState) {
        if !self.entries.is_empty() {
            return;
        }
        if entries.capacity() > KERNEL_MIN_SITES {
            let mut fresh = CommitState::new();
            if let (Ok(v), Ok(())) = (
                KVVec::with_capacity(KERNEL_MIN_SITES, GFP_KERNEL),
                fresh.reserve(KERNEL_MIN_SITES),
            ) {
                self.entries = v;
                self.state = fresh;
                return;
            }
        }
        if entries.capacity() <= self.entries.capacity() {
            return;
        }
        // SAFETY: 0 is at most the length; `Entry` is `Copy`, so forgetting the entries is what
        // dropping them would do.
        unsafe { entries.set_len(0) };
        state.truncate(0);
        self.entries = entries;
        self.state = state;
    }
}

/// The queue of the kernel's changes.
pub(crate) struct Queue {
    state: UnsafeCell<State>,
}

// SAFETY: `state` is only reached through `Queue::with`, which needs `text_mutex` held
// (`TextHeld`), so one task at a time uses it; `Entry` is `Send`.
unsafe impl Send for Queue {}
// SAFETY: As above.
unsafe impl Sync for Queue {}

impl Queue {
    /// An empty queue with room for [`KERNEL_MIN_SITES`] changes.
    pub(crate) fn new() -> Result<Self> {
        let mut state = CommitState::new();
        state.reserve(KERNEL_MIN_SITES)?;
        Ok(Self {
            state: UnsafeCell::new(State {
                entries: KVVec::with_capacity(KERNEL_MIN_SITES, GFP_KERNEL)?,
                state,
                top: 0,
                declined: 0,
                first_declined: None,
            }),
        })
    }

    /// Runs `f` on the queue; `_held` shows that the caller holds `text_mutex`.
    pub(crate) fn with<R>(&self, _held: &TextHeld<'_>, f: impl FnOnce(&mut State) -> R) -> R {
        // SAFETY: Every access goes through here with `text_mutex` held, so none overlaps
        // another; `f` cannot reach `with` again (it only gets the state).
        f(unsafe { &mut *self.state.get() })
    }
}
