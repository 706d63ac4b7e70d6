// SPDX-License-Identifier: GPL-2.0

//! Printing lines without the `<module>: ` prefix that `pr_*!` adds.
//!
//! KTAP lines must start their line (after the printk timestamp) for a parser to find them,
//! like the ones KUnit prints.

use core::fmt;
use kernel::{bindings, ffi::c_void};

/// Prints `args` as one `KERN_INFO` line.
pub(crate) fn line(args: fmt::Arguments<'_>) {
    // SAFETY: The format takes exactly one `%pA` argument, a pointer to `fmt::Arguments`
    // (lib/vsprintf.c `rust_fmt_argument`), which is what we pass, alive for the call.
    unsafe {
        bindings::_printk(
            c"\x016%pA\n".as_ptr().cast(),
            &args as *const fmt::Arguments<'_> as *const c_void,
        )
    };
}
