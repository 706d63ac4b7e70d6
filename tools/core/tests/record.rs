//! Tests of the `PERF_RECORD_TEXT_POKE` writer in `kernel/record.rs` and of the parser and
//! replayer in `textpoke-core`'s `replay` module.
//!
//! The golden records are written out byte by byte from `perf_event_text_poke()` and
//! `__perf_event__output_id_sample()` in Linux 6.12's `kernel/events/core.c`, so they check the
//! codec against the kernel's layout rather than against itself.

use proptest::collection::vec;
use proptest::prelude::*;
use textpoke_core::record::*;
use textpoke_core::replay::*;

/// The trailer layout of the golden x86 record: what `perf record` asks for with Intel PT.
const X86_SAMPLE_TYPE: u64 =
    PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER;

/// Every trailer field, to check their order.
const ALL_SAMPLE_TYPE: u64 = PERF_SAMPLE_ID_ALL;

fn x86_sample() -> SampleId {
    SampleId {
        pid: Some(1234),
        tid: Some(1235),
        time: Some(0x0123_4567_89ab),
        cpu: Some(1),
        identifier: Some(0x2a),
        ..SampleId::default()
    }
}

/// The kernel's record for replacing a 5-byte NOP at 0xffffffffc0001000 by `JMP 0xffffffffc0002000`.
#[rustfmt::skip]
const X86_GOLDEN: [u8; 64] = [
    0x14, 0x00, 0x00, 0x00, // type = PERF_RECORD_TEXT_POKE
    0x01, 0x00,             // misc = PERF_RECORD_MISC_KERNEL
    0x40, 0x00,             // size = 64
    0x00, 0x10, 0x00, 0xc0, 0xff, 0xff, 0xff, 0xff, // addr
    0x05, 0x00,             // old_len
    0x05, 0x00,             // new_len
    0x0f, 0x1f, 0x44, 0x00, 0x00, // old: NOPL 0x0(%rax,%rax,1)
    0xe9, 0xfb, 0x0f, 0x00, 0x00, // new: JMP rel32 = 0xffb
    0x00, 0x00,             // pad: 4 + 10 = 14, rounded up to 16
    0xd2, 0x04, 0x00, 0x00, // pid = 1234
    0xd3, 0x04, 0x00, 0x00, // tid = 1235
    0xab, 0x89, 0x67, 0x45, 0x23, 0x01, 0x00, 0x00, // time
    0x01, 0x00, 0x00, 0x00, // cpu = 1
    0x00, 0x00, 0x00, 0x00, // res
    0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // identifier
];

fn arm64_sample() -> SampleId {
    SampleId {
        pid: Some(0x11),
        tid: Some(0x22),
        time: Some(0x33),
        id: Some(0x44),
        stream_id: Some(0x55),
        cpu: Some(3),
        cpu_reserved: 0,
        identifier: Some(0x44),
    }
}

/// The kernel's record for replacing an arm64 `NOP` by `B .+0x100`, with every trailer field.
#[rustfmt::skip]
const ARM64_GOLDEN: [u8; 80] = [
    0x14, 0x00, 0x00, 0x00, 0x01, 0x00, 0x50, 0x00, // header, size = 80
    0x50, 0x34, 0x12, 0x80, 0x00, 0x80, 0xff, 0xff, // addr = 0xffff800080123450
    0x04, 0x00, 0x04, 0x00, // old_len, new_len
    0x1f, 0x20, 0x03, 0xd5, // old: NOP (0xd503201f)
    0x40, 0x00, 0x00, 0x14, // new: B .+0x100 (0x14000040)
    0x00, 0x00, 0x00, 0x00, // pad: 4 + 8 = 12, rounded up to 16
    0x11, 0x00, 0x00, 0x00, 0x22, 0x00, 0x00, 0x00, // TID: pid, tid
    0x33, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // TIME
    0x44, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // ID
    0x55, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // STREAM_ID
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // CPU: cpu, res
    0x44, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // IDENTIFIER
];

/// A 7-byte trampoline, created and later removed, with only `PERF_SAMPLE_TIME`.
const TRAMPOLINE: [u8; 7] = [0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3, 0xcc];

#[rustfmt::skip]
const CREATION_GOLDEN: [u8; 40] = [
    0x14, 0x00, 0x00, 0x00, 0x01, 0x00, 0x28, 0x00, // header, size = 40
    0x00, 0x00, 0x20, 0xc0, 0xff, 0xff, 0xff, 0xff, // addr = 0xffffffffc0200000
    0x00, 0x00, 0x07, 0x00, // old_len = 0, new_len = 7
    0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3, 0xcc, // new
    0x00, 0x00, 0x00, 0x00, 0x00, // pad: 4 + 7 = 11, rounded up to 16
    0x99, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // time
];

#[rustfmt::skip]
const REMOVAL_GOLDEN: [u8; 40] = [
    0x14, 0x00, 0x00, 0x00, 0x01, 0x00, 0x28, 0x00,
    0x00, 0x00, 0x20, 0xc0, 0xff, 0xff, 0xff, 0xff,
    0x07, 0x00, 0x00, 0x00, // old_len = 7, new_len = 0
    0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3, 0xcc, // old
    0x00, 0x00, 0x00, 0x00, 0x00,
    0x9a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
];

