// SPDX-License-Identifier: GPL-2.0

//! The clock perf timestamps its records with.
//!
//! perf's `PERF_SAMPLE_TIME` is `local_clock()` unless the event asks for another clock
//! (kernel/events/core.c `perf_clock`), so ordering executions against a `TEXT_POKE` record's
//! timestamp needs exactly this clock.

extern "C" {
    fn textpoke_helper_local_clock() -> u64;
}

/// `local_clock()`: nanoseconds, the clock of perf's `PERF_SAMPLE_TIME`.
pub(crate) fn now() -> u64 {
    // SAFETY: `local_clock()` may be called from any context.
    unsafe { textpoke_helper_local_clock() }
}
