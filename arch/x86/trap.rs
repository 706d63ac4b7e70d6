// SPDX-License-Identifier: GPL-2.0

//! The `INT3` hook: a die notifier that hands kernel-mode `INT3`s to the engine's trap handler.
//!
//! A kernel-mode `INT3` reaches die notifiers after `poke_int3_handler()` (the kernel's own
//! batches), kgdb and kprobes have declined it (arch/x86/kernel/traps.c `exc_int3`). The
//! notifier runs with interrupts off in NMI-like context, so nothing here takes a lock,
//! allocates or prints. The callback and the helper it calls are blacklisted for kprobes
//! (arch/x86/helpers.c).

use super::insn::{Listed, Stack};

use crate::arch::TrapHandler;
use crate::pt_regs::PtRegs;
use core::sync::atomic::{AtomicPtr, Ordering};
use kernel::{
    bindings,
    ffi::{c_int, c_ulong, c_void},
    prelude::*,
    types::Opaque,
};

extern "C" {
    fn register_die_notifier(nb: *mut bindings::notifier_block) -> c_int;
    fn unregister_die_notifier(nb: *mut bindings::notifier_block) -> c_int;
    fn textpoke_x86_kernel_int3_regs(val: c_ulong, data: *mut c_void) -> *mut bindings::pt_regs;
}

/// The interrupted kernel stack of the trap being handled, as `CALL` and `RET` emulation see it.
///
/// # Invariants
///
/// `sp` is the stack pointer the trap interrupted, on a mapped kernel stack with the 6-word
/// gap the `#BP` entry code leaves below it.
pub(super) struct KernelStack {
    sp: u64,
}

/// Size of one stack slot.
const WORD: u64 = 8;

impl KernelStack {
    /// The stack of the kernel-mode trap whose registers are `regs`.
    ///
    /// # Safety
    ///
    /// `regs` must be the saved registers of a kernel-mode `INT3` being handled, as they were
    /// when the trap was taken.
    #[link_section = ".kprobes.text"]
    pub(super) unsafe fn new(regs: &PtRegs) -> Self {
        use super::insn::Regs;
        // INVARIANT: The caller guarantees `regs` is the trap's own state.
        Self { sp: regs.sp() }
    }
}

impl Stack for KernelStack {
    /// Reads the word at `addr`, if it is the one the interrupted stack pointer points to
    /// (`RET`'s return address); 0 for any other address.
    #[link_section = ".kprobes.text"]
    fn read_u64(&self, addr: u64) -> u64 {
        if addr != self.sp {
            return 0;
        }
        // SAFETY: By the type invariant, `sp` is the top of a mapped kernel stack.
        unsafe { core::ptr::read(addr as usize as *const u64) }
    }

    /// Writes `value` at `addr`, if it is the word just below the interrupted stack pointer
    /// (`CALL`'s return address); ignores any other address.
    #[link_section = ".kprobes.text"]
    fn write_u64(&mut self, addr: u64, value: u64) {
        if addr != self.sp.wrapping_sub(WORD) {
            return;
        }
        // SAFETY: By the type invariant, the word below `sp` lies in the 6-word gap the entry
        // code leaves for exactly this (arch/x86/entry/entry_64.S), above `pt_regs`.
        unsafe { core::ptr::write(addr as usize as *mut u64, value) };
    }
}

/// For a trap at `site` whose guard was replaced by `now`: emulates what is there if it is a
/// listed instruction, or resumes at the site so that the CPU executes it.
#[link_section = ".kprobes.text"]
pub(super) fn resume_replaced(site: u64, now: &[u8], regs: &mut PtRegs) -> bool {
    use super::insn::Regs;
    // SAFETY: Called from the trap handler with the trap's own registers.
    let mut stack = unsafe { KernelStack::new(regs) };
    let listed = [5, 2, 1]
        .into_iter()
        .find_map(|len| Listed::accept(site, now.get(..len)?).ok());
    match listed {
        Some(insn) => insn.emulate(regs, &mut stack),
        None => regs.set_ip(site),
    }
    true
}

/// The engine's handler, set while the hook is registered.
static HANDLER: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// The die-notifier callback.
///
/// # Safety
///
/// Called by `notify_die()` with `data` pointing to its `struct die_args`.
#[no_mangle]
#[link_section = ".kprobes.text"]
unsafe extern "C" fn textpoke_x86_int3_notify(
    _nb: *mut bindings::notifier_block,
    val: c_ulong,
    data: *mut c_void,
) -> c_int {
    // SAFETY: `data` is the `die_args` of this notification; the helper only reads it.
    let regs = unsafe { textpoke_x86_kernel_int3_regs(val, data) };
    let handler = HANDLER.load(Ordering::Acquire);
    if regs.is_null() || handler.is_null() {
        return bindings::NOTIFY_DONE as c_int;
    }
    // SAFETY: `HANDLER` only ever holds a `TrapHandler` (see `TrapHook::register`).
    let handler = unsafe { core::mem::transmute::<*mut c_void, TrapHandler>(handler) };
    // SAFETY: `regs` is the saved state of the kernel-mode trap being handled.
    if unsafe { handler(regs) } {
        bindings::NOTIFY_STOP as c_int
    } else {
        bindings::NOTIFY_DONE as c_int
    }
}

/// The registered hook; unregistered when dropped.
pub(crate) struct TrapHook {
    nb: Pin<KBox<Opaque<bindings::notifier_block>>>,
}

// SAFETY: The notifier block is only handed to the thread-safe notifier-chain functions.
unsafe impl Send for TrapHook {}
// SAFETY: As above.
unsafe impl Sync for TrapHook {}

impl TrapHook {
    /// Registers `handler` behind a die notifier ahead of every other one (kgdb's claims any
    /// kernel `INT3`).
    pub(super) fn register(handler: TrapHandler) -> Result<Self> {
        let nb = KBox::pin(
            Opaque::new(bindings::notifier_block {
                notifier_call: Some(textpoke_x86_int3_notify),
                next: core::ptr::null_mut(),
                priority: c_int::MAX,
            }),
            GFP_KERNEL,
        )?;
        // Release: a notifier call that sees the handler sees everything it needs initialized.
        HANDLER.store(handler as *mut c_void, Ordering::Release);
        // SAFETY: `nb` is pinned and stays alive until `drop` unregisters it.
        let ret = unsafe { register_die_notifier(nb.get()) };
        if ret != 0 {
            HANDLER.store(core::ptr::null_mut(), Ordering::Release);
            return Err(Error::from_errno(ret));
        }
        Ok(Self { nb })
    }
}

impl Drop for TrapHook {
    fn drop(&mut self) {
        // SAFETY: Registered in `register`. Unregistering waits for an RCU grace period, which
        // includes every notifier call in progress (they run in RCU read-side sections), so no
        // CPU runs our callback once this returns.
        unsafe { unregister_die_notifier(self.nb.get()) };
        HANDLER.store(core::ptr::null_mut(), Ordering::Release);
    }
}
