// SPDX-License-Identifier: GPL-2.0

//! The x86 exports of the patch series (patch 0003).

use crate::series::{resolve, Resolver};
use kernel::ffi::c_void;

/// `text_poke(addr, opcode, len)` (arch/x86/include/asm/text-patching.h).
type TextPoke = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> *mut c_void;

/// The x86 functions textpoke needs from the patch series.
pub(crate) struct Series {
    /// `text_poke()`: writes through a temporary mm.
    pub(crate) text_poke: TextPoke,
}

impl Series {
    /// Resolves them; `None` if any is missing (recorded in `r`).
    pub(crate) fn resolve(r: &mut Resolver) -> Option<Self> {
        Some(Self {
            text_poke: resolve!(r, "text_poke", TextPoke)?,
        })
    }
}
