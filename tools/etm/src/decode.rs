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

/// AUXTRACE_INFO's `priv[]` words: the global header and one ETMv4 block for
/// CPU 0. The block's size must equal what perf parses (cs-etm.c:3518); with eight trace
/// parameters and TS_SOURCE = 1 perf does not warn about virtual timestamps (cs-etm.c:3319).
pub(crate) fn cs_etm_metadata(trcconfigr: u64) -> Vec<u64> {
    let mut m = vec![0u64; cs_etm::HEADER_WORDS + cs_etm::ETMV4_WORDS];
    m[cs_etm::HEADER_VERSION] = cs_etm::CURRENT_VERSION;
    m[cs_etm::PMU_TYPE_CPUS] = u64::from(PMU_TYPE) << 32 | 1;
    m[cs_etm::SNAPSHOT] = 0;
    let cpu = &mut m[cs_etm::HEADER_WORDS..];
    cpu[cs_etm::MAGIC] = cs_etm::ETMV4_MAGIC;
    cpu[cs_etm::CPU] = 0;
    cpu[cs_etm::NR_TRC_PARAMS] = (cs_etm::ETMV4_WORDS - cs_etm::NR_TRC_PARAMS - 1) as u64;
    cpu[cs_etm::TRCCONFIGR] = trcconfigr;
    cpu[cs_etm::TRCTRACEIDR] = u64::from(TRACE_ID);
    cpu[cs_etm::TRCIDR0] = TRCIDR0;
    cpu[cs_etm::TRCIDR1] = TRCIDR1;
    cpu[cs_etm::TRCIDR2] = TRCIDR2;
    cpu[cs_etm::TRCIDR8] = TRCIDR8;
    cpu[cs_etm::TRCAUTHSTATUS] = TRCAUTHSTATUS;
    cpu[cs_etm::TS_SOURCE] = 1; // virtual timestamps
    m
}

