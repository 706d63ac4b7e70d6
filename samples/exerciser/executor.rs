// SPDX-License-Identifier: GPL-2.0

//! Executors: one kthread per online CPU, running the active sites in a tight loop.
//!
//! Each execution is timed with perf's clock and classified: which instruction ran (the
//! function's return value, or for call sites whether the trampoline counted it) and whether
//! it trapped (this CPU's guard-trap count changed across the call; interrupts are off, so
//! nothing else ran on this CPU in between). Executions that overlap a batch changing their
//! site are logged for the guest agent's ordering check. The others ran with the site's
//! committed instruction in place, which is known, so they are checked on the spot.

use super::engine_api;
use super::pool::{PoolKind, Site};
use super::uapi::ExecRecord;
use super::Shared;
use crate::clock;
use crate::cpu::{self, NoIrq};
use crate::kthread::{self, Kthread};
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::{c_str, new_mutex, prelude::*, sync::Arc, sync::Mutex};

/// Site kinds counted separately, in declaration order: `kind as usize` is a kind's index.
pub(crate) const KINDS: [PoolKind; 5] = [
    PoolKind::Branch,
    PoolKind::ShortBranch,
    PoolKind::Ret,
    PoolKind::Call,
    PoolKind::Prologue,
];

/// Execution counters of one kind.
#[derive(Default)]
pub(crate) struct KindCounters {
    pub(crate) executions: AtomicU64,
    pub(crate) windowed: AtomicU64,
    pub(crate) trapped: AtomicU64,
    pub(crate) on: AtomicU64,
}

/// What one executor keeps.
#[pin_data]
pub(crate) struct Executor {
    shared: Arc<Shared>,
    active: Arc<KVec<usize>>,
    cpu: usize,
    /// Logged executions; locked by the executor for its whole run.
    #[pin]
    pub(crate) log: Mutex<KVVec<ExecRecord>>,
    /// Logged executions that did not fit.
    pub(crate) dropped: AtomicU64,
    pub(crate) counters: [KindCounters; KINDS.len()],
    /// Executions outside batches that did not behave as the committed instruction.
    pub(crate) stable_violations: AtomicU64,
    /// Executions outside batches that trapped (on a stale guard) and behaved as committed.
    pub(crate) late_traps: AtomicU64,
    /// Calls the trampoline counted, per call-pool function.
    #[pin]
    pub(crate) hits: Mutex<KVec<u64>>,
}

/// Most executions one executor logs per scenario (24 bytes each).
const LOG_CAPACITY: usize = 1 << 19;

/// Runs `site` once; returns which behaviour ran: 0 its `off` instruction's, 1 its `on`
/// instruction's, 2 neither (another site's taken path, or a call that reached the trampoline
/// for another function).
fn execute(site: &Site, hits: &mut [u64]) -> u8 {
    // SAFETY: `func` is the entry of one of this module's pool functions, all of which have
    // this signature; `hits` is large enough for every call-pool index (the trampoline indexes
    // it with the calling function's index in its pool).
    let f = unsafe {
        core::mem::transmute::<usize, extern "C" fn(*mut u64) -> u32>(site.func as usize)
    };
    if site.kind == PoolKind::Call {
        // The trampoline also counts every call in the last slot.
        let total = |h: &[u64]| h.last().copied().unwrap_or(0);
        let (before, all_before) = (hits.get(site.index_in_pool).copied(), total(hits));
        let returned = f(hits.as_mut_ptr());
        let counted = hits.get(site.index_in_pool).copied() != before;
        let others = total(hits).wrapping_sub(all_before) != u64::from(counted);
        match (returned, counted, others) {
            (0, false, false) => 0,
            (0, true, false) => 1,
            _ => 2,
        }
    } else {
        match f(core::ptr::null_mut()) {
            0 => 0,
            v if v as usize == site.index_in_pool.wrapping_add(1) => 1,
            _ => 2,
        }
    }
}

