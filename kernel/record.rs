// SPDX-License-Identifier: GPL-2.0

//! `PERF_RECORD_TEXT_POKE` records: a codec and a replayer.
//!
//! When the kernel modifies its own text it tells perf with a `PERF_RECORD_TEXT_POKE` record
//! that holds the address and both the old and the new bytes, so that a tracer decoding
//! instruction traces (Intel PT, CoreSight) can keep its copy of kernel text in step: an initial
//! copy of the text (for instance read from `/proc/kcore`) plus the text-poke records give the
//! text at any time. This file parses such records out of a perf ring-buffer byte stream
//! ([`parse_record`], [`Records`]), builds them byte for byte as the kernel emits them
//! ([`write_text_poke`], [`write_lost`]) and replays them onto a snapshot of kernel text
//! ([`TextImage`]), forwards or backwards.
//!
//! The layout follows `include/uapi/linux/perf_event.h` and `perf_event_text_poke()` in
//! `kernel/events/core.c` (Linux 6.12):
//!
//! ```text
//! struct perf_event_header { u32 type; u16 misc; u16 size; }   size counts every byte below too
//! u64 addr; u16 old_len; u16 new_len;
//! u8  bytes[old_len + new_len];                                the old bytes, then the new ones
//! u8  pad[];            zeros, so that 4 + old_len + new_len + pad is a multiple of 8
//! struct sample_id;     only with attr.sample_id_all; attr.sample_type picks its fields
//! ```
//!
//! Perf records are in the byte order of the machine that recorded them. The guests textpoke
//! supports (x86_64 and arm64) are little-endian, so this codec reads and writes little-endian
//! only.
//!
//! Like every pure file of the engine it is compiled both into the kernel module and into the host
//! crate `textpoke-core` (through `#[path]`), so it uses only `core`, never allocates and never
//! panics, whatever bytes it is given.

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used
)]

/// The `type` of a `PERF_RECORD_LOST` record, which counts records the ring buffer dropped.
pub const PERF_RECORD_LOST: u32 = 2;

/// The `type` of a `PERF_RECORD_TEXT_POKE` record, which reports a change to kernel text.
pub const PERF_RECORD_TEXT_POKE: u32 = 20;

/// The `misc` the kernel puts in a text-poke record: the change is to kernel text.
pub const PERF_RECORD_MISC_KERNEL: u16 = 1;

/// The `sample_type` bit that puts `u32 pid, tid` in the `sample_id` trailer.
pub const PERF_SAMPLE_TID: u64 = 1 << 1;

/// The `sample_type` bit that puts `u64 time` in the `sample_id` trailer.
pub const PERF_SAMPLE_TIME: u64 = 1 << 2;

/// The `sample_type` bit that puts `u64 id` in the `sample_id` trailer.
pub const PERF_SAMPLE_ID: u64 = 1 << 6;

/// The `sample_type` bit that puts `u32 cpu, res` in the `sample_id` trailer.
pub const PERF_SAMPLE_CPU: u64 = 1 << 7;

/// The `sample_type` bit that puts `u64 stream_id` in the `sample_id` trailer.
pub const PERF_SAMPLE_STREAM_ID: u64 = 1 << 9;

/// The `sample_type` bit that puts `u64 id` last in the `sample_id` trailer.
pub const PERF_SAMPLE_IDENTIFIER: u64 = 1 << 16;

/// Every `sample_type` bit that adds a field to the `sample_id` trailer.
///
/// The kernel has the same mask under the same name in `kernel/events/core.c`; the other bits of
/// `sample_type` only shape `PERF_RECORD_SAMPLE` records.
pub const PERF_SAMPLE_ID_ALL: u64 = PERF_SAMPLE_TID
    | PERF_SAMPLE_TIME
    | PERF_SAMPLE_ID
    | PERF_SAMPLE_STREAM_ID
    | PERF_SAMPLE_CPU
    | PERF_SAMPLE_IDENTIFIER;

/// The size of `struct perf_event_header`, the smallest possible record.
pub const HEADER_SIZE: usize = 8;

/// The largest record `header.size` (a `u16`) can describe.
pub const MAX_RECORD_SIZE: usize = u16::MAX as usize;

/// The body of a text-poke record before its bytes: `u64 addr; u16 old_len; u16 new_len;`.
const TEXT_POKE_FIXED: usize = 12;

/// The body of a lost record: `u64 id; u64 lost;`.
const LOST_FIXED: usize = 16;

