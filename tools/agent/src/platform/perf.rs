//! A `PERF_RECORD_TEXT_POKE` recorder on every CPU: what `perf record --kcore` sets up, minus
//! the file.
//!
//! [`Recorder::open`] opens one event per CPU with `perf_event_open(attr, pid = -1, cpu,
//! group = -1, PERF_FLAG_FD_CLOEXEC)`, where `attr` is a software dummy event (it counts nothing
//! and samples nothing) with `text_poke = 1`, `ksymbol = 1` (perf's tracking event asks for both:
//! a ksymbol register tells where text the copy lacks begins, and text pokes fill it),
//! `sample_id_all = 1` and
//! `sample_type = TID | TIME | CPU | IDENTIFIER`. Each event gets a ring buffer of one metadata
//! page plus a power of two of data pages, mapped `PROT_READ | PROT_WRITE` so that the kernel
//! never overwrites unread records (it drops them and later writes a `PERF_RECORD_LOST` record
//! instead). The events are opened disabled (`disabled = 1`) and enabled with
//! `PERF_EVENT_IOC_ENABLE` once every buffer is mapped, so no record is produced before the
//! recorder can hold it.
//!
//! The kernel writes a text-poke record into the buffer of the CPU that made the change, so a
//! poke shows up in exactly one buffer. [`Recorder::drain`] empties every buffer, following the
//! protocol described above `struct perf_event_mmap_page` in `include/uapi/linux/perf_event.h`
//! and implemented by `tools/include/linux/ring_buffer.h`: load `data_head` with acquire
//! semantics, copy the bytes from `data_tail` to `data_head` (joining the two pieces where they
//! wrap around the end of the data area; a record may straddle it), then store the new
//! `data_tail` with release semantics, which orders the copy before the kernel may reuse the
//! space. The copy is parsed with [`textpoke_core::replay`].
//!
//! The ring-buffer copy ([`Ring`]) works on any memory laid out like the mapping, which is how the
//! unit tests feed it synthetic buffers.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use textpoke_core::record::{
    SampleId, SampleIdLayout, PERF_SAMPLE_CPU, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_TID,
    PERF_SAMPLE_TIME,
};
use textpoke_core::replay::{parse_ksymbol, Record, Records, TextPoke, PERF_RECORD_KSYMBOL};

/// `PERF_TYPE_SOFTWARE`.
pub const PERF_TYPE_SOFTWARE: u32 = 1;

/// `PERF_COUNT_SW_DUMMY`: a software event that counts nothing, for side-band records.
pub const PERF_COUNT_SW_DUMMY: u64 = 9;

/// `PERF_FLAG_FD_CLOEXEC`: open the event file descriptor close-on-exec.
pub const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

/// `PERF_EVENT_IOC_ENABLE`, `_IO('$', 0)`.
pub const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;

/// `PERF_ATTR_SIZE_VER8`: the size of the 6.12 `struct perf_event_attr` (with `config3`).
pub const PERF_ATTR_SIZE_VER8: u32 = 136;

/// The `sample_type` the recorder uses: every record's `sample_id` trailer holds `pid, tid`,
/// `time`, `cpu, res` and `id`.
pub const SAMPLE_TYPE: u64 =
    PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER;

/// The bits of the flag word of `struct perf_event_attr` (the `__u64` bitfield after
/// `read_format`) that the recorder sets, named as in the uapi header.
pub mod attr_flags {
    /// `disabled`: off by default.
    pub const DISABLED: u64 = 1 << 0;
    /// `sample_id_all`: put the `sample_id` trailer on every non-sample record.
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    /// `use_clockid`: timestamps from `clockid` instead of perf's clock.
    pub const USE_CLOCKID: u64 = 1 << 25;
    /// `ksymbol`: include `PERF_RECORD_KSYMBOL` records.
    pub const KSYMBOL: u64 = 1 << 29;
    /// `text_poke`: include `PERF_RECORD_TEXT_POKE` records.
    pub const TEXT_POKE: u64 = 1 << 33;
}

/// `struct perf_event_attr` of Linux 6.12 (`PERF_ATTR_SIZE_VER8`, 136 bytes), with the
/// bitfield word as one `u64` ([`attr_flags`]) and each union as its first member.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerfEventAttr {
    /// Major type: `PERF_TYPE_*`.
    pub type_: u32,
    /// `size_of::<PerfEventAttr>()`.
    pub size: u32,
    /// Type-specific configuration.
    pub config: u64,
    /// `sample_period` or `sample_freq`.
    pub sample_period: u64,
    /// `PERF_SAMPLE_*` bits.
    pub sample_type: u64,
    /// `PERF_FORMAT_*` bits.
    pub read_format: u64,
    /// The bitfield word; see [`attr_flags`].
    pub flags: u64,
    /// `wakeup_events` or `wakeup_watermark`.
    pub wakeup_events: u32,
    /// Breakpoint type.
    pub bp_type: u32,
    /// `bp_addr`, `kprobe_func`, `uprobe_path` or `config1`.
    pub config1: u64,
    /// `bp_len`, `kprobe_addr`, `probe_offset` or `config2`.
    pub config2: u64,
    /// `PERF_SAMPLE_BRANCH_*` bits.
    pub branch_sample_type: u64,
    /// User registers to dump on samples.
    pub sample_regs_user: u64,
    /// User stack size to dump on samples.
    pub sample_stack_user: u32,
    /// The clock for timestamps with `use_clockid`.
    pub clockid: i32,
    /// Registers to dump on samples, interrupt state.
    pub sample_regs_intr: u64,
    /// Wakeup watermark for the AUX area.
    pub aux_watermark: u32,
    /// Maximum callchain depth.
    pub sample_max_stack: u16,
    /// `__reserved_2`.
    pub reserved_2: u16,
    /// AUX sample size.
    pub aux_sample_size: u32,
    /// `aux_action` bits (`__reserved_3` before 6.13; same place).
    pub aux_action: u32,
    /// User data for `sigtrap`.
    pub sig_data: u64,
    /// Extension of `config2`.
    pub config3: u64,
}

