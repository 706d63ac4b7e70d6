// SPDX-License-Identifier: GPL-2.0

//! What every arch's trap hook does: find the pending instruction, and count the trap.
//!
//! Called in trap context (interrupts masked, possibly nested on an NMI): wait-free, lock-free,
//! allocation-free and silent.

use crate::cpu;
use crate::engine::{self, Engine, PendingInsn};
use crate::insn::MAX_INSN_LEN;

/// The engine and the CPU a trap is handled on, resolved once per trap.
pub(crate) struct TrapCpu {
    engine: &'static Engine,
    cpu: usize,
}

impl TrapCpu {
    /// `None` while no engine is published: the hooks are registered only while one is, so no
    /// guard of ours can be executed then.
    #[inline]
    pub(crate) fn current() -> Option<Self> {
        Some(Self {
            engine: engine::get()?,
            cpu: cpu::current(),
        })
    }

    /// The instruction pending at `site` in a batch in flight, if any.
    #[inline]
    pub(crate) fn lookup(&self, site: u64) -> Option<PendingInsn> {
        self.engine.table.lookup(self.cpu, site)
    }

    /// Counts one emulated trap of instruction kind `kind`.
    #[inline]
    pub(crate) fn count(&self, kind: usize) {
        self.engine.stats.count_trap(self.cpu, kind);
    }

    /// Counts one trap on a vanished guard (see [`vanished_guard`]).
    #[inline]
    pub(crate) fn count_vanished(&self) {
        self.engine.stats.count_vanished(self.cpu);
    }
}

/// The bytes at `site` now, if they no longer start with the guard `guard`.
///
/// For a trap that no batch in flight claims. On hardware this cannot happen for one of our
/// guards: a batch retires only after its last all-CPU sync, which makes every CPU refetch.
/// Under QEMU's multi-threaded TCG it does: a vCPU can keep running a translation of a guard
/// that was replaced (observed on arm64, where it made the CPU oops, or spin, if it was simply
/// resumed at the site). So the hooks emulate what is there now, as the CPU should have run
/// it. The read uses the data view, which is current, and covers a whole instruction, not just
/// the guard's bytes: on x86 a one-byte guard gives way to instructions of up to five.
pub(crate) fn vanished_guard(site: u64, guard: &[u8]) -> Option<[u8; MAX_INSN_LEN]> {
    let mut now = [0u8; MAX_INSN_LEN];
    crate::kernel_text::read(site, &mut now).ok()?;
    (!now.starts_with(guard)).then_some(now)
}
