// SPDX-License-Identifier: GPL-2.0

//! The engine's state, and the one pointer through which the trap hooks and the C API reach it.

use crate::arch;
use crate::cpu;
use crate::module_text::Module;
use crate::pending::{CpuReaders, Pending, PendingTable};
use crate::poke_log::PokeLog;
use crate::series::Series;
use crate::sites::Sites;
use crate::stats::Stats;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use kernel::{new_mutex, prelude::*, sync::Mutex};

/// A pending-table entry: a site and the instruction its guard stands for.
#[derive(Clone, Copy)]
pub(crate) struct PendingInsn {
    /// The site's first byte.
    pub(crate) addr: u64,
    /// The site's length.
    pub(crate) len: u8,
    /// The new instruction, decoded: what the trap handler emulates.
    pub(crate) insn: arch::Insn,
}

impl Pending for PendingInsn {
    fn addr(&self) -> u64 {
        self.addr
    }
    fn size(&self) -> u64 {
        u64::from(self.len)
    }
}

/// Everything the engine keeps.
pub(crate) struct Engine {
    /// The patch series' functions.
    pub(crate) series: Series,
    /// Registered sites.
    pub(crate) sites: Pin<KBox<Mutex<Sites>>>,
    /// Pending instructions of the batches in flight.
    pub(crate) table: PendingTable<PendingInsn, KVec<CpuReaders>>,
    /// Counters.
    pub(crate) stats: Stats,
    /// The records emitted so far.
    pub(crate) log: PokeLog,
    /// textpoke itself.
    pub(crate) module: Module,
    next_batch: AtomicU64,
}

impl Engine {
    /// A fresh engine for the textpoke module `module`.
    pub(crate) fn new(series: Series, module: Module) -> Result<Self> {
        let cpus = cpu::possible();
        let mut readers = KVec::with_capacity(cpus, GFP_KERNEL)?;
        for _ in 0..cpus {
            readers.push(CpuReaders::new(), GFP_KERNEL)?;
        }
        Ok(Self {
            series,
            sites: KBox::pin_init(new_mutex!(Sites::new(module), "textpoke:sites"), GFP_KERNEL)?,
            table: PendingTable::new(readers),
            stats: Stats::new(cpus)?,
            log: PokeLog::new()?,
            module,
            next_batch: AtomicU64::new(1),
        })
    }

    /// A new batch id (never 0, which marks a site no batch owns).
    pub(crate) fn next_batch_id(&self) -> u64 {
        self.next_batch.fetch_add(1, Ordering::Relaxed)
    }
}

/// The published engine; null while the module is not (or no longer) ready.
static ENGINE: AtomicPtr<Engine> = AtomicPtr::new(core::ptr::null_mut());

/// The engine, if published.
///
/// The `'static` lifetime is justified by the teardown order in [`Published`]'s drop: the
/// pointer is cleared only after the trap hook is unregistered and the debugfs files are
/// removed, and while no other module can call the API (they depend on textpoke, so it cannot
/// be unloaded before them) and no batch exists (each pins the module).
#[inline]
pub(crate) fn get() -> Option<&'static Engine> {
    let ptr = ENGINE.load(Ordering::Acquire);
    // SAFETY: Non-null only between `Published::new` and `Published::drop`, during which the
    // engine is alive (see above).
    unsafe { ptr.as_ref() }
}

/// Owns the engine while it is reachable through [`get`].
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
    pub(crate) fn new(engine: KBox<Engine>) -> Self {
        let engine = KBox::into_raw(engine);
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
        // SAFETY: Created by `KBox::into_raw` in `new`; see `get` for why nobody uses it anymore.
        drop(unsafe { KBox::from_raw(self.engine) });
    }
}
