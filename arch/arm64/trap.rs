// SPDX-License-Identifier: GPL-2.0

//! The BRK hook: hands `BRK #0x008` traps to the engine's trap handler.
//!
//! `BRK #0x008` at EL1 reaches `call_el1_break_hook()`, which calls the hook registered with
//! `register_text_poke_brk_hook()` (patch 0005) inside an RCU read-side section. It runs in
//! debug-exception context with interrupts masked, so nothing here takes a lock, allocates or
//! prints. The hook is blacklisted for kprobes (arch/arm64/helpers.c).

use super::series::Series;
use crate::arch::{ArchCase, TrapHandler};
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::{
    bindings,
    ffi::{c_int, c_ulong, c_void},
    prelude::*,
};

/// The engine's handler, set while the hook is registered.
static HANDLER: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// The hook.
///
/// `BRK #0x008` is textpoke's alone (patch 0005 reserves it), so a trap the engine does not
/// claim is a bug somewhere: the hook reports it (`DBG_HOOK_ERROR`, which makes the kernel die
/// with "Oops - BRK") rather than resuming a CPU at a breakpoint nobody resolves.
///
/// # Safety
///
/// Called by `call_el1_break_hook()` with the trap's saved registers.
#[no_mangle]
#[link_section = ".kprobes.text"]
unsafe extern "C" fn textpoke_arm64_brk_hook(regs: *mut bindings::pt_regs, _esr: c_ulong) -> c_int {
    let handler = HANDLER.load(Ordering::Acquire);
    if handler.is_null() {
        return bindings::DBG_HOOK_ERROR as c_int;
    }
    // SAFETY: `HANDLER` only ever holds a `TrapHandler` (see `TrapHook::register`).
    let handler = unsafe { core::mem::transmute::<*mut c_void, TrapHandler>(handler) };
    // SAFETY: `regs` is the saved state of the trap being handled.
    if unsafe { handler(regs) } {
        bindings::DBG_HOOK_HANDLED as c_int
    } else {
        bindings::DBG_HOOK_ERROR as c_int
    }
}

/// The registered hook; unregistered when dropped.
pub(crate) struct TrapHook {
    unregister: unsafe extern "C" fn(super::series::BrkHook),
}

impl TrapHook {
    /// Claims `BRK #0x008` for `handler`; `EBUSY` if another patcher holds it.
    pub(super) fn register(series: &Series, handler: TrapHandler) -> Result<Self> {
        // Release: a hook call that sees the handler sees everything it needs initialized.
        HANDLER.store(handler as *mut c_void, Ordering::Release);
        // SAFETY: The hook is a valid function with the hook signature, and stays in memory
        // until `drop` has unregistered it.
        let ret = unsafe { (series.register_text_poke_brk_hook)(textpoke_arm64_brk_hook) };
        if let Err(e) = kernel::error::to_result(ret) {
            HANDLER.store(core::ptr::null_mut(), Ordering::Release);
            return Err(e);
        }
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
        HANDLER.store(core::ptr::null_mut(), Ordering::Release);
    }
}

/// Another patcher cannot claim the guard's immediate while textpoke holds it: a second owner
/// would be handed traps on guards whose pending instructions only textpoke knows.
fn second_claim_refused(series: &Series) -> Result<(), &'static str> {
    // SAFETY: As in `TrapHook::register`; if the claim wrongly succeeds, the self-test fails and
    // the load is refused, which unregisters the hook before the module goes away.
    let ret = unsafe { (series.register_text_poke_brk_hook)(textpoke_arm64_brk_hook) };
    match kernel::error::to_result(ret) {
        Err(e) if e == EBUSY => Ok(()),
        Err(_) => Err("second claim refused with an errno other than EBUSY"),
        Ok(()) => Err("a second claim of the guard immediate succeeded"),
    }
}

/// The self-test's arm64-only cases.
pub(super) static SELFTEST_CASES: [ArchCase<Series>; 1] = [ArchCase {
    name: "brk_immediate_claimed_once",
    run: second_claim_refused,
}];
