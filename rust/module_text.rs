// SPDX-License-Identifier: GPL-2.0

//! Modules as owners of text: where their code lives, and references that keep them loaded.
//!
//! C header: [`include/linux/module.h`](srctree/include/linux/module.h).

use kernel::{bindings, prelude::*, ThisModule};

/// A loaded module, identified by its `struct module`.
///
/// # Invariants
///
/// `ptr` points to a live `struct module`: the module's own, or one whose code the caller is
/// executing or holds a reference to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Module {
    ptr: *mut bindings::module,
}

// SAFETY: A `struct module` is shared kernel-wide; this type only reads immutable fields and
// calls the thread-safe reference-counting functions.
unsafe impl Send for Module {}
// SAFETY: As above.
unsafe impl Sync for Module {}

impl Module {
    /// The module of `this`.
    pub(crate) fn of(this: &ThisModule) -> Self {
        // INVARIANT: A module's own `struct module` lives as long as its code runs.
        Self { ptr: this.as_ptr() }
    }

    /// Wraps a `struct module` pointer received from a C caller.
    ///
    /// # Safety
    ///
    /// `ptr` must be null or point to a live `struct module` that stays loaded while the
    /// returned value is in use (a caller passing `THIS_MODULE` satisfies this).
    pub(crate) unsafe fn from_raw(ptr: *mut bindings::module) -> Option<Self> {
        // INVARIANT: Guaranteed by the caller.
        (!ptr.is_null()).then_some(Self { ptr })
    }

    /// The address range `[start, end)` of the module's core text.
    pub(crate) fn text(&self) -> (u64, u64) {
        // SAFETY: By the type invariant `ptr` is a live module; `mem[MOD_TEXT]` is set when the
        // module is laid out and not changed while it is loaded.
        let mem = unsafe { &(*self.ptr).mem[bindings::mod_mem_type_MOD_TEXT as usize] };
        let start = mem.base as usize as u64;
        (start, start.saturating_add(u64::from(mem.size)))
    }

    /// The address range `[start, end)` of the module's init text: empty once the module is
    /// live (the loader frees it and zeroes its size after the `MODULE_STATE_LIVE` notifiers).
    pub(crate) fn init_text(&self) -> (u64, u64) {
        // SAFETY: As in `text`; the loader changes `mem[MOD_INIT_TEXT]` only from the task that
        // loads the module, after the notifiers, and the callers are those notifiers.
        let mem = unsafe { &(*self.ptr).mem[bindings::mod_mem_type_MOD_INIT_TEXT as usize] };
        let start = mem.base as usize as u64;
        (start, start.saturating_add(u64::from(mem.size)))
    }

    /// The module's name.
    pub(crate) fn name(&self) -> &CStr {
        // SAFETY: `ptr` is a live module (type invariant), whose `name` is set before the module
        // is listed anywhere and never changed; the loader NUL-terminates it (`strscpy`), and
        // the array lives as long as the module, which outlives `self`'s use.
        unsafe { CStr::from_char_ptr((*self.ptr).name.as_ptr()) }
    }

    /// Whether `[addr, addr + len)` lies inside the module's core text.
    pub(crate) fn text_contains(&self, addr: u64, len: u64) -> bool {
        let (start, end) = self.text();
        addr >= start && addr.checked_add(len).is_some_and(|e| e <= end)
    }

    /// Takes a reference that keeps the module loaded; fails with `ENODEV` if it is going away.
    pub(crate) fn get(&self) -> Result<ModuleRef> {
        // SAFETY: `ptr` is a live module (type invariant).
        if unsafe { bindings::try_module_get(self.ptr) } {
            // INVARIANT: The reference just taken keeps the module alive.
            Ok(ModuleRef { module: *self })
        } else {
            Err(ENODEV)
        }
    }
}

/// A reference keeping a module loaded (`try_module_get`), dropped with `module_put`.
pub(crate) struct ModuleRef {
    module: Module,
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // SAFETY: This value owns one reference taken by `Module::get`.
        unsafe { bindings::module_put(self.module.ptr) };
    }
}
