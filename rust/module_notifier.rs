// SPDX-License-Identifier: GPL-2.0

//! Being told when a module comes, goes live, or goes away (`register_module_notifier`).
//!
//! C header: [`include/linux/module.h`](srctree/include/linux/module.h).

use crate::module_text::Module;
use kernel::{
    bindings,
    ffi::{c_int, c_ulong, c_void},
    prelude::*,
    types::Opaque,
};

/// The module states a [`ModuleNotifier`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ModuleState {
    /// `MODULE_STATE_COMING`: laid out, relocated and made read-only and executable, with the
    /// loader's own changes made (alternatives, ftrace's call sites, and those of every
    /// notifier of higher priority); its init function has not run yet.
    Coming,
    /// `MODULE_STATE_LIVE`: its init function returned; its init text is about to be freed.
    Live,
    /// `MODULE_STATE_GOING`: after its exit function, or after its init or its loading failed
    /// past `Coming`, before its memory is freed.
    Going,
}

impl ModuleState {
    fn from_action(action: c_ulong) -> Option<Self> {
        match u32::try_from(action).ok()? {
            bindings::module_state_MODULE_STATE_COMING => Some(Self::Coming),
            bindings::module_state_MODULE_STATE_LIVE => Some(Self::Live),
            bindings::module_state_MODULE_STATE_GOING => Some(Self::Going),
            _ => None,
        }
    }
}

/// A notifier block and the function it calls; the callback finds the function through the
/// block it is handed, which is this structure's first field.
#[repr(C)]
struct Block {
    nb: Opaque<bindings::notifier_block>,
    on: fn(Module, ModuleState),
}

/// The notifier callback.
///
/// # Safety
///
/// Called by the module notifier chain with `nb` the first field of a live [`Block`] and, for
/// the states of [`ModuleState`], `data` the module whose state it is.
unsafe extern "C" fn notify(
    nb: *mut bindings::notifier_block,
    action: c_ulong,
    data: *mut c_void,
) -> c_int {
    if let Some(state) = ModuleState::from_action(action) {
        // SAFETY: `nb` is the first field of a `repr(C)` `Block` (caller).
        let block = unsafe { &*nb.cast::<Block>() };
        // SAFETY: The chain hands the module whose state changes, which stays allocated until
        // every callback has returned.
        if let Some(module) = unsafe { Module::from_raw(data.cast::<bindings::module>()) } {
            (block.on)(module, state);
        }
    }
    bindings::NOTIFY_DONE as c_int
}

/// Calls a function for every module that reaches one of the states of [`ModuleState`], until
/// dropped.
pub(crate) struct ModuleNotifier {
    block: Pin<KBox<Block>>,
}

// SAFETY: The block is only handed to the thread-safe notifier-chain functions, and `on` is a
// plain function.
unsafe impl Send for ModuleNotifier {}
// SAFETY: As above.
unsafe impl Sync for ModuleNotifier {}

impl ModuleNotifier {
    /// Registers `on`, called after every notifier of a higher `priority` (the chain calls
    /// higher priorities first, and equal ones in the order they registered).
    pub(crate) fn register(on: fn(Module, ModuleState), priority: c_int) -> Result<Self> {
        let block = KBox::pin(
            Block {
                nb: Opaque::new(bindings::notifier_block {
                    notifier_call: Some(notify),
                    next: core::ptr::null_mut(),
                    priority,
                }),
                on,
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
