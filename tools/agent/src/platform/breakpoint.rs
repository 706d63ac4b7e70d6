//! Hardware execute breakpoints through perf (`PERF_TYPE_BREAKPOINT`, `HW_BREAKPOINT_X`), and
//! moving one in place with `PERF_EVENT_IOC_MODIFY_ATTRIBUTES` (commit 32ff77e8cc, Linux 4.17's "fast
//! breakpoint modification").
//!
//! A [`Breakpoint`] is one perf event with its ring buffer. Every execution of the watched
//! address is a sample (`sample_period = 1`) carrying the instruction pointer, the task, the
//! perf clock's time and the CPU ([`SAMPLE_TYPE`]). [`Breakpoint::retarget`] moves the event to
//! another address with the ioctl, keeping the descriptor and the mapped buffer;
//! [`Breakpoint::open`] followed by dropping the old one is the alternative the commit that added
//! the ioctl measured it against (close, reopen, map a new buffer).
//!
//! The lengths are the architectures' rules for execute breakpoints (`arch_build_bp_info` in
//! arch/x86/kernel/hw_breakpoint.c: `sizeof(long)`; arch/arm64/kernel/hw_breakpoint.c: 4).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::platform::perf::{
    attr_flags, perf_event_open, MappedRing, PerfEventAttr, PERF_ATTR_SIZE_VER8,
    PERF_FLAG_FD_CLOEXEC,
};

/// `PERF_TYPE_BREAKPOINT`.
pub const PERF_TYPE_BREAKPOINT: u32 = 5;
/// `HW_BREAKPOINT_X`: break on execution.
pub const HW_BREAKPOINT_X: u32 = 4;
/// `PERF_EVENT_IOC_MODIFY_ATTRIBUTES`, `_IOW('$', 11, struct perf_event_attr *)`: direction
/// write (1 << 30), argument size 8 (a pointer) << 16, type `'$'` << 8, number 11.
pub const PERF_EVENT_IOC_MODIFY_ATTRIBUTES: libc::c_ulong =
    (1 << 30) | (8 << 16) | (0x24 << 8) | 11;
/// `PERF_RECORD_SAMPLE`.
pub const PERF_RECORD_SAMPLE: u32 = 9;
/// `PERF_RECORD_LOST`.
pub const PERF_RECORD_LOST: u32 = 2;
/// `PERF_RECORD_THROTTLE`.
pub const PERF_RECORD_THROTTLE: u32 = 5;
/// `PERF_RECORD_UNTHROTTLE`.
pub const PERF_RECORD_UNTHROTTLE: u32 = 6;
/// `PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU`: a sample is
/// `ip`, `pid, tid`, `time`, `cpu, res`, 32 bytes after its header.
pub const SAMPLE_TYPE: u64 = 1 | 2 | 4 | (1 << 7);
/// The size of one sample record of [`SAMPLE_TYPE`]: an 8-byte header and 32 bytes.
pub const SAMPLE_SIZE: usize = 40;

/// The bits of the attr flag word besides [`attr_flags`]: `exclude_kernel` and `exclude_hv`.
mod more_flags {
    /// `exclude_kernel`.
    pub const EXCLUDE_KERNEL: u64 = 1 << 5;
    /// `exclude_hv`.
    pub const EXCLUDE_HV: u64 = 1 << 6;
}

/// The length of an execute breakpoint on this architecture.
pub const fn execute_len() -> u64 {
    if cfg!(target_arch = "aarch64") {
        4
    } else {
        std::mem::size_of::<libc::c_long>() as u64
    }
}

/// Where a breakpoint watches: a user address of this process (any CPU it runs on) or a kernel
/// address on one CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// This thread, user mode only.
    ThisThread,
    /// Every task on `cpu`, kernel mode only.
    KernelOnCpu(u32),
}

/// The attr of an execute breakpoint at `addr`.
pub fn attr(addr: u64, scope: Scope) -> PerfEventAttr {
    let exclude = match scope {
        Scope::ThisThread => more_flags::EXCLUDE_KERNEL | more_flags::EXCLUDE_HV,
        Scope::KernelOnCpu(_) => more_flags::EXCLUDE_HV,
    };
    PerfEventAttr {
        type_: PERF_TYPE_BREAKPOINT,
        size: PERF_ATTR_SIZE_VER8,
        sample_period: 1,
        sample_type: SAMPLE_TYPE,
        flags: exclude | attr_flags::SAMPLE_ID_ALL,
        bp_type: HW_BREAKPOINT_X,
        config1: addr,
        config2: execute_len(),
        ..PerfEventAttr::default()
    }
}