// The layout checked against the 6.12 uapi header (offsets printed by a C program compiled
// against it, for x86_64 and for aarch64).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<PerfEventAttr>() == PERF_ATTR_SIZE_VER8 as usize);
    assert!(offset_of!(PerfEventAttr, sample_type) == 24);
    assert!(offset_of!(PerfEventAttr, flags) == 40);
    assert!(offset_of!(PerfEventAttr, wakeup_events) == 48);
    assert!(offset_of!(PerfEventAttr, config1) == 56);
    assert!(offset_of!(PerfEventAttr, branch_sample_type) == 72);
    assert!(offset_of!(PerfEventAttr, sample_stack_user) == 88);
    assert!(offset_of!(PerfEventAttr, clockid) == 92);
    assert!(offset_of!(PerfEventAttr, sample_regs_intr) == 96);
    assert!(offset_of!(PerfEventAttr, aux_watermark) == 104);
    assert!(offset_of!(PerfEventAttr, sample_max_stack) == 108);
    assert!(offset_of!(PerfEventAttr, aux_sample_size) == 112);
    assert!(offset_of!(PerfEventAttr, aux_action) == 116);
    assert!(offset_of!(PerfEventAttr, sig_data) == 120);
    assert!(offset_of!(PerfEventAttr, config3) == 128);
};

/// Offsets in `struct perf_event_mmap_page` (the metadata page) of the data-area fields.
pub mod mmap_page {
    /// `data_head`: where the kernel will write next (a free-running byte count).
    pub const DATA_HEAD: usize = 1024;
    /// `data_tail`: how far user space has read (a free-running byte count).
    pub const DATA_TAIL: usize = 1032;
    /// `data_offset`: where the data area starts in the mapping.
    pub const DATA_OFFSET: usize = 1040;
    /// `data_size`: the size of the data area.
    pub const DATA_SIZE: usize = 1048;
}

impl PerfEventAttr {
    /// These attributes with their events' times on `CLOCK_MONOTONIC`, which userspace reads
    /// too, rather than perf's clock.
    pub fn on_monotonic_clock(mut self) -> Self {
        self.flags |= attr_flags::USE_CLOCKID;
        self.clockid = libc::CLOCK_MONOTONIC;
        self
    }

    /// The recorder's event: a disabled software dummy event with `text_poke`, `ksymbol`,
    /// `sample_id_all` and [`SAMPLE_TYPE`], timestamped by the perf clock.
    pub fn text_poke() -> Self {
        Self {
            type_: PERF_TYPE_SOFTWARE,
            size: PERF_ATTR_SIZE_VER8,
            config: PERF_COUNT_SW_DUMMY,
            sample_type: SAMPLE_TYPE,
            flags: attr_flags::DISABLED
                | attr_flags::SAMPLE_ID_ALL
                | attr_flags::TEXT_POKE
                | attr_flags::KSYMBOL,
            ..Self::default()
        }
    }
}

/// `perf_event_open(attr, pid, cpu, group_fd, flags)`.
pub fn perf_event_open(
    attr: &PerfEventAttr,
    pid: libc::pid_t,
    cpu: i32,
    group_fd: i32,
    flags: libc::c_ulong,
) -> io::Result<OwnedFd> {
    // SAFETY: `attr` points to a live `struct perf_event_attr` of the size it announces; the
    // kernel only reads it (and may write `size` back on E2BIG, which the struct has room for).
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const PerfEventAttr,
            pid,
            cpu,
            group_fd,
            flags,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Why the bytes between `data_tail` and `data_head` cannot be copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// `data_head` is behind `data_tail`.
    HeadBehindTail {
        /// The loaded `data_head`.
        head: u64,
        /// The current `data_tail`.
        tail: u64,
    },
    /// More bytes are pending than the data area holds.
    Overrun {
        /// The loaded `data_head`.
        head: u64,
        /// The current `data_tail`.
        tail: u64,
        /// The data area's size.
        size: usize,
    },
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::HeadBehindTail { head, tail } => {
                write!(f, "ring buffer data_head {head} behind data_tail {tail}")
            }
            Self::Overrun { head, tail, size } => write!(
                f,
                "ring buffer has {} bytes pending, more than its {size}",
                head.wrapping_sub(*tail)
            ),
        }
    }
}

/// The pieces of the data area that hold the bytes from `tail` to `head`: `(offset, len)` of
/// the piece up to the end of the area, then of the piece from its start (empty unless the
/// bytes wrap around).
///
/// `size` must be a power of two, as the kernel's data areas are.
pub fn ring_pieces(tail: u64, head: u64, size: usize) -> Result<[(usize, usize); 2], RingError> {
    debug_assert!(size.is_power_of_two());
    if head < tail {
        return Err(RingError::HeadBehindTail { head, tail });
    }
    let pending = head - tail;
    if pending > size as u64 {
        return Err(RingError::Overrun { head, tail, size });
    }
    let pending = pending as usize;
    let start = (tail & (size as u64 - 1)) as usize;
    let first = pending.min(size - start);
    Ok([(start, first), (0, pending - first)])
}

