// SPDX-License-Identifier: GPL-2.0

//! Host tests of the arm64 instruction codec and `BRK` emulation in `arch/arm64/insn.rs`.
//!
//! Unit tests pin exact words, range limits and errors; property tests (proptest, [`CASES`] cases
//! each) check round trips and robustness; differential tests check every encoding and every
//! accepted word against `yaxpeax-arm`, an independent decoder, and check emulation against a
//! model driven by yaxpeax's reading of the instruction.

use proptest::prelude::*;
use proptest::test_runner::Config;
use textpoke_core::arm64::{Insn, Kind, Listed, Regs, GUARD, GUARD_BRK_IMM, GUARD_WORD, INSN_LEN};
use textpoke_core::insn::InsnError;
use yaxpeax_arch::{Decoder, U8Reader};
use yaxpeax_arm::armv8::a64::{InstDecoder, Instruction, Opcode, Operand, ShiftStyle, SizeCode};

/// Cases per property: 10,000, which keeps the whole file at a few seconds in release mode.
const CASES: u32 = 10_000;

/// A typical kernel text address.
const KTEXT: u64 = 0xffff_8000_8001_0000;

/// The reach of `B` and `BL`: offsets in `[-2^27, 2^27 - 4]`.
const MIN_OFFSET: i64 = -(1 << 27);
const MAX_OFFSET: i64 = (1 << 27) - 4;

