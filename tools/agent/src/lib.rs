//! Platform library of textpoke's guest agent.
//!
//! The agent runs as PID 1 in a tiny QEMU guest (static musl binary, busybox userland) and
//! drives textpoke's scenarios; this library is what it stands on:
//!
//! * [`ktap`]: KTAP version 1 output to `/dev/kmsg`, buffered and printed in one piece;
//! * [`sys`]: module loading and unloading, reboot, the kernel command line, CPU lists,
//!   running code as an unprivileged user, errno-preserving file I/O, `/proc/interrupts` and the
//!   kernel log;
//! * [`kcore`]: reading kernel memory through `/proc/kcore`;
//! * [`perf`]: a `PERF_RECORD_TEXT_POKE` recorder with a ring buffer on every CPU;
//! * [`observer`]: the breakpoint observer, which judges executions it saw on the CPU's debug
//!   unit against the records ([`bpf`] is its program);
//! * [`breakpoint`]: hardware execute breakpoints through perf, moved in place with
//!   `PERF_EVENT_IOC_MODIFY_ATTRIBUTES`;
//! * [`realperf`]: driving Debian's `perf record --kcore` / `perf script` and parsing the
//!   text-poke events it prints;
//! * [`exerciser`]: the exerciser module's debugfs interface ([`uapi`] is its shared half);
//! * [`checks`]: the ordering invariant, record matching and kcore replay over that evidence.
//!
//! Everything that can be checked without a kernel (parsers, the KTAP writer, the ring-buffer
//! copy and the record decoding) has host unit tests.

pub mod bpf;
pub mod breakpoint;
pub mod checks;
pub mod exerciser;
pub mod kallsyms;
pub mod kcore;
pub mod ktap;
pub mod observer;
pub mod perf;
pub mod realperf;
pub mod sys;

/// The lines that carry the observer's executions to the host, shared with tools/etm.
#[path = "../../etm/src/dataset.rs"]
pub mod etm_dataset;

/// The exerciser's userspace interface, shared with the kernel module.
#[path = "../../../samples/exerciser/uapi.rs"]
pub mod uapi;
