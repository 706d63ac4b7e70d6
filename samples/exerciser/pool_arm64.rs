// SPDX-License-Identifier: GPL-2.0

//! The arm64 site pools: functions laid out at a fixed 32-byte stride, each with one site.
//!
//! Every function is called as `extern "C" fn(hits: *mut u64) -> u32` and returns which
//! instruction its site executed: 0 for the `off` one, its index in the pool plus 1 for the `on`
//! one, so that a CPU sent to another function's taken path (a trap handler emulating the wrong
//! site's instruction) is told apart. Call sites return 0 and report through the trampoline
//! instead, which increments `hits[function index]`.
//!
//! `MOVZ W0, #imm` is spelled as its encoding (`0x52800000 | imm << 5`) because the immediate is
//! an assembler expression over the `.rept` counter.
//!
//! - `b`: `NOP` (off) / `B` to the taken path (on). Static-key style.
//! - `ret`: `NOP` / `RET`, an early return after `mov w0, #index + 1`. `RET` is outside the
//!   instructions the architecture allows to change under execution, so the engine changes these
//!   sites with every other CPU parked (kernel/plan.rs): they are never guarded.
//! - `bl`: ftrace's patchable entry. The first instruction is a `NOP` the module turns into
//!   `MOV X9, X30` once at load, before anything runs it (a `mov` is not safe to change while
//!   other CPUs execute it); the second is `NOP` / `BL` to the trampoline.

use super::engine_api::{self, Op};
use super::pool::{Pool, PoolKind};
use kernel::prelude::*;

/// Functions in the `b` pool: more than the engine's batch limit (4096) by design.
pub(crate) const B: usize = 4160;
/// Functions in each of the other pools.
pub(crate) const SMALL: usize = 256;

core::arch::global_asm!(
    ".pushsection .text, \"ax\"",
    ".balign 32",
    ".globl textpoke_ex_b",
    "textpoke_ex_b:",
    ".set textpoke_ex_i, 0",
    ".rept {b}",
    ".balign 32",
    "nop",
    "mov w0, #0",
    "ret",
    ".balign 16",
    ".inst 0x52800000 | ((textpoke_ex_i + 1) << 5)",
    "ret",
    ".set textpoke_ex_i, textpoke_ex_i + 1",
    ".endr",
    ".balign 32",
    ".globl textpoke_ex_ret",
    "textpoke_ex_ret:",
    ".set textpoke_ex_i, 0",
    ".rept {small}",
    ".balign 32",
    ".inst 0x52800000 | ((textpoke_ex_i + 1) << 5)",
    "nop",
    "mov w0, #0",
    "ret",
    ".set textpoke_ex_i, textpoke_ex_i + 1",
    ".endr",
    ".balign 32",
    ".globl textpoke_ex_bl",
    "textpoke_ex_bl:",
    ".rept {small}",
    ".balign 32",
    "nop",
    "nop",
    "mov w0, #0",
    "ret",
    ".endr",
    // The trampoline: entered by the `BL` at function + 4 with x30 = function + 8 and x9 = the
    // function's own return address (the `MOV X9, X30` prologue). Counts the call in the
    // caller's `hits` array (x0) at the function's index and in the array's last slot, the
    // total, then returns into the function with x30 restored. Every register but x9 (the
    // prologue's scratch) and the flags survive.
    ".balign 32",
    ".globl textpoke_ex_tramp",
    "textpoke_ex_tramp:",
    "stp x10, x11, [sp, #-16]!",
    "adr x10, textpoke_ex_bl",
    "sub x11, x30, x10",
    "lsr x11, x11, #5",
    "ldr x10, [x0, x11, lsl #3]",
    "add x10, x10, #1",
    "str x10, [x0, x11, lsl #3]",
    "ldr x10, [x0, #{total}]",
    "add x10, x10, #1",
    "str x10, [x0, #{total}]",
    "ldp x10, x11, [sp], #16",
    // Swap x9 and x30 without a scratch register, then return to the function body.
    "eor x9, x9, x30",
    "eor x30, x9, x30",
    "eor x9, x9, x30",
    "ret x9",
    ".popsection",
    b = const B,
    small = const SMALL,
    total = const 8 * SMALL,
);

extern "C" {
    static textpoke_ex_b: [u8; 0];
    static textpoke_ex_ret: [u8; 0];
    static textpoke_ex_bl: [u8; 0];
    static textpoke_ex_tramp: [u8; 0];
}

/// The trampoline call sites call.
pub(crate) fn trampoline() -> u64 {
    (&raw const textpoke_ex_tramp) as usize as u64
}

/// Encodes the `on` instruction of the `ret` site at `addr` into `on`: `RET`.
pub(crate) fn encode_ret(addr: u64, on: &mut [u8]) -> Result {
    engine_api::encode(Op::Ret, addr, 0, on)
}

/// Every pool, in address order. The `bl` pool appears twice: its prologue sites, then its
/// call sites.
pub(crate) fn pools() -> [Pool; 4] {
    let base = |p: *const [u8; 0]| p as usize as u64;
    [
        Pool {
            kind: PoolKind::Branch,
            base: base(&raw const textpoke_ex_b),
            count: B,
            site_offset: 0,
            len: 4,
            taken_offset: 16,
        },
        Pool {
            kind: PoolKind::Ret,
            base: base(&raw const textpoke_ex_ret),
            count: SMALL,
            site_offset: 4,
            len: 4,
            taken_offset: 0,
        },
        Pool {
            kind: PoolKind::Prologue,
            base: base(&raw const textpoke_ex_bl),
            count: SMALL,
            site_offset: 0,
            len: 4,
            taken_offset: 0,
        },
        Pool {
            kind: PoolKind::Call,
            base: base(&raw const textpoke_ex_bl),
            count: SMALL,
            site_offset: 4,
            len: 4,
            taken_offset: 0,
        },
    ]
}
