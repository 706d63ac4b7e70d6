//! Fuzzes the perf record parser, the text-poke writer and the replayer.
//!
//! Input: 8 bytes of little-endian `sample_type` (for the `sample_id` trailer), then a perf
//! ring-buffer byte stream. Every record the parser accepts must lie within the input, and every
//! text-poke or lost record it accepts must re-encode to exactly its own bytes (the parser only
//! accepts canonical records). Each accepted text poke is also replayed onto a small image and
//! reverted, which must restore the image.

#![no_main]

use libfuzzer_sys::fuzz_target;
use textpoke_core::record::{write_text_poke, SampleIdLayout, HEADER_SIZE};
use textpoke_core::replay::{parse_record, write_lost, Applied, Record, Records, TextImage};

/// The image the pokes are replayed onto; fuzzed addresses near it hit it, others do not.
const IMAGE_BASE: u64 = 0xffff_ffff_c000_0000;

fuzz_target!(|data: &[u8]| {
    let Some((sample_type, stream)) = data.split_first_chunk::<8>() else {
        return;
    };
    let layout = SampleIdLayout::new(u64::from_le_bytes(*sample_type));

    if let Ok((_, size)) = parse_record(stream, layout) {
        assert!(size >= HEADER_SIZE && size <= stream.len());
    }

    let mut text = [0u8; 256];
    for (i, b) in text.iter_mut().enumerate() {
        *b = i as u8;
    }
    let mut image = TextImage::new(IMAGE_BASE, &mut text);
    let mut out = [0u8; 1 << 16];
    let mut records = Records::new(stream, layout);
    let mut start = 0;
    while let Some(item) = records.next() {
        let end = records.offset();
        let Ok(record) = item else {
            assert_eq!(end, start, "the offset stays at a malformed record");
            break;
        };
        assert!(end >= start + HEADER_SIZE && end <= stream.len());
        let bytes = &stream[start..end];
        match record {
            Record::TextPoke(poke) => {
                let size = write_text_poke(
                    &mut out,
                    poke.misc,
                    poke.addr,
                    poke.old,
                    poke.new,
                    &poke.sample,
                    layout,
                )
                .expect("an accepted text poke re-encodes");
                assert_eq!(&out[..size], bytes, "re-encoding changed the text poke");

                let before = image.bytes.to_vec();
                if let Ok(applied) = image.apply(&poke) {
                    if applied == Applied::Patched {
                        let after = image.bytes.to_vec();
                        image.revert(&poke).expect("reverting a poke just applied");
                        assert_eq!(*image.bytes, *before, "revert did not restore the image");
                        image.bytes.copy_from_slice(&after);
                    }
                } else {
                    assert_eq!(*image.bytes, *before, "a failed poke changed the image");
                }
            }
            Record::Lost {
                misc,
                id,
                lost,
                sample,
            } => {
                let size = write_lost(&mut out, misc, id, lost, &sample, layout)
                    .expect("an accepted lost record re-encodes");
                assert_eq!(&out[..size], bytes, "re-encoding changed the lost record");
            }
            Record::Other { body, .. } => assert_eq!(body.len() + HEADER_SIZE, bytes.len()),
        }
        start = end;
    }
});