/// A perf ring buffer in memory: the metadata page and the data area.
///
/// It holds raw pointers because the kernel writes to the memory concurrently: only the bytes
/// between `data_tail` and `data_head` are read, and only the head and tail words are accessed
/// as atomics.
#[derive(Debug)]
pub struct Ring {
    meta: NonNull<u8>,
    data: NonNull<u8>,
    data_size: usize,
}

impl Ring {
    /// A view of the ring buffer whose metadata page is at `meta` and data area at `data`.
    ///
    /// # Safety
    ///
    /// `meta` must point to a `struct perf_event_mmap_page` (8-byte aligned, at least
    /// [`mmap_page::DATA_SIZE`] + 8 bytes), `data` to `data_size` readable bytes, and
    /// `data_size` must be a power of two; all of it must stay mapped while the `Ring` is used,
    /// and nothing but the kernel's ring-buffer protocol may write to it.
    pub unsafe fn new(meta: NonNull<u8>, data: NonNull<u8>, data_size: usize) -> Self {
        debug_assert!(data_size.is_power_of_two());
        debug_assert!((meta.as_ptr() as usize).is_multiple_of(8));
        Self {
            meta,
            data,
            data_size,
        }
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `Ring::new`'s contract: the metadata page is live, 8-byte aligned and holds
        // the u64 words at `DATA_HEAD`/`DATA_TAIL`, which both sides access atomically.
        unsafe { AtomicU64::from_ptr(self.meta.as_ptr().add(offset).cast::<u64>()) }
    }

    /// `data_head`, loaded with acquire semantics (pairs with the kernel's `smp_wmb()` before
    /// it stores the head, so the record bytes before the head are visible).
    pub fn head(&self) -> u64 {
        self.word(mmap_page::DATA_HEAD).load(Ordering::Acquire)
    }

    /// `data_tail` (written only by this side).
    pub fn tail(&self) -> u64 {
        self.word(mmap_page::DATA_TAIL).load(Ordering::Relaxed)
    }

    /// Stores `data_tail` with release semantics: the copies of the bytes before it happen
    /// before the kernel can see the space as free.
    pub fn set_tail(&self, tail: u64) {
        self.word(mmap_page::DATA_TAIL)
            .store(tail, Ordering::Release);
    }

    /// The size of the data area.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// Appends every complete record the kernel has published to `out` (the kernel only
    /// publishes whole records) and frees their space. Returns the number of bytes appended.
    ///
    /// On an inconsistent head the pending bytes are dropped (the tail jumps to the head) and
    /// the error is returned.
    pub fn drain_into(&self, out: &mut Vec<u8>) -> Result<usize, RingError> {
        let head = self.head();
        let tail = self.tail();
        let pieces = match ring_pieces(tail, head, self.data_size) {
            Ok(pieces) => pieces,
            Err(e) => {
                self.set_tail(head);
                return Err(e);
            }
        };
        let mut copied = 0;
        for (offset, len) in pieces {
            if len == 0 {
                continue;
            }
            out.reserve(len);
            // SAFETY: `offset + len <= data_size` (`ring_pieces`), so the source lies in the data
            // area, which the kernel does not write between `data_tail` and `data_head`; the
            // destination is the `len` bytes just reserved at the end of `out`, which
            // `set_len` then covers.
            unsafe {
                let dst = out.as_mut_ptr().add(out.len());
                std::ptr::copy_nonoverlapping(self.data.as_ptr().add(offset), dst, len);
                out.set_len(out.len() + len);
            }
            copied += len;
        }
        self.set_tail(head);
        Ok(copied)
    }
}

/// One `PERF_RECORD_TEXT_POKE` record, owned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TextPokeRec {
    /// The CPU whose buffer held it.
    pub cpu_of_buffer: u32,
    /// The header's `misc` (`PERF_RECORD_MISC_KERNEL`).
    pub misc: u16,
    /// The address of the first changed byte.
    pub addr: u64,
    /// The bytes before the change (empty for created text).
    pub old: Vec<u8>,
    /// The bytes after the change (empty for freed text).
    pub new: Vec<u8>,
    /// The perf clock's timestamp, in nanoseconds.
    pub time: u64,
    /// The CPU that wrote it.
    pub cpu: u32,
    /// The process id of the task that made the change.
    pub pid: u32,
    /// The thread id of the task that made the change.
    pub tid: u32,
    /// The event's id (`PERF_SAMPLE_IDENTIFIER`).
    pub id: u64,
}

impl TextPokeRec {
    /// Borrows it as the codec's [`TextPoke`], for [`textpoke_core::replay::TextImage`].
    pub fn as_text_poke(&self) -> TextPoke<'_> {
        TextPoke {
            misc: self.misc,
            addr: self.addr,
            old: &self.old,
            new: &self.new,
            sample: SampleId {
                pid: Some(self.pid),
                tid: Some(self.tid),
                time: Some(self.time),
                cpu: Some(self.cpu),
                identifier: Some(self.id),
                ..SampleId::default()
            },
        }
    }

    fn from_poke(poke: &TextPoke<'_>, cpu_of_buffer: u32) -> Self {
        Self {
            cpu_of_buffer,
            misc: poke.misc,
            addr: poke.addr,
            old: poke.old.to_vec(),
            new: poke.new.to_vec(),
            time: poke.sample.time.unwrap_or(0),
            cpu: poke.sample.cpu.unwrap_or(cpu_of_buffer),
            pid: poke.sample.pid.unwrap_or(0),
            tid: poke.sample.tid.unwrap_or(0),
            id: poke
                .sample
                .identifier
                .or(poke.sample.id)
                .unwrap_or_default(),
        }
    }
}

