//! Synthetic Arm CoreSight ETMv4 instruction traces, checked against the host perf's decode.
//!
//! textpoke changes kernel text and says so with PERF_RECORD_TEXT_POKE. Whether a CoreSight
//! trace decoder can follow kernel text across such changes needs traces whose true execution
//! is known. This crate makes them without hardware:
//!
//! - [`a64`] encodes a small A64 program and interprets it: the interpreter's record of every
//!   executed instruction and branch outcome is the ground truth;
//! - [`etm`] turns that execution into the ETMv4 packet stream an ETM would emit (Arm
//!   IHI0064), raw or in 16-byte CoreSight formatter frames;
//! - [`elf`] writes the program as the ELF (or `vmlinux`) perf reads instruction bytes from;
//! - [`perfdata`] writes a `perf.data` shaped like `perf record -e cs_etm// --per-thread` on
//!   arm64, or like a CPU-wide `perf record -e cs_etm// -C 0,1`;
//! - [`decode`] runs the host's `perf script` (Debian linux-perf 6.12, built with OpenCSD)
//!   and compares its decode, instruction by instruction and branch by branch, with the
//!   truth;
//! - [`dataset`] and [`observed`] do the same for a boot's executions as its breakpoint
//!   observer saw them: the truth is the path each CPU took at a watched site, and the records
//!   are the boot's own.
//!
//! # What perf 6.12 needs in the perf.data
//!
//! Records, in file order (file:line references are to linux 6.12 `tools/perf/util`):
//!
//! 1. `PERF_RECORD_TIME_CONV`, only with timestamps, before AUXTRACE_INFO: cs-etm copies the
//!    session's time conversion while processing AUXTRACE_INFO (cs-etm.c:3449ff).
//! 2. `PERF_RECORD_AUXTRACE_INFO`, type `PERF_AUXTRACE_CS_ETM`: the CoreSight metadata, a
//!    version 2 global header (PMU type, one CPU) and one ETMv4 block (magic, CPU 0, eight
//!    parameters: TRCCONFIGR, TRCTRACEIDR, TRCIDR0/1/2/8, TRCAUTHSTATUS, TS_SOURCE). Its size
//!    must match what perf parses (cs-etm.c:3518), and the PMU type must equal the ETM
//!    event's `attr.type` (cs-etm.c:1021).
//! 3. `PERF_RECORD_COMM` of the traced process.
//! 4. `PERF_RECORD_MMAP2` of the program file (user), or `PERF_RECORD_MMAP` of
//!    `[kernel.kallsyms]_text` (kernel, bytes from `--vmlinux`).
//! 5. `PERF_RECORD_ITRACE_START`.
//! 6. `PERF_RECORD_AUX`, its flags `PERF_AUX_FLAG_CORESIGHT_FORMAT_RAW` for a raw stream or 0
//!    for formatted frames (cs-etm.c:3202).
//! 7. `PERF_RECORD_EXIT`: a per-thread timeless trace is decoded when perf processes it
//!    (cs-etm.c:2921-2931).
//! 8. `PERF_RECORD_AUXTRACE` with `cpu` = -1 (per-thread decoding, cs-etm.c:3148), followed
//!    by the trace bytes.
//! 9. `PERF_RECORD_FINISHED_ROUND`.
//!
//! Two events are described, as perf record creates them: the ETM event and a dummy tracking
//! event; both have ids (cs-etm.c:1758 reads `evsel->core.id[0]`) and `sample_id_all`
//! trailers. The one feature perf needs is `HEADER_AUXTRACE`, the index of AUXTRACE records:
//! without it `perf script` 6.12 crashes. ETM_OPT_TS absent from the ETM attr's config means
//! timeless decoding (cs-etm.c:3029). A kernel trace must carry the context ID (TRCCONFIGR.CID
//! and CONTEXTIDR in the trace), or perf looks EL1 addresses up in a guest machine
//! (cs-etm.c:1033-1047).
//!
//! A CPU-wide trace ([`decode::build_cpu_wide`]) differs: one ETMv4 block per CPU in
//! AUXTRACE_INFO (its CPU, and its trace ID, which perf maps to the block when no
//! AUX_OUTPUT_HW_ID record does, cs-etm.c:3644-3648); per CPU an ITRACE_START, an AUX record
//! whose `sample_id` carries the CPU, and an AUXTRACE with `cpu` and `idx` = the CPU and
//! `tid` = -1, which perf matches to the AUX record by CPU (cs-etm.c:3152) and puts in queue
//! `idx` (cs-etm.c:3184); timestamps (`perf record -C` sets ETM_OPT_TS and ETM_OPT_CTXTID,
//! and TIME in the tracking event, arch/arm/util/cs-etm.c:443-448, 469-470); no EXIT: perf
//! decodes the queues at the session's end, in timestamp order across them
//! (cs-etm.c:2710). Context switch records are not needed: `perf record` asks for them only
//! with `--switch-events`, and the traced context ID names each CPU's thread.
//!
//! # Behaviour of perf 6.12 the scenarios avoid or document
//!
//! - A formatted trace loses the rest of its last frame when a timestamp packet in that frame
//!   makes the decoder wait: [`etm::format_frames`] always appends one null-ID frame.
//! - cs-etm does not apply TEXT_POKE records in time order: `machine__process_text_poke`
//!   (machine.c:788-829) writes the new bytes into perf's copy of kernel text when the record
//!   is processed, so a whole per-thread, timeless trace is decoded against the bytes perf holds
//!   when it decodes (`text_poke_is_applied_at_decode_time`), and a timestamped one, decoded at
//!   the final flush, against the bytes of the last record
//!   (`timestamped_text_poke_is_applied_at_the_end_of_the_decode`). Patch 0012 of the series
//!   (tools/patches) makes cs-etm apply the records in time order on timestamped traces; the
//!   ignored tests `timestamped_text_poke_is_applied_in_time_order` and
//!   `dropped_or_late_text_poke_fails_the_comparison` check a perf built with it
//!   (tools/perf.sh), named in `$TEXTPOKE_PERF`.
//!
//! # Covered CPU-wide
//!
//! Two CPUs, each with its own ETM, trace ID and AUX buffer, raw or formatted, running the
//! kernel program with timestamps, interleaved in time or one after the other: each CPU's
//! decode is its truth (`cpu_wide_kernel_trace_decodes_to_each_cpus_truth`). A TEXT_POKE
//! timed between the CPUs' runs of the poked site is applied at the end of the decode by
//! perf 6.12 (`cpu_wide_text_poke_is_applied_at_the_end_of_the_decode`), and on every queue
//! in time order with patch 0012 (the ignored
//! `cpu_wide_text_poke_is_applied_in_time_order_on_every_queue` and its control
//! `cpu_wide_dropped_or_late_text_poke_fails_the_comparison`).
//!
//! # Not covered
//!
//! Context switches within a CPU-wide trace (SWITCH_CPU_WIDE records, a CPU running several
//! threads), more than one trace source in one CPU's AUX buffer, AUX_OUTPUT_HW_ID records,
//! timeless CPU-wide traces, ETE, return stacks, branch broadcast, cycle counts, compressed
//! addresses, atom formats other than 1, speculation, and a byte comparison with a perf.data
//! recorded on real hardware.

pub mod a64;
pub mod dataset;
pub mod decode;
pub mod elf;
pub mod etm;
pub mod observed;
pub mod perfdata;
