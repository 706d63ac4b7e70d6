// SPDX-License-Identifier: GPL-2.0

//! Host tests of the x86-64 instruction codec and `INT3` emulation in `arch/x86/insn.rs`.
//!
//! Unit tests pin exact bytes, range limits and errors; property tests (proptest, [`CASES`] cases
//! each) check round trips and robustness; differential tests check every encoding and every
//! accepted byte string against `iced-x86`, an independent decoder, and check emulation against
//! iced's view of each instruction's control flow.

use iced_x86::{Code, Mnemonic};
use proptest::prelude::*;
use proptest::test_runner::Config;
use textpoke_core::insn::{InsnError, MAX_INSN_LEN};
use textpoke_core::x86::{Insn, Kind, Listed, GUARD};

/// Cases per property: 10,000, which keeps the whole file at a few seconds in release mode.
const CASES: u32 = 10_000;

/// A typical kernel text address.
const KTEXT: u64 = 0xffff_ffff_8100_0000;

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

mod common;

use common::{iced_decode_all, FakeRegs, FakeStack};

/// The state of a CPU that hit the guard at `site`: `ip` is just past the `INT3`.
fn trapped_at(site: u64, sp: u64) -> FakeRegs {
    FakeRegs {
        ip: site.wrapping_add(1),
        sp,
    }
}

// ---------------------------------------------------------------------------------------------
// Unit tests: exact bytes and round trips.

fn exact_cases() -> Vec<(Insn, u64, Vec<u8>)> {
    let s = KTEXT;
    vec![
        (Insn::Int3, s, vec![0xcc]),
        (Insn::Nop2, s, vec![0x66, 0x90]),
        (Insn::Nop5, s, vec![0x0f, 0x1f, 0x44, 0x00, 0x00]),
        // `jmp .` is `eb fe`.
        (Insn::JmpRel8 { target: s }, s, vec![0xeb, 0xfe]),
        (Insn::JmpRel8 { target: s + 2 + 5 }, s, vec![0xeb, 0x05]),
        (
            Insn::JmpRel32 { target: s + 0x1000 },
            s,
            vec![0xe9, 0xfb, 0x0f, 0x00, 0x00],
        ),
        (
            Insn::JmpRel32 { target: s - 0x10 },
            s,
            vec![0xe9, 0xeb, 0xff, 0xff, 0xff],
        ),
        (
            Insn::CallRel32 { target: s + 0x1000 },
            s,
            vec![0xe8, 0xfb, 0x0f, 0x00, 0x00],
        ),
        (
            Insn::CallRel32 { target: s + 5 },
            s,
            vec![0xe8, 0x00, 0x00, 0x00, 0x00],
        ),
        (Insn::Ret { len: 1 }, s, vec![0xc3]),
        (Insn::Ret { len: 2 }, s, vec![0xc3, 0xcc]),
        (Insn::Ret { len: 3 }, s, vec![0xc3, 0xcc, 0xcc]),
        (Insn::Ret { len: 4 }, s, vec![0xc3, 0xcc, 0xcc, 0xcc]),
        (Insn::Ret { len: 5 }, s, vec![0xc3, 0xcc, 0xcc, 0xcc, 0xcc]),
        // Address arithmetic wraps: the end of a `JMP rel8` at the top of memory is 0.
        (
            Insn::JmpRel8 { target: 0x10 },
            u64::MAX - 1,
            vec![0xeb, 0x10],
        ),
        (
            Insn::JmpRel32 { target: u64::MAX },
            0,
            vec![0xe9, 0xfa, 0xff, 0xff, 0xff],
        ),
    ]
}

#[test]
fn exact_bytes_and_round_trip() {
    for (insn, site, bytes) in exact_cases() {
        let encoded = insn.encode(site).unwrap();
        assert_eq!(encoded.as_slice(), &bytes[..], "{insn:?} at {site:#x}");
        assert_eq!(encoded.len(), insn.len(), "{insn:?}");
        assert_eq!(encoded.head(), bytes[0]);
        assert_eq!(encoded.tail(), &bytes[1..]);
        assert_eq!(Insn::decode(site, &bytes), Ok(insn), "{bytes:02x?}");
    }
}

