//! Scenarios: build a program, its ground-truth execution, its ETMv4 trace and a perf.data
//! around it; decode that with `perf script` ([`perf()`]: the host's, or the one named in
//! `$TEXTPOKE_PERF`); compare the decode with the truth.
//!
//! perf is run three times on a file: `perf script -D` (the OpenCSD packet dump, scanned for
//! decoder errors), `perf script --itrace=i1i -F ip,sym` (every executed instruction) and
//! `perf script --itrace=b -F ip,addr` (every taken branch), with `DEBUGINFOD_URLS` empty so
//! nothing is fetched. A kernel scenario adds `--vmlinux`.

use crate::a64::{self, Image, Kind, Patch, Step, COND_NE, NOP, RET, SVC0};
use crate::etm::{self, Timestamps};
use crate::perfdata::{self as pd, cs_etm, Attr, PerfFile};
use crate::{elf, perfdata::p32};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable naming the perf binary to check instead of [`DEFAULT_PERF`], for
/// example one built by tools/perf.sh from a patched source tree.
pub const PERF_ENV: &str = "TEXTPOKE_PERF";
/// The perf checked by default: Debian's linux-perf, which tools/install-deps.sh installs.
pub const DEFAULT_PERF: &str = "/usr/bin/perf";

/// The perf whose decode is checked: `$TEXTPOKE_PERF` when set and not empty, else
/// [`DEFAULT_PERF`].
pub fn perf() -> String {
    std::env::var(PERF_ENV)
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| DEFAULT_PERF.to_owned())
}

/// Address of the user program's `.text` (a classic ET_EXEC base).
pub const TEXT: u64 = 0x40_1000;
/// Address of the kernel program's `_text` (an arm64 kernel's usual virtual address).
pub const KTEXT: u64 = 0xffff_8000_8001_0000;
/// The traced process (pid = tid).
pub const PID: u32 = 4242;
/// The type the cs_etm PMU had when "recorded": the attr's type and AUXTRACE_INFO's must
/// agree (cs-etm.c:1021 recognises the ETM event by it).
pub const PMU_TYPE: u32 = 10;
/// `CORESIGHT_LEGACY_CPU_TRACE_ID(0)` (coresight-pmu.h:22). With no AUX_OUTPUT_HW_ID record,
/// perf takes the trace ID from TRCTRACEIDR (cs-etm.c:3335-3364).
pub const TRACE_ID: u8 = 0x10;

// ETMv4 ID registers of a Cortex-A57-class ETM (Juno-like values, not read from hardware).
// OpenCSD is given only IDR0/1/2/8, CONFIGR and TRACEIDR (cs-etm-decoder.c:166-183).
/// TSSIZE 64 bits, return stack, cycle counting, branch broadcast, COMMOPT 1.
const TRCIDR0: u64 = 0x2800_0EA1;
/// Arm, ETMv4.0 (ARCHMIN < 4, so OpenCSD decodes as ARCH_V8).
const TRCIDR1: u64 = 0x4100_F403;
/// IASIZE 64, CIDSIZE 32, VMIDSIZE 8.
const TRCIDR2: u64 = 0x0000_0488;
/// MAXSPEC 0.
const TRCIDR8: u64 = 0;
const TRCAUTHSTATUS: u64 = 0xCC;
/// TRCCONFIGR.CID (bit 6, `ETM4_CFG_BIT_CTXTID`, coresight-pmu.h:42).
pub(crate) const TRCCONFIGR_CID: u64 = 1 << 6;
/// TRCCONFIGR.TS (bit 11, `ETM4_CFG_BIT_TS`, coresight-pmu.h:44).
pub(crate) const TRCCONFIGR_TS: u64 = 1 << 11;
/// `ETM_OPT_CTXTID` (coresight-pmu.h:34) in the attr's config.
pub(crate) const ETM_OPT_CTXTID: u64 = 1 << 14;
/// `ETM_OPT_TS` (coresight-pmu.h:36): without it perf decodes timeless (cs-etm.c:3029).
pub(crate) const ETM_OPT_TS: u64 = 1 << 28;
/// Trace timestamp of the first instruction; one instruction takes [`TS_PER_INSN`].
const TS_BASE: u64 = 1_000_000;
const TS_PER_INSN: u64 = 10;
/// Atoms between timestamp packets unless [`Scenario::ts_every`] says otherwise. At 2 the
/// user program's last frame holds a timestamp, so the formatted scenarios depend on the
/// trailing null frame of [`etm::format_frames`].
const TS_EVERY: usize = 2;

/// The trace timestamp (and perf time: TIME_CONV maps them 1:1) at which the first `steps`
/// instructions have run. A timestamp packet carries the time of the atom before it.
pub fn time_after_steps(steps: usize) -> u64 {
    TS_BASE + TS_PER_INSN * steps as u64
}

/// The TEXT_POKE record of a poked kernel program: where it sits relative to the EXIT record,
/// at which perf 6.12 decodes a per-thread timeless trace (cs-etm.c:2921-2931), and its time,
/// by which perf orders it among the other records (all in one round) and, with timestamps,
/// places it in the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PokeRecord {
    /// Before EXIT, timed before the trace starts: perf has applied the poke when it decodes
    /// a timeless trace.
    BeforeDecode,
    /// After EXIT, timed after it: perf applies the poke only after decoding a timeless
    /// trace.
    AfterDecode,
    /// After EXIT in the file, but timed when the first `n` instructions had run
    /// ([`time_after_steps`]): perf processes it before EXIT.
    AfterSteps(usize),
    /// No record: the site is poked while the program runs, but perf is not told.
    Dropped,
}

/// What to build.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scenario {
    /// 16-byte formatter frames (AUX flags 0) instead of one raw stream.
    pub formatted: bool,
    /// The kernel program at EL1 (context ID traced, `--vmlinux`) instead of the user one.
    pub kernel: bool,
    /// Timestamp packets and perf's timestamped (not timeless) decode.
    pub timestamps: bool,
    /// Atoms between timestamp packets; `None`: two.
    pub ts_every: Option<usize>,
    /// The user program's `end: nop` becomes `svc #0`.
    pub svc: bool,
    /// Invert the atom with this index in the trace.
    pub flip_atom: Option<usize>,
    /// Poke the kernel program's site while it runs, and record it so.
    pub poke: Option<PokeRecord>,
    /// Run [`kernel_and_module_program`] instead: the kernel calls into a module loaded after
    /// the recording started, described by records or not.
    pub module: Option<ModuleRecords>,
}

/// Whether the module of [`kernel_and_module_program`] is described to perf, as textpoke
/// describes a module that loads while a tracer listens (kernel/new_text.rs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModuleRecords {
    /// A `KSYMBOL` register of its text and a `TEXT_POKE` with no old bytes carrying it, both
    /// before the trace.
    Described,
    /// Nothing: the module is in neither the vmlinux nor any record.
    Undescribed,
}

