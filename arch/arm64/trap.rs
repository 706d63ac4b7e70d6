// SPDX-License-Identifier: GPL-2.0

//! The BRK hook: emulates the pending instruction of a guarded site.
//!
//! `BRK #0x008` at EL1 reaches `call_el1_break_hook()`, which calls the hook registered with
//! `register_text_poke_brk_hook()` (patch 0005) inside an RCU read-side section. It runs in
//! debug-exception context with interrupts masked, so it takes no lock, allocates nothing and
//! prints nothing. Sites are never in textpoke's own text, so nothing this path executes can be
//! guarded; the entry point is also blacklisted for kprobes (kernel/exports.c).

use crate::pt_regs::PtRegs;
use crate::series::{BrkHook, Series};
use crate::trap::{self, TrapCpu};
use kernel::{
    bindings,
    ffi::{c_int, c_ulong},
    prelude::*,
};

use super::insn::{Insn, Regs};

impl Regs for PtRegs {
    fn pc(&self) -> u64 {
        PtRegs::pc(self)
    }
    fn set_pc(&mut self, pc: u64) {
        PtRegs::set_pc(self, pc)
    }
    fn x(&self, n: u8) -> u64 {
        PtRegs::x(self, n)
    }
    fn set_x(&mut self, n: u8, v: u64) {
        PtRegs::set_x(self, n, v)
    }
}

/// Handles one guard BRK; `true` if it was at a site of a batch in flight and is now emulated.
fn handle(regs: &mut PtRegs) -> bool {
    // On arm64 the exception PC is the BRK itself.
    let site = PtRegs::pc(regs);
    let Some(here) = TrapCpu::current() else {
        return false;
    };
    let Some(pending) = here.lookup(site) else {
        // `BRK #0x008` is only ever ours: if it is gone, emulate what is there now.
        let Some(now) = trap::vanished_guard(site, super::GUARD) else {
            return false;
        };
        let emulated = Insn::decode(site, now.get(..super::HEAD_LEN).unwrap_or(&[]))
            .and_then(|insn| insn.emulate(site, regs))
            .is_ok();
        if emulated {
            regs.clear_btype();
            here.count_vanished();
        }
        return emulated;
    };
    if pending.insn.emulate(site, regs).is_err() {
        return false;
    }
    // The emulated instruction is not an indirect branch, so it leaves BTYPE clear; the saved
    // one may be set if the guard was reached by one.
    regs.clear_btype();
    here.count(pending.insn.kind() as usize);
    true
}

/// The hook.
///
/// # Safety
///
/// Called by `call_el1_break_hook()` with the trap's saved registers.
#[no_mangle]
unsafe extern "C" fn textpoke_arm64_brk_hook(regs: *mut bindings::pt_regs, _esr: c_ulong) -> c_int {
    // SAFETY: `regs` is the saved state of the trap being handled, used by nobody else until
    // we return.
    if handle(unsafe { PtRegs::from_raw(regs) }) {
        bindings::DBG_HOOK_HANDLED as c_int
    } else {
        bindings::DBG_HOOK_ERROR as c_int
    }
}

/// The registered hook; unregistered when dropped.
pub(crate) struct TrapHook {
    unregister: unsafe extern "C" fn(BrkHook),
}

impl TrapHook {
    /// Claims `BRK #0x008`; `EBUSY` if another patcher holds it.
    pub(crate) fn register(series: &Series) -> Result<Self> {
        // SAFETY: The hook is a valid function with the hook signature, and stays in memory
        // until `drop` has unregistered it.
        let ret = unsafe { (series.register_text_poke_brk_hook)(textpoke_arm64_brk_hook) };
        kernel::error::to_result(ret)?;
        Ok(Self {
            unregister: series.unregister_text_poke_brk_hook,
        })
    }
}

impl Drop for TrapHook {
    fn drop(&mut self) {
        // SAFETY: Registered in `register`. Unregistering ends with `synchronize_rcu()`, so no CPU
        // runs the hook once this returns.
        unsafe { (self.unregister)(textpoke_arm64_brk_hook) };
    }
}