/// One `PERF_RECORD_KSYMBOL` record, owned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KsymbolRec {
    /// The first address of the range.
    pub addr: u64,
    /// Its length.
    pub len: u32,
    /// `PERF_RECORD_KSYMBOL_TYPE_*`.
    pub ksym_type: u16,
    /// Whether it removes the range.
    pub unregister: bool,
    /// Its name.
    pub name: String,
    /// The perf clock's timestamp, in nanoseconds.
    pub time: u64,
}

/// What [`Recorder::drain`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drain {
    /// The text pokes, sorted by time (stably, so each buffer's order is kept on ties).
    pub pokes: Vec<TextPokeRec>,
    /// The ksymbol records, in stream order per buffer (sort by time to merge them).
    pub ksymbols: Vec<KsymbolRec>,
    /// `PERF_RECORD_LOST` records seen.
    pub lost_records: u64,
    /// Records the kernel dropped, summed over the lost records.
    pub lost_events: u64,
    /// Other records, skipped.
    pub other_records: u64,
    /// Problems: a record that does not parse (the rest of that buffer's batch is dropped) or
    /// an inconsistent ring buffer, as `cpu N: what`.
    pub errors: Vec<String>,
    /// Buffers found (nearly) full: less than [`FULL_MARGIN`] bytes free.
    ///
    /// The kernel reports dropped records late: only the next record it manages to write into
    /// that buffer after the drain is preceded by a `PERF_RECORD_LOST`. A full buffer is
    /// therefore the only sign, at the time of the drain, that records may have been dropped.
    pub full_buffers: u64,
}

impl Drain {
    /// Adds `later`, a drain taken after this one, keeping the pokes in drain order: sort
    /// them by time (stably) once the last is absorbed.
    pub fn absorb(&mut self, later: Drain) {
        self.pokes.extend(later.pokes);
        self.ksymbols.extend(later.ksymbols);
        self.lost_records += later.lost_records;
        self.lost_events += later.lost_events;
        self.other_records += later.other_records;
        self.errors.extend(later.errors);
        self.full_buffers += later.full_buffers;
    }

    /// Whether nothing was lost, no buffer was full (so nothing may have been lost without a
    /// lost record yet) and nothing was malformed.
    pub fn is_clean(&self) -> bool {
        self.lost_records == 0 && self.full_buffers == 0 && self.errors.is_empty()
    }

    /// Empties `ring` (the buffer of `cpu`) and adds its records; `scratch` is reused for the
    /// copy.
    pub fn add_ring(
        &mut self,
        ring: &Ring,
        layout: SampleIdLayout,
        cpu: u32,
        scratch: &mut Vec<u8>,
    ) {
        scratch.clear();
        match ring.drain_into(scratch) {
            Ok(n) if n + FULL_MARGIN > ring.data_size() => self.full_buffers += 1,
            Ok(_) => {}
            Err(e) => self.errors.push(format!("cpu {cpu}: {e}")),
        }
        self.add_stream(scratch, layout, cpu);
    }

    /// Parses a contiguous copy of one buffer's records (`cpu` names the buffer) and adds them.
    ///
    /// Pokes are appended in stream order; [`Recorder::drain`] sorts them afterwards.
    pub fn add_stream(&mut self, bytes: &[u8], layout: SampleIdLayout, cpu: u32) {
        let mut records = Records::new(bytes, layout);
        while let Some(record) = records.next() {
            match record {
                Ok(Record::TextPoke(poke)) => self.pokes.push(TextPokeRec::from_poke(&poke, cpu)),
                Ok(Record::Lost { lost, .. }) => {
                    self.lost_records += 1;
                    self.lost_events += lost;
                }
                Ok(Record::Other {
                    record_type: PERF_RECORD_KSYMBOL,
                    body,
                    ..
                }) => match parse_ksymbol(body, layout) {
                    Ok(k) => self.ksymbols.push(KsymbolRec {
                        addr: k.addr,
                        len: k.len,
                        ksym_type: k.ksym_type,
                        unregister: k.unregister(),
                        name: String::from_utf8_lossy(k.name).into_owned(),
                        time: k.sample.time.unwrap_or(0),
                    }),
                    Err(e) => self
                        .errors
                        .push(format!("cpu {cpu}: ksymbol record: {}", e.as_str())),
                },
                Ok(Record::Other { .. }) => self.other_records += 1,
                Err(e) => self.errors.push(format!(
                    "cpu {cpu}: {} at byte {} of {}, rest dropped",
                    e.as_str(),
                    records.offset(),
                    bytes.len()
                )),
            }
        }
    }
}

/// The free space below which a drained buffer counts as full ([`Drain::full_buffers`]): more
/// than the largest text-poke record the kernel emits in practice (textpoke describes a new
/// module's text in records of a page of bytes).
pub const FULL_MARGIN: usize = 8192;

/// How to open a [`Recorder`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecorderConfig {
    /// Data pages per CPU: a power of two (64 pages = 256 KiB with 4 KiB pages, room for about
    /// 4000 five-byte pokes: enough for textpoke's own pokes, not for enabling the function
    /// tracer on x86, which pokes every traceable function in one `write`; use 1024 there).
    pub data_pages: usize,
}

