// SPDX-License-Identifier: GPL-2.0

//! The kernel errors of the refusals in [`crate::refusal`], the canonical table.
//!
//! Loading is the one refusal outside it: a kernel without the patch series gets `ENOSYS`
//! (`rust/patch_series.rs`).

use crate::insn::InsnError;
use crate::refusal::{self, Refusal};
use kernel::{bindings, error::Error, prelude::*};

// The table's numbers are the kernel's own.
static_assert!(refusal::NOT_REGISTERED.errno == bindings::ENOENT as i32);
static_assert!(refusal::INSIDE_SITE.errno == bindings::EADDRINUSE as i32);
static_assert!(refusal::ENGINE_TEXT.errno == bindings::EPERM as i32);
static_assert!(refusal::OUTSIDE_TEXT.errno == bindings::EFAULT as i32);
static_assert!(refusal::NOT_OWNER.errno == bindings::EACCES as i32);
static_assert!(refusal::UNSUPPORTED.errno == bindings::EOPNOTSUPP as i32);
static_assert!(refusal::WRONG_SIZE.errno == bindings::EMSGSIZE as i32);
static_assert!(refusal::OUT_OF_RANGE.errno == bindings::ERANGE as i32);
static_assert!(refusal::GUARD_COLLISION.errno == bindings::EILSEQ as i32);
static_assert!(refusal::DUPLICATE.errno == bindings::EEXIST as i32);
static_assert!(refusal::BUSY.errno == bindings::EBUSY as i32);
static_assert!(refusal::OTHER_PATCHER.errno == bindings::ETXTBSY as i32);
static_assert!(refusal::EMPTY.errno == bindings::ENODATA as i32);
static_assert!(refusal::TOO_BIG.errno == bindings::E2BIG as i32);
static_assert!(refusal::ALREADY.errno == bindings::EALREADY as i32);
static_assert!(refusal::TOO_MANY_BATCHES.errno == bindings::ENOSPC as i32);
static_assert!(refusal::TEXT_CHANGED.errno == bindings::EIO as i32);
static_assert!(refusal::MODULE_GONE.errno == bindings::ENODEV as i32);
static_assert!(refusal::BAD_CALL.errno == bindings::EINVAL as i32);

fn of(r: Refusal) -> Error {
    Error::from_errno(-r.errno)
}

/// `ENOENT`: the address is not a registered site.
pub(crate) fn not_registered() -> Error {
    of(refusal::NOT_REGISTERED)
}

/// `EADDRINUSE`: the address is inside, or overlaps, a registered site.
pub(crate) fn inside_site() -> Error {
    of(refusal::INSIDE_SITE)
}

/// `EPERM`: the site is in textpoke's own text.
pub(crate) fn engine_text() -> Error {
    of(refusal::ENGINE_TEXT)
}

/// `EFAULT`: the site is outside its module's text, or misaligned.
pub(crate) fn outside_text() -> Error {
    of(refusal::OUTSIDE_TEXT)
}

/// `EACCES`: the site was registered by another module.
pub(crate) fn not_owner() -> Error {
    of(refusal::NOT_OWNER)
}

/// The errno for a codec error.
pub(crate) fn insn(e: InsnError) -> Error {
    match e {
        InsnError::Unsupported => of(refusal::UNSUPPORTED),
        InsnError::OutOfRange => of(refusal::OUT_OF_RANGE),
        InsnError::Misaligned => outside_text(),
        InsnError::LengthMismatch | InsnError::Truncated => wrong_size(),
    }
}

/// `EMSGSIZE`: the instruction's size does not match the site.
pub(crate) fn wrong_size() -> Error {
    of(refusal::WRONG_SIZE)
}

/// `EILSEQ`: the new instruction is the guard itself.
pub(crate) fn guard_collision() -> Error {
    of(refusal::GUARD_COLLISION)
}

/// `EEXIST`: the site is already in this batch.
pub(crate) fn duplicate() -> Error {
    of(refusal::DUPLICATE)
}

/// `EBUSY`: another batch in flight owns the site.
pub(crate) fn busy() -> Error {
    of(refusal::BUSY)
}

/// `ETXTBSY`: another in-kernel patcher owns the site's text.
pub(crate) fn other_patcher() -> Error {
    of(refusal::OTHER_PATCHER)
}

/// `ENODATA`: nothing to commit.
pub(crate) fn empty() -> Error {
    of(refusal::EMPTY)
}

/// `E2BIG`: the batch is full.
pub(crate) fn too_big() -> Error {
    of(refusal::TOO_BIG)
}

/// `EALREADY`: the batch was already committed.
pub(crate) fn already() -> Error {
    of(refusal::ALREADY)
}

/// `ENOSPC`: too many batches committing at this moment.
pub(crate) fn too_many_batches() -> Error {
    of(refusal::TOO_MANY_BATCHES)
}

/// `EIO`: the site no longer holds the instruction the registry says it does.
pub(crate) fn text_changed() -> Error {
    of(refusal::TEXT_CHANGED)
}

/// `ENODEV`: the module owning the site is going away, or textpoke is.
pub(crate) fn module_gone() -> Error {
    of(refusal::MODULE_GONE)
}
