// SPDX-License-Identifier: GPL-2.0

//! A site inside textpoke itself for the load-time self-test of the trap path.
//!
//! The API refuses sites in textpoke's own text (it is the trap path), but the self-test drives
//! the primitives directly: this function is never executed by the trap handler, so guarding it
//! cannot recurse.

use super::insn::Insn;

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

/// The site's address.
pub(crate) fn site() -> u64 {
    (textpoke_selftest_site as extern "C" fn() -> u32) as usize as u64
}

/// Executes the site: 0 if it ran its original NOP, 1 if it jumped.
pub(crate) fn call() -> u32 {
    textpoke_selftest_site()
}

/// The instruction the site holds.
pub(crate) const OLD: Insn = Insn::Nop5;

/// The instruction the self-test installs: a jump to the taken path.
pub(crate) fn new() -> Insn {
    Insn::JmpRel32 {
        target: (textpoke_selftest_taken as extern "C" fn() -> u32) as usize as u64,
    }
}