/// An event's ring buffer, mapped: one metadata page and `data_pages` data pages, shared and
/// writable (so that the kernel never overwrites unread records). Unmapped when dropped.
#[derive(Debug)]
pub struct MappedRing {
    map: NonNull<libc::c_void>,
    map_len: usize,
    ring: Ring,
}

impl MappedRing {
    /// Maps the ring buffer of the perf event `fd` with `data_pages` data pages (a power of
    /// two).
    ///
    /// Errors: `EINVAL` if `data_pages` is not a power of two, `mmap`'s errno, or
    /// `InvalidData` if the kernel describes a data area outside the mapping.
    pub fn map(fd: &OwnedFd, data_pages: usize) -> io::Result<Self> {
        if !data_pages.is_power_of_two() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: `sysconf` takes a plain integer.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let map_len = (1 + data_pages) * page;
        // SAFETY: a fresh shared mapping of the event's buffer; the kernel checks the size
        // (1 + 2^n pages) and the result is checked against MAP_FAILED.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let map = NonNull::new(map).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        let base = map.cast::<u8>();
        // SAFETY: the metadata page is mapped and 8-byte aligned (page aligned); the kernel
        // set `data_offset`/`data_size` before `mmap` returned.
        let (data_offset, data_size) = unsafe {
            (
                std::ptr::read_volatile(base.as_ptr().add(mmap_page::DATA_OFFSET).cast::<u64>()),
                std::ptr::read_volatile(base.as_ptr().add(mmap_page::DATA_SIZE).cast::<u64>()),
            )
        };
        let (data_offset, data_size) = if data_size == 0 {
            (page, data_pages * page)
        } else {
            (data_offset as usize, data_size as usize)
        };
        if !data_size.is_power_of_two() || data_offset + data_size > map_len {
            // SAFETY: unmapping what was just mapped.
            unsafe {
                libc::munmap(map.as_ptr(), map_len);
            }
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("perf buffer data area {data_offset:#x}+{data_size:#x} outside the {map_len:#x}-byte mapping"),
            ));
        }
        // SAFETY: the data area lies within the mapping (checked above) and the mapping lives
        // as long as the `MappedRing` that owns both.
        let ring = unsafe {
            Ring::new(
                base,
                NonNull::new_unchecked(base.as_ptr().add(data_offset)),
                data_size,
            )
        };
        Ok(Self { map, map_len, ring })
    }

    /// The ring buffer.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }
}

impl Drop for MappedRing {
    fn drop(&mut self) {
        // SAFETY: `map`/`map_len` are exactly what `mmap` returned; `ring` (which points into
        // it) is dropped with `self` and not used afterwards.
        unsafe {
            libc::munmap(self.map.as_ptr(), self.map_len);
        }
    }
}

// SAFETY: the mapping is owned by the `MappedRing` alone (the raw pointers are not shared), and
// the kernel side of the protocol does not care which thread reads.
unsafe impl Send for MappedRing {}

/// One CPU's event and its mapped ring buffer.
#[derive(Debug)]
struct CpuBuffer {
    cpu: u32,
    fd: OwnedFd,
    mapped: MappedRing,
}

/// A listener that records nothing: one `text_poke` event, on CPU 0, with no buffer. The kernel
/// counts it from its creation (patch 0011), so textpoke guards and records every change while
/// it exists, as for any tracer; the records go nowhere.
#[derive(Debug)]
pub struct Listener {
    _fd: OwnedFd,
}

impl Listener {
    /// Opens the event.
    pub fn open() -> io::Result<Self> {
        let attr = PerfEventAttr::text_poke();
        let cpu = crate::platform::sys::online_cpus()?
            .first()
            .copied()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))?;
        let fd = perf_event_open(&attr, -1, cpu as i32, -1, PERF_FLAG_FD_CLOEXEC)?;
        Ok(Self { _fd: fd })
    }
}

/// A text-poke recorder with one event and ring buffer per CPU; see the module documentation.
#[derive(Debug)]
pub struct Recorder {
    buffers: Vec<CpuBuffer>,
    layout: SampleIdLayout,
    scratch: Vec<u8>,
    /// `CLOCK_MONOTONIC` just before the last event's arrival began (see
    /// [`Recorder::arriving_from`]).
    arriving_from: u64,
}

impl Recorder {
    /// Opens the events on every online CPU, maps their buffers and enables the events. A CPU
    /// that goes offline meanwhile is left out (it has no event to open).
    ///
    /// Errors carry the errno of the failing call: `perf_event_open` (`EACCES` without
    /// `CAP_PERFMON`, `EINVAL` if the kernel lacks `text_poke`, `ENODEV`/`EINVAL` for an offline
    /// CPU), `mmap`, or the enabling `ioctl`; `EINVAL` if `data_pages` is not a power of two.
    pub fn open(config: &RecorderConfig) -> io::Result<Self> {
        Self::open_attr(config, PerfEventAttr::text_poke())
    }

    /// As [`Recorder::open`], with the records' times on `CLOCK_MONOTONIC`, which userspace
    /// reads too, rather than perf's clock.
    pub fn open_monotonic(config: &RecorderConfig) -> io::Result<Self> {
        Self::open_attr(config, PerfEventAttr::text_poke().on_monotonic_clock())
    }