fn config() -> Config {
    Config {
        cases: CASES,
        // A failure prints its minimal input; persisting it would write next to this file.
        failure_persistence: None,
        ..Config::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Fakes.

#[derive(Clone, Debug, PartialEq, Eq)]
struct FakeRegs {
    pc: u64,
    x: [u64; 31],
}

impl FakeRegs {
    /// A CPU that hit the guard at `site`, with distinct values in every register.
    fn trapped_at(site: u64, seed: u64) -> Self {
        let mut x = [0; 31];
        for (n, reg) in x.iter_mut().enumerate() {
            *reg = seed.rotate_left(n as u32) ^ (n as u64);
        }
        Self { pc: site, x }
    }
}

impl Regs for FakeRegs {
    fn pc(&self) -> u64 {
        self.pc
    }
    fn set_pc(&mut self, pc: u64) {
        self.pc = pc;
    }
    fn x(&self, n: u8) -> u64 {
        assert!(n <= 30, "x{n} read");
        self.x[usize::from(n)]
    }
    fn set_x(&mut self, n: u8, v: u64) {
        assert!(n <= 30, "x{n} written");
        self.x[usize::from(n)] = v;
    }
}

// ---------------------------------------------------------------------------------------------
// Unit tests: exact words and round trips.

fn exact_cases() -> Vec<(Insn, u64, u32)> {
    let s = KTEXT;
    vec![
        (Insn::Nop, s, 0xd503_201f),
        (Insn::B { target: s }, s, 0x1400_0000),
        (Insn::B { target: s + 4 }, s, 0x1400_0001),
        (Insn::B { target: s - 4 }, s, 0x17ff_ffff),
        (
            Insn::B {
                target: s + 0x7ff_fffc,
            },
            s,
            0x15ff_ffff,
        ),
        (
            Insn::B {
                target: s - 0x800_0000,
            },
            s,
            0x1600_0000,
        ),
        (Insn::Bl { target: s + 0x1000 }, s, 0x9400_0400),
        (
            Insn::Bl {
                target: s - 0x800_0000,
            },
            s,
            0x9600_0000,
        ),
        (
            Insn::Bl {
                target: s + 0x7ff_fffc,
            },
            s,
            0x95ff_ffff,
        ),
        (Insn::MovX9X30, s, 0xaa1e_03e9),
        (Insn::Ret, s, 0xd65f_03c0),
        (Insn::Brk { imm: 0 }, s, 0xd420_0000),
        (Insn::Brk { imm: 0x008 }, s, 0xd420_0100),
        (Insn::Brk { imm: 0xffff }, s, 0xd43f_ffe0),
        // Address arithmetic wraps around the top of memory.
        (Insn::B { target: 0 }, u64::MAX - 3, 0x1400_0001),
        (
            Insn::Bl {
                target: u64::MAX - 3,
            },
            0,
            0x97ff_ffff,
        ),
    ]
}

#[test]
fn exact_words_and_round_trip() {
    for (insn, site, word) in exact_cases() {
        assert_eq!(insn.encode_word(site), Ok(word), "{insn:?} at {site:#x}");
        let bytes = insn.encode(site).unwrap();
        assert_eq!(bytes.as_slice(), &word.to_le_bytes(), "little-endian");
        assert_eq!(bytes.len(), INSN_LEN);
        assert_eq!(insn.len(), INSN_LEN);
        assert_eq!(Insn::decode_word(site, word), Ok(insn), "{word:#010x}");
        assert_eq!(Insn::decode(site, &word.to_le_bytes()), Ok(insn));
    }
    assert_eq!(
        Insn::Nop.encode(0).unwrap().as_slice(),
        &[0x1f, 0x20, 0x03, 0xd5]
    );
}

#[test]
fn guard_is_brk_0x008() {
    assert_eq!(GUARD_BRK_IMM, 0x008);
    assert_eq!(GUARD, Insn::Brk { imm: 0x008 });
    assert_eq!(GUARD.encode_word(KTEXT), Ok(0xd420_0100));
    assert_eq!(GUARD_WORD, 0xd420_0100);
}

#[test]
fn kinds_and_names() {
    let insns = [
        Insn::Nop,
        Insn::B { target: 0 },
        Insn::Bl { target: 0 },
        Insn::MovX9X30,
        Insn::Ret,
        Insn::Brk { imm: 0 },
    ];
    assert_eq!(Kind::ALL.len(), insns.len());
    for (i, (insn, kind)) in insns.iter().zip(Kind::ALL).enumerate() {
        assert_eq!(insn.kind(), kind);
        assert_eq!(kind as usize, i, "Kind::ALL is in declaration order");
    }
    let names: Vec<_> = Kind::ALL.iter().map(|k| k.name()).collect();
    assert_eq!(names, ["nop", "b", "bl", "mov_x9_x30", "ret", "brk"]);
}

// ---------------------------------------------------------------------------------------------
// Unit tests: range limits, alignment and decoding errors.

#[test]
fn branch_bounds_are_plus_minus_128_mib() {
    for site in [KTEXT, 0, 4, u64::MAX - 3, 0x800_0000] {
        let at = |d: i64| site.wrapping_add(d as u64);
        for make in [(|target| Insn::B { target }) as fn(u64) -> Insn, |target| {
            Insn::Bl { target }
        }] {
            for d in [MIN_OFFSET, MAX_OFFSET, 0, -4, 4] {
                let insn = make(at(d));
                let word = insn.encode_word(site).unwrap();
                assert_eq!(
                    Insn::decode_word(site, word),
                    Ok(insn),
                    "site {site:#x} offset {d}"
                );
            }
            for d in [
                MIN_OFFSET - 4,
                MAX_OFFSET + 4,
                i64::MIN,
                i64::MAX - 3,
                1 << 40,
            ] {
                assert_eq!(
                    make(at(d)).encode_word(site),
                    Err(InsnError::OutOfRange),
                    "site {site:#x} offset {d}"
                );
            }
        }
    }
}

#[test]
fn misalignment_is_rejected_everywhere() {
    let all = [
        Insn::Nop,
        Insn::B { target: KTEXT },
        Insn::Bl { target: KTEXT },
        Insn::MovX9X30,
        Insn::Ret,
        Insn::Brk { imm: 8 },
    ];
    for misalign in 1..4 {
        let site = KTEXT + misalign;
        for insn in all {
            assert_eq!(
                insn.encode_word(site),
                Err(InsnError::Misaligned),
                "{insn:?}"
            );
            assert_eq!(insn.encode(site), Err(InsnError::Misaligned), "{insn:?}");
            let word = insn.encode_word(KTEXT).unwrap();
            assert_eq!(Insn::decode_word(site, word), Err(InsnError::Misaligned));
            assert_eq!(
                Insn::decode(site, &word.to_le_bytes()),
                Err(InsnError::Misaligned)
            );
            let mut regs = FakeRegs::trapped_at(site, 1);
            assert_eq!(insn.emulate(site, &mut regs), Err(InsnError::Misaligned));
            assert_eq!(regs, FakeRegs::trapped_at(site, 1));
        }
        let target = KTEXT + 0x100 + misalign;
        assert_eq!(
            Insn::B { target }.encode_word(KTEXT),
            Err(InsnError::Misaligned)
        );
        assert_eq!(
            Insn::Bl { target }.encode_word(KTEXT),
            Err(InsnError::Misaligned)
        );
        // Alignment is checked before range.
        let far = KTEXT + (1 << 40) + misalign;
        assert_eq!(
            Insn::B { target: far }.encode_word(KTEXT),
            Err(InsnError::Misaligned)
        );
    }
}

#[test]
fn decode_errors() {
    use InsnError::*;
    let nop = 0xd503_201fu32.to_le_bytes();
    assert_eq!(Insn::decode(KTEXT, &[]), Err(Truncated));
    for n in 1..4 {
        assert_eq!(Insn::decode(KTEXT, &nop[..n]), Err(Truncated));
    }
    assert_eq!(
        Insn::decode(KTEXT, &[0x1f, 0x20, 0x03, 0xd5, 0x00]),
        Err(LengthMismatch)
    );
    assert_eq!(Insn::decode(KTEXT, &[0; 8]), Err(LengthMismatch));
    for word in [
        0x0000_0000, // UDF #0.
        0xd503_203f, // YIELD, the next hint.
        0xd503_281f, // HINT #64, which yaxpeax 0.3 prints as "nop" (see below).
        0xd503_233f, // PACIASP.
        0xd503_245f, // BTI c.
        0xaa1e_03e8, // mov x8, x30.
        0xaa1f_03e9, // mov x9, xzr.
        0xaa1e_07e9, // orr x9, xzr, x30, lsl #1.
        0x2a1e_03e9, // mov w9, w30.
        0xd65f_0020, // ret x1.
        0xd65f_0bff, // retaa.
        0xd63f_0200, // blr x16.
        0xd61f_0200, // br x16.
        0xd440_0100, // HLT #8.
        0xd420_0101, // BRK's opc with LL = 01, unallocated.
        0x5400_0000, // b.eq.
        0xffff_ffff,
    ] {
        assert_eq!(
            Insn::decode_word(KTEXT, word),
            Err(Unsupported),
            "{word:#010x}"
        );
    }
}

/// The acceptance function takes every listed exact case as itself, and refuses every `BRK`.
#[test]
fn accept_exact_cases() {
    for (insn, site, word) in exact_cases() {
        let accepted = Listed::accept(site, &word.to_le_bytes());
        assert_eq!(accepted, Listed::accept_word(site, word));
        if let Insn::Brk { .. } = insn {
            assert_eq!(accepted, Err(InsnError::Unsupported), "{word:#010x}");
            continue;
        }
        let listed = accepted.unwrap_or_else(|e| panic!("{word:#010x}: {e:?}"));
        assert_eq!(listed.insn(), insn);
        assert_eq!(listed.site(), site);
        assert_eq!(listed.kind(), insn.kind());
        assert_eq!(listed.len(), INSN_LEN);
    }
    assert_eq!(
        Listed::accept(KTEXT, &GUARD_WORD.to_le_bytes()),
        Err(InsnError::Unsupported)
    );
}

#[test]
fn accept_errors() {
    use InsnError::*;
    let nop = 0xd503_201fu32.to_le_bytes();
    assert_eq!(Listed::accept(KTEXT, &[]), Err(Truncated));
    for n in 1..4 {
        assert_eq!(Listed::accept(KTEXT, &nop[..n]), Err(Truncated));
    }
    assert_eq!(
        Listed::accept(KTEXT, &[0x1f, 0x20, 0x03, 0xd5, 0x00]),
        Err(LengthMismatch)
    );
    for low in 1..4 {
        assert_eq!(Listed::accept(KTEXT + low, &nop), Err(Misaligned));
        assert_eq!(
            Listed::accept(KTEXT + low, &GUARD_WORD.to_le_bytes()),
            Err(Misaligned)
        );
    }
    assert_eq!(Listed::accept_word(KTEXT, 0xd503_203f), Err(Unsupported));
}

// ---------------------------------------------------------------------------------------------
// Unit tests: emulation.

const SEED: u64 = 0x0123_4567_89ab_cdef;

#[test]
fn emulate_nop_steps_over_the_site() {
    let mut regs = FakeRegs::trapped_at(KTEXT, SEED);
    assert_eq!(Insn::Nop.emulate(KTEXT, &mut regs), Ok(()));
    let mut want = FakeRegs::trapped_at(KTEXT, SEED);
    want.pc = KTEXT + 4;
    assert_eq!(regs, want);
}

#[test]
fn emulate_b_only_sets_pc() {
    let target = KTEXT - 0x40;
    let mut regs = FakeRegs::trapped_at(KTEXT, SEED);
    assert_eq!(Insn::B { target }.emulate(KTEXT, &mut regs), Ok(()));
    let mut want = FakeRegs::trapped_at(KTEXT, SEED);
    want.pc = target;
    assert_eq!(regs, want);
}

#[test]
fn emulate_bl_links_site_plus_4() {
    let target = KTEXT + 0x40_0000;
    let mut regs = FakeRegs::trapped_at(KTEXT, SEED);
    assert_eq!(Insn::Bl { target }.emulate(KTEXT, &mut regs), Ok(()));
    let mut want = FakeRegs::trapped_at(KTEXT, SEED);
    want.pc = target;
    want.x[30] = KTEXT + 4;
    assert_eq!(regs, want);
}

#[test]
fn emulate_mov_x9_x30_copies_the_link_register() {
    let mut regs = FakeRegs::trapped_at(KTEXT, SEED);
    assert_eq!(Insn::MovX9X30.emulate(KTEXT, &mut regs), Ok(()));
    let mut want = FakeRegs::trapped_at(KTEXT, SEED);
    want.pc = KTEXT + 4;
    want.x[9] = want.x[30];
    assert_eq!(regs, want);
}

#[test]
fn emulate_ret_returns_to_x30() {
    let mut regs = FakeRegs::trapped_at(KTEXT, SEED);
    assert_eq!(Insn::Ret.emulate(KTEXT, &mut regs), Ok(()));
    let mut want = FakeRegs::trapped_at(KTEXT, SEED);
    want.pc = want.x[30];
    assert_eq!(regs, want);
}

#[test]
fn emulate_bl_then_ret_returns_after_the_call() {
    let callee = KTEXT + 0x1000;
    let mut regs = FakeRegs::trapped_at(KTEXT, SEED);
    Insn::Bl { target: callee }
        .emulate(KTEXT, &mut regs)
        .unwrap();
    Insn::Ret.emulate(callee, &mut regs).unwrap();
    assert_eq!(regs.pc, KTEXT + 4);
}

#[test]
fn emulate_wraps_at_the_top_of_memory() {
    let site = u64::MAX - 3;
    let mut regs = FakeRegs::trapped_at(site, SEED);
    Insn::Bl { target: 8 }.emulate(site, &mut regs).unwrap();
    assert_eq!((regs.pc, regs.x[30]), (8, 0));
}

#[test]
fn emulate_refuses_breakpoints_and_unencodable_instructions() {
    let refused = [
        (GUARD, InsnError::Unsupported),
        (Insn::Brk { imm: 0x004 }, InsnError::Unsupported),
        (
            Insn::B {
                target: KTEXT + (1 << 27),
            },
            InsnError::OutOfRange,
        ),
        (Insn::Bl { target: KTEXT + 2 }, InsnError::Misaligned),
    ];
    for (insn, err) in refused {
        let mut regs = FakeRegs::trapped_at(KTEXT, SEED);
        assert_eq!(insn.emulate(KTEXT, &mut regs), Err(err), "{insn:?}");
        assert_eq!(
            regs,
            FakeRegs::trapped_at(KTEXT, SEED),
            "{insn:?} left the registers"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Strategies.

fn aligned_site() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>().prop_map(|s| s & !3),
        (0u64..0x100_0000).prop_map(|o| KTEXT + (o & !3)),
        (0u64..16).prop_map(|o| (u64::MAX - 3) - 4 * o),
        (0u64..16).prop_map(|o| 4 * o),
    ]
}

/// A site, aligned three times out of four.
fn site() -> impl Strategy<Value = u64> {
    prop_oneof![3 => aligned_site(), 1 => any::<u64>()]
}

/// A branch offset, weighted towards the ±128 MiB limits and mostly a multiple of 4.
fn offset() -> impl Strategy<Value = i64> {
    prop_oneof![
        (-64i64..64).prop_map(|w| 4 * w),
        (-8i64..8).prop_map(|w| MIN_OFFSET + 4 * w),
        (-8i64..8).prop_map(|w| MAX_OFFSET + 4 * w),
        (-(1i64 << 26)..(1 << 26)).prop_map(|w| 4 * w),
        any::<i64>().prop_map(|o| o & !3),
        any::<i64>(),
    ]
}

/// An instruction at a site, as (site, instruction, offset of its branch if any).
fn insn_at_site() -> impl Strategy<Value = (u64, Insn, i64)> {
    (site(), 0usize..6, offset(), any::<u16>()).prop_map(|(site, kind, d, imm)| {
        let target = site.wrapping_add(d as u64);
        let insn = match kind {
            0 => Insn::Nop,
            1 => Insn::B { target },
            2 => Insn::Bl { target },
            3 => Insn::MovX9X30,
            4 => Insn::Ret,
            _ => Insn::Brk { imm },
        };
        (site, insn, d)
    })
}

/// An instruction that encodes at its site.
fn encodable() -> impl Strategy<Value = (u64, Insn)> {
    insn_at_site()
        .prop_map(|(site, insn, _)| (site, insn))
        .prop_filter("encodable", |(site, insn)| insn.encode_word(*site).is_ok())
}

/// Words near the supported encodings (bit flips, any branch offset, any `BRK` immediate) or
/// random.
fn word() -> impl Strategy<Value = u32> {
    let canonical = prop::sample::select(vec![
        0xd503_201fu32,
        0x1400_0000,
        0x9400_0000,
        0xaa1e_03e9,
        0xd65f_03c0,
        0xd420_0100,
    ]);
    prop_oneof![
        any::<u32>(),
        (canonical.clone(), 0u32..32).prop_map(|(w, bit)| w ^ (1 << bit)),
        (canonical.clone(), 0u32..32, 0u32..32).prop_map(|(w, a, b)| w ^ (1 << a) ^ (1 << b)),
        (canonical, any::<u32>()).prop_map(|(w, noise)| w ^ (noise & noise.rotate_left(7))),
        any::<u32>().prop_map(|imm| 0x1400_0000 | (imm & 0x03ff_ffff)),
        any::<u32>().prop_map(|imm| 0x9400_0000 | (imm & 0x03ff_ffff)),
        any::<u16>().prop_map(|imm| 0xd420_0000 | (u32::from(imm) << 5)),
    ]
}

// ---------------------------------------------------------------------------------------------
// The independent decoder.

fn yaxpeax(word: u32) -> Option<Instruction> {
    let bytes = word.to_le_bytes();
    InstDecoder::default()
        .decode(&mut U8Reader::new(&bytes))
        .ok()
}

/// What yaxpeax reads `word` at `site` as, in our terms, if it is one of our instructions.
///
/// This works on yaxpeax's structured opcode and operands, not on its text: yaxpeax 0.3 prints
/// every hint whose number is 0 modulo 64 as "nop" (for example `HINT #64`, `d503281f`), while
/// only `HINT #0` is a NOP.
fn ours_by_yaxpeax(site: u64, word: u32) -> Option<Insn> {
    let insn = yaxpeax(word)?;
    let target = |operand| match operand {
        Operand::PCOffset(offset) => site.wrapping_add(offset as u64),
        other => panic!("{word:#010x}: branch operand {other:?}"),
    };
    let [a, b, c, d] = insn.operands;
    match (insn.opcode, a, b, c, d) {
        (Opcode::HINT, Operand::ControlReg(0), Operand::Immediate(0), Operand::Nothing, _) => {
            Some(Insn::Nop)
        }
        (Opcode::B, offset, Operand::Nothing, ..) => Some(Insn::B {
            target: target(offset),
        }),
        (Opcode::BL, offset, Operand::Nothing, ..) => Some(Insn::Bl {
            target: target(offset),
        }),
        (
            Opcode::ORR,
            Operand::Register(SizeCode::X, 9),
            Operand::Register(SizeCode::X, 31),
            Operand::RegShift(ShiftStyle::LSL, 0, SizeCode::X, 30),
            Operand::Nothing,
        ) => Some(Insn::MovX9X30),
        (Opcode::RET, Operand::Register(SizeCode::X, 30), Operand::Nothing, ..) => Some(Insn::Ret),
        (Opcode::BRK, Operand::Imm16(imm), Operand::Nothing, ..) => Some(Insn::Brk { imm }),
        _ => None,
    }
}

#[test]
fn yaxpeax_agrees_on_exact_cases() {
    for (insn, site, word) in exact_cases() {
        assert_eq!(ours_by_yaxpeax(site, word), Some(insn), "{word:#010x}");
    }
    // The text too, for the record.
    let text = |w| yaxpeax(w).unwrap().to_string();
    assert_eq!(text(0xd503_201f), "nop");
    assert_eq!(text(0xaa1e_03e9), "mov x9, x30");
    assert_eq!(text(0xd65f_03c0), "ret");
    assert_eq!(text(0xd420_0100), "brk #0x8");
    // The printing quirk that `ours_by_yaxpeax` avoids: our decoder rightly rejects this word.
    assert_eq!(text(0xd503_281f), "nop");
    assert_eq!(ours_by_yaxpeax(KTEXT, 0xd503_281f), None);
}

/// What the instruction yaxpeax reads as `word` does to `regs` at `site`, modelled on Linux's
/// arch/arm64/kernel/probes/simulate-insn.c.
fn model_emulate(site: u64, word: u32, regs: &mut FakeRegs) -> Result<(), InsnError> {
    let insn = yaxpeax(word).expect("decodable");
    let next = site.wrapping_add(4);
    match (insn.opcode, insn.operands) {
        (Opcode::HINT, _) => regs.pc = next,
        (Opcode::B, [Operand::PCOffset(offset), ..]) => regs.pc = site.wrapping_add(offset as u64),
        (Opcode::BL, [Operand::PCOffset(offset), ..]) => {
            regs.x[30] = next;
            regs.pc = site.wrapping_add(offset as u64);
        }
        (
            Opcode::ORR,
            [Operand::Register(SizeCode::X, rd), Operand::Register(SizeCode::X, 31), Operand::RegShift(ShiftStyle::LSL, 0, SizeCode::X, rm), _],
        ) => {
            regs.x[usize::from(rd)] = regs.x[usize::from(rm)];
            regs.pc = next;
        }
        (Opcode::RET, [Operand::Register(SizeCode::X, rn), ..]) => {
            regs.pc = regs.x[usize::from(rn)];
        }
        (Opcode::BRK, _) => return Err(InsnError::Unsupported),
        other => panic!("no model for {other:?}"),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Property tests.

proptest! {
    #![proptest_config(config())]

    /// Encoding succeeds exactly when site and target are aligned and the target is in reach, and
    /// then decodes back (10,000 cases).
    #[test]
    fn prop_encode_errs_exactly_when_misaligned_or_out_of_range((site, insn, d) in insn_at_site()) {
        let branch = matches!(insn, Insn::B { .. } | Insn::Bl { .. });
        let expected = if site % 4 != 0 || (branch && d % 4 != 0) {
            Err(InsnError::Misaligned)
        } else if branch && !(MIN_OFFSET..=MAX_OFFSET).contains(&d) {
            Err(InsnError::OutOfRange)
        } else {
            Ok(())
        };
        let word = insn.encode_word(site);
        prop_assert_eq!(word.map(|_| ()), expected);
        prop_assert_eq!(insn.encode(site).map(|_| ()), expected);
        if let Ok(word) = word {
            let bytes = insn.encode(site).unwrap();
            prop_assert_eq!(bytes.as_slice(), &word.to_le_bytes());
            prop_assert_eq!(Insn::decode_word(site, word), Ok(insn));
            prop_assert_eq!(Insn::decode(site, &word.to_le_bytes()), Ok(insn));
        }
    }

    /// Decoding any word never panics, and what decodes re-encodes to the same word (10,000
    /// cases).
    #[test]
    fn prop_decode_arbitrary_words_reencodes(site in site(), word in word()) {
        match Insn::decode_word(site, word) {
            Ok(insn) => {
                prop_assert_eq!(insn.encode_word(site), Ok(word));
                prop_assert_eq!(Insn::decode(site, &word.to_le_bytes()), Ok(insn));
            }
            Err(InsnError::Misaligned) => prop_assert!(site % 4 != 0),
            Err(InsnError::Unsupported) => prop_assert!(site % 4 == 0),
            Err(err) => prop_assert!(false, "unexpected {:?}", err),
        }
    }

    /// Decoding any byte string never panics, and only 4 bytes can decode (10,000 cases).
    #[test]
    fn prop_decode_arbitrary_bytes(
        site in site(),
        bytes in prop::collection::vec(any::<u8>(), 0..9),
    ) {
        let result = Insn::decode(site, &bytes);
        match bytes.len() {
            0..=3 => prop_assert_eq!(result, Err(InsnError::Truncated)),
            4 => prop_assert_eq!(
                result,
                Insn::decode_word(site, u32::from_le_bytes(bytes[..].try_into().unwrap()))
            ),
            _ => prop_assert_eq!(result, Err(InsnError::LengthMismatch)),
        }
    }

    /// Yaxpeax decodes every encodable instruction, at any site, as that instruction (10,000
    /// cases).
    #[test]
    fn prop_yaxpeax_agrees_on_encodings((site, insn) in encodable()) {
        let word = insn.encode_word(site).unwrap();
        prop_assert_eq!(ours_by_yaxpeax(site, word), Some(insn), "{:#010x}", word);
    }

    /// Our decoder accepts a word exactly when yaxpeax reads it as one of our instructions, and
    /// then as the same one (10,000 cases).
    #[test]
    fn prop_yaxpeax_agrees_on_words(site in aligned_site(), word in word()) {
        prop_assert_eq!(
            Insn::decode_word(site, word).ok(),
            ours_by_yaxpeax(site, word),
            "{:#010x}",
            word
        );
    }

    /// The acceptance function accepts a word exactly when yaxpeax reads it as one of the listed
    /// instructions (ours but `BRK`), and then as the same one; a misaligned site is refused
    /// whatever the word (10,000 cases).
    #[test]
    fn prop_yaxpeax_agrees_on_accepted_words(site in site(), word in word()) {
        let accepted = Listed::accept(site, &word.to_le_bytes());
        prop_assert_eq!(accepted, Listed::accept_word(site, word));
        if site % 4 != 0 {
            prop_assert_eq!(accepted, Err(InsnError::Misaligned));
            return Ok(());
        }
        let listed_by_yaxpeax =
            ours_by_yaxpeax(site, word).filter(|insn| !matches!(insn, Insn::Brk { .. }));
        prop_assert_eq!(accepted.map(|l| l.insn()).ok(), listed_by_yaxpeax, "{:#010x}", word);
        match accepted {
            Ok(listed) => prop_assert_eq!(listed.site(), site),
            Err(e) => prop_assert_eq!(e, InsnError::Unsupported),
        }
    }

    /// Every accepted word emulates at its site, infallibly, as the model driven by yaxpeax's
    /// reading says (10,000 cases).
    #[test]
    fn prop_listed_emulation_matches_model(
        site in aligned_site(),
        word in word(),
        seed in any::<u64>(),
    ) {
        if let Ok(listed) = Listed::accept(site, &word.to_le_bytes()) {
            let mut regs = FakeRegs::trapped_at(site, seed);
            listed.emulate(&mut regs);
            let mut want = FakeRegs::trapped_at(site, seed);
            prop_assert_eq!(model_emulate(site, word, &mut want), Ok(()));
            prop_assert_eq!(regs, want);
        }
    }

    /// Every encodable instruction but `BRK` is accepted at its site, and its emulation there,
    /// which cannot fail, has the effects of `Insn::emulate` (10,000 cases).
    #[test]
    fn prop_listed_emulation_is_insn_emulation((site, insn) in encodable(), seed in any::<u64>()) {
        let accepted = Listed::accept(site, insn.encode(site).unwrap().as_slice());
        if let Insn::Brk { .. } = insn {
            prop_assert_eq!(accepted, Err(InsnError::Unsupported));
            return Ok(());
        }
        let listed = accepted.unwrap();
        prop_assert_eq!(listed.insn(), insn);
        let mut regs = FakeRegs::trapped_at(site, seed);
        listed.emulate(&mut regs);
        let mut want = FakeRegs::trapped_at(site, seed);
        prop_assert_eq!(insn.emulate(site, &mut want), Ok(()));
        prop_assert_eq!(regs, want);
    }

    /// Emulation matches a model driven by yaxpeax's reading of the encoded instruction (10,000
    /// cases).
    #[test]
    fn prop_emulation_matches_model((site, insn) in encodable(), seed in any::<u64>()) {
        let mut regs = FakeRegs::trapped_at(site, seed);
        let result = insn.emulate(site, &mut regs);
        let mut want = FakeRegs::trapped_at(site, seed);
        let want_result = model_emulate(site, insn.encode_word(site).unwrap(), &mut want);
        prop_assert_eq!(result, want_result);
        prop_assert_eq!(regs, want);
    }
}
