//! Fuzzes the x86 instruction decoder against the encoder.
//!
//! Input: 8 bytes of little-endian site address, then the instruction bytes. Whatever `decode`
//! accepts must encode back, at the same site, to exactly the same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use textpoke_core::x86::Insn;

fuzz_target!(|data: &[u8]| {
    let Some((site, bytes)) = data.split_first_chunk::<8>() else {
        return;
    };
    let site = u64::from_le_bytes(*site);
    if let Ok(insn) = Insn::decode(site, bytes) {
        let encoded = insn
            .encode(site)
            .unwrap_or_else(|e| panic!("{insn:?} decoded at {site:#x} does not encode: {e:?}"));
        assert_eq!(encoded.as_slice(), bytes, "{insn:?} at {site:#x}");
        assert_eq!(insn.len(), bytes.len(), "{insn:?} at {site:#x}");
    }
});
