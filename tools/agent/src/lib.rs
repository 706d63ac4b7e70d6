//! Platform library of textpoke's guest agent.
//!
//! The agent runs as PID 1 in a tiny QEMU guest (static musl binary, busybox userland) and
//! drives textpoke's scenarios; this library is what it stands on, in three roles:
//!
//! * [`platform`]: access to the guest platform: system calls and `/proc`/`/sys`, module
//!   loading, kernel memory, kallsyms, perf (the text-poke recorder, hardware breakpoints, BPF,
//!   Debian's `perf` tool) and the exerciser module's debugfs interface;
//! * [`oracle`]: what judges: the checks over a scenario's evidence (ordering invariant, record
//!   matching, kcore replay) and the breakpoint observer;
//! * [`report`]: what is told: the KTAP writer and the boot's one KTAP document.
//!
//! Arrows point down: [`oracle`] and [`report`] use [`platform`], which uses neither.
//!
//! Everything that can be checked without a kernel (parsers, the KTAP writer, the ring-buffer
//! copy and the record decoding) has host unit tests.

pub mod oracle;
pub mod platform;
pub mod report;
