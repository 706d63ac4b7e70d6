// SPDX-License-Identifier: GPL-2.0

//! Host proof that the acceptance functions, `Listed::accept` in `arch/arm64/insn.rs` and
//! `arch/x86/insn.rs`, accept exactly the instructions `kernel/textpoke.h` lists, and that every
//! instruction they accept emulates at its site with the effect the CPU would have.
//!
//! - arm64: every one of the 2^32 words, at an aligned site, split across threads, with the
//!   number accepted per kind (`NOP`, `MOV X9, X30` and `RET` once each, `B` and `BL` 2^26
//!   times each, nothing else); misaligned sites and wrong lengths are refused.
//! - x86-64: every byte string of up to 2 bytes, and a generated corpus (random strings of 1 to 5
//!   bytes, and every listed form with random operands together with every single-byte mutation
//!   of it, at random sites), each against iced-x86's reading; and every listed form the encoder
//!   produces is accepted.
//!
//! The exhaustive tests take seconds in release mode and far longer in debug mode, where they
//! are ignored (run them with `--release`, or `--include-ignored`).

use std::collections::BTreeMap;
use std::thread;
use std::time::Instant;

use iced_x86::{Code, Mnemonic};
use textpoke_core::arm64;
use textpoke_core::insn::{InsnError, MAX_INSN_LEN};
use textpoke_core::x86;

mod common;

use common::{iced_decode_all, FakeRegs, FakeStack};

/// A small deterministic generator (SplitMix64), so that a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn byte(&mut self) -> u8 {
        self.next() as u8
    }

    /// A site anywhere, weighted towards kernel text and both ends of the address space (where
    /// branch targets wrap).
    fn site(&mut self, typical: u64) -> u64 {
        match self.below(4) {
            0 => self.next(),
            1 => typical.wrapping_add(self.below(0x100_0000)),
            2 => u64::MAX - self.below(16),
            _ => self.below(16),
        }
    }
}

/// The number of threads the exhaustive loops split their work across.
fn threads() -> u64 {
    thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

/// Prints a table of counts per kind name, for the test log (`--nocapture`).
fn print_counts(title: &str, counts: &[(&str, u64)]) {
    println!("{title}:");
    for (name, n) in counts {
        println!("  {name:<16} {n:>12}");
    }
}

// ---------------------------------------------------------------------------------------------
// arm64.

/// A typical arm64 kernel text address.
const ARM64_KTEXT: u64 = 0xffff_8000_8001_0000;

/// The registers that the listed arm64 instructions may touch, with a flag for any other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Arm64Regs {
    pc: u64,
    x9: u64,
    x30: u64,
    /// Set if emulation read or wrote any register but `x9` and `x30`.
    other: bool,
}

impl Arm64Regs {
    const X9: u64 = 0x9999_9999_9999_9999;
    const X30: u64 = 0xffff_8000_dead_bee0;

    fn trapped_at(site: u64) -> Self {
        Self {
            pc: site,
            x9: Self::X9,
            x30: Self::X30,
            other: false,
        }
    }
}

impl arm64::Regs for Arm64Regs {
    fn pc(&self) -> u64 {
        self.pc
    }
    fn set_pc(&mut self, pc: u64) {
        self.pc = pc;
    }
    fn x(&self, n: u8) -> u64 {
        match n {
            9 => self.x9,
            30 => self.x30,
            // `&self`: record the stray read by returning garbage the checks below reject.
            _ => 0x0bad_0bad_0bad_0bad,
        }
    }
    fn set_x(&mut self, n: u8, v: u64) {
        match n {
            9 => self.x9 = v,
            30 => self.x30 = v,
            _ => self.other = true,
        }
    }
}

/// Checks one accepted arm64 word against the architecture's encodings, written out here
/// independently of the codec: its kind, operands, re-encoding and emulated effect.
fn check_arm64_accepted(site: u64, word: u32, listed: arm64::Listed) {
    use arm64::{Insn, Kind};
    assert_eq!(listed.site(), site);
    assert_eq!(listed.len(), 4);
    assert_eq!(listed.insn().kind(), listed.kind());
    assert_eq!(listed.insn().encode_word(site), Ok(word), "{word:#010x}");
    // `B` is `000101 imm26`, `BL` is `100101 imm26`; the offset is imm26 * 4, sign-extended.
    let offset = i64::from(((word << 6) as i32) >> 4);
    let target = site.wrapping_add(offset as u64);
    let next = site.wrapping_add(4);
    let x30 = Arm64Regs::X30;
    let (insn, pc, x9, lr) = match word {
        0xd503_201f => (Insn::Nop, next, Arm64Regs::X9, x30),
        0xaa1e_03e9 => (Insn::MovX9X30, next, x30, x30),
        0xd65f_03c0 => (Insn::Ret, x30, Arm64Regs::X9, x30),
        _ if word >> 26 == 0b00_0101 => (Insn::B { target }, target, Arm64Regs::X9, x30),
        _ if word >> 26 == 0b10_0101 => (Insn::Bl { target }, target, Arm64Regs::X9, next),
        _ => panic!("{word:#010x} accepted as {:?}", listed.insn()),
    };
    assert_eq!(listed.insn(), insn, "{word:#010x}");
    assert_ne!(listed.kind(), Kind::Brk);
    let mut regs = Arm64Regs::trapped_at(site);
    listed.emulate(&mut regs);
    let want = Arm64Regs {
        pc,
        x9,
        x30: lr,
        other: false,
    };
    assert_eq!(regs, want, "{word:#010x}");
}