/// Where [`kernel_and_module_program`]'s module lies: past the kernel's map, so perf can take
/// its bytes from records alone.
pub const MTEXT: u64 = KTEXT + 0x1_0000;

/// The words of [`kernel_and_module_program`] that are the kernel's (the vmlinux holds them).
const KERNEL_WORDS: usize = 6;

/// The kernel program of a module scenario at [`KTEXT`], calling twice into a module function
/// at [`MTEXT`]: `0 mov x0, #2; 1 loop: bl mfunc; 2 subs x0, x0, #1; 3 b.ne loop; 4 b halt;
/// 5 halt`, and `mfunc: nop; nop; ret`. One image holds both, NOPs between (never run).
pub fn kernel_and_module_program() -> Program {
    let a = |i: u64| KTEXT + 4 * i;
    let m = |i: u64| MTEXT + 4 * i;
    let mut words = vec![
        a64::movz_x(0, 2),                // 0 _text: mov  x0, #2
        a64::bl(a(1), m(0)),              // 1 loop:  bl   mfunc
        a64::subs_x_imm(0, 0, 1),         // 2        subs x0, x0, #1
        a64::b_cond(a(3), a(1), COND_NE), // 3        b.ne loop
        a64::b(a(4), a(5)),               // 4        b    halt
        NOP,                              // 5 halt:  (the trace stops here)
    ];
    assert_eq!(words.len(), KERNEL_WORDS);
    words.resize(((MTEXT - KTEXT) / 4) as usize, NOP);
    words.extend([NOP, NOP, RET]); // mfunc
    let syms = vec![
        elf::Sym::new("_text", a(0), 0),
        elf::Sym::new("_stext", a(0), 0),
        elf::Sym::new("kfunc", a(0), 4 * KERNEL_WORDS as u64),
    ];
    Program {
        img: Image { base: KTEXT, words },
        syms,
        entry: a(0),
        stop: a(5),
        poke: None,
    }
}

/// Code, symbols, where execution starts and stops, and an optional poke of it.
#[derive(Clone, Debug)]
pub struct Program {
    /// The code as the ELF file holds it (before any poke).
    pub img: Image,
    /// Its symbols.
    pub syms: Vec<elf::Sym>,
    /// Where the trace starts.
    pub entry: u64,
    /// Where the trace stops (not executed).
    pub stop: u64,
    /// The poke a [`Scenario::poke`] applies.
    pub poke: Option<Patch>,
}

/// The user program at [`TEXT`]: a loop calling a function three times, a conditional branch
/// not taken and one taken, direct and indirect branches.
pub fn user_program() -> Program {
    let a = |i: u64| TEXT + 4 * i;
    let (l_loop, l_done, l_end, l_halt, l_func) = (a(1), a(6), a(8), a(12), a(13));
    let words = vec![
        a64::movz_x(0, 3),                  // 0  _start: mov  x0, #3
        a64::bl(a(1), l_func),              // 1  loop:   bl   func
        a64::subs_x_imm(0, 0, 1),           // 2          subs x0, x0, #1
        a64::b_cond(a(3), l_loop, COND_NE), // 3          b.ne loop
        a64::cbz_x(a(4), l_done, 0),        // 4          cbz  x0, done
        NOP,                                // 5          nop  (skipped)
        a64::b(a(6), l_end),                // 6  done:   b    end
        NOP,                                // 7          nop  (skipped)
        NOP,                                // 8  end:    nop  (svc #0 with Scenario::svc)
        NOP,                                // 9          nop
        NOP,                                // 10         nop
        a64::b(a(11), l_halt),              // 11         b    halt
        NOP,                                // 12 halt:   (the trace stops here)
        NOP,                                // 13 func:   nop
        RET,                                // 14         ret
    ];
    let syms = vec![
        elf::Sym::new("_start", a(0), 4 * 13),
        elf::Sym::new("func", l_func, 8),
    ];
    Program {
        img: Image { base: TEXT, words },
        syms,
        entry: a(0),
        stop: l_halt,
        poke: None,
    }
}

/// The kernel program at [`KTEXT`]: a two-iteration loop whose first instruction, a NOP, is
/// poked into `b skip` after the first iteration, so the site runs both before and after
/// the poke. `_text` and `_stext` let perf place the kernel map.
pub fn kernel_program() -> Program {
    let a = |i: u64| KTEXT + 4 * i;
    let words = vec![
        a64::movz_x(0, 2),                // 0 _text: mov  x0, #2
        NOP,                              // 1 loop:  nop  <- poked to "b skip"
        NOP,                              // 2        nop
        a64::subs_x_imm(0, 0, 1),         // 3 skip:  subs x0, x0, #1
        a64::b_cond(a(4), a(1), COND_NE), // 4        b.ne loop
        a64::b(a(5), a(6)),               // 5        b    halt
        NOP,                              // 6 halt:  (the trace stops here)
    ];
    let syms = vec![
        elf::Sym::new("_text", a(0), 0),
        elf::Sym::new("_stext", a(0), 0),
        elf::Sym::new("kfunc", a(0), 4 * 7),
    ];
    // Instructions 0-4 (the first iteration) run before the poke.
    let poke = Patch {
        after_steps: 5,
        addr: a(1),
        word: a64::b(a(1), a(3)),
    };
    Program {
        img: Image { base: KTEXT, words },
        syms,
        entry: a(0),
        stop: a(6),
        poke: Some(poke),
    }
}

/// What perf should report for an execution.
#[derive(Clone, Debug)]
pub struct Truth {
    /// The execution.
    pub steps: Vec<Step>,
    /// Every executed instruction's address, in order.
    pub insns: Vec<u64>,
    /// Every branch sample perf should emit, `(from, to)`, in order.
    pub branches: Vec<(u64, u64)>,
}

impl Truth {
    /// The truth of `steps` traced from `entry`. perf emits `0 => entry` when the trace
    /// starts; an SVC into the untraced kernel shows as `svc => 0` then `0 => return
    /// address`; and a branch sample is emitted only when the next range starts
    /// (cs-etm.c:1905-1920), so the last taken branch, whose target never executes in the
    /// trace, has none.
    pub fn new(steps: Vec<Step>, entry: u64) -> Self {
        let insns = steps.iter().map(|s| s.pc).collect();
        let mut branches = vec![(0, entry)];
        for s in &steps {
            if s.taken {
                branches.push((s.pc, s.next));
            } else if s.kind == Kind::Svc {
                branches.extend([(s.pc, 0), (0, s.next)]);
            }
        }
        branches.pop();
        Truth {
            steps,
            insns,
            branches,
        }
    }
}

