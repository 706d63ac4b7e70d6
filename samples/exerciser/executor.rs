// SPDX-License-Identifier: GPL-2.0

//! Executors: one kthread per online CPU, running the active sites in a tight loop.
//!
//! Each execution is timed with perf's clock and classified: which instruction ran (the
//! function's return value, for call sites whether the trampoline counted it, for arm64's
//! `MOV X9, X30` prologue sites what X9 holds after it) and whether it trapped, twice over: as
//! the CPU tells it (a mark left below the stack pointer before the call is gone after it, see
//! [`call_site`]; interrupts are off, so only a trap can take it) and as textpoke counts it
//! (this CPU's guard-trap count moved across the call). Executions that overlap a batch
//! changing their site are logged for the guest agent's ordering check. The others ran with
//! the site's committed instruction in place, which is known, so they are checked on the spot.

use super::engine_api;
use super::pool::{PoolKind, Site};
use super::uapi::{ExecRecord, TRAP_COUNTED, TRAP_SEEN};
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
    /// Executions the CPU saw trap.
    pub(crate) trapped: AtomicU64,
    /// Executions the CPU saw trap and textpoke counted.
    pub(crate) trapped_counted: AtomicU64,
    /// Executions the CPU saw trap and textpoke did not count.
    pub(crate) seen_only: AtomicU64,
    /// Executions textpoke counted a trap of and the CPU did not see one.
    pub(crate) counted_only: AtomicU64,
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
    /// Executions outside batches that the CPU saw trap (on a stale guard) and that behaved
    /// as committed.
    pub(crate) late_traps: AtomicU64,
    /// Of those, the ones textpoke counted too.
    pub(crate) late_traps_counted: AtomicU64,
    /// Executions whose stack mark was set and read back at different stack pointers, whose
    /// trap bit therefore says nothing (see [`call_site`]); never expected.
    pub(crate) mark_misplaced: AtomicU64,
    /// Calls the trampoline counted, per call-pool function.
    #[pin]
    pub(crate) hits: Mutex<KVec<u64>>,
}

/// Most executions one executor logs per scenario (24 bytes each).
const LOG_CAPACITY: usize = 1 << 19;

/// The mark [`call_site`] leaves below the stack pointer.
const STACK_MARK: u64 = 0x7e47_b0a7_5eed_2024;

/// How far below the stack pointer the mark lies. A call of a site goes less deep: its return
/// address and, for call sites, the trampoline's saved words (three on x86, two on arm64) and
/// a return thunk's return address. An exception entry saves more, across it: the hardware
/// frame and `pt_regs` on x86 (168 bytes; `INT3` is taken on the current stack, while `#DB`
/// and NMIs have stacks of their own), `pt_regs` on arm64 (336 bytes; every EL1 exception,
/// a debug exception too). The kernel has no red zone. As in samples/textpoke_bench.c.
const STACK_MARK_OFFSET: usize = 96;

/// What one call of a site showed.
struct Called {
    /// The function's return value.
    ret: u32,
    /// Whether the mark was gone after the call: an exception interrupted it.
    seen: bool,
    /// arm64: X9 after the call (0 before it); x86: 0.
    x9: u64,
    /// Whether the mark was set and read at the same stack pointer (x86; always on arm64).
    sound: bool,
    /// arm64: the return address the call left in X30, which `MOV X9, X30` copies; x86: 0.
    lr: u64,
}

