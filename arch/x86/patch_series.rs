// SPDX-License-Identifier: GPL-2.0

//! The x86 exports of the patch series (patches 0003 and 0009).

use crate::patch_series::{resolve, SymbolResolver};
use kernel::ffi::{c_int, c_uint, c_void};

/// `text_poke(addr, opcode, len)` (arch/x86/include/asm/text-patching.h).
type TextPoke = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> *mut c_void;

/// `struct text_poke_write` (arch/x86/include/asm/text-patching.h, patch 0009): one write of
/// `text_poke_many()`. arch/x86/helpers.c checks this layout against the header. Named as in C,
/// as `text_patcher_ops` is (rust/patch_series.rs says why: control-flow integrity).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy)]
pub(super) struct text_poke_write {
    /// `addr`: where.
    pub(super) addr: *mut c_void,
    /// `opcode`: the bytes.
    pub(super) opcode: *const c_void,
    /// `len`: how many.
    pub(super) len: usize,
}

// The mirror's layout, as arch/x86/helpers.c asserts it for `struct text_poke_write`.
kernel::static_assert!(core::mem::size_of::<text_poke_write>() == 24);
kernel::static_assert!(core::mem::offset_of!(text_poke_write, opcode) == 8);
kernel::static_assert!(core::mem::offset_of!(text_poke_write, len) == 16);

/// `text_poke_many(writes, nr)` (patch 0009).
type TextPokeMany = unsafe extern "C" fn(*const text_poke_write, c_uint) -> c_int;

/// The x86 functions textpoke needs from the patch series.
pub(crate) struct ArchExports {
    /// `text_poke()`: writes through a temporary mm.
    pub(crate) text_poke: TextPoke,
    /// `text_poke_many()`: many writes per temporary-mm session.
    pub(super) text_poke_many: TextPokeMany,
}

impl ArchExports {
    /// Resolves them; `None` if any is missing (recorded in `r`).
    pub(crate) fn resolve(r: &mut SymbolResolver) -> Option<Self> {
        Some(Self {
            text_poke: resolve!(r, "text_poke", TextPoke)?,
            text_poke_many: resolve!(r, "text_poke_many", TextPokeMany)?,
        })
    }
}
