// SPDX-License-Identifier: GPL-2.0

//! x86-64 instruction codec and INT3 emulation for text pokes.
//!
//! A poke overwrites the first byte of a site with the guard [`GUARD`] (`INT3`), syncs all CPUs,
//! writes the new instruction's tail, syncs again and finally replaces the guard with the new
//! instruction's first byte. A CPU that hits the guard in the meantime traps, and the trap handler
//! calls [`Insn::emulate`] so that the CPU behaves as if it had executed the NEW instruction.
//!
//! Only the few instructions the kernel itself patches are supported, with exactly the encodings
//! Linux uses on x86-64, so that a decoded site can be trusted to be one of them. The file is
//! compiled both into the kernel module and into the host crate `textpoke-core`, so it uses only
//! `core`, never allocates and never panics; all address arithmetic wraps, as the CPU's does.
//!
//! The decoder also understands `INT3`, which is no instruction a poke may write or find at a
//! site. What the engine patches goes through [`Listed::accept`] instead: it accepts exactly the
//! instructions `textpoke.h` lists (NOP2, NOP5, `JMP rel8`, `JMP rel32`, `CALL rel32`, `RET`
//! padded with `INT3`), and the [`Listed`] it returns is the only thing the trap handler needs to
//! emulate, infallibly.

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used
)]

use crate::insn::{InsnBytes, InsnError, MAX_INSN_LEN};

/// The guard byte, `INT3`, written over the first byte of a site while it is being patched.
pub const GUARD: u8 = 0xcc;

/// The kernel's `BYTES_NOP2` on x86-64: `xchg ax, ax` with an operand-size prefix.
const NOP2_BYTES: [u8; 2] = [0x66, 0x90];

/// The kernel's `BYTES_NOP5` on x86-64: `nopl 0x0(%rax,%rax,1)`.
const NOP5_BYTES: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];

/// Opcode of `JMP rel8`.
const JMP_REL8: u8 = 0xeb;

/// Opcode of `JMP rel32`.
const JMP_REL32: u8 = 0xe9;

/// Opcode of `CALL rel32`.
const CALL_REL32: u8 = 0xe8;

/// Opcode of the near `RET`.
const RET: u8 = 0xc3;

/// Length of `JMP rel8`.
const REL8_LEN: usize = 2;

/// Length of `JMP rel32` and `CALL rel32`.
const REL32_LEN: usize = 5;

/// Size of one stack slot, the amount `CALL` pushes and `RET` pops.
const WORD: u64 = 8;

/// One x86-64 instruction that a text poke may write or find at a site.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Insn {
    /// `INT3` (`cc`), the guard: encodable and decodable, but never emulated.
    Int3,
    /// The two-byte NOP `66 90`.
    Nop2,
    /// The five-byte NOP `0f 1f 44 00 00`.
    Nop5,
    /// `JMP rel8` (`eb rel8`).
    JmpRel8 {
        /// Absolute address the jump goes to.
        target: u64,
    },
    /// `JMP rel32` (`e9 rel32`).
    JmpRel32 {
        /// Absolute address the jump goes to.
        target: u64,
    },
    /// `CALL rel32` (`e8 rel32`).
    CallRel32 {
        /// Absolute address of the called function.
        target: u64,
    },
    /// `RET` (`c3`) followed by `len - 1` `INT3` padding bytes.
    ///
    /// Upstream `text_poke_bp()` pads a `RET` with `INT3` up to the site's length, so that for
    /// example a 5-byte call site can become an early return; the padding is never executed.
    Ret {
        /// Total length in bytes, padding included: `1..=MAX_INSN_LEN`.
        len: u8,
    },
}

/// The kind of an [`Insn`] without its operands, for statistics.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Kind {
    /// [`Insn::Int3`].
    Int3,
    /// [`Insn::Nop2`].
    Nop2,
    /// [`Insn::Nop5`].
    Nop5,
    /// [`Insn::JmpRel8`].
    JmpRel8,
    /// [`Insn::JmpRel32`].
    JmpRel32,
    /// [`Insn::CallRel32`].
    CallRel32,
    /// [`Insn::Ret`].
    Ret,
}

impl Kind {
    /// Every kind, in declaration order, so that `kind as usize` indexes this array.
    pub const ALL: [Kind; 7] = [
        Kind::Int3,
        Kind::Nop2,
        Kind::Nop5,
        Kind::JmpRel8,
        Kind::JmpRel32,
        Kind::CallRel32,
        Kind::Ret,
    ];

