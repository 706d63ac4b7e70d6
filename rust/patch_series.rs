// SPDX-License-Identifier: GPL-2.0

//! The kernel patch series' exports (`tools/patches`), resolved when the module loads.
//!
//! Linking against them directly would make `insmod` fail with a bare "Unknown symbol" on a
//! kernel built without the series. Resolving them with `__symbol_get` instead lets the module
//! refuse to load with a message that names what is missing and where to get it. Exports of
//! vmlinux have no owning module, so nothing is pinned and nothing needs `symbol_put`.
//!
//! This file resolves the exports every arch uses; each arch resolves its own with the same
//! [`SymbolResolver`] (`arch/<arch>/patch_series.rs`).

use kernel::{ffi::c_void, prelude::*, str::CStr};

/// `perf_event_text_poke(addr, old, old_len, new, new_len)` (include/linux/perf_event.h).
pub(crate) type PerfEventTextPoke =
    unsafe extern "C" fn(*const c_void, *const c_void, usize, *const c_void, usize);
/// `perf_event_ksymbol(type, addr, len, unregister, name)` (include/linux/perf_event.h, exported
/// by patch 0001).
pub(crate) type PerfEventKsymbol =
    unsafe extern "C" fn(u16, u64, u32, bool, *const kernel::ffi::c_char);
/// `PERF_RECORD_KSYMBOL_TYPE_OOL` (include/uapi/linux/perf_event.h), which the bindings lack;
/// kernel/exports.c asserts the same number.
const PERF_RECORD_KSYMBOL_TYPE_OOL: u16 = 2;
/// `perf_text_poke_listening()` (include/linux/perf_event.h, patch 0011).
type PerfTextPokeListening = unsafe extern "C" fn() -> bool;
/// `text_mutex_lock()` / `text_mutex_unlock()` / `text_mutex_assert_held()`
/// (include/linux/memory.h, patch 0002).
type TextMutexOp = unsafe extern "C" fn();
/// `stop_machine_cpuslocked(fn, data, cpus)` (include/linux/stop_machine.h, patch 0005).
///
/// `fn` is a plain function pointer, not an `Option` of one: with control-flow integrity the
/// call checks a hash of this type, and C's `cpu_stop_fn_t` hashes as a bare pointer to
/// `int (void *)` (an `Option` hashes as an enum).
pub(crate) type StopMachineCpuslocked = unsafe extern "C" fn(
    unsafe extern "C" fn(*mut c_void) -> kernel::ffi::c_int,
    *mut c_void,
    *const kernel::bindings::cpumask,
) -> kernel::ffi::c_int;

/// `text_reserved_by_patchers(start, end)` (include/linux/kprobes.h, patch 0006).
pub(crate) type TextReservedByPatchers =
    unsafe extern "C" fn(*mut c_void, *mut c_void) -> kernel::ffi::c_int;
/// `kprobes_text_lock()` / `kprobes_text_unlock()` (include/linux/kprobes.h, patch 0006).
type KprobesTextOp = unsafe extern "C" fn();
/// `kprobes_text_reserved(start, end)` (include/linux/kprobes.h, patch 0006).
type KprobesTextReserved = unsafe extern "C" fn(*mut c_void, *mut c_void) -> bool;

/// A text-poke trap handler (`text_poke_trap_fn`, include/linux/text_patcher.h, patch 0007).
pub(crate) type TrapFn = unsafe extern "C" fn(*mut kernel::bindings::pt_regs) -> bool;
/// `register_text_poke_trap(fn)` (patch 0007).
type RegisterTrap = unsafe extern "C" fn(TrapFn) -> kernel::ffi::c_int;
/// `unregister_text_poke_trap(fn)` (patch 0007).
type UnregisterTrap = unsafe extern "C" fn(TrapFn);

