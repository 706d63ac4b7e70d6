// SPDX-License-Identifier: GPL-2.0

//! The table of pending instructions: which new instruction a guarded address stands for.
//!
//! While a batch is in flight its sites hold guards (x86 `INT3`, arm64 `BRK`). A CPU that
//! executes one traps, and the handler asks this table which instruction the guard stands for,
//! then emulates it. Requirements, and how they are met:
//!
//! - **Lookup from trap context is wait-free, lock-free and allocation-free**: a lookup visits
//!   only the slots the table's `live` mask names (at most [`MAX_BATCHES`], none when no batch is
//!   in flight); for each one whose range may hold the address it does one increment, a fence,
//!   one decrement and a binary search. It never spins on anything another CPU holds.
//! - **A trap that is not textpoke's costs next to nothing**: on x86 every kernel-mode `INT3`
//!   asks (every kprobe hit), so with no batch in flight a lookup is one load of the mask.
//! - **Several independent batches in flight at once**: a batch occupies one of
//!   [`MAX_BATCHES`] slots, each with its own sorted, immutable entry array. (Upstream x86 has a
//!   single global descriptor serialized by `text_mutex`.)
//! - **A batch's storage is never freed under a reader**: every CPU counts the lookups it has in
//!   progress on each slot, in its own cache line ([`CpuReaders`]). Retiring a batch first marks
//!   its slot `RETIRING` and then waits until every CPU's count for that slot is zero. This is the
//!   per-CPU scheme upstream adopted in 6.15 to remove the false sharing on 6.12's single global
//!   `bp_desc.refs`: the trap path only writes a line that belongs to its own CPU.
//! - **Duplicate or overlapping sites are rejected**, within a batch and across every batch in
//!   flight.
//!
//! # Ordering argument
//!
//! Reader (`lookup` on CPU `c`): if the slot's state is `LIVE`, increment `readers[c][slot]`,
//! then a `SeqCst` fence, then load the state again, and read the entries only if it is still
//! `LIVE`; then decrement. Retirer: store `RETIRING`, then a `SeqCst` fence, then wait for every
//! `readers[cpu][slot]` to read zero. This is the store-buffering (Dekker) shape, and the two
//! fences are ordered one way or the other: if the reader's fence comes first, the retirer's
//! loads see its increment and wait for its decrement (a `Release` that pairs with the retirer's
//! `Acquire` load), so every read of the entries happens before the storage is reused; if the
//! retirer's fence comes first, the reader's re-check sees `RETIRING` and it backs off without
//! touching the entries. (`SeqCst` on the accesses themselves would also do; the fences are
//! what the loom model checks, and they make the pairing explicit.)
//!
//! A reader that sees `LIVE` also sees the entries: the publisher writes them before its
//! `Release` store of `LIVE`, which the reader's `Acquire` load reads. It cannot see a
//! half-written slot of a *later* batch either, because that batch's fields are only written
//! after a retire that, by the argument above, waited for this reader.
//!
//! The guard a CPU traps on was written after its batch was published (the engine publishes,
//! then writes guards), and the trap fetched that guard, so the reader's first load of the state
//! cannot return a value older than `LIVE`: upstream's `smp_wmb()`/`smp_rmb()` pair around the
//! `INT3` write makes the same assumption. The same holds for the slot's bit in the `live` mask,
//! which the publisher sets before its `Release` store of `LIVE`: the reader's load of the mask
//! cannot miss the bit of the batch whose guard it trapped on. The bit is cleared only once the
//! slot is `RETIRING`, so a reader that misses a cleared bit would have seen `RETIRING` and backed
//! off anyway; a bit still set for a slot that is no longer `LIVE` only costs the reader the state
//! check it would have made without the mask. The engine retires a batch only after its last
//! all-CPU sync, which cannot complete while any CPU is still inside the trap for one of its
//! guards, since trap handlers run with interrupts masked.
//!
//! Publishers check each other with the same shape: a publisher announces its entries (state
//! `CHECKING`) before scanning the other slots, so of two racing publishers with overlapping
//! sites at least one sees the other and refuses. Both may refuse; neither is half-published.
//! While it compares against another slot a publisher holds that slot's `checkers` count, which
//! retiring waits for just like the per-CPU reader counts.

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used
)]