/// A poke with no bytes at all from an event opened with `sample_id_all = 0`.
#[rustfmt::skip]
const EMPTY_GOLDEN: [u8; 24] = [
    0x14, 0x00, 0x00, 0x00, 0x01, 0x00, 0x18, 0x00, // header, size = 24
    0x00, 0x00, 0x20, 0xc0, 0xff, 0xff, 0xff, 0xff,
    0x00, 0x00, 0x00, 0x00, // old_len = 0, new_len = 0
    0x00, 0x00, 0x00, 0x00, // pad: 4, rounded up to 8
];

/// The kernel's `PERF_RECORD_LOST` (misc 0) for 3 lost records of event 0x2a.
#[rustfmt::skip]
const LOST_GOLDEN: [u8; 56] = [
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x38, 0x00, // header, size = 56
    0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // id
    0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // lost
    0xd2, 0x04, 0x00, 0x00, 0xd3, 0x04, 0x00, 0x00,
    0xab, 0x89, 0x67, 0x45, 0x23, 0x01, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
];

/// Encodes a text poke into a fresh vector.
fn encode(
    misc: u16,
    addr: u64,
    old: &[u8],
    new: &[u8],
    sample: &SampleId,
    layout: SampleIdLayout,
) -> Vec<u8> {
    let size = text_poke_size(old.len(), new.len(), layout).expect("size fits");
    let mut out = vec![0xa5; size];
    let written = write_text_poke(&mut out, misc, addr, old, new, sample, layout).expect("encodes");
    assert_eq!(written, size);
    out
}

/// Parses `bytes` as exactly one text-poke record.
fn parse_poke(bytes: &[u8], layout: SampleIdLayout) -> TextPoke<'_> {
    match parse_record(bytes, layout) {
        Ok((Record::TextPoke(poke), size)) => {
            assert_eq!(size, bytes.len());
            poke
        }
        other => panic!("not a text poke: {other:?}"),
    }
}

/// Checks that every proper prefix of `bytes` parses as `Truncated`.
fn assert_truncations(bytes: &[u8], layout: SampleIdLayout) {
    for len in 0..bytes.len() {
        assert_eq!(
            parse_record(&bytes[..len], layout),
            Err(ParseError::Truncated),
            "prefix of {len} bytes"
        );
        let mut records = Records::new(&bytes[..len], layout);
        if len == 0 {
            assert_eq!(records.next(), None);
        } else {
            assert_eq!(records.next(), Some(Err(ParseError::Truncated)));
            assert_eq!(records.next(), None);
            assert_eq!(records.offset(), 0);
        }
    }
}

#[test]
fn golden_x86_jmp_poke() {
    let layout = SampleIdLayout::new(X86_SAMPLE_TYPE);
    assert_eq!(layout.size(), 32);
    let old = [0x0f, 0x1f, 0x44, 0x00, 0x00];
    let new = [0xe9, 0xfb, 0x0f, 0x00, 0x00];
    assert_eq!(text_poke_size(5, 5, layout), Some(X86_GOLDEN.len()));
    let bytes = encode(
        PERF_RECORD_MISC_KERNEL,
        0xffff_ffff_c000_1000,
        &old,
        &new,
        &x86_sample(),
        layout,
    );
    assert_eq!(bytes, X86_GOLDEN);

    let poke = parse_poke(&X86_GOLDEN, layout);
    assert_eq!(
        poke,
        TextPoke {
            misc: PERF_RECORD_MISC_KERNEL,
            addr: 0xffff_ffff_c000_1000,
            old: &old,
            new: &new,
            sample: x86_sample(),
        }
    );
    assert_eq!(poke.sample.id, None);
    assert_eq!(poke.sample.stream_id, None);
    assert_truncations(&X86_GOLDEN, layout);
}

#[test]
fn the_trailer_alone_is_the_golden_records_tail() {
    let layout = SampleIdLayout::new(X86_SAMPLE_TYPE);
    let mut trailer = vec![0xa5; layout.size()];
    assert_eq!(
        write_sample_id(&mut trailer, &x86_sample(), layout),
        Ok(layout.size())
    );
    assert_eq!(trailer, X86_GOLDEN[X86_GOLDEN.len() - layout.size()..]);
    let mut short = vec![0; layout.size() - 1];
    assert_eq!(
        write_sample_id(&mut short, &x86_sample(), layout),
        Err(RecordError::BufferTooSmall)
    );
    assert_eq!(
        write_sample_id(&mut [], &x86_sample(), SampleIdLayout::NONE),
        Ok(0)
    );
}

#[test]
fn golden_arm64_branch_poke() {
    let layout = SampleIdLayout::new(ALL_SAMPLE_TYPE);
    assert_eq!(layout.size(), 48);
    let old = 0xd503_201f_u32.to_le_bytes();
    let new = 0x1400_0040_u32.to_le_bytes();
    let bytes = encode(
        PERF_RECORD_MISC_KERNEL,
        0xffff_8000_8012_3450,
        &old,
        &new,
        &arm64_sample(),
        layout,
    );
    assert_eq!(bytes, ARM64_GOLDEN);

    let poke = parse_poke(&ARM64_GOLDEN, layout);
    assert_eq!(poke.addr, 0xffff_8000_8012_3450);
    assert_eq!((poke.old, poke.new), (&old[..], &new[..]));
    assert_eq!(poke.sample, arm64_sample());
    assert_truncations(&ARM64_GOLDEN, layout);
}

