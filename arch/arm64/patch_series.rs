// SPDX-License-Identifier: GPL-2.0

//! The arm64 exports of the patch series (patches 0004 and 0010; the guard's trap hook is generic, patch
//! 0007, `rust/patch_series.rs`).

use crate::patch_series::{resolve, SymbolResolver};
use kernel::ffi::c_void;

/// `aarch64_insn_write(addr, insn)` (arch/arm64/include/asm/patching.h).
type Aarch64InsnWrite = unsafe extern "C" fn(*mut c_void, u32) -> kernel::ffi::c_int;

/// `aarch64_insn_write_many(addrs, insns, cnt)` (arch/arm64/include/asm/patching.h, patch
/// 0010).
type Aarch64InsnWriteMany =
    unsafe extern "C" fn(*mut *mut c_void, *mut u32, kernel::ffi::c_int) -> kernel::ffi::c_int;

/// The arm64 functions textpoke needs from the patch series.
pub(crate) struct ArchExports {
    /// `aarch64_insn_write()`: the fixmap write.
    pub(super) aarch64_insn_write: Aarch64InsnWrite,
    /// `aarch64_insn_write_many()`: fixmap writes, one mapping per page.
    pub(super) aarch64_insn_write_many: Aarch64InsnWriteMany,
}

impl ArchExports {
    /// Resolves them; `None` if any is missing (recorded in `r`).
    pub(crate) fn resolve(r: &mut SymbolResolver) -> Option<Self> {
        Some(Self {
            aarch64_insn_write: resolve!(r, "aarch64_insn_write", Aarch64InsnWrite)?,
            aarch64_insn_write_many: resolve!(r, "aarch64_insn_write_many", Aarch64InsnWriteMany)?,
        })
    }
}
