// SPDX-License-Identifier: GPL-2.0

//! The guards textpoke replaced most recently ([`Replaced`]): what the trap handler asks
//! before it claims a trap on a guard that is gone. Written by batches, read in trap context.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use kernel::{alloc::flags::__GFP_ZERO, alloc::KVBox, prelude::*, static_assert};

use crate::entry::MAX_SITES;
use crate::kernel_queue::KERNEL_MAX_SITES;
use crate::patch_series::HoldsText;

/// The most sites one batch replaces: a kernel batch's, which is at least a module batch's.
pub(crate) const LARGEST_BATCH: usize = KERNEL_MAX_SITES;
static_assert!(MAX_SITES <= LARGEST_BATCH);
/// Slots per table: twice [`LARGEST_BATCH`], so that a table is never more than half full.
const SLOTS: usize = 2 * LARGEST_BATCH;
static_assert!(SLOTS.is_power_of_two());

/// The sites whose guards textpoke replaced most recently, the evidence a trap needs before it
/// is treated as one on a guard that vanished.
///
/// On hardware no CPU executes a guard after the batch's last all-CPU sync, which precedes the
/// batch's retirement; under QEMU's multi-threaded TCG a vCPU was seen to, running a stale
/// translation (docs/results.md). The handler emulates what is at such a site now, but only for
/// addresses here, so that it never claims a trap that is not textpoke's.
///
/// Exact for the last two batches, whatever their sizes: two open-addressed tables of
/// [`SLOTS`] addresses each, with linear probing. A batch records all of its sites in the
/// current table, unless they would fill it past half ([`LARGEST_BATCH`] sites); then the other
/// table, which holds only batches older than every one in the current table, is emptied and
/// becomes the current one. The batch before the last is therefore always in one table or the
/// other, and so is every later batch that fitted beside it.
///
/// Every kernel-mode trap that is not textpoke's (every kprobe hit on x86) asks too: a table at
/// most half full ends a probe at an empty slot after a few reads (2.5 expected at half full,
/// one or two in practice, as batches are far smaller), for each of the two tables.
///
/// # Invariants
///
/// Each table holds at most [`LARGEST_BATCH`] non-zero slots, so a probe that starts anywhere
/// meets an empty slot within [`SLOTS`] reads. Only a holder of `text_mutex` writes.
pub(crate) struct Replaced {
    /// Arrays of a fixed size, so that a masked index needs no bounds check on the trap path.
    tables: [KVBox<[AtomicU64; SLOTS]>; 2],
    /// The table batches are recorded in: 0 or 1.
    current: AtomicUsize,
    /// Sites in the current table.
    count: AtomicUsize,
}

impl Replaced {
    /// An empty record.
    pub(crate) fn new() -> Result<Self> {
        let table = || -> Result<KVBox<[AtomicU64; SLOTS]>> {
            let zeroed = KVBox::<[AtomicU64; SLOTS]>::new_uninit(GFP_KERNEL | __GFP_ZERO)?;
            // SAFETY: `__GFP_ZERO` zeroed the allocation, and zero bytes are an `AtomicU64`
            // holding 0: an empty slot, as no site is at address 0.
            Ok(unsafe { zeroed.assume_init() })
        };
        // INVARIANT: both tables are empty.
        Ok(Self {
            tables: [table()?, table()?],
            current: AtomicUsize::new(0),
            count: AtomicUsize::new(0),
        })
    }

    /// Where `addr`'s probe sequence starts (Fibonacci hashing: the top bits of the product, so
    /// neighbouring sites land far apart).
    #[inline(always)]
    fn home(addr: u64) -> usize {
        (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOTS.trailing_zeros())) as usize
    }

    /// Records that the guards at `sites` (one batch's, at most [`LARGEST_BATCH`]) have been
    /// replaced by their new instructions. Called before the batch leaves the pending table,
    /// under `text_mutex`, which serializes the writers.
    pub(crate) fn record_batch<I>(&self, _held: &HoldsText, sites: I)
    where
        I: Iterator<Item = u64> + Clone,
    {
        let n = sites.clone().count();
        let mut cur = self.current.load(Ordering::Relaxed) & 1;
        let mut count = self.count.load(Ordering::Relaxed);
        if count.saturating_add(n) > LARGEST_BATCH {
            // The other table's batches are all older than the current one's: forget them.
            // A trap that reads a slot as it is emptied misses an old site, no more.
            cur ^= 1;
            for slot in self.tables[cur].iter() {
                slot.store(0, Ordering::Relaxed);
            }
            count = 0;
            self.current.store(cur, Ordering::Relaxed);
        }
        let table = &self.tables[cur];
        for addr in sites {
            if count >= LARGEST_BATCH {
                // INVARIANT: never past half full. Only a batch larger than any the engine
                // builds gets here, and the sites it does not record are not claimed.
                pr_err!("replaced: a batch of {n} sites, more than {LARGEST_BATCH}\n");
                break;
            }
            let mut i = Self::home(addr);
            for _ in 0..SLOTS {
                let slot = &table[i & (SLOTS - 1)];
                match slot.load(Ordering::Relaxed) {
                    a if a == addr => break,
                    0 => {
                        // SeqCst with the handler's loads: a trap that misses the retired batch
                        // in the table then sees its sites here.
                        slot.store(addr, Ordering::SeqCst);
                        count += 1;
                        break;
                    }
                    _ => i = i.wrapping_add(1),
                }
            }
        }
        self.count.store(count, Ordering::Relaxed);
    }

    /// Whether the guard at `addr` is among those recently replaced.
    #[inline(always)]
    pub(crate) fn contains(&self, addr: u64) -> bool {
        self.tables.iter().any(|table| {
            let mut i = Self::home(addr);
            for _ in 0..SLOTS {
                match table[i & (SLOTS - 1)].load(Ordering::SeqCst) {
                    a if a == addr => return true,
                    0 => return false,
                    _ => i = i.wrapping_add(1),
                }
            }
            false
        })
    }
}
