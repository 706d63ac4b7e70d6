// SPDX-License-Identifier: GPL-2.0

//! arm64 instruction codec and BRK emulation for text pokes.
//!
//! A poke overwrites a site with the guard [`GUARD`] (`BRK #0x008`), syncs all CPUs, then writes
//! the new instruction. A CPU that hits the guard in the meantime traps, and the trap handler
//! calls [`Insn::emulate`] so that the CPU behaves as if it had executed the NEW instruction.
//!
//! Every A64 instruction is one little-endian 32-bit word at a 4-byte aligned address. Only the
//! few instructions the kernel itself patches are supported, so that a decoded site can be trusted
//! to be one of them. The file is compiled both into the kernel module and into the host crate
//! `textpoke-core`, so it uses only `core`, never allocates and never panics; all address
//! arithmetic wraps, as the CPU's does.
//!
//! The decoder also understands `BRK`, which is no instruction a poke may write or find at a site.
//! What the engine patches goes through [`Listed::accept`] instead: it accepts exactly the
//! instructions `textpoke.h` lists (`NOP`, `B`, `BL`, `MOV X9, X30`, `RET`), and the [`Listed`] it
//! returns is the only thing the trap handler needs to emulate, infallibly.

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used
)]

use crate::insn::{InsnBytes, InsnError};

/// The `BRK` immediate that textpoke's kernel patch reserves for text-poke guards.
pub const GUARD_BRK_IMM: u16 = 0x008;

/// The guard written over a site while it is being patched.
pub const GUARD: Insn = Insn::Brk { imm: GUARD_BRK_IMM };

/// [`GUARD`]'s encoding, for code that needs it as a constant.
pub const GUARD_WORD: u32 = BRK | ((GUARD_BRK_IMM as u32) << BRK_IMM_SHIFT);

/// Length in bytes of every A64 instruction.
pub const INSN_LEN: usize = 4;

/// `INSN_LEN` as an address increment.
const INSN_STEP: u64 = 4;

/// The address bits that must be clear in a 4-byte aligned address.
const ALIGN_MASK: u64 = 0b11;

/// `NOP` (`HINT #0`).
const NOP: u32 = 0xd503_201f;

/// `B` with a zero offset; the offset goes in the low 26 bits.
const B: u32 = 0x1400_0000;

/// `BL` with a zero offset; the offset goes in the low 26 bits.
const BL: u32 = 0x9400_0000;

/// Mask of the opcode bits of `B` and `BL`.
const BRANCH_OPCODE_MASK: u32 = 0xfc00_0000;

/// Mask of the `imm26` word offset of `B` and `BL`.
const IMM26_MASK: u32 = 0x03ff_ffff;

/// `mov x9, x30`, the alias of `orr x9, xzr, x30`.
const MOV_X9_X30: u32 = 0xaa1e_03e9;

/// `ret` (`ret x30`).
const RET: u32 = 0xd65f_03c0;

/// `BRK #0`; the immediate goes in bits 5 to 20.
const BRK: u32 = 0xd420_0000;

/// Mask of the bits of `BRK` outside its immediate.
const BRK_OPCODE_MASK: u32 = 0xffe0_001f;

/// Position of the `BRK` immediate.
const BRK_IMM_SHIFT: u32 = 5;

/// Lowest byte offset a `B` or `BL` reaches: -128 MiB.
const BRANCH_MIN: i64 = -(1 << 27);

/// Highest byte offset a `B` or `BL` reaches: 128 MiB minus one instruction.
const BRANCH_MAX: i64 = (1 << 27) - 4;

/// Register number of the link register `x30`.
const LR: u8 = 30;

/// Register number of `x9`, where ftrace's patchable-entry prologue saves the link register.
const X9: u8 = 9;

/// One arm64 instruction that a text poke may write or find at a site.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Insn {
    /// `NOP`.
    Nop,
    /// `B target`: a branch within ±128 MiB.
    B {
        /// Absolute address the branch goes to, 4-byte aligned.
        target: u64,
    },
    /// `BL target`: a branch with link within ±128 MiB.
    Bl {
        /// Absolute address of the called function, 4-byte aligned.
        target: u64,
    },
    /// `mov x9, x30`, ftrace's patchable-entry prologue that saves the link register.
    MovX9X30,
    /// `ret`, returning to `x30`.
    Ret,
    /// `BRK #imm`, a breakpoint; [`GUARD`] is the one text pokes use.
    Brk {
        /// The 16-bit immediate that tells breakpoint handlers apart.
        imm: u16,
    },
}

