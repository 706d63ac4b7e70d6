// SPDX-License-Identifier: GPL-2.0

//! Writing arm64 text and making every CPU's instruction stream see it.

use super::series::Series;
use crate::series::TextMutexGuard;
use kernel::{bindings, ffi::c_void, prelude::*};

/// Writes the 4-byte instruction `bytes` at `addr`, then cleans and invalidates it to the point
/// of unification so that any CPU that fetches it afterwards gets the new bytes.
///
/// `aarch64_insn_write()` stores through the `FIX_TEXT_POKE0` fixmap under `patch_lock`; it does
/// no cache maintenance, so `caches_clean_inval_pou()` (`DC CVAU`, `DSB ISH`, `IC IVAU`,
/// `DSB ISH`, `ISB`) follows on the executable address. Other CPUs still need a context
/// synchronization event: that is [`sync_all`]. `text_mutex` is held to keep kprobes, which
/// arms probes under it, away from the site in between.
pub(super) fn write(
    series: &Series,
    _held: &TextMutexGuard<'_>,
    addr: u64,
    bytes: &[u8],
) -> Result {
    let word: [u8; 4] = bytes.try_into().map_err(|_| EINVAL)?;
    // SAFETY: `addr` is a registered, 4-byte aligned site inside a live module's text (validated
    // at registration, pinned by the batch).
    let ret = unsafe {
        (series.aarch64_insn_write)(addr as usize as *mut c_void, u32::from_le_bytes(word))
    };
    kernel::error::to_result(ret)?;
    // SAFETY: Cache maintenance by virtual address on the instruction just written.
    unsafe { bindings::caches_clean_inval_pou(addr as usize, (addr as usize).wrapping_add(4)) };
    Ok(())
}

/// Makes every other online CPU take an IPI (a context-synchronizing exception), and waits.
///
/// After the per-write cache maintenance this guarantees every CPU refetches: no CPU executes
/// an instruction fetched before the call, and none is still inside a trap handler entered
/// before it, since BRK handlers run with interrupts masked. The calling CPU synchronized
/// itself with the `ISB` at the end of `caches_clean_inval_pou()`.
pub(super) fn sync_all() {
    // SAFETY: Process context with interrupts enabled, as `kick_all_cpus_sync()` requires.
    unsafe { bindings::kick_all_cpus_sync() };
}

/// `ISB`: the calling CPU refetches everything after it.
pub(super) fn sync_local() {
    // SAFETY: An instruction barrier has no effect but on this CPU's instruction stream.
    unsafe { core::arch::asm!("isb", options(nostack, preserves_flags)) };
}