#[test]
fn golden_trampoline_creation_and_removal() {
    let layout = SampleIdLayout::new(PERF_SAMPLE_TIME);
    let at = |time| SampleId {
        time: Some(time),
        ..SampleId::default()
    };
    let addr = 0xffff_ffff_c020_0000;
    let created = encode(
        PERF_RECORD_MISC_KERNEL,
        addr,
        &[],
        &TRAMPOLINE,
        &at(0x99),
        layout,
    );
    assert_eq!(created, CREATION_GOLDEN);
    let removed = encode(
        PERF_RECORD_MISC_KERNEL,
        addr,
        &TRAMPOLINE,
        &[],
        &at(0x9a),
        layout,
    );
    assert_eq!(removed, REMOVAL_GOLDEN);

    let poke = parse_poke(&CREATION_GOLDEN, layout);
    assert_eq!((poke.old, poke.new), (&[][..], &TRAMPOLINE[..]));
    assert_eq!(poke.sample, at(0x99));
    let poke = parse_poke(&REMOVAL_GOLDEN, layout);
    assert_eq!((poke.old, poke.new), (&TRAMPOLINE[..], &[][..]));
    assert_eq!(poke.sample, at(0x9a));
    assert_truncations(&CREATION_GOLDEN, layout);
    assert_truncations(&REMOVAL_GOLDEN, layout);
}

#[test]
fn golden_empty_poke_without_sample_id() {
    let layout = SampleIdLayout::from_attr(X86_SAMPLE_TYPE, false);
    assert_eq!(layout, SampleIdLayout::NONE);
    let bytes = encode(
        PERF_RECORD_MISC_KERNEL,
        0xffff_ffff_c020_0000,
        &[],
        &[],
        // Fields the layout lacks are not written.
        &x86_sample(),
        layout,
    );
    assert_eq!(bytes, EMPTY_GOLDEN);
    let poke = parse_poke(&EMPTY_GOLDEN, layout);
    assert!(poke.old.is_empty() && poke.new.is_empty());
    assert_eq!(poke.sample, SampleId::default());
    assert_truncations(&EMPTY_GOLDEN, layout);
}

#[test]
fn golden_lost() {
    let layout = SampleIdLayout::new(X86_SAMPLE_TYPE);
    assert_eq!(lost_size(layout), LOST_GOLDEN.len());
    let mut out = [0xa5; 64];
    assert_eq!(
        write_lost(&mut out, 0, 0x2a, 3, &x86_sample(), layout),
        Ok(LOST_GOLDEN.len())
    );
    assert_eq!(out[..LOST_GOLDEN.len()], LOST_GOLDEN);
    assert_eq!(
        parse_record(&LOST_GOLDEN, layout),
        Ok((
            Record::Lost {
                misc: 0,
                id: 0x2a,
                lost: 3,
                sample: x86_sample()
            },
            LOST_GOLDEN.len()
        ))
    );
    assert_eq!(
        write_lost(&mut out[..55], 0, 0x2a, 3, &x86_sample(), layout),
        Err(RecordError::BufferTooSmall)
    );
    // A lost record must be exactly as long as its layout says.
    assert_eq!(
        parse_record(&LOST_GOLDEN, SampleIdLayout::NONE),
        Err(ParseError::BadSize)
    );
    assert_truncations(&LOST_GOLDEN, layout);
}

#[test]
fn sample_id_layout_sizes_and_bits() {
    assert_eq!(SampleIdLayout::NONE.size(), 0);
    assert_eq!(SampleIdLayout::new(0).size(), 0);
    for bit in [
        PERF_SAMPLE_TID,
        PERF_SAMPLE_TIME,
        PERF_SAMPLE_ID,
        PERF_SAMPLE_STREAM_ID,
        PERF_SAMPLE_CPU,
        PERF_SAMPLE_IDENTIFIER,
    ] {
        assert_eq!(SampleIdLayout::new(bit).size(), 8);
        assert!(SampleIdLayout::new(bit).has(bit));
    }
    assert_eq!(SampleIdLayout::new(u64::MAX).size(), 48);
    assert_eq!(
        SampleIdLayout::new(u64::MAX).sample_type(),
        PERF_SAMPLE_ID_ALL
    );
    // PERF_SAMPLE_IP, ADDR, READ, CALLCHAIN and RAW shape samples only.
    assert_eq!(
        SampleIdLayout::new(1 | 1 << 3 | 1 << 4 | 1 << 5 | 1 << 10),
        SampleIdLayout::NONE
    );
    assert_eq!(
        SampleIdLayout::from_attr(PERF_SAMPLE_TIME, true),
        SampleIdLayout::new(PERF_SAMPLE_TIME)
    );
}