/// `struct text_patcher_ops` (include/linux/text_patcher.h, patch 0008): the kernel's jump label
/// and ftrace updates, handed to a patcher. kernel/exports.c checks this layout against the
/// header where the header exists.
///
/// Named as in C: with control-flow integrity (`CONFIG_CFI_CLANG`) every indirect call checks
/// a hash of the callee's type, in which a `#[repr(C)]` struct is its bare name, so a pointer to
/// this mirror must hash as a pointer to the C struct (`register_text_patcher()`, called through
/// the pointer `__symbol_get` returns, checks it).
#[allow(non_camel_case_types)]
#[repr(C)]
pub(crate) struct text_patcher_ops {
    /// `queue(addr, insn, len)`: takes the change over (true) or hands it back (false).
    pub(crate) queue: unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> bool,
    /// `apply()`: completes every change taken since the last apply.
    pub(crate) apply: unsafe extern "C" fn(),
}

// The mirror's layout, as kernel/exports.c asserts it for `struct text_patcher_ops`.
kernel::static_assert!(core::mem::size_of::<text_patcher_ops>() == 16);
kernel::static_assert!(core::mem::offset_of!(text_patcher_ops, apply) == 8);

/// `register_text_patcher(ops, owner)` (patch 0008).
type RegisterPatcher = unsafe extern "C" fn(
    *const text_patcher_ops,
    *mut kernel::bindings::module,
) -> kernel::ffi::c_int;
/// `unregister_text_patcher(ops)` (patch 0008).
type UnregisterPatcher = unsafe extern "C" fn(*const text_patcher_ops);

/// Looks exports up by name and remembers which were missing.
pub(crate) struct SymbolResolver {
    missing: &'static str,
}

