//! Parsing and replaying `PERF_RECORD_TEXT_POKE` records: the consumer's side of
//! [`crate::record`].
//!
//! A copy of kernel text (for instance read from `/proc/kcore`) plus the text-poke records since
//! give the text at any time. This module parses such records out of a perf ring-buffer byte
//! stream ([`parse_record`], [`Records`]), builds `PERF_RECORD_LOST` records as the kernel emits
//! them ([`write_lost`]) and replays text pokes onto a snapshot of kernel text ([`TextImage`]),
//! forwards or backwards. The wire layout and the writer of text-poke records are in
//! [`crate::record`], which the kernel module compiles too; this module is host-only (the guest
//! agent and the fuzz target use it).
//!
//! A lost record is `struct perf_event_header; u64 id; u64 lost; struct sample_id;`.
//!
//! Like the kernel's files it uses only `core`, never allocates and never panics, whatever bytes
//! it is given.

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used
)]

use crate::record::{
    text_poke_size, RecordError, SampleId, SampleIdLayout, Writer, HEADER_SIZE,
    PERF_RECORD_TEXT_POKE, PERF_SAMPLE_CPU, PERF_SAMPLE_ID, PERF_SAMPLE_IDENTIFIER,
    PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_TID, PERF_SAMPLE_TIME, TEXT_POKE_FIXED,
};

/// The `type` of a `PERF_RECORD_LOST` record, which counts records the ring buffer dropped.
pub const PERF_RECORD_LOST: u32 = 2;

/// The body of a lost record: `u64 id; u64 lost;`.
const LOST_FIXED: usize = 16;

/// Why a record cannot be parsed.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ParseError {
    /// The input ends before the header or before the `header.size` bytes it announces.
    Truncated,
    /// `header.size` is below 8, or differs from the size the record's contents and the
    /// `sample_id` layout require (which is what parsing with the wrong layout looks like).
    BadSize,
    /// `old_len + new_len` bytes do not fit in the record.
    LengthMismatch,
    /// The padding after the text-poke bytes is not zero, as the kernel always writes it.
    BadPadding,
}

impl ParseError {
    /// A short lowercase description for log lines.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Truncated => "truncated perf record",
            Self::BadSize => "perf record size does not match its contents",
            Self::LengthMismatch => "text-poke lengths exceed the record",
            Self::BadPadding => "nonzero text-poke padding",
        }
    }
}

// Parsing a trailer is host-only, so it is implemented here rather than in the kernel's file.
impl SampleId {
    /// Parses the `sample_id` trailer at the end of a record body, as perf's tools do.
    ///
    /// It sets exactly the fields `layout` has and leaves the others `None`. It works for every
    /// record type except `PERF_RECORD_SAMPLE`, whose fields have their own layout, so it is meant
    /// for the body of [`Record::Other`].
    pub fn from_trailer(body: &[u8], layout: SampleIdLayout) -> Result<Self, ParseError> {
        let start = body
            .len()
            .checked_sub(layout.size())
            .ok_or(ParseError::BadSize)?;
        let mut r = Reader {
            buf: body.get(start..).unwrap_or(&[]),
        };
        Self::read(&mut r, layout).ok_or(ParseError::BadSize)
    }

    /// Reads the trailer of `layout` from `r`, like [`SampleId::from_trailer`].
    fn read(r: &mut Reader<'_>, layout: SampleIdLayout) -> Option<Self> {
        let mut s = Self::default();
        if layout.has(PERF_SAMPLE_TID) {
            s.pid = Some(r.u32()?);
            s.tid = Some(r.u32()?);
        }
        if layout.has(PERF_SAMPLE_TIME) {
            s.time = Some(r.u64()?);
        }
        if layout.has(PERF_SAMPLE_ID) {
            s.id = Some(r.u64()?);
        }
        if layout.has(PERF_SAMPLE_STREAM_ID) {
            s.stream_id = Some(r.u64()?);
        }
        if layout.has(PERF_SAMPLE_CPU) {
            s.cpu = Some(r.u32()?);
            s.cpu_reserved = r.u32()?;
        }
        if layout.has(PERF_SAMPLE_IDENTIFIER) {
            s.identifier = Some(r.u64()?);
        }
        Some(s)
    }
}