/// The kind of an [`Insn`] without its operands, for statistics.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Kind {
    /// [`Insn::Nop`].
    Nop,
    /// [`Insn::B`].
    B,
    /// [`Insn::Bl`].
    Bl,
    /// [`Insn::MovX9X30`].
    MovX9X30,
    /// [`Insn::Ret`].
    Ret,
    /// [`Insn::Brk`].
    Brk,
}

impl Kind {
    /// Every kind, in declaration order, so that `kind as usize` indexes this array.
    pub const ALL: [Kind; 6] = [
        Kind::Nop,
        Kind::B,
        Kind::Bl,
        Kind::MovX9X30,
        Kind::Ret,
        Kind::Brk,
    ];

    /// A short lowercase name for statistics and log lines.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Nop => "nop",
            Kind::B => "b",
            Kind::Bl => "bl",
            Kind::MovX9X30 => "mov_x9_x30",
            Kind::Ret => "ret",
            Kind::Brk => "brk",
        }
    }
}

/// The registers of an interrupted CPU that emulation reads and writes.
pub trait Regs {
    /// The program counter.
    fn pc(&self) -> u64;
    /// Sets the program counter the CPU resumes at.
    fn set_pc(&mut self, pc: u64);
    /// The general-purpose register `x<n>`, for `n` in `0..=30`.
    fn x(&self, n: u8) -> u64;
    /// Sets the general-purpose register `x<n>`, for `n` in `0..=30`.
    fn set_x(&mut self, n: u8, v: u64);
}

impl Insn {
    /// The instruction's length in bytes, always [`INSN_LEN`].
    #[expect(clippy::len_without_is_empty, reason = "an instruction is never empty")]
    pub const fn len(&self) -> usize {
        INSN_LEN
    }

    /// The instruction's kind, without operands.
    pub fn kind(&self) -> Kind {
        match self {
            Insn::Nop => Kind::Nop,
            Insn::B { .. } => Kind::B,
            Insn::Bl { .. } => Kind::Bl,
            Insn::MovX9X30 => Kind::MovX9X30,
            Insn::Ret => Kind::Ret,
            Insn::Brk { .. } => Kind::Brk,
        }
    }

    /// Encodes the instruction as the word it must be at address `site`.
    ///
    /// Fails with [`InsnError::Misaligned`] if `site` or a branch target is not 4-byte aligned,
    /// and with [`InsnError::OutOfRange`] if a branch target is beyond ±128 MiB of `site`.
    pub fn encode_word(&self, site: u64) -> Result<u32, InsnError> {
        check_aligned(site)?;
        match *self {
            Insn::Nop => Ok(NOP),
            Insn::B { target } => Ok(B | imm26(site, target)?),
            Insn::Bl { target } => Ok(BL | imm26(site, target)?),
            Insn::MovX9X30 => Ok(MOV_X9_X30),
            Insn::Ret => Ok(RET),
            Insn::Brk { imm } => Ok(BRK | (u32::from(imm) << BRK_IMM_SHIFT)),
        }
    }

    /// Encodes the instruction as the bytes it must be at address `site`.
    ///
    /// Fails as [`Insn::encode_word`] does.
    pub fn encode(&self, site: u64) -> Result<InsnBytes, InsnError> {
        InsnBytes::new(&self.encode_word(site)?.to_le_bytes())
    }

    /// Decodes the word `word` found at address `site`.
    ///
    /// Fails with [`InsnError::Misaligned`] if `site` is not 4-byte aligned and with
    /// [`InsnError::Unsupported`] if `word` is not a supported instruction.
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    pub fn decode_word(site: u64, word: u32) -> Result<Insn, InsnError> {
        check_aligned(site)?;
        match word {
            NOP => Ok(Insn::Nop),
            MOV_X9_X30 => Ok(Insn::MovX9X30),
            RET => Ok(Insn::Ret),
            _ if word & BRANCH_OPCODE_MASK == B => Ok(Insn::B {
                target: branch_target(site, word),
            }),
            _ if word & BRANCH_OPCODE_MASK == BL => Ok(Insn::Bl {
                target: branch_target(site, word),
            }),
            _ if word & BRK_OPCODE_MASK == BRK => {
                // The immediate is the low 16 bits once shifted down; the opcode bits above it
                // are dropped.
                let [lo, hi, _, _] = (word >> BRK_IMM_SHIFT).to_le_bytes();
                Ok(Insn::Brk {
                    imm: u16::from_le_bytes([lo, hi]),
                })
            }
            _ => Err(InsnError::Unsupported),
        }
    }

