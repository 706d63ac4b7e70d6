// SPDX-License-Identifier: GPL-2.0

//! x86-64: `INT3` guards, `text_poke()` writes, serializing IPIs and the `INT3` trap hook.

pub mod insn;
pub(crate) mod selftest_site;
mod text;
mod trap;

pub(crate) use insn::{Insn, Kind};
pub(crate) use text::{sync_all, write};
pub(crate) use trap::TrapHook;

/// The planner's name for this arch.
pub(crate) const PLAN_ARCH: crate::plan::Arch = crate::plan::Arch::X86;

/// The guard as written over a site: `INT3` over its first byte.
pub(crate) const GUARD: &[u8] = &[insn::GUARD];

/// How much of a new instruction [`crate::plan::Step::WriteHead`] writes: the first byte, the
/// tail having been written (and synced) before.
pub(crate) const HEAD_LEN: usize = 1;

/// Whether `bytes`, as a new instruction, would be indistinguishable from a guard.
pub(crate) fn is_guard(bytes: &[u8]) -> bool {
    bytes.first() == Some(&insn::GUARD)
}

/// The x86 instruction for a generic operation of the C API (`enum textpoke_op`).
pub(crate) fn insn_for(
    op: crate::api::Op,
    target: u64,
    len: usize,
) -> Result<Insn, crate::insn::InsnError> {
    use crate::api::Op;
    use crate::insn::InsnError;
    match (op, len) {
        (Op::Nop, 2) => Ok(Insn::Nop2),
        (Op::Nop, 5) => Ok(Insn::Nop5),
        (Op::Jmp, 2) => Ok(Insn::JmpRel8 { target }),
        (Op::Jmp, 5) => Ok(Insn::JmpRel32 { target }),
        (Op::Call, 5) => Ok(Insn::CallRel32 { target }),
        (Op::Ret, _) => u8::try_from(len)
            .map(|len| Insn::Ret { len })
            .map_err(|_| InsnError::LengthMismatch),
        (Op::MovX9X30, _) => Err(InsnError::Unsupported),
        _ => Err(InsnError::LengthMismatch),
    }
}
