// SPDX-License-Identifier: GPL-2.0

//! Sites inside textpoke itself for the load-time self-test of the trap path.
//!
//! The API refuses sites in textpoke's own text (it is the trap path), but the self-test drives
//! the primitives directly: these functions are never executed by the trap handler, so guarding
//! them cannot recurse.

use super::insn::Insn;
use crate::arch::TrapSite;
use crate::insn::InsnError;

/// Returns 0 through its fall-through path: the site is the `NOP` at its entry.
#[unsafe(naked)]
extern "C" fn textpoke_selftest_site() -> u32 {
    core::arch::naked_asm!("nop", "mov w0, #0", "ret")
}

/// Returns 1: the target the site branches to once patched.
#[unsafe(naked)]
extern "C" fn textpoke_selftest_taken() -> u32 {
    core::arch::naked_asm!("mov w0, #1", "ret")
}

/// Returns whether x9 holds the return address after the site at offset 4: 0 after the `NOP`,
/// 1 after ftrace's `MOV X9, X30` prologue (x30 is the caller's return address, never 0).
#[unsafe(naked)]
extern "C" fn textpoke_selftest_prologue_site() -> u32 {
    core::arch::naked_asm!("mov x9, xzr", "nop", "cmp x9, x30", "cset w0, eq", "ret")
}

fn b_site() -> u64 {
    (textpoke_selftest_site as extern "C" fn() -> u32) as usize as u64
}

fn prologue_site() -> u64 {
    ((textpoke_selftest_prologue_site as extern "C" fn() -> u32) as usize as u64).wrapping_add(4)
}

/// The self-test's trap cases. `MOV X9, X30` gets its own: a batch changes it only with every
/// other CPU parked (the architecture does not allow changing a `MOV` while other CPUs may
/// execute it), so no CPU ever traps on it under load; this private site, run by one CPU, proves
/// that its emulation is right all the same, should a guard ever stand for it.
pub(super) static SITES: [TrapSite; 2] = [
    TrapSite {
        name: "trap_emulates_b",
        addr: b_site,
        call: || textpoke_selftest_site(),
        change: || -> Result<_, InsnError> {
            let target = (textpoke_selftest_taken as extern "C" fn() -> u32) as usize as u64;
            Ok((
                Insn::Nop.encode(b_site())?,
                Insn::B { target }.encode(b_site())?,
            ))
        },
    },
    TrapSite {
        name: "trap_emulates_mov_x9_x30",
        addr: prologue_site,
        call: || textpoke_selftest_prologue_site(),
        change: || -> Result<_, InsnError> {
            Ok((
                Insn::Nop.encode(prologue_site())?,
                Insn::MovX9X30.encode(prologue_site())?,
            ))
        },
    },
];