    /// Decodes `bytes`, found at address `site`, as exactly one instruction.
    ///
    /// Fails with [`InsnError::Truncated`] if `bytes` holds fewer than 4 bytes, with
    /// [`InsnError::LengthMismatch`] if it holds more, and otherwise as [`Insn::decode_word`].
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    pub fn decode(site: u64, bytes: &[u8]) -> Result<Insn, InsnError> {
        let word: [u8; INSN_LEN] = match bytes.len() {
            INSN_LEN => bytes.try_into().map_err(|_| InsnError::LengthMismatch)?,
            n if n < INSN_LEN => return Err(InsnError::Truncated),
            _ => return Err(InsnError::LengthMismatch),
        };
        Insn::decode_word(site, u32::from_le_bytes(word))
    }

    /// Makes the CPU whose registers are `regs` behave as if it had executed this instruction at
    /// address `site`.
    ///
    /// This is what the `BRK` trap handler does for a CPU that hit the guard at `site` (so
    /// `regs.pc()` is `site`) while this instruction was being written there; it follows
    /// `simulate_b_bl()` in Linux's arch/arm64/kernel/probes/simulate-insn.c. It fails, and
    /// leaves `regs` untouched, if the instruction cannot be encoded at `site` (see
    /// [`Insn::encode_word`]) or is a [`Insn::Brk`]: that is a breakpoint, which the kernel must
    /// deliver rather than skip.
    ///
    /// The emulated `B`, `BL` and `RET` need no BTI landing pad at their target, just as the real
    /// ones (a direct branch or a return) do not: the new PC takes effect by exception return,
    /// not by an indirect branch, which kprobes relies on too. Because none of the emulated
    /// instructions leaves `PSTATE.BTYPE` set, the trap handler should clear the saved BTYPE, as
    /// `arm64_skip_faulting_instruction()` does, in case the guard was itself reached by an
    /// indirect branch.
    ///
    /// [`Listed::emulate`] is the infallible form of this for instructions accepted at their site.
    pub fn emulate(&self, site: u64, regs: &mut impl Regs) -> Result<(), InsnError> {
        // Only an instruction that can exist at `site` has well-defined effects.
        self.encode_word(site)?;
        ListedInsn::listed(*self)
            .ok_or(InsnError::Unsupported)?
            .emulate(site, regs);
        Ok(())
    }
}

/// An instruction `textpoke.h` lists for arm64: an [`Insn`] without [`Insn::Brk`].
///
/// It is what a [`Listed`] holds, so that emulating one has no failure case for the compiler to
/// see, let alone for a CPU to hit.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum ListedInsn {
    Nop,
    B { target: u64 },
    Bl { target: u64 },
    MovX9X30,
    Ret,
}

impl ListedInsn {
    /// The listed instruction `insn` is, or `None` if the header does not list it.
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    const fn listed(insn: Insn) -> Option<ListedInsn> {
        // No wildcard: an instruction added to the decoder must be classified here.
        match insn {
            Insn::Nop => Some(ListedInsn::Nop),
            Insn::B { target } => Some(ListedInsn::B { target }),
            Insn::Bl { target } => Some(ListedInsn::Bl { target }),
            Insn::MovX9X30 => Some(ListedInsn::MovX9X30),
            Insn::Ret => Some(ListedInsn::Ret),
            Insn::Brk { .. } => None,
        }
    }

    /// The instruction as the codec's [`Insn`].
    const fn insn(self) -> Insn {
        match self {
            ListedInsn::Nop => Insn::Nop,
            ListedInsn::B { target } => Insn::B { target },
            ListedInsn::Bl { target } => Insn::Bl { target },
            ListedInsn::MovX9X30 => Insn::MovX9X30,
            ListedInsn::Ret => Insn::Ret,
        }
    }

    /// Makes `regs` behave as if the CPU had executed this instruction at `site`.
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    #[inline(always)]
    fn emulate(self, site: u64, regs: &mut impl Regs) {
        let next = site.wrapping_add(INSN_STEP);
        match self {
            ListedInsn::Nop => regs.set_pc(next),
            ListedInsn::B { target } => regs.set_pc(target),
            ListedInsn::Bl { target } => {
                regs.set_x(LR, next);
                regs.set_pc(target);
            }
            ListedInsn::MovX9X30 => {
                regs.set_x(X9, regs.x(LR));
                regs.set_pc(next);
            }
            ListedInsn::Ret => regs.set_pc(regs.x(LR)),
        }
    }
}

/// An instruction that `textpoke.h` lists, accepted at the site it was found at or is to be
/// written to.
///
/// Only [`Listed::accept`] (and [`Listed::accept_word`]) builds one, and they accept exactly the
/// listed instructions: `NOP`, `B`, `BL`, `MOV X9, X30` and `RET`, at a 4-byte aligned site. The
/// engine calls it both for a site's current instruction when the site is registered and for
/// each new instruction a batch adds, and keeps the result for the trap handler. A guard hit
/// whose pending instruction cannot be emulated is therefore impossible by construction:
/// [`Listed::emulate`] has no error to return, because a `Listed` never holds a `BRK` (its
/// variants exclude it), and its `B`/`BL` target was decoded from a word at its own aligned site,
/// so it is aligned and in reach.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Listed {
    /// The instruction's address, 4-byte aligned.
    site: u64,
    /// The instruction, as decoded from its word at `site`.
    op: ListedInsn,
}