use crate::atomic::{fence, spin_loop, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use core::cmp::Ordering as Cmp;
use core::marker::PhantomData;
use core::ops::Deref;

/// Most batches that can be in flight at once.
pub const MAX_BATCHES: usize = 16;

/// The engine's slots: [`MAX_BATCHES`] for the modules' batches, and one more that only the
/// kernel's own batches use ([`PendingTable::with_reserved`]).
///
/// A kernel batch (jump labels, ftrace: kernel/patcher.rs) commits with `text_mutex` held by
/// its caller throughout, while a module's batch takes `text_mutex` for each write with its
/// slot claimed. If a kernel batch could only wait for a slot, sixteen module batches blocked
/// on `text_mutex` would hold all of them forever. Kernel batches are serialized by
/// `text_mutex`, so one slot of their own is always free when one needs it.
pub const ENGINE_SLOTS: usize = MAX_BATCHES + 1;

/// An entry of the table: a site and the instruction pending for it.
pub trait Pending: Copy {
    /// Address of the site's first byte: the address a guard traps at.
    fn addr(&self) -> u64;
    /// Length of the site in bytes (at least 1).
    fn size(&self) -> u64;
}

/// Why a batch cannot be published.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum PublishError {
    /// The batch has no entries.
    Empty,
    /// Entries are not sorted by address (the engine sorts before publishing).
    Unsorted,
    /// Two entries of the batch have the same address.
    Duplicate,
    /// Two entries of the batch overlap, or an entry has length zero or wraps around.
    Overlap,
    /// An entry overlaps a site of a batch already in flight.
    Conflict,
    /// [`MAX_BATCHES`] batches are already in flight.
    Full,
}

/// The lookups one CPU has in progress, per slot, in a cache line of its own.
///
/// Only the owning CPU increments and decrements these counters, from its trap handler (and
/// from handlers nested on top of it, which is why they are counts and not flags); a retiring
/// publisher only reads them.
#[repr(align(64))]
pub struct CpuReaders<const SLOTS: usize = MAX_BATCHES> {
    count: [AtomicU32; SLOTS],
}

impl<const SLOTS: usize> CpuReaders<SLOTS> {
    /// A CPU with no lookups in progress.
    pub fn new() -> Self {
        Self {
            count: core::array::from_fn(|_| AtomicU32::new(0)),
        }
    }
}

impl<const SLOTS: usize> Default for CpuReaders<SLOTS> {
    fn default() -> Self {
        Self::new()
    }
}

const FREE: u32 = 0;
const CLAIMED: u32 = 1;
const CHECKING: u32 = 2;
const LIVE: u32 = 3;
const RETIRING: u32 = 4;

/// One batch's place in the table.
///
/// # Invariants
///
/// While `state` is `CHECKING` or `LIVE`, `entries` and `len` describe a slice of `len` entries
/// sorted by address and pairwise non-overlapping, which stays valid and unmodified until the
/// slot's retire has seen every reader and checker count at zero.
struct Slot<E> {
    state: AtomicU32,
    entries: AtomicPtr<E>,
    len: AtomicUsize,
    /// Lowest and one-past-highest address covered, so that lookups skip the slots that cannot
    /// hold their address without registering as readers.
    lo: AtomicU64,
    hi: AtomicU64,
    /// Publishers currently comparing their batch against this slot's entries.
    checkers: AtomicU32,
}

impl<E> Slot<E> {
    fn new() -> Self {
        Self {
            state: AtomicU32::new(FREE),
            entries: AtomicPtr::new(core::ptr::null_mut()),
            len: AtomicUsize::new(0),
            lo: AtomicU64::new(0),
            hi: AtomicU64::new(0),
            checkers: AtomicU32::new(0),
        }
    }

    /// Whether `addr` is within the slot's range, read without registering as a reader.
    ///
    /// A filter before the increment and fence: a lookup pays for those only in slots that may
    /// hold its address. It never filters out the batch a trap belongs to: that batch stored its
    /// range before its `Release` store of `LIVE`, which the caller's `Acquire` load saw (the
    /// guard was written after it), and the slot cannot be reused while its guard can still be
    /// executed. A stale range of another batch is harmless: the registered search that follows
    /// decides.
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    #[inline(always)]
    fn may_cover(&self, addr: u64) -> bool {
        addr >= self.lo.load(Ordering::Relaxed) && addr < self.hi.load(Ordering::Relaxed)
    }
}

