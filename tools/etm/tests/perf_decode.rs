//! Synthetic ETMv4 traces decoded by the host's real perf (/usr/bin/perf with OpenCSD, or the
//! perf named in `$TEXTPOKE_PERF`), compared with the interpreter's truth. These tests need
//! that perf: without it, or without OpenCSD, they fail and name tools/install-deps.sh.
//!
//! The ignored tests need a perf whose cs-etm applies TEXT_POKE records in time order
//! (tools/patches/0012, built by tools/perf.sh), and fail with any other:
//! `TEXTPOKE_PERF=OUT/perf cargo test -p textpoke-etm -- --ignored`. Against that perf,
//! `timestamped_text_poke_is_applied_at_the_end_of_the_decode` and
//! `cpu_wide_text_poke_is_applied_at_the_end_of_the_decode` fail instead: they pin down the
//! unpatched behaviour.

mod common;

use common::TempDir;
use std::path::Path;
use textpoke_etm::a64::Kind;
use textpoke_etm::decode::{
    self, Built, BuiltCpuWide, Comparison, CpuWide, Decoded, Difference, ModuleRecords, PokeRecord,
    Scenario,
};

/// The kernel program's words (KTEXT + 4i) as addresses.
fn kernel_words(words: &[u64]) -> Vec<u64> {
    words.iter().map(|w| decode::KTEXT + 4 * w).collect()
}

/// The kernel program's execution when its site is poked after the first iteration.
const POKED_TRUTH: [u64; 9] = [0, 1, 2, 3, 4, 1, 3, 4, 5];
/// The kernel program decoded with the NOP everywhere (the poke applied after the trace).
const UNPOKED_DECODE: [u64; 14] = [0, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 5];
/// The kernel program decoded with `b skip` everywhere (the poke applied before the trace).
const POKED_DECODE: [u64; 8] = [0, 1, 3, 4, 1, 2, 3, 4];

