// SPDX-License-Identifier: GPL-2.0

//! The C API other modules use (prototypes and documentation in kernel/textpoke.h; the exports
//! are in kernel/exports.c).
//!
//! Every entry point checks its pointers, logs a line and returns a distinct negative errno on
//! bad input (see [`crate::errno`]), and changes nothing when it refuses.

use crate::arch::Arch;
use crate::batch::{Batch, BatchStats};
use crate::current_arch::CurrentArch;
use crate::engine::{self, Engine};
use crate::errno;
use crate::insn::Op;
use crate::module_text::Module;
use crate::sites::Sites;
use kernel::{
    bindings,
    ffi::{c_int, c_void},
    prelude::*,
};

/// Runs `f` with the engine, turning the result into the C convention (0 or -errno).
fn with_engine(f: impl FnOnce(&Engine) -> Result) -> c_int {
    match engine::with(f) {
        Some(Ok(())) => 0,
        Some(Err(e)) => e.to_errno(),
        None => {
            pr_err!("refusing a call: textpoke is not ready or is going away\n");
            errno::module_gone().to_errno()
        }
    }
}

/// Borrows `len` bytes at `ptr` from a C caller: `EINVAL` for a null pointer, `EMSGSIZE` (a
/// wrongly sized instruction) for an empty or oversized one.
///
/// # Safety
///
/// If non-null, `ptr` must be valid for reads of `len` bytes for the returned lifetime.
unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8]> {
    if ptr.is_null() {
        return Err(EINVAL);
    }
    if len == 0 || len > crate::insn::MAX_INSN_LEN {
        return Err(errno::wrong_size());
    }
    // SAFETY: Non-null, and the caller guarantees validity for `len` bytes.
    Ok(unsafe { core::slice::from_raw_parts(ptr, len) })
}

/// `textpoke_encode()`: builds the instruction `op` for `site`, `len` bytes long, into `out`.
///
/// # Safety
///
/// `out` must be null or valid for writes of `len` bytes.
#[no_mangle]
pub(crate) unsafe extern "C" fn textpoke_encode(
    op: c_int,
    site: *const c_void,
    target: *const c_void,
    len: usize,
    out: *mut u8,
) -> c_int {
    let Some(op) = Op::from_c(op) else {
        pr_err!("encode: unknown operation {op}\n");
        return EINVAL.to_errno();
    };
    if out.is_null() {
        pr_err!("encode: no output buffer\n");
        return EINVAL.to_errno();
    }
    let (site, target) = (site as usize as u64, target as usize as u64);
    let encoded = CurrentArch::encode(op, site, target, len);
    match encoded {
        Ok(bytes) if bytes.len() == len => {
            // SAFETY: `out` is valid for `len` bytes (caller) and `bytes` holds exactly `len`.
            unsafe { core::ptr::copy_nonoverlapping(bytes.as_slice().as_ptr(), out, len) };
            0
        }
        Ok(_) => {
            pr_err!("encode {op:?} at {site:#x}: it is not {len} bytes long\n");
            errno::wrong_size().to_errno()
        }
        Err(e) => {
            pr_err!(
                "encode {op:?} at {site:#x} to {target:#x}: {}\n",
                e.as_str()
            );
            errno::insn(e).to_errno()
        }
    }
}

/// `textpoke_register_site()`: declares the `len`-byte site at `addr` in `owner`'s text.
///
/// # Safety
///
/// `owner` must be null or the caller's own `struct module` (`THIS_MODULE`).
#[no_mangle]
pub(crate) unsafe extern "C" fn textpoke_register_site(
    owner: *mut bindings::module,
    addr: *const c_void,
    len: usize,
) -> c_int {
    with_engine(|engine| {
        // SAFETY: The caller passes its own, live module.
        let owner = unsafe { Module::from_raw(owner) }.ok_or_else(no_owner)?;
        let addr = addr as usize as u64;
        engine.sites.lock().vet(owner, addr, len)?;
        // Not under the sites lock: see `Sites::refuse_other_patchers`.
        Sites::refuse_other_patchers(&engine.exports.generic, addr, len)?;
        engine.sites.lock().register(owner, addr, len)
    })
}

/// `textpoke_unregister_site()`: forgets `owner`'s site at `addr`.
///
/// # Safety
///
/// As for [`textpoke_register_site`].
#[no_mangle]
pub(crate) unsafe extern "C" fn textpoke_unregister_site(
    owner: *mut bindings::module,
    addr: *const c_void,
) -> c_int {
    with_engine(|engine| {
        // SAFETY: The caller passes its own, live module.
        let owner = unsafe { Module::from_raw(owner) }.ok_or_else(no_owner)?;
        engine.sites.lock().unregister(owner, addr as usize as u64)
    })
}