/// Why a record cannot be parsed or built.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum RecordError {
    /// The input ends before the header or before the `header.size` bytes it announces.
    Truncated,
    /// `header.size` is below 8, or differs from the size the record's contents and the
    /// `sample_id` layout require (which is what parsing with the wrong layout looks like).
    BadSize,
    /// `old_len + new_len` bytes do not fit in the record.
    LengthMismatch,
    /// The padding after the text-poke bytes is not zero, as the kernel always writes it.
    BadPadding,
    /// The record would be larger than a `u16` `header.size` can describe.
    TooLarge,
    /// The output buffer is smaller than the record.
    BufferTooSmall,
}

impl RecordError {
    /// A short lowercase description for log lines.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Truncated => "truncated perf record",
            Self::BadSize => "perf record size does not match its contents",
            Self::LengthMismatch => "text-poke lengths exceed the record",
            Self::BadPadding => "nonzero text-poke padding",
            Self::TooLarge => "perf record larger than 64 KiB",
            Self::BufferTooSmall => "output buffer too small for the perf record",
        }
    }
}

/// Which fields the `sample_id` trailer of every non-sample record holds.
///
/// The kernel appends the trailer when the event was opened with `attr.sample_id_all = 1`, with
/// one field for each [`PERF_SAMPLE_ID_ALL`] bit of `attr.sample_type`, always in the order
/// TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER (`__perf_event__output_id_sample()`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct SampleIdLayout {
    /// The trailer's bits of `sample_type`; the other bits are cleared.
    sample_type: u64,
}

impl SampleIdLayout {
    /// The layout of an event opened with `sample_id_all = 0`: no trailer at all.
    pub const NONE: Self = Self { sample_type: 0 };

    /// The layout of an event opened with `sample_id_all = 1` and this `sample_type`.
    ///
    /// Bits outside [`PERF_SAMPLE_ID_ALL`] are ignored.
    pub const fn new(sample_type: u64) -> Self {
        Self {
            sample_type: sample_type & PERF_SAMPLE_ID_ALL,
        }
    }

    /// The layout of an event opened with these two `perf_event_attr` fields.
    pub const fn from_attr(sample_type: u64, sample_id_all: bool) -> Self {
        if sample_id_all {
            Self::new(sample_type)
        } else {
            Self::NONE
        }
    }

    /// The trailer's bits of `sample_type`.
    pub const fn sample_type(self) -> u64 {
        self.sample_type
    }

    /// Whether the trailer holds the field(s) of the `PERF_SAMPLE_*` bit `bit`.
    pub const fn has(self, bit: u64) -> bool {
        self.sample_type & bit != 0
    }

    /// The size of the trailer in bytes, between 0 and 48.
    pub const fn size(self) -> usize {
        // Every trailer field (`pid, tid` and `cpu, res` count as one) is 8 bytes, and there are
        // at most six of them, so the product cannot overflow.
        (self.sample_type.count_ones() as usize).wrapping_mul(8)
    }
}

/// The fields of a `sample_id` trailer.
///
/// Parsing sets exactly the fields its [`SampleIdLayout`] has, and leaves the others `None`.
/// Writing writes exactly the layout's fields, as `0` where the field is `None`, and ignores the
/// fields the layout lacks.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct SampleId {
    /// The process id, with [`PERF_SAMPLE_TID`].
    pub pid: Option<u32>,
    /// The thread id, with [`PERF_SAMPLE_TID`].
    pub tid: Option<u32>,
    /// The perf clock's timestamp, with [`PERF_SAMPLE_TIME`].
    pub time: Option<u64>,
    /// The event's id, with [`PERF_SAMPLE_ID`].
    pub id: Option<u64>,
    /// The id of the event the record was written for, with [`PERF_SAMPLE_STREAM_ID`].
    pub stream_id: Option<u64>,
    /// The CPU that wrote the record, with [`PERF_SAMPLE_CPU`].
    pub cpu: Option<u32>,
    /// The reserved word after `cpu`, which the kernel writes as 0.
    ///
    /// It is kept so that re-encoding a parsed record gives back the same bytes.
    pub cpu_reserved: u32,
    /// The event's id again, at a fixed place from the end, with [`PERF_SAMPLE_IDENTIFIER`].
    pub identifier: Option<u64>,
}