/// The files of a built scenario.
#[derive(Debug)]
pub struct Built {
    /// The perf.data file.
    pub perf_data: PathBuf,
    /// The program's ELF file, named `vmlinux` for the kernel program (given to perf as
    /// `--vmlinux`) and `prog` for the user program (named by the MMAP2 record).
    pub elf: PathBuf,
    /// Whether the ELF is a vmlinux.
    pub kernel: bool,
    /// The ETMv4 packets written: byte offset and name.
    pub packets: Vec<(usize, String)>,
    /// The truth.
    pub truth: Truth,
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    fs::write(path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// `CORESIGHT_LEGACY_CPU_TRACE_ID(cpu)` (coresight-pmu.h:22): the trace ID of `cpu`'s ETM
/// when no AUX_OUTPUT_HW_ID record names another.
pub fn cpu_trace_id(cpu: u32) -> u8 {
    u8::try_from(0x10 + 2 * cpu).expect("a trace ID is a byte")
}

/// AUXTRACE_INFO's `priv[]` words: the global header and one ETMv4 block per CPU in `cpus`,
/// each with its CPU's [`cpu_trace_id`]. A block's size must equal what perf parses
/// (cs-etm.c:3518); with eight trace parameters and TS_SOURCE = 1 perf does not warn about
/// virtual timestamps (cs-etm.c:3319).
pub(crate) fn cs_etm_metadata(trcconfigr: u64, cpus: &[u32]) -> Vec<u64> {
    let mut m = vec![0u64; cs_etm::HEADER_WORDS];
    m[cs_etm::HEADER_VERSION] = cs_etm::CURRENT_VERSION;
    m[cs_etm::PMU_TYPE_CPUS] = u64::from(PMU_TYPE) << 32 | cpus.len() as u64;
    m[cs_etm::SNAPSHOT] = 0;
    for &c in cpus {
        let mut cpu = vec![0u64; cs_etm::ETMV4_WORDS];
        cpu[cs_etm::MAGIC] = cs_etm::ETMV4_MAGIC;
        cpu[cs_etm::CPU] = u64::from(c);
        cpu[cs_etm::NR_TRC_PARAMS] = (cs_etm::ETMV4_WORDS - cs_etm::NR_TRC_PARAMS - 1) as u64;
        cpu[cs_etm::TRCCONFIGR] = trcconfigr;
        cpu[cs_etm::TRCTRACEIDR] = u64::from(cpu_trace_id(c));
        cpu[cs_etm::TRCIDR0] = TRCIDR0;
        cpu[cs_etm::TRCIDR1] = TRCIDR1;
        cpu[cs_etm::TRCIDR2] = TRCIDR2;
        cpu[cs_etm::TRCIDR8] = TRCIDR8;
        cpu[cs_etm::TRCAUTHSTATUS] = TRCAUTHSTATUS;
        cpu[cs_etm::TS_SOURCE] = 1; // virtual timestamps
        m.extend_from_slice(&cpu);
    }
    m
}

/// One ETM's trace of `steps`, run from `entry`: A-Sync, Trace Info, Trace On, the entry
/// address with its context, then the steps. `contextidr` is the CONTEXTIDR_EL1 of kernel
/// code at EL1 (None: user code at EL0). With `ts`, a timestamp of the trace's start
/// precedes the steps and one a little after their end follows them. Raw, or in formatter
/// frames with `trace_id`; returned with the packet log.
fn encode_trace(
    steps: &[Step],
    entry: u64,
    contextidr: Option<u32>,
    ts: Option<Timestamps>,
    flip_atom: Option<usize>,
    formatted: Option<u8>,
) -> (Vec<u8>, Vec<(usize, String)>) {
    let mut e = etm::Encoder::new();
    e.async_();
    e.trace_info();
    e.trace_on();
    e.addr_ctxt64(entry, u8::from(contextidr.is_some()), contextidr);
    if let Some(t) = ts {
        e.timestamp(t.base);
    }
    e.encode_steps(steps, flip_atom, ts);
    if let Some(t) = ts {
        e.timestamp(t.base + t.per_insn * steps.len() as u64 + 5);
    }
    let aux = match formatted {
        Some(id) => etm::format_frames(&e.out, id),
        None => e.out.clone(),
    };
    (aux, e.log)
}

/// The ETM event and the dummy tracking event `perf record` adds for the side-band records
/// (arch/arm/util/cs-etm.c:461-466), as it creates them for a trace of kernel or user code,
/// with or without timestamps, with the tracking event asking for TEXT_POKE records or not.
/// The ETM event samples CPU (:437), and both sample TIME with timestamps (the tracking
/// event of `perf record -C` always does, :469-470). A per-thread trace of a workload is
/// enabled on exec; a CPU-wide one is not.
pub(crate) fn events(kernel: bool, timestamps: bool, text_poke: bool, cpu_wide: bool) -> [Attr; 2] {
    let sample_type = pd::PERF_SAMPLE_IP | pd::PERF_SAMPLE_TID | pd::PERF_SAMPLE_CPU;
    let sample_type = sample_type | pd::PERF_SAMPLE_PERIOD | pd::PERF_SAMPLE_IDENTIFIER;
    let sample_type = sample_type | bit(timestamps, pd::PERF_SAMPLE_TIME);
    let flags = pd::ATTR_DISABLED | bit(!cpu_wide, pd::ATTR_ENABLE_ON_EXEC);
    let flags = flags | pd::ATTR_EXCLUDE_HV | pd::ATTR_SAMPLE_ID_ALL;
    let flags = flags | bit(!kernel, pd::ATTR_EXCLUDE_KERNEL);
    let name = match (kernel, cpu_wide) {
        (false, _) => "cs_etm//u",
        (true, false) => "cs_etm/contextid/",
        (true, true) => "cs_etm/contextid,timestamp/",
    };
    let etm_attr = Attr {
        type_: PMU_TYPE,
        config: bit(kernel, ETM_OPT_CTXTID) | bit(timestamps, ETM_OPT_TS),
        sample_period: 1,
        sample_type,
        flags,
        id: 100,
        name: name.into(),
    };
    let tracking = pd::ATTR_MMAP | pd::ATTR_COMM | pd::ATTR_TASK | pd::ATTR_MMAP2;
    let tracking = tracking | pd::ATTR_COMM_EXEC | bit(text_poke, pd::ATTR_TEXT_POKE);
    let dummy_attr = Attr {
        type_: 1,  // PERF_TYPE_SOFTWARE, perf_event.h:31
        config: 9, // PERF_COUNT_SW_DUMMY, perf_event.h:128
        flags: flags | tracking,
        id: 101,
        name: "dummy:u".into(),
        ..etm_attr.clone()
    };
    [etm_attr, dummy_attr]
}

/// The feature sections of a recording of `attrs` on `nrcpus` CPUs (HEADER_AUXTRACE is
/// added by [`PerfFile::finish`]).
pub(crate) fn features(attrs: &[Attr], nrcpus: u32) -> Vec<(u32, Vec<u8>)> {
    let mut cpus = Vec::new();
    p32(&mut cpus, nrcpus); // online
    p32(&mut cpus, nrcpus); // available
    let pmus = pd::feat_pmu_mappings(&[(4, "software"), (PMU_TYPE, "cs_etm")]);
    vec![
        (pd::HEADER_HOSTNAME, pd::feat_string("synthetic")),
        (pd::HEADER_OSRELEASE, pd::feat_string("6.12.0-synthetic")),
        (pd::HEADER_VERSION, pd::feat_string("6.12")),
        (pd::HEADER_ARCH, pd::feat_string("aarch64")),
        (pd::HEADER_NRCPUS, cpus),
        (pd::HEADER_EVENT_DESC, pd::feat_event_desc(attrs)),
        (pd::HEADER_PMU_MAPPINGS, pmus),
    ]
}

/// The TEXT_POKE record of `p`'s site, written by the dummy event of `attrs` in process
/// `pid` at `time`.
fn text_poke_record(f: &mut PerfFile, p: &Program, attrs: &[Attr; 2], pid: u32, time: u64) {
    let site = p.poke.expect("the kernel program has a poke site");
    let old = p.img.words[((site.addr - p.img.base) / 4) as usize].to_le_bytes();
    let new = site.word.to_le_bytes();
    let id = pd::sample_id(pid, time, attrs[1].id);
    f.text_poke(site.addr, &old, &new, attrs[1].sample_type, &id);
}

/// Write the scenario's ELF and perf.data into `dir` (which must exist) and return them with
/// the truth. The perf.data is shaped like `perf record -e cs_etm// --per-thread` output
/// on arm64; see the crate documentation for its records.
pub fn build(s: &Scenario, dir: &Path) -> Result<Built, String> {
    if s.kernel && s.svc {
        return Err("the SVC scenario runs only the user program".into());
    }
    if (s.poke.is_some() || s.module.is_some()) && !s.kernel {
        return Err("text pokes are modelled only for the kernel program".into());
    }
    if s.poke.is_some() && s.module.is_some() {
        return Err("the module program has no poke site".into());
    }
    if s.ts_every == Some(0) {
        return Err("a timestamp every 0 atoms".into());
    }
    let mut p = if s.module.is_some() {
        kernel_and_module_program()
    } else if s.kernel {
        kernel_program()
    } else {
        user_program()
    };
    if s.svc {
        p.img.words[8] = SVC0;
    }
    let dir = fs::canonicalize(dir).map_err(|e| format!("resolving {}: {e}", dir.display()))?;
    let elf_path = dir.join(if s.kernel { "vmlinux" } else { "prog" });
    // A module's words are in no file: perf has them from records, or not at all.
    let mut elf_bytes = p.img.bytes();
    if s.module.is_some() {
        elf_bytes.truncate(4 * KERNEL_WORDS);
    }
    write(&elf_path, &elf::write_elf(p.img.base, &elf_bytes, &p.syms))?;

    let patch = p.poke.filter(|_| s.poke.is_some());
    let steps = a64::run(&mut p.img.clone(), p.entry, p.stop, 1000, patch)?;

    let ts = Timestamps {
        base: TS_BASE,
        per_insn: TS_PER_INSN,
        every: s.ts_every.unwrap_or(TS_EVERY),
    };
    // The kernel program traces CONTEXTIDR_EL1 = pid: without TRCCONFIGR.CID perf looks up
    // EL1 addresses in the guest machine (cs-etm.c:1033-1047).
    let (aux, packets) = encode_trace(
        &steps,
        p.entry,
        s.kernel.then_some(PID),
        s.timestamps.then_some(ts),
        s.flip_atom,
        s.formatted.then_some(TRACE_ID),
    );

    let described = s.module == Some(ModuleRecords::Described);
    let record_poke = s.poke.is_some_and(|r| r != PokeRecord::Dropped) || described;
    let attrs = events(s.kernel, s.timestamps, record_poke, false);
    let [etm_attr, dummy_attr] = &attrs;
    let sample_type = etm_attr.sample_type;
    let mut f = PerfFile::new(attrs.to_vec());
    let etm_tr = |t: u64| pd::id_trailer(sample_type, &pd::sample_id(PID, t, etm_attr.id));
    let dummy_tr = |t: u64| pd::id_trailer(sample_type, &pd::sample_id(PID, t, dummy_attr.id));
    if s.timestamps {
        // Trace timestamps convert 1:1 to perf time. TIME_CONV must precede AUXTRACE_INFO:
        // cs-etm copies session->time_conv while processing that (cs-etm.c:3449ff).
        f.time_conv(0, 1, 0);
    }
    let trcconfigr = bit(s.kernel, TRCCONFIGR_CID) | bit(s.timestamps, TRCCONFIGR_TS);
    f.auxtrace_info(pd::PERF_AUXTRACE_CS_ETM, &cs_etm_metadata(trcconfigr, &[0]));
    f.comm(PID, "prog", true, &dummy_tr(TS_BASE - 100));
    if s.kernel {
        f.mmap_kernel(KTEXT, 0x1000, &dummy_tr(TS_BASE - 100));
    } else {
        let path = elf_path.to_str();
        let path = path.ok_or_else(|| format!("{} is not UTF-8", dir.display()))?;
        f.mmap2(PID, TEXT, 0x1000, path, &dummy_tr(TS_BASE - 100));
    }
    if described {
        // As kernel/new_text.rs emits them when the module comes, after the recording started.
        let img = p.img.bytes();
        let module = &img[(MTEXT - KTEXT) as usize..];
        let len = u32::try_from(module.len()).expect("a small module");
        let ool = pd::PERF_RECORD_KSYMBOL_TYPE_OOL;
        f.ksymbol(MTEXT, len, ool, false, "[module]", &dummy_tr(TS_BASE - 80));
        let id = pd::sample_id(PID, TS_BASE - 79, dummy_attr.id);
        f.text_poke(MTEXT, &[], module, sample_type, &id);
    }
    f.itrace_start(PID, &etm_tr(TS_BASE - 50));
    if s.poke == Some(PokeRecord::BeforeDecode) {
        text_poke_record(&mut f, &p, &attrs, PID, TS_BASE - 50);
    }
    let aux_flags = bit(!s.formatted, pd::PERF_AUX_FLAG_CORESIGHT_FORMAT_RAW);
    f.aux(0, aux.len() as u64, aux_flags, &etm_tr(TS_BASE - 50));
    f.exit(PID, &dummy_tr(TS_BASE + 100_000));
    match s.poke {
        Some(PokeRecord::AfterDecode) => {
            text_poke_record(&mut f, &p, &attrs, PID, TS_BASE + 100_001)
        }
        Some(PokeRecord::AfterSteps(n)) => {
            text_poke_record(&mut f, &p, &attrs, PID, time_after_steps(n))
        }
        _ => {}
    }
    f.auxtrace(&aux, 0x1234_5678_9abc_def0, 0, PID, u32::MAX);
    f.finished_round();
    f.features = features(&attrs, 1);
    let perf_data = dir.join("perf.data");
    write(&perf_data, &f.finish())?;
    let truth = Truth::new(steps, p.entry);
    Ok(Built {
        perf_data,
        elf: elf_path,
        kernel: s.kernel,
        packets,
        truth,
    })
}

/// The CPUs of a CPU-wide trace.
pub const CPUS: usize = 2;

/// The process each CPU runs the kernel program for, in a CPU-wide trace: CONTEXTIDR_EL1
/// in its trace, and the pid of its ITRACE_START record.
pub const CPU_PIDS: [u32; CPUS] = [PID, PID + 1];

/// A CPU-wide trace, shaped like `perf record -e cs_etm// -C 0,1` on arm64 (which turns
/// the context ID and timestamps on itself, arch/arm/util/cs-etm.c:443-448): CPUs 0 and 1 each run the kernel program (context ID traced, a timestamp after
/// every atom), each starting at its own time, and each ETM's trace is its CPU's AUX data.
/// perf decodes it in one queue per CPU, in timestamp order across the queues
/// (cs-etm.c:2710).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuWide {
    /// 16-byte formatter frames (AUX flags 0) instead of raw streams.
    pub formatted: bool,
    /// When each CPU starts the program, in trace time after CPU 0's start.
    pub starts: [u64; CPUS],
    /// The program's site is poked when CPU 0 has run its first iteration, at
    /// [`time_after_steps`]`(5)`: every instruction that begins at or after that time on
    /// either CPU sees the new word. The record is timed by `AfterSteps` (steps of CPU 0)
    /// or `Dropped`; the others, which place it around the per-thread EXIT record, do not
    /// apply.
    pub poke: Option<PokeRecord>,
}

/// One CPU's part of a built CPU-wide trace.
#[derive(Debug)]
pub struct CpuBuilt {
    /// The CPU.
    pub cpu: u32,
    /// Its ETMv4 packets: byte offset and name.
    pub packets: Vec<(usize, String)>,
    /// Its truth.
    pub truth: Truth,
}

/// The files of a built CPU-wide trace.
#[derive(Debug)]
pub struct BuiltCpuWide {
    /// The perf.data file.
    pub perf_data: PathBuf,
    /// The kernel program's ELF, given to perf as `--vmlinux`.
    pub vmlinux: PathBuf,
    /// Each CPU's trace and truth, in CPU order.
    pub cpus: Vec<CpuBuilt>,
}

/// How many instructions of a CPU that started at `start` began before `time`: those run
/// with the word the site had before a poke at `time`.
fn steps_begun_before(start: u64, time: u64) -> usize {
    time.saturating_sub(start).div_ceil(TS_PER_INSN) as usize
}

/// Write the CPU-wide scenario's vmlinux and perf.data into `dir` (which must exist) and
/// return them with each CPU's truth.
///
/// The records are those of a per-thread trace, less EXIT (a timestamped trace is decoded
/// as the session ends, cs_etm__flush_events, cs-etm.c:898-919), with one ITRACE_START
/// (its `sample_id` on its CPU), one AUX record and one AUXTRACE per CPU: AUXTRACE `cpu` =
/// `idx` = the CPU and `tid` = -1, as `perf record -C` maps AUX areas per CPU
/// (auxtrace.c:173-197), and an AUX record whose `sample_id` CPU matches it (cs-etm.c:3152).
/// The metadata has a block per CPU with its legacy trace ID; with no AUX_OUTPUT_HW_ID record
/// perf maps those IDs to the blocks (cs-etm.c:3644-3648). No context switch record is
/// written: `perf record` asks for them only with `--switch-events`, and the traced
/// CONTEXTIDR_EL1 names each CPU's thread (cs-etm.c:1492-1510).
pub fn build_cpu_wide(s: &CpuWide, dir: &Path) -> Result<BuiltCpuWide, String> {
    if s.poke
        .is_some_and(|r| matches!(r, PokeRecord::BeforeDecode | PokeRecord::AfterDecode))
    {
        return Err(format!(
            "{:?} places the record around a per-thread EXIT record",
            s.poke
        ));
    }
    let p = kernel_program();
    let dir = fs::canonicalize(dir).map_err(|e| format!("resolving {}: {e}", dir.display()))?;
    let vmlinux = dir.join("vmlinux");
    write(
        &vmlinux,
        &elf::write_elf(p.img.base, &p.img.bytes(), &p.syms),
    )?;

    let site = p.poke.expect("the kernel program has a poke site");
    let poke_time = time_after_steps(site.after_steps);
    let mut cpus = Vec::new();
    let mut auxs = Vec::new();
    for (cpu, (&start, &pid)) in (0u32..).zip(s.starts.iter().zip(&CPU_PIDS)) {
        let start = TS_BASE + start;
        let patch = s.poke.map(|_| a64::Patch {
            after_steps: steps_begun_before(start, poke_time),
            ..site
        });
        let steps = a64::run(&mut p.img.clone(), p.entry, p.stop, 1000, patch)?;
        let ts = Timestamps {
            base: start,
            per_insn: TS_PER_INSN,
            every: 1,
        };
        let id = cpu_trace_id(cpu);
        let formatted = s.formatted.then_some(id);
        let (aux, packets) = encode_trace(&steps, p.entry, Some(pid), Some(ts), None, formatted);
        let end = start + TS_PER_INSN * steps.len() as u64 + 10;
        auxs.push((cpu, pid, start, end, aux));
        cpus.push(CpuBuilt {
            cpu,
            packets,
            truth: Truth::new(steps, p.entry),
        });
    }

    let record_poke = s.poke.is_some_and(|r| r != PokeRecord::Dropped);
    let attrs = events(true, true, record_poke, true);
    let [etm_attr, dummy_attr] = &attrs;
    let sample_type = etm_attr.sample_type;
    let mut f = PerfFile::new(attrs.to_vec());
    let tr = |a: &Attr, cpu: u32, pid: u32, t: u64| {
        pd::id_trailer(sample_type, &pd::cpu_sample_id(cpu, pid, t, a.id))
    };
    f.time_conv(0, 1, 0);
    let trcconfigr = TRCCONFIGR_CID | TRCCONFIGR_TS;
    let cpu_list: Vec<u32> = (0u32..).take(CPUS).collect();
    f.auxtrace_info(
        pd::PERF_AUXTRACE_CS_ETM,
        &cs_etm_metadata(trcconfigr, &cpu_list),
    );
    for &pid in &CPU_PIDS {
        f.comm(pid, "prog", true, &tr(dummy_attr, 0, pid, TS_BASE - 100));
    }
    f.mmap_kernel(KTEXT, 0x1000, &tr(dummy_attr, 0, PID, TS_BASE - 100));
    for &(cpu, pid, start, end, ref aux) in &auxs {
        f.itrace_start(pid, &tr(etm_attr, cpu, pid, start - 50));
        // The kernel writes AUX when it has copied the trace out, after the traced code.
        let aux_flags = bit(!s.formatted, pd::PERF_AUX_FLAG_CORESIGHT_FORMAT_RAW);
        f.aux(0, aux.len() as u64, aux_flags, &tr(etm_attr, cpu, pid, end));
    }
    if let Some(PokeRecord::AfterSteps(n)) = s.poke {
        text_poke_record(&mut f, &p, &attrs, PID, time_after_steps(n));
    }
    for (cpu, _, _, _, aux) in &auxs {
        let reference = 0x1234_5678_9abc_def0 + u64::from(*cpu);
        f.auxtrace(aux, reference, *cpu, u32::MAX, *cpu);
    }
    f.finished_round();
    f.features = features(&attrs, CPUS as u32);
    let perf_data = dir.join("perf.data");
    write(&perf_data, &f.finish())?;
    Ok(BuiltCpuWide {
        perf_data,
        vmlinux,
        cpus,
    })
}

/// `value` when `on`, else 0.
fn bit(on: bool, value: u64) -> u64 {
    if on {
        value
    } else {
        0
    }
}

/// Check that [`perf()`] runs and was built with OpenCSD (`libopencsd: [ on ]` in
/// `perf version --build-options`).
pub fn require_perf() -> Result<(), String> {
    let perf = perf();
    let hint = format!(
        "install it with tools/install-deps.sh (Debian's linux-perf 6.12, built with \
         libopencsd), or build one with tools/perf.sh and name it in ${PERF_ENV}"
    );
    let out = Command::new(&perf)
        .args(["version", "--build-options"])
        .output()
        .map_err(|e| format!("{perf} could not be run ({e}); {hint}"))?;
    if out.status.success() && opencsd_on(&String::from_utf8_lossy(&out.stdout)) {
        Ok(())
    } else {
        Err(format!(
            "{perf} was built without OpenCSD (no `libopencsd: [ on ]`); {hint}"
        ))
    }
}

/// Whether `perf version --build-options` output says `libopencsd: [ on ]` (perf pads the
/// brackets: `[ on  ]`).
fn opencsd_on(build_options: &str) -> bool {
    let value = build_options
        .lines()
        .find_map(|l| l.trim().strip_prefix("libopencsd:"));
    value.is_some_and(|v| {
        v.trim_start()
            .trim_start_matches('[')
            .trim_start()
            .starts_with("on ")
    })
}

/// Run `perf script` on `perf_data` with `args` (and `--vmlinux` when given); its stdout and
/// stderr. A non-zero exit fails.
fn perf_script(
    perf_data: &Path,
    vmlinux: Option<&Path>,
    args: &[&str],
) -> Result<(String, String), String> {
    let perf = perf();
    let mut cmd = Command::new(&perf);
    cmd.arg("script").arg("-i").arg(perf_data).args(args);
    if let Some(v) = vmlinux {
        cmd.arg(format!("--vmlinux={}", v.display()));
    }
    let out = cmd
        .env("DEBUGINFOD_URLS", "")
        .env("PAGER", "cat")
        .output()
        .map_err(|e| format!("running {perf} script {args:?}: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!(
            "{perf} script {args:?} failed ({}): {}",
            out.status,
            stderr.trim()
        ));
    }
    Ok((String::from_utf8_lossy(&out.stdout).into_owned(), stderr))
}

