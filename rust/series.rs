// SPDX-License-Identifier: GPL-2.0

//! The kernel patch series' exports (`tools/patches`), resolved when the module loads.
//!
//! Linking against them directly would make `insmod` fail with a bare "Unknown symbol" on a
//! kernel built without the series. Resolving them with `__symbol_get` instead lets the module
//! refuse to load with a message that names what is missing and where to get it. Exports of
//! vmlinux have no owning module, so nothing is pinned and nothing needs `symbol_put`.

use kernel::{bindings, ffi::c_void, prelude::*, str::CStr};

/// `perf_event_text_poke(addr, old, old_len, new, new_len)` (include/linux/perf_event.h).
type PerfEventTextPoke =
    unsafe extern "C" fn(*const c_void, *const c_void, usize, *const c_void, usize);
/// `text_mutex_lock()` / `text_mutex_unlock()` (include/linux/memory.h, patch 0002).
type TextMutexOp = unsafe extern "C" fn();
/// `text_poke(addr, opcode, len)` (arch/x86/include/asm/text-patching.h).
#[cfg(CONFIG_X86_64)]
type TextPoke = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> *mut c_void;
/// `aarch64_insn_write(addr, insn)` (arch/arm64/include/asm/patching.h).
#[cfg(CONFIG_ARM64)]
type Aarch64InsnWrite = unsafe extern "C" fn(*mut c_void, u32) -> kernel::ffi::c_int;
/// A text-poke BRK hook (arch/arm64/include/asm/debug-monitors.h, patch 0005).
#[cfg(CONFIG_ARM64)]
pub(crate) type BrkHook =
    unsafe extern "C" fn(*mut bindings::pt_regs, kernel::ffi::c_ulong) -> kernel::ffi::c_int;
#[cfg(CONFIG_ARM64)]
type RegisterBrkHook = unsafe extern "C" fn(BrkHook) -> kernel::ffi::c_int;
#[cfg(CONFIG_ARM64)]
type UnregisterBrkHook = unsafe extern "C" fn(BrkHook);

/// The functions textpoke needs from the patch series.
pub(crate) struct Series {
    pub(crate) perf_event_text_poke: PerfEventTextPoke,
    text_mutex_lock: TextMutexOp,
    text_mutex_unlock: TextMutexOp,
    #[cfg(CONFIG_X86_64)]
    pub(crate) text_poke: TextPoke,
    #[cfg(CONFIG_ARM64)]
    pub(crate) aarch64_insn_write: Aarch64InsnWrite,
    #[cfg(CONFIG_ARM64)]
    pub(crate) register_text_poke_brk_hook: RegisterBrkHook,
    #[cfg(CONFIG_ARM64)]
    pub(crate) unregister_text_poke_brk_hook: UnregisterBrkHook,
}

/// Looks up a GPL export by name; `None` if this kernel does not export it.
fn lookup(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: `name` is a valid NUL-terminated string; `__symbol_get` only reads it.
    let ptr = unsafe { bindings::__symbol_get(name.as_char_ptr()) };
    (!ptr.is_null()).then_some(ptr)
}

/// Resolves `$name` to a function pointer of type `$ty`, recording it in `$missing` if absent.
macro_rules! resolve {
    ($missing:ident, $name:literal, $ty:ty) => {{
        match lookup(kernel::c_str!($name)) {
            // SAFETY: The series declares `$name` with exactly the C prototype `$ty` mirrors
            // (see the type's documentation), and an export's value is the function's address.
            Some(ptr) => Some(unsafe { core::mem::transmute::<*mut c_void, $ty>(ptr) }),
            None => {
                if $missing.is_empty() {
                    $missing = $name;
                } else {
                    $missing = "several patch-series symbols";
                }
                pr_err!("this kernel does not export {}\n", $name);
                None
            }
        }
    }};
}

impl Series {
    /// Resolves every export, or explains which are missing and fails with `ENOSYS`.
    pub(crate) fn resolve() -> Result<Self> {
        let mut missing: &str = "";
        let perf_event_text_poke = resolve!(missing, "perf_event_text_poke", PerfEventTextPoke);
        let text_mutex_lock = resolve!(missing, "text_mutex_lock", TextMutexOp);
        let text_mutex_unlock = resolve!(missing, "text_mutex_unlock", TextMutexOp);
        #[cfg(CONFIG_X86_64)]
        let text_poke = resolve!(missing, "text_poke", TextPoke);
        #[cfg(CONFIG_ARM64)]
        let aarch64_insn_write = resolve!(missing, "aarch64_insn_write", Aarch64InsnWrite);
        #[cfg(CONFIG_ARM64)]
        let register_text_poke_brk_hook =
            resolve!(missing, "register_text_poke_brk_hook", RegisterBrkHook);
        #[cfg(CONFIG_ARM64)]
        let unregister_text_poke_brk_hook =
            resolve!(missing, "unregister_text_poke_brk_hook", UnregisterBrkHook);

        let series = (|| {
            Some(Self {
                perf_event_text_poke: perf_event_text_poke?,
                text_mutex_lock: text_mutex_lock?,
                text_mutex_unlock: text_mutex_unlock?,
                #[cfg(CONFIG_X86_64)]
                text_poke: text_poke?,
                #[cfg(CONFIG_ARM64)]
                aarch64_insn_write: aarch64_insn_write?,
                #[cfg(CONFIG_ARM64)]
                register_text_poke_brk_hook: register_text_poke_brk_hook?,
                #[cfg(CONFIG_ARM64)]
                unregister_text_poke_brk_hook: unregister_text_poke_brk_hook?,
            })
        })();
        series.ok_or_else(|| {
            pr_err!(
                "this kernel lacks the textpoke patch series (missing {}); \
                 build it with tools/kernel.sh, which applies tools/patches/*.patch\n",
                missing
            );
            crate::errno::no_series()
        })
    }

    /// Takes `text_mutex`, serializing with every in-kernel text poker until the guard drops.
    pub(crate) fn lock_text(&self) -> TextMutexGuard<'_> {
        // SAFETY: Called from process context (the engine only patches from process context);
        // the guard below unlocks exactly once.
        unsafe { (self.text_mutex_lock)() };
        TextMutexGuard { series: self }
    }
}

/// Holds `text_mutex`; releases it when dropped.
pub(crate) struct TextMutexGuard<'a> {
    series: &'a Series,
}

impl Drop for TextMutexGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: The guard exists only while this task holds `text_mutex` (see `lock_text`).
        unsafe { (self.series.text_mutex_unlock)() };
    }
}