impl SymbolResolver {
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
pub(crate) struct Generic {
    /// `perf_event_text_poke()`.
    pub(crate) perf_event_text_poke: PerfEventTextPoke,
    perf_event_ksymbol: PerfEventKsymbol,
    perf_text_poke_listening: PerfTextPokeListening,
    /// `stop_machine_cpuslocked()`: runs a function on every online CPU with all of them
    /// stopped, for a caller that already holds the CPU-hotplug read lock.
    pub(crate) stop_machine_cpuslocked: StopMachineCpuslocked,
    text_reserved_by_patchers: TextReservedByPatchers,
    kprobes_text_lock: KprobesTextOp,
    kprobes_text_unlock: KprobesTextOp,
    kprobes_text_reserved: KprobesTextReserved,
    text_mutex_lock: TextMutexOp,
    text_mutex_unlock: TextMutexOp,
    text_mutex_assert_held: TextMutexOp,
    register_text_poke_trap: RegisterTrap,
    unregister_text_poke_trap: UnregisterTrap,
    register_text_patcher: RegisterPatcher,
    unregister_text_patcher: UnregisterPatcher,
}

impl Generic {
    /// Resolves the generic exports; `None` if any is missing (recorded in `r`).
    pub(crate) fn resolve(r: &mut SymbolResolver) -> Option<Self> {
        let perf_event_text_poke = resolve!(r, "perf_event_text_poke", PerfEventTextPoke);
        let perf_event_ksymbol = resolve!(r, "perf_event_ksymbol", PerfEventKsymbol);
        let perf_text_poke_listening =
            resolve!(r, "perf_text_poke_listening", PerfTextPokeListening);
        let stop_machine_cpuslocked = resolve!(r, "stop_machine_cpuslocked", StopMachineCpuslocked);
        let text_reserved_by_patchers =
            resolve!(r, "text_reserved_by_patchers", TextReservedByPatchers);
        let kprobes_text_lock = resolve!(r, "kprobes_text_lock", KprobesTextOp);
        let kprobes_text_unlock = resolve!(r, "kprobes_text_unlock", KprobesTextOp);
        let kprobes_text_reserved = resolve!(r, "kprobes_text_reserved", KprobesTextReserved);
        let text_mutex_lock = resolve!(r, "text_mutex_lock", TextMutexOp);
        let text_mutex_unlock = resolve!(r, "text_mutex_unlock", TextMutexOp);
        let text_mutex_assert_held = resolve!(r, "text_mutex_assert_held", TextMutexOp);
        let register_trap = resolve!(r, "register_text_poke_trap", RegisterTrap);
        let unregister_trap = resolve!(r, "unregister_text_poke_trap", UnregisterTrap);
        let register_patcher = resolve!(r, "register_text_patcher", RegisterPatcher);
        let unregister_patcher = resolve!(r, "unregister_text_patcher", UnregisterPatcher);
        Some(Self {
            perf_event_text_poke: perf_event_text_poke?,
            perf_event_ksymbol: perf_event_ksymbol?,
            perf_text_poke_listening: perf_text_poke_listening?,
            stop_machine_cpuslocked: stop_machine_cpuslocked?,
            text_reserved_by_patchers: text_reserved_by_patchers?,
            kprobes_text_lock: kprobes_text_lock?,
            kprobes_text_unlock: kprobes_text_unlock?,
            kprobes_text_reserved: kprobes_text_reserved?,
            text_mutex_lock: text_mutex_lock?,
            text_mutex_unlock: text_mutex_unlock?,
            text_mutex_assert_held: text_mutex_assert_held?,
            register_text_poke_trap: register_trap?,
            unregister_text_poke_trap: unregister_trap?,
            register_text_patcher: register_patcher?,
            unregister_text_patcher: unregister_patcher?,
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

    /// Keeps kprobes from preparing, arming, optimizing or disarming a probe until the guard
    /// drops (`kprobes_text_lock()`, patch 0006): a module batch holds it from before it checks
    /// its sites until its guards are written, so that a probe is armed wholly before (and the
    /// check sees it) or prepared wholly after (and kprobes sees the guard and refuses). Taken
    /// before the CPU-hotplug lock and `text_mutex`, as kprobes takes them. Sleeps.
    pub(crate) fn lock_kprobes(&self) -> KprobesGuard<'_> {
        // SAFETY: Process context (a commit); the guard below unlocks exactly once.
        unsafe { (self.kprobes_text_lock)() };
        KprobesGuard {
            generic: self,
            _not_send: core::marker::PhantomData,
        }
    }

    /// Whether any perf event asks for `PERF_RECORD_TEXT_POKE` (`perf_text_poke_listening()`,
    /// patch 0011). Asked with `text_mutex` held (`_held`): while it stays held no event starts
    /// to receive records (patch 0011 gives a `text_poke` event its buffer and enables it under
    /// `text_mutex`), so an answer of `false` holds, for any tracer that could copy the text,
    /// until the caller releases it.
    pub(crate) fn listening(&self, _held: &HoldsText) -> bool {
        // SAFETY: The caller holds `text_mutex`, which the function asserts; it only reads a
        // counter.
        unsafe { (self.perf_text_poke_listening)() }
    }

    /// Emits a `PERF_RECORD_TEXT_POKE` of `[addr, addr + new.len())` changing from `old` to
    /// `new` (`old` empty: text that appears, described whole). Under `text_mutex` (`_held`),
    /// as upstream emits its own, so the records are ordered with every text change and with a
    /// listener's start (see [`Generic::listening`]). perf stamps the record on the calling
    /// CPU: a caller that logs where it went keeps preemption off around both.
    pub(crate) fn text_poke(&self, _held: &HoldsText, addr: u64, old: &[u8], new: &[u8]) {
        let old_ptr = if old.is_empty() {
            core::ptr::null()
        } else {
            old.as_ptr().cast::<c_void>()
        };
        // SAFETY: `old` and `new` are valid for their lengths (`old` unread when empty); the
        // function copies them into the ring buffers of interested events and keeps no
        // reference, and reads nothing at `addr`.
        unsafe {
            (self.perf_event_text_poke)(
                addr as usize as *const c_void,
                old_ptr,
                old.len(),
                new.as_ptr().cast::<c_void>(),
                new.len(),
            )
        };
    }

    /// Emits a `PERF_RECORD_KSYMBOL` of type `OOL` for `[addr, addr + len)` named `name`: a
    /// register (perf maps the range and fills it from the text-poke records that follow), or
    /// with `unregister` its removal. Under `text_mutex`, so it is ordered with every text
    /// change and with a listener's start (see [`Generic::listening`]).
    pub(crate) fn ksymbol(
        &self,
        _held: &HoldsText,
        addr: u64,
        len: u32,
        unregister: bool,
        name: &CStr,
    ) {
        // SAFETY: `name` is NUL-terminated and only read during the call (the function copies
        // it); process context. The type is valid, so the function has no failure to report.
        unsafe {
            (self.perf_event_ksymbol)(
                PERF_RECORD_KSYMBOL_TYPE_OOL,
                addr,
                len,
                unregister,
                name.as_char_ptr(),
            )
        };
    }

    /// Takes `text_mutex`, serializing with every in-kernel text poker until the guard drops.
    pub(crate) fn lock_text(&self) -> TextLock<'_> {
        // SAFETY: Called from process context (the engine only patches from process context);
        // the guard below unlocks exactly once.
        unsafe { (self.text_mutex_lock)() };
        TextLock {
            generic: self,
            proof: HoldsText(core::marker::PhantomData),
        }
    }

    /// Stands for `text_mutex` held by the caller of a kernel patcher request, who keeps it for
    /// the whole call; lockdep checks that it is (`text_mutex_assert_held()`).
    ///
    /// # Safety
    ///
    /// The calling task must hold `text_mutex` for as long as the proof exists.
    pub(crate) unsafe fn text_held_by_caller(&self) -> TextHeld<'_> {
        // SAFETY: Process context, as every text patcher callback is; it only asserts.
        unsafe { (self.text_mutex_assert_held)() };
        TextHeld {
            _common: self,
            proof: HoldsText(core::marker::PhantomData),
        }
    }

