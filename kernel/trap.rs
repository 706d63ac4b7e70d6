// SPDX-License-Identifier: GPL-2.0

//! What every arch's trap hook does: find the pending instruction, and count the trap.
//!
//! Called in trap context (interrupts masked, possibly nested on an NMI): wait-free, lock-free,
//! allocation-free and silent.

use crate::cpu;
use crate::engine::{self, PendingInsn};
use crate::insn::MAX_INSN_LEN;

/// The instruction pending at `site` in a batch in flight, if any.
#[inline]
pub(crate) fn lookup(site: u64) -> Option<PendingInsn> {
    engine::get()?.table.lookup(cpu::current(), site)
}

/// The bytes at `site` now, if they no longer start with the guard `guard`.
///
/// For a trap that no batch in flight claims. On hardware this cannot happen for one of our
/// guards: a batch retires only after its last all-CPU sync, which makes every CPU refetch.
/// Under QEMU's multi-threaded TCG it does: a vCPU can keep running a translation of a guard
/// that was replaced (observed on arm64, where it made the CPU oops, or spin, if it was simply
/// resumed at the site). So the hooks emulate what is there now, as the CPU should have run
/// it. The read uses the data view, which is current.
pub(crate) fn vanished_guard(site: u64, guard: &[u8]) -> Option<[u8; MAX_INSN_LEN]> {
    let mut now = [0u8; MAX_INSN_LEN];
    crate::kernel_text::read(site, now.get_mut(..guard.len())?).ok()?;
    (now.get(..guard.len())? != guard).then_some(now)
}

/// Counts one trap on a vanished guard on this CPU (see [`vanished_guard`]).
#[inline]
pub(crate) fn count_vanished() {
    if let Some(engine) = engine::get() {
        engine.stats.count_vanished(cpu::current());
    }
}

/// Counts one emulated trap of instruction kind `kind` on this CPU.
#[inline]
pub(crate) fn count(kind: usize) {
    if let Some(engine) = engine::get() {
        engine.stats.count_trap(cpu::current(), kind);
    }
}