impl Listed {
    /// Accepts `bytes`, found at or to be written to address `site`, if they are exactly one of
    /// the instructions `textpoke.h` lists.
    ///
    /// Fails with [`InsnError::Truncated`] if `bytes` holds fewer than 4 bytes, with
    /// [`InsnError::LengthMismatch`] if it holds more, with [`InsnError::Misaligned`] if `site` is
    /// not 4-byte aligned, and with [`InsnError::Unsupported`] for every other word, including
    /// every `BRK` (the guard among them) and anything else the decoder understands.
    #[inline]
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    pub fn accept(site: u64, bytes: &[u8]) -> Result<Listed, InsnError> {
        let word: [u8; INSN_LEN] = match bytes.len() {
            INSN_LEN => bytes.try_into().map_err(|_| InsnError::LengthMismatch)?,
            n if n < INSN_LEN => return Err(InsnError::Truncated),
            _ => return Err(InsnError::LengthMismatch),
        };
        Listed::accept_word(site, u32::from_le_bytes(word))
    }

    /// Accepts the word `word` at address `site`, as [`Listed::accept`] accepts its bytes.
    #[inline]
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    pub fn accept_word(site: u64, word: u32) -> Result<Listed, InsnError> {
        let op =
            ListedInsn::listed(Insn::decode_word(site, word)?).ok_or(InsnError::Unsupported)?;
        // INVARIANT: `decode_word` checked that `site` is aligned, and `op` is what `word` is at
        // `site`, so its `B`/`BL` target is aligned and within reach of `site`: emulating `op` at
        // `site` is what the CPU would do executing `word` there.
        Ok(Listed { site, op })
    }

    /// The address the instruction was accepted at.
    pub const fn site(&self) -> u64 {
        self.site
    }

    /// The instruction, as the codec's [`Insn`] (never [`Insn::Brk`]).
    pub const fn insn(&self) -> Insn {
        self.op.insn()
    }

    /// The instruction's kind (never [`Kind::Brk`]).
    pub fn kind(&self) -> Kind {
        self.insn().kind()
    }

    /// The instruction's length in bytes, always [`INSN_LEN`].
    #[expect(clippy::len_without_is_empty, reason = "an instruction is never empty")]
    pub const fn len(&self) -> usize {
        INSN_LEN
    }

    /// Makes the CPU whose registers are `regs` behave as if it had executed this instruction at
    /// its site.
    ///
    /// This is what the `BRK` trap handler does for a CPU that hit the guard at [`Listed::site`]
    /// (so `regs.pc()` is the site) while this instruction was being written there; it has the
    /// effects of [`Insn::emulate`] (see there for BTI), which cannot fail here: see [`Listed`].
    // Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
    #[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
    #[inline(always)]
    pub fn emulate(&self, regs: &mut impl Regs) {
        self.op.emulate(self.site, regs);
    }
}

/// Checks that `addr` is 4-byte aligned, as every instruction address must be.
// Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
#[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
fn check_aligned(addr: u64) -> Result<(), InsnError> {
    if addr & ALIGN_MASK == 0 {
        Ok(())
    } else {
        Err(InsnError::Misaligned)
    }
}

/// The `imm26` field of a `B` or `BL` from `site` to `target`.
fn imm26(site: u64, target: u64) -> Result<u32, InsnError> {
    check_aligned(target)?;
    // Two's complement: a target below `site` yields a negative offset.
    let offset = target.wrapping_sub(site) as i64;
    if !(BRANCH_MIN..=BRANCH_MAX).contains(&offset) {
        return Err(InsnError::OutOfRange);
    }
    // The offset is a multiple of 4 within 28 signed bits, so its word count fits in 26 bits
    // once truncated to them.
    Ok(((offset >> 2) as u32) & IMM26_MASK)
}

/// The target of the `B` or `BL` word `word` at `site`.
// Trap path: in the kernel, in the section kprobes refuse (kernel/trap.rs).
#[cfg_attr(CONFIG_RUST, link_section = ".kprobes.text")]
fn branch_target(site: u64, word: u32) -> u64 {
    // Moving `imm26` to the top of the word and shifting it back arithmetically sign-extends it;
    // stopping the shift two bits early multiplies it by 4.
    let offset = (((word & IMM26_MASK) << 6) as i32) >> 4;
    site.wrapping_add(i64::from(offset) as u64)
}
