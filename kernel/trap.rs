// SPDX-License-Identifier: GPL-2.0

//! What every arch's trap hook does: find the pending instruction, and count the trap.
//!
//! Called in trap context (interrupts masked, possibly nested on an NMI): wait-free, lock-free,
//! allocation-free and silent.

use crate::cpu;
use crate::engine::{self, PendingInsn};

/// The instruction pending at `site` in a batch in flight, if any.
#[inline]
pub(crate) fn lookup(site: u64) -> Option<PendingInsn> {
    engine::get()?.table.lookup(cpu::current(), site)
}

/// Counts one emulated trap of instruction kind `kind` on this CPU.
#[inline]
pub(crate) fn count(kind: usize) {
    if let Some(engine) = engine::get() {
        engine.stats.count_trap(cpu::current(), kind);
    }
}
