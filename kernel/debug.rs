// SPDX-License-Identifier: GPL-2.0

//! The debug module parameter that deliberately breaks the protocol.
//!
//! `textpoke.debug_protocol` (kernel/exports.c) exists so that the guest's ordering checker can
//! be shown to catch a broken engine under the same load that the correct one passes. It is
//! writable only by root, read once per batch, and every batch that uses it logs so.

use crate::plan::Protocol;
use kernel::ffi::c_int;

extern "C" {
    /// Defined and registered as a module parameter in kernel/exports.c.
    static textpoke_debug_protocol: c_int;
}

/// The protocol the next batch follows.
pub(crate) fn protocol() -> Protocol {
    // SAFETY: An `int` module parameter; sysfs may write it at any time, so read it once and
    // without assuming it stays the same.
    let value = unsafe { core::ptr::read_volatile(&raw const textpoke_debug_protocol) };
    match value {
        1 => Protocol::RecordBeforeGuardSync,
        2 => Protocol::HeadBeforeTailSync,
        3 => Protocol::UnguardedNosync,
        _ => Protocol::Guarded,
    }
}