/// Calls `f(arg)` with a stack mark around it (see [`STACK_MARK_OFFSET`]).
///
/// x86: two asm statements around an ordinary call, so that the compiler keeps making the
/// call as the kernel's build wants indirect calls made (retpolines, call thunks, CFI), which
/// an asm `call` would escape (and objtool refuse). Both read the stack pointer, and the
/// execution counts only if they read the same one: nothing between them adjusts it (the
/// argument goes in a register), so the mark is addressed from the same place. Nothing of
/// this frame lies below the stack pointer (no red zone), and the callee's frame does not
/// reach the mark.
#[cfg(CONFIG_X86_64)]
#[inline(never)]
fn call_site(f: extern "C" fn(*mut u64) -> u32, arg: *mut u64) -> Called {
    let (sp_set, sp_read, mark): (u64, u64, u64);
    // SAFETY: Writes 8 bytes `STACK_MARK_OFFSET` below the stack pointer, which nothing uses:
    // the kernel is built without a red zone, and an asm statement without `nostack` may use
    // the stack below the pointer, so the compiler keeps nothing there across it.
    unsafe {
        core::arch::asm!(
            "mov qword ptr [rsp - {off}], {mark}",
            "mov {sp}, rsp",
            mark = in(reg) STACK_MARK,
            sp = lateout(reg) sp_set,
            off = const STACK_MARK_OFFSET,
        );
    }
    let ret = f(arg);
    // SAFETY: Reads 8 bytes below the stack pointer, inside the stack: no side effects.
    unsafe {
        core::arch::asm!(
            "mov {sp}, rsp",
            "mov {mark}, qword ptr [rsp - {off}]",
            sp = out(reg) sp_read,
            mark = lateout(reg) mark,
            off = const STACK_MARK_OFFSET,
        );
    }
    Called {
        ret,
        seen: mark != STACK_MARK,
        x9: 0,
        sound: sp_set == sp_read,
        lr: 0,
    }
}

/// Calls `f(arg)` with a stack mark around it (see [`STACK_MARK_OFFSET`]), and with X9 zeroed
/// before the call and read after it, for the `MOV X9, X30` prologue sites.
///
/// arm64: one asm statement sets the mark, calls and reads the mark back, so both address it
/// from the same stack pointer, which a `BLR` does not move. The call is made from asm to read
/// X9 right after it (the compiler may reuse X9 as soon as a call of its own returns); arm64
/// builds have no objtool or retpolines to escape.
#[cfg(CONFIG_ARM64)]
#[inline(never)]
fn call_site(f: extern "C" fn(*mut u64) -> u32, arg: *mut u64) -> Called {
    let (ret, mark, x9, lr): (u64, u64, u64, u64);
    // SAFETY: `f` is a pool function (`extern "C" fn(*mut u64) -> u32`) that uses no more than
    // the registers the C ABI lets a callee clobber (`clobber_abi`) and X9, given here; it
    // leaves X18 alone. The mark is written `STACK_MARK_OFFSET` below the stack pointer, which
    // nothing uses (an asm statement without `nostack` may use the stack below it).
    unsafe {
        core::arch::asm!(
            "stur x11, [sp, #-{off}]",
            "blr x10",
            "2:",
            "ldur x11, [sp, #-{off}]",
            // After the call, which may clobber X12: where the `BLR` put X30.
            "adr x12, 2b",
            off = const STACK_MARK_OFFSET,
            in("x10") f as usize as u64,
            inout("x11") STACK_MARK => mark,
            inout("x9") 0u64 => x9,
            inout("x0") arg as usize as u64 => ret,
            lateout("x12") lr,
            clobber_abi("C"),
        );
    }
    Called {
        ret: ret as u32,
        seen: mark != STACK_MARK,
        x9,
        sound: true,
        lr,
    }
}

