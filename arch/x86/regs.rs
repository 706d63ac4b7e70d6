// SPDX-License-Identifier: GPL-2.0

//! The x86 registers a trap saved, as the codec's emulation sees them.
//!
//! C header: [`arch/x86/include/asm/ptrace.h`](srctree/arch/x86/include/asm/ptrace.h).

use super::insn::Regs;
use crate::pt_regs::PtRegs;

impl Regs for PtRegs {
    #[link_section = ".kprobes.text"]
    #[inline(always)]
    fn ip(&self) -> u64 {
        self.raw().ip as u64
    }

    #[link_section = ".kprobes.text"]
    #[inline(always)]
    fn set_ip(&mut self, ip: u64) {
        self.raw_mut().ip = ip as _;
    }

    #[link_section = ".kprobes.text"]
    #[inline(always)]
    fn sp(&self) -> u64 {
        self.raw().sp as u64
    }

    #[link_section = ".kprobes.text"]
    #[inline(always)]
    fn set_sp(&mut self, sp: u64) {
        self.raw_mut().sp = sp as _;
    }
}