    /// A short lowercase name for statistics and log lines.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Int3 => "int3",
            Kind::Nop2 => "nop2",
            Kind::Nop5 => "nop5",
            Kind::JmpRel8 => "jmp_rel8",
            Kind::JmpRel32 => "jmp_rel32",
            Kind::CallRel32 => "call_rel32",
            Kind::Ret => "ret",
        }
    }

    /// Whether instructions of this kind may be written on a kernel that sends every return
    /// through `x86_return_thunk` (`return_thunks`, the kernel's `CONFIG_MITIGATION_RETHUNK`)
    /// or on one that does not.
    ///
    /// With return thunks, objtool rewrites each compiled `RET` into a `JMP` to the thunk and
    /// the kernel's own pokers write that `JMP` where they would write a `RET`: a bare `RET`
    /// written by textpoke would bypass the mitigation, so `RET` is not listed there. Every
    /// other kind is listed on both.
    pub const fn listed_with(self, return_thunks: bool) -> bool {
        !(return_thunks && matches!(self, Kind::Ret))
    }
}

/// The registers of an interrupted CPU that emulation reads and writes.
pub trait Regs {
    /// The instruction pointer.
    fn ip(&self) -> u64;
    /// Sets the instruction pointer the CPU resumes at.
    fn set_ip(&mut self, ip: u64);
    /// The stack pointer.
    fn sp(&self) -> u64;
    /// Sets the stack pointer the CPU resumes with.
    fn set_sp(&mut self, sp: u64);
}

/// The interrupted context's stack, which `CALL` and `RET` emulation access.
pub trait Stack {
    /// Reads the 64-bit word at `addr`.
    fn read_u64(&self, addr: u64) -> u64;
    /// Writes the 64-bit word `value` at `addr`.
    fn write_u64(&mut self, addr: u64, value: u64);
}

impl Insn {
    /// The instruction's length in bytes.
    ///
    /// For a [`Insn::Ret`] with an invalid `len` this is that `len`, which [`Insn::encode`]
    /// rejects.
    #[expect(clippy::len_without_is_empty, reason = "an instruction is never empty")]
    pub const fn len(&self) -> usize {
        match self {
            Insn::Int3 => 1,
            Insn::Nop2 => NOP2_BYTES.len(),
            Insn::Nop5 => NOP5_BYTES.len(),
            Insn::JmpRel8 { .. } => REL8_LEN,
            Insn::JmpRel32 { .. } | Insn::CallRel32 { .. } => REL32_LEN,
            Insn::Ret { len } => *len as usize,
        }
    }

    /// The instruction's kind, without operands.
    pub fn kind(&self) -> Kind {
        match self {
            Insn::Int3 => Kind::Int3,
            Insn::Nop2 => Kind::Nop2,
            Insn::Nop5 => Kind::Nop5,
            Insn::JmpRel8 { .. } => Kind::JmpRel8,
            Insn::JmpRel32 { .. } => Kind::JmpRel32,
            Insn::CallRel32 { .. } => Kind::CallRel32,
            Insn::Ret { .. } => Kind::Ret,
        }
    }

    /// Encodes the instruction as it must appear in memory at address `site`.
    ///
    /// Fails with [`InsnError::OutOfRange`] if a branch displacement does not fit its field and
    /// with [`InsnError::Unsupported`] for a [`Insn::Ret`] whose length is 0 or above
    /// [`MAX_INSN_LEN`].
    pub fn encode(&self, site: u64) -> Result<InsnBytes, InsnError> {
        match *self {
            Insn::Int3 => InsnBytes::new(&[GUARD]),
            Insn::Nop2 => InsnBytes::new(&NOP2_BYTES),
            Insn::Nop5 => InsnBytes::new(&NOP5_BYTES),
            Insn::JmpRel8 { target } => {
                let rel = i8::try_from(displacement(site, REL8_LEN, target))
                    .map_err(|_| InsnError::OutOfRange)?;
                let [rel] = rel.to_le_bytes();
                InsnBytes::new(&[JMP_REL8, rel])
            }
            Insn::JmpRel32 { target } => encode_rel32(JMP_REL32, site, target),
            Insn::CallRel32 { target } => encode_rel32(CALL_REL32, site, target),
            Insn::Ret { len } => {
                let len = usize::from(len);
                if len == 0 || len > MAX_INSN_LEN {
                    return Err(InsnError::Unsupported);
                }
                let mut padded = [GUARD; MAX_INSN_LEN];
                if let Some(first) = padded.first_mut() {
                    *first = RET;
                }
                InsnBytes::new(padded.get(..len).ok_or(InsnError::Unsupported)?)
            }
        }
    }

