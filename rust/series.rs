// SPDX-License-Identifier: GPL-2.0

//! The kernel patch series' exports (`tools/patches`), resolved when the module loads.
//!
//! Linking against them directly would make `insmod` fail with a bare "Unknown symbol" on a
//! kernel built without the series. Resolving them with `__symbol_get` instead lets the module
//! refuse to load with a message that names what is missing and where to get it. Exports of
//! vmlinux have no owning module, so nothing is pinned and nothing needs `symbol_put`.
//!
//! This file resolves the exports every arch uses; each arch resolves its own with the same
//! [`Resolver`] (`arch/<arch>/series.rs`).

use kernel::{ffi::c_void, prelude::*, str::CStr};

/// `perf_event_text_poke(addr, old, old_len, new, new_len)` (include/linux/perf_event.h).
pub(crate) type PerfEventTextPoke =
    unsafe extern "C" fn(*const c_void, *const c_void, usize, *const c_void, usize);
/// `text_mutex_lock()` / `text_mutex_unlock()` (include/linux/memory.h, patch 0002).
type TextMutexOp = unsafe extern "C" fn();
/// `stop_machine_cpuslocked(fn, data, cpus)` (include/linux/stop_machine.h, patch 0006).
pub(crate) type StopMachineCpuslocked = unsafe extern "C" fn(
    Option<unsafe extern "C" fn(*mut c_void) -> kernel::ffi::c_int>,
    *mut c_void,
    *const kernel::bindings::cpumask,
) -> kernel::ffi::c_int;

/// `text_reserved_by_patchers(start, end)` (include/linux/kprobes.h, patch 0007).
pub(crate) type TextReservedByPatchers =
    unsafe extern "C" fn(*mut c_void, *mut c_void) -> kernel::ffi::c_int;

/// Looks exports up by name and remembers which were missing.
pub(crate) struct Resolver {
    missing: &'static str,
}

impl Resolver {
    /// A resolver that has found nothing missing yet.
    pub(crate) fn new() -> Self {
        Self { missing: "" }
    }

    /// The address of the GPL export `name`, or `None` (logged and remembered) if this kernel
    /// does not export it.
    pub(crate) fn lookup(&mut self, name: &'static CStr) -> Option<*mut c_void> {
        // SAFETY: `name` is a valid NUL-terminated string; `__symbol_get` only reads it.
        let ptr = unsafe { kernel::bindings::__symbol_get(name.as_char_ptr()) };
        if ptr.is_null() {
            let name = name.to_str().unwrap_or("?");
            pr_err!("this kernel does not export {}\n", name);
            self.missing = if self.missing.is_empty() {
                name
            } else {
                "several patch-series symbols"
            };
            return None;
        }
        Some(ptr)
    }

    /// Fails with `ENOSYS` and a log line naming what is missing, if anything is.
    pub(crate) fn finish(&self) -> Result {
        if self.missing.is_empty() {
            return Ok(());
        }
        pr_err!(
            "this kernel lacks the textpoke patch series (missing {}); \
             build it with tools/kernel.sh, which applies tools/patches/*.patch\n",
            self.missing
        );
        Err(kernel::error::Error::from_errno(
            -(kernel::bindings::ENOSYS as i32),
        ))
    }
}

/// Resolves the export `$name` of a resolver `$r` to a function pointer of type `$ty`.
///
/// The caller vouches that `$ty` mirrors the export's C prototype (see each type's
/// documentation).
macro_rules! resolve {
    ($r:expr, $name:literal, $ty:ty) => {
        $r.lookup(kernel::c_str!($name)).map(|ptr| {
            // SAFETY: The series declares `$name` with exactly the C prototype `$ty` mirrors,
            // and an export's value is the function's address.
            unsafe { core::mem::transmute::<*mut kernel::ffi::c_void, $ty>(ptr) }
        })
    };
}
pub(crate) use resolve;

/// The exports every arch uses.
pub(crate) struct Common {
    /// `perf_event_text_poke()`.
    pub(crate) perf_event_text_poke: PerfEventTextPoke,
    /// `stop_machine_cpuslocked()`: runs a function on every online CPU with all of them
    /// stopped, for a caller that already holds the CPU-hotplug read lock.
    pub(crate) stop_machine_cpuslocked: StopMachineCpuslocked,
    text_reserved_by_patchers: TextReservedByPatchers,
    text_mutex_lock: TextMutexOp,
    text_mutex_unlock: TextMutexOp,
}

impl Common {
    /// Resolves the common exports; `None` if any is missing (recorded in `r`).
    pub(crate) fn resolve(r: &mut Resolver) -> Option<Self> {
        let perf_event_text_poke = resolve!(r, "perf_event_text_poke", PerfEventTextPoke);
        let stop_machine_cpuslocked = resolve!(r, "stop_machine_cpuslocked", StopMachineCpuslocked);
        let text_reserved_by_patchers =
            resolve!(r, "text_reserved_by_patchers", TextReservedByPatchers);
        let text_mutex_lock = resolve!(r, "text_mutex_lock", TextMutexOp);
        let text_mutex_unlock = resolve!(r, "text_mutex_unlock", TextMutexOp);
        Some(Self {
            perf_event_text_poke: perf_event_text_poke?,
            stop_machine_cpuslocked: stop_machine_cpuslocked?,
            text_reserved_by_patchers: text_reserved_by_patchers?,
            text_mutex_lock: text_mutex_lock?,
            text_mutex_unlock: text_mutex_unlock?,
        })
    }

    /// Which in-kernel patcher owns any byte of `[start, end)`, if one does: jump labels, static
    /// calls, ftrace or kprobes (their text must never become a site). Sleeps.
    pub(crate) fn text_owner(&self, start: u64, end: u64) -> Option<&'static str> {
        // SAFETY: The function only reads the patchers' tables, under their own locks, for any
        // range; process context (registration).
        let owner = unsafe {
            (self.text_reserved_by_patchers)(
                start as usize as *mut c_void,
                end.wrapping_sub(1) as usize as *mut c_void,
            )
        };
        match owner {
            0 => None,
            1 => Some("a jump label"),
            2 => Some("a static call"),
            3 => Some("ftrace"),
            4 => Some("a kprobe"),
            _ => Some("another patcher"),
        }
    }

    /// Takes `text_mutex`, serializing with every in-kernel text poker until the guard drops.
    pub(crate) fn lock_text(&self) -> TextMutexGuard<'_> {
        // SAFETY: Called from process context (the engine only patches from process context);
        // the guard below unlocks exactly once.
        unsafe { (self.text_mutex_lock)() };
        TextMutexGuard {
            common: self,
            _not_send: core::marker::PhantomData,
        }
    }
}

/// Holds `text_mutex`; releases it when dropped, on the task that took it.
pub(crate) struct TextMutexGuard<'a> {
    common: &'a Common,
    /// A mutex is released by the task that holds it: the guard must not move to another.
    _not_send: core::marker::PhantomData<*mut ()>,
}

impl Drop for TextMutexGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: The guard exists only while this task holds `text_mutex` (see `lock_text`).
        unsafe { (self.common.text_mutex_unlock)() };
    }
}