#[test]
fn guard_is_int3() {
    assert_eq!(GUARD, 0xcc);
    assert_eq!(Insn::Int3.encode(0).unwrap().as_slice(), &[GUARD]);
}

#[test]
fn lengths() {
    assert_eq!(Insn::Int3.len(), 1);
    assert_eq!(Insn::Nop2.len(), 2);
    assert_eq!(Insn::Nop5.len(), 5);
    assert_eq!(Insn::JmpRel8 { target: 0 }.len(), 2);
    assert_eq!(Insn::JmpRel32 { target: 0 }.len(), 5);
    assert_eq!(Insn::CallRel32 { target: 0 }.len(), 5);
    for len in 1..=5u8 {
        assert_eq!(Insn::Ret { len }.len(), usize::from(len));
    }
    assert_eq!(MAX_INSN_LEN, 5);
}

#[test]
fn kinds_and_names() {
    let insns = [
        Insn::Int3,
        Insn::Nop2,
        Insn::Nop5,
        Insn::JmpRel8 { target: 0 },
        Insn::JmpRel32 { target: 0 },
        Insn::CallRel32 { target: 0 },
        Insn::Ret { len: 1 },
    ];
    assert_eq!(Kind::ALL.len(), insns.len());
    for (i, (insn, kind)) in insns.iter().zip(Kind::ALL).enumerate() {
        assert_eq!(insn.kind(), kind);
        assert_eq!(kind as usize, i, "Kind::ALL is in declaration order");
    }
    let names: Vec<_> = Kind::ALL.iter().map(|k| k.name()).collect();
    assert_eq!(
        names,
        [
            "int3",
            "nop2",
            "nop5",
            "jmp_rel8",
            "jmp_rel32",
            "call_rel32",
            "ret"
        ]
    );
}