/// The kernel program with a timestamp after every atom, so that one follows the first
/// iteration (at [`decode::time_after_steps`]`(5)`), raw and formatted.
fn dense_timestamps(poke: Option<PokeRecord>) -> [(&'static str, Scenario); 2] {
    let raw = Scenario {
        kernel: true,
        timestamps: true,
        ts_every: Some(1),
        poke,
        ..Scenario::default()
    };
    let formatted = Scenario {
        formatted: true,
        ..raw
    };
    [("raw", raw), ("formatted", formatted)]
}

/// Build and decode `s` in `dir`; fails the test when perf cannot be used.
fn decode_in(dir: &Path, s: &Scenario) -> (Built, Decoded, Comparison) {
    if let Err(e) = decode::require_perf() {
        panic!("{e}");
    }
    decode::run(s, dir).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// Each named scenario decodes exactly to the truth, with no decoder error.
fn assert_decodes_to_truth(test: &str, scenarios: &[(&str, Scenario)]) {
    let tmp = TempDir::new(test);
    for (name, s) in scenarios {
        let (built, decoded, cmp) = decode_in(&tmp.sub(name), s);
        if let Err(e) = cmp.check() {
            panic!(
                "{name}: {e}\npackets: {:?}\nperf: {decoded:?}",
                built.packets
            );
        }
        assert!(
            !decoded.insns.is_empty(),
            "{name}: an empty decode cannot match the truth"
        );
    }
}

/// One raw ETMv4 stream (AUX flag FORMAT_RAW): every instruction and branch of the user
/// program (a call in a loop, conditional branches taken and not, a return).
#[test]
fn raw_stream_decodes_to_the_truth() {
    assert_decodes_to_truth("raw", &[("raw", Scenario::default())]);
}

/// The same trace in 16-byte CoreSight formatter frames (AUX flags 0), including a frame
/// whose last byte needed a delayed ID change.
#[test]
fn formatted_stream_decodes_to_the_truth() {
    let formatted = Scenario {
        formatted: true,
        ..Scenario::default()
    };
    assert_decodes_to_truth("formatted", &[("formatted", formatted)]);
}

/// Timestamp packets with ETM_OPT_TS: perf's timestamped (not timeless) decode, raw and
/// formatted; the formatted one relies on the trailing null frame.
#[test]
fn timestamped_streams_decode_to_the_truth() {
    let ts = Scenario {
        timestamps: true,
        ..Scenario::default()
    };
    let formatted = Scenario {
        formatted: true,
        ..ts
    };
    assert_decodes_to_truth("timestamps", &[("raw", ts), ("formatted", formatted)]);
}

/// An SVC: Exception (Call) packet, the untraced EL1 handler, Trace On at the return
/// address. perf shows it as a trace end and a trace start.
#[test]
fn svc_exception_decodes_to_the_truth() {
    let svc = Scenario {
        svc: true,
        ..Scenario::default()
    };
    let formatted_ts = Scenario {
        formatted: true,
        timestamps: true,
        ..svc
    };
    assert_decodes_to_truth("svc", &[("raw", svc), ("formatted-ts", formatted_ts)]);
}

/// Kernel text at EL1 with the context ID traced, read by perf from `--vmlinux`.
#[test]
fn kernel_trace_with_vmlinux_decodes_to_the_truth() {
    let kernel = Scenario {
        kernel: true,
        ..Scenario::default()
    };
    let formatted = Scenario {
        formatted: true,
        ..kernel
    };
    assert_decodes_to_truth("kernel", &[("raw", kernel), ("formatted", formatted)]);
}

/// One atom flipped (the first `b.ne`, taken, encoded N): OpenCSD decodes it without error,
/// and only the comparison catches it, at the corrupted branch: the instruction after it is
/// the fall-through instead of the loop head, and the first differing branch sample is the
/// one that branch should have produced.
#[test]
fn flipped_atom_fails_the_comparison_at_that_branch() {
    let tmp = TempDir::new("flipped-atom");
    for formatted in [false, true] {
        let s = Scenario {
            formatted,
            flip_atom: Some(2),
            ..Scenario::default()
        };
        let (built, decoded, cmp) = decode_in(&tmp.sub(&format!("formatted-{formatted}")), &s);
        let t = &built.truth;
        let (i, branch) = (t.steps.iter().enumerate())
            .filter(|(_, s)| s.kind != Kind::Plain)
            .nth(2)
            .expect("the user program has three branches");
        assert!(branch.taken, "the flipped atom is a taken branch");
        assert!(
            cmp.check().is_err(),
            "a flipped atom must fail the comparison: {decoded:?}"
        );
        let want = Difference {
            index: i + 1,
            got: Some(branch.pc + 4),
            expected: Some(branch.next),
        };
        assert_eq!(cmp.insns, Some(want), "formatted {formatted}");
        let bi = (t.branches.iter())
            .position(|&b| b == (branch.pc, branch.next))
            .expect("the flipped branch has a sample");
        let d = cmp.branches.expect("the branch lists differ");
        assert_eq!((d.index, d.expected), (bi, Some((branch.pc, branch.next))));
        assert!(
            cmp.dump_errors.is_empty(),
            "OpenCSD accepts the stream: {:?}",
            cmp.dump_errors
        );
    }
}

/// Characterizes perf 6.12's cs-etm in a timeless decode, with or without
/// tools/patches/0012 (which leaves timeless decoding alone: without timestamps a record
/// cannot be placed in the trace): a kernel site is decoded with the bytes perf holds when
/// it decodes, not the bytes in effect when the instruction ran.
///
/// The kernel program (word i at KTEXT + 4i) runs `0 mov; 1 nop; 2 nop; 3 subs; 4 b.ne 1;
/// 1 ...; 5 b 6`, and after the first iteration word 1 becomes `b 3`. The truth is
/// 0,1,2,3,4,1,3,4,5; the atoms are E (b.ne), E (b 3), N (b.ne), E (b 6).
/// - TEXT_POKE before EXIT (where perf decodes): perf applies `b 3` to the whole trace:
///   0,1 (b 3, E) 3,4 (b.ne, E) 1 (b 3, N: falls through) 2,3,4 (b.ne, E), atoms used up.
/// - TEXT_POKE after EXIT: the NOP everywhere: 0,1,2,3,4 (E) 1,2,3,4 (E) 1,2,3,4 (N) 5 (E).
#[test]
fn text_poke_is_applied_at_decode_time() {
    let tmp = TempDir::new("text-poke");
    let cases = [
        (PokeRecord::BeforeDecode, vec![0, 1, 3, 4, 1, 2, 3, 4]),
        (
            PokeRecord::AfterDecode,
            vec![0, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 5],
        ),
    ];
    for (poke, perf_words) in cases {
        let s = Scenario {
            kernel: true,
            poke: Some(poke),
            ..Scenario::default()
        };
        let (built, decoded, cmp) = decode_in(&tmp.sub(&format!("{poke:?}")), &s);
        let at = |words: &[u64]| {
            words
                .iter()
                .map(|w| decode::KTEXT + 4 * w)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            built.truth.insns,
            at(&[0, 1, 2, 3, 4, 1, 3, 4, 5]),
            "the truth"
        );
        assert_eq!(decoded.insns, at(&perf_words), "{poke:?}: perf's decode");
        assert!(cmp.check().is_err(), "{poke:?}");
        assert!(
            cmp.dump_errors.is_empty(),
            "{poke:?}: the wrong decode is silent"
        );
    }
}

/// A kernel trace with a timestamp after every atom decodes to the truth: the timestamps
/// the TEXT_POKE tests below rely on do not disturb the decode.
#[test]
fn kernel_trace_with_dense_timestamps_decodes_to_the_truth() {
    assert_decodes_to_truth("dense-ts", &dense_timestamps(None));
}

/// Characterizes Debian perf 6.12.95's cs-etm (and unpatched 6.12.117's), and fails against
/// a perf with tools/patches/0012: with timestamps, cs-etm decodes everything when the
/// session ends (cs_etm__flush_events), after every TEXT_POKE record has been applied, so
/// a poke timed between the two iterations (the timestamp packet after the first
/// iteration carries that time) is applied to the whole trace. The decode is wrong and
/// OpenCSD reports nothing.
#[test]
fn timestamped_text_poke_is_applied_at_the_end_of_the_decode() {
    let tmp = TempDir::new("ts-poke-stock");
    for (name, s) in dense_timestamps(Some(PokeRecord::AfterSteps(5))) {
        let (built, decoded, cmp) = decode_in(&tmp.sub(name), &s);
        assert_eq!(built.truth.insns, kernel_words(&POKED_TRUTH), "the truth");
        assert_eq!(
            decoded.insns,
            kernel_words(&POKED_DECODE),
            "{name}: perf's decode"
        );
        assert!(cmp.check().is_err(), "{name}");
        assert!(
            cmp.dump_errors.is_empty(),
            "{name}: the wrong decode is silent: {:?}",
            cmp.dump_errors
        );
    }
}

/// With tools/patches/0012, cs-etm decodes the trace up to a TEXT_POKE record's time with
/// the old bytes and the rest with the new ones: the poke timed between the two iterations
/// decodes exactly to the truth, every instruction and branch, with no decoder error.
#[test]
#[ignore = "needs a perf with tools/patches/0012 in TEXTPOKE_PERF (see the file's documentation)"]
fn timestamped_text_poke_is_applied_in_time_order() {
    assert_decodes_to_truth(
        "ts-poke-ordered",
        &dense_timestamps(Some(PokeRecord::AfterSteps(5))),
    );
}

/// The control of `timestamped_text_poke_is_applied_in_time_order`: the same trace with the
/// record dropped, or timed after the second iteration, is decoded with the NOP
/// everywhere, and the comparison fails at the first instruction after the poke.
#[test]
#[ignore = "needs a perf with tools/patches/0012 in TEXTPOKE_PERF (see the file's documentation)"]
fn dropped_or_late_text_poke_fails_the_comparison() {
    let tmp = TempDir::new("ts-poke-control");
    for poke in [PokeRecord::Dropped, PokeRecord::AfterSteps(9)] {
        for (name, s) in dense_timestamps(Some(poke)) {
            let (built, decoded, cmp) = decode_in(&tmp.sub(&format!("{poke:?}-{name}")), &s);
            assert_eq!(built.truth.insns, kernel_words(&POKED_TRUTH), "the truth");
            assert_eq!(
                decoded.insns,
                kernel_words(&UNPOKED_DECODE),
                "{poke:?} {name}: perf's decode"
            );
            let d = cmp.insns.clone().expect("the instruction lists differ");
            assert_eq!(d.index, 6, "{poke:?} {name}: after the poked site");
            assert!(cmp.check().is_err(), "{poke:?} {name}");
            assert!(
                cmp.dump_errors.is_empty(),
                "{poke:?} {name}: {:?}",
                cmp.dump_errors
            );
        }
    }
}

/// CPU 1's start in the CPU-wide traces, after CPU 0's: mid-way through CPU 0's first
/// iteration, so the two CPUs' trace interleaves in time and each CPU runs the site once
/// before and once after a poke at the end of CPU 0's first iteration
/// ([`decode::time_after_steps`]`(5)`, CPU 1 then has begun three instructions).
const INTERLEAVED: u64 = 25;
/// CPU 1's start after that poke, mid-way through CPU 0's second iteration: CPU 1 runs only
/// the poked site.
const AFTER_THE_POKE: u64 = 55;

/// The CPU-wide kernel traces: CPU 1 interleaved with CPU 0 or starting after the poke
/// time, raw and formatted.
fn cpu_wide(poke: Option<PokeRecord>) -> [(&'static str, CpuWide); 4] {
    let s = |formatted, start| CpuWide {
        formatted,
        starts: [0, start],
        poke,
    };
    [
        ("interleaved-raw", s(false, INTERLEAVED)),
        ("interleaved-formatted", s(true, INTERLEAVED)),
        ("after-raw", s(false, AFTER_THE_POKE)),
        ("after-formatted", s(true, AFTER_THE_POKE)),
    ]
}

/// Build and decode the CPU-wide `s` in `dir`; fails the test when perf cannot be used.
fn decode_cpu_wide_in(dir: &Path, s: &CpuWide) -> (BuiltCpuWide, Vec<Decoded>, Vec<Comparison>) {
    if let Err(e) = decode::require_perf() {
        panic!("{e}");
    }
    decode::run_cpu_wide(s, dir).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// Each named CPU-wide scenario decodes, on each CPU, exactly to that CPU's truth, with no
/// decoder error.
fn assert_cpu_wide_decodes_to_truth(test: &str, scenarios: &[(&str, CpuWide)]) {
    let tmp = TempDir::new(test);
    for (name, s) in scenarios {
        let (built, decoded, cmps) = decode_cpu_wide_in(&tmp.sub(name), s);
        for ((c, d), cmp) in built.cpus.iter().zip(&decoded).zip(&cmps) {
            if let Err(e) = cmp.check() {
                panic!(
                    "{name}, CPU {}: {e}\npackets: {:?}\nperf: {d:?}",
                    c.cpu, c.packets
                );
            }
            assert!(
                !d.insns.is_empty(),
                "{name}, CPU {}: an empty decode cannot match the truth",
                c.cpu
            );
        }
    }
}

/// A CPU-wide trace (`perf record -e cs_etm// -C 0,1`): two CPUs run the
/// unchanging kernel program, each traced by its own ETM (its own metadata block and trace
/// ID) into its own AUX buffer, with timestamps. perf decodes one queue per CPU in
/// timestamp order, and each CPU's samples are exactly that CPU's execution.
#[test]
fn cpu_wide_kernel_trace_decodes_to_each_cpus_truth() {
    assert_cpu_wide_decodes_to_truth("cpu-wide", &cpu_wide(None));
}

/// CPU 1's execution when it starts after the poke: the site is `b skip` in both
/// iterations.
const POKED_FROM_THE_START_TRUTH: [u64; 8] = [0, 1, 3, 4, 1, 3, 4, 5];
/// That execution decoded with the NOP everywhere: its atoms E (b 3), E (b.ne), E (b 3),
/// N (b.ne), E (b halt) given to the `b.ne` of four iterations and to `b halt`.
const POKED_FROM_THE_START_UNPOKED_DECODE: [u64; 18] =
    [0, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 5];

/// CPU 1's truth in a poked CPU-wide scenario: as CPU 0's when it runs the site before the
/// poke too, else poked from its start.
fn cpu1_truth(s: &CpuWide) -> Vec<u64> {
    if s.starts[1] == INTERLEAVED {
        kernel_words(&POKED_TRUTH)
    } else {
        kernel_words(&POKED_FROM_THE_START_TRUTH)
    }
}

/// Characterizes Debian perf 6.12.95's cs-etm (and unpatched 6.12.117's) on a CPU-wide
/// trace, and fails against a perf with tools/patches/0012: every queue is decoded at the
/// end of the session, against the bytes of the last TEXT_POKE record. The poke timed at
/// the end of CPU 0's first iteration is applied to all of both CPUs' trace: CPU 0, and
/// CPU 1 when it ran the site before the poke too, decode as the per-thread trace does in
/// `timestamped_text_poke_is_applied_at_the_end_of_the_decode`; CPU 1 starting after the
/// poke is right by chance. OpenCSD reports nothing.
#[test]
fn cpu_wide_text_poke_is_applied_at_the_end_of_the_decode() {
    let tmp = TempDir::new("cpu-wide-poke-stock");
    for (name, s) in cpu_wide(Some(PokeRecord::AfterSteps(5))) {
        let (built, decoded, cmps) = decode_cpu_wide_in(&tmp.sub(name), &s);
        let truths = [kernel_words(&POKED_TRUTH), cpu1_truth(&s)];
        let cpu1_decode = if s.starts[1] == INTERLEAVED {
            kernel_words(&POKED_DECODE)
        } else {
            cpu1_truth(&s)
        };
        let decodes = [kernel_words(&POKED_DECODE), cpu1_decode];
        for (c, ((truth, decode), cmp)) in built
            .cpus
            .iter()
            .zip(truths.iter().zip(&decodes).zip(&cmps))
        {
            assert_eq!(c.truth.insns, *truth, "{name}, CPU {}: the truth", c.cpu);
            let got = &decoded[c.cpu as usize].insns;
            assert_eq!(got, decode, "{name}, CPU {}: perf's decode", c.cpu);
            assert_eq!(cmp.check().is_err(), got != truth, "{name}, CPU {}", c.cpu);
            assert!(
                cmp.dump_errors.is_empty(),
                "{name}, CPU {}: the wrong decode is silent: {:?}",
                c.cpu,
                cmp.dump_errors
            );
        }
    }
}

/// With tools/patches/0012, a TEXT_POKE record on a CPU-wide trace is applied in time order
/// on both queues: before perf applies the record, each queue is decoded with the old bytes
/// up to its first timestamp at or after the record's time, and the rest of it with the new
/// ones. CPU 0 runs the site before and after the poke; CPU 1 either does too, its trace
/// interleaved with CPU 0's (its queue must be decoded up to the poke as well), or starts
/// after the poke. Each CPU decodes exactly to its truth, with no decoder error.
#[test]
#[ignore = "needs a perf with tools/patches/0012 in TEXTPOKE_PERF (see the file's documentation)"]
fn cpu_wide_text_poke_is_applied_in_time_order_on_every_queue() {
    assert_cpu_wide_decodes_to_truth(
        "cpu-wide-poke-ordered",
        &cpu_wide(Some(PokeRecord::AfterSteps(5))),
    );
}

/// The control of `cpu_wide_text_poke_is_applied_in_time_order_on_every_queue`: the same
/// trace with the record dropped, or timed after both CPUs' trace
/// ([`decode::time_after_steps`]`(15)`), is decoded with the NOP everywhere, and the
/// comparison fails on each CPU at its first instruction after the poke: on CPU 0, and CPU 1
/// interleaved, the second run of the site; on CPU 1 starting after the poke, the first.
#[test]
#[ignore = "needs a perf with tools/patches/0012 in TEXTPOKE_PERF (see the file's documentation)"]
fn cpu_wide_dropped_or_late_text_poke_fails_the_comparison() {
    let tmp = TempDir::new("cpu-wide-poke-control");
    for poke in [PokeRecord::Dropped, PokeRecord::AfterSteps(15)] {
        for (name, s) in cpu_wide(Some(poke)) {
            let (built, decoded, cmps) =
                decode_cpu_wide_in(&tmp.sub(&format!("{poke:?}-{name}")), &s);
            let interleaved = s.starts[1] == INTERLEAVED;
            let truths = [kernel_words(&POKED_TRUTH), cpu1_truth(&s)];
            let (cpu1_decode, cpu1_index) = if interleaved {
                (kernel_words(&UNPOKED_DECODE), 6)
            } else {
                (kernel_words(&POKED_FROM_THE_START_UNPOKED_DECODE), 2)
            };
            let wrong = [
                (kernel_words(&UNPOKED_DECODE), 6),
                (cpu1_decode, cpu1_index),
            ];
            for (c, ((truth, (decode, index)), cmp)) in
                built.cpus.iter().zip(truths.iter().zip(&wrong).zip(&cmps))
            {
                let what = format!("{poke:?} {name}, CPU {}", c.cpu);
                assert_eq!(c.truth.insns, *truth, "{what}: the truth");
                assert_eq!(
                    decoded[c.cpu as usize].insns, *decode,
                    "{what}: perf's decode"
                );
                let d = cmp.insns.clone().expect("the instruction lists differ");
                assert_eq!(d.index, *index, "{what}: after the poked site");
                assert!(cmp.check().is_err(), "{what}");
                assert!(cmp.dump_errors.is_empty(), "{what}: {:?}", cmp.dump_errors);
            }
        }
    }
}

/// A module loaded after the recording started, which the kernel calls into: the vmlinux has
/// no byte of it. Described as textpoke describes such a module (kernel/new_text.rs: a
/// `KSYMBOL` register of its text, then a `TEXT_POKE` with no old bytes carrying it), perf
/// maps it and the trace decodes to the truth, through the module and back. Undescribed, the
/// same trace does not: perf decodes the call as falling through to the next instruction.
#[test]
fn module_loaded_mid_trace_decodes_with_its_records_only() {
    let scenario = |module| Scenario {
        kernel: true,
        module: Some(module),
        ..Scenario::default()
    };
    assert_decodes_to_truth(
        "module-described",
        &[("described", scenario(ModuleRecords::Described))],
    );
    let tmp = TempDir::new("module-undescribed");
    let undescribed = scenario(ModuleRecords::Undescribed);
    let (built, decoded, cmp) = decode_in(&tmp.sub("undescribed"), &undescribed);
    assert!(
        built.truth.insns.iter().any(|&a| a >= decode::MTEXT),
        "the truth runs the module"
    );
    assert!(
        cmp.check().is_err(),
        "decoded without the module's records: {decoded:?}"
    );
}