impl SampleId {
    /// Parses the `sample_id` trailer at the end of a record body, as perf's tools do.
    ///
    /// This works for every record type except `PERF_RECORD_SAMPLE`, whose fields have their own
    /// layout, so it is meant for the body of [`Record::Other`].
    pub fn from_trailer(body: &[u8], layout: SampleIdLayout) -> Result<Self, RecordError> {
        let start = body
            .len()
            .checked_sub(layout.size())
            .ok_or(RecordError::BadSize)?;
        let mut r = Reader {
            buf: body.get(start..).unwrap_or(&[]),
        };
        Self::read(&mut r, layout).ok_or(RecordError::BadSize)
    }

    /// Reads the trailer of `layout` from `r`.
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

    /// Writes the trailer of `layout` to `w`.
    fn write(&self, w: &mut Writer<'_>, layout: SampleIdLayout) -> Option<()> {
        if layout.has(PERF_SAMPLE_TID) {
            w.put(&self.pid.unwrap_or(0).to_le_bytes())?;
            w.put(&self.tid.unwrap_or(0).to_le_bytes())?;
        }
        if layout.has(PERF_SAMPLE_TIME) {
            w.put(&self.time.unwrap_or(0).to_le_bytes())?;
        }
        if layout.has(PERF_SAMPLE_ID) {
            w.put(&self.id.unwrap_or(0).to_le_bytes())?;
        }
        if layout.has(PERF_SAMPLE_STREAM_ID) {
            w.put(&self.stream_id.unwrap_or(0).to_le_bytes())?;
        }
        if layout.has(PERF_SAMPLE_CPU) {
            w.put(&self.cpu.unwrap_or(0).to_le_bytes())?;
            w.put(&self.cpu_reserved.to_le_bytes())?;
        }
        if layout.has(PERF_SAMPLE_IDENTIFIER) {
            w.put(&self.identifier.unwrap_or(0).to_le_bytes())?;
        }
        Some(())
    }
}

/// A parsed `PERF_RECORD_TEXT_POKE` record, borrowing its bytes from the input.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct TextPoke<'a> {
    /// The header's `misc`: [`PERF_RECORD_MISC_KERNEL`] for every poke the kernel reports.
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

/// A cursor over an output buffer that fails instead of writing past the end.
struct Writer<'a> {
    out: &'a mut [u8],
    pos: usize,
}

impl Writer<'_> {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self.pos.checked_add(bytes.len())?;
        // `get_mut` returned a slice exactly `bytes.len()` long, so the copy cannot panic.
        self.out.get_mut(self.pos..end)?.copy_from_slice(bytes);
        self.pos = end;
        Some(())
    }

    /// Appends `n` zero bytes.
    fn zeros(&mut self, n: usize) -> Option<()> {
        let end = self.pos.checked_add(n)?;
        self.out.get_mut(self.pos..end)?.fill(0);
        self.pos = end;
        Some(())
    }

    /// Appends a `perf_event_header`.
    fn header(&mut self, record_type: u32, misc: u16, size: u16) -> Option<()> {
        self.put(&record_type.to_le_bytes())?;
        self.put(&misc.to_le_bytes())?;
        self.put(&size.to_le_bytes())
    }
}

