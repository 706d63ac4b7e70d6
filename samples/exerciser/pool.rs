// SPDX-License-Identifier: GPL-2.0

//! Site pools and the sites they hold, arch-neutral part.

use super::engine_api::{self, Op};
use crate::kernel_text;
use kernel::prelude::*;

#[cfg(CONFIG_ARM64)]
pub(crate) use super::pool_arm64::{encode_ret, pools, trampoline};
#[cfg(CONFIG_X86_64)]
pub(crate) use super::pool_x86::{encode_ret, pools, trampoline};

/// What a pool's sites are.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum PoolKind {
    /// Static-key style branch: x86 `NOP5`/`JMP rel32`, arm64 `NOP`/`B`.
    Branch,
    /// Static-key style short branch: x86 `NOP2`/`JMP rel8`.
    ShortBranch,
    /// Early return: `NOP` / `RET` (x86 with return thunks: a `JMP` to the function's `RET`).
    Ret,
    /// ftrace style call: x86 `NOP5`/`CALL`, arm64 `NOP`/`BL`, to the trampoline.
    Call,
    /// arm64 ftrace prologue: `NOP` / `MOV X9, X30`, changed once at load.
    Prologue,
}

impl PoolKind {
    /// The name `sites` shows, after the instruction the site switches to.
    pub(crate) fn name(self) -> &'static str {
        if cfg!(CONFIG_X86_64) {
            match self {
                Self::Branch => "jmp32",
                Self::ShortBranch => "jmp8",
                Self::Ret => "ret",
                Self::Call => "call",
                Self::Prologue => "prologue",
            }
        } else {
            match self {
                Self::Branch => "b",
                Self::ShortBranch => "b_short",
                Self::Ret => "ret",
                Self::Call => "bl",
                Self::Prologue => "mov_x9_x30",
            }
        }
    }
}

/// A run of functions at a fixed 32-byte stride, each with one site.
pub(crate) struct Pool {
    pub(crate) kind: PoolKind,
    pub(crate) base: u64,
    pub(crate) count: usize,
    /// Where the site is in each function.
    pub(crate) site_offset: u64,
    /// The site's length.
    pub(crate) len: usize,
    /// Where a branch site jumps to, in each function.
    pub(crate) taken_offset: u64,
}

/// Distance between two functions of a pool.
pub(crate) const STRIDE: u64 = 32;

/// One site.
#[derive(Clone, Copy)]
pub(crate) struct Site {
    pub(crate) kind: PoolKind,
    /// The function the site is in: what executors call.
    pub(crate) func: u64,
    /// Index of the function in its pool (the trampoline's `hits` index for call sites).
    pub(crate) index_in_pool: usize,
    pub(crate) addr: u64,
    pub(crate) len: usize,
    /// The instruction at load.
    pub(crate) off: [u8; 5],
    /// The instruction the site switches to.
    pub(crate) on: [u8; 5],
}

impl Site {
    /// The `off` instruction's bytes.
    pub(crate) fn off(&self) -> &[u8] {
        self.off.get(..self.len).unwrap_or(&[])
    }

    /// The `on` instruction's bytes.
    pub(crate) fn on(&self) -> &[u8] {
        self.on.get(..self.len).unwrap_or(&[])
    }
}

impl Pool {
    /// Builds site `i` of the pool, reading its `off` instruction from the text and encoding its
    /// `on` instruction with the engine's encoder.
    pub(crate) fn site(&self, i: usize) -> Result<Site> {
        let func = self.base.wrapping_add(STRIDE.wrapping_mul(i as u64));
        let addr = func.wrapping_add(self.site_offset);
        let mut site = Site {
            kind: self.kind,
            func,
            index_in_pool: i,
            addr,
            len: self.len,
            off: [0; 5],
            on: [0; 5],
        };
        kernel_text::read(addr, site.off.get_mut(..self.len).ok_or(EINVAL)?)?;
        let on = site.on.get_mut(..self.len).ok_or(EINVAL)?;
        match self.kind {
            PoolKind::Branch | PoolKind::ShortBranch => {
                engine_api::encode(Op::Jmp, addr, func.wrapping_add(self.taken_offset), on)?
            }
            PoolKind::Ret => encode_ret(addr, on)?,
            PoolKind::Call => engine_api::encode(Op::Call, addr, trampoline(), on)?,
            PoolKind::Prologue => engine_api::encode(Op::MovX9X30, addr, 0, on)?,
        }
        Ok(site)
    }
}
