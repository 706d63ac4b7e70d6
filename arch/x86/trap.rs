// SPDX-License-Identifier: GPL-2.0

//! The `INT3` hook: a die notifier that emulates the pending instruction of a guarded site.
//!
//! A kernel-mode `INT3` reaches die notifiers after `poke_int3_handler()` (the kernel's own
//! batches), kgdb and kprobes have declined it (arch/x86/kernel/traps.c `exc_int3`). The
//! notifier runs with interrupts off in NMI-like context, so it takes no lock, allocates
//! nothing and prints nothing: it looks the address up in the pending table (wait-free),
//! emulates, counts, and returns. Sites are never in textpoke's own text, so nothing this path
//! executes can be guarded; the entry point is also blacklisted for kprobes (kernel/exports.c).

use crate::pt_regs::PtRegs;
use crate::trap::{self, TrapCpu};
use kernel::{
    bindings,
    ffi::{c_int, c_ulong, c_void},
    prelude::*,
    types::Opaque,
};

use super::insn::{Insn, Regs, Stack};

extern "C" {
    fn register_die_notifier(nb: *mut bindings::notifier_block) -> c_int;
    fn unregister_die_notifier(nb: *mut bindings::notifier_block) -> c_int;
    fn textpoke_helper_kernel_int3_regs(val: c_ulong, data: *mut c_void) -> *mut bindings::pt_regs;
}

impl Regs for PtRegs {
    fn ip(&self) -> u64 {
        PtRegs::ip(self)
    }
    fn set_ip(&mut self, ip: u64) {
        PtRegs::set_ip(self, ip)
    }
    fn sp(&self) -> u64 {
        PtRegs::sp(self)
    }
    fn set_sp(&mut self, sp: u64) {
        PtRegs::set_sp(self, sp)
    }
}

/// The interrupted kernel stack, as `CALL` and `RET` emulation see it.
struct KernelStack;

impl Stack for KernelStack {
    fn read_u64(&self, addr: u64) -> u64 {
        // SAFETY: Emulation reads only the word at the interrupted stack pointer (`RET`'s
        // return address), which is mapped kernel stack.
        unsafe { core::ptr::read(addr as usize as *const u64) }
    }

    fn write_u64(&mut self, addr: u64, value: u64) {
        // SAFETY: Emulation writes only `CALL`'s return address, one word below the
        // interrupted stack pointer. For `#BP` from kernel mode the entry code leaves a 6-word
        // gap below the interrupted stack for exactly this (arch/x86/entry/entry_64.S), and one
        // push per trap fits.
        unsafe { core::ptr::write(addr as usize as *mut u64, value) };
    }
}

/// Handles one `INT3`; `true` if it was at a site of a batch in flight and is now emulated.
fn handle(regs: &mut PtRegs) -> bool {
    // `regs.ip` points after the one-byte `INT3`.
    let site = PtRegs::ip(regs).wrapping_sub(1);
    let Some(here) = TrapCpu::current() else {
        return false;
    };
    let Some(pending) = here.lookup(site) else {
        // An `INT3` that is no longer in memory: if what is there now is an instruction we
        // know, emulate it; otherwise resume at the site so the CPU executes it itself (what
        // kprobes used to do with a vanished `INT3`).
        let Some(now) = trap::vanished_guard(site, super::GUARD) else {
            return false;
        };
        let emulated = [5, 2, 1].into_iter().any(|len| {
            Insn::decode(site, now.get(..len).unwrap_or(&[]))
                .and_then(|insn| insn.emulate(site, regs, &mut KernelStack))
                .is_ok()
        });
        if !emulated {
            regs.set_ip(site);
        }
        here.count_vanished();
        return true;
    };
    match pending.insn.emulate(site, regs, &mut KernelStack) {
        Ok(()) => {
            here.count(pending.insn.kind() as usize);
            true
        }
        // Batches never carry an instruction emulation refuses (the codec is the same one that
        // validated it), so this is someone else's business: decline.
        Err(_) => false,
    }
}

/// The die-notifier callback.
///
/// # Safety
///
/// Called by `notify_die()` with `data` pointing to its `struct die_args`.
#[no_mangle]
unsafe extern "C" fn textpoke_x86_int3_notify(
    _nb: *mut bindings::notifier_block,
    val: c_ulong,
    data: *mut c_void,
) -> c_int {
    // SAFETY: `data` is the `die_args` of this notification; the helper only reads it.
    let regs = unsafe { textpoke_helper_kernel_int3_regs(val, data) };
    if regs.is_null() {
        return bindings::NOTIFY_DONE as c_int;
    }
    // SAFETY: `regs` is the saved state of the trap being handled, used by nobody else until
    // we return.
    if handle(unsafe { PtRegs::from_raw(regs) }) {
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
    /// Registers the hook ahead of every other die notifier (kgdb's claims any kernel `INT3`).
    pub(crate) fn register(_series: &crate::series::Series) -> Result<Self> {
        let nb = KBox::pin(
            Opaque::new(bindings::notifier_block {
                notifier_call: Some(textpoke_x86_int3_notify),
                next: core::ptr::null_mut(),
                priority: c_int::MAX,
            }),
            GFP_KERNEL,
        )?;
        // SAFETY: `nb` is pinned and stays alive until `drop` unregisters it.
        kernel::error::to_result(unsafe { register_die_notifier(nb.get()) })?;
        Ok(Self { nb })
    }
}

impl Drop for TrapHook {
    fn drop(&mut self) {
        // SAFETY: Registered in `register`. Unregistering waits for an RCU grace period, which
        // includes every notifier call in progress (they run in RCU read-side sections), so no
        // CPU runs our callback once this returns.
        unsafe { unregister_die_notifier(self.nb.get()) };
    }
}
