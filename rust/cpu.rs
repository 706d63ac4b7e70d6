// SPDX-License-Identifier: GPL-2.0

//! CPU numbers, the online mask, CPU-hotplug exclusion and all-CPU calls.
//!
//! C header: [`include/linux/cpumask.h`](srctree/include/linux/cpumask.h),
//! [`include/linux/smp.h`](srctree/include/linux/smp.h).

use kernel::{bindings, ffi::c_void};

extern "C" {
    fn textpoke_helper_cpu() -> u32;
    // Functions with CPU hotplug, empty inlines without it (as on our arm64 kernel).
    fn textpoke_helper_cpus_read_lock();
    fn textpoke_helper_cpus_read_unlock();
}

/// The CPU the caller runs on.
///
/// Stable only while the caller cannot migrate: in a trap handler (interrupts masked), with
/// preemption disabled, or in a kthread bound to one CPU.
pub(crate) fn current() -> usize {
    // SAFETY: `raw_smp_processor_id()` only reads the current CPU's number.
    unsafe { textpoke_helper_cpu() as usize }
}

/// Number of possible CPU numbers (`nr_cpu_ids`): every CPU number is below it.
pub(crate) fn possible() -> usize {
    // SAFETY: `nr_cpu_ids` is set during early boot and never written afterwards.
    unsafe { bindings::nr_cpu_ids as usize }
}

/// Whether CPU `cpu` is online right now (hold a [`HotplugGuard`] to keep it so).
pub(crate) fn is_online(cpu: usize) -> bool {
    let bits = usize::BITS as usize;
    // SAFETY: `__cpu_online_mask` is a static bitmap the kernel updates with atomic bit
    // operations; reading one word of it is what `cpu_online()` does.
    let word = unsafe {
        let mask = &raw const bindings::__cpu_online_mask;
        (*mask).bits.get(cpu / bits).copied().unwrap_or(0)
    };
    cpu < possible() && word & (1 << (cpu % bits)) != 0
}

/// The online CPUs, in increasing order.
pub(crate) fn online() -> impl Iterator<Item = usize> {
    (0..possible()).filter(|&cpu| is_online(cpu))
}

/// Keeps CPUs from coming or going (`cpus_read_lock`) until dropped, on the task that took it.
pub(crate) struct HotplugGuard(core::marker::PhantomData<*mut ()>);

impl HotplugGuard {
    /// Takes the CPU-hotplug read lock; sleeps, so process context only.
    pub(crate) fn new() -> Self {
        // SAFETY: Process context; released exactly once in `drop`.
        unsafe { textpoke_helper_cpus_read_lock() };
        Self(core::marker::PhantomData)
    }
}

impl Drop for HotplugGuard {
    fn drop(&mut self) {
        // SAFETY: Taken in `new`.
        unsafe { textpoke_helper_cpus_read_unlock() };
    }
}

/// Runs `func(info)` on every online CPU, the caller's included, and waits for all of them.
///
/// # Safety
///
/// `func` must be safe to run in hard-interrupt context with `info`, and `info` must stay valid
/// until this returns. The caller must be in process context with interrupts enabled.
pub(crate) unsafe fn on_each_cpu(func: unsafe extern "C" fn(*mut c_void), info: *mut c_void) {
    // SAFETY: The caller upholds `func`'s and `info`'s requirements; a null condition means
    // every CPU in the mask, and waiting keeps `info` alive for the whole call.
    unsafe {
        bindings::on_each_cpu_cond_mask(
            None,
            Some(func),
            info,
            true,
            &raw const bindings::__cpu_online_mask,
        )
    };
}

/// Disables preemption until dropped, so [`current`] stays valid; it cannot leave the CPU.
pub(crate) struct NoPreempt(core::marker::PhantomData<*mut ()>);

extern "C" {
    fn textpoke_helper_preempt_disable();
    fn textpoke_helper_preempt_enable();
    fn textpoke_helper_cond_resched();
}

impl NoPreempt {
    /// Disables preemption.
    pub(crate) fn new() -> Self {
        // SAFETY: Balanced by `drop`.
        unsafe { textpoke_helper_preempt_disable() };
        Self(core::marker::PhantomData)
    }
}

impl Drop for NoPreempt {
    fn drop(&mut self) {
        // SAFETY: Disabled in `new`.
        unsafe { textpoke_helper_preempt_enable() };
    }
}

/// Disables interrupts on this CPU until dropped (`local_irq_save()`), which also keeps the
/// caller on it.
pub(crate) struct NoIrq {
    flags: core::ffi::c_ulong,
    _not_send: core::marker::PhantomData<*mut ()>,
}

extern "C" {
    fn textpoke_helper_irq_save() -> core::ffi::c_ulong;
    fn textpoke_helper_irq_restore(flags: core::ffi::c_ulong);
}

impl NoIrq {
    /// Disables interrupts.
    pub(crate) fn new() -> Self {
        // SAFETY: Balanced by `drop`, on this CPU (the guard cannot move: not `Send`).
        let flags = unsafe { textpoke_helper_irq_save() };
        Self {
            flags,
            _not_send: core::marker::PhantomData,
        }
    }
}

impl Drop for NoIrq {
    fn drop(&mut self) {
        // SAFETY: Restores what `new` saved, on the same CPU.
        unsafe { textpoke_helper_irq_restore(self.flags) };
    }
}

extern "C" {
    fn textpoke_helper_cpu_relax();
}

/// Pause inside a spin-wait loop (`cpu_relax()`: x86 `PAUSE`, arm64 `YIELD`, which also makes
/// single-threaded TCG switch to another vCPU at once).
pub(crate) fn relax() {
    // SAFETY: A hint with no effect on memory.
    unsafe { textpoke_helper_cpu_relax() };
}

/// Lets the scheduler run something else if it wants to (`cond_resched()`).
pub(crate) fn cond_resched() {
    // SAFETY: Called from process context without spinlocks held (the callers are loops in
    // kthreads and in the batch path).
    unsafe { textpoke_helper_cond_resched() };
}
