// SPDX-License-Identifier: GPL-2.0

//! textpoke's public C API (kernel/textpoke.h), as this sample sees it: nothing else of the
//! engine is reachable from here.

use kernel::{
    error::{to_result, Error},
    ffi::{c_int, c_void},
    prelude::*,
    ThisModule,
};

/// `enum textpoke_op`.
#[derive(Clone, Copy)]
#[repr(i32)]
pub(crate) enum Op {
    Jmp = 1,
    Call = 2,
    Ret = 3,
    MovX9X30 = 4,
}

/// `TEXTPOKE_MAX_BATCH`.
pub(crate) const MAX_BATCH: usize = 4096;

// This file mirrors kernel/textpoke.h by hand; kernel/exports.c asserts the header's side of
// the same numbers.
static_assert!(MAX_BATCH == 4096);
static_assert!(Op::Jmp as i32 == 1 && Op::Call as i32 == 2 && Op::Ret as i32 == 3);
static_assert!(Op::MovX9X30 as i32 == 4);
static_assert!(core::mem::size_of::<BatchStats>() == 24);
static_assert!(core::mem::offset_of!(BatchStats, sites) == 8);
static_assert!(core::mem::offset_of!(BatchStats, syncs) == 12);
static_assert!(core::mem::offset_of!(BatchStats, writes) == 16);
static_assert!(core::mem::offset_of!(BatchStats, records) == 20);

/// `struct textpoke_batch_stats`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct BatchStats {
    pub(crate) nsecs: u64,
    pub(crate) sites: u32,
    pub(crate) syncs: u32,
    pub(crate) writes: u32,
    pub(crate) records: u32,
}

extern "C" {
    fn textpoke_encode(
        op: c_int,
        site: *const c_void,
        target: *const c_void,
        len: usize,
        out: *mut u8,
    ) -> c_int;
    fn textpoke_register_site(owner: *mut c_void, addr: *const c_void, len: usize) -> c_int;
    fn textpoke_unregister_site(owner: *mut c_void, addr: *const c_void) -> c_int;
    fn textpoke_batch_begin(out: *mut *mut c_void) -> c_int;
    fn textpoke_batch_add(
        batch: *mut c_void,
        owner: *mut c_void,
        addr: *const c_void,
        insn: *const u8,
        len: usize,
    ) -> c_int;
    fn textpoke_batch_commit(batch: *mut c_void) -> c_int;
    fn textpoke_batch_stats(batch: *mut c_void, out: *mut BatchStats) -> c_int;
    fn textpoke_batch_end(batch: *mut c_void);
    fn textpoke_cpu_traps(cpu: u32) -> u64;
}

fn ptr(addr: u64) -> *const c_void {
    addr as usize as *const c_void
}

/// Encodes `op` at `site` (to `target`), `out.len()` bytes long.
pub(crate) fn encode(op: Op, site: u64, target: u64, out: &mut [u8]) -> Result {
    // SAFETY: `out` is valid for writes of its length.
    to_result(unsafe {
        textpoke_encode(
            op as c_int,
            ptr(site),
            ptr(target),
            out.len(),
            out.as_mut_ptr(),
        )
    })
}

/// Registers the `len`-byte site at `addr` of `module`'s text.
pub(crate) fn register_site(module: &ThisModule, addr: u64, len: usize) -> Result {
    // SAFETY: `module` is this module, alive while it runs.
    to_result(unsafe { textpoke_register_site(module.as_ptr().cast(), ptr(addr), len) })
}

/// Unregisters `module`'s site at `addr`.
pub(crate) fn unregister_site(module: &ThisModule, addr: u64) -> Result {
    // SAFETY: As above.
    to_result(unsafe { textpoke_unregister_site(module.as_ptr().cast(), ptr(addr)) })
}

/// Guard traps emulated on `cpu` so far.
pub(crate) fn cpu_traps(cpu: usize) -> u64 {
    // SAFETY: No preconditions.
    unsafe { textpoke_cpu_traps(cpu as u32) }
}

/// A batch; ended (freed, its sites released if uncommitted) when dropped.
pub(crate) struct Batch {
    handle: *mut c_void,
}

// SAFETY: A batch may be used from any thread, one at a time (`&mut self` methods).
unsafe impl Send for Batch {}
// SAFETY: `&Batch` allows nothing.
unsafe impl Sync for Batch {}

impl Batch {
    /// Begins an empty batch.
    pub(crate) fn begin() -> Result<Self> {
        let mut handle = core::ptr::null_mut();
        // SAFETY: `handle` is valid for a pointer write.
        to_result(unsafe { textpoke_batch_begin(&mut handle) })?;
        Ok(Self { handle })
    }

    /// Adds the change of this module's site at `addr` to `insn`.
    pub(crate) fn add(&mut self, addr: u64, insn: &[u8]) -> Result {
        // SAFETY: `handle` is our live batch; `THIS_MODULE` is this module, alive while it
        // runs; `insn` is valid for its length.
        to_result(unsafe {
            textpoke_batch_add(
                self.handle,
                crate::THIS_MODULE.as_ptr().cast(),
                ptr(addr),
                insn.as_ptr(),
                insn.len(),
            )
        })
    }

    /// Commits the batch.
    pub(crate) fn commit(&mut self) -> Result {
        // SAFETY: `handle` is our live batch.
        to_result(unsafe { textpoke_batch_commit(self.handle) })
    }

    /// What the commit cost.
    pub(crate) fn stats(&mut self) -> Result<BatchStats> {
        let mut s = BatchStats::default();
        // SAFETY: `handle` is our live batch and `s` is valid for a write.
        to_result(unsafe { textpoke_batch_stats(self.handle, &mut s) })?;
        Ok(s)
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        // SAFETY: `handle` came from `textpoke_batch_begin` and is not used afterwards.
        unsafe { textpoke_batch_end(self.handle) };
    }
}

/// The errno of `e` as a positive number, for messages.
pub(crate) fn errno_of(e: Error) -> i32 {
    -e.to_errno()
}