#[test]
fn text_poke_size_limits() {
    let none = SampleIdLayout::NONE;
    assert_eq!(text_poke_size(0, 0, none), Some(24));
    assert_eq!(text_poke_size(4, 0, none), Some(24));
    assert_eq!(text_poke_size(4, 1, none), Some(32));
    assert_eq!(text_poke_size(65508, 0, none), Some(65528));
    assert_eq!(text_poke_size(65509, 0, none), None);
    assert_eq!(text_poke_size(usize::MAX, 1, none), None);
    assert_eq!(text_poke_size(usize::MAX - 3, 0, none), None);
    let all = SampleIdLayout::new(PERF_SAMPLE_ID_ALL);
    assert_eq!(text_poke_size(65460, 0, all), Some(65528));
    assert_eq!(text_poke_size(65461, 0, all), None);

    let big = vec![0; 40000];
    let mut out = vec![0; 1 << 17];
    assert_eq!(
        write_text_poke(&mut out, 1, 0, &big, &big, &SampleId::default(), none),
        Err(RecordError::TooLarge)
    );
    let mut small = [0; 63];
    let layout = SampleIdLayout::new(X86_SAMPLE_TYPE);
    assert_eq!(
        write_text_poke(&mut small, 1, 0, &[0; 5], &[0; 5], &x86_sample(), layout),
        Err(RecordError::BufferTooSmall)
    );
}

#[test]
fn header_size_below_8_is_an_error() {
    for size in 0..8u16 {
        let mut bytes = X86_GOLDEN;
        bytes[6..8].copy_from_slice(&size.to_le_bytes());
        let layout = SampleIdLayout::new(X86_SAMPLE_TYPE);
        assert_eq!(parse_record(&bytes, layout), Err(ParseError::BadSize));
        let mut records = Records::new(&bytes, layout);
        assert_eq!(records.next(), Some(Err(ParseError::BadSize)));
        assert_eq!(records.next(), None);
    }
}

#[test]
fn malformed_text_pokes_are_rejected() {
    let layout = SampleIdLayout::new(X86_SAMPLE_TYPE);

    let mut bytes = X86_GOLDEN;
    bytes[30] = 1;
    assert_eq!(parse_record(&bytes, layout), Err(ParseError::BadPadding));

    // old_len + new_len larger than the record.
    let mut bytes = X86_GOLDEN;
    bytes[16] = 20;
    assert_eq!(
        parse_record(&bytes, layout),
        Err(ParseError::LengthMismatch)
    );
    bytes[16..20].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    assert_eq!(
        parse_record(&bytes, layout),
        Err(ParseError::LengthMismatch)
    );

    // Lengths that fit but leave the wrong amount of padding.
    let mut bytes = X86_GOLDEN;
    bytes[16..20].copy_from_slice(&[1, 0, 1, 0]);
    assert_eq!(parse_record(&bytes, layout), Err(ParseError::BadSize));

    // Parsing with another event's layout.
    assert_eq!(
        parse_record(&X86_GOLDEN, SampleIdLayout::NONE),
        Err(ParseError::BadSize)
    );
    assert_eq!(
        parse_record(&X86_GOLDEN, SampleIdLayout::new(PERF_SAMPLE_ID_ALL)),
        Err(ParseError::BadSize)
    );
    assert_eq!(
        parse_record(&ARM64_GOLDEN, layout),
        Err(ParseError::BadSize)
    );

    // A text poke too short for even its fixed fields.
    let mut bytes = EMPTY_GOLDEN;
    bytes[6] = 16;
    assert_eq!(
        parse_record(&bytes, SampleIdLayout::NONE),
        Err(ParseError::BadSize)
    );
}

#[test]
fn records_iterates_a_stream_and_stops_on_error() {
    let layout = SampleIdLayout::new(X86_SAMPLE_TYPE);
    // A PERF_RECORD_ITRACE_START (12): u32 pid, tid; then the trailer.
    let mut itrace = vec![12, 0, 0, 0, 0, 0, 48, 0, 7, 0, 0, 0, 8, 0, 0, 0];
    itrace.extend_from_slice(&X86_GOLDEN[32..]);
    let mut stream = Vec::new();
    stream.extend_from_slice(&X86_GOLDEN);
    stream.extend_from_slice(&itrace);
    stream.extend_from_slice(&LOST_GOLDEN);
    stream.extend_from_slice(&X86_GOLDEN);
    let good = stream.len();

    let mut records = Records::new(&stream, layout);
    assert!(matches!(records.next(), Some(Ok(Record::TextPoke(_)))));
    assert_eq!(records.offset(), 64);
    match records.next() {
        Some(Ok(Record::Other {
            record_type: 12,
            misc: 0,
            body,
        })) => {
            assert_eq!(body, &itrace[8..]);
            assert_eq!(SampleId::from_trailer(body, layout), Ok(x86_sample()));
        }
        other => panic!("expected the itrace-start record, got {other:?}"),
    }
    assert!(matches!(
        records.next(),
        Some(Ok(Record::Lost { lost: 3, .. }))
    ));
    assert!(matches!(records.next(), Some(Ok(Record::TextPoke(_)))));
    assert_eq!(records.next(), None);
    assert_eq!(records.offset(), good);
    assert!(records.remaining().is_empty());

    // A zero-sized record stops the iteration instead of looping on it.
    stream.extend_from_slice(&[20, 0, 0, 0, 1, 0, 0, 0]);
    stream.extend_from_slice(&X86_GOLDEN);
    let mut records = Records::new(&stream, layout);
    assert_eq!(records.by_ref().take(4).filter(Result::is_ok).count(), 4);
    assert_eq!(records.next(), Some(Err(ParseError::BadSize)));
    assert_eq!(records.offset(), good);
    assert_eq!(records.remaining().len(), 8 + 64);
    assert_eq!(records.next(), None);

    // So does a record cut short at the end of the input.
    let mut records = Records::new(&stream[..good - 10], layout);
    assert_eq!(records.by_ref().take(3).filter(Result::is_ok).count(), 3);
    assert_eq!(records.next(), Some(Err(ParseError::Truncated)));
    assert_eq!(records.offset(), good - 64);
    assert_eq!(records.next(), None);

    assert_eq!(
        SampleId::from_trailer(&[0; 31], layout),
        Err(ParseError::BadSize)
    );
}

