// SPDX-License-Identifier: GPL-2.0

//! Arch-neutral instruction bytes and codec errors.
//!
//! Shared by the x86 and arm64 codecs. Like every pure file of the engine it is compiled both
//! into the kernel module and into the host crate `textpoke-core` (through `#[path]`), so it uses
//! only `core`, never allocates and never panics.

/// The longest instruction either arch patches: x86 `JMP rel32`, `CALL rel32` and the 5-byte NOP.
pub const MAX_INSN_LEN: usize = 5;

/// An encoded instruction, exactly as its bytes appear in memory.
///
/// # Invariants
///
/// `1 <= len <= MAX_INSN_LEN`, and the bytes past `len` are zero, so `==` compares instructions.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct InsnBytes {
    len: u8,
    bytes: [u8; MAX_INSN_LEN],
}

impl InsnBytes {
    /// Copies `bytes`, which must hold between 1 and [`MAX_INSN_LEN`] bytes.
    pub const fn new(bytes: &[u8]) -> Result<Self, InsnError> {
        if bytes.is_empty() {
            return Err(InsnError::Truncated);
        }
        if bytes.len() > MAX_INSN_LEN {
            return Err(InsnError::LengthMismatch);
        }
        let mut out = [0u8; MAX_INSN_LEN];
        let mut i = 0;
        while i < bytes.len() {
            out[i] = bytes[i];
            i += 1;
        }
        // INVARIANT: the length was checked above and the rest of `out` is still zero.
        Ok(Self {
            len: bytes.len() as u8,
            bytes: out,
        })
    }

    /// The instruction's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // The invariant makes the range valid, so this never takes the empty fallback.
        self.bytes.get(..usize::from(self.len)).unwrap_or(&[])
    }

    /// Number of bytes.
    #[expect(clippy::len_without_is_empty, reason = "an instruction is never empty")]
    pub const fn len(&self) -> usize {
        self.len as usize
    }

    /// The first byte: the one an x86 guard (`INT3`) replaces.
    pub const fn head(&self) -> u8 {
        self.bytes[0]
    }

    /// Everything after the first byte (empty for one-byte instructions).
    pub fn tail(&self) -> &[u8] {
        self.bytes.get(1..usize::from(self.len)).unwrap_or(&[])
    }
}

/// An instruction a caller of `textpoke_encode()` asks for by operation (`enum textpoke_op` in
/// kernel/textpoke.h), which each arch maps to its own encoding.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Op {
    /// x86 `NOP2`/`NOP5`, arm64 `NOP`.
    Nop,
    /// x86 `JMP rel8`/`JMP rel32`, arm64 `B`.
    Jmp,
    /// x86 `CALL rel32`, arm64 `BL`.
    Call,
    /// x86 `RET` (padded with `INT3`), arm64 `RET`.
    Ret,
    /// arm64 `MOV X9, X30` (ftrace's patchable-entry prologue).
    MovX9X30,
}

impl Op {
    /// The operation of `enum textpoke_op` value `op`.
    pub const fn from_c(op: i32) -> Option<Self> {
        Some(match op {
            0 => Self::Nop,
            1 => Self::Jmp,
            2 => Self::Call,
            3 => Self::Ret,
            4 => Self::MovX9X30,
            _ => return None,
        })
    }
}

/// Why an instruction cannot be encoded, decoded or emulated.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum InsnError {
    /// Not one of the instructions this arch's codec supports.
    Unsupported,
    /// A branch target is beyond the instruction's reach.
    OutOfRange,
    /// The site or the target is not aligned as the arch requires.
    Misaligned,
    /// The instruction's length differs from the bytes or slot it must fill.
    LengthMismatch,
    /// Fewer bytes than the instruction needs.
    Truncated,
}

impl InsnError {
    /// A short lowercase description for log lines.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Unsupported => "unsupported instruction",
            Self::OutOfRange => "branch target out of range",
            Self::Misaligned => "misaligned site or target",
            Self::LengthMismatch => "instruction length does not match the site",
            Self::Truncated => "truncated instruction",
        }
    }
}
