// SPDX-License-Identifier: GPL-2.0

//! The engine's state, and the one pointer through which the trap hooks and the C API reach it.

use crate::arch::Arch;
use crate::cpu;
use crate::current_arch::CurrentArch;
use crate::entry::Entry;
use crate::module_text::Module;
use crate::patch_series::{Generic, SymbolResolver};
use crate::pending::{CpuReaders, PendingTable, ENGINE_SLOTS};
use crate::poke_log::PokeLog;
use crate::replaced::Replaced;
use crate::sites::Sites;
use crate::stats::Stats;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use kernel::{new_mutex, prelude::*, sync::Mutex};

/// The patch series' exports: the generic ones and this arch's.
pub(crate) struct Exports {
    /// `perf_event_text_poke()` and `text_mutex`.
    pub(crate) generic: Generic,
    /// This arch's writes and trap-hook registration.
    pub(crate) arch: <CurrentArch as Arch>::Exports,
}

impl Exports {
    /// Resolves every export, or explains which are missing and fails with `ENOSYS`.
    pub(crate) fn resolve() -> Result<Self> {
        let mut r = SymbolResolver::new();
        let generic = Generic::resolve(&mut r);
        let arch = CurrentArch::resolve(&mut r);
        r.finish()?;
        match (generic, arch) {
            (Some(generic), Some(arch)) => Ok(Self { generic, arch }),
            // `finish` fails whenever a lookup did, so this cannot be reached; refuse loudly
            // all the same.
            _ => {
                pr_err!("patch series resolved incompletely\n");
                Err(Error::from_errno(-(kernel::bindings::ENOSYS as i32)))
            }
        }
    }
}

/// Everything the engine keeps.
#[pin_data]
pub(crate) struct Engine {
    /// The patch series' functions.
    pub(crate) exports: Exports,
    /// Registered sites.
    #[pin]
    pub(crate) sites: Mutex<Sites>,
    /// Pending instructions of the batches in flight, one slot reserved for the kernel's.
    pub(crate) table: PendingTable<Entry, KVec<CpuReaders<ENGINE_SLOTS>>, ENGINE_SLOTS>,
    /// Sites whose guards were recently replaced (see `trap.rs`).
    pub(crate) replaced: Replaced,
    /// The kernel's own changes, queued until it applies them (`patcher.rs`).
    pub(crate) queue: crate::kernel_queue::Queue,
    /// Counters.
    pub(crate) stats: Stats,
    /// The records emitted so far.
    #[pin]
    pub(crate) log: PokeLog,
    /// textpoke itself.
    pub(crate) module: Module,
    next_batch: AtomicU64,
}

impl Engine {
    /// A fresh engine for the textpoke module `module`.
    pub(crate) fn new(exports: Exports, module: Module) -> Result<impl PinInit<Self, Error>> {
        let cpus = cpu::possible();
        let mut readers = KVec::with_capacity(cpus, GFP_KERNEL)?;
        for _ in 0..cpus {
            readers.push(CpuReaders::new(), GFP_KERNEL)?;
        }
        let stats = Stats::new(cpus)?;
        let replaced = Replaced::new()?;
        let queue = crate::kernel_queue::Queue::new()?;
        Ok(try_pin_init!(Self {
            exports,
            sites <- new_mutex!(Sites::new(module), "textpoke:sites"),
            table: PendingTable::with_reserved(readers, 1),
            replaced,
            queue,
            stats,
            log <- PokeLog::new(),
            module,
            next_batch: AtomicU64::new(1),
        }))
    }

    /// A new batch id (never 0, which marks a site no batch owns).
    pub(crate) fn next_batch_id(&self) -> u64 {
        self.next_batch.fetch_add(1, Ordering::Relaxed)
    }
}

/// The published engine; null while the module is not (or no longer) ready.
static ENGINE: AtomicPtr<Engine> = AtomicPtr::new(core::ptr::null_mut());

/// Runs `f` with the engine, if it is published.
///
/// The reference cannot outlive the call. That is what makes it sound: the engine is freed
/// only by [`Published`]'s drop at unload, after the trap hook is unregistered and the debugfs
/// files are removed, while no other module can be inside the API (they depend on textpoke, so
/// it cannot be unloaded before them) and no batch exists (each pins the module).
#[inline(always)]
pub(crate) fn with<R>(f: impl FnOnce(&Engine) -> R) -> Option<R> {
    let ptr = ENGINE.load(Ordering::Acquire);
    // SAFETY: Non-null only between `Published::new` and `Published::drop`, during which the
    // engine is alive; see above for why no call of `f` can still be running at the drop.
    let engine = unsafe { ptr.as_ref() }?;
    Some(f(engine))
}

/// Owns the engine while it is reachable through [`with`].
pub(crate) struct Published {
    engine: *mut Engine,
}

// SAFETY: The engine is `Sync` (atomics, locks, immutable fields) and only shared references
// to it are handed out.
unsafe impl Send for Published {}
// SAFETY: As above.
unsafe impl Sync for Published {}

impl Published {
    /// Publishes `engine`.
    pub(crate) fn new(engine: Pin<KBox<Engine>>) -> Self {
        // SAFETY: The engine is never moved out of its allocation: it is dropped in place by
        // `KBox::from_raw` in `drop`.
        let engine = KBox::into_raw(unsafe { Pin::into_inner_unchecked(engine) });
        // Release: a trap hook or API caller that sees the pointer sees the engine initialized.
        ENGINE.store(engine, Ordering::Release);
        Self { engine }
    }

    /// The published engine.
    pub(crate) fn engine(&self) -> &Engine {
        // SAFETY: Owned by `self` until drop.
        unsafe { &*self.engine }
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        ENGINE.store(core::ptr::null_mut(), Ordering::Release);
        // SAFETY: Created by `KBox::into_raw` in `new`; see `with` for why nobody uses it anymore.
        drop(unsafe { KBox::from_raw(self.engine) });
    }
}
