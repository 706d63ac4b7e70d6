// SPDX-License-Identifier: GPL-2.0

//! The registers a trap saved (`struct pt_regs`).
//!
//! Each arch reads and writes the fields its emulation needs (`arch/<arch>/regs.rs`, which
//! implements its codec's `Regs` trait on this type).
//!
//! C header: `arch/<arch>/include/asm/ptrace.h`.

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
    #[link_section = ".kprobes.text"]
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::pt_regs) -> &'a mut Self {
        // SAFETY: `PtRegs` is a transparent wrapper, and the caller guarantees exclusivity.
        unsafe { &mut *ptr.cast::<Self>() }
    }

    /// The C structure.
    #[link_section = ".kprobes.text"]
    pub(crate) fn raw(&self) -> &bindings::pt_regs {
        &self.0
    }

    /// The C structure, to change.
    #[link_section = ".kprobes.text"]
    pub(crate) fn raw_mut(&mut self) -> &mut bindings::pt_regs {
        &mut self.0
    }
}
