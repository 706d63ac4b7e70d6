// SPDX-License-Identifier: GPL-2.0

//! The arm64 registers a trap saved, as the codec's emulation sees them.
//!
//! C header: [`arch/arm64/include/asm/ptrace.h`](srctree/arch/arm64/include/asm/ptrace.h).

use super::insn::Regs;
use crate::pt_regs::PtRegs;
use kernel::bindings;

type User = bindings::pt_regs__bindgen_ty_1__bindgen_ty_1;

#[link_section = ".kprobes.text"]
#[inline(always)]
fn user(regs: &PtRegs) -> &User {
    // SAFETY: Both union members have the same layout (`user_pt_regs` is the named view of the
    // same `regs[31], sp, pc, pstate`), so either reading is valid.
    unsafe { &regs.raw().__bindgen_anon_1.__bindgen_anon_1 }
}

#[link_section = ".kprobes.text"]
#[inline(always)]
fn user_mut(regs: &mut PtRegs) -> &mut User {
    // SAFETY: As in `user`.
    unsafe { &mut regs.raw_mut().__bindgen_anon_1.__bindgen_anon_1 }
}

/// The program counter (at a `BRK`: the `BRK` itself).
#[link_section = ".kprobes.text"]
#[inline(always)]
pub(super) fn pc(regs: &PtRegs) -> u64 {
    user(regs).pc
}

/// Clears `PSTATE.BTYPE`, as executing any instruction that is not an indirect branch does.
#[link_section = ".kprobes.text"]
#[inline(always)]
pub(super) fn clear_btype(regs: &mut PtRegs) {
    user_mut(regs).pstate &= !u64::from(bindings::PSR_BTYPE_MASK);
}

impl Regs for PtRegs {
    #[link_section = ".kprobes.text"]
    #[inline(always)]
    fn pc(&self) -> u64 {
        pc(self)
    }

    #[link_section = ".kprobes.text"]
    #[inline(always)]
    fn set_pc(&mut self, pc: u64) {
        user_mut(self).pc = pc;
    }

    /// General-purpose register `x<n>`, `n` in `0..=30`; 0 for anything else.
    #[link_section = ".kprobes.text"]
    #[inline(always)]
    fn x(&self, n: u8) -> u64 {
        user(self).regs.get(usize::from(n)).copied().unwrap_or(0)
    }

    /// Sets general-purpose register `x<n>`, `n` in `0..=30`; other `n` are ignored.
    #[link_section = ".kprobes.text"]
    #[inline(always)]
    fn set_x(&mut self, n: u8, v: u64) {
        if let Some(r) = user_mut(self).regs.get_mut(usize::from(n)) {
            *r = v;
        }
    }
}