    /// Decodes `bytes`, found at address `site`, as exactly one instruction.
    ///
    /// Fails with [`InsnError::Truncated`] if `bytes` is empty or a strict prefix of a supported
    /// instruction, with [`InsnError::LengthMismatch`] if the instruction is shorter than `bytes`
    /// (a `RET` followed only by `INT3` padding is a [`Insn::Ret`] of the whole length instead),
    /// and with [`InsnError::Unsupported`] if `bytes` does not start with a supported instruction.
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    pub fn decode(site: u64, bytes: &[u8]) -> Result<Insn, InsnError> {
        let (&opcode, rest) = bytes.split_first().ok_or(InsnError::Truncated)?;
        match opcode {
            GUARD => exact_len(bytes, 1).map(|()| Insn::Int3),
            RET => {
                // Anything but `INT3` after the `RET` is a second instruction, not padding.
                if bytes.len() > MAX_INSN_LEN || rest.iter().any(|&b| b != GUARD) {
                    return Err(InsnError::LengthMismatch);
                }
                let len = u8::try_from(bytes.len()).map_err(|_| InsnError::LengthMismatch)?;
                Ok(Insn::Ret { len })
            }
            JMP_REL8 => {
                exact_len(bytes, REL8_LEN)?;
                let rel = i8::from_le_bytes([*rest.first().ok_or(InsnError::Truncated)?]);
                Ok(Insn::JmpRel8 {
                    target: branch_target(site, REL8_LEN, i64::from(rel)),
                })
            }
            JMP_REL32 => Ok(Insn::JmpRel32 {
                target: decode_rel32(site, bytes)?,
            }),
            CALL_REL32 => Ok(Insn::CallRel32 {
                target: decode_rel32(site, bytes)?,
            }),
            _ => {
                if matches_fixed(bytes, &NOP2_BYTES)? {
                    Ok(Insn::Nop2)
                } else if matches_fixed(bytes, &NOP5_BYTES)? {
                    Ok(Insn::Nop5)
                } else {
                    Err(InsnError::Unsupported)
                }
            }
        }
    }

    /// Makes the CPU whose registers are `regs` behave as if it had executed this instruction at
    /// address `site`.
    ///
    /// This is what the `INT3` trap handler does for a CPU that hit the guard at `site` (so
    /// `regs.ip()` is `site + 1`) while this instruction was being written there. It fails, and
    /// leaves `regs` and `stack` untouched, if the instruction cannot be encoded at `site` (see
    /// [`Insn::encode`]) or is [`Insn::Int3`]: that is someone else's breakpoint, which the kernel
    /// must deliver rather than skip.
    ///
    /// [`Listed::emulate`] is the infallible form of this for instructions accepted at their site.
    pub fn emulate(
        &self,
        site: u64,
        regs: &mut impl Regs,
        stack: &mut impl Stack,
    ) -> Result<(), InsnError> {
        // Only an instruction that can exist at `site` has well-defined effects.
        self.encode(site)?;
        ListedInsn::listed(*self)
            .ok_or(InsnError::Unsupported)?
            .emulate(site, regs, stack);
        Ok(())
    }
}

/// An instruction `textpoke.h` lists for x86-64: an [`Insn`] without [`Insn::Int3`].
///
/// It is what a [`Listed`] holds, so that emulating one has no failure case for the compiler to
/// see, let alone for a CPU to hit.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum ListedInsn {
    Nop2,
    Nop5,
    JmpRel8 { target: u64 },
    JmpRel32 { target: u64 },
    CallRel32 { target: u64 },
    Ret { len: u8 },
}

impl ListedInsn {
    /// The listed instruction `insn` is, or `None` if the header does not list it.
    ///
    /// A [`Insn::Ret`] is listed whatever its `len`: the callers only pass decoded or encodable
    /// ones, whose `len` is valid.
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    const fn listed(insn: Insn) -> Option<ListedInsn> {
        // No wildcard: an instruction added to the decoder must be classified here.
        match insn {
            Insn::Int3 => None,
            Insn::Nop2 => Some(ListedInsn::Nop2),
            Insn::Nop5 => Some(ListedInsn::Nop5),
            Insn::JmpRel8 { target } => Some(ListedInsn::JmpRel8 { target }),
            Insn::JmpRel32 { target } => Some(ListedInsn::JmpRel32 { target }),
            Insn::CallRel32 { target } => Some(ListedInsn::CallRel32 { target }),
            Insn::Ret { len } => Some(ListedInsn::Ret { len }),
        }
    }

