//! The atomics the shared files use: `core`'s, or loom's when model checking (`--cfg loom`).
//!
//! The kernel crate defines a module of the same name re-exporting `core::sync::atomic`, so the
//! shared files write `crate::atomic::AtomicUsize` and compile unchanged in both places.

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

#[cfg(not(loom))]
pub use core::sync::atomic::{fence, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Pause inside a spin-wait loop; under loom, let the other threads run.
#[inline]
pub fn spin_loop() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}
