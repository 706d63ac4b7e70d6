// SPDX-License-Identifier: GPL-2.0

//! The atomics the shared files use: `core`'s, or loom's when model checking (`--cfg loom`).
//!
//! Both the kernel crate and the host crate `textpoke-core` include this file as
//! `crate::atomic`, so the other shared files compile unchanged in both places and the loom
//! tests check exactly the code the kernel runs. The kernel never sets `loom`.

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