    /// Registers `handler` as the text-poke guard trap's handler (`EBUSY` if one is).
    pub(crate) fn register_trap(&self, handler: TrapFn) -> Result<TrapHook> {
        // SAFETY: `handler` is a valid function of the hook's type; `TrapHook` unregisters it
        // before it can go away (it borrows the series, which the engine owns).
        kernel::error::to_result(unsafe { (self.register_text_poke_trap)(handler) })?;
        Ok(TrapHook {
            register: self.register_text_poke_trap,
            unregister: self.unregister_text_poke_trap,
            handler,
        })
    }

    /// Registers `ops` as the kernel's jump label and ftrace patcher, for `owner`.
    ///
    /// # Safety
    ///
    /// `ops` and its functions must stay valid until the registration is dropped, and `owner`
    /// must be the module they belong to.
    pub(crate) unsafe fn register_patcher(
        &self,
        ops: &'static text_patcher_ops,
        owner: *mut kernel::bindings::module,
    ) -> Result<PatcherRegistration> {
        // SAFETY: The caller guarantees `ops` and `owner`.
        kernel::error::to_result(unsafe { (self.register_text_patcher)(ops, owner) })?;
        Ok(PatcherRegistration {
            unregister: self.unregister_text_patcher,
            ops,
        })
    }
}

/// The registered trap handler; unregistered when dropped.
pub(crate) struct TrapHook {
    register: RegisterTrap,
    unregister: UnregisterTrap,
    handler: TrapFn,
}

impl TrapHook {
    /// Tries to register the handler a second time: the kernel must refuse, since a second
    /// owner would be handed traps on guards whose pending instructions only the first knows.
    pub(crate) fn second_claim(&self) -> Result {
        // SAFETY: As in `register_trap`; a claim that wrongly succeeded is undone at once.
        let ret = unsafe { (self.register)(self.handler) };
        kernel::error::to_result(ret)
    }
}

impl Drop for TrapHook {
    fn drop(&mut self) {
        // SAFETY: Registered in `register_trap`. Unregistering waits until no CPU runs the
        // handler (an IPI to every online CPU; the hook runs with interrupts masked), so its
        // code may go away after this.
        unsafe { (self.unregister)(self.handler) };
    }
}

/// The registered kernel patcher; unregistered when dropped.
pub(crate) struct PatcherRegistration {
    unregister: UnregisterPatcher,
    ops: &'static text_patcher_ops,
}

impl Drop for PatcherRegistration {
    fn drop(&mut self) {
        // SAFETY: Registered in `register_patcher`. Unregistering applies what the patcher
        // holds and returns once no task is inside `ops` (every call is under `text_mutex`).
        unsafe { (self.unregister)(self.ops) };
    }
}

/// Holds kprobes' lock ([`Generic::lock_kprobes`]); releases it when dropped.
pub(crate) struct KprobesGuard<'a> {
    generic: &'a Generic,
    /// A mutex is released by the task that holds it: the guard must not move to another.
    _not_send: core::marker::PhantomData<*mut ()>,
}

