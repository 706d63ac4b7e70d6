// SPDX-License-Identifier: GPL-2.0

//! arm64: `BRK #0x008` guards (taken by the common early trap hook of patch 0007),
//! `aarch64_insn_write()` plus cache maintenance, context-synchronizing IPIs, and
//! `stop_machine()` for the instructions the architecture does not allow to change under
//! execution.

pub mod insn;
mod patch_series;
mod regs;
mod selftest_site;
mod text;

use crate::arch::{Arch, ArchCase, TextWrite, TrapSite};
use crate::insn::{InsnBytes, InsnError, Op};
use crate::patch_series::{HoldsText, SymbolResolver};
use crate::pt_regs::PtRegs;
use insn::{Insn, Kind, Listed};
use kernel::prelude::*;

/// arm64.
pub(crate) struct CurrentArch;

/// The kind names, in `Kind` order.
const KIND_NAMES: [&str; Kind::ALL.len()] = {
    let mut names = [""; Kind::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = Kind::ALL[i].name();
        i += 1;
    }
    names
};

/// `BRK #0x008`, little-endian.
const GUARD: [u8; insn::INSN_LEN] = insn::GUARD_WORD.to_le_bytes();

/// Whether the Arm ARM allows `word` to be replaced, or to replace another such word, while
/// another CPU may execute it ("concurrent modification and execution of instructions", Arm
/// ARM B2.2.5): `B`, `BL`, `BRK`, `NOP`, `SVC`, `HVC`, `SMC` and `ISB`. Anything else changed
/// under execution may be executed as neither the old nor the new instruction, guard or not.
pub(crate) fn concurrently_modifiable(word: u32) -> bool {
    const NOP: u32 = 0xd503_201f;
    // `B` and `BL`: opcode in bits 31..26.
    let branch = matches!(word & 0xfc00_0000, 0x1400_0000 | 0x9400_0000);
    // Exception generation (bits 31..24 `0xd4`): `SVC` (opc 000, LL 01), `HVC` (000, 10),
    // `SMC` (000, 11), `BRK` (001, 00), with op2 (bits 4..2) zero.
    let exception = word & 0xff00_0000 == 0xd400_0000
        && matches!(
            word & 0x00e0_001f,
            0x0000_0001 | 0x0000_0002 | 0x0000_0003 | 0x0020_0000
        );
    // `ISB`, with any option in CRm.
    let isb = word & 0xffff_f0ff == 0xd503_30df;
    branch || exception || isb || word == NOP
}

fn word(bytes: &InsnBytes) -> Option<u32> {
    bytes.as_slice().try_into().ok().map(u32::from_le_bytes)
}

impl Arch for CurrentArch {
    const PLAN: crate::plan::Arch = crate::plan::Arch::Arm64;
    const GUARD: &'static [u8] = &GUARD;
    // All of it: a naturally aligned 4-byte instruction write is single-copy atomic.
    const HEAD_LEN: usize = insn::INSN_LEN;
    const KIND_NAMES: &'static [&'static str] = &KIND_NAMES;

    type Insn = Listed;
    type Exports = patch_series::ArchExports;

    fn accept(site: u64, bytes: &[u8]) -> Result<Listed, InsnError> {
        Listed::accept(site, bytes)
    }

    #[link_section = ".kprobes.text"]
    #[inline(always)]
    fn kind(insn: &Listed) -> usize {
        insn.kind() as usize
    }

    fn encode(op: Op, site: u64, target: u64, len: usize) -> Result<InsnBytes, InsnError> {
        if len != insn::INSN_LEN {
            return Err(InsnError::LengthMismatch);
        }
        match op {
            Op::Nop => Insn::Nop,
            Op::Jmp => Insn::B { target },
            Op::Call => Insn::Bl { target },
            Op::Ret => Insn::Ret,
            Op::MovX9X30 => Insn::MovX9X30,
        }
        .encode(site)
    }

    fn is_guard(bytes: &[u8]) -> bool {
        bytes == GUARD
    }

    fn must_park(old: &InsnBytes, new: &InsnBytes) -> bool {
        // Bytes that are no word at all cannot reach here (`accept` refused them); parking is
        // the safe answer for them anyway.
        !(word(old).is_some_and(concurrently_modifiable)
            && word(new).is_some_and(concurrently_modifiable))
    }

    fn resolve(r: &mut SymbolResolver) -> Option<patch_series::ArchExports> {
        patch_series::ArchExports::resolve(r)
    }

    fn write(
        exports: &patch_series::ArchExports,
        held: &HoldsText,
        addr: u64,
        bytes: &[u8],
    ) -> Result {
        text::write(exports, held, addr, bytes)
    }

    fn write_many(
        exports: &patch_series::ArchExports,
        held: &HoldsText,
        writes: &[TextWrite<'_>],
    ) -> Result {
        text::write_many(exports, held, writes)
    }

    fn sync_all() {
        text::sync_all()
    }

    fn sync_local() {
        text::sync_local()
    }

    #[link_section = ".kprobes.text"]
    #[inline(always)]
    fn trap_site(regs: &PtRegs) -> u64 {
        // The exception PC is the `BRK` itself.
        regs::pc(regs)
    }

    #[link_section = ".kprobes.text"]
    #[inline(always)]
    fn emulate(insn: &Listed, regs: &mut PtRegs) {
        insn.emulate(regs);
        // The emulated instruction is not an indirect branch, so it leaves BTYPE clear; the
        // saved one may be set if the guard was reached by one.
        regs::clear_btype(regs);
    }

    #[link_section = ".kprobes.text"]
    fn resume_replaced(site: u64, now: &[u8], regs: &mut PtRegs) -> bool {
        let Some(insn) = now
            .get(..insn::INSN_LEN)
            .and_then(|b| Listed::accept(site, b).ok())
        else {
            return false;
        };
        insn.emulate(regs);
        regs::clear_btype(regs);
        true
    }

    #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
    fn skip_trap(regs: &mut PtRegs) {
        use insn::Regs;
        // The exception PC is the `BRK` itself.
        let pc = regs.pc();
        regs.set_pc(pc.wrapping_add(insn::INSN_LEN as u64));
    }

    fn selftest_sites() -> &'static [TrapSite] {
        &selftest_site::SITES
    }

    fn selftest_cases() -> &'static [ArchCase<patch_series::ArchExports>] {
        &[]
    }
}
