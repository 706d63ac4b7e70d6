// SPDX-License-Identifier: GPL-2.0

//! Being told when a module goes away (`register_module_notifier`).
//!
//! C header: [`include/linux/module.h`](srctree/include/linux/module.h).

use crate::module_text::Module;
use kernel::{
    bindings,
    ffi::{c_int, c_ulong, c_void},
    prelude::*,
    types::Opaque,
};

/// A notifier block and the function it calls; the callback finds the function through the
/// block it is handed, which is this structure's first field.
#[repr(C)]
struct Block {
    nb: Opaque<bindings::notifier_block>,
    going: fn(Module),
}

/// The notifier callback.
///
/// # Safety
///
/// Called by the module notifier chain with `nb` the first field of a live [`Block`] and, for
/// `MODULE_STATE_GOING`, `data` the module that is going.
unsafe extern "C" fn notify(
    nb: *mut bindings::notifier_block,
    action: c_ulong,
    data: *mut c_void,
) -> c_int {
    if action == bindings::module_state_MODULE_STATE_GOING as c_ulong {
        // SAFETY: `nb` is the first field of a `repr(C)` `Block` (caller).
        let block = unsafe { &*nb.cast::<Block>() };
        // SAFETY: The chain hands the going module, which stays allocated until every
        // callback has returned.
        if let Some(module) = unsafe { Module::from_raw(data.cast::<bindings::module>()) } {
            (block.going)(module);
        }
    }
    bindings::NOTIFY_DONE as c_int
}

/// Calls a function for every module that reaches `MODULE_STATE_GOING` (after its exit
/// function, or after its init failed, before its memory is freed), until dropped.
pub(crate) struct ModuleNotifier {
    block: Pin<KBox<Block>>,
}

// SAFETY: The block is only handed to the thread-safe notifier-chain functions, and `going` is
// a plain function.
unsafe impl Send for ModuleNotifier {}
// SAFETY: As above.
unsafe impl Sync for ModuleNotifier {}

impl ModuleNotifier {
    /// Registers `going`.
    pub(crate) fn register(going: fn(Module)) -> Result<Self> {
        let block = KBox::pin(
            Block {
                nb: Opaque::new(bindings::notifier_block {
                    notifier_call: Some(notify),
                    next: core::ptr::null_mut(),
                    priority: 0,
                }),
                going,
            },
            GFP_KERNEL,
        )?;
        // SAFETY: The block is pinned and stays alive until `drop` unregisters it.
        kernel::error::to_result(unsafe { bindings::register_module_notifier(block.nb.get()) })?;
        Ok(Self { block })
    }
}

impl Drop for ModuleNotifier {
    fn drop(&mut self) {
        // SAFETY: Registered in `register`. Unregistering takes the chain's lock for writing,
        // which waits for every callback in progress.
        unsafe { bindings::unregister_module_notifier(self.block.nb.get()) };
    }
}
