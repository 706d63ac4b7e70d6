// SPDX-License-Identifier: GPL-2.0

//! The arm64 exports of the patch series (patches 0004 and 0005).

use crate::series::{resolve, Resolver};
use kernel::{bindings, ffi::c_void};

/// `aarch64_insn_write(addr, insn)` (arch/arm64/include/asm/patching.h).
type Aarch64InsnWrite = unsafe extern "C" fn(*mut c_void, u32) -> kernel::ffi::c_int;
/// A text-poke BRK hook (arch/arm64/include/asm/debug-monitors.h, patch 0005).
pub(super) type BrkHook =
    unsafe extern "C" fn(*mut bindings::pt_regs, kernel::ffi::c_ulong) -> kernel::ffi::c_int;
type RegisterBrkHook = unsafe extern "C" fn(BrkHook) -> kernel::ffi::c_int;
type UnregisterBrkHook = unsafe extern "C" fn(BrkHook);

/// The arm64 functions textpoke needs from the patch series.
pub(crate) struct Series {
    /// `aarch64_insn_write()`: the fixmap write.
    pub(super) aarch64_insn_write: Aarch64InsnWrite,
    /// Claims `BRK #0x008` (`EBUSY` if it is taken).
    pub(super) register_text_poke_brk_hook: RegisterBrkHook,
    /// Gives it back, then waits for running hooks (`synchronize_rcu()`).
    pub(super) unregister_text_poke_brk_hook: UnregisterBrkHook,
}

impl Series {
    /// Resolves them; `None` if any is missing (recorded in `r`).
    pub(crate) fn resolve(r: &mut Resolver) -> Option<Self> {
        let aarch64_insn_write = resolve!(r, "aarch64_insn_write", Aarch64InsnWrite);
        let register = resolve!(r, "register_text_poke_brk_hook", RegisterBrkHook);
        let unregister = resolve!(r, "unregister_text_poke_brk_hook", UnregisterBrkHook);
        Some(Self {
            aarch64_insn_write: aarch64_insn_write?,
            register_text_poke_brk_hook: register?,
            unregister_text_poke_brk_hook: unregister?,
        })
    }
}
