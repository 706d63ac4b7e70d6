// SPDX-License-Identifier: GPL-2.0

//! The trap handler every arch's hook calls: find the pending instruction, emulate it, count.
//!
//! It runs in trap context (interrupts masked, possibly nested on an NMI), so it is wait-free,
//! lock-free, allocation-free and silent. Everything it runs is in this module's
//! `.kprobes.text` section (which kprobes refuses, as it refuses `NOKPROBE_SYMBOL`s) or in the
//! blacklisted C helpers, so no kprobe can recurse into it; and sites are never in textpoke's
//! own text, so no guard of textpoke's can either.
//!
//! It claims a trap only when the address is a site of a batch in flight, or a site whose guard
//! textpoke wrote and is known to have replaced since ([`Replaced`]): every other trap (a
//! kprobe's, kgdb's, an `int3` in code) goes to the next handler untouched.

use crate::arch::Arch;
use crate::cpu;
use crate::current_arch::CurrentArch;
use crate::engine::{self, Engine};
use crate::entry::Entry;
use crate::insn::MAX_INSN_LEN;
use crate::pt_regs::PtRegs;
use kernel::bindings;

extern "C" {
    /// Reads kernel memory without faulting (rust/helpers.c, blacklisted for kprobes).
    fn textpoke_read_text_nofault(dst: *mut u8, src: *const u8, len: usize) -> kernel::ffi::c_long;
}

/// The engine's trap handler, handed to the arch's hook at registration.
///
/// # Safety
///
/// `regs` must be the saved registers of a kernel-mode trap at one of this arch's guard
/// instructions, being handled on the calling CPU with interrupts masked.
#[no_mangle]
#[link_section = ".kprobes.text"]
pub(crate) unsafe extern "C" fn textpoke_trap(regs: *mut bindings::pt_regs) -> bool {
    // SAFETY: Guaranteed by the caller.
    let regs = unsafe { PtRegs::from_raw(regs) };
    engine::with(|engine| handle(engine, regs)).unwrap_or(false)
}

/// The instruction a trap on `entry`'s guard emulates: its new one, or in a debug build with a
/// seeded trap defect selected (`debug.rs`), the wrong one the defect calls for.
#[inline(always)]
fn emulated(entry: &Entry) -> crate::current_arch::Insn {
    // The kernel's own changes never get a trap defect (see `Batch::commit_with`).
    #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
    match crate::debug::defect() {
        _ if entry.kernel => {}
        crate::debug::Defect::EmulateOld => return entry.wrong.old,
        crate::debug::Defect::EmulateOther => return entry.wrong.other,
        _ => {}
    }
    entry.insn
}

#[inline(always)]
fn handle(engine: &Engine, regs: &mut PtRegs) -> bool {
    let site = CurrentArch::trap_site(regs);
    // A trap that is not textpoke's, with no batch in flight, ends here, having read the live
    // mask and probed the two tables of the replaced record and called nothing: every kprobe hit on x86
    // takes this path, and without a call on it the compiler saves no registers for it.
    // A seeded defect of the debug build that claims such traps (`debug.rs`) must still reach
    // them; in a production build the last test is constant.
    if engine.table.idle()
        && !engine.replaced.contains(site)
        && crate::debug::defect() != crate::debug::Defect::SwallowForeign
    {
        return false;
    }
    claim(engine, site, regs)
}

/// The rest of [`handle`]: a trap at a site of a batch in flight, or at a guard replaced since.
#[inline(never)]
#[link_section = ".kprobes.text"]
fn claim(engine: &Engine, site: u64, regs: &mut PtRegs) -> bool {
    // The CPU is stable: trap context cannot migrate. Read once, here and not in `handle`, so
    // that a trap that is not textpoke's with no batch in flight never reads it.
    let cpu = cpu::current();
    if let Some((insn, kernel)) = engine
        .table
        .lookup_with(cpu, site, |e| (emulated(e), e.kernel))
    {
        CurrentArch::emulate(&insn, regs);
        engine
            .stats
            .count_trap(cpu, CurrentArch::kind(&insn), kernel);
        return true;
    }
    // `handle` tested this only when no batch was in flight; a lookup that found nothing leaves
    // the replaced guards, then a debug build's seeded defect.
    if !engine.replaced.contains(site) {
        #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
        if crate::debug::defect() == crate::debug::Defect::SwallowForeign {
            CurrentArch::skip_trap(regs);
            return true;
        }
        return false;
    }
    let mut now = [0u8; MAX_INSN_LEN];
    // SAFETY: `now` is valid for writes of its length; the helper reads any address without
    // faulting.
    let read = unsafe {
        textpoke_read_text_nofault(now.as_mut_ptr(), site as usize as *const u8, now.len())
    };
    // A guard that is still there is somebody else's now (the site may have been reused).
    if read != 0 || now.starts_with(<CurrentArch as Arch>::GUARD) {
        return false;
    }
    if CurrentArch::resume_replaced(site, &now, regs) {
        engine.stats.count_vanished(cpu);
        true
    } else {
        false
    }
}