/// Parses the record at the start of `buf`, returning it and the number of bytes it took.
///
/// The number of bytes is the record's `header.size`: at least [`HEADER_SIZE`] and at most
/// `buf.len()`, so a loop that skips that many bytes always advances and never leaves `buf`.
/// Text-poke and lost records must be exactly as the kernel writes them with `layout`; other
/// records are only checked to fit in `buf`.
pub fn parse_record(
    buf: &[u8],
    layout: SampleIdLayout,
) -> Result<(Record<'_>, usize), RecordError> {
    let mut r = Reader { buf };
    let (Some(record_type), Some(misc), Some(size)) = (r.u32(), r.u16(), r.u16()) else {
        return Err(RecordError::Truncated);
    };
    let size = usize::from(size);
    if size < HEADER_SIZE {
        return Err(RecordError::BadSize);
    }
    let body = buf.get(HEADER_SIZE..size).ok_or(RecordError::Truncated)?;
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
) -> Result<TextPoke<'_>, RecordError> {
    let trailer = layout.size();
    let room = TEXT_POKE_FIXED
        .checked_add(trailer)
        .and_then(|fixed| body.len().checked_sub(fixed))
        .ok_or(RecordError::BadSize)?;
    let mut r = Reader { buf: body };
    let (Some(addr), Some(old_len), Some(new_len)) = (r.u64(), r.u16(), r.u16()) else {
        return Err(RecordError::BadSize);
    };
    let (old_len, new_len) = (usize::from(old_len), usize::from(new_len));
    match old_len.checked_add(new_len) {
        Some(bytes) if bytes <= room => {}
        _ => return Err(RecordError::LengthMismatch),
    }
    // The lengths fit, so any other size means wrong padding or a trailer of another layout.
    if text_poke_size(old_len, new_len, layout) != Some(size) {
        return Err(RecordError::BadSize);
    }
    let old = r.bytes(old_len).ok_or(RecordError::BadSize)?;
    let new = r.bytes(new_len).ok_or(RecordError::BadSize)?;
    let pad_len = r
        .buf
        .len()
        .checked_sub(trailer)
        .ok_or(RecordError::BadSize)?;
    let pad = r.bytes(pad_len).ok_or(RecordError::BadSize)?;
    // Accepting only zero padding makes every accepted record canonical: re-encoding it gives
    // the same bytes, which the fuzz target checks.
    if pad.iter().any(|&b| b != 0) {
        return Err(RecordError::BadPadding);
    }
    let sample = SampleId::read(&mut r, layout).ok_or(RecordError::BadSize)?;
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
) -> Result<Record<'static>, RecordError> {
    if Some(body.len()) != LOST_FIXED.checked_add(layout.size()) {
        return Err(RecordError::BadSize);
    }
    let mut r = Reader { buf: body };
    let (Some(id), Some(lost)) = (r.u64(), r.u64()) else {
        return Err(RecordError::BadSize);
    };
    let sample = SampleId::read(&mut r, layout).ok_or(RecordError::BadSize)?;
    Ok(Record::Lost {
        misc,
        id,
        lost,
        sample,
    })
}

/// The size of the text-poke record the kernel emits for these lengths, trailer included.
///
/// Returns `None` when the record would not fit in a `u16` `header.size` (the kernel would
/// silently truncate it instead; no real poke comes near).
pub fn text_poke_size(old_len: usize, new_len: usize, layout: SampleIdLayout) -> Option<usize> {
    // As `perf_event_text_poke()`: `tot` counts both lengths and both byte arrays, and the
    // padding rounds it up to a multiple of 8.
    let tot = old_len.checked_add(new_len)?.checked_add(4)?;
    let padded = tot.checked_add(7)? & !7;
    let size = HEADER_SIZE
        .checked_add(8)?
        .checked_add(padded)?
        .checked_add(layout.size())?;
    (size <= MAX_RECORD_SIZE).then_some(size)
}

/// Writes the text-poke record the kernel emits for this poke to the start of `out`.
///
/// Returns the record's size. The bytes are identical to the kernel's, zero padding and
/// `sample_id` trailer included; `misc` is normally [`PERF_RECORD_MISC_KERNEL`]. On error
/// `out` may be partly written.
pub fn write_text_poke(
    out: &mut [u8],
    misc: u16,
    addr: u64,
    old: &[u8],
    new: &[u8],
    sample: &SampleId,
    layout: SampleIdLayout,
) -> Result<usize, RecordError> {
    let size = text_poke_size(old.len(), new.len(), layout).ok_or(RecordError::TooLarge)?;
    let (Ok(size16), Ok(old_len), Ok(new_len)) = (
        u16::try_from(size),
        u16::try_from(old.len()),
        u16::try_from(new.len()),
    ) else {
        return Err(RecordError::TooLarge);
    };
    if out.len() < size {
        return Err(RecordError::BufferTooSmall);
    }
    let pad = HEADER_SIZE
        .checked_add(TEXT_POKE_FIXED)
        .and_then(|fixed| fixed.checked_add(layout.size()))
        .and_then(|fixed| size.checked_sub(fixed))
        .and_then(|rest| rest.checked_sub(old.len()))
        .and_then(|rest| rest.checked_sub(new.len()))
        .ok_or(RecordError::TooLarge)?;
    let mut w = Writer { out, pos: 0 };
    let written = (|| {
        w.header(PERF_RECORD_TEXT_POKE, misc, size16)?;
        w.put(&addr.to_le_bytes())?;
        w.put(&old_len.to_le_bytes())?;
        w.put(&new_len.to_le_bytes())?;
        w.put(old)?;
        w.put(new)?;
        w.zeros(pad)?;
        sample.write(&mut w, layout)
    })();
    written.ok_or(RecordError::BufferTooSmall)?;
    Ok(size)
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
    let mut w = Writer { out, pos: 0 };
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
    type Item = Result<Record<'a>, RecordError>;

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
