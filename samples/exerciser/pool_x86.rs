// SPDX-License-Identifier: GPL-2.0

//! The x86-64 site pools: functions laid out at a fixed 32-byte stride, each with one site.
//!
//! Every function is called as `extern "C" fn(hits: *mut u64) -> u32` and returns which
//! instruction its site executed: 0 for the `off` one, its index in the pool plus 1 for the `on`
//! one, so that a CPU sent to another function's taken path (a trap handler emulating the wrong
//! site's instruction) is told apart. Call sites return 0 and report through the trampoline
//! instead, which increments `hits[function index]`.
//!
//! - `jmp32`: `NOP5` (off) / `JMP rel32` to the taken path (on). Static-key style.
//! - `jmp8`: `NOP2` / `JMP rel8`. Static-key style, short form.
//! - `ret`: `NOP5` / `RET` padded with `INT3`, an early return after `mov eax, index + 1`; with
//!   return thunks, `NOP5` / `JMP` to the function's own `RET` ([`encode_ret`]).
//! - `call`: `NOP5` / `CALL` to the trampoline at the function's entry. ftrace style.
//!
//! `mov eax, imm32` is spelled as its encoding (`b8` and the immediate) because the immediate
//! is an assembler expression over the `.rept` counter.
//!
//! With indirect-branch tracking (`CONFIG_X86_KERNEL_IBT`) every function, being called through
//! a pointer, starts with `ENDBR64` and everything after it moves down by [`ENTRY`], as in the
//! kernel's own functions (whose ftrace site is at +4 then). Taken paths are reached by direct
//! jumps only and need none. objtool does not seal these ENDBRs (only those at a symbol's start
//! that nothing references, and the pools' symbols are referenced).

use super::engine_api::{self, Op};
use super::pool::{Pool, PoolKind};
use kernel::prelude::*;

/// Functions per pool. `jmp32` exceeds the engine's batch limit (4096) by design.
pub(crate) const JMP32: usize = 4160;
/// Functions in each of the other pools.
pub(crate) const SMALL: usize = 256;
/// Where a function's body starts: after its `ENDBR64` when the kernel has IBT.
const ENTRY: u64 = if cfg!(CONFIG_X86_KERNEL_IBT) { 4 } else { 0 };

// Each pool is one function symbol as far as the object file goes. objtool cannot follow a
// jump that exists only once patched, so it would call the taken paths unreachable: the pools
// are listed as non-standard, which makes objtool skip them (include/linux/objtool.h).
// `textpoke_ex_entry` starts each function: `ENDBR64` with IBT, nothing without.
core::arch::global_asm!(
    // A bare RET, as the sites' neighbours must be exact instructions, marked as meant for
    // objtool (the kernel's ANNOTATE_RETPOLINE_SAFE), which a kernel with return thunks
    // otherwise refuses.
    ".macro textpoke_ex_ret_insn",
    "999:",
    ".pushsection .discard.retpoline_safe",
    ".long 999b",
    ".popsection",
    "ret",
    ".endm",
    ".macro textpoke_ex_entry",
    ".balign 32",
    ".if {ibt}",
    "endbr64",
    ".endif",
    ".endm",
    ".macro textpoke_ex_end name",
    ".type \\name, @function",
    ".size \\name, . - \\name",
    ".pushsection .discard.func_stack_frame_non_standard, \"aw\"",
    ".long \\name - .",
    ".popsection",
    ".endm",
    ".pushsection .text, \"ax\"",
    ".balign 32",
    ".globl textpoke_ex_jmp32",
    "textpoke_ex_jmp32:",
    ".set textpoke_ex_i, 0",
    ".rept {jmp32}",
    "textpoke_ex_entry",
    ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
    "xor eax, eax",
    "textpoke_ex_ret_insn",
    ".balign 16",
    ".byte 0xb8",
    ".long textpoke_ex_i + 1",
    "textpoke_ex_ret_insn",
    ".set textpoke_ex_i, textpoke_ex_i + 1",
    ".endr",
    "textpoke_ex_end textpoke_ex_jmp32",
    ".balign 32",
    ".globl textpoke_ex_jmp8",
    "textpoke_ex_jmp8:",
    ".set textpoke_ex_i, 0",
    ".rept {small}",
    "textpoke_ex_entry",
    ".byte 0x66, 0x90",
    "xor eax, eax",
    "textpoke_ex_ret_insn",
    ".balign 16",
    ".byte 0xb8",
    ".long textpoke_ex_i + 1",
    "textpoke_ex_ret_insn",
    ".set textpoke_ex_i, textpoke_ex_i + 1",
    ".endr",
    "textpoke_ex_end textpoke_ex_jmp8",
    ".balign 32",
    ".globl textpoke_ex_ret",
    "textpoke_ex_ret:",
    ".set textpoke_ex_i, 0",
    ".rept {small}",
    "textpoke_ex_entry",
    ".byte 0xb8",
    ".long textpoke_ex_i + 1",
    ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
    "xor eax, eax",
    "textpoke_ex_ret_insn",
    ".set textpoke_ex_i, textpoke_ex_i + 1",
    ".endr",
    "textpoke_ex_end textpoke_ex_ret",
    ".balign 32",
    ".globl textpoke_ex_call",
    "textpoke_ex_call:",
    ".rept {small}",
    "textpoke_ex_entry",
    ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
    "xor eax, eax",
    "textpoke_ex_ret_insn",
    ".endr",
    "textpoke_ex_end textpoke_ex_call",
    // The trampoline: counts the call in the caller's `hits` array (rdi, the function's own
    // first argument) at the index of the function that called it, and in the array's last
    // slot, the total; it preserves every register and the flags. The return address is the
    // function's site + 5. Only direct calls (the patched sites) reach it: no ENDBR, and
    // objtool is told so (ANNOTATE_NOENDBR, as its address is taken).
    ".balign 32",
    ".globl textpoke_ex_tramp",
    "textpoke_ex_tramp:",
    ".pushsection .discard.noendbr, \"a\"",
    ".long textpoke_ex_tramp",
    ".popsection",
    "pushfq",
    "push rax",
    "push rdx",
    "mov rax, [rsp + 24]",
    // Not `textpoke_ex_call + {call_return}` in one go: objtool --ibt would take that reference
    // to an instruction inside the pool for a function pointer missing its ENDBR.
    "lea rdx, [rip + textpoke_ex_call]",
    "sub rax, rdx",
    "sub rax, {call_return}",
    "shr rax, 5",
    "inc qword ptr [rdi + 8 * rax]",
    "inc qword ptr [rdi + {total}]",
    "pop rdx",
    "pop rax",
    "popfq",
    "textpoke_ex_ret_insn",
    ".type textpoke_ex_tramp, @function",
    ".size textpoke_ex_tramp, . - textpoke_ex_tramp",
    ".popsection",
    ".purgem textpoke_ex_end",
    ".purgem textpoke_ex_entry",
    ".purgem textpoke_ex_ret_insn",
    ibt = const ENTRY / 4,
    call_return = const ENTRY + 5,
    jmp32 = const JMP32,
    small = const SMALL,
    total = const 8 * SMALL,
);