/// One sample: a hit of the breakpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// The instruction pointer: the watched address.
    pub ip: u64,
    /// The thread that executed it.
    pub tid: u32,
    /// The perf clock's time, in nanoseconds.
    pub time: u64,
    /// The CPU.
    pub cpu: u32,
}

/// What a buffer held: hits, and the records that say hits are missing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hits {
    /// The samples, in buffer order.
    pub hits: Vec<Hit>,
    /// `PERF_RECORD_LOST` records.
    pub lost: u64,
    /// `PERF_RECORD_THROTTLE` records: the kernel stopped the event for a while.
    pub throttled: u64,
    /// Other records.
    pub other: u64,
    /// Records that do not parse (a broken header drops the rest of that copy).
    pub errors: u64,
}

/// The native-endian `u32` at `at` in `b`, if `b` holds it.
pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The native-endian `u64` at `at` in `b`, if `b` holds it.
pub(crate) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Walks a contiguous copy of a perf buffer's records, calling `f(type, record)` for each
/// (`record` with its 8-byte header). Returns `false` if a header is cut off or gives a size
/// below the header's or past the end: the rest is dropped.
pub fn for_each_record(bytes: &[u8], mut f: impl FnMut(u32, &[u8])) -> bool {
    let mut at = 0;
    while at < bytes.len() {
        let (Some(kind), Some(size)) = (
            u32_at(bytes, at),
            bytes
                .get(at + 6..at + 8)
                .map(|s| usize::from(u16::from_ne_bytes([s[0], s[1]]))),
        ) else {
            return false;
        };
        let Some(record) = bytes.get(at..at + size).filter(|_| size >= 8) else {
            return false;
        };
        f(kind, record);
        at += size;
    }
    true
}

impl Hits {
    /// Adds the records of `bytes`, a contiguous copy of a buffer of [`SAMPLE_TYPE`] events.
    pub fn add_stream(&mut self, bytes: &[u8]) {
        let whole = for_each_record(bytes, |kind, record| match kind {
            PERF_RECORD_SAMPLE => {
                let hit = (|| {
                    Some(Hit {
                        ip: u64_at(record, 8)?,
                        tid: u32_at(record, 20)?,
                        time: u64_at(record, 24)?,
                        cpu: u32_at(record, 32)?,
                    })
                })();
                match hit {
                    Some(h) if record.len() == SAMPLE_SIZE => self.hits.push(h),
                    _ => self.errors += 1,
                }
            }
            PERF_RECORD_LOST => self.lost += 1,
            PERF_RECORD_THROTTLE => self.throttled += 1,
            _ => self.other += 1,
        });
        if !whole {
            self.errors += 1;
        }
    }
}

/// A hardware execute breakpoint and its mapped ring buffer.
#[derive(Debug)]
pub struct Breakpoint {
    // Unmapped before the descriptor is closed (fields drop in order).
    mapped: MappedRing,
    fd: OwnedFd,
    scope: Scope,
    addr: u64,
    scratch: Vec<u8>,
}

impl Breakpoint {
    /// Opens an enabled breakpoint at `addr` with a buffer of `data_pages` pages (a power of
    /// two).
    ///
    /// Errors are `perf_event_open`'s (`EINVAL` for an address the architecture refuses, such
    /// as the kprobe blacklist on x86; `ENOSPC` when every debug register is taken) or
    /// `mmap`'s.
    pub fn open(addr: u64, scope: Scope, data_pages: usize) -> io::Result<Self> {
        let (pid, cpu) = match scope {
            Scope::ThisThread => (0, -1),
            Scope::KernelOnCpu(c) => (-1, c as i32),
        };
        let fd = perf_event_open(&attr(addr, scope), pid, cpu, -1, PERF_FLAG_FD_CLOEXEC)?;
        let mapped = MappedRing::map(&fd, data_pages)?;
        Ok(Self {
            mapped,
            fd,
            scope,
            addr,
            scratch: Vec::new(),
        })
    }

