//! A64 encoders for the handful of instructions the scenarios use, and an interpreter of
//! exactly that subset.
//!
//! The interpreter is the ground truth: it records every executed instruction and every branch
//! outcome, which [`crate::etm`] turns into trace and [`crate::decode`] compares perf's decode
//! against. It can replace one word after a given number of steps, which models a text poke
//! taking effect while the traced code runs.
//!
//! Encodings (Arm ARM DDI0487, A64 base instructions; little-endian 32-bit words). The words
//! were cross-checked with `llvm-mc --disassemble -triple=aarch64`:
//!
//! | instruction         | word                                       |
//! |---------------------|--------------------------------------------|
//! | `NOP`               | `0xD503201F`                               |
//! | `RET` (X30)         | `0xD65F03C0` (indirect branch)             |
//! | `SVC #0`            | `0xD4000001`                               |
//! | `MOVZ Xd, #imm16`   | `0xD2800000 \| imm16 << 5 \| Rd`           |
//! | `SUBS Xd, Xn, #imm` | `0xF1000000 \| imm12 << 10 \| Rn << 5 \| Rd` |
//! | `B.cond label`      | `0x54000000 \| imm19 << 5 \| cond`         |
//! | `CBZ Xt, label`     | `0xB4000000 \| imm19 << 5 \| Rt`           |
//! | `B label`           | `0x14000000 \| imm26`                      |
//! | `BL label`          | `0x94000000 \| imm26`                      |
//!
//! where imm19 and imm26 are `(target - pc) / 4` as two's-complement fields.

use textpoke_core::arm64::Insn;

/// `NOP` (the same word as the kernel module's codec's `Insn::Nop`: a unit test holds them to it).
pub const NOP: u32 = 0xD503_201F;
/// `RET` (return to X30): an indirect branch, so the ETM traces its target address (also the
/// kernel module codec's `Insn::Ret`).
pub const RET: u32 = 0xD65F_03C0;
/// `SVC #0`: a synchronous exception to EL1 (a system call).
pub const SVC0: u32 = 0xD400_0001;
/// Condition code NE (Z == 0) for [`b_cond`].
pub const COND_NE: u32 = 1;

/// `MOVZ Xd, #imm16`.
pub fn movz_x(rd: u32, imm16: u16) -> u32 {
    0xD280_0000 | u32::from(imm16) << 5 | (rd & 31)
}

/// `SUBS Xd, Xn, #imm12` (sets N and Z, which [`b_cond`] reads).
pub fn subs_x_imm(rd: u32, rn: u32, imm12: u32) -> u32 {
    assert!(
        imm12 < 1 << 12,
        "SUBS immediate {imm12:#x} does not fit 12 bits"
    );
    0xF100_0000 | imm12 << 10 | (rn & 31) << 5 | (rd & 31)
}

/// The `bits`-wide word offset field from `pc` to `target`.
fn offset(pc: u64, target: u64, bits: u32) -> u32 {
    let delta = target.wrapping_sub(pc) as i64;
    assert!(
        delta % 4 == 0,
        "branch {pc:#x} -> {target:#x} is not word aligned"
    );
    let words = delta / 4;
    assert!(
        words >= -(1i64 << (bits - 1)) && words < 1i64 << (bits - 1),
        "branch {pc:#x} -> {target:#x} is out of range of a {bits}-bit offset"
    );
    (words as u32) & ((1u32 << bits) - 1)
}

/// `B.cond label` at `pc`.
pub fn b_cond(pc: u64, target: u64, cond: u32) -> u32 {
    0x5400_0000 | offset(pc, target, 19) << 5 | (cond & 15)
}

/// `CBZ Xt, label` at `pc`.
pub fn cbz_x(pc: u64, target: u64, rt: u32) -> u32 {
    0xB400_0000 | offset(pc, target, 19) << 5 | (rt & 31)
}

/// `B label` at `pc`, by the codec the kernel module patches with (arch/arm64/insn.rs).
pub fn b(pc: u64, target: u64) -> u32 {
    Insn::B { target }
        .encode_word(pc)
        .unwrap_or_else(|e| panic!("B {pc:#x} -> {target:#x}: {e:?}"))
}

/// `BL label` at `pc`, by the codec the kernel module patches with (arch/arm64/insn.rs).
pub fn bl(pc: u64, target: u64) -> u32 {
    Insn::Bl { target }
        .encode_word(pc)
        .unwrap_or_else(|e| panic!("BL {pc:#x} -> {target:#x}: {e:?}"))
}

