// SPDX-License-Identifier: GPL-2.0

//! Sites inside textpoke itself for the load-time self-test of the trap path.
//!
//! The API refuses sites in textpoke's own text (it is the trap path), but the self-test drives
//! the primitives directly: these functions are never executed by the trap handler, so guarding
//! them cannot recurse.

use super::insn::Insn;
use crate::selftest::TrapSite;

/// Returns 0 through its fall-through path: the site is a 5-byte NOP at its entry.
#[unsafe(naked)]
extern "C" fn textpoke_selftest_site() -> u32 {
    core::arch::naked_asm!(".byte 0x0f, 0x1f, 0x44, 0x00, 0x00", "xor eax, eax", "ret")
}

/// Returns 1: the target the site jumps to once patched.
#[unsafe(naked)]
extern "C" fn textpoke_selftest_taken() -> u32 {
    core::arch::naked_asm!("mov eax, 1", "ret")
}

/// The self-test's trap cases. Every x86 kind is also trapped under load by the exerciser; one
/// private site is enough to prove the path at load time.
pub(crate) static SITES: [TrapSite; 1] = [TrapSite {
    name: "trap_emulates_jmp_rel32",
    addr: || (textpoke_selftest_site as extern "C" fn() -> u32) as usize as u64,
    call: || textpoke_selftest_site(),
    old: Insn::Nop5,
    new: || Insn::JmpRel32 {
        target: (textpoke_selftest_taken as extern "C" fn() -> u32) as usize as u64,
    },
}];
