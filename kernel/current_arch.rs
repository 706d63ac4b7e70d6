// SPDX-License-Identifier: GPL-2.0

//! The architecture this build is for: the one [`Arch`] implementation `kernel/textpoke.rs`
//! picks (`arch/<arch>/mod.rs`), and its instruction type. The engine names the arch only
//! through these; `arch/` never imports this module.

use crate::arch::Arch;

pub(crate) use crate::arch_impl::CurrentArch;

/// The current arch's accepted instruction.
pub(crate) type Insn = <CurrentArch as Arch>::Insn;