/// A parsed `PERF_RECORD_TEXT_POKE` record, borrowing its bytes from the input.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct TextPoke<'a> {
    /// The header's `misc`: [`PERF_RECORD_MISC_KERNEL`](crate::record::PERF_RECORD_MISC_KERNEL)
    /// for every poke the kernel reports.
    pub misc: u16,
    /// The address of the first changed byte.
    pub addr: u64,
    /// The bytes before the change; empty when the text was just created (a new trampoline).
    pub old: &'a [u8],
    /// The bytes after the change; empty when the text is being freed (a removed trampoline).
    pub new: &'a [u8],
    /// The `sample_id` trailer.
    pub sample: SampleId,
}

/// One perf record, parsed as far as this codec understands its type.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Record<'a> {
    /// A `PERF_RECORD_TEXT_POKE`.
    TextPoke(TextPoke<'a>),
    /// A `PERF_RECORD_LOST`: the ring buffer had no room for `lost` records.
    Lost {
        /// The header's `misc`, which the kernel writes as 0.
        misc: u16,
        /// The id of the event whose records were lost.
        id: u64,
        /// How many records were lost.
        lost: u64,
        /// The `sample_id` trailer.
        sample: SampleId,
    },
    /// Any other record, skipped by its `header.size`.
    Other {
        /// The header's `type`.
        record_type: u32,
        /// The header's `misc`.
        misc: u16,
        /// Everything after the header, including any `sample_id` trailer.
        body: &'a [u8],
    },
}

/// A little-endian cursor over input bytes that fails instead of reading past the end.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Takes the next `n` bytes.
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let head = self.buf.get(..n)?;
        self.buf = self.buf.get(n..)?;
        Some(head)
    }

    /// Takes the next `N` bytes as an array.
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.buf.split_first_chunk::<N>()?;
        self.buf = rest;
        Some(*head)
    }

    /// Takes the next little-endian `u16`.
    fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }

    /// Takes the next little-endian `u32`.
    fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    /// Takes the next little-endian `u64`.
    fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }
}

/// Parses the record at the start of `buf`, returning it and the number of bytes it took.
///
/// The number of bytes is the record's `header.size`: at least [`HEADER_SIZE`] and at most
/// `buf.len()`, so a loop that skips that many bytes always advances and never leaves `buf`.
/// Text-poke and lost records must be exactly as the kernel writes them with `layout`; other
/// records are only checked to fit in `buf`.
pub fn parse_record(buf: &[u8], layout: SampleIdLayout) -> Result<(Record<'_>, usize), ParseError> {
    let mut r = Reader { buf };
    let (Some(record_type), Some(misc), Some(size)) = (r.u32(), r.u16(), r.u16()) else {
        return Err(ParseError::Truncated);
    };
    let size = usize::from(size);
    if size < HEADER_SIZE {
        return Err(ParseError::BadSize);
    }
    let body = buf.get(HEADER_SIZE..size).ok_or(ParseError::Truncated)?;
    let record = match record_type {
        PERF_RECORD_TEXT_POKE => Record::TextPoke(parse_text_poke(misc, size, body, layout)?),
        PERF_RECORD_LOST => parse_lost(misc, body, layout)?,
        _ => Record::Other {
            record_type,
            misc,
            body,
        },
    };
    Ok((record, size))
}

