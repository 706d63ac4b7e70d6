// SPDX-License-Identifier: GPL-2.0

//! What the x86 trap path needs beyond the codec: the interrupted stack, and resuming a trap
//! whose guard was replaced.
//!
//! A kernel-mode `INT3` reaches the engine's handler first thing in `exc_int3()`, right after
//! `poke_int3_handler()` (the kernel's own batches) and before kprobes, kgdb and the die
//! notifiers, through the common early hook of patch 0007. Nothing here takes a lock,
//! allocates or prints, and everything is in the section kprobes refuse.

use super::insn::{Listed, Stack};

use crate::pt_regs::PtRegs;

/// The interrupted kernel stack of the trap being handled, as `CALL` and `RET` emulation see it.
///
/// # Invariants
///
/// `sp` is the stack pointer the trap interrupted, on a mapped kernel stack with the 6-word
/// gap the `#BP` entry code leaves below it.
pub(super) struct KernelStack {
    sp: u64,
}

/// Size of one stack slot.
const WORD: u64 = 8;

impl KernelStack {
    /// The stack of the kernel-mode trap whose registers are `regs`.
    ///
    /// # Safety
    ///
    /// `regs` must be the saved registers of a kernel-mode `INT3` being handled, as they were
    /// when the trap was taken.
    #[link_section = ".kprobes.text"]
    #[inline(always)]
    pub(super) unsafe fn new(regs: &PtRegs) -> Self {
        use super::insn::Regs;
        // INVARIANT: The caller guarantees `regs` is the trap's own state.
        Self { sp: regs.sp() }
    }
}

impl Stack for KernelStack {
    /// Reads the word at `addr`, if it is the one the interrupted stack pointer points to
    /// (`RET`'s return address); 0 for any other address.
    #[link_section = ".kprobes.text"]
    #[inline(always)]
    fn read_u64(&self, addr: u64) -> u64 {
        if addr != self.sp {
            return 0;
        }
        // SAFETY: By the type invariant, `sp` is the top of a mapped kernel stack.
        unsafe { core::ptr::read(addr as usize as *const u64) }
    }

    /// Writes `value` at `addr`, if it is the word just below the interrupted stack pointer
    /// (`CALL`'s return address); ignores any other address.
    #[link_section = ".kprobes.text"]
    #[inline(always)]
    fn write_u64(&mut self, addr: u64, value: u64) {
        if addr != self.sp.wrapping_sub(WORD) {
            return;
        }
        // SAFETY: By the type invariant, the word below `sp` lies in the 6-word gap the entry
        // code leaves for exactly this (arch/x86/entry/entry_64.S), above `pt_regs`.
        unsafe { core::ptr::write(addr as usize as *mut u64, value) };
    }
}

/// For a trap at `site` whose guard was replaced by `now`: emulates what is there if it is a
/// listed instruction, or resumes at the site so that the CPU executes it.
#[link_section = ".kprobes.text"]
#[inline(always)]
pub(super) fn resume_replaced(site: u64, now: &[u8], regs: &mut PtRegs) -> bool {
    use super::insn::Regs;
    // SAFETY: Called from the trap handler with the trap's own registers.
    let mut stack = unsafe { KernelStack::new(regs) };
    let listed = [5, 2, 1]
        .into_iter()
        .find_map(|len| Listed::accept(site, now.get(..len)?).ok());
    match listed {
        Some(insn) => insn.emulate(regs, &mut stack),
        None => regs.set_ip(site),
    }
    true
}