fn hex(token: &str, line: &str) -> Result<u64, String> {
    u64::from_str_radix(token, 16).map_err(|e| format!("perf output line {line:?}: {e}"))
}

/// The address of an `ip symbol` line.
fn parse_insn(l: &str) -> Result<u64, String> {
    match l.split_whitespace().next() {
        Some(ip) => hex(ip, l),
        None => Err(format!("perf output line {l:?} is blank")),
    }
}

/// The `(from, to)` pair of an `ip => addr` line.
fn parse_branch(l: &str) -> Result<(u64, u64), String> {
    match l.split_whitespace().collect::<Vec<_>>()[..] {
        [from, "=>", to] => Ok((hex(from, l)?, hex(to, l)?)),
        _ => Err(format!("perf output line {l:?} is not `ip => addr`")),
    }
}

/// The addresses of `perf script --itrace=i1i -F ip,sym` output: one `ip symbol` per line.
pub fn parse_insns(out: &str) -> Result<Vec<u64>, String> {
    let lines = out.lines().filter(|l| !l.trim().is_empty());
    lines.map(parse_insn).collect()
}

/// The `(from, to)` pairs of `perf script --itrace=b -F ip,addr` output: `ip => addr` lines.
pub fn parse_branches(out: &str) -> Result<Vec<(u64, u64)>, String> {
    let lines = out.lines().filter(|l| !l.trim().is_empty());
    lines.map(parse_branch).collect()
}