#[test]
fn error_descriptions_are_distinct() {
    let descriptions = [
        ParseError::Truncated.as_str(),
        ParseError::BadSize.as_str(),
        ParseError::LengthMismatch.as_str(),
        ParseError::BadPadding.as_str(),
        RecordError::TooLarge.as_str(),
        RecordError::BufferTooSmall.as_str(),
    ];
    for (i, a) in descriptions.iter().enumerate() {
        for b in &descriptions[i + 1..] {
            assert_ne!(a, b);
        }
    }
    assert_ne!(
        ReplayError::OutOfImage.as_str(),
        ReplayError::UnequalLengths.as_str()
    );
}

fn poke<'a>(addr: u64, old: &'a [u8], new: &'a [u8]) -> TextPoke<'a> {
    TextPoke {
        misc: PERF_RECORD_MISC_KERNEL,
        addr,
        old,
        new,
        sample: SampleId::default(),
    }
}

const BASE: u64 = 0xffff_ffff_c000_1000;

#[test]
fn replay_checks_old_bytes_and_writes_new_ones() {
    let mut text = [0x90; 16];
    text[4..9].copy_from_slice(&[0x0f, 0x1f, 0x44, 0x00, 0x00]);
    let original = text;
    let mut image = TextImage::new(BASE, &mut text);
    let jmp = [0xe9, 0xfb, 0x0f, 0x00, 0x00];
    let p = poke(BASE + 4, &X86_GOLDEN[20..25], &jmp);
    assert_eq!(image.apply(&p), Ok(Applied::Patched));
    assert_eq!(&image.bytes[4..9], &jmp);
    // Applying it again finds the new bytes where the old ones should be.
    assert_eq!(image.apply(&p), Err(ReplayError::OldMismatch { offset: 0 }));
    assert_eq!(image.revert(&p), Ok(Applied::Patched));
    assert_eq!(image.bytes, &original);
    assert_eq!(
        image.revert(&p),
        Err(ReplayError::OldMismatch { offset: 0 })
    );

    // The offset is that of the first differing byte, and a failed step leaves the image alone.
    let q = poke(BASE + 4, &[0x0f, 0x1f, 0x45, 0x00, 0x01], &jmp);
    assert_eq!(image.apply(&q), Err(ReplayError::OldMismatch { offset: 2 }));
    assert_eq!(image.bytes, &original);
}

#[test]
fn replay_outside_or_across_the_image() {
    let mut text = [0u8; 16];
    let mut image = TextImage::new(BASE, &mut text);
    let four = [1, 2, 3, 4];
    let zero = [0; 4];
    let not_covered = [BASE - 4, BASE + 16, BASE - 100, 0, u64::MAX - 3];
    for addr in not_covered {
        assert_eq!(
            image.apply(&poke(addr, &zero, &four)),
            Ok(Applied::NotCovered)
        );
    }
    for addr in [BASE - 3, BASE - 1, BASE + 13, BASE + 15] {
        assert_eq!(
            image.apply(&poke(addr, &zero, &four)),
            Err(ReplayError::OutOfImage)
        );
    }
    assert_eq!(
        image.apply(&poke(BASE + 12, &zero, &four)),
        Ok(Applied::Patched)
    );
    assert_eq!(image.apply(&poke(BASE, &zero, &four)), Ok(Applied::Patched));
    assert_eq!(
        image.bytes,
        &[1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]
    );
    assert_eq!(image.apply(&poke(BASE, &[], &[])), Ok(Applied::Empty));
    assert_eq!(
        image.apply(&poke(BASE, &[1, 2], &[1, 2, 3])),
        Err(ReplayError::UnequalLengths)
    );

    // An image at the very top of the address space, and pokes that run past it.
    let mut top = [0u8; 16];
    let mut image = TextImage::new(u64::MAX - 15, &mut top);
    assert_eq!(
        image.apply(&poke(u64::MAX - 3, &zero, &four)),
        Ok(Applied::Patched)
    );
    assert_eq!(
        image.apply(&poke(u64::MAX - 1, &zero, &four)),
        Err(ReplayError::OutOfImage)
    );
    assert_eq!(&image.bytes[12..], &four);
}