/// Write the scenario's ELF and perf.data into `dir` (which must exist) and return them with
/// the truth. The perf.data is shaped like `perf record -e cs_etm// --per-thread` output
/// on arm64; see the crate documentation for its records.
pub fn build(s: &Scenario, dir: &Path) -> Result<Built, String> {
    if s.kernel && s.svc {
        return Err("the SVC scenario runs only the user program".into());
    }
    if s.poke.is_some() && !s.kernel {
        return Err("text pokes are modelled only for the kernel program".into());
    }
    if s.ts_every == Some(0) {
        return Err("a timestamp every 0 atoms".into());
    }
    let mut p = if s.kernel {
        kernel_program()
    } else {
        user_program()
    };
    if s.svc {
        p.img.words[8] = SVC0;
    }
    let dir = fs::canonicalize(dir).map_err(|e| format!("resolving {}: {e}", dir.display()))?;
    let elf_path = dir.join(if s.kernel { "vmlinux" } else { "prog" });
    write(
        &elf_path,
        &elf::write_elf(p.img.base, &p.img.bytes(), &p.syms),
    )?;

    let patch = p.poke.filter(|_| s.poke.is_some());
    let steps = a64::run(&mut p.img.clone(), p.entry, p.stop, 1000, patch)?;

    let mut e = etm::Encoder::new();
    e.async_();
    e.trace_info();
    e.trace_on();
    // The kernel program traces CONTEXTIDR_EL1 = pid: without TRCCONFIGR.CID perf looks up
    // EL1 addresses in the guest machine (cs-etm.c:1033-1047).
    e.addr_ctxt64(p.entry, u8::from(s.kernel), s.kernel.then_some(PID));
    let ts = Timestamps {
        base: TS_BASE,
        per_insn: TS_PER_INSN,
        every: s.ts_every.unwrap_or(TS_EVERY),
    };
    if s.timestamps {
        e.timestamp(TS_BASE);
    }
    e.encode_steps(&steps, s.flip_atom, s.timestamps.then_some(ts));
    if s.timestamps {
        e.timestamp(TS_BASE + TS_PER_INSN * steps.len() as u64 + 5);
    }
    let aux = if s.formatted {
        etm::format_frames(&e.out, TRACE_ID)
    } else {
        e.out.clone()
    };

    let sample_type = pd::PERF_SAMPLE_IP | pd::PERF_SAMPLE_TID | pd::PERF_SAMPLE_CPU;
    let sample_type = sample_type | pd::PERF_SAMPLE_PERIOD | pd::PERF_SAMPLE_IDENTIFIER;
    let sample_type = sample_type | bit(s.timestamps, pd::PERF_SAMPLE_TIME);
    let flags = pd::ATTR_DISABLED | pd::ATTR_ENABLE_ON_EXEC | pd::ATTR_EXCLUDE_HV;
    let flags = flags | pd::ATTR_SAMPLE_ID_ALL | bit(!s.kernel, pd::ATTR_EXCLUDE_KERNEL);
    // perf record on arm64 samples CPU (arch/arm/util/cs-etm.c:437) and adds a dummy
    // tracking event for the side-band records (:461-466).
    let etm_attr = Attr {
        type_: PMU_TYPE,
        config: bit(s.kernel, ETM_OPT_CTXTID) | bit(s.timestamps, ETM_OPT_TS),
        sample_period: 1,
        sample_type,
        flags,
        id: 100,
        name: (if s.kernel {
            "cs_etm/contextid/"
        } else {
            "cs_etm//u"
        })
        .into(),
    };
    let tracking = pd::ATTR_MMAP | pd::ATTR_COMM | pd::ATTR_TASK | pd::ATTR_MMAP2;
    let record_poke = s.poke.is_some_and(|r| r != PokeRecord::Dropped);
    let tracking = tracking | pd::ATTR_COMM_EXEC | bit(record_poke, pd::ATTR_TEXT_POKE);
    let dummy_attr = Attr {
        type_: 1,  // PERF_TYPE_SOFTWARE, perf_event.h:31
        config: 9, // PERF_COUNT_SW_DUMMY, perf_event.h:128
        flags: flags | tracking,
        id: 101,
        name: "dummy:u".into(),
        ..etm_attr.clone()
    };
    let attrs = vec![etm_attr.clone(), dummy_attr.clone()];
    let mut f = PerfFile::new(attrs.clone());
    let etm_tr = |t: u64| pd::id_trailer(sample_type, &pd::sample_id(PID, t, etm_attr.id));
    let dummy_id = |t: u64| pd::sample_id(PID, t, dummy_attr.id);
    let dummy_tr = |t: u64| pd::id_trailer(sample_type, &dummy_id(t));
    if s.timestamps {
        // Trace timestamps convert 1:1 to perf time. TIME_CONV must precede AUXTRACE_INFO:
        // cs-etm copies session->time_conv while processing that (cs-etm.c:3449ff).
        f.time_conv(0, 1, 0);
    }
    let trcconfigr = bit(s.kernel, TRCCONFIGR_CID) | bit(s.timestamps, TRCCONFIGR_TS);
    f.auxtrace_info(pd::PERF_AUXTRACE_CS_ETM, &cs_etm_metadata(trcconfigr));
    f.comm(PID, "prog", true, &dummy_tr(TS_BASE - 100));
    if s.kernel {
        f.mmap_kernel(KTEXT, 0x1000, &dummy_tr(TS_BASE - 100));
    } else {
        let path = elf_path.to_str();
        let path = path.ok_or_else(|| format!("{} is not UTF-8", dir.display()))?;
        f.mmap2(PID, TEXT, 0x1000, path, &dummy_tr(TS_BASE - 100));
    }
    f.itrace_start(PID, &etm_tr(TS_BASE - 50));
    let poke = |f: &mut PerfFile, t: u64| {
        let site = p.poke.expect("the kernel program has a poke site");
        let old = p.img.words[((site.addr - p.img.base) / 4) as usize].to_le_bytes();
        let new = site.word.to_le_bytes();
        f.text_poke(site.addr, &old, &new, sample_type, &dummy_id(t));
    };
    if s.poke == Some(PokeRecord::BeforeDecode) {
        poke(&mut f, TS_BASE - 50);
    }
    let aux_flags = bit(!s.formatted, pd::PERF_AUX_FLAG_CORESIGHT_FORMAT_RAW);
    f.aux(0, aux.len() as u64, aux_flags, &etm_tr(TS_BASE - 50));
    f.exit(PID, &dummy_tr(TS_BASE + 100_000));
    match s.poke {
        Some(PokeRecord::AfterDecode) => poke(&mut f, TS_BASE + 100_001),
        Some(PokeRecord::AfterSteps(n)) => poke(&mut f, time_after_steps(n)),
        _ => {}
    }
    f.auxtrace(&aux, 0x1234_5678_9abc_def0, PID, u32::MAX);
    f.finished_round();
    let mut nrcpus = Vec::new();
    p32(&mut nrcpus, 1); // online
    p32(&mut nrcpus, 1); // available
    let pmus = pd::feat_pmu_mappings(&[(4, "software"), (PMU_TYPE, "cs_etm")]);
    f.features = vec![
        (pd::HEADER_HOSTNAME, pd::feat_string("synthetic")),
        (pd::HEADER_OSRELEASE, pd::feat_string("6.12.0-synthetic")),
        (pd::HEADER_VERSION, pd::feat_string("6.12")),
        (pd::HEADER_ARCH, pd::feat_string("aarch64")),
        (pd::HEADER_NRCPUS, nrcpus),
        (pd::HEADER_EVENT_DESC, pd::feat_event_desc(&attrs)),
        (pd::HEADER_PMU_MAPPINGS, pmus),
    ];
    let perf_data = dir.join("perf.data");
    write(&perf_data, &f.finish())?;
    let truth = Truth::new(steps, p.entry);
    Ok(Built {
        perf_data,
        elf: elf_path,
        kernel: s.kernel,
        packets: e.log,
        truth,
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

/// Run `perf script` on `b` with `args`; its stdout and stderr. A non-zero exit fails.
fn perf_script(b: &Built, args: &[&str]) -> Result<(String, String), String> {
    let perf = perf();
    let mut cmd = Command::new(&perf);
    cmd.arg("script").arg("-i").arg(&b.perf_data).args(args);
    if b.kernel {
        cmd.arg(format!("--vmlinux={}", b.elf.display()));
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

/// The addresses of `perf script --itrace=i1i -F ip,sym` output: one `ip symbol` per line.
pub fn parse_insns(out: &str) -> Result<Vec<u64>, String> {
    let lines = out.lines().filter(|l| !l.trim().is_empty());
    lines
        .map(|l| {
            let ip = l
                .split_whitespace()
                .next()
                .expect("a non-blank line has a token");
            hex(ip, l)
        })
        .collect()
}

/// The `(from, to)` pairs of `perf script --itrace=b -F ip,addr` output: `ip => addr` lines.
pub fn parse_branches(out: &str) -> Result<Vec<(u64, u64)>, String> {
    let lines = out.lines().filter(|l| !l.trim().is_empty());
    lines
        .map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [from, "=>", to] => Ok((hex(from, l)?, hex(to, l)?)),
            _ => Err(format!("perf output line {l:?} is not `ip => addr`")),
        })
        .collect()
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

/// Decode `b` with [`perf()`].
pub fn decode(b: &Built) -> Result<Decoded, String> {
    let (dump, dump_err) = perf_script(b, &["-D"])?;
    let (insns, insns_err) = perf_script(b, &["--itrace=i1i", "-F", "ip,sym"])?;
    let (branches, branches_err) = perf_script(b, &["--itrace=b", "-F", "ip,addr"])?;
    let errors = ["BAD_SEQUENCE", "RESERVED", "INCOMPLETE", "ERR"];
    Ok(Decoded {
        insns: parse_insns(&insns)?,
        branches: parse_branches(&branches)?,
        dump_errors: dump
            .lines()
            .filter(|l| errors.iter().any(|e| l.contains(e)))
            .map(str::to_owned)
            .collect(),
        unexpected_stderr: [dump_err, insns_err, branches_err]
            .iter()
            .flat_map(|e| e.lines().map(str::trim))
            .filter(|l| !l.is_empty() && *l != UNWIND_NOTICE)
            .map(str::to_owned)
            .collect(),
    })
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
