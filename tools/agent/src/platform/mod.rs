//! Access to the guest platform: thin wrappers over what the guest's kernel offers the agent
//! (system calls, `/proc` and `/sys`, module loading, `/proc/kcore`, `/proc/kallsyms`, perf
//! events, hardware breakpoints, BPF, Debian's `perf` tool and the exerciser's debugfs files),
//! with the pure parsers of what they return. Nothing here judges or reports; [`guest`] holds
//! what every mode of the agent shares (the modules' directory, progress lines, loading).

pub mod bpf;
pub mod breakpoint;
pub mod exerciser;
pub mod guest;
pub mod kallsyms;
pub mod kcore;
pub mod perf;
pub mod realperf;
pub mod sys;

/// The exerciser's userspace interface, shared with the kernel module.
#[path = "../../../../samples/exerciser/uapi.rs"]
pub mod uapi;
