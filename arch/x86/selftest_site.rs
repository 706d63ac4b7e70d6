// SPDX-License-Identifier: GPL-2.0

//! Sites inside textpoke itself for the load-time self-test of the trap path.
//!
//! The API refuses sites in textpoke's own text (it is the trap path), but the self-test drives
//! the primitives directly: these functions are never executed by the trap handler, so guarding
//! them cannot recurse.

use super::insn::Insn;
use crate::arch::TrapSite;
use crate::insn::InsnError;

// Neither function is called through a pointer (the self-test calls the site's function
// directly, and the site jumps to the other once patched), so neither needs an ENDBR64 where the
// kernel has indirect-branch tracking. Both addresses are taken, though, which objtool --ibt
// flags unless told that they are no indirect branch targets: `.discard.noendbr`, the kernel's
// ANNOTATE_NOENDBR (include/linux/objtool.h). Their RETs are bare, as the site's neighbours
// must be exact instructions: `.discard.retpoline_safe`, the kernel's ANNOTATE_RETPOLINE_SAFE
// (arch/x86/include/asm/nospec-branch.h), tells objtool so where the kernel has return thunks.

/// Returns 0 through its fall-through path: the site is a 5-byte NOP at its entry.
#[unsafe(naked)]
extern "C" fn textpoke_selftest_site() -> u32 {
    core::arch::naked_asm!(
        "2:",
        ".pushsection .discard.noendbr, \"a\"",
        ".long 2b",
        ".popsection",
        ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
        "xor eax, eax",
        "3:",
        ".pushsection .discard.retpoline_safe",
        ".long 3b",
        ".popsection",
        "ret",
    )
}

/// Returns 1: the target the site jumps to once patched.
#[unsafe(naked)]
extern "C" fn textpoke_selftest_taken() -> u32 {
    core::arch::naked_asm!(
        "2:",
        ".pushsection .discard.noendbr, \"a\"",
        ".long 2b",
        ".popsection",
        "mov eax, 1",
        "3:",
        ".pushsection .discard.retpoline_safe",
        ".long 3b",
        ".popsection",
        "ret",
    )
}

fn site() -> u64 {
    (textpoke_selftest_site as extern "C" fn() -> u32) as usize as u64
}

/// The self-test's trap cases. Every x86 kind is also trapped under load by the exerciser; one
/// private site is enough to prove the path at load time.
pub(super) static SITES: [TrapSite; 1] = [TrapSite {
    name: "trap_emulates_jmp_rel32",
    addr: site,
    call: || textpoke_selftest_site(),
    change: || -> Result<_, InsnError> {
        let target = (textpoke_selftest_taken as extern "C" fn() -> u32) as usize as u64;
        Ok((
            Insn::Nop5.encode(site())?,
            Insn::JmpRel32 { target }.encode(site())?,
        ))
    },
}];
