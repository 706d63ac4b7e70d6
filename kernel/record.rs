// SPDX-License-Identifier: GPL-2.0

//! The `PERF_RECORD_TEXT_POKE` record writer.
//!
//! When the kernel modifies its own text it tells perf with a `PERF_RECORD_TEXT_POKE` record
//! that holds the address and both the old and the new bytes, so that a tracer decoding
//! instruction traces (Intel PT, CoreSight) can keep its copy of kernel text in step. This file
//! builds such records byte for byte as the kernel emits them ([`write_text_poke`]), for the
//! module's own log of its pokes. The parser and the replayer are host-only, in `textpoke-core`'s
//! `replay` module.
//!
//! The layout follows `include/uapi/linux/perf_event.h` and `perf_event_text_poke()` in
//! `kernel/events/core.c` (Linux 6.12), in the byte order of the guests textpoke supports
//! (x86_64 and arm64), little-endian:
//!
//! ```text
//! struct perf_event_header { u32 type; u16 misc; u16 size; }   size counts every byte below too
//! u64 addr; u16 old_len; u16 new_len;
//! u8  bytes[old_len + new_len];                                the old bytes, then the new ones
//! u8  pad[];            zeros, so that 4 + old_len + new_len + pad is a multiple of 8
//! struct sample_id;     only with attr.sample_id_all; attr.sample_type picks its fields
//! ```
//!
//! It is compiled both into the kernel module and into the host crate `textpoke-core` (through
//! `#[path]`), so it uses only `core`, never allocates and never panics.

#![deny(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used
)]

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
pub const TEXT_POKE_FIXED: usize = 12;

/// Why a record cannot be built.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum RecordError {
    /// The record would be larger than a `u16` `header.size` can describe.
    TooLarge,
    /// The output buffer is smaller than the record.
    BufferTooSmall,
}

impl RecordError {
    /// A short lowercase description for log lines.
    pub const fn as_str(self) -> &'static str {
        match self {
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
/// Writing writes exactly the fields its [`SampleIdLayout`] has, as `0` where the field is
/// `None`, and ignores the fields the layout lacks.
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
    /// Writes the trailer of `layout` to `w`.
    pub(crate) fn write(&self, w: &mut Writer<'_>, layout: SampleIdLayout) -> Option<()> {
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

/// Writes the `sample_id` trailer of `layout` for `sample` to the start of `out`.
///
/// Returns the trailer's size, [`SampleIdLayout::size`]; `out` must hold that many bytes. The
/// trailer is the one [`write_text_poke`] appends, for writers of other records that carry it.
pub fn write_sample_id(
    out: &mut [u8],
    sample: &SampleId,
    layout: SampleIdLayout,
) -> Result<usize, RecordError> {
    sample
        .write(&mut Writer::new(out), layout)
        .ok_or(RecordError::BufferTooSmall)?;
    Ok(layout.size())
}

/// A cursor over an output buffer that fails instead of writing past the end.
pub(crate) struct Writer<'a> {
    out: &'a mut [u8],
    pos: usize,
}

impl<'a> Writer<'a> {
    /// Writes from the start of `out`.
    pub(crate) fn new(out: &'a mut [u8]) -> Self {
        Self { out, pos: 0 }
    }

    /// Appends `bytes`.
    pub(crate) fn put(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self.pos.checked_add(bytes.len())?;
        // `get_mut` returned a slice exactly `bytes.len()` long, so the copy cannot panic.
        self.out.get_mut(self.pos..end)?.copy_from_slice(bytes);
        self.pos = end;
        Some(())
    }

    /// Appends `n` zero bytes.
    pub(crate) fn zeros(&mut self, n: usize) -> Option<()> {
        let end = self.pos.checked_add(n)?;
        self.out.get_mut(self.pos..end)?.fill(0);
        self.pos = end;
        Some(())
    }

    /// Appends a `perf_event_header`.
    pub(crate) fn header(&mut self, record_type: u32, misc: u16, size: u16) -> Option<()> {
        self.put(&record_type.to_le_bytes())?;
        self.put(&misc.to_le_bytes())?;
        self.put(&size.to_le_bytes())
    }
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
    let mut w = Writer::new(out);
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
