// SPDX-License-Identifier: GPL-2.0

//! Writing x86 text and making every CPU's instruction stream see it.

use super::patch_series::{text_poke_write, ArchExports};
use crate::arch::TextWrite;
use crate::cpu;
use crate::patch_series::HoldsText;
use kernel::{
    ffi::{c_uint, c_void},
    prelude::*,
};

/// Writes `bytes` at `addr` with `text_poke()`: through a private mm, never a writable alias.
///
/// Holding `text_mutex` (the guard) is what `text_poke()` asserts, and serializes with every
/// in-kernel poker. x86 writes cannot fail once the site is validated module text.
pub(super) fn write(exports: &ArchExports, _held: &HoldsText, addr: u64, bytes: &[u8]) -> Result {
    // SAFETY: `addr` is a registered site (inside a live module's text, validated at
    // registration, pinned by the batch), `bytes` is valid for `len` bytes, and `text_mutex`
    // is held as `text_poke()` requires.
    unsafe {
        (exports.text_poke)(
            addr as usize as *mut c_void,
            bytes.as_ptr().cast::<c_void>(),
            bytes.len(),
        )
    };
    Ok(())
}

/// Writes handed to `text_poke_many()` per call: the C array lives on this stack frame.
const WRITES_PER_CALL: usize = 32;

/// Makes `writes` in order with `text_poke_many()` (patch 0009), which switches to the
/// temporary mm once per 16 writes rather than once per write, and maps a page once for
/// consecutive writes to it. The same rules as [`write`] for each.
pub(super) fn write_many(
    exports: &ArchExports,
    _held: &HoldsText,
    writes: &[TextWrite<'_>],
) -> Result {
    let mut c = [text_poke_write {
        addr: core::ptr::null_mut(),
        opcode: core::ptr::null(),
        len: 0,
    }; WRITES_PER_CALL];
    for chunk in writes.chunks(WRITES_PER_CALL) {
        for (slot, w) in c.iter_mut().zip(chunk) {
            *slot = text_poke_write {
                addr: w.addr as usize as *mut c_void,
                opcode: w.bytes.as_ptr().cast::<c_void>(),
                len: w.bytes.len(),
            };
        }
        let n = c_uint::try_from(chunk.len()).map_err(|_| EINVAL)?;
        // SAFETY: The first `n` entries of `c` are filled in just above, each naming a
        // registered site or a kernel change the kernel handed over (text, validated, pinned
        // by the batch) and bytes valid for `len`; `text_mutex` is held as `text_poke_many()`
        // requires.
        let ret = unsafe { (exports.text_poke_many)(c.as_ptr(), n) };
        kernel::error::to_result(ret)?;
    }
    Ok(())
}

extern "C" {
    fn textpoke_x86_sync_core();
}

/// Serializes the calling CPU's instruction stream (`sync_core()`).
pub(super) fn sync_local() {
    // SAFETY: `sync_core()` only serializes this CPU's instruction stream.
    unsafe { textpoke_x86_sync_core() };
}

/// The IPI callback of [`sync_all`].
///
/// # Safety
///
/// Called by `on_each_cpu_cond_mask()` in interrupt context; takes no data.
unsafe extern "C" fn do_sync_core(_info: *mut c_void) {
    sync_local();
}

/// Serializes every online CPU (an IPI running `sync_core()`), and waits for all of them.
///
/// Afterwards no CPU executes anything it fetched before the call, and none is still inside a
/// trap handler entered before it: handlers run with interrupts off, so the IPI waits for them.
/// This is `text_poke_sync()`, which 6.12 does not export.
pub(super) fn sync_all() {
    // SAFETY: `do_sync_core` is safe in interrupt context and takes no data; the batch path runs
    // in process context with interrupts enabled.
    unsafe { cpu::on_each_cpu(do_sync_core, core::ptr::null_mut()) };
}
