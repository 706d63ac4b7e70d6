// SPDX-License-Identifier: GPL-2.0

//! The engine's own log of the records it emitted, in `PERF_RECORD_TEXT_POKE` wire format.
//!
//! Every time a batch calls `perf_event_text_poke()` it appends the same record to this log,
//! built with the same codec (`record.rs`) a consumer parses perf's ring buffer with, with
//! `sample_id` fields `TID`, `TIME` (`local_clock()` just after the call returned: an upper
//! bound for perf's own timestamp), `CPU` and `IDENTIFIER`, which here carries the engine's
//! sequence number so a reader can tell whether it missed any. The guest verifier compares
//! perf's stream with this one record by record, and reads it from debugfs. The records that
//! describe a module's text (`new_text.rs`) carry up to a page of bytes each and are counted in
//! the stats (`new_text.*`) instead.

use crate::record::{
    self, SampleId, SampleIdLayout, PERF_RECORD_MISC_KERNEL, PERF_SAMPLE_CPU,
    PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
};
use kernel::{current, new_mutex, prelude::*, sync::Mutex};

/// The trailer every logged record carries.
pub(crate) const LAYOUT: SampleIdLayout = SampleIdLayout::new(
    PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER,
);

/// Most bytes kept; later records are counted as dropped until the log is cleared.
const CAPACITY: usize = 8 << 20;

struct Buf {
    bytes: KVVec<u8>,
    seq: u64,
    dropped: u64,
}

/// The log.
#[pin_data]
pub(crate) struct PokeLog {
    #[pin]
    buf: Mutex<Buf>,
}

impl PokeLog {
    /// An empty log, initialized in place.
    pub(crate) fn new() -> impl PinInit<Self> {
        let buf = Buf {
            bytes: KVVec::new(),
            seq: 0,
            dropped: 0,
        };
        pin_init!(Self {
            buf <- new_mutex!(buf, "textpoke:poke_log"),
        })
    }

    /// Appends the record for a poke of `addr` from `old` to `new`, emitted on `cpu` at `time`.
    pub(crate) fn append(&self, addr: u64, old: &[u8], new: &[u8], time: u64, cpu: usize) {
        let task = current!();
        let mut b = self.buf.lock();
        b.seq = b.seq.wrapping_add(1);
        let sample = SampleId {
            pid: u32::try_from(task.group_leader().pid()).ok(),
            tid: u32::try_from(task.pid()).ok(),
            time: Some(time),
            cpu: u32::try_from(cpu).ok(),
            identifier: Some(b.seq),
            ..SampleId::default()
        };
        let mut rec = [0u8; 128];
        let written = record::write_text_poke(
            &mut rec,
            PERF_RECORD_MISC_KERNEL,
            addr,
            old,
            new,
            &sample,
            LAYOUT,
        );
        let fits = |b: &Buf, n: usize| b.bytes.len().saturating_add(n) <= CAPACITY;
        // A record that does not fit, or a writer that claims more bytes than it has (which
        // it cannot), is counted as dropped: the agent fails a boot whose log dropped any.
        match written.ok().and_then(|n| rec.get(..n)) {
            Some(r) if fits(&b, r.len()) => {
                if b.bytes.extend_from_slice(r, GFP_KERNEL).is_err() {
                    b.dropped = b.dropped.saturating_add(1);
                }
            }
            _ => b.dropped = b.dropped.saturating_add(1),
        }
    }

    /// A copy of the log's bytes.
    pub(crate) fn snapshot(&self) -> Result<KVVec<u8>> {
        let b = self.buf.lock();
        let mut out = KVVec::with_capacity(b.bytes.len(), GFP_KERNEL)?;
        out.extend_from_slice(&b.bytes, GFP_KERNEL)?;
        Ok(out)
    }

    /// Records that did not fit since the last clear.
    pub(crate) fn dropped(&self) -> u64 {
        self.buf.lock().dropped
    }

    /// Empties the log (the sequence number keeps counting).
    pub(crate) fn clear(&self) {
        let mut b = self.buf.lock();
        b.bytes = KVVec::new();
        b.dropped = 0;
    }
}