/// `perf script -F tid,cpu,...` output split by CPU: each line starts with its sample's
/// thread and CPU, `TID [NNN]`; the rest of each line parsed by `parse`, with the thread, in
/// the order perf printed them, per CPU (index = CPU) of `cpus` CPUs.
pub fn parse_per_cpu<T>(
    out: &str,
    cpus: usize,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<Vec<(u32, T)>>, String> {
    let mut per_cpu: Vec<Vec<(u32, T)>> = (0..cpus).map(|_| Vec::new()).collect();
    for l in out.lines().filter(|l| !l.trim().is_empty()) {
        let bad = || format!("perf output line {l:?} does not start with `tid [cpu]`");
        let (tid, rest) = l.trim_start().split_once(' ').ok_or_else(bad)?;
        let (cpu, rest) = (rest.trim_start().strip_prefix('['))
            .and_then(|r| r.split_once(']'))
            .ok_or_else(bad)?;
        let tid: u32 = tid.parse().map_err(|_| bad())?;
        let cpu: usize = cpu.trim().parse().map_err(|_| bad())?;
        let v = per_cpu
            .get_mut(cpu)
            .ok_or_else(|| format!("perf output line {l:?}: CPU {cpu} was not traced"))?;
        v.push((tid, parse(rest)?));
    }
    Ok(per_cpu)
}

/// The one stderr line perf may print: the host's libunwind cannot unwind arm64, which it
/// says when HEADER_ARCH is aarch64 and a user map is inserted. It is not a decode error.
const UNWIND_NOTICE: &str = "unwind: target platform=arm64 is not supported";

/// What perf decoded.
#[derive(Clone, Debug)]
pub struct Decoded {
    /// The executed instructions' addresses.
    pub insns: Vec<u64>,
    /// The branch samples, `(from, to)`.
    pub branches: Vec<(u64, u64)>,
    /// Lines of the packet dump naming a decoder error (BAD_SEQUENCE, RESERVED, INCOMPLETE,
    /// ERR).
    pub dump_errors: Vec<String>,
    /// stderr lines of the three runs other than the libunwind notice `UNWIND_NOTICE`.
    pub unexpected_stderr: Vec<String>,
}

/// The decoder error lines of a packet dump, and the unexpected lines of the runs' stderr.
fn problems(dump: &str, stderrs: &[String]) -> (Vec<String>, Vec<String>) {
    let errors = ["BAD_SEQUENCE", "RESERVED", "INCOMPLETE", "ERR"];
    let dump_errors = dump
        .lines()
        .filter(|l| errors.iter().any(|e| l.contains(e)))
        .map(str::to_owned)
        .collect();
    let unexpected_stderr = stderrs
        .iter()
        .flat_map(|e| e.lines().map(str::trim))
        .filter(|l| !l.is_empty() && *l != UNWIND_NOTICE)
        .map(str::to_owned)
        .collect();
    (dump_errors, unexpected_stderr)
}

/// Decode `b` with [`perf()`].
pub fn decode(b: &Built) -> Result<Decoded, String> {
    decode_file(&b.perf_data, b.kernel.then_some(b.elf.as_path()))
}

/// Decode the one-queue trace of `perf_data` with [`perf()`], kernel text from `vmlinux`.
pub fn decode_file(perf_data: &Path, vmlinux: Option<&Path>) -> Result<Decoded, String> {
    let script = |args: &[&str]| perf_script(perf_data, vmlinux, args);
    let (dump, dump_err) = script(&["-D"])?;
    let (insns, insns_err) = script(&["--itrace=i1i", "-F", "ip,sym"])?;
    let (branches, branches_err) = script(&["--itrace=b", "-F", "ip,addr"])?;
    let (dump_errors, unexpected_stderr) = problems(&dump, &[dump_err, insns_err, branches_err]);
    Ok(Decoded {
        insns: parse_insns(&insns)?,
        branches: parse_branches(&branches)?,
        dump_errors,
        unexpected_stderr,
    })
}

/// Decode `b` with [`perf()`]: each CPU's instructions and branches (index = CPU), from
/// samples whose CPU perf takes from the metadata block of the trace ID that produced them
/// (cs-etm.c:184-197, 1617) and whose thread from the context ID in that trace
/// (cs-etm.c:1492-1510). Both CPUs run the same code, so a sample's thread is what tells
/// that perf put it on the right CPU: a sample on CPU `c` of another thread than
/// [`CPU_PIDS`]`[c]` fails the decode. The decoder errors and stderr are the whole file's,
/// in every CPU's.
pub fn decode_cpu_wide(b: &BuiltCpuWide) -> Result<Vec<Decoded>, String> {
    let script = |args: &[&str]| perf_script(&b.perf_data, Some(&b.vmlinux), args);
    let (dump, dump_err) = script(&["-D"])?;
    let (insns, insns_err) = script(&["--itrace=i1i", "-F", "tid,cpu,ip,sym"])?;
    let (branches, branches_err) = script(&["--itrace=b", "-F", "tid,cpu,ip,addr"])?;
    let (dump_errors, unexpected_stderr) = problems(&dump, &[dump_err, insns_err, branches_err]);
    let insns = parse_per_cpu(&insns, b.cpus.len(), parse_insn)?;
    let branches = parse_per_cpu(&branches, b.cpus.len(), parse_branch)?;
    let mut decoded = Vec::new();
    for (cpu, (insns, branches)) in insns.into_iter().zip(branches).enumerate() {
        let pid = CPU_PIDS[cpu];
        let tids = (insns.iter().map(|i| i.0)).chain(branches.iter().map(|b| b.0));
        if let Some(tid) = tids.into_iter().find(|&t| t != pid) {
            return Err(format!(
                "perf put a sample of thread {tid} on CPU {cpu}, which ran only {pid}"
            ));
        }
        decoded.push(Decoded {
            insns: insns.into_iter().map(|i| i.1).collect(),
            branches: branches.into_iter().map(|b| b.1).collect(),
            dump_errors: dump_errors.clone(),
            unexpected_stderr: unexpected_stderr.clone(),
        });
    }
    Ok(decoded)
}

/// Where two sequences first differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference<T> {
    /// The index.
    pub index: usize,
    /// perf's element there (None: perf's sequence ended).
    pub got: Option<T>,
    /// The truth's element there (None: the truth ended).
    pub expected: Option<T>,
}