    /// The instruction as the codec's [`Insn`].
    const fn insn(self) -> Insn {
        match self {
            ListedInsn::Nop2 => Insn::Nop2,
            ListedInsn::Nop5 => Insn::Nop5,
            ListedInsn::JmpRel8 { target } => Insn::JmpRel8 { target },
            ListedInsn::JmpRel32 { target } => Insn::JmpRel32 { target },
            ListedInsn::CallRel32 { target } => Insn::CallRel32 { target },
            ListedInsn::Ret { len } => Insn::Ret { len },
        }
    }

    /// Makes `regs` and `stack` behave as if the CPU had executed this instruction at `site`.
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    #[inline(always)]
    fn emulate(self, site: u64, regs: &mut impl Regs, stack: &mut impl Stack) {
        match self {
            ListedInsn::Nop2 => regs.set_ip(end_of(site, NOP2_BYTES.len())),
            ListedInsn::Nop5 => regs.set_ip(end_of(site, NOP5_BYTES.len())),
            ListedInsn::JmpRel8 { target } | ListedInsn::JmpRel32 { target } => regs.set_ip(target),
            ListedInsn::CallRel32 { target } => {
                // The push below the interrupted stack pointer is safe: for an `INT3` from kernel
                // mode, the entry code (the X86_TRAP_BP case of `idtentry` in
                // arch/x86/entry/entry_64.S) copies the exception frame 6 words lower to "create
                // a 6-word gap to allow the int3 handler to emulate a call instruction", so the
                // pushed word cannot overwrite `pt_regs`. A trap emulates a single instruction,
                // so it pushes one word, well within the gap.
                let sp = regs.sp().wrapping_sub(WORD);
                stack.write_u64(sp, end_of(site, REL32_LEN));
                regs.set_sp(sp);
                regs.set_ip(target);
            }
            ListedInsn::Ret { .. } => {
                let sp = regs.sp();
                regs.set_ip(stack.read_u64(sp));
                regs.set_sp(sp.wrapping_add(WORD));
            }
        }
    }
}

/// An instruction that `textpoke.h` lists, accepted at the site it was found at or is to be
/// written to.
///
/// Only [`Listed::accept`] builds one, and it accepts exactly the listed instructions, with the
/// encodings Linux uses: NOP2 (`66 90`), NOP5 (`0f 1f 44 00 00`), `JMP rel8`, `JMP rel32`,
/// `CALL rel32`, and `RET` padded with `INT3` to 1 to [`MAX_INSN_LEN`] bytes. The engine calls it
/// both for a site's current instruction when the site is registered and for each new
/// instruction a batch adds, and keeps the result for the trap handler. A guard hit whose pending
/// instruction cannot be emulated is therefore impossible by construction: [`Listed::emulate`]
/// has no error to return, because a `Listed` never holds an `INT3` (its variants exclude it),
/// and its branch target or `RET` length was decoded from bytes at its own site, so it encodes
/// there.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Listed {
    /// The instruction's address.
    site: u64,
    /// The instruction, as decoded from its bytes at `site`.
    op: ListedInsn,
}

impl Listed {
    /// Accepts `bytes`, found at or to be written to address `site`, if they are exactly one of
    /// the instructions `textpoke.h` lists.
    ///
    /// Fails with [`InsnError::Truncated`] if `bytes` is empty or a strict prefix of a listed
    /// instruction, with [`InsnError::LengthMismatch`] if `bytes` starts with a listed
    /// instruction but is longer (a `RET` followed only by `INT3` padding is a padded `RET`
    /// instead), and with [`InsnError::Unsupported`] for everything else: anything starting with
    /// `INT3` (the guard, or someone's breakpoint), other NOP encodings, prefixed branches, and
    /// anything else the decoder understands.
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    pub fn accept(site: u64, bytes: &[u8]) -> Result<Listed, InsnError> {
        // No listed instruction starts with `INT3`, so bytes that do are no listed instruction
        // of another length either.
        if bytes.first() == Some(&GUARD) {
            return Err(InsnError::Unsupported);
        }
        let op = ListedInsn::listed(Insn::decode(site, bytes)?).ok_or(InsnError::Unsupported)?;
        // INVARIANT: `op` is what `bytes` are at `site` (the decoder reads exactly the encodings
        // `Insn::encode` writes), so it encodes at `site` and emulating it there is what the CPU
        // would do executing `bytes` there.
        Ok(Listed { site, op })
    }