/// The errno and log line for a call without its module (`THIS_MODULE` is never null in a
/// module).
fn no_owner() -> Error {
    pr_err!("refusing a call without its module (pass THIS_MODULE)\n");
    EINVAL
}

/// `textpoke_batch_begin()`: starts an empty batch, stored in `*out`.
///
/// # Safety
///
/// `out` must be null or valid for a pointer write.
#[no_mangle]
pub(crate) unsafe extern "C" fn textpoke_batch_begin(out: *mut *mut c_void) -> c_int {
    if out.is_null() {
        pr_err!("batch_begin: nowhere to store the batch\n");
        return EINVAL.to_errno();
    }
    with_engine(|engine| {
        let batch = KBox::new(Batch::new(engine)?, GFP_KERNEL)?;
        // SAFETY: `out` is valid for writes (caller); ownership passes to the caller until
        // `textpoke_batch_end()`.
        unsafe { *out = KBox::into_raw(batch).cast::<c_void>() };
        Ok(())
    })
}

/// The batch behind a C handle.
///
/// # Safety
///
/// `batch` must be null or a handle from `textpoke_batch_begin()` not yet ended, used by one
/// thread at a time.
unsafe fn batch_mut<'a>(batch: *mut c_void) -> Result<&'a mut Batch> {
    // SAFETY: Guaranteed by the caller.
    unsafe { batch.cast::<Batch>().as_mut() }.ok_or_else(|| {
        pr_err!("refusing a call without a batch\n");
        EINVAL
    })
}

/// `textpoke_batch_add()`: adds the change of `owner`'s site at `addr` to the `len`-byte
/// `insn`.
///
/// # Safety
///
/// `batch` as for [`batch_mut`]; `owner` as for [`textpoke_register_site`]; `insn` valid for
/// reads of `len` bytes.
#[no_mangle]
pub(crate) unsafe extern "C" fn textpoke_batch_add(
    batch: *mut c_void,
    owner: *mut bindings::module,
    addr: *const c_void,
    insn: *const u8,
    len: usize,
) -> c_int {
    with_engine(|engine| {
        // SAFETY: The caller passes its own, live module.
        let owner = unsafe { Module::from_raw(owner) }.ok_or_else(no_owner)?;
        // SAFETY: Forwarded from the caller.
        let batch = unsafe { batch_mut(batch) }?;
        // SAFETY: Forwarded from the caller.
        let insn = unsafe { bytes(insn, len) }.inspect_err(|_| {
            pr_err!(
                "refusing change at {:#x}: no instruction or {len} bytes\n",
                addr as usize
            );
        })?;
        batch.add(engine, owner, addr as usize as u64, insn)
    })
}

/// `textpoke_batch_commit()`: applies the batch with the guarded protocol.
///
/// # Safety
///
/// `batch` as for [`batch_mut`]. Process context; sleeps.
#[no_mangle]
pub(crate) unsafe extern "C" fn textpoke_batch_commit(batch: *mut c_void) -> c_int {
    with_engine(|engine| {
        // SAFETY: Forwarded from the caller.
        unsafe { batch_mut(batch) }?.commit(engine)
    })
}

/// `textpoke_batch_stats()`: copies what the commit cost into `*out`.
///
/// # Safety
///
/// `batch` as for [`batch_mut`]; `out` null or valid for a write of the stats struct.
#[no_mangle]
pub(crate) unsafe extern "C" fn textpoke_batch_stats(
    batch: *mut c_void,
    out: *mut BatchStats,
) -> c_int {
    // SAFETY: Forwarded from the caller.
    let Ok(batch) = (unsafe { batch_mut(batch) }) else {
        return EINVAL.to_errno();
    };
    if out.is_null() {
        pr_err!("batch_stats: nowhere to store the stats\n");
        return EINVAL.to_errno();
    }
    // SAFETY: `out` is valid for writes (caller).
    unsafe { out.write(batch.stats()) };
    0
}

/// `textpoke_batch_end()`: frees a batch, giving back the sites of an uncommitted one.
///
/// # Safety
///
/// `batch` must be null or a handle from `textpoke_batch_begin()`, not used afterwards.
#[no_mangle]
pub(crate) unsafe extern "C" fn textpoke_batch_end(batch: *mut c_void) {
    if !batch.is_null() {
        // SAFETY: The handle came from `KBox::into_raw` in `textpoke_batch_begin()` and the
        // caller gives it up.
        drop(unsafe { KBox::from_raw(batch.cast::<Batch>()) });
    }
}

/// `textpoke_cpu_traps()`: guard traps emulated on `cpu` so far.
#[no_mangle]
pub(crate) extern "C" fn textpoke_cpu_traps(cpu: u32) -> u64 {
    engine::with(|e| e.stats.cpu_traps(cpu as usize)).unwrap_or(0)
}