/// Where `got` first differs from `expected`, if it does.
pub fn first_difference<T: PartialEq + Clone>(got: &[T], expected: &[T]) -> Option<Difference<T>> {
    let index = (0..got.len().max(expected.len())).find(|&i| got.get(i) != expected.get(i))?;
    Some(Difference {
        index,
        got: got.get(index).cloned(),
        expected: expected.get(index).cloned(),
    })
}

/// A decode compared with the truth.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// First difference of the instruction lists.
    pub insns: Option<Difference<u64>>,
    /// First difference of the branch lists.
    pub branches: Option<Difference<(u64, u64)>>,
    /// Decoder error lines of the packet dump.
    pub dump_errors: Vec<String>,
    /// Unexpected stderr lines.
    pub unexpected_stderr: Vec<String>,
}

impl Comparison {
    /// Compare `d` with `t`.
    pub fn new(t: &Truth, d: &Decoded) -> Self {
        Comparison {
            insns: first_difference(&d.insns, &t.insns),
            branches: first_difference(&d.branches, &t.branches),
            dump_errors: d.dump_errors.clone(),
            unexpected_stderr: d.unexpected_stderr.clone(),
        }
    }

    /// Ok when perf decoded exactly the truth, with no decoder error and nothing unexpected
    /// on stderr; otherwise what differed.
    pub fn check(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        if let Some(d) = &self.insns {
            problems.push(format!(
                "instructions differ first at #{}: perf {:x?}, truth {:x?}",
                d.index, d.got, d.expected
            ));
        }
        if let Some(d) = &self.branches {
            problems.push(format!(
                "branches differ first at #{}: perf {:x?}, truth {:x?}",
                d.index, d.got, d.expected
            ));
        }
        if !self.dump_errors.is_empty() {
            problems.push(format!(
                "decoder errors in the packet dump: {:?}",
                self.dump_errors
            ));
        }
        if !self.unexpected_stderr.is_empty() {
            problems.push(format!(
                "unexpected perf stderr: {:?}",
                self.unexpected_stderr
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}

/// Build `s` in `dir`, decode it with perf and compare.
pub fn run(s: &Scenario, dir: &Path) -> Result<(Built, Decoded, Comparison), String> {
    let built = build(s, dir)?;
    let decoded = decode(&built)?;
    let cmp = Comparison::new(&built.truth, &decoded);
    Ok((built, decoded, cmp))
}

/// Build the CPU-wide `s` in `dir`, decode it with perf and compare each CPU's decode with
/// its truth (index = CPU).
pub fn run_cpu_wide(
    s: &CpuWide,
    dir: &Path,
) -> Result<(BuiltCpuWide, Vec<Decoded>, Vec<Comparison>), String> {
    let built = build_cpu_wide(s, dir)?;
    let decoded = decode_cpu_wide(&built)?;
    let cmps = (built.cpus.iter().zip(&decoded))
        .map(|(c, d)| Comparison::new(&c.truth, d))
        .collect();
    Ok((built, decoded, cmps))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The user program's execution: 22 instructions, and the atoms E (bl), E (ret), E
    /// (b.ne) three times, except the last b.ne is N, then E (cbz), E (b end), E (b halt).
    #[test]
    fn user_program_truth() {
        let p = user_program();
        let steps = a64::run(&mut p.img.clone(), p.entry, p.stop, 1000, None).expect("runs");
        let t = Truth::new(steps, p.entry);
        assert_eq!(t.insns.len(), 22);
        let atoms: String = (t.steps.iter())
            .filter(|s| s.kind != Kind::Plain)
            .map(|s| if s.taken { 'E' } else { 'N' })
            .collect();
        assert_eq!(atoms, "EEEEEEEENEEE");
        assert_eq!(
            t.branches.len(),
            11,
            "trace start + 11 taken branches - the last"
        );
        assert_eq!(t.branches[..2], [(0, TEXT), (TEXT + 4, TEXT + 0x34)]);
    }

    #[test]
    fn parsers_and_first_difference() {
        let insns = parse_insns("          401000 _start\n  401004 _start\n").expect("parses");
        assert_eq!(insns, [0x401000, 0x401004]);
        assert!(parse_insns("garbage line\n").is_err());
        let br = parse_branches("   0 =>   401000\n 401004 =>  401034\n").expect("parses");
        assert_eq!(br, [(0, 0x401000), (0x401004, 0x401034)]);
        assert!(parse_branches("401004 401034\n").is_err());
        let d = first_difference(&[1, 2, 3], &[1, 2]).expect("differs");
        assert_eq!(
            d,
            Difference {
                index: 2,
                got: Some(3),
                expected: None
            }
        );
        assert_eq!(first_difference(&[1, 2], &[1, 2]), None);
    }

    /// `perf script -F tid,cpu,ip,sym` and `-F tid,cpu,ip,addr` lines, as perf 6.12 prints
    /// them.
    #[test]
    fn per_cpu_parser() {
        let out = "   4242 [000]  ffff800080010000 kfunc\n   4243 [001]  ffff800080010004 kfunc\n\
                   4242 [000]  ffff800080010008 kfunc\n";
        let insns = parse_per_cpu(out, 2, parse_insn).expect("parses");
        assert_eq!(
            insns,
            [
                vec![(4242, 0xffff_8000_8001_0000), (4242, 0xffff_8000_8001_0008)],
                vec![(4243, 0xffff_8000_8001_0004)]
            ]
        );
        let out = "   4243 [001]                 0 => ffff800080010000\n";
        let br = parse_per_cpu(out, 2, parse_branch);
        assert_eq!(
            br,
            Ok(vec![vec![], vec![(4243, (0, 0xffff_8000_8001_0000))]])
        );
        assert!(parse_per_cpu("4242 [002]  401000 _start\n", 2, parse_insn).is_err());
        assert!(parse_per_cpu("[000]  401000 _start\n", 2, parse_insn).is_err());
        assert!(parse_per_cpu("4242  401000 _start\n", 2, parse_insn).is_err());
    }

    /// Two ETMv4 blocks after the global header, each with its CPU and legacy trace ID.
    #[test]
    fn cpu_wide_metadata() {
        let m = cs_etm_metadata(TRCCONFIGR_CID | TRCCONFIGR_TS, &[0, 1]);
        assert_eq!(m.len(), cs_etm::HEADER_WORDS + 2 * cs_etm::ETMV4_WORDS);
        assert_eq!(m[cs_etm::PMU_TYPE_CPUS], u64::from(PMU_TYPE) << 32 | 2);
        for cpu in 0..2 {
            let b = &m[cs_etm::HEADER_WORDS + cpu * cs_etm::ETMV4_WORDS..];
            assert_eq!(b[cs_etm::MAGIC], cs_etm::ETMV4_MAGIC);
            assert_eq!(b[cs_etm::CPU], cpu as u64);
            assert_eq!(b[cs_etm::TRCTRACEIDR], 0x10 + 2 * cpu as u64);
        }
        assert_eq!(cpu_trace_id(0), TRACE_ID);
    }

    /// An instruction that begins before a poke runs the old word: CPU 1 started 25 after
    /// CPU 0 has begun three instructions when CPU 0 has run five.
    #[test]
    fn instructions_begun_before_a_poke() {
        let poke = time_after_steps(5);
        assert_eq!(steps_begun_before(TS_BASE, poke), 5);
        assert_eq!(steps_begun_before(TS_BASE + 25, poke), 3);
        assert_eq!(steps_begun_before(TS_BASE + 50, poke), 0);
        assert_eq!(steps_begun_before(TS_BASE + 55, poke), 0);
    }

    /// The build-options lines of Debian's perf 6.12.95, and their negations.
    #[test]
    fn opencsd_build_option() {
        let on = "    libelf: [ on  ]  # HAVE_LIBELF_SUPPORT\n\
                  libopencsd: [ on  ]  # HAVE_CSTRACE_SUPPORT\n";
        assert!(opencsd_on(on));
        assert!(!opencsd_on(
            " libopencsd: [ OFF ]  # HAVE_CSTRACE_SUPPORT\n"
        ));
        assert!(!opencsd_on(
            " libunwind: [ on  ]  # HAVE_LIBUNWIND_SUPPORT\n"
        ));
    }
}