    /// As [`Recorder::open_monotonic`], in the order `perf record` takes its steps: every
    /// CPU's event opened enabled (perf's text-poke event is `immediate`), and only `gap` later
    /// every buffer mapped. The kernel counts the events from their open, but delivers nothing
    /// to an event without a buffer; `gap` draws out perf's own steps in between.
    pub fn open_monotonic_mapped_late(
        config: &RecorderConfig,
        gap: std::time::Duration,
    ) -> io::Result<Self> {
        let mut attr = PerfEventAttr::text_poke().on_monotonic_clock();
        attr.flags &= !attr_flags::DISABLED;
        let events = Self::open_events(config, &attr)?;
        std::thread::sleep(gap);
        // Enabled at the open, each event arrives at its mapping.
        Self::map_events(config, events, true)
    }

    fn open_attr(config: &RecorderConfig, attr: PerfEventAttr) -> io::Result<Self> {
        let events = Self::open_events(config, &attr)?;
        let mut recorder = Self::map_events(config, events, false)?;
        // Mapped while disabled, each event arrives at its enabling.
        recorder.enable()?;
        Ok(recorder)
    }

    /// `CLOCK_MONOTONIC` in nanoseconds just before the recorder's last event began to arrive
    /// (got its buffer while enabled, or was enabled with its buffer), so no later than that
    /// arrival.
    ///
    /// A record timed before it was emitted before the recorder's last arrival, by a batch that
    /// held `text_mutex` from its first record to its end, which that arrival waits for
    /// (docs/protocol.md, "When nobody listens"): the batch was done before the recorder could
    /// copy the text, and the recorder may hold only part of its records (those emitted on
    /// CPUs whose events had arrived). A listener takes its copy, not those records, for that
    /// time.
    pub fn arriving_from(&self) -> u64 {
        self.arriving_from
    }