impl<E: Pending> Slot<E> {
    /// The slot's entries.
    ///
    /// # Safety
    ///
    /// The caller must have observed the slot `CHECKING` or `LIVE` (with acquire ordering) after
    /// registering itself in a count that the slot's retire waits for, and must not use the
    /// slice after dropping that count.
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    #[inline(always)]
    unsafe fn entries(&self) -> &[E] {
        let ptr = self.entries.load(Ordering::Relaxed);
        let len = self.len.load(Ordering::Relaxed);
        if ptr.is_null() {
            return &[];
        }
        // SAFETY: By the type invariant and the caller's registration, `ptr` and `len` describe
        // a published slice that cannot be released before the caller deregisters.
        unsafe { core::slice::from_raw_parts(ptr, len) }
    }

    /// Searches the slot for the entry of the site starting at `addr`, and returns what `read`
    /// takes from it.
    ///
    /// # Safety
    ///
    /// As for [`Slot::entries`].
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    #[inline(always)]
    unsafe fn find<R>(&self, addr: u64, read: &impl Fn(&E) -> R) -> Option<R> {
        // SAFETY: Forwarded from the caller.
        let entries = unsafe { self.entries() };
        let i = entries.binary_search_by(|e| e.addr().cmp(&addr)).ok()?;
        entries.get(i).map(read)
    }
}

/// Slot `index`'s bit in [`PendingTable`]'s `live` mask. `index` is below `SLOTS`, which the
/// table's constructor asserts is at most 32, so the shift is exact.
fn live_bit(index: usize) -> u32 {
    1u32.wrapping_shl(index as u32)
}

/// Checks that `entries` is sorted, has no duplicates and no overlaps.
fn validate<E: Pending>(entries: &[E]) -> Result<(), PublishError> {
    if entries.is_empty() {
        return Err(PublishError::Empty);
    }
    let mut prev_end: Option<u64> = None;
    let mut prev_addr: Option<u64> = None;
    for e in entries {
        let end = e
            .addr()
            .checked_add(e.size())
            .filter(|_| e.size() > 0)
            .ok_or(PublishError::Overlap)?;
        match prev_addr.map(|p| p.cmp(&e.addr())) {
            Some(Cmp::Equal) => return Err(PublishError::Duplicate),
            Some(Cmp::Greater) => return Err(PublishError::Unsorted),
            _ => {}
        }
        if prev_end.is_some_and(|p| p > e.addr()) {
            return Err(PublishError::Overlap);
        }
        prev_addr = Some(e.addr());
        prev_end = Some(end);
    }
    Ok(())
}

/// Whether two sorted, internally non-overlapping entry lists share any byte.
fn overlaps<E: Pending>(a: &[E], b: &[E]) -> bool {
    let (mut i, mut j) = (a.iter().peekable(), b.iter().peekable());
    while let (Some(x), Some(y)) = (i.peek(), j.peek()) {
        let x_end = x.addr().saturating_add(x.size());
        let y_end = y.addr().saturating_add(y.size());
        if x.addr() < y_end && y.addr() < x_end {
            return true;
        }
        // The entry that ends first cannot overlap anything later in the other list.
        if x_end <= y_end {
            i.next();
        } else {
            j.next();
        }
    }
    false
}

/// The table of pending instructions of every batch in flight.
///
/// `C` holds one [`CpuReaders`] per possible CPU, indexed by CPU number. `SLOTS` is the number
/// of batches that can be in flight; only the model-checking tests change it.
pub struct PendingTable<E, C, const SLOTS: usize = MAX_BATCHES> {
    slots: [Slot<E>; SLOTS],
    /// Bit `i` set from just before slot `i` is `LIVE` until it is `RETIRING`: the slots a lookup
    /// visits (see the ordering argument in the module doc).
    live: AtomicU32,
    /// How many of the last slots only [`PendingTable::with_published_in`] claims.
    reserved: usize,
    readers: C,
    /// The slots only hold pointers to entries, which `AtomicPtr` would let any thread share;
    /// other threads read and copy those entries, so the table is only as shareable as `E`.
    _entries: PhantomData<E>,
}