/// Runs `site` once; returns which behaviour ran (0 its `off` instruction's, 1 its `on`
/// instruction's, 2 neither: another site's taken path, or a call that reached the trampoline
/// for another function) and what [`call_site`] saw.
fn execute(site: &Site, hits: &mut [u64]) -> (u8, Called) {
    // SAFETY: `func` is the entry of one of this module's pool functions, all of which have
    // this signature; `hits` is large enough for every call-pool index (the trampoline indexes
    // it with the calling function's index in its pool).
    let f = unsafe {
        core::mem::transmute::<usize, extern "C" fn(*mut u64) -> u32>(site.func as usize)
    };
    match site.kind {
        PoolKind::Call => {
            // The trampoline also counts every call in the last slot.
            let total = |h: &[u64]| h.last().copied().unwrap_or(0);
            let (before, all_before) = (hits.get(site.index_in_pool).copied(), total(hits));
            let called = call_site(f, hits.as_mut_ptr());
            let counted = hits.get(site.index_in_pool).copied() != before;
            let others = total(hits).wrapping_sub(all_before) != u64::from(counted);
            let path = match (called.ret, counted, others) {
                (0, false, false) => 0,
                (0, true, false) => 1,
                _ => 2,
            };
            (path, called)
        }
        PoolKind::Prologue => {
            // The prologue's function has its call site off (the scenario picks such
            // functions): `MOV X9, X30` leaves the return address in X9, the `NOP` leaves X9
            // as it was, 0.
            let called = call_site(f, core::ptr::null_mut());
            let path = match (called.ret, called.x9) {
                (0, 0) => 0,
                (0, x9) if x9 == called.lr => 1,
                _ => 2,
            };
            (path, called)
        }
        _ => {
            let called = call_site(f, core::ptr::null_mut());
            let path = match called.ret {
                0 => 0,
                v if v as usize == site.index_in_pool.wrapping_add(1) => 1,
                _ => 2,
            };
            (path, called)
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
        let (record, seen, counted, sound) = {
            // Interrupts off: only a trap can interrupt the call, so that the CPU's word (the
            // stack mark) and textpoke's count (which a guard of the kernel's own an interrupt
            // handler met would move too) speak of the site's execution alone.
            let _pinned = NoIrq::new();
            // The CPU it runs on now, which is its own unless that one went offline (the
            // hotplug scenario): the scheduler then moved it elsewhere.
            let cpu = cpu::current();
            // The clock is read outside the counted span: local_clock() has static branches of
            // its own (`__sched_clock_stable`), whose guards textpoke counts while the kernel
            // flips them.
            let start = clock::now();
            let traps = engine_api::cpu_traps(cpu);
            let (path, called) = execute(site, &mut hits);
            let counted = engine_api::cpu_traps(cpu) != traps;
            let end = clock::now();
            let seen = called.seen && called.sound;
            let record = ExecRecord {
                start,
                end,
                site: index as u32,
                cpu: cpu as u16,
                path,
                trap: (if seen { TRAP_SEEN } else { 0 }) | (if counted { TRAP_COUNTED } else { 0 }),
            };
            (record, seen, counted, called.sound)
        };
        if !sound {
            ex.mark_misplaced.fetch_add(1, Ordering::Relaxed);
        }
        let c = &ex.counters[site.kind as usize];
        c.executions.fetch_add(1, Ordering::Relaxed);
        c.on.fetch_add(u64::from(record.path == 1), Ordering::Relaxed);
        c.trapped.fetch_add(u64::from(seen), Ordering::Relaxed);
        c.trapped_counted
            .fetch_add(u64::from(seen && counted), Ordering::Relaxed);
        c.seen_only
            .fetch_add(u64::from(seen && !counted), Ordering::Relaxed);
        c.counted_only
            .fetch_add(u64::from(counted && !seen), Ordering::Relaxed);
        if before % 2 == 1 || epoch.load(Ordering::Acquire) != before {
            c.windowed.fetch_add(1, Ordering::Relaxed);
            // Capacity is reserved up front, so a push never allocates.
            if log.len() >= LOG_CAPACITY || log.push(record, GFP_KERNEL).is_err() {
                ex.dropped.fetch_add(1, Ordering::Relaxed);
            }
        } else if record.path != committed {
            ex.stable_violations.fetch_add(1, Ordering::Relaxed);
        } else if seen {
            // A stale copy of a guard that was already gone (textpoke's `trap::vanished_guard`):
            // the execution behaved as the committed instruction, so this is no violation.
            ex.late_traps.fetch_add(1, Ordering::Relaxed);
            ex.late_traps_counted
                .fetch_add(u64::from(counted), Ordering::Relaxed);
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
                    late_traps_counted: AtomicU64::new(0),
                    mark_misplaced: AtomicU64::new(0),
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