    /// One event with `attr` per online CPU, with its CPU.
    fn open_events(
        config: &RecorderConfig,
        attr: &PerfEventAttr,
    ) -> io::Result<Vec<(u32, OwnedFd)>> {
        if !config.data_pages.is_power_of_two() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let cpus = crate::platform::sys::online_cpus()?;
        let mut events = Vec::with_capacity(cpus.len());
        for &cpu in &cpus {
            match perf_event_open(attr, -1, cpu as i32, -1, PERF_FLAG_FD_CLOEXEC) {
                Ok(fd) => events.push((cpu, fd)),
                // Gone offline since the list was read (the hotplug group takes one CPU
                // offline and back all the time, and keeps every patcher it runs off it). perf
                // has no event there, as `perf record` would not: a record emitted on that
                // CPU later is lost, and the replay of what was recorded fails on it.
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => continue,
                Err(e) => return Err(e),
            }
        }
        if events.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::ENODEV));
        }
        Ok(events)
    }

    /// The recorder of `events`, each with its buffer mapped; with `enabled`, the events were
    /// opened enabled and [`Recorder::arriving_from`] is taken before the last mapping.
    fn map_events(
        config: &RecorderConfig,
        events: Vec<(u32, OwnedFd)>,
        enabled: bool,
    ) -> io::Result<Self> {
        let mut buffers = Vec::with_capacity(events.len());
        let mut arriving_from = 0;
        let last = events.len().saturating_sub(1);
        for (i, (cpu, fd)) in events.into_iter().enumerate() {
            if enabled && i == last {
                arriving_from = crate::platform::sys::monotonic_ns();
            }
            let mapped = MappedRing::map(&fd, config.data_pages)?;
            buffers.push(CpuBuffer { cpu, fd, mapped });
        }
        Ok(Self {
            buffers,
            layout: SampleIdLayout::new(SAMPLE_TYPE),
            scratch: Vec::new(),
            arriving_from,
        })
    }

    /// Enables every CPU's event (`PERF_EVENT_IOC_ENABLE`), and takes
    /// [`Recorder::arriving_from`] before the last.
    fn enable(&mut self) -> io::Result<()> {
        let last = self.buffers.len().saturating_sub(1);
        for (i, buf) in self.buffers.iter().enumerate() {
            if i == last {
                self.arriving_from = crate::platform::sys::monotonic_ns();
            }
            // SAFETY: `PERF_EVENT_IOC_ENABLE` takes an integer argument (0: this event only) on
            // a perf event descriptor we own.
            let rc = unsafe { libc::ioctl(buf.fd.as_raw_fd(), PERF_EVENT_IOC_ENABLE as _, 0) };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// Empties every CPU's buffer and closes the recorder: what was in them, or why a check
    /// cannot judge it, if perf lost records or a buffer did not parse.
    pub fn drain_whole(mut self) -> Result<Drain, String> {
        let drain = self.drain();
        drop(self);
        if drain.lost_events > 0 || !drain.errors.is_empty() {
            return Err(format!(
                "perf lost {} records, errors {:?}",
                drain.lost_events, drain.errors
            ));
        }
        Ok(drain)
    }

    /// Empties every CPU's buffer and returns what was in them, pokes sorted by time.
    pub fn drain(&mut self) -> Drain {
        let mut drain = Drain::default();
        for buf in &self.buffers {
            drain.add_ring(buf.mapped.ring(), self.layout, buf.cpu, &mut self.scratch);
        }
        drain.pokes.sort_by_key(|p| p.time);
        drain.ksymbols.sort_by_key(|k| k.time);
        drain
    }

    /// Closes the events and unmaps the buffers (dropping the recorder does the same).
    pub fn close(self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use textpoke_core::record::{write_text_poke, PERF_RECORD_MISC_KERNEL};
    use textpoke_core::replay::write_lost;

    #[test]
    fn attr_flag_bits_match_the_uapi_header() {
        // The bit numbers a C program compiled against the 6.12 header printed.
        let expected: &[(u64, u32)] = &[
            (attr_flags::DISABLED, 0),
            (attr_flags::SAMPLE_ID_ALL, 18),
            (attr_flags::USE_CLOCKID, 25),
            (attr_flags::KSYMBOL, 29),
            (attr_flags::TEXT_POKE, 33),
        ];
        for &(flag, bit) in expected {
            assert_eq!(flag, 1 << bit);
        }
    }

    #[test]
    fn text_poke_attr_bytes() {
        let attr = PerfEventAttr::text_poke();
        // SAFETY: `PerfEventAttr` is `repr(C)` plain data of 136 bytes with no padding.
        let bytes: [u8; 136] = unsafe { std::mem::transmute(attr) };
        assert_eq!(&bytes[0..4], &1u32.to_le_bytes()); // PERF_TYPE_SOFTWARE
        assert_eq!(&bytes[4..8], &136u32.to_le_bytes());
        assert_eq!(&bytes[8..16], &9u64.to_le_bytes()); // PERF_COUNT_SW_DUMMY
        assert_eq!(&bytes[24..32], &0x10086u64.to_le_bytes()); // TID|TIME|CPU|IDENTIFIER
        assert_eq!(
            &bytes[40..48],
            &((1u64 << 33) | (1 << 29) | (1 << 18) | 1).to_le_bytes()
        );
        assert!(bytes[48..].iter().all(|&b| b == 0));
    }

    #[test]
    fn pieces() {
        assert_eq!(ring_pieces(0, 0, 64), Ok([(0, 0), (0, 0)]));
        assert_eq!(ring_pieces(8, 40, 64), Ok([(8, 32), (0, 0)]));
        assert_eq!(ring_pieces(56, 80, 64), Ok([(56, 8), (0, 16)]));
        assert_eq!(ring_pieces(64, 128, 64), Ok([(0, 64), (0, 0)]));
        assert_eq!(ring_pieces(100, 164, 64), Ok([(36, 28), (0, 36)]));
        assert_eq!(
            ring_pieces(10, 5, 64),
            Err(RingError::HeadBehindTail { head: 5, tail: 10 })
        );
        assert!(matches!(
            ring_pieces(0, 65, 64),
            Err(RingError::Overrun { .. })
        ));
    }

    /// Memory laid out like a perf mapping: a metadata page, then the data area.
    ///
    /// Every access goes through `base`, the one pointer derived from `mem`.
    struct FakeRing {
        _mem: Vec<u64>,
        base: *mut u8,
        data_size: usize,
        /// Where the fake kernel writes next (its `data_head` before publishing).
        write: u64,
    }

    const META: usize = 4096;

    impl FakeRing {
        fn new(data_size: usize) -> Self {
            let mut mem = vec![0u64; (META + data_size) / 8];
            let base = mem.as_mut_ptr().cast::<u8>();
            Self {
                _mem: mem,
                base,
                data_size,
                write: 0,
            }
        }

        fn ring(&self) -> Ring {
            // SAFETY: `base` is 8-byte aligned, a metadata page plus `data_size` bytes, and
            // outlives every use of the ring in these tests.
            unsafe {
                Ring::new(
                    NonNull::new(self.base).unwrap(),
                    NonNull::new(self.base.add(META)).unwrap(),
                    self.data_size,
                )
            }
        }

        fn put(&mut self, at: usize, bytes: &[u8]) {
            assert!(at + bytes.len() <= META + self.data_size);
            // SAFETY: in bounds (checked above) of the live allocation `base` points to.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(at), bytes.len()) }
        }

        /// Writes a record as the kernel does: wrapping around the end of the data area.
        fn push(&mut self, record: &[u8]) {
            for &b in record {
                let i = META + (self.write as usize & (self.data_size - 1));
                self.put(i, &[b]);
                self.write += 1;
            }
        }

        /// Publishes what was pushed: stores `data_head`.
        fn publish(&mut self) {
            let head = self.write;
            self.put(mmap_page::DATA_HEAD, &head.to_le_bytes());
        }

        /// Sets both positions, as if `at` bytes had been written and read already.
        fn start_at(&mut self, at: u64) {
            self.write = at;
            self.put(mmap_page::DATA_HEAD, &at.to_le_bytes());
            self.put(mmap_page::DATA_TAIL, &at.to_le_bytes());
        }
    }

    fn sample(cpu: u32, time: u64) -> SampleId {
        SampleId {
            pid: Some(0),
            tid: Some(0),
            time: Some(time),
            cpu: Some(cpu),
            identifier: Some(77),
            ..SampleId::default()
        }
    }

    fn poke_record(addr: u64, old: &[u8], new: &[u8], time: u64) -> Vec<u8> {
        let layout = SampleIdLayout::new(SAMPLE_TYPE);
        let mut buf = vec![0u8; 256];
        let n = write_text_poke(
            &mut buf,
            PERF_RECORD_MISC_KERNEL,
            addr,
            old,
            new,
            &sample(1, time),
            layout,
        )
        .unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn drains_records_across_the_wrap() {
        let layout = SampleIdLayout::new(SAMPLE_TYPE);
        let mut fake = FakeRing::new(256);
        let ring = fake.ring();
        let nop5 = [0x0f, 0x1f, 0x44, 0x00, 0x00];
        let jmp = [0xe9, 1, 2, 3, 4];
        let r1 = poke_record(0xffff_ffff_8100_0000, &nop5, &jmp, 10);
        let size = r1.len();
        // Header 8, addr 8, lengths and bytes 4 + 10 padded to 16, trailer 32.
        assert_eq!(size, 64);
        let mut all = Drain::default();
        let mut out = Vec::new();
        // Several rounds, so that records straddle the end of the 256-byte area at various
        // offsets; each round reads what the previous ones left.
        let mut time = 0;
        for round in 0..20u64 {
            for _ in 0..(round % 3 + 1) {
                time += 1;
                let r = poke_record(0xffff_ffff_8100_0000 + time, &nop5, &jmp, time);
                fake.push(&r);
            }
            fake.publish();
            out.clear();
            let n = ring.drain_into(&mut out).unwrap();
            assert_eq!(n, out.len());
            assert_eq!(ring.tail(), fake.write);
            all.add_stream(&out, layout, 1);
        }
        assert!(all.is_clean(), "{:?}", all.errors);
        assert_eq!(all.pokes.len() as u64, time);
        for (i, p) in all.pokes.iter().enumerate() {
            assert_eq!(p.time, i as u64 + 1);
            assert_eq!(p.addr, 0xffff_ffff_8100_0000 + i as u64 + 1);
            assert_eq!(p.old, nop5);
            assert_eq!(p.new, jmp);
            assert_eq!((p.cpu, p.cpu_of_buffer, p.id), (1, 1, 77));
        }
        // The record layout handed to the codec round-trips.
        let p = &all.pokes[0];
        let mut buf = vec![0u8; 256];
        let poke = p.as_text_poke();
        let n = write_text_poke(
            &mut buf,
            poke.misc,
            poke.addr,
            poke.old,
            poke.new,
            &poke.sample,
            layout,
        )
        .unwrap();
        assert_eq!(&buf[..n], &poke_record(p.addr, &nop5, &jmp, p.time)[..]);
    }

    #[test]
    fn a_record_straddling_the_end_is_joined() {
        let layout = SampleIdLayout::new(SAMPLE_TYPE);
        let mut fake = FakeRing::new(128);
        let ring = fake.ring();
        // Start 40 bytes before the end: the 64-byte record wraps after 40 bytes.
        fake.start_at(88);
        let r = poke_record(0x1000, &[1, 2, 3, 4, 5], &[6, 7, 8, 9, 10], 5);
        fake.push(&r);
        let mut lost = vec![0u8; 64];
        let n = write_lost(&mut lost, 0, 77, 3, &sample(1, 6), layout).unwrap();
        fake.push(&lost[..n]);
        fake.publish();
        let mut out = Vec::new();
        ring.drain_into(&mut out).unwrap();
        assert_eq!(&out[..r.len()], &r[..]);
        let mut d = Drain::default();
        d.add_stream(&out, layout, 1);
        assert_eq!(d.pokes.len(), 1);
        assert_eq!(d.pokes[0].old, [1, 2, 3, 4, 5]);
        assert_eq!((d.lost_records, d.lost_events), (1, 3));
        // Nothing more until the head moves.
        out.clear();
        assert_eq!(ring.drain_into(&mut out), Ok(0));
    }

    #[test]
    fn a_full_buffer_is_flagged() {
        let layout = SampleIdLayout::new(SAMPLE_TYPE);
        let mut fake = FakeRing::new(16384);
        let ring = fake.ring();
        let r = poke_record(0x1000, &[1; 5], &[2; 5], 1);
        assert_eq!(r.len(), 64);
        // 255 records leave 64 bytes free: less than FULL_MARGIN.
        for _ in 0..255 {
            fake.push(&r);
        }
        fake.publish();
        let mut d = Drain::default();
        let mut scratch = Vec::new();
        d.add_ring(&ring, layout, 0, &mut scratch);
        assert_eq!((d.pokes.len(), d.full_buffers), (255, 1));
        assert!(!d.is_clean());
        // A few records later the buffer is far from full.
        for _ in 0..3 {
            fake.push(&r);
        }
        fake.publish();
        let mut d = Drain::default();
        d.add_ring(&ring, layout, 0, &mut scratch);
        assert_eq!((d.pokes.len(), d.full_buffers), (3, 0));
        assert!(d.is_clean());
    }

    #[test]
    fn malformed_and_inconsistent_buffers_are_reported() {
        let layout = SampleIdLayout::new(SAMPLE_TYPE);
        let mut d = Drain::default();
        let mut bytes = poke_record(0x1000, &[1], &[2], 1);
        let other = [7u8, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0]; // type 7, size 16
        bytes.extend(other);
        bytes.extend([20u8, 0, 0, 0, 1, 0, 12, 0]); // a text poke too short for its size
        d.add_stream(&bytes, layout, 3);
        assert_eq!(d.pokes.len(), 1);
        assert_eq!(d.pokes[0].cpu_of_buffer, 3);
        assert_eq!(d.other_records, 1);
        assert_eq!(d.errors.len(), 1);
        assert!(d.errors[0].starts_with("cpu 3:"), "{}", d.errors[0]);

        let mut fake = FakeRing::new(64);
        let ring = fake.ring();
        fake.write = 1000;
        fake.publish();
        let mut out = Vec::new();
        assert!(matches!(
            ring.drain_into(&mut out),
            Err(RingError::Overrun { .. })
        ));
        // The tail caught up, so the next drain is consistent again.
        assert_eq!(ring.tail(), 1000);
        assert_eq!(ring.drain_into(&mut out), Ok(0));
    }
}