impl<E: Pending, C: Deref<Target = [CpuReaders<SLOTS>]>, const SLOTS: usize>
    PendingTable<E, C, SLOTS>
{
    /// An empty table whose readers are counted in `readers`, one entry per possible CPU.
    pub fn new(readers: C) -> Self {
        Self::with_reserved(readers, 0)
    }

    /// An empty table like [`PendingTable::new`]'s, whose last `reserved` slots (at most all of
    /// them) only [`PendingTable::with_published_in`] claims.
    pub fn with_reserved(readers: C, reserved: usize) -> Self {
        const {
            assert!(
                SLOTS <= u32::BITS as usize,
                "a slot's bit in `live` is a u32's"
            )
        };
        Self {
            slots: core::array::from_fn(|_| Slot::new()),
            live: AtomicU32::new(0),
            reserved: reserved.min(SLOTS),
            readers,
            _entries: PhantomData,
        }
    }

    /// Whether no batch is in flight, so that a lookup would find nothing: the load a lookup
    /// starts with, for a caller that skips the lookup when it says so.
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    #[inline(always)]
    pub fn idle(&self) -> bool {
        self.live.load(Ordering::Acquire) == 0
    }

    /// Looks up the instruction pending for the site starting at `addr`: a copy of its entry.
    ///
    /// See [`PendingTable::lookup_with`].
    pub fn lookup(&self, cpu: usize, addr: u64) -> Option<E> {
        self.lookup_with(cpu, addr, |e| *e)
    }

    /// Looks up the instruction pending for the site starting at `addr`, and returns what
    /// `read` takes from its entry (the trap handler copies only what it needs: a whole entry
    /// may be big enough for the compiler to copy it with a call to `memcpy`, which the trap
    /// path may not make).
    ///
    /// Called from the trap handler on the CPU `cpu`, which must stay on that CPU for the call
    /// (interrupts are masked in trap context). The handler skips the call when
    /// [`PendingTable::idle`] says no batch is in flight. Wait-free; touches only shared read-mostly slot fields and that CPU's own counters.
    /// Returns `None` if no batch in flight has a site there (the trap is someone else's) or if
    /// the CPU is out of range.
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    #[inline(always)]
    pub fn lookup_with<R>(&self, cpu: usize, addr: u64, read: impl Fn(&E) -> R) -> Option<R> {
        let mut live = self.live.load(Ordering::Acquire);
        let counts = &self.readers.get(cpu)?.count;
        while live != 0 {
            let index = live.trailing_zeros() as usize;
            // Clears the lowest set bit.
            live &= live.wrapping_sub(1);
            let (Some(slot), Some(count)) = (self.slots.get(index), counts.get(index)) else {
                break;
            };
            if slot.state.load(Ordering::Acquire) != LIVE || !slot.may_cover(addr) {
                continue;
            }
            count.fetch_add(1, Ordering::Relaxed);
            // Pairs with the fence in `retire` (see the ordering argument in the module doc).
            fence(Ordering::SeqCst);
            let found = if slot.state.load(Ordering::Acquire) == LIVE {
                // SAFETY: We saw `LIVE` after registering in `count`, which the slot's retire
                // waits for, and we deregister below.
                unsafe { slot.find(addr, &read) }
            } else {
                None
            };
            count.fetch_sub(1, Ordering::Release);
            if found.is_some() {
                return found;
            }
        }
        None
    }

    /// Publishes `entries` for the duration of `in_flight`, then retires them.
    ///
    /// `entries` must be sorted by address without duplicates or overlaps and must not overlap
    /// any batch already in flight. While `in_flight` runs, [`PendingTable::lookup`] finds them;
    /// when this returns, no CPU is still reading them. `relax` is called while waiting for
    /// lookups to drain (they last a few hundred instructions).
    pub fn with_published<R>(
        &self,
        entries: &[E],
        relax: impl FnMut(),
        in_flight: impl FnOnce() -> R,
    ) -> Result<R, PublishError> {
        self.with_published_in(false, entries, relax, in_flight)
    }

    /// [`PendingTable::with_published`] in a shared slot, or in a reserved one if `reserved`
    /// (see [`ENGINE_SLOTS`]).
    pub fn with_published_in<R>(
        &self,
        reserved: bool,
        entries: &[E],
        mut relax: impl FnMut(),
        in_flight: impl FnOnce() -> R,
    ) -> Result<R, PublishError> {
        validate(entries)?;
        let (lo, hi) = match (entries.first(), entries.last()) {
            (Some(first), Some(last)) => (first.addr(), last.addr().saturating_add(last.size())),
            _ => return Err(PublishError::Empty),
        };
        let (index, slot) = self.claim(reserved)?;
        slot.entries
            .store(entries.as_ptr().cast_mut(), Ordering::Relaxed);
        slot.len.store(entries.len(), Ordering::Relaxed);
        slot.lo.store(lo, Ordering::Relaxed);
        slot.hi.store(hi, Ordering::Relaxed);
        // INVARIANT: The fields describe `entries`, validated above, which outlive this call,
        // and the slot is retired (waiting for all counts) before this call returns.
        slot.state.store(CHECKING, Ordering::Release);
        // Pairs with the fence of any other publisher in `conflicts`: of two racing publishers,
        // at least one sees the other's `CHECKING`.
        fence(Ordering::SeqCst);

        if self.conflicts(index, entries, &mut relax) {
            self.retire(index, slot, &mut relax);
            return Err(PublishError::Conflict);
        }

        // Before the `Release` store of `LIVE`, so that a reader that sees the state sees the bit.
        self.live.fetch_or(live_bit(index), Ordering::Relaxed);
        slot.state.store(LIVE, Ordering::Release);
        let result = in_flight();
        self.retire(index, slot, &mut relax);
        Ok(result)
    }

    /// Number of slots currently holding a batch in flight (for statistics and tests).
    pub fn in_flight(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.state.load(Ordering::Relaxed) == LIVE)
            .count()
    }

    fn claim(&self, reserved: bool) -> Result<(usize, &Slot<E>), PublishError> {
        let shared = SLOTS.saturating_sub(self.reserved);
        self.slots
            .iter()
            .enumerate()
            .filter(|(i, _)| (*i >= shared) == reserved)
            .find(|(_, s)| {
                s.state
                    .compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            })
            .ok_or(PublishError::Full)
    }

    /// Whether `entries` (published in slot `own` as `CHECKING`) overlap another batch.
    fn conflicts(&self, own: usize, entries: &[E], relax: &mut impl FnMut()) -> bool {
        for (index, other) in self.slots.iter().enumerate() {
            if index == own {
                continue;
            }
            let state = other.state.load(Ordering::Acquire);
            if state != CHECKING && state != LIVE {
                continue;
            }
            other.checkers.fetch_add(1, Ordering::Relaxed);
            // Pairs with the fence in `retire`, as for readers.
            fence(Ordering::SeqCst);
            let state = other.state.load(Ordering::Acquire);
            let hit = (state == CHECKING || state == LIVE)
                // SAFETY: We saw `CHECKING` or `LIVE` after registering in `checkers`, which the
                // slot's retire waits for, and we deregister right after.
                && overlaps(entries, unsafe { other.entries() });
            other.checkers.fetch_sub(1, Ordering::Release);
            if hit {
                return true;
            }
            relax();
        }
        false
    }

    /// Takes slot `index` out of the table once nobody can be reading it.
    fn retire(&self, index: usize, slot: &Slot<E>, relax: &mut impl FnMut()) {
        slot.state.store(RETIRING, Ordering::Relaxed);
        // Pairs with the fences in `lookup` and `conflicts`.
        fence(Ordering::SeqCst);
        // After `RETIRING`: a reader the cleared bit turns away would back off at the state.
        self.live.fetch_and(!live_bit(index), Ordering::Relaxed);
        for cpu in self.readers.iter() {
            if let Some(count) = cpu.count.get(index) {
                // Lookups run with interrupts masked and last a few hundred instructions.
                while count.load(Ordering::Acquire) != 0 {
                    spin_loop();
                }
            }
        }
        while slot.checkers.load(Ordering::Acquire) != 0 {
            relax();
        }
        slot.entries.store(core::ptr::null_mut(), Ordering::Relaxed);
        slot.len.store(0, Ordering::Relaxed);
        slot.state.store(FREE, Ordering::Release);
    }
}
