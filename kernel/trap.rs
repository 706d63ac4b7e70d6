// SPDX-License-Identifier: GPL-2.0

//! The trap handler every arch's hook calls: find the pending instruction, emulate it, count.
//!
//! It runs in trap context (interrupts masked, possibly nested on an NMI), so it is wait-free,
//! lock-free, allocation-free and silent. Everything it runs is in this module's
//! `.kprobes.text` section (which kprobes refuses, as it refuses `NOKPROBE_SYMBOL`s) or in the
//! blacklisted C helpers, so no kprobe can recurse into it; and sites are never in textpoke's
//! own text, so no guard of textpoke's can either.
//!
//! It claims a trap only when the address is a site of a batch in flight, or a site whose guard
//! textpoke wrote and is known to have replaced since ([`Replaced`]): every other trap (a
//! kprobe's, kgdb's, an `int3` in code) goes to the next handler untouched.

use crate::arch::{Arch, This};
use crate::cpu;
use crate::engine::{self, Engine, Entry};
use crate::insn::MAX_INSN_LEN;
use crate::pt_regs::PtRegs;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use kernel::{bindings, prelude::*, static_assert};

/// How many replaced guards [`Replaced`] remembers: one whole batch of the largest size.
const REPLACED: usize = crate::batch::MAX_SITES;
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
    fn contains(&self, addr: u64) -> bool {
        self.bucket(addr)
            .iter()
            .any(|s| s.load(Ordering::SeqCst) == addr)
    }
}

extern "C" {
    /// Reads kernel memory without faulting (rust/helpers.c, blacklisted for kprobes).
    fn textpoke_read_text_nofault(dst: *mut u8, src: *const u8, len: usize) -> kernel::ffi::c_long;
}

/// The engine's trap handler, handed to the arch's hook at registration.
///
/// # Safety
///
/// `regs` must be the saved registers of a kernel-mode trap at one of this arch's guard
/// instructions, being handled on the calling CPU with interrupts masked.
#[no_mangle]
#[link_section = ".kprobes.text"]
pub(crate) unsafe extern "C" fn textpoke_trap(regs: *mut bindings::pt_regs) -> bool {
    // SAFETY: Guaranteed by the caller.
    let regs = unsafe { PtRegs::from_raw(regs) };
    engine::with(|engine| handle(engine, regs)).unwrap_or(false)
}

/// The instruction a trap on `entry`'s guard emulates: its new one, or in a debug build with a
/// seeded trap defect selected (`debug.rs`), the wrong one the defect calls for.
#[inline(always)]
fn emulated(entry: &Entry) -> crate::arch::Insn {
    // The kernel's own changes never get a trap defect (see `Batch::commit_with`).
    #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
    match crate::debug::defect() {
        _ if entry.kernel => {}
        crate::debug::Defect::EmulateOld => return entry.wrong.old,
        crate::debug::Defect::EmulateOther => return entry.wrong.other,
        _ => {}
    }
    entry.insn
}

#[inline(always)]
fn handle(engine: &Engine, regs: &mut PtRegs) -> bool {
    let site = This::trap_site(regs);
    // Stable: trap context cannot migrate.
    let cpu = cpu::current();
    if let Some((insn, kernel)) = engine
        .table
        .lookup_with(cpu, site, |e| (emulated(e), e.kernel))
    {
        This::emulate(&insn, regs);
        engine.stats.count_trap(cpu, This::kind(&insn), kernel);
        return true;
    }
    if !engine.replaced.contains(site) {
        #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
        if crate::debug::defect() == crate::debug::Defect::SwallowForeign {
            This::skip_trap(regs);
            return true;
        }
        return false;
    }
    let mut now = [0u8; MAX_INSN_LEN];
    // SAFETY: `now` is valid for writes of its length; the helper reads any address without
    // faulting.
    let read = unsafe {
        textpoke_read_text_nofault(now.as_mut_ptr(), site as usize as *const u8, now.len())
    };
    // A guard that is still there is somebody else's now (the site may have been reused).
    if read != 0 || now.starts_with(<This as Arch>::GUARD) {
        return false;
    }
    if This::resume_replaced(site, &now, regs) {
        engine.stats.count_vanished(cpu);
        true
    } else {
        false
    }
}