/// `pc` plus the sign-extended `bits`-wide word offset `field`.
fn branch_target(pc: u64, field: u32, bits: u32) -> u64 {
    let shift = 64 - bits;
    let words = (u64::from(field) << shift) as i64 >> shift;
    pc.wrapping_add_signed(words * 4)
}

/// What an instruction is to the ETM: which trace element, if any, it produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Not a waypoint: traced implicitly, as part of an instruction range.
    Plain,
    /// A direct branch (B, BL, B.cond, CBZ): one atom, no address.
    Direct,
    /// An indirect branch (RET): one atom and, when taken, the target address.
    Indirect,
    /// An exception-generating instruction (SVC): an Exception packet.
    Svc,
}

/// One executed instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Its address.
    pub pc: u64,
    /// Its encoding, as it was when it executed.
    pub insn: u32,
    /// Its kind.
    pub kind: Kind,
    /// Whether it was a taken branch.
    pub taken: bool,
    /// The address executed next.
    pub next: u64,
}

/// The [`Kind`] of `insn`.
pub fn classify(insn: u32) -> Kind {
    let unconditional = insn & 0x7C00_0000 == 0x1400_0000; // B, BL
    let conditional = insn & 0xFF00_0010 == 0x5400_0000 || insn & 0x7F00_0000 == 0x3400_0000;
    if unconditional || conditional {
        Kind::Direct
    } else if insn & 0xFFFF_FC1F == 0xD65F_0000 {
        Kind::Indirect
    } else if insn & 0xFFE0_001F == 0xD400_0001 {
        Kind::Svc
    } else {
        Kind::Plain
    }
}

/// Code in memory: consecutive words from `base`.
#[derive(Clone, Debug)]
pub struct Image {
    /// Address of the first word.
    pub base: u64,
    /// The instruction words.
    pub words: Vec<u32>,
}

impl Image {
    /// The index of the word at `pc`, if the image holds it.
    fn index(&self, pc: u64) -> Result<usize, String> {
        let off = pc.wrapping_sub(self.base);
        let i = (off / 4) as usize;
        if !pc.is_multiple_of(4) || pc < self.base || i >= self.words.len() {
            return Err(format!(
                "address {pc:#x} is not a word of the image at {:#x} ({} words)",
                self.base,
                self.words.len()
            ));
        }
        Ok(i)
    }

    /// The little-endian bytes of the words (what an ELF's `.text` holds).
    pub fn bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }
}

/// A replacement of one word after a number of executed instructions.
#[derive(Clone, Copy, Debug)]
pub struct Patch {
    /// How many instructions execute before the new word takes effect.
    pub after_steps: usize,
    /// The address of the replaced word.
    pub addr: u64,
    /// The new word.
    pub word: u32,
}