extern "C" {
    static textpoke_ex_jmp32: [u8; 0];
    static textpoke_ex_jmp8: [u8; 0];
    static textpoke_ex_ret: [u8; 0];
    static textpoke_ex_call: [u8; 0];
    static textpoke_ex_tramp: [u8; 0];
}

/// The trampoline call sites call.
pub(crate) fn trampoline() -> u64 {
    (&raw const textpoke_ex_tramp) as usize as u64
}

/// Encodes the `on` instruction of the `ret` site at `addr` into `on`: `RET`, or, in a kernel
/// built to send every return through a return thunk (`CONFIG_MITIGATION_RETHUNK`), a `JMP` to
/// the function's own return, the `RET` after its `xor eax, eax` (2 bytes), which returns the
/// same. textpoke refuses a bare `RET` in such a kernel (`arch/x86/mod.rs`), and the kernel's own
/// `__x86_return_thunk` is only a placeholder until the kernel patches the returns that use it
/// (executed, it warns "Unpatched return thunk in use").
pub(crate) fn encode_ret(addr: u64, on: &mut [u8]) -> Result {
    #[cfg(CONFIG_MITIGATION_RETHUNK)]
    {
        engine_api::encode(Op::Jmp, addr, addr.wrapping_add(5 + 2), on)
    }
    #[cfg(not(CONFIG_MITIGATION_RETHUNK))]
    engine_api::encode(Op::Ret, addr, 0, on)
}

/// Every pool, in address order.
pub(crate) fn pools() -> [Pool; 4] {
    let base = |p: *const [u8; 0]| p as usize as u64;
    [
        Pool {
            kind: PoolKind::Branch,
            base: base(&raw const textpoke_ex_jmp32),
            count: JMP32,
            site_offset: ENTRY,
            len: 5,
            taken_offset: 16,
        },
        Pool {
            kind: PoolKind::ShortBranch,
            base: base(&raw const textpoke_ex_jmp8),
            count: SMALL,
            site_offset: ENTRY,
            len: 2,
            taken_offset: 16,
        },
        Pool {
            kind: PoolKind::Ret,
            base: base(&raw const textpoke_ex_ret),
            count: SMALL,
            site_offset: ENTRY + 5,
            len: 5,
            taken_offset: 0,
        },
        Pool {
            kind: PoolKind::Call,
            base: base(&raw const textpoke_ex_call),
            count: SMALL,
            site_offset: ENTRY,
            len: 5,
            taken_offset: 0,
        },
    ]
}