fn run(ex: &Executor) {
    let mut log = ex.log.lock();
    let mut hits = ex.hits.lock();
    let shared = &ex.shared;
    let mut next = 0usize;
    let mut n = 0u64;
    while !kthread::should_stop() {
        let Some(&index) = ex.active.get(next) else {
            next = 0;
            if ex.active.is_empty() {
                kthread::sleep_ms(10);
            }
            continue;
        };
        next = next.wrapping_add(1);
        let Some(site) = shared.sites.get(index) else {
            continue;
        };
        let Some(epoch) = shared.epoch.get(index) else {
            continue;
        };
        // A seqlock read: if the epoch is even and unchanged across the execution, no batch
        // touched the site meanwhile and `committed` is what it held throughout.
        let before = epoch.load(Ordering::Acquire);
        let committed = shared
            .state
            .get(index)
            .map_or(0, |s| s.load(Ordering::Acquire));
        let (record, trapped) = {
            // Interrupts off: a guard of the kernel's own an interrupt handler met in between
            // would move this CPU's trap count too (`textpoke_cpu_traps()`).
            let _pinned = NoIrq::new();
            let traps = engine_api::cpu_traps(ex.cpu);
            let start = clock::now();
            let path = execute(site, &mut hits);
            let end = clock::now();
            let trapped = engine_api::cpu_traps(ex.cpu) != traps;
            let record = ExecRecord {
                start,
                end,
                site: index as u32,
                cpu: ex.cpu as u16,
                path,
                trapped: u8::from(trapped),
            };
            (record, trapped)
        };
        let c = &ex.counters[site.kind as usize];
        c.executions.fetch_add(1, Ordering::Relaxed);
        c.on.fetch_add(u64::from(record.path == 1), Ordering::Relaxed);
        c.trapped.fetch_add(u64::from(trapped), Ordering::Relaxed);
        if before % 2 == 1 || epoch.load(Ordering::Acquire) != before {
            c.windowed.fetch_add(1, Ordering::Relaxed);
            // Capacity is reserved up front, so a push never allocates.
            if log.len() >= LOG_CAPACITY || log.push(record, GFP_KERNEL).is_err() {
                ex.dropped.fetch_add(1, Ordering::Relaxed);
            }
        } else if record.path != committed {
            ex.stable_violations.fetch_add(1, Ordering::Relaxed);
        } else if trapped {
            // A stale copy of a guard that was already gone (textpoke's `trap::vanished_guard`):
            // the execution behaved as the committed instruction, so this is no violation.
            ex.late_traps.fetch_add(1, Ordering::Relaxed);
        }
        n = n.wrapping_add(1);
        if n % 128 == 0 {
            // Executors are kthreads in tight loops on a non-preemptible kernel: yield now and
            // then so RCU and the pokers get to run.
            cpu::cond_resched();
        }
    }
}

/// The executors of a run, one per online CPU; stopped when dropped.
pub(crate) struct Executors {
    pub(crate) state: KVec<Arc<Executor>>,
    threads: KVec<Kthread<Executor>>,
}

impl Executors {
    /// Starts an executor on every online CPU, running `active` round-robin.
    pub(crate) fn start(shared: &Arc<Shared>, active: Arc<KVec<usize>>) -> Result<Self> {
        let mut state = KVec::new();
        let mut threads = KVec::new();
        for c in cpu::online() {
            // One counter per call-pool function, and the trampoline's total last.
            let mut hits = KVec::new();
            hits.extend_with(shared.call_functions.wrapping_add(1), 0u64, GFP_KERNEL)?;
            let log = KVVec::with_capacity(LOG_CAPACITY, GFP_KERNEL)?;
            // The initializer moves what it names: clone outside it.
            let (shared, active) = (shared.clone(), active.clone());
            let ex = Arc::pin_init(
                try_pin_init!(Executor {
                    shared,
                    active,
                    cpu: c,
                    log <- new_mutex!(log),
                    dropped: AtomicU64::new(0),
                    counters: Default::default(),
                    stable_violations: AtomicU64::new(0),
                    late_traps: AtomicU64::new(0),
                    hits <- new_mutex!(hits),
                }),
                GFP_KERNEL,
            )?;
            threads.push(
                Kthread::on_cpu(c, c_str!("textpoke_exec/%u"), ex.clone(), run)?,
                GFP_KERNEL,
            )?;
            state.push(ex, GFP_KERNEL)?;
        }
        Ok(Self { state, threads })
    }

    /// Stops every executor and waits for them; returns what they kept.
    pub(crate) fn stop(self) -> KVec<Arc<Executor>> {
        let Self { state, threads } = self;
        // Dropping a `Kthread` stops it and waits for it to exit.
        drop(threads);
        state
    }
}