/// Parses the body of a text-poke record whose `header.size` is `size`.
fn parse_text_poke(
    misc: u16,
    size: usize,
    body: &[u8],
    layout: SampleIdLayout,
) -> Result<TextPoke<'_>, ParseError> {
    let trailer = layout.size();
    let room = TEXT_POKE_FIXED
        .checked_add(trailer)
        .and_then(|fixed| body.len().checked_sub(fixed))
        .ok_or(ParseError::BadSize)?;
    let mut r = Reader { buf: body };
    let (Some(addr), Some(old_len), Some(new_len)) = (r.u64(), r.u16(), r.u16()) else {
        return Err(ParseError::BadSize);
    };
    let (old_len, new_len) = (usize::from(old_len), usize::from(new_len));
    match old_len.checked_add(new_len) {
        Some(bytes) if bytes <= room => {}
        _ => return Err(ParseError::LengthMismatch),
    }
    // The lengths fit, so any other size means wrong padding or a trailer of another layout.
    if text_poke_size(old_len, new_len, layout) != Some(size) {
        return Err(ParseError::BadSize);
    }
    let old = r.bytes(old_len).ok_or(ParseError::BadSize)?;
    let new = r.bytes(new_len).ok_or(ParseError::BadSize)?;
    let pad_len = r
        .buf
        .len()
        .checked_sub(trailer)
        .ok_or(ParseError::BadSize)?;
    let pad = r.bytes(pad_len).ok_or(ParseError::BadSize)?;
    // Accepting only zero padding makes every accepted record canonical: re-encoding it gives
    // the same bytes, which the fuzz target checks.
    if pad.iter().any(|&b| b != 0) {
        return Err(ParseError::BadPadding);
    }
    let sample = SampleId::read(&mut r, layout).ok_or(ParseError::BadSize)?;
    Ok(TextPoke {
        misc,
        addr,
        old,
        new,
        sample,
    })
}

/// Parses the body of a lost record.
fn parse_lost(
    misc: u16,
    body: &[u8],
    layout: SampleIdLayout,
) -> Result<Record<'static>, ParseError> {
    if Some(body.len()) != LOST_FIXED.checked_add(layout.size()) {
        return Err(ParseError::BadSize);
    }
    let mut r = Reader { buf: body };
    let (Some(id), Some(lost)) = (r.u64(), r.u64()) else {
        return Err(ParseError::BadSize);
    };
    let sample = SampleId::read(&mut r, layout).ok_or(ParseError::BadSize)?;
    Ok(Record::Lost {
        misc,
        id,
        lost,
        sample,
    })
}

/// The `type` of a `PERF_RECORD_KSYMBOL` record, which registers or unregisters a range of
/// kernel text.
pub const PERF_RECORD_KSYMBOL: u32 = 17;

/// `PERF_RECORD_KSYMBOL_FLAGS_UNREGISTER`.
pub const KSYMBOL_FLAGS_UNREGISTER: u16 = 1;

/// The fixed part of a ksymbol record's body: `u64 addr; u32 len; u16 ksym_type; u16 flags;`.
const KSYMBOL_FIXED: usize = 16;

/// A parsed `PERF_RECORD_KSYMBOL` record, borrowing its name from the input.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Ksymbol<'a> {
    /// The first address of the range.
    pub addr: u64,
    /// Its length in bytes.
    pub len: u32,
    /// `PERF_RECORD_KSYMBOL_TYPE_*` (2 is `OOL`: text perf has no copy of).
    pub ksym_type: u16,
    /// `PERF_RECORD_KSYMBOL_FLAGS_*`.
    pub flags: u16,
    /// The name, without its NUL and padding.
    pub name: &'a [u8],
    /// The `sample_id` trailer.
    pub sample: SampleId,
}

impl Ksymbol<'_> {
    /// Whether it removes the range rather than registering it.
    pub const fn unregister(&self) -> bool {
        self.flags & KSYMBOL_FLAGS_UNREGISTER != 0
    }
}

/// Parses the body of a [`Record::Other`] of type [`PERF_RECORD_KSYMBOL`]: the fixed fields,
/// a NUL-terminated name padded to 8 bytes, and the trailer of `layout`.
pub fn parse_ksymbol(body: &[u8], layout: SampleIdLayout) -> Result<Ksymbol<'_>, ParseError> {
    let names = body
        .len()
        .checked_sub(layout.size())
        .and_then(|n| n.checked_sub(KSYMBOL_FIXED))
        .ok_or(ParseError::BadSize)?;
    let mut r = Reader { buf: body };
    let (Some(addr), Some(len), Some(ksym_type), Some(flags)) =
        (r.u64(), r.u32(), r.u16(), r.u16())
    else {
        return Err(ParseError::BadSize);
    };
    let padded = r.bytes(names).ok_or(ParseError::BadSize)?;
    // The kernel pads the name with NULs to a multiple of 8, at least one.
    let end = padded
        .iter()
        .position(|&b| b == 0)
        .ok_or(ParseError::BadPadding)?;
    if padded.len() % 8 != 0 || padded.iter().skip(end).any(|&b| b != 0) {
        return Err(ParseError::BadPadding);
    }
    let sample = SampleId::read(&mut r, layout).ok_or(ParseError::BadSize)?;
    Ok(Ksymbol {
        addr,
        len,
        ksym_type,
        flags,
        name: padded.get(..end).unwrap_or(&[]),
        sample,
    })
}

