// SPDX-License-Identifier: GPL-2.0

//! arm64: `BRK #0x008` guards, `aarch64_insn_write()` plus cache maintenance, context-
//! synchronizing IPIs and the BRK hook of the patch series.

pub mod insn;
pub(crate) mod selftest_site;
mod text;
mod trap;

pub(crate) use insn::{Insn, Kind};
pub(crate) use text::{sync_all, write};
pub(crate) use trap::TrapHook;

/// The planner's name for this arch.
pub(crate) const PLAN_ARCH: crate::plan::Arch = crate::plan::Arch::Arm64;

/// The guard as written over a site: `BRK #0x008`, little-endian.
pub(crate) const GUARD: &[u8] = &insn::GUARD_WORD.to_le_bytes();

/// How much of a new instruction [`crate::plan::Step::WriteHead`] writes: all of it, since a
/// naturally aligned 4-byte instruction write is single-copy atomic.
pub(crate) const HEAD_LEN: usize = insn::INSN_LEN;

/// Whether `bytes`, as a new instruction, would be indistinguishable from a guard.
pub(crate) fn is_guard(bytes: &[u8]) -> bool {
    bytes == GUARD
}

/// The arm64 instruction for a generic operation of the C API (`enum textpoke_op`).
pub(crate) fn insn_for(
    op: crate::api::Op,
    target: u64,
    len: usize,
) -> Result<Insn, crate::insn::InsnError> {
    use crate::api::Op;
    if len != insn::INSN_LEN {
        return Err(crate::insn::InsnError::LengthMismatch);
    }
    Ok(match op {
        Op::Nop => Insn::Nop,
        Op::Jmp => Insn::B { target },
        Op::Call => Insn::Bl { target },
        Op::Ret => Insn::Ret,
        Op::MovX9X30 => Insn::MovX9X30,
    })
}