/// With return thunks (`CONFIG_MITIGATION_RETHUNK`), `arch/x86/mod.rs` refuses to accept or
/// encode exactly the kinds [`Kind::listed_with`] takes off: `RET`, which would bypass the thunk.
/// The `mitigations` boot takes that branch (return thunks, clang 19); this checks the policy
/// on both sides on the host: it fails if the policy lists `RET` with thunks, or drops anything
/// else.
#[test]
fn return_thunks_take_ret_off_the_list() {
    for kind in Kind::ALL {
        assert!(
            kind.listed_with(false),
            "{kind:?} is listed without return thunks"
        );
        assert_eq!(
            kind.listed_with(true),
            kind != Kind::Ret,
            "{kind:?} with return thunks"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Unit tests: range limits at the exact boundaries.

#[test]
fn rel8_bounds() {
    for site in [KTEXT, 0, 1, u64::MAX - 1, u64::MAX] {
        let end = site.wrapping_add(2);
        let at = |d: i64| end.wrapping_add(d as u64);
        let lo = Insn::JmpRel8 { target: at(-128) };
        let hi = Insn::JmpRel8 { target: at(127) };
        assert_eq!(lo.encode(site).unwrap().as_slice(), &[0xeb, 0x80]);
        assert_eq!(hi.encode(site).unwrap().as_slice(), &[0xeb, 0x7f]);
        assert_eq!(Insn::decode(site, &[0xeb, 0x80]), Ok(lo));
        assert_eq!(Insn::decode(site, &[0xeb, 0x7f]), Ok(hi));
        for d in [-129, 128, i64::MIN, i64::MAX, 1 << 32] {
            assert_eq!(
                Insn::JmpRel8 { target: at(d) }.encode(site),
                Err(InsnError::OutOfRange),
                "site {site:#x} displacement {d}"
            );
        }
    }
}

#[test]
fn rel32_bounds() {
    for site in [KTEXT, 0, u64::MAX - 4, u64::MAX] {
        let end = site.wrapping_add(5);
        let at = |d: i64| end.wrapping_add(d as u64);
        for (make, opcode) in [
            (
                (|target| Insn::JmpRel32 { target }) as fn(u64) -> Insn,
                0xe9,
            ),
            (|target| Insn::CallRel32 { target }, 0xe8),
        ] {
            let lo = make(at(i32::MIN.into()));
            let hi = make(at(i32::MAX.into()));
            assert_eq!(
                lo.encode(site).unwrap().as_slice(),
                &[opcode, 0x00, 0x00, 0x00, 0x80]
            );
            assert_eq!(
                hi.encode(site).unwrap().as_slice(),
                &[opcode, 0xff, 0xff, 0xff, 0x7f]
            );
            assert_eq!(Insn::decode(site, &[opcode, 0, 0, 0, 0x80]), Ok(lo));
            assert_eq!(
                Insn::decode(site, &[opcode, 0xff, 0xff, 0xff, 0x7f]),
                Ok(hi)
            );
            for d in [
                i64::from(i32::MIN) - 1,
                i64::from(i32::MAX) + 1,
                i64::MIN,
                i64::MAX,
            ] {
                assert_eq!(
                    make(at(d)).encode(site),
                    Err(InsnError::OutOfRange),
                    "site {site:#x} displacement {d}"
                );
            }
        }
    }
}

#[test]
fn ret_length_limits() {
    for len in [0, 6, u8::MAX] {
        assert_eq!(Insn::Ret { len }.encode(KTEXT), Err(InsnError::Unsupported));
    }
}

// ---------------------------------------------------------------------------------------------
// Unit tests: decoding errors.

#[test]
fn decode_errors() {
    use InsnError::*;
    let cases: &[(&[u8], InsnError)] = &[
        (&[], Truncated),
        // Strict prefixes of supported instructions.
        (&[0x66], Truncated),
        (&[0x0f], Truncated),
        (&[0x0f, 0x1f, 0x44, 0x00], Truncated),
        (&[0xeb], Truncated),
        (&[0xe9, 0x00, 0x00, 0x00], Truncated),
        (&[0xe8], Truncated),
        // A supported instruction followed by more bytes.
        (&[0xcc, 0xcc], LengthMismatch),
        (&[0xcc, 0x1f, 0x44, 0x00, 0x00], LengthMismatch),
        (&[0x66, 0x90, 0x90], LengthMismatch),
        (&[0x0f, 0x1f, 0x44, 0x00, 0x00, 0x00], LengthMismatch),
        (&[0xeb, 0x00, 0xcc], LengthMismatch),
        (&[0xe9, 0, 0, 0, 0, 0xcc], LengthMismatch),
        (&[0xe8, 0, 0, 0, 0, 0xcc], LengthMismatch),
        // Padding after a `RET` must be `INT3` only and fit in `MAX_INSN_LEN`.
        (&[0xc3, 0x90], LengthMismatch),
        (&[0xc3, 0xcc, 0xcc, 0x00], LengthMismatch),
        (&[0xc3, 0xc3], LengthMismatch),
        (&[0xc3, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc], LengthMismatch),
        // Unsupported instructions, including other encodings of supported ones.
        (&[0x90], Unsupported),
        (&[0x66, 0x91], Unsupported),
        (&[0x0f, 0x0b], Unsupported),
        (&[0x0f, 0x1f, 0x40, 0x00], Unsupported),
        (&[0x0f, 0x1f, 0x44, 0x00, 0x01], Unsupported),
        (&[0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00], Unsupported),
        (&[0xc2, 0x00, 0x00], Unsupported),
        (&[0xcd, 0x03], Unsupported),
        (&[0x3e, 0xe9, 0, 0, 0, 0], Unsupported),
        (&[0xff, 0xe0], Unsupported),
    ];
    for &(bytes, err) in cases {
        assert_eq!(Insn::decode(KTEXT, bytes), Err(err), "{bytes:02x?}");
    }
}

/// The acceptance function takes every listed exact case as itself, and refuses `INT3`.
#[test]
fn accept_exact_cases() {
    for (insn, site, bytes) in exact_cases() {
        let accepted = Listed::accept(site, &bytes);
        if insn == Insn::Int3 {
            assert_eq!(accepted, Err(InsnError::Unsupported));
            continue;
        }
        let listed = accepted.unwrap_or_else(|e| panic!("{bytes:02x?}: {e:?}"));
        assert_eq!(listed.insn(), insn);
        assert_eq!(listed.site(), site);
        assert_eq!(listed.kind(), insn.kind());
        assert_eq!(listed.len(), bytes.len());
    }
}

/// The acceptance function refuses as the decoder does, except that anything starting with
/// `INT3` is unsupported, whatever its length.
#[test]
fn accept_errors() {
    use InsnError::*;
    let cases: &[(&[u8], InsnError)] = &[
        (&[], Truncated),
        (&[0x66], Truncated),
        (&[0x0f, 0x1f, 0x44, 0x00], Truncated),
        (&[0xe8], Truncated),
        (&[0x66, 0x90, 0x90], LengthMismatch),
        (&[0xeb, 0x00, 0xcc], LengthMismatch),
        (&[0xc3, 0x90], LengthMismatch),
        (&[0xc3, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc], LengthMismatch),
        (&[0xcc], Unsupported),
        (&[0xcc, 0xcc], Unsupported),
        (&[0xcc, 0x1f, 0x44, 0x00, 0x00], Unsupported),
        (&[0xcc, 0xe9, 0, 0, 0, 0], Unsupported),
        (&[0x90], Unsupported),
        (&[0x0f, 0x1f, 0x40, 0x00], Unsupported),
        (&[0x3e, 0xe9, 0, 0, 0, 0], Unsupported),
        (&[0xcd, 0x03], Unsupported),
    ];
    for &(bytes, err) in cases {
        assert_eq!(Listed::accept(KTEXT, bytes), Err(err), "{bytes:02x?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Unit tests: emulation.

/// Emulates `insn` at `site` on a CPU trapped there with stack pointer `sp`.
fn emulate(insn: Insn, site: u64, sp: u64) -> (Result<(), InsnError>, FakeRegs, FakeStack) {
    let mut regs = trapped_at(site, sp);
    let mut stack = FakeStack::default();
    stack.words.insert(sp, 0xffff_ffff_8123_4567);
    let result = insn.emulate(site, &mut regs, &mut stack);
    (result, regs, stack)
}

const SP: u64 = 0xffff_c900_0001_3f38;

#[test]
fn emulate_nops_skip_the_site() {
    for insn in [Insn::Nop2, Insn::Nop5] {
        let (result, regs, stack) = emulate(insn, KTEXT, SP);
        assert_eq!(result, Ok(()));
        assert_eq!(
            regs,
            FakeRegs {
                ip: KTEXT + insn.len() as u64,
                sp: SP
            }
        );
        assert_eq!((stack.reads.get(), stack.writes.len()), (0, 0));
    }
}

#[test]
fn emulate_jumps_go_to_target() {
    for insn in [
        Insn::JmpRel8 {
            target: KTEXT - 100,
        },
        Insn::JmpRel32 {
            target: KTEXT + 0x12_3456,
        },
    ] {
        let (result, regs, stack) = emulate(insn, KTEXT, SP);
        assert_eq!(result, Ok(()));
        let (Insn::JmpRel8 { target } | Insn::JmpRel32 { target }) = insn else {
            unreachable!()
        };
        assert_eq!(regs, FakeRegs { ip: target, sp: SP });
        assert_eq!((stack.reads.get(), stack.writes.len()), (0, 0));
    }
}

#[test]
fn emulate_call_pushes_exactly_the_return_address() {
    let target = KTEXT + 0x4000;
    let (result, regs, stack) = emulate(Insn::CallRel32 { target }, KTEXT, SP);
    assert_eq!(result, Ok(()));
    assert_eq!(
        regs,
        FakeRegs {
            ip: target,
            sp: SP - 8
        }
    );
    // One word, the address after the 5-byte call, right below the interrupted stack pointer.
    assert_eq!(stack.writes, [(SP - 8, KTEXT + 5)]);
    assert_eq!(stack.reads.get(), 0);
}

#[test]
fn emulate_call_wraps() {
    let (result, regs, stack) = emulate(Insn::CallRel32 { target: 0 }, u64::MAX - 4, 4);
    assert_eq!(result, Ok(()));
    assert_eq!(
        regs,
        FakeRegs {
            ip: 0,
            sp: u64::MAX - 3
        }
    );
    assert_eq!(stack.writes, [(u64::MAX - 3, 0)]);
}

#[test]
fn emulate_ret_pops() {
    for len in 1..=5 {
        let (result, regs, stack) = emulate(Insn::Ret { len }, KTEXT, SP);
        assert_eq!(result, Ok(()));
        assert_eq!(
            regs,
            FakeRegs {
                ip: 0xffff_ffff_8123_4567,
                sp: SP + 8
            }
        );
        assert_eq!((stack.reads.get(), stack.writes.len()), (1, 0));
    }
}

#[test]
fn emulate_call_then_ret_returns_after_the_call() {
    let mut regs = trapped_at(KTEXT, SP);
    let mut stack = FakeStack::default();
    let callee = KTEXT + 0x800;
    Insn::CallRel32 { target: callee }
        .emulate(KTEXT, &mut regs, &mut stack)
        .unwrap();
    Insn::Ret { len: 5 }
        .emulate(callee, &mut regs, &mut stack)
        .unwrap();
    assert_eq!(
        regs,
        FakeRegs {
            ip: KTEXT + 5,
            sp: SP
        }
    );
}

#[test]
fn emulate_refuses_what_it_must_not_emulate() {
    let refused = [
        // Someone else's breakpoint: the kernel must deliver it.
        (Insn::Int3, InsnError::Unsupported),
        (Insn::Ret { len: 0 }, InsnError::Unsupported),
        (Insn::Ret { len: 6 }, InsnError::Unsupported),
        (
            Insn::JmpRel8 {
                target: KTEXT + 2 + 128,
            },
            InsnError::OutOfRange,
        ),
        (
            Insn::CallRel32 {
                target: KTEXT - (1 << 40),
            },
            InsnError::OutOfRange,
        ),
    ];
    for (insn, err) in refused {
        let (result, regs, stack) = emulate(insn, KTEXT, SP);
        assert_eq!(result, Err(err), "{insn:?}");
        assert_eq!(
            regs,
            trapped_at(KTEXT, SP),
            "{insn:?} left the registers alone"
        );
        assert_eq!((stack.reads.get(), stack.writes.len()), (0, 0));
    }
}

// ---------------------------------------------------------------------------------------------
// Strategies.

fn site() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        (0u64..0x100_0000).prop_map(|o| KTEXT + o),
        (0u64..16).prop_map(|o| u64::MAX - o),
        0u64..16,
    ]
}

/// A displacement from the end of a branch, weighted towards the rel8 and rel32 limits.
fn displacement() -> impl Strategy<Value = i64> {
    let min32 = i64::from(i32::MIN);
    let max32 = i64::from(i32::MAX);
    prop_oneof![
        -140i64..140,
        (min32 - 8)..(min32 + 8),
        (max32 - 8)..(max32 + 8),
        any::<i32>().prop_map(i64::from),
        any::<i64>(),
    ]
}

/// An instruction at a site, as (site, instruction, displacement of its branch if any).
fn insn_at_site() -> impl Strategy<Value = (u64, Insn, i64)> {
    (site(), 0usize..7, displacement(), 0u8..=7).prop_map(|(site, kind, d, ret_len)| {
        let len = [1u64, 2, 5, 2, 5, 5, 1][kind];
        let target = site.wrapping_add(len).wrapping_add(d as u64);
        let insn = match kind {
            0 => Insn::Int3,
            1 => Insn::Nop2,
            2 => Insn::Nop5,
            3 => Insn::JmpRel8 { target },
            4 => Insn::JmpRel32 { target },
            5 => Insn::CallRel32 { target },
            _ => Insn::Ret { len: ret_len },
        };
        (site, insn, d)
    })
}

/// An instruction that encodes at its site.
fn encodable() -> impl Strategy<Value = (u64, Insn)> {
    insn_at_site()
        .prop_map(|(site, insn, _)| (site, insn))
        .prop_filter("encodable", |(site, insn)| insn.encode(*site).is_ok())
}

/// Byte strings near the supported encodings (mutated, truncated or extended) or random.
fn byte_strings() -> impl Strategy<Value = (u64, Vec<u8>)> {
    let random = (site(), prop::collection::vec(any::<u8>(), 0..8));
    let mutated = (encodable(), 0u8..6, any::<usize>(), any::<u8>()).prop_map(
        |((site, insn), op, at, byte)| {
            let mut bytes = insn.encode(site).unwrap().as_slice().to_vec();
            let i = at % bytes.len();
            match op {
                0 => {}
                1 => bytes.truncate(at % (bytes.len() + 1)),
                2 => bytes.push(byte),
                3 => bytes.push(GUARD),
                4 => bytes[i] = byte,
                _ => bytes[i] ^= 1 << (at % 8),
            }
            (site, bytes)
        },
    );
    prop_oneof![1 => random, 3 => mutated]
}

// ---------------------------------------------------------------------------------------------
// The independent decoder.

/// Asserts that iced reads `bytes` at `site` as `insn`, instruction for instruction.
fn assert_iced_agrees(site: u64, bytes: &[u8], insn: Insn) {
    let decoded = iced_decode_all(site, bytes);
    let first = decoded
        .first()
        .unwrap_or_else(|| panic!("iced rejects {bytes:02x?} ({insn:?})"));
    let expect = |mnemonic, code: Option<Code>, len: usize| {
        assert_eq!(decoded.len(), 1, "{bytes:02x?} is one instruction");
        assert_eq!(first.mnemonic(), mnemonic, "{bytes:02x?}");
        if let Some(code) = code {
            assert_eq!(first.code(), code, "{bytes:02x?}");
        }
        assert_eq!(first.len(), len, "{bytes:02x?}");
        assert_eq!(first.len(), insn.len());
    };
    match insn {
        Insn::Int3 => expect(Mnemonic::Int3, Some(Code::Int3), 1),
        // Iced reads the kernel's NOPs as `nop ax` (`66 90`, the prefixed `xchg eax, eax`
        // alias) and `nop dword ptr [rax+rax]`.
        Insn::Nop2 => expect(Mnemonic::Nop, Some(Code::Nopw), 2),
        Insn::Nop5 => expect(Mnemonic::Nop, Some(Code::Nop_rm32), 5),
        Insn::JmpRel8 { target } => {
            expect(Mnemonic::Jmp, Some(Code::Jmp_rel8_64), 2);
            assert_eq!(first.near_branch_target(), target, "{bytes:02x?}");
        }
        Insn::JmpRel32 { target } => {
            expect(Mnemonic::Jmp, Some(Code::Jmp_rel32_64), 5);
            assert_eq!(first.near_branch_target(), target, "{bytes:02x?}");
        }
        Insn::CallRel32 { target } => {
            expect(Mnemonic::Call, Some(Code::Call_rel32_64), 5);
            assert_eq!(first.near_branch_target(), target, "{bytes:02x?}");
        }
        Insn::Ret { len } => {
            // Iced sees the `RET` and then each padding byte as an `INT3` of its own.
            assert_eq!(decoded.len(), usize::from(len), "{bytes:02x?}");
            assert_eq!((first.code(), first.len()), (Code::Retnq, 1));
            for pad in &decoded[1..] {
                assert_eq!((pad.code(), pad.len()), (Code::Int3, 1), "{bytes:02x?}");
            }
        }
    }
}

#[test]
fn iced_agrees_on_exact_cases() {
    for (insn, site, bytes) in exact_cases() {
        assert_iced_agrees(site, &bytes, insn);
    }
}

// ---------------------------------------------------------------------------------------------
// Property tests.

proptest! {
    #![proptest_config(config())]

    /// Encoding succeeds exactly when the displacement fits, and then decodes back (10,000 cases).
    #[test]
    fn prop_encode_errs_exactly_when_out_of_range((site, insn, d) in insn_at_site()) {
        let expected = match insn {
            Insn::JmpRel8 { .. } if i8::try_from(d).is_err() => Err(InsnError::OutOfRange),
            Insn::JmpRel32 { .. } | Insn::CallRel32 { .. } if i32::try_from(d).is_err() => {
                Err(InsnError::OutOfRange)
            }
            Insn::Ret { len } if len == 0 || usize::from(len) > MAX_INSN_LEN => {
                Err(InsnError::Unsupported)
            }
            _ => Ok(()),
        };
        let encoded = insn.encode(site);
        prop_assert_eq!(encoded.map(|_| ()), expected);
        if let Ok(bytes) = encoded {
            prop_assert_eq!(bytes.len(), insn.len());
            prop_assert_eq!(Insn::decode(site, bytes.as_slice()), Ok(insn));
        }
    }

    /// Decoding any bytes never panics, and what decodes re-encodes to the same bytes (10,000
    /// cases).
    #[test]
    fn prop_decode_arbitrary_bytes_reencodes((site, bytes) in byte_strings()) {
        match Insn::decode(site, &bytes) {
            Ok(insn) => {
                let encoded = insn.encode(site);
                prop_assert_eq!(encoded.as_ref().map(|b| b.as_slice()), Ok(&bytes[..]));
            }
            Err(InsnError::Truncated) => prop_assert!(bytes.len() < MAX_INSN_LEN),
            Err(InsnError::LengthMismatch) => prop_assert!(bytes.len() > 1),
            Err(InsnError::Unsupported) => prop_assert!(!bytes.is_empty()),
            Err(err) => prop_assert!(false, "unexpected {:?}", err),
        }
    }

    /// Iced decodes every encodable instruction, at any site, as that instruction (10,000
    /// cases).
    #[test]
    fn prop_iced_agrees_on_encodings((site, insn) in encodable()) {
        let bytes = insn.encode(site).unwrap();
        assert_iced_agrees(site, bytes.as_slice(), insn);
    }

    /// Whatever bytes our decoder accepts, iced reads as the same instruction; and wherever iced
    /// reads one of our unprefixed opcodes as exactly the instruction filling the bytes, our
    /// decoder accepts it (10,000 cases).
    #[test]
    fn prop_iced_agrees_on_accepted_bytes((site, bytes) in byte_strings()) {
        let ours = Insn::decode(site, &bytes);
        if let Ok(insn) = ours {
            assert_iced_agrees(site, &bytes, insn);
        }
        // The converse holds only for our one-byte opcodes: iced also reads other NOP
        // encodings and prefixed branches, which the codec rejects on purpose.
        let decoded = iced_decode_all(site, &bytes);
        let total: usize = decoded.iter().map(|i| i.len()).sum();
        if let Some(first) = decoded.first().filter(|_| total == bytes.len()) {
            let single = decoded.len() == 1;
            let padded_ret = first.code() == Code::Retnq
                && bytes.len() <= MAX_INSN_LEN
                // Iced also reads a prefixed `INT3` (such as `3e cc`), which is no padding.
                && decoded[1..].iter().all(|i| i.code() == Code::Int3 && i.len() == 1);
            let ours_by_iced = match first.code() {
                Code::Int3 if single && bytes[0] == 0xcc => Some(Insn::Int3),
                Code::Jmp_rel8_64 if single && bytes[0] == 0xeb => {
                    Some(Insn::JmpRel8 { target: first.near_branch_target() })
                }
                Code::Jmp_rel32_64 if single && bytes[0] == 0xe9 => {
                    Some(Insn::JmpRel32 { target: first.near_branch_target() })
                }
                Code::Call_rel32_64 if single && bytes[0] == 0xe8 => {
                    Some(Insn::CallRel32 { target: first.near_branch_target() })
                }
                Code::Retnq if padded_ret && bytes[0] == 0xc3 => {
                    Some(Insn::Ret { len: bytes.len() as u8 })
                }
                _ => None,
            };
            if let Some(insn) = ours_by_iced {
                prop_assert_eq!(ours, Ok(insn), "{:02x?}", bytes);
            }
        }
    }

    /// The acceptance function is the decoder without `INT3`: it accepts what the decoder
    /// decodes, but for `INT3`, and refuses anything starting with `INT3` as unsupported (10,000
    /// cases).
    #[test]
    fn prop_accept_is_decode_without_int3((site, bytes) in byte_strings()) {
        let accepted = Listed::accept(site, &bytes);
        let want = if bytes.first() == Some(&GUARD) {
            Err(InsnError::Unsupported)
        } else {
            Insn::decode(site, &bytes)
        };
        prop_assert_eq!(accepted.map(|l| l.insn()), want);
        prop_assert_ne!(accepted.map(|l| l.kind()), Ok(Kind::Int3));
        if let Ok(listed) = accepted {
            prop_assert_eq!(listed.site(), site);
            prop_assert_eq!(listed.len(), bytes.len());
            assert_iced_agrees(site, &bytes, listed.insn());
        }
    }

    /// Every encodable instruction but `INT3` is accepted at its site, and its emulation there,
    /// which cannot fail, has the effects of `Insn::emulate` (10,000 cases).
    #[test]
    fn prop_listed_emulation_is_insn_emulation(
        (site, insn) in encodable(),
        sp in any::<u64>(),
        top in any::<u64>(),
    ) {
        let bytes = insn.encode(site).unwrap();
        let accepted = Listed::accept(site, bytes.as_slice());
        if insn == Insn::Int3 {
            prop_assert_eq!(accepted, Err(InsnError::Unsupported));
            return Ok(());
        }
        let listed = accepted.unwrap();
        prop_assert_eq!(listed.insn(), insn);

        let mut regs = trapped_at(site, sp);
        let mut stack = FakeStack::default();
        stack.words.insert(sp, top);
        listed.emulate(&mut regs, &mut stack);

        let mut want_regs = trapped_at(site, sp);
        let mut want_stack = FakeStack::default();
        want_stack.words.insert(sp, top);
        prop_assert_eq!(insn.emulate(site, &mut want_regs, &mut want_stack), Ok(()));
        prop_assert_eq!(regs, want_regs);
        prop_assert_eq!(stack.writes, want_stack.writes);
        prop_assert_eq!(stack.reads.get(), want_stack.reads.get());
    }

    /// Emulation matches what iced says the instruction does to control flow and the stack
    /// (10,000 cases).
    #[test]
    fn prop_emulation_matches_iced_flow_control(
        (site, insn) in encodable(),
        sp in any::<u64>(),
        top in any::<u64>(),
    ) {
        let mut regs = trapped_at(site, sp);
        let mut stack = FakeStack::default();
        stack.words.insert(sp, top);
        let result = insn.emulate(site, &mut regs, &mut stack);

        let bytes = insn.encode(site).unwrap();
        let iced = iced_decode_all(site, bytes.as_slice())[0];
        // The control flow of each mnemonic, as the SDM defines it; iced supplies the mnemonic,
        // the next IP and the branch target. (Iced's own `FlowControl` needs its `instr_info`
        // feature, which this crate does not enable.)
        let (want_result, ip, new_sp, writes, reads) = match iced.mnemonic() {
            Mnemonic::Int3 => (Err(InsnError::Unsupported), site.wrapping_add(1), sp, vec![], 0),
            Mnemonic::Nop => (Ok(()), iced.next_ip(), sp, vec![], 0),
            Mnemonic::Jmp => (Ok(()), iced.near_branch_target(), sp, vec![], 0),
            Mnemonic::Call => {
                let pushed = sp.wrapping_sub(8);
                (Ok(()), iced.near_branch_target(), pushed, vec![(pushed, iced.next_ip())], 0)
            }
            Mnemonic::Ret => (Ok(()), top, sp.wrapping_add(8), vec![], 1),
            other => panic!("unexpected mnemonic {other:?}"),
        };
        prop_assert_eq!(result, want_result);
        prop_assert_eq!(regs, FakeRegs { ip, sp: new_sp });
        prop_assert_eq!(stack.writes, writes);
        prop_assert_eq!(stack.reads.get(), reads);
    }
}