    /// The watched address.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Moves the breakpoint to `addr` in place: `PERF_EVENT_IOC_MODIFY_ATTRIBUTES`.
    pub fn retarget(&mut self, addr: u64) -> io::Result<()> {
        let attr = attr(addr, self.scope);
        // SAFETY: the ioctl reads a `struct perf_event_attr` of the size it announces through
        // the pointer, which stays valid for the call; the descriptor is a perf event we own.
        let rc = unsafe {
            libc::ioctl(
                self.fd.as_raw_fd(),
                PERF_EVENT_IOC_MODIFY_ATTRIBUTES as _,
                &attr as *const PerfEventAttr,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        self.addr = addr;
        Ok(())
    }

    /// Empties the buffer into `out`. Returns `Err` if the ring buffer was inconsistent (its
    /// pending bytes are then dropped).
    pub fn drain(&mut self, out: &mut Hits) -> Result<(), String> {
        self.scratch.clear();
        let copied = self.mapped.ring().drain_into(&mut self.scratch);
        out.add_stream(&self.scratch);
        copied.map(drop).map_err(|e| e.to_string())
    }
}

impl AsRawFd for Breakpoint {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut r = kind.to_ne_bytes().to_vec();
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(&((8 + body.len()) as u16).to_ne_bytes());
        r.extend_from_slice(body);
        r
    }

    fn sample(ip: u64, tid: u32, time: u64, cpu: u32) -> Vec<u8> {
        let mut b = ip.to_ne_bytes().to_vec();
        b.extend_from_slice(&7u32.to_ne_bytes());
        b.extend_from_slice(&tid.to_ne_bytes());
        b.extend_from_slice(&time.to_ne_bytes());
        b.extend_from_slice(&cpu.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        record(PERF_RECORD_SAMPLE, &b)
    }

    #[test]
    fn ioctl_number_is_the_uapi_one() {
        // _IOW('$', 11, struct perf_event_attr *) on a 64-bit kernel, as printed by C.
        assert_eq!(PERF_EVENT_IOC_MODIFY_ATTRIBUTES, 0x4008_240b);
    }

    #[test]
    fn attr_watches_the_address_for_execution() {
        let a = attr(0x1234, Scope::ThisThread);
        assert_eq!((a.type_, a.bp_type, a.config1), (5, 4, 0x1234));
        assert_eq!(a.config2, execute_len());
        assert_ne!(a.flags & (1 << 5), 0, "user breakpoints exclude the kernel");
        let k = attr(0xffff_0000, Scope::KernelOnCpu(1));
        assert_eq!(k.flags & (1 << 5), 0, "kernel breakpoints watch the kernel");
        assert_eq!(a.sample_period, 1);
    }

    #[test]
    fn parses_samples_and_the_records_that_mean_missing_hits() {
        let mut bytes = sample(0x1000, 42, 99, 1);
        assert_eq!(bytes.len(), SAMPLE_SIZE);
        bytes.extend(record(PERF_RECORD_THROTTLE, &[0; 24]));
        bytes.extend(record(PERF_RECORD_LOST, &[0; 16]));
        bytes.extend(sample(0x2000, 43, 100, 0));
        let mut h = Hits::default();
        h.add_stream(&bytes);
        assert_eq!(
            h.hits,
            vec![
                Hit {
                    ip: 0x1000,
                    tid: 42,
                    time: 99,
                    cpu: 1
                },
                Hit {
                    ip: 0x2000,
                    tid: 43,
                    time: 100,
                    cpu: 0
                }
            ]
        );
        assert_eq!((h.throttled, h.lost, h.errors), (1, 1, 0));
    }

    #[test]
    fn malformed_records_stop_the_parse() {
        let mut h = Hits::default();
        let mut bytes = sample(1, 2, 3, 4);
        bytes.truncate(30);
        h.add_stream(&bytes);
        assert_eq!((h.hits.len(), h.errors), (0, 1));
        let mut h = Hits::default();
        h.add_stream(&record(PERF_RECORD_SAMPLE, &[0; 8]));
        assert_eq!(
            (h.hits.len(), h.errors),
            (0, 1),
            "a sample of the wrong size"
        );
        let mut h = Hits::default();
        h.add_stream(&[9, 0, 0, 0, 0, 0, 4, 0]);
        assert_eq!(h.errors, 1, "a size below the header's");
    }
}
