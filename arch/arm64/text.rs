// SPDX-License-Identifier: GPL-2.0

//! Writing arm64 text and making every CPU's instruction stream see it.

use super::patch_series::ArchExports;
use crate::arch::TextWrite;
use crate::patch_series::HoldsText;
use kernel::{
    bindings,
    ffi::{c_int, c_void},
    prelude::*,
};

/// Writes the 4-byte instruction `bytes` at `addr`, then cleans and invalidates it to the point
/// of unification so that any CPU that fetches it afterwards gets the new bytes.
///
/// `aarch64_insn_write()` stores through the `FIX_TEXT_POKE0` fixmap under `patch_lock`; it does
/// no cache maintenance, so `caches_clean_inval_pou()` (`DC CVAU`, `DSB ISH`, `IC IVAU`,
/// `DSB ISH`, `ISB`) follows on the executable address. Other CPUs still need a context
/// synchronization event: that is [`sync_all`]. `text_mutex` is held to keep kprobes, which
/// arms probes under it, away from the site in between.
pub(super) fn write(exports: &ArchExports, _held: &HoldsText, addr: u64, bytes: &[u8]) -> Result {
    let word: [u8; 4] = bytes.try_into().map_err(|_| EINVAL)?;
    // SAFETY: `addr` is a registered, 4-byte aligned site inside a live module's text (validated
    // at registration, pinned by the batch).
    let ret = unsafe {
        (exports.aarch64_insn_write)(addr as usize as *mut c_void, u32::from_le_bytes(word))
    };
    kernel::error::to_result(ret)?;
    // SAFETY: Cache maintenance by virtual address on the instruction just written.
    unsafe { bindings::caches_clean_inval_pou(addr as usize, (addr as usize).wrapping_add(4)) };
    Ok(())
}

/// Instructions handed to `aarch64_insn_write_many()` per call: its arrays live on this stack
/// frame.
const WRITES_PER_CALL: usize = 64;

/// Makes `writes` in order with `aarch64_insn_write_many()` (patch 0010), which maps a page
/// once for consecutive instructions in it: one broadcast TLB invalidation per page rather than
/// per instruction. Then the same cache maintenance as [`write`], on each.
pub(super) fn write_many(
    exports: &ArchExports,
    _held: &HoldsText,
    writes: &[TextWrite<'_>],
) -> Result {
    let mut addrs = [core::ptr::null_mut::<c_void>(); WRITES_PER_CALL];
    let mut insns = [0u32; WRITES_PER_CALL];
    for chunk in writes.chunks(WRITES_PER_CALL) {
        for ((a, insn), w) in addrs.iter_mut().zip(insns.iter_mut()).zip(chunk) {
            let word: [u8; 4] = w.bytes.try_into().map_err(|_| EINVAL)?;
            *a = w.addr as usize as *mut c_void;
            *insn = u32::from_le_bytes(word);
        }
        let n = c_int::try_from(chunk.len()).map_err(|_| EINVAL)?;
        let write_many = exports.aarch64_insn_write_many;
        let (a, i) = (addrs.as_mut_ptr(), insns.as_mut_ptr());
        // SAFETY: The first `n` entries of both arrays are filled in just above, each a
        // 4-byte aligned instruction of a registered site or of a kernel change the kernel
        // handed over (text, validated, pinned by the batch); the function only reads them.
        let ret = unsafe { write_many(a, i, n) };
        // Every instruction of the chunk, even when a write failed: the ones before it were
        // made, and the commit's recovery relies on them being visible before its next sync.
        for w in chunk {
            let addr = w.addr as usize;
            // SAFETY: Cache maintenance by virtual address on an instruction of the text
            // (validated, pinned by the batch), written or not.
            unsafe { bindings::caches_clean_inval_pou(addr, addr.wrapping_add(4)) };
        }
        kernel::error::to_result(ret)?;
    }
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
