// SPDX-License-Identifier: GPL-2.0

//! Reading kernel text without trusting the address.

use kernel::{bindings, ffi::c_void, prelude::*};

/// Copies `out.len()` bytes of kernel memory at `addr` into `out`.
///
/// Fails with `EFAULT` instead of faulting if the address is not mapped.
pub(crate) fn read(addr: u64, out: &mut [u8]) -> Result {
    // SAFETY: `out` is valid for writes of its length, and `copy_from_kernel_nofault` handles
    // any source address, returning an error instead of faulting.
    let ret = unsafe {
        bindings::copy_from_kernel_nofault(
            out.as_mut_ptr().cast::<c_void>(),
            addr as usize as *const c_void,
            out.len(),
        )
    };
    if ret == 0 {
        Ok(())
    } else {
        Err(EFAULT)
    }
}
