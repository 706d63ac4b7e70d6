// SPDX-License-Identifier: GPL-2.0

//! x86-64: `INT3` guards, `text_poke()` writes, serializing IPIs and the `INT3` trap hook.

pub mod insn;
mod patch_series;
mod regs;
mod selftest_site;
mod text;
mod trap;

use crate::arch::{Arch, ArchCase, TextWrite, TrapSite};
use crate::insn::{InsnBytes, InsnError, Op};
use crate::patch_series::{HoldsText, SymbolResolver};
use crate::pt_regs::PtRegs;
use insn::{Insn, Kind, Listed};
use kernel::prelude::*;

/// x86-64.
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

/// Whether the kernel sends every return through `x86_return_thunk` (retbleed and similar
/// mitigations), which takes `RET` off the listed instructions ([`Kind::listed_with`]):
/// `EOPNOTSUPP`, logged as an unsupported instruction. A `cfg!`, not a `#[cfg]`, so that both
/// branches are compiled in every build. clang 14 cannot build a return-thunk kernel
/// (`-mfunction-return=thunk-extern` needs clang 15), so no boot here takes the refusal; the
/// host tests (`tools/core/tests/x86_insn.rs`) check the policy for both values.
const RETURN_THUNKS: bool = cfg!(CONFIG_MITIGATION_RETHUNK);

impl Arch for CurrentArch {
    const PLAN: crate::plan::Arch = crate::plan::Arch::X86;
    // `INT3` over a site's first byte.
    const GUARD: &'static [u8] = &[insn::GUARD];
    // The first byte: the tail was written (and synced) before.
    const HEAD_LEN: usize = 1;
    const KIND_NAMES: &'static [&'static str] = &KIND_NAMES;

    type Insn = Listed;
    type Exports = patch_series::ArchExports;

    fn accept(site: u64, bytes: &[u8]) -> Result<Listed, InsnError> {
        let insn = Listed::accept(site, bytes)?;
        if !insn.kind().listed_with(RETURN_THUNKS) {
            return Err(InsnError::Unsupported);
        }
        Ok(insn)
    }

    #[link_section = ".kprobes.text"]
    #[inline(always)]
    fn kind(insn: &Listed) -> usize {
        insn.kind() as usize
    }

    fn encode(op: Op, site: u64, target: u64, len: usize) -> Result<InsnBytes, InsnError> {
        let insn = match (op, len) {
            (Op::Nop, 2) => Insn::Nop2,
            (Op::Nop, 5) => Insn::Nop5,
            (Op::Jmp, 2) => Insn::JmpRel8 { target },
            (Op::Jmp, 5) => Insn::JmpRel32 { target },
            (Op::Call, 5) => Insn::CallRel32 { target },
            (Op::Ret, _) if !Kind::Ret.listed_with(RETURN_THUNKS) => {
                return Err(InsnError::Unsupported)
            }
            (Op::Ret, _) => Insn::Ret {
                len: u8::try_from(len).map_err(|_| InsnError::LengthMismatch)?,
            },
            (Op::MovX9X30, _) => return Err(InsnError::Unsupported),
            _ => return Err(InsnError::LengthMismatch),
        };
        insn.encode(site)
    }

    fn is_guard(bytes: &[u8]) -> bool {
        bytes.first() == Some(&insn::GUARD)
    }

    fn must_park(_old: &InsnBytes, _new: &InsnBytes) -> bool {
        // Every listed instruction may be guarded: `INT3` over the first byte, emulated.
        false
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
        // `ip` points after the one-byte `INT3`.
        insn::Regs::ip(regs).wrapping_sub(1)
    }

    #[link_section = ".kprobes.text"]
    #[inline(always)]
    fn emulate(insn: &Listed, regs: &mut PtRegs) {
        // SAFETY: A `PtRegs` only exists as the saved registers of the trap being handled
        // (`PtRegs::from_raw`), and emulation starts from them as they were saved.
        let mut stack = unsafe { trap::KernelStack::new(regs) };
        insn.emulate(regs, &mut stack);
    }

    #[link_section = ".kprobes.text"]
    fn resume_replaced(site: u64, now: &[u8], regs: &mut PtRegs) -> bool {
        trap::resume_replaced(site, now, regs)
    }

    #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
    fn skip_trap(_regs: &mut PtRegs) {
        // `ip` already points after the one-byte `INT3`.
    }

    fn selftest_sites() -> &'static [TrapSite] {
        &selftest_site::SITES
    }

    fn selftest_cases() -> &'static [ArchCase<patch_series::ArchExports>] {
        &[]
    }
}