#[test]
fn replay_trampoline_creation_and_removal() {
    let mut text = [0xcc; 32];
    let mut image = TextImage::new(BASE, &mut text);
    let created = poke(BASE + 8, &[], &TRAMPOLINE);
    let removed = poke(BASE + 8, &TRAMPOLINE, &[]);
    // Creation writes without a check: the memory held nothing meaningful before.
    assert_eq!(image.apply(&created), Ok(Applied::Created));
    assert_eq!(&image.bytes[8..15], &TRAMPOLINE);
    // Removal checks the text it frees and leaves the bytes.
    assert_eq!(image.apply(&removed), Ok(Applied::Removed));
    assert_eq!(&image.bytes[8..15], &TRAMPOLINE);
    let wrong = poke(BASE + 9, &TRAMPOLINE, &[]);
    assert_eq!(
        image.apply(&wrong),
        Err(ReplayError::OldMismatch { offset: 0 })
    );
    // Backwards, a removal creates the text again and a creation removes it.
    image.bytes.fill(0);
    assert_eq!(image.revert(&removed), Ok(Applied::Created));
    assert_eq!(&image.bytes[8..15], &TRAMPOLINE);
    assert_eq!(image.revert(&created), Ok(Applied::Removed));
    assert_eq!(image.revert(&wrong), Ok(Applied::Created));
    assert_eq!(
        image.revert(&created),
        Err(ReplayError::OldMismatch { offset: 1 })
    );
    assert_eq!(
        image.apply(&poke(BASE + 30, &[], &TRAMPOLINE)),
        Err(ReplayError::OutOfImage)
    );
}

/// Builds the `SampleId` parsing gives for `layout` from arbitrary field values.
fn sample_for(layout: SampleIdLayout, v: [u64; 6], res: u32) -> SampleId {
    fn when<T>(layout: SampleIdLayout, bit: u64, value: T) -> Option<T> {
        layout.has(bit).then_some(value)
    }
    SampleId {
        pid: when(layout, PERF_SAMPLE_TID, v[0] as u32),
        tid: when(layout, PERF_SAMPLE_TID, (v[0] >> 32) as u32),
        time: when(layout, PERF_SAMPLE_TIME, v[1]),
        id: when(layout, PERF_SAMPLE_ID, v[2]),
        stream_id: when(layout, PERF_SAMPLE_STREAM_ID, v[3]),
        cpu: when(layout, PERF_SAMPLE_CPU, v[4] as u32),
        cpu_reserved: if layout.has(PERF_SAMPLE_CPU) { res } else { 0 },
        identifier: when(layout, PERF_SAMPLE_IDENTIFIER, v[5]),
    }
}

fn any_sample_type() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        Just(0),
        Just(X86_SAMPLE_TYPE),
        Just(PERF_SAMPLE_ID_ALL)
    ]
}

/// A poke of a random stretch of a `len`-byte image: its offset and new bytes (1 to 5 of them).
fn any_edit(len: usize) -> impl Strategy<Value = (usize, Vec<u8>)> {
    (0..len, vec(any::<u8>(), 1..=5)).prop_map(move |(offset, mut new)| {
        new.truncate(len - offset);
        (offset, new)
    })
}

