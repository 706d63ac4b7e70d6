// SPDX-License-Identifier: GPL-2.0

//! The guards textpoke replaced most recently ([`Replaced`]): what the trap handler asks
//! before it claims a trap on a guard that is gone. Written by batches, read in trap context.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use kernel::{prelude::*, static_assert};

/// How many replaced guards [`Replaced`] remembers: one whole batch of the largest size.
const REPLACED: usize = crate::entry::MAX_SITES;
/// [`Replaced`]'s slots per bucket: one bucket is 32 bytes, half a cache line.
const WAYS: usize = 4;
/// [`Replaced`]'s buckets, a power of two.
const BUCKETS: usize = REPLACED / WAYS;
static_assert!(BUCKETS.is_power_of_two());

/// The sites whose guards textpoke replaced most recently, the evidence a trap needs before it
/// is treated as one on a guard that vanished.
///
/// On hardware no CPU executes a guard after the batch's last all-CPU sync, which precedes the
/// batch's retirement; under QEMU's multi-threaded TCG a vCPU was seen to, running a stale
/// translation (docs/results.md). The handler emulates what is at such a site now, but only for
/// addresses here, so that it never claims a trap that is not textpoke's.
///
/// Every kernel-mode trap that is not textpoke's (every kprobe hit on x86) asks too, so asking
/// reads one bucket: an address hashes to one of [`BUCKETS`] buckets of [`WAYS`] slots, and a
/// site replaced again while it is remembered is not stored twice. Bounded in size: a bucket
/// keeps its [`WAYS`] most recent sites, and consecutive sites spread over the buckets.
pub(crate) struct Replaced {
    slots: KVec<AtomicU64>,
    next: AtomicUsize,
}

impl Replaced {
    /// An empty record.
    pub(crate) fn new() -> Result<Self> {
        let mut slots = KVec::with_capacity(REPLACED, GFP_KERNEL)?;
        for _ in 0..REPLACED {
            // No site is at address 0.
            slots.push(AtomicU64::new(0), GFP_KERNEL)?;
        }
        Ok(Self {
            slots,
            next: AtomicUsize::new(0),
        })
    }

    /// The bucket of `addr`'s slots (Fibonacci hashing: its top bits of the product, so
    /// neighbouring sites land far apart).
    #[inline(always)]
    fn bucket(&self, addr: u64) -> &[AtomicU64] {
        let b =
            (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - BUCKETS.trailing_zeros())) as usize;
        let first = b.wrapping_mul(WAYS);
        self.slots
            .get(first..first.wrapping_add(WAYS))
            .unwrap_or(&[])
    }

    /// Records that the guard at `addr` has been replaced by its new instruction. Called for
    /// every guarded site of a batch before the batch leaves the pending table.
    pub(crate) fn record(&self, addr: u64) {
        let bucket = self.bucket(addr);
        if bucket.iter().any(|s| s.load(Ordering::Relaxed) == addr) {
            return;
        }
        let way = self.next.fetch_add(1, Ordering::Relaxed) % WAYS;
        if let Some(slot) = bucket.get(way) {
            // SeqCst with the handler's loads: a trap that misses the retired batch in the
            // table then sees its sites here.
            slot.store(addr, Ordering::SeqCst);
        }
    }

    /// Whether the guard at `addr` is among those recently replaced.
    #[inline(always)]
    pub(crate) fn contains(&self, addr: u64) -> bool {
        self.bucket(addr)
            .iter()
            .any(|s| s.load(Ordering::SeqCst) == addr)
    }
}
