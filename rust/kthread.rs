// SPDX-License-Identifier: GPL-2.0

//! Kernel threads running a Rust function over shared state (6.12 has no Rust kthread API).
//!
//! C header: [`include/linux/kthread.h`](srctree/include/linux/kthread.h).

use kernel::{
    bindings,
    ffi::{c_int, c_void},
    prelude::*,
    str::CStr,
    sync::Arc,
};

/// What a thread runs: a function and the state it works on.
struct Job<T> {
    state: Arc<T>,
    run: fn(&T),
}

/// A running kernel thread; stopped (and waited for) when dropped.
///
/// # Invariants
///
/// `task` is a kthread created to run `job`, with a reference held on its `task_struct`, so
/// stopping it is valid even after its function returned.
pub(crate) struct Kthread<T: Send + Sync + 'static> {
    task: *mut bindings::task_struct,
    /// Boxed so the thread can keep a pointer to it; freed only after the thread is stopped.
    _job: KBox<Job<T>>,
}

// SAFETY: The handle only passes `task` to thread-safe kthread functions, and the job's state is
// `Send + Sync`.
unsafe impl<T: Send + Sync + 'static> Send for Kthread<T> {}
// SAFETY: As above; `&Kthread` gives access to nothing.
unsafe impl<T: Send + Sync + 'static> Sync for Kthread<T> {}

/// The function every [`Kthread`] runs.
///
/// # Safety
///
/// `data` must point to a `Job<T>` that outlives the thread.
unsafe extern "C" fn thread_main<T: Send + Sync + 'static>(data: *mut c_void) -> c_int {
    // SAFETY: `data` is the handle's boxed job, which outlives the thread (the handle stops the
    // thread, waiting for it to exit, before freeing the box).
    let job = unsafe { &*data.cast::<Job<T>>() };
    (job.run)(&job.state);
    0
}

impl<T: Send + Sync + 'static> Kthread<T> {
    /// Starts `run(&state)` in a new thread bound to CPU `cpu`; `name` may contain one `%u`,
    /// replaced by the CPU number.
    pub(crate) fn on_cpu(cpu: usize, name: &CStr, state: Arc<T>, run: fn(&T)) -> Result<Self> {
        let cpu = u32::try_from(cpu).map_err(|_| EINVAL)?;
        Self::start(state, run, |job| {
            // SAFETY: `thread_main::<T>` matches `job`'s type; `name` is NUL-terminated.
            unsafe {
                bindings::kthread_create_on_cpu(
                    Some(thread_main::<T>),
                    job,
                    cpu,
                    name.as_char_ptr(),
                )
            }
        })
    }

    /// Starts `run(&state)` in a new unbound thread named `name` (no format directives).
    pub(crate) fn spawn(name: &CStr, state: Arc<T>, run: fn(&T)) -> Result<Self> {
        Self::start(state, run, |job| {
            // SAFETY: As above; the format has no directives, so no variadic arguments follow.
            unsafe {
                bindings::kthread_create_on_node(
                    Some(thread_main::<T>),
                    job,
                    bindings::NUMA_NO_NODE,
                    c"%s".as_ptr().cast(),
                    name.as_char_ptr(),
                )
            }
        })
    }

    fn start(
        state: Arc<T>,
        run: fn(&T),
        create: impl FnOnce(*mut c_void) -> *mut bindings::task_struct,
    ) -> Result<Self> {
        let job = KBox::new(Job { state, run }, GFP_KERNEL)?;
        let task = create((&raw const *job).cast_mut().cast::<c_void>());
        let task = kernel::error::from_err_ptr(task)?;
        // SAFETY: `task` was just created and is not running yet; the reference taken here is
        // dropped by `kthread_stop_put()` in `drop`.
        unsafe {
            bindings::get_task_struct(task);
            bindings::wake_up_process(task);
        }
        // INVARIANT: Created for `job`, with a task reference held.
        Ok(Self { task, _job: job })
    }
}

impl<T: Send + Sync + 'static> Drop for Kthread<T> {
    fn drop(&mut self) {
        // SAFETY: By the type invariant `task` is our kthread with a reference held; this asks
        // it to stop, waits until it has exited (or never ran), and drops the reference.
        unsafe { bindings::kthread_stop_put(self.task) };
    }
}

/// Whether the current kthread has been asked to stop.
pub(crate) fn should_stop() -> bool {
    // SAFETY: Called from a kthread created by `Kthread`.
    unsafe { bindings::kthread_should_stop() }
}

/// Sleeps for at least `ms` milliseconds.
pub(crate) fn sleep_ms(ms: u32) {
    // SAFETY: Process context; `msleep` has no other requirement.
    unsafe { bindings::msleep(ms) };
}
