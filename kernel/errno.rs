// SPDX-License-Identifier: GPL-2.0

//! The errno each kind of bad input gets: one per cause, so a caller (and a test) can tell them
//! apart. Every refusal also logs a line saying why, and changes nothing.
//!
//! | cause                                             | errno          |
//! |---------------------------------------------------|----------------|
//! | address is not a registered site                  | `ENOENT`       |
//! | address is inside a registered site, or overlaps  | `EADDRINUSE`   |
//! | site in textpoke's own text (the trap path)       | `EPERM`        |
//! | site outside its module's text, or misaligned     | `EFAULT`       |
//! | instruction not supported by the codec            | `EOPNOTSUPP`   |
//! | instruction of the wrong size for the site        | `EMSGSIZE`     |
//! | branch target out of range                        | `ERANGE`       |
//! | new instruction is the guard itself               | `EILSEQ`       |
//! | site twice in one batch                           | `EEXIST`       |
//! | site owned by another batch in flight             | `EBUSY`        |
//! | commit of an empty batch                          | `ENODATA`      |
//! | batch over `TEXTPOKE_MAX_BATCH` sites             | `E2BIG`        |
//! | batch committed twice                             | `EALREADY`     |
//! | too many batches in flight at once                | `ENOSPC`       |
//! | site text changed behind the engine's back        | `EIO`          |
//! | the site's module is being unloaded               | `ENODEV`       |
//! | kernel without the patch series                   | `ENOSYS`       |

use crate::insn::InsnError;
use kernel::{bindings, error::Error};

fn code(errno: u32) -> Error {
    Error::from_errno(-(errno as i32))
}

/// `ENOENT`: the address is not a registered site.
pub(crate) fn not_registered() -> Error {
    code(bindings::ENOENT)
}

/// `EADDRINUSE`: the address is inside, or overlaps, a registered site.
pub(crate) fn inside_site() -> Error {
    code(bindings::EADDRINUSE)
}

/// `EPERM`: the site is in textpoke's own text.
pub(crate) fn engine_text() -> Error {
    code(bindings::EPERM)
}

/// `EFAULT`: the site is outside its module's text, or misaligned.
pub(crate) fn outside_text() -> Error {
    code(bindings::EFAULT)
}

/// The errno for a codec error.
pub(crate) fn insn(e: InsnError) -> Error {
    match e {
        InsnError::Unsupported => code(bindings::EOPNOTSUPP),
        InsnError::OutOfRange => code(bindings::ERANGE),
        InsnError::Misaligned => outside_text(),
        InsnError::LengthMismatch | InsnError::Truncated => wrong_size(),
    }
}

/// `EMSGSIZE`: the instruction's size does not match the site.
pub(crate) fn wrong_size() -> Error {
    code(bindings::EMSGSIZE)
}

/// `EILSEQ`: the new instruction is the guard itself.
pub(crate) fn guard_collision() -> Error {
    code(bindings::EILSEQ)
}

/// `EEXIST`: the site is already in this batch.
pub(crate) fn duplicate() -> Error {
    code(bindings::EEXIST)
}

/// `EBUSY`: another batch in flight owns the site.
pub(crate) fn busy() -> Error {
    code(bindings::EBUSY)
}

/// `ENODATA`: nothing to commit.
pub(crate) fn empty() -> Error {
    code(bindings::ENODATA)
}

/// `E2BIG`: the batch is full.
pub(crate) fn too_big() -> Error {
    code(bindings::E2BIG)
}

/// `EALREADY`: the batch was already committed.
pub(crate) fn already() -> Error {
    code(bindings::EALREADY)
}

/// `ENOSPC`: too many batches in flight.
pub(crate) fn too_many_batches() -> Error {
    code(bindings::ENOSPC)
}

/// `EIO`: the site no longer holds the instruction the registry says it does.
pub(crate) fn text_changed() -> Error {
    code(bindings::EIO)
}

/// `ENODEV`: the module owning the site is going away.
pub(crate) fn module_gone() -> Error {
    code(bindings::ENODEV)
}

/// `ENOSYS`: the kernel lacks the patch series.
pub(crate) fn no_series() -> Error {
    code(bindings::ENOSYS)
}