/// Turns edits into a stream of text-poke records, returning the stream, each record's range in
/// it and the image after each step (`states[0]` is `image`).
fn record_edits(
    image: &[u8],
    edits: &[(usize, Vec<u8>)],
    layout: SampleIdLayout,
) -> (Vec<u8>, Vec<std::ops::Range<usize>>, Vec<Vec<u8>>) {
    let mut state = image.to_vec();
    let mut states = vec![state.clone()];
    let mut stream = Vec::new();
    let mut ranges = Vec::new();
    for (i, (offset, new)) in edits.iter().enumerate() {
        let range = *offset..offset + new.len();
        let sample = sample_for(layout, [i as u64; 6], 0);
        let record = encode(
            PERF_RECORD_MISC_KERNEL,
            BASE + *offset as u64,
            &state[range.clone()],
            new,
            &sample,
            layout,
        );
        ranges.push(stream.len()..stream.len() + record.len());
        stream.extend_from_slice(&record);
        state[range].copy_from_slice(new);
        states.push(state.clone());
    }
    (stream, ranges, states)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn prop_build_parse_round_trip(
        old in vec(any::<u8>(), 0..=64),
        new in vec(any::<u8>(), 0..=64),
        sample_type in any_sample_type(),
        misc in any::<u16>(),
        addr in any::<u64>(),
        values in any::<[u64; 6]>(),
        res in any::<u32>(),
        tail in vec(any::<u8>(), 0..16),
    ) {
        let layout = SampleIdLayout::new(sample_type);
        let sample = sample_for(layout, values, res);
        let mut bytes = encode(misc, addr, &old, &new, &sample, layout);
        let size = bytes.len();
        prop_assert_eq!(size % 8, 0);
        prop_assert_eq!(
            size,
            8 + 8 + (4 + old.len() + new.len()).next_multiple_of(8) + layout.size()
        );
        prop_assert_eq!(u16::from_le_bytes([bytes[6], bytes[7]]) as usize, size);
        // Whatever follows the record is not part of it.
        bytes.extend_from_slice(&tail);
        let (record, consumed) = parse_record(&bytes, layout).expect("parses");
        prop_assert_eq!(consumed, size);
        let expected = TextPoke { misc, addr, old: &old, new: &new, sample };
        prop_assert_eq!(record, Record::TextPoke(expected));
        // A buffer one byte short is refused.
        let mut short = vec![0; size - 1];
        prop_assert_eq!(
            write_text_poke(&mut short, misc, addr, &old, &new, &sample, layout),
            Err(RecordError::BufferTooSmall)
        );
    }

    #[test]
    fn prop_every_truncation_is_truncated(
        old in vec(any::<u8>(), 0..=16),
        new in vec(any::<u8>(), 0..=16),
        sample_type in any_sample_type(),
        cut in any::<prop::sample::Index>(),
    ) {
        let layout = SampleIdLayout::new(sample_type);
        let sample = sample_for(layout, [7; 6], 0);
        let bytes = encode(1, BASE, &old, &new, &sample, layout);
        let cut = cut.index(bytes.len());
        prop_assert_eq!(parse_record(&bytes[..cut], layout), Err(ParseError::Truncated));
    }

    #[test]
    fn prop_parsing_arbitrary_bytes_never_panics(
        header_type in prop_oneof![Just(PERF_RECORD_TEXT_POKE), Just(PERF_RECORD_LOST), any::<u32>()],
        size in any::<u16>(),
        lens in any::<[u16; 2]>(),
        small_lens in any::<[u8; 2]>(),
        use_small in any::<bool>(),
        raw_header in any::<bool>(),
        mut bytes in vec(any::<u8>(), 0..256),
        sample_type in any_sample_type(),
    ) {
        // Steer half the inputs to plausible headers so the text-poke checks get exercised.
        if !raw_header && bytes.len() >= 12 {
            let size = (size as usize % (bytes.len() + 1)) as u16;
            bytes[..4].copy_from_slice(&header_type.to_le_bytes());
            bytes[6..8].copy_from_slice(&size.to_le_bytes());
            if bytes.len() >= 20 {
                let lens = if use_small { small_lens.map(u16::from) } else { lens };
                bytes[16..18].copy_from_slice(&lens[0].to_le_bytes());
                bytes[18..20].copy_from_slice(&lens[1].to_le_bytes());
            }
        }
        let layout = SampleIdLayout::new(sample_type);
        check_parse(&bytes, layout)?;
    }

    #[test]
    fn prop_mutated_records_never_panic(
        old in vec(any::<u8>(), 0..=24),
        new in vec(any::<u8>(), 0..=24),
        sample_type in any_sample_type(),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let layout = SampleIdLayout::new(sample_type);
        let sample = sample_for(layout, [0x0102_0304_0506_0708; 6], 0);
        let mut bytes = encode(1, BASE, &old, &new, &sample, layout);
        for (at, value) in flips {
            let at = at.index(bytes.len());
            bytes[at] = value;
        }
        check_parse(&bytes, layout)?;
    }

    #[test]
    fn prop_replay_forwards_then_backwards_restores(
        (mut text, edits) in (1usize..48)
            .prop_flat_map(|len| (vec(any::<u8>(), len), vec(any_edit(len), 0..24))),
    ) {
        let layout = SampleIdLayout::new(X86_SAMPLE_TYPE);
        let (stream, _, states) = record_edits(&text, &edits, layout);
        let original = text.clone();
        let mut image = TextImage::new(BASE, &mut text);
        let pokes: Vec<TextPoke<'_>> = Records::new(&stream, layout)
            .map(|record| match record {
                Ok(Record::TextPoke(poke)) => poke,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        prop_assert_eq!(pokes.len(), edits.len());
        for (poke, state) in pokes.iter().zip(&states[1..]) {
            prop_assert_eq!(image.apply(poke), Ok(Applied::Patched));
            prop_assert_eq!(&image.bytes[..], &state[..]);
        }
        for (poke, state) in pokes.iter().rev().zip(states.iter().rev().skip(1)) {
            prop_assert_eq!(image.revert(poke), Ok(Applied::Patched));
            prop_assert_eq!(&image.bytes[..], &state[..]);
        }
        prop_assert_eq!(&image.bytes[..], &original[..]);
    }

    #[test]
    fn prop_dropped_record_is_detected(
        text in vec(any::<u8>(), 32),
        edits in vec(any_edit(32), 1..24),
        drop in any::<prop::sample::Index>(),
    ) {
        let layout = SampleIdLayout::new(PERF_SAMPLE_TIME | PERF_SAMPLE_CPU);
        let (stream, ranges, states) = record_edits(&text, &edits, layout);
        let k = drop.index(edits.len());
        let mut lossy = stream[..ranges[k].start].to_vec();
        lossy.extend_from_slice(&stream[ranges[k].end..]);

        // The bytes the dropped poke really changed.
        let changed: Vec<usize> = (0..text.len()).filter(|&i| states[k][i] != states[k + 1][i]).collect();
        // The first later poke that reads one of them must fail, at the first such byte.
        let detected = edits.iter().enumerate().skip(k + 1).find_map(|(j, (offset, new))| {
            changed
                .iter()
                .find(|&&i| (*offset..offset + new.len()).contains(&i))
                .map(|&i| (j, i - offset))
        });

        let mut image_bytes = text.clone();
        let mut image = TextImage::new(BASE, &mut image_bytes);
        let mut outcome = None;
        for (n, record) in Records::new(&lossy, layout).enumerate() {
            let Ok(Record::TextPoke(poke)) = record else {
                panic!("unexpected {record:?}");
            };
            // Number the pokes as in the original stream.
            let j = if n < k { n } else { n + 1 };
            if let Err(e) = image.apply(&poke) {
                outcome = Some((j, e));
                break;
            }
        }
        match detected {
            Some((j, offset)) => {
                prop_assert_eq!(outcome, Some((j, ReplayError::OldMismatch { offset })));
            }
            None => {
                // Nothing read the stale bytes: the replay succeeds and differs exactly there.
                prop_assert_eq!(outcome, None);
                let last = states.last().unwrap();
                for i in 0..text.len() {
                    let expected = if changed.contains(&i) { states[k][i] } else { last[i] };
                    prop_assert_eq!(image.bytes[i], expected);
                }
            }
        }
    }
}

/// Parses `bytes` every way the API allows and checks that nothing runs outside the input and
/// that every accepted text poke or lost record is canonical: re-encoding it gives its bytes.
fn check_parse(bytes: &[u8], layout: SampleIdLayout) -> Result<(), TestCaseError> {
    if let Ok((record, size)) = parse_record(bytes, layout) {
        prop_assert!(size >= HEADER_SIZE && size <= bytes.len());
        check_canonical(&record, &bytes[..size], layout)?;
    }
    let mut records = Records::new(bytes, layout);
    let mut items = 0;
    let mut last_offset = 0;
    while let Some(item) = records.next() {
        items += 1;
        prop_assert!(items <= bytes.len() / HEADER_SIZE + 1);
        prop_assert!(records.offset() <= bytes.len());
        if let Ok(record) = item {
            prop_assert!(records.offset() >= last_offset + HEADER_SIZE);
            check_canonical(&record, &bytes[last_offset..records.offset()], layout)?;
        } else {
            prop_assert_eq!(records.offset(), last_offset);
        }
        last_offset = records.offset();
    }
    Ok(())
}

fn check_canonical(
    record: &Record<'_>,
    bytes: &[u8],
    layout: SampleIdLayout,
) -> Result<(), TestCaseError> {
    let mut out = vec![0; bytes.len()];
    match record {
        Record::TextPoke(p) => {
            let size = write_text_poke(&mut out, p.misc, p.addr, p.old, p.new, &p.sample, layout);
            prop_assert_eq!(size, Ok(bytes.len()));
        }
        Record::Lost {
            misc,
            id,
            lost,
            sample,
        } => {
            let size = write_lost(&mut out, *misc, *id, *lost, sample, layout);
            prop_assert_eq!(size, Ok(bytes.len()));
        }
        Record::Other { body, .. } => {
            prop_assert_eq!(body.len() + HEADER_SIZE, bytes.len());
            return Ok(());
        }
    }
    prop_assert_eq!(&out[..], bytes);
    Ok(())
}

/// A ksymbol record as `perf_event_ksymbol_output()` writes it for an `OOL` unregister of
/// `[textpoke_keys]` at 0xffffffffc0000000, 0x2000 bytes, with the golden x86 trailer: the
/// header, `addr`, `len`, `ksym_type`, `flags`, the name NUL-padded to 16 bytes, the trailer.
const KSYMBOL_GOLDEN: [u8; 72] = [
    17, 0, 0, 0, 0, 0, 72, 0, // type 17, misc 0, size 72
    0x00, 0x00, 0x00, 0xc0, 0xff, 0xff, 0xff, 0xff, // addr
    0x00, 0x20, 0x00, 0x00, 2, 0, 1, 0, // len, ksym_type OOL, flags UNREGISTER
    b'[', b't', b'e', b'x', b't', b'p', b'o', b'k', b'e', b'_', b'k', b'e', b'y', b's', b']', 0,
    0xd2, 0x04, 0, 0, 0xd3, 0x04, 0, 0, // pid 1234, tid 1235
    0xab, 0x89, 0x67, 0x45, 0x23, 0x01, 0, 0, // time
    1, 0, 0, 0, 0, 0, 0, 0, // cpu 1, res
    0x2a, 0, 0, 0, 0, 0, 0, 0, // identifier
];

#[test]
fn golden_ksymbol() {
    let layout = SampleIdLayout::new(X86_SAMPLE_TYPE);
    let Ok((
        Record::Other {
            record_type, body, ..
        },
        72,
    )) = parse_record(&KSYMBOL_GOLDEN, layout)
    else {
        panic!("not one record of 72 bytes");
    };
    assert_eq!(record_type, PERF_RECORD_KSYMBOL);
    let k = parse_ksymbol(body, layout).expect("parses");
    assert_eq!(
        (k.addr, k.len, k.ksym_type, k.unregister(), k.name),
        (
            0xffff_ffff_c000_0000,
            0x2000,
            2,
            true,
            b"[textpoke_keys]".as_slice()
        )
    );
    assert_eq!(k.sample, x86_sample());
    // Another layout leaves the name without its NUL, or the fixed fields without room.
    assert!(parse_ksymbol(body, SampleIdLayout::new(ALL_SAMPLE_TYPE)).is_err());
    // A name padded with anything but NULs is refused.
    let mut bad = body.to_vec();
    bad[31] = b'x';
    assert_eq!(parse_ksymbol(&bad, layout), Err(ParseError::BadPadding));
    for n in 0..body.len() {
        assert!(
            parse_ksymbol(&body[..n], layout).is_err(),
            "{n} bytes parse"
        );
    }
}