/// What one thread of the exhaustive arm64 loop found.
#[derive(Default)]
struct Arm64Tally {
    /// Accepted words, per `Kind as usize`.
    accepted: [u64; arm64::Kind::ALL.len()],
    /// Words refused with `Unsupported`.
    refused: u64,
}

/// Runs every word in `words` through the acceptance function at `site`.
fn arm64_tally(site: u64, words: std::ops::Range<u64>) -> Arm64Tally {
    let mut tally = Arm64Tally::default();
    for word in words {
        let word = word as u32;
        match arm64::Listed::accept(site, &word.to_le_bytes()) {
            Ok(listed) => {
                check_arm64_accepted(site, word, listed);
                tally.accepted[listed.kind() as usize] += 1;
            }
            Err(InsnError::Unsupported) => tally.refused += 1,
            Err(e) => panic!("{word:#010x} at an aligned site: {e:?}"),
        }
    }
    tally
}

#[test]
#[cfg_attr(debug_assertions, ignore = "2^32 words: run in release mode")]
fn arm64_every_word_is_accepted_exactly_when_listed() {
    use arm64::Kind;
    let start = Instant::now();
    let n = threads();
    let total = 1u64 << 32;
    let tallies: Vec<Arm64Tally> = thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| s.spawn(move || arm64_tally(ARM64_KTEXT, total * i / n..total * (i + 1) / n)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed = start.elapsed();

    let mut accepted = [0u64; Kind::ALL.len()];
    let mut refused = 0;
    for t in &tallies {
        for (sum, n) in accepted.iter_mut().zip(t.accepted) {
            *sum += n;
        }
        refused += t.refused;
    }
    let counts: Vec<_> = Kind::ALL
        .iter()
        .map(|k| (k.name(), accepted[*k as usize]))
        .chain([("(refused)", refused)])
        .collect();
    print_counts(
        &format!("arm64: all 2^32 words at {ARM64_KTEXT:#x}, {n} threads, {elapsed:.2?}"),
        &counts,
    );

    let want = |kind: Kind| match kind {
        Kind::Nop | Kind::MovX9X30 | Kind::Ret => 1,
        Kind::B | Kind::Bl => 1 << 26,
        Kind::Brk => 0,
    };
    for kind in Kind::ALL {
        assert_eq!(accepted[kind as usize], want(kind), "{}", kind.name());
    }
    assert_eq!(refused, total - (1 << 27) - 3);
}

/// Every `BRK`, which the decoder understands, is refused, the guard among them.
#[test]
fn arm64_every_brk_is_refused() {
    for imm in 0..=u16::MAX {
        let word = 0xd420_0000 | (u32::from(imm) << 5);
        assert_eq!(
            arm64::Insn::decode_word(ARM64_KTEXT, word),
            Ok(arm64::Insn::Brk { imm })
        );
        assert_eq!(
            arm64::Listed::accept(ARM64_KTEXT, &word.to_le_bytes()),
            Err(InsnError::Unsupported),
            "{word:#010x}"
        );
    }
    assert_eq!(
        arm64::Listed::accept(ARM64_KTEXT, &arm64::GUARD_WORD.to_le_bytes()),
        Err(InsnError::Unsupported)
    );
}

#[test]
fn arm64_misaligned_sites_and_wrong_lengths_are_refused() {
    let mut rng = Rng(0x0061_726d_3634);
    let canonical = [
        0xd503_201f,
        0xaa1e_03e9,
        0xd65f_03c0,
        0x1400_0000,
        0x9400_0000,
        0x17ff_ffff,
        0x97ff_ffff,
        arm64::GUARD_WORD,
    ];
    let mut words = canonical.to_vec();
    for _ in 0..100_000 {
        let imm26 = rng.next() as u32 & 0x03ff_ffff;
        words.push(0x1400_0000 | imm26);
        words.push(0x9400_0000 | imm26);
        words.push(rng.next() as u32);
    }
    for &word in &words {
        let bytes = word.to_le_bytes();
        let aligned = rng.site(ARM64_KTEXT) & !3;
        for low in 1..4 {
            assert_eq!(
                arm64::Listed::accept(aligned | low, &bytes),
                Err(InsnError::Misaligned),
                "{word:#010x}"
            );
            assert_eq!(
                arm64::Listed::accept_word(aligned | low, word),
                Err(InsnError::Misaligned),
                "{word:#010x}"
            );
        }
        // `accept` and `accept_word` are one function.
        assert_eq!(
            arm64::Listed::accept(aligned, &bytes),
            arm64::Listed::accept_word(aligned, word)
        );
        for len in 0..4 {
            assert_eq!(
                arm64::Listed::accept(aligned, &bytes[..len]),
                Err(InsnError::Truncated)
            );
        }
        let mut longer = bytes.to_vec();
        for _ in 0..4 {
            longer.push(rng.byte());
            assert_eq!(
                arm64::Listed::accept(aligned, &longer),
                Err(InsnError::LengthMismatch)
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// x86-64.

/// A typical x86-64 kernel text address.
const X86_KTEXT: u64 = 0xffff_ffff_8100_0000;

/// The listed form iced reads `bytes` at `site` as, if any, with the header's definitions
/// written out independently of the codec.
///
/// The listed forms are the encodings Linux writes: the NOPs are exactly the byte strings
/// `textpoke.h` gives (which iced must read as a 2- and a 5-byte NOP), the branches are unprefixed
/// (first byte the opcode) and `RET` is `c3` followed only by one-byte `INT3`s, 5 bytes at most.
fn iced_form(site: u64, bytes: &[u8]) -> Option<x86::Insn> {
    use x86::Insn;
    let decoded = iced_decode_all(site, bytes);
    let total: usize = decoded.iter().map(|i| i.len()).sum();
    let first = decoded.first().filter(|_| total == bytes.len())?;
    let single = decoded.len() == 1;
    let target = first.near_branch_target();
    let form = match (first.mnemonic(), first.code(), first.len()) {
        (Mnemonic::Nop, Code::Nopw, 2) if single && bytes == [0x66, 0x90] => Insn::Nop2,
        (Mnemonic::Nop, Code::Nop_rm32, 5) if single && bytes == [0x0f, 0x1f, 0x44, 0, 0] => {
            Insn::Nop5
        }
        (Mnemonic::Jmp, Code::Jmp_rel8_64, 2) if single && bytes[0] == 0xeb => {
            Insn::JmpRel8 { target }
        }
        (Mnemonic::Jmp, Code::Jmp_rel32_64, 5) if single && bytes[0] == 0xe9 => {
            Insn::JmpRel32 { target }
        }
        (Mnemonic::Call, Code::Call_rel32_64, 5) if single && bytes[0] == 0xe8 => {
            Insn::CallRel32 { target }
        }
        (Mnemonic::Ret, Code::Retnq, 1)
            if bytes[0] == 0xc3
                && bytes.len() <= MAX_INSN_LEN
                && decoded[1..]
                    .iter()
                    .all(|i| i.mnemonic() == Mnemonic::Int3 && i.len() == 1) =>
        {
            Insn::Ret {
                len: bytes.len() as u8,
            }
        }
        _ => return None,
    };
    Some(form)
}

/// Per-kind and per-error counts of an x86 run.
#[derive(Default)]
struct X86Tally {
    accepted: BTreeMap<&'static str, u64>,
    refused: BTreeMap<&'static str, u64>,
}

impl X86Tally {
    fn print(&self, title: &str) {
        let mut counts: Vec<_> = x86::Kind::ALL
            .iter()
            .map(|k| (k.name(), self.accepted.get(k.name()).copied().unwrap_or(0)))
            .collect();
        counts.extend(self.refused.iter().map(|(e, n)| (*e, *n)));
        print_counts(title, &counts);
    }

    fn accepted(&self, kind: x86::Kind) -> u64 {
        self.accepted.get(kind.name()).copied().unwrap_or(0)
    }

    fn refused(&self, e: InsnError) -> u64 {
        self.refused.get(e.as_str()).copied().unwrap_or(0)
    }
}

/// Checks the acceptance function on `bytes` at `site` against iced, both ways; for an accepted
/// string also checks its emulation against iced's control flow, and that the plain decoder and
/// `Insn::emulate` (the trap path's fallback) succeed exactly there with the same effect.
fn check_x86(site: u64, bytes: &[u8], tally: &mut X86Tally) {
    let accepted = x86::Listed::accept(site, bytes);
    let by_iced = iced_form(site, bytes);
    assert_eq!(
        accepted.map(|l| l.insn()).ok(),
        by_iced,
        "{bytes:02x?} at {site:#x}: ours {accepted:?}"
    );

    // The trap path's fallback, decode then emulate, succeeds exactly on accepted strings.
    let sp = site.rotate_left(17) ^ 0x1234_5678;
    let top = site.rotate_left(29) ^ 0x8765_4321;
    let trapped = || {
        let regs = FakeRegs {
            ip: site.wrapping_add(1),
            sp,
        };
        let mut stack = FakeStack::default();
        stack.words.insert(sp, top);
        (regs, stack)
    };
    let (mut fallback_regs, mut fallback_stack) = trapped();
    let fallback = x86::Insn::decode(site, bytes)
        .and_then(|insn| insn.emulate(site, &mut fallback_regs, &mut fallback_stack));
    assert_eq!(fallback.is_ok(), accepted.is_ok(), "{bytes:02x?}");

    let listed = match accepted {
        Ok(listed) => listed,
        Err(e) => {
            *tally.refused.entry(e.as_str()).or_default() += 1;
            return;
        }
    };
    *tally.accepted.entry(listed.kind().name()).or_default() += 1;
    assert_eq!(listed.site(), site);
    assert_eq!(listed.len(), bytes.len());
    assert_eq!(listed.insn().encode(site).unwrap().as_slice(), bytes);

    let (mut regs, mut stack) = trapped();
    listed.emulate(&mut regs, &mut stack);
    assert_eq!(
        (regs, &stack),
        (fallback_regs, &fallback_stack),
        "{bytes:02x?}"
    );
    // The effect, as the SDM defines each mnemonic; iced supplies the next IP and the target.
    let first = iced_decode_all(site, bytes)[0];
    let (ip, new_sp, writes, reads) = match first.mnemonic() {
        Mnemonic::Nop => (first.next_ip(), sp, vec![], 0),
        Mnemonic::Jmp => (first.near_branch_target(), sp, vec![], 0),
        Mnemonic::Call => {
            let pushed = sp.wrapping_sub(8);
            (
                first.near_branch_target(),
                pushed,
                vec![(pushed, first.next_ip())],
                0,
            )
        }
        Mnemonic::Ret => (top, sp.wrapping_add(8), vec![], 1),
        other => panic!("{bytes:02x?}: accepted as {other:?}"),
    };
    assert_eq!(regs, FakeRegs { ip, sp: new_sp }, "{bytes:02x?}");
    assert_eq!(stack.writes, writes, "{bytes:02x?}");
    assert_eq!(stack.reads.get(), reads, "{bytes:02x?}");
}

#[test]
fn x86_every_string_of_up_to_two_bytes() {
    use x86::Kind;
    let start = Instant::now();
    let sites = [
        X86_KTEXT,
        0,
        1,
        u64::MAX,
        u64::MAX - 1,
        0x7fff_ffff_ffff_ff80,
    ];
    for site in sites {
        let mut tally = X86Tally::default();
        check_x86(site, &[], &mut tally);
        for a in 0..=255u8 {
            check_x86(site, &[a], &mut tally);
            for b in 0..=255u8 {
                check_x86(site, &[a, b], &mut tally);
            }
        }
        if site == X86_KTEXT {
            tally.print(&format!(
                "x86: every string of 0 to 2 bytes at {site:#x} ({} strings)",
                1 + 256 + 65536
            ));
        }
        for kind in Kind::ALL {
            let want = match kind {
                Kind::Nop2 => 1,
                Kind::JmpRel8 => 256,
                // `c3` and `c3 cc`.
                Kind::Ret => 2,
                Kind::Int3 | Kind::Nop5 | Kind::JmpRel32 | Kind::CallRel32 => 0,
            };
            assert_eq!(tally.accepted(kind), want, "{} at {site:#x}", kind.name());
        }
        // The empty string; `66`, `0f`, `eb`, `e9`, `e8`; `0f 1f`, `e9 xx`, `e8 xx`.
        assert_eq!(tally.refused(InsnError::Truncated), 1 + 5 + 1 + 256 + 256);
        // `c3` followed by anything but `cc`.
        assert_eq!(tally.refused(InsnError::LengthMismatch), 255);
        // Everything else, `cc` and `cc xx` among them.
        assert_eq!(
            tally.refused(InsnError::Unsupported),
            (256 - 1 - 5) + (65536 - 258 - 513 - 255)
        );
    }
    println!("  ({} sites in {:.2?})", sites.len(), start.elapsed());
}

/// Every listed form, with the given site and operands.
fn x86_forms(site: u64, rel8: i8, rel32: i32, call32: i32) -> Vec<x86::Insn> {
    use x86::Insn;
    let after = |len: u64, rel: i64| site.wrapping_add(len).wrapping_add(rel as u64);
    let mut forms = vec![
        Insn::Nop2,
        Insn::Nop5,
        Insn::JmpRel8 {
            target: after(2, rel8.into()),
        },
        Insn::JmpRel32 {
            target: after(5, rel32.into()),
        },
        Insn::CallRel32 {
            target: after(5, call32.into()),
        },
    ];
    forms.extend((1..=MAX_INSN_LEN as u8).map(|len| Insn::Ret { len }));
    forms
}

/// A random 32-bit displacement, weighted towards its limits.
fn rel32(rng: &mut Rng) -> i32 {
    match rng.below(3) {
        0 => rng.next() as i32,
        1 => i32::MIN.wrapping_add(rng.below(16) as i32),
        _ => i32::MAX.wrapping_sub(rng.below(16) as i32),
    }
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "millions of iced decodes: run in release mode"
)]
fn x86_generated_corpus_against_iced() {
    use x86::Kind;
    let start = Instant::now();
    let mut rng = Rng(0x0078_3836_5f36);
    let mut tally = X86Tally::default();
    let mut forms = 0u64;
    let mut mutations = 0u64;

    // Every listed form with random operands at random sites, accepted as itself (the encoder's
    // output is accepted), and every single-byte mutation of it.
    for _ in 0..500 {
        let site = rng.site(X86_KTEXT);
        let (rel8, rel32_jmp, rel32_call) = (rng.byte() as i8, rel32(&mut rng), rel32(&mut rng));
        for insn in x86_forms(site, rel8, rel32_jmp, rel32_call) {
            let bytes = insn.encode(site).unwrap();
            let listed = x86::Listed::accept(site, bytes.as_slice()).unwrap();
            assert_eq!(listed.insn(), insn);
            assert_eq!(listed.kind(), insn.kind());
            assert_eq!(listed.len(), insn.len());
            forms += 1;
            let mut mutated = bytes.as_slice().to_vec();
            for i in 0..mutated.len() {
                let original = mutated[i];
                for b in 0..=255u8 {
                    mutated[i] = b;
                    check_x86(site, &mutated, &mut tally);
                    mutations += 1;
                }
                mutated[i] = original;
            }
        }
    }

    // Random strings of 1 to 5 bytes.
    let random = 2_000_000;
    for _ in 0..random {
        let site = rng.site(X86_KTEXT);
        let len = 1 + rng.below(MAX_INSN_LEN as u64) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| rng.byte()).collect();
        check_x86(site, &bytes, &mut tally);
    }

    tally.print(&format!(
        "x86: {forms} listed forms accepted; {mutations} single-byte mutations and {random} \
         random strings of 1 to 5 bytes against iced, {:.2?}",
        start.elapsed()
    ));
    // Every kind but the guard turned up, and the guard never did.
    for kind in Kind::ALL {
        let n = tally.accepted(kind);
        assert_eq!(n == 0, kind == Kind::Int3, "{}: {n}", kind.name());
    }
}

/// The guard and anything starting with it is refused as unsupported, whatever follows.
#[test]
fn x86_guard_is_never_accepted() {
    let mut rng = Rng(0xcc);
    for _ in 0..10_000 {
        let site = rng.site(X86_KTEXT);
        let len = rng.below(MAX_INSN_LEN as u64 + 3) as usize;
        let mut bytes = vec![x86::GUARD];
        bytes.extend((0..len).map(|_| rng.byte()));
        assert_eq!(
            x86::Listed::accept(site, &bytes),
            Err(InsnError::Unsupported),
            "{bytes:02x?}"
        );
    }
}

/// Too long for any listed form: refused for its length, or as unsupported.
#[test]
fn x86_longer_than_any_listed_form() {
    let mut rng = Rng(0x10);
    for _ in 0..100_000 {
        let site = rng.site(X86_KTEXT);
        let len = MAX_INSN_LEN + 1 + rng.below(4) as usize;
        let bytes: Vec<u8> = (0..len).map(|_| rng.byte()).collect();
        let result = x86::Listed::accept(site, &bytes);
        assert!(
            matches!(
                result,
                Err(InsnError::LengthMismatch | InsnError::Unsupported)
            ),
            "{bytes:02x?}: {result:?}"
        );
    }
}