/// The size of the lost record the kernel emits, trailer included.
pub const fn lost_size(layout: SampleIdLayout) -> usize {
    // At most 8 + 16 + 48 bytes, so the sum cannot overflow.
    HEADER_SIZE
        .wrapping_add(LOST_FIXED)
        .wrapping_add(layout.size())
}

/// Writes the lost record the kernel emits to the start of `out`.
///
/// Returns the record's size; the kernel writes `misc` as 0.
pub fn write_lost(
    out: &mut [u8],
    misc: u16,
    id: u64,
    lost: u64,
    sample: &SampleId,
    layout: SampleIdLayout,
) -> Result<usize, RecordError> {
    let size = lost_size(layout);
    let size16 = u16::try_from(size).map_err(|_| RecordError::TooLarge)?;
    let mut w = Writer::new(out);
    let written = (|| {
        w.header(PERF_RECORD_LOST, misc, size16)?;
        w.put(&id.to_le_bytes())?;
        w.put(&lost.to_le_bytes())?;
        sample.write(&mut w, layout)
    })();
    written.ok_or(RecordError::BufferTooSmall)?;
    Ok(size)
}

/// An iterator over the records of a perf ring-buffer byte stream.
///
/// It yields each record in turn and stops after the input ends or after yielding the first
/// error, so it never loops forever and never skips a malformed record silently. Every item
/// consumes at least [`HEADER_SIZE`] bytes.
///
/// The input must be contiguous: a reader of the perf mmap ring buffer first copies out the bytes
/// between `data_tail` and `data_head`, joining the two pieces where the buffer wraps around.
#[derive(Clone, Debug)]
pub struct Records<'a> {
    buf: &'a [u8],
    layout: SampleIdLayout,
    offset: usize,
    failed: bool,
}

impl<'a> Records<'a> {
    /// Iterates over the records in `buf`, whose trailers have `layout`.
    pub const fn new(buf: &'a [u8], layout: SampleIdLayout) -> Self {
        Self {
            buf,
            layout,
            offset: 0,
            failed: false,
        }
    }

    /// The offset in the input of the next record, or of the malformed one after an error.
    pub const fn offset(&self) -> usize {
        self.offset
    }

    /// The input from the next record on, or from the malformed one after an error.
    pub fn remaining(&self) -> &'a [u8] {
        self.buf.get(self.offset..).unwrap_or(&[])
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.remaining();
        if self.failed || rest.is_empty() {
            return None;
        }
        match parse_record(rest, self.layout) {
            Ok((record, size)) => {
                // `size <= rest.len()`, so the offset stays within the input.
                self.offset = self.offset.saturating_add(size);
                Some(Ok(record))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

impl core::iter::FusedIterator for Records<'_> {}

/// Why a text poke cannot be replayed onto a [`TextImage`].
///
/// After an error the image is unchanged.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ReplayError {
    /// The poke lies partly inside the image and partly outside it.
    OutOfImage,
    /// The image's bytes differ from the ones the poke says were there before it.
    ///
    /// This is how a replay detects a missing or reordered record. `offset` is the offset from
    /// the poke's address of the first differing byte.
    OldMismatch {
        /// The offset from the poke's address of the first differing byte.
        offset: usize,
    },
    /// The old and the new bytes differ in length, and neither is empty.
    ///
    /// The kernel only emits different lengths when text is created (`old` empty) or freed
    /// (`new` empty).
    UnequalLengths,
}

impl ReplayError {
    /// A short lowercase description for log lines.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::OutOfImage => "text poke straddles the image's edge",
            Self::OldMismatch { .. } => "image bytes differ from the poke's old bytes",
            Self::UnequalLengths => "text poke with unequal nonzero lengths",
        }
    }
}

