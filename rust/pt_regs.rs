// SPDX-License-Identifier: GPL-2.0

//! The registers a trap saved (`struct pt_regs`), as the codecs' `Regs` traits see them.
//!
//! C header: [`arch/x86/include/asm/ptrace.h`](srctree/arch/x86/include/asm/ptrace.h),
//! [`arch/arm64/include/asm/ptrace.h`](srctree/arch/arm64/include/asm/ptrace.h).

use kernel::bindings;

/// The saved registers of the trap being handled.
///
/// Writing them changes where and with what state the interrupted code resumes.
#[repr(transparent)]
pub(crate) struct PtRegs(bindings::pt_regs);

impl PtRegs {
    /// Borrows the `pt_regs` a trap handler received.
    ///
    /// # Safety
    ///
    /// `ptr` must be the non-null `pt_regs` of the trap the caller is handling, not accessed
    /// through any other path while the returned borrow lives.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::pt_regs) -> &'a mut Self {
        // SAFETY: `PtRegs` is a transparent wrapper, and the caller guarantees exclusivity.
        unsafe { &mut *ptr.cast::<Self>() }
    }
}

#[cfg(CONFIG_X86_64)]
impl PtRegs {
    /// The instruction pointer (after an `INT3`: the byte after it).
    pub(crate) fn ip(&self) -> u64 {
        self.0.ip as u64
    }

    /// Sets where the interrupted code resumes.
    pub(crate) fn set_ip(&mut self, ip: u64) {
        self.0.ip = ip as _;
    }

    /// The interrupted stack pointer.
    pub(crate) fn sp(&self) -> u64 {
        self.0.sp as u64
    }

    /// Sets the stack pointer the interrupted code resumes with.
    pub(crate) fn set_sp(&mut self, sp: u64) {
        self.0.sp = sp as _;
    }
}

#[cfg(CONFIG_ARM64)]
impl PtRegs {
    fn user(&self) -> &bindings::pt_regs__bindgen_ty_1__bindgen_ty_1 {
        // SAFETY: Both union members have the same layout (`user_pt_regs` is the named view of
        // the same `regs[31], sp, pc, pstate`), so either reading is valid.
        unsafe { &self.0.__bindgen_anon_1.__bindgen_anon_1 }
    }

    fn user_mut(&mut self) -> &mut bindings::pt_regs__bindgen_ty_1__bindgen_ty_1 {
        // SAFETY: As in `user`.
        unsafe { &mut self.0.__bindgen_anon_1.__bindgen_anon_1 }
    }

    /// The program counter (at a `BRK`: the `BRK` itself).
    pub(crate) fn pc(&self) -> u64 {
        self.user().pc
    }

    /// Sets where the interrupted code resumes.
    pub(crate) fn set_pc(&mut self, pc: u64) {
        self.user_mut().pc = pc;
    }

    /// General-purpose register `x<n>`, `n` in `0..=30`; 0 for anything else.
    pub(crate) fn x(&self, n: u8) -> u64 {
        self.user().regs.get(usize::from(n)).copied().unwrap_or(0)
    }

    /// Sets general-purpose register `x<n>`, `n` in `0..=30`; other `n` are ignored.
    pub(crate) fn set_x(&mut self, n: u8, v: u64) {
        if let Some(r) = self.user_mut().regs.get_mut(usize::from(n)) {
            *r = v;
        }
    }

    /// Clears `PSTATE.BTYPE`, as executing any instruction that is not an indirect branch does.
    pub(crate) fn clear_btype(&mut self) {
        self.user_mut().pstate &= !u64::from(bindings::PSR_BTYPE_MASK);
    }
}
