// SPDX-License-Identifier: GPL-2.0

//! A site inside textpoke itself for the load-time self-test of the trap path.
//!
//! The API refuses sites in textpoke's own text (it is the trap path), but the self-test drives
//! the primitives directly: this function is never executed by the trap handler, so guarding it
//! cannot recurse.

use super::insn::Insn;

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

/// The site's address.
pub(crate) fn site() -> u64 {
    (textpoke_selftest_site as extern "C" fn() -> u32) as usize as u64
}

/// Executes the site: 0 if it ran its original NOP, 1 if it branched.
pub(crate) fn call() -> u32 {
    textpoke_selftest_site()
}

/// The instruction the site holds.
pub(crate) const OLD: Insn = Insn::Nop;

/// The instruction the self-test installs: a branch to the taken path.
pub(crate) fn new() -> Insn {
    Insn::B {
        target: (textpoke_selftest_taken as extern "C" fn() -> u32) as usize as u64,
    }
}