    /// The address the instruction was accepted at.
    pub const fn site(&self) -> u64 {
        self.site
    }

    /// The instruction, as the codec's [`Insn`] (never [`Insn::Int3`]).
    pub const fn insn(&self) -> Insn {
        self.op.insn()
    }

    /// The instruction's kind (never [`Kind::Int3`]).
    pub fn kind(&self) -> Kind {
        self.insn().kind()
    }

    /// The instruction's length in bytes, `RET` padding included.
    #[expect(clippy::len_without_is_empty, reason = "an instruction is never empty")]
    pub const fn len(&self) -> usize {
        self.insn().len()
    }

    /// Makes the CPU whose registers are `regs` behave as if it had executed this instruction at
    /// its site, with `stack` its stack.
    ///
    /// This is what the `INT3` trap handler does for a CPU that hit the guard at
    /// [`Listed::site`] (so `regs.ip()` is the site plus 1) while this instruction was being
    /// written there; it has the effects of [`Insn::emulate`], which cannot fail here: see
    /// [`Listed`].
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    #[inline(always)]
    pub fn emulate(&self, regs: &mut impl Regs, stack: &mut impl Stack) {
        self.op.emulate(self.site, regs, stack);
    }
}

/// The address right after an instruction of `len` bytes at `site`.
// Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
#[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
fn end_of(site: u64, len: usize) -> u64 {
    // `len` is at most `MAX_INSN_LEN`, so the conversion cannot truncate.
    site.wrapping_add(len as u64)
}

/// The displacement from the end of an instruction of `len` bytes at `site` to `target`.
fn displacement(site: u64, len: usize, target: u64) -> i64 {
    // Two's complement: a target below the instruction's end yields a negative displacement.
    target.wrapping_sub(end_of(site, len)) as i64
}

/// The target of a branch of `len` bytes at `site` with displacement `rel`.
// Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
#[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
fn branch_target(site: u64, len: usize, rel: i64) -> u64 {
    end_of(site, len).wrapping_add(rel as u64)
}

/// Encodes a 5-byte `opcode rel32` branch from `site` to `target`.
fn encode_rel32(opcode: u8, site: u64, target: u64) -> Result<InsnBytes, InsnError> {
    let rel =
        i32::try_from(displacement(site, REL32_LEN, target)).map_err(|_| InsnError::OutOfRange)?;
    let [r0, r1, r2, r3] = rel.to_le_bytes();
    InsnBytes::new(&[opcode, r0, r1, r2, r3])
}

/// Decodes the target of the 5-byte `opcode rel32` branch `bytes` at `site`.
// Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
#[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
fn decode_rel32(site: u64, bytes: &[u8]) -> Result<u64, InsnError> {
    exact_len(bytes, REL32_LEN)?;
    let rel: [u8; 4] = bytes
        .get(1..REL32_LEN)
        .and_then(|rel| rel.try_into().ok())
        .ok_or(InsnError::Truncated)?;
    Ok(branch_target(
        site,
        REL32_LEN,
        i64::from(i32::from_le_bytes(rel)),
    ))
}

/// Checks that an instruction of `len` bytes fills `bytes` exactly.
// Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
#[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
fn exact_len(bytes: &[u8], len: usize) -> Result<(), InsnError> {
    match bytes.len() {
        n if n < len => Err(InsnError::Truncated),
        n if n > len => Err(InsnError::LengthMismatch),
        _ => Ok(()),
    }
}

/// Tells whether `bytes` is the fixed instruction `pattern`.
///
/// Returns `Ok(false)` if the bytes differ from the pattern where both have bytes, and otherwise
/// the error of [`exact_len`], so that a strict prefix of the pattern is [`InsnError::Truncated`].
// Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
#[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
fn matches_fixed(bytes: &[u8], pattern: &[u8]) -> Result<bool, InsnError> {
    // An index loop rather than an iterator adapter or a slice comparison: on the trap path
    // nothing may call out of the kprobe-refused code (core's generic iterator functions, or
    // memcmp).
    for i in 0..bytes.len().min(pattern.len()) {
        if bytes.get(i) != pattern.get(i) {
            return Ok(false);
        }
    }
    exact_len(bytes, pattern.len()).map(|()| true)
}