/// Execute `img` from `entry` until `pc == stop` (which is not executed), applying `patch`
/// once `patch.after_steps` instructions have executed. Fails on an instruction outside the
/// supported subset, a fetch outside the image, or more than `max_steps` steps.
pub fn run(
    img: &mut Image,
    entry: u64,
    stop: u64,
    max_steps: usize,
    patch: Option<Patch>,
) -> Result<Vec<Step>, String> {
    let mut x = [0u64; 32];
    let (mut n, mut z) = (false, false);
    let mut pc = entry;
    let mut steps = Vec::new();
    while pc != stop {
        if steps.len() == max_steps {
            return Err(format!("no stop at {stop:#x} within {max_steps} steps"));
        }
        if let Some(p) = patch.filter(|p| p.after_steps == steps.len()) {
            let i = img.index(p.addr)?;
            img.words[i] = p.word;
        }
        let insn = img.words[img.index(pc)?];
        let mut next = pc + 4;
        let mut taken = false;
        if insn == NOP || insn == SVC0 {
            // SVC: the EL1 handler is not traced and returns to pc + 4.
        } else if insn & 0xFF80_0000 == 0xD280_0000 {
            x[(insn & 31) as usize] = u64::from((insn >> 5) & 0xFFFF);
        } else if insn & 0xFFC0_0000 == 0xF100_0000 {
            let r = x[((insn >> 5) & 31) as usize].wrapping_sub(u64::from((insn >> 10) & 0xFFF));
            (n, z) = ((r as i64) < 0, r == 0);
            x[(insn & 31) as usize] = r;
        } else if insn & 0x7C00_0000 == 0x1400_0000 {
            if insn & 0x8000_0000 != 0 {
                x[30] = pc + 4; // BL
            }
            taken = true;
            next = branch_target(pc, insn & 0x3FF_FFFF, 26);
        } else if insn & 0xFF00_0010 == 0x5400_0000 {
            taken = match insn & 15 {
                0 => z,
                1 => !z,
                4 => n,
                5 => !n,
                c => {
                    return Err(format!(
                        "B.cond with condition {c} at {pc:#x} is not supported"
                    ))
                }
            };
        } else if insn & 0xFF00_0000 == 0xB400_0000 {
            taken = x[(insn & 31) as usize] == 0;
        } else if insn == RET {
            taken = true;
            next = x[30];
        } else {
            return Err(format!(
                "instruction {insn:#010x} at {pc:#x} is not supported"
            ));
        }
        if taken && classify(insn) == Kind::Direct && insn & 0x7C00_0000 != 0x1400_0000 {
            next = branch_target(pc, (insn >> 5) & 0x7FFFF, 19);
        }
        steps.push(Step {
            pc,
            insn,
            kind: classify(insn),
            taken,
            next,
        });
        pc = next;
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words that `llvm-mc --disassemble -triple=aarch64` decodes to the named instructions.
    #[test]
    fn encodings_match_the_assembler() {
        assert_eq!(movz_x(0, 3), 0xD280_0060); // mov x0, #3
        assert_eq!(subs_x_imm(0, 0, 1), 0xF100_0400); // subs x0, x0, #1
        assert_eq!(b(0x1000, 0x1000), 0x1400_0000); // b .
        assert_eq!(bl(0x1004, 0x1000), 0x97FF_FFFF); // bl .-4
        assert_eq!(b_cond(0x100c, 0x1004, COND_NE), 0x54FF_FFC1); // b.ne .-8
        assert_eq!(cbz_x(0x1010, 0x1018, 0), 0xB400_0040); // cbz x0, .+8
        assert_eq!(classify(RET), Kind::Indirect);
        assert_eq!(classify(bl(0, 8)), Kind::Direct);
        assert_eq!(classify(cbz_x(0, 8, 1)), Kind::Direct);
        assert_eq!(classify(SVC0), Kind::Svc);
        assert_eq!(classify(NOP), Kind::Plain);
        // The words the kernel module's codec writes.
        assert_eq!(Insn::Nop.encode_word(0x1000), Ok(NOP));
        assert_eq!(Insn::Ret.encode_word(0x1000), Ok(RET));
    }

    /// A two-iteration loop calling a function: every step's pc, outcome and successor.
    #[test]
    fn interpreter_follows_branches_and_patches() {
        let a = |i: u64| 0x1000 + 4 * i;
        let words = vec![
            movz_x(0, 2),          // 0: mov x0, #2
            bl(a(1), a(5)),        // 1: bl f
            subs_x_imm(0, 0, 1),   // 2: subs x0, x0, #1
            b_cond(a(3), a(1), 1), // 3: b.ne 1
            cbz_x(a(4), a(7), 0),  // 4: cbz x0, 7
            RET,                   // 5: f: ret
            NOP,                   // 6: (skipped)
            NOP,                   // 7: stop
        ];
        let mut img = Image {
            base: 0x1000,
            words,
        };
        let steps = run(&mut img.clone(), a(0), a(7), 100, None).expect("runs");
        let trace: Vec<(u64, bool, u64)> = steps.iter().map(|s| (s.pc, s.taken, s.next)).collect();
        let expected = [
            (a(0), false, a(1)),
            (a(1), true, a(5)),
            (a(5), true, a(2)),
            (a(2), false, a(3)),
            (a(3), true, a(1)),
            (a(1), true, a(5)),
            (a(5), true, a(2)),
            (a(2), false, a(3)),
            (a(3), false, a(4)),
            (a(4), true, a(7)),
        ];
        assert_eq!(trace, expected);

        // The first `bl` becomes `b 2` after 4 steps: the second iteration skips the call.
        let patch = Patch {
            after_steps: 4,
            addr: a(1),
            word: b(a(1), a(2)),
        };
        let steps = run(&mut img, a(0), a(7), 100, Some(patch)).expect("runs");
        let pcs: Vec<u64> = steps.iter().map(|s| s.pc).collect();
        assert_eq!(pcs, [a(0), a(1), a(5), a(2), a(3), a(1), a(2), a(3), a(4)]);
        assert_eq!(steps[1].insn, bl(a(1), a(5)));
        assert_eq!(steps[5].insn, b(a(1), a(2)));

        let mut bad = Image {
            base: 0x1000,
            words: vec![0],
        };
        assert!(run(&mut bad, 0x1000, 0x1004, 10, None).is_err());
    }
}