impl KprobesGuard<'_> {
    /// Whether kprobes owns any byte of `[start, end)` (`kprobes_text_reserved()`, patch
    /// 0006): a probe registered at one of them, armed or not, or an optimized probe, prepared
    /// or in place, whose jump covers one.
    ///
    /// Either holds a copy of the text that a change there would make stale: a disabled probe
    /// re-arms with the instruction it copied at registration, and an optimized probe's detour
    /// runs the instructions its jump covers as they were when it was prepared, and its jump
    /// is written (by kprobes' optimizer, later, under `text_mutex` alone) over whatever the
    /// text then holds. kprobes checks jump labels, static calls and ftrace before it copies
    /// text for a probe, but knows nothing of a module's sites; so the module asks, under this
    /// lock, before each batch: no probe is then prepared until its guards are written (and
    /// kprobes refuses to copy a guard), and none prepared before can miss the check.
    pub(crate) fn owns(&self, start: u64, end: u64) -> bool {
        // SAFETY: This task holds kprobes' lock for as long as the guard exists, which the
        // function asserts; it only reads kprobes' table.
        unsafe {
            (self.generic.kprobes_text_reserved)(
                start as usize as *mut c_void,
                end.wrapping_sub(1) as usize as *mut c_void,
            )
        }
    }
}

impl Drop for KprobesGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: A guard exists only while this task holds the lock (see `lock_kprobes`).
        unsafe { (self.generic.kprobes_text_unlock)() };
    }
}

/// That this task holds `text_mutex`: what every text write demands. Only a [`TextLock`] or a
/// [`TextHeld`] lends one, for as long as it exists.
pub(crate) struct HoldsText(core::marker::PhantomData<*mut ()>);

/// `text_mutex`, taken by this task ([`Generic::lock_text`]); released when dropped.
pub(crate) struct TextLock<'a> {
    generic: &'a Generic,
    /// Not `Send` (a mutex is released by the task that holds it), as the proof is not.
    proof: HoldsText,
}

impl TextLock<'_> {
    /// The proof that `text_mutex` is held, for as long as this guard holds it.
    pub(crate) fn holds(&self) -> &HoldsText {
        &self.proof
    }
}

impl Drop for TextLock<'_> {
    fn drop(&mut self) {
        // SAFETY: A `TextLock` exists only while this task holds `text_mutex` (see `lock_text`).
        unsafe { (self.generic.text_mutex_unlock)() };
    }
}

/// `text_mutex`, held by the caller of a kernel patcher request for as long as this exists
/// ([`Generic::text_held_by_caller`]); released by nobody here.
pub(crate) struct TextHeld<'a> {
    _common: &'a Generic,
    proof: HoldsText,
}

impl TextHeld<'_> {
    /// The proof that `text_mutex` is held, for as long as the caller holds it.
    pub(crate) fn holds(&self) -> &HoldsText {
        &self.proof
    }
}