/// What replaying a text poke did to a [`TextImage`].
///
/// It is named in the direction of the replay: reverting a creation removes text.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Applied {
    /// The bytes were checked and replaced by bytes of the same length.
    Patched,
    /// Text was created: the bytes were written without a check, as nothing was there before.
    Created,
    /// Text was freed: the bytes were checked and left as they are, as nothing is there now.
    Removed,
    /// The poke has no bytes at all, so there was nothing to do.
    Empty,
    /// The poke lies wholly outside the image, so there was nothing to do.
    ///
    /// A consumer whose image covers only part of the kernel's text ignores these.
    NotCovered,
}

/// A snapshot of a region of kernel text that text pokes can be replayed onto.
///
/// The initial copy of the text (for instance read from `/proc/kcore`) plus the text-poke records
/// since give the text at any time. Since every record carries both the old and the new bytes it
/// can be replayed forwards ([`TextImage::apply`]) or backwards ([`TextImage::revert`]), and each
/// step checks the bytes it replaces, which detects a lost or reordered record.
#[derive(Debug)]
pub struct TextImage<'a> {
    /// The address of `bytes[0]`.
    pub base: u64,
    /// The text, starting at `base`.
    pub bytes: &'a mut [u8],
}

impl<'a> TextImage<'a> {
    /// Wraps the snapshot `bytes` of the text at `base`.
    pub fn new(base: u64, bytes: &'a mut [u8]) -> Self {
        Self { base, bytes }
    }

    /// Replays `poke` forwards: checks that the image holds `poke.old`, then writes `poke.new`.
    ///
    /// A creation (`old` empty) writes `new` without a check; a removal (`new` empty) checks `old`
    /// and leaves the bytes, since freed text has no contents to track.
    pub fn apply(&mut self, poke: &TextPoke<'_>) -> Result<Applied, ReplayError> {
        self.replay(poke.addr, poke.old, poke.new)
    }

    /// Replays `poke` backwards: checks that the image holds `poke.new`, then writes `poke.old`.
    ///
    /// Reverting a creation checks `new` and leaves the bytes, since what the memory held before
    /// the text was created is unknown; reverting a removal writes `old` back without a check.
    pub fn revert(&mut self, poke: &TextPoke<'_>) -> Result<Applied, ReplayError> {
        self.replay(poke.addr, poke.new, poke.old)
    }

    /// Replaces `expected` at `addr` by `written`.
    fn replay(
        &mut self,
        addr: u64,
        expected: &[u8],
        written: &[u8],
    ) -> Result<Applied, ReplayError> {
        let (len, applied) = match (expected.len(), written.len()) {
            (0, 0) => return Ok(Applied::Empty),
            (0, len) => (len, Applied::Created),
            (len, 0) => (len, Applied::Removed),
            (a, b) if a == b => (a, Applied::Patched),
            _ => return Err(ReplayError::UnequalLengths),
        };
        let Some(target) = self.locate(addr, len)? else {
            return Ok(Applied::NotCovered);
        };
        if let Some(offset) = target
            .iter()
            .zip(expected)
            .position(|(have, want)| have != want)
        {
            return Err(ReplayError::OldMismatch { offset });
        }
        if !written.is_empty() {
            // `target` is exactly `len == written.len()` bytes long.
            target.copy_from_slice(written);
        }
        Ok(applied)
    }

    /// The image's bytes at `addr..addr + len`, or `None` when they are wholly outside it.
    fn locate(&mut self, addr: u64, len: usize) -> Result<Option<&mut [u8]>, ReplayError> {
        // Computing in `u128` keeps ranges that end at or past 2^64 exact.
        let start = u128::from(addr);
        let end = start.checked_add(len as u128);
        let image_start = u128::from(self.base);
        let image_end = image_start.checked_add(self.bytes.len() as u128);
        let (Some(end), Some(image_end)) = (end, image_end) else {
            return Err(ReplayError::OutOfImage);
        };
        if end <= image_start || start >= image_end {
            return Ok(None);
        }
        if start < image_start || end > image_end {
            return Err(ReplayError::OutOfImage);
        }
        let offset = start
            .checked_sub(image_start)
            .and_then(|offset| usize::try_from(offset).ok())
            .ok_or(ReplayError::OutOfImage)?;
        let end = offset.checked_add(len).ok_or(ReplayError::OutOfImage)?;
        self.bytes
            .get_mut(offset..end)
            .map(Some)
            .ok_or(ReplayError::OutOfImage)
    }
}
