//! The kernel's own static keys and ftrace, patched through textpoke (patch 0008,
//! kernel/patcher.rs).
//!
//! Each case is one transition of a real kernel API, made from here through its userspace
//! interface: the `kernel.sched_schedstats` key, tracepoints (sched; lock and RCU, whose keys
//! sit on the trap path's own doorstep), and the function and function_graph tracers. Around
//! it the agent reads the kernel text from `/proc/kcore` and records every CPU's
//! `PERF_RECORD_TEXT_POKE`s. The evidence is the text itself:
//! - the records, replayed in time order onto the text before, give the text after, byte for
//!   byte (nothing changed without a record, every record's old bytes were the text);
//! - one record per change of an instruction: none without a change, none twice (a record
//!   repeated or missing breaks the replay's chain of old and new bytes);
//! - textpoke made the changes: its `kernel.*` counters moved by as many records as it says it
//!   emitted, and on arm64, whose stock path records nothing, every record is one of them;
//! - the text follows the key: turning it off again gives back the text from before it was
//!   turned on, byte for byte, and the key reads back as set.
//!
//! After textpoke is unloaded ([`stock_cases`]), the same transition goes through the stock
//! path: the text still changes, and on arm64 no record at all is emitted.

use crate::scenarios::scenario;
use std::collections::BTreeMap;
use textpoke_agent::oracle::checks;
use textpoke_agent::platform::guest::{self, is_x86, log};
use textpoke_agent::platform::kallsyms::{self, In};
use textpoke_agent::platform::kcore::Kcore;
use textpoke_agent::platform::perf::{Recorder, RecorderConfig, TextPokeRec};
use textpoke_agent::platform::sys;
use textpoke_agent::report::ktap::{Case, CaseResult};

pub(crate) const TRACING: &str = "/sys/kernel/debug/tracing";
const SCHEDSTATS: &str = "/proc/sys/kernel/sched_schedstats";

/// The kernel image's text, `[_stext, _etext)`, from `/proc/kallsyms`.
pub(crate) fn kernel_text() -> Result<(u64, usize), String> {
    let syms = kallsyms::read()?;
    let find = |name: &str| {
        kallsyms::lookup(&syms, name, In::Kernel)
            .ok_or_else(|| format!("no {name} in /proc/kallsyms"))
    };
    let (start, end) = (find("_stext")?, find("_etext")?);
    let len = end
        .checked_sub(start)
        .and_then(|l| usize::try_from(l).ok())
        .ok_or("_etext below _stext")?;
    Ok((start, len))
}

/// The text of module `name`, from its functions in `/proc/kallsyms`: from the first to 64
/// bytes past the start of the last (the sample's functions are short, and its text region is
/// page-aligned padding after them).
/// The span of module `name`'s functions: its lowest address and its length.
pub fn module_text(name: &str) -> Result<(u64, usize), String> {
    let (lo, hi) = kallsyms::function_span(name)?;
    Ok((lo, (hi - lo + 64) as usize))
}

const KEYS: &str = "/sys/kernel/debug/textpoke_keys";

/// The static-key sample (samples/textpoke_keys.c): every key flipped and flipped back with
/// `static_branch_enable`/`_disable` while executors run every site on every CPU, checked as
/// the kernel's own keys are, over the module's text; then every site must have taken the
/// branch `static_key_enabled()` gave right after each change.
fn module_keys(kcore: &Kcore, c: &mut Vec<Case>) {
    let setup = guest::load("textpoke_keys", "")
        .and_then(|()| module_text("textpoke_keys"))
        .and_then(|text| write(&format!("{KEYS}/control"), "start").map(|()| text));
    let text = match setup {
        Ok(t) => t,
        Err(e) => {
            c.push(Case::fail("module_keys", e));
            return;
        }
    };
    pair(
        c,
        ("module_keys_flipped", "module_keys_flipped_back"),
        kcore,
        text,
        || write(&format!("{KEYS}/control"), "flip"),
        || write(&format!("{KEYS}/control"), "flip"),
    );
    let state = write(&format!("{KEYS}/control"), "stop")
        .and_then(|()| sys::read_text(format!("{KEYS}/state")).map_err(|e| e.to_string()));
    let case = match state {
        Ok(state) => {
            let kv: BTreeMap<&str, u64> = state
                .split_whitespace()
                .collect::<Vec<_>>()
                .chunks(2)
                .filter_map(|p| Some((*p.first()?, p.get(1)?.parse().ok()?)))
                .collect();
            let get = |k: &str| kv.get(k).copied().unwrap_or(u64::MAX);
            Case::check(
                "module_keys_read_right",
                get("mismatches") == 0 && get("flips") == 2 && get("executions") > 0,
                format!("state: {}", state.trim()),
            )
            .with_log(state.trim().to_owned())
        }
        Err(e) => Case::fail("module_keys_read_right", e),
    };
    c.push(case);
    if let Err(e) = sys::unload_module("textpoke_keys") {
        c.push(Case::fail("module_keys_unloaded", e.to_string()));
    }
}

/// The selftest's module with the sites (lib/test_static_keys.c), and its base module, which
/// defines half of the keys.
const SELFTEST: &str = "test_static_keys";
const SELFTEST_BASE: &str = "test_static_key_base";

/// Records every site of the selftest's test functions must have at least: its init verifies
/// every key, inverts every key, verifies, inverts them back and verifies again, so each site
/// changes at least twice while the module loads.
const SELFTEST_MIN_RECORDS: usize = 2;

/// How a kernel check under the record defect ended (see `controls::kernel_record_control`).
pub enum KernelCheck {
    /// It passed, as said.
    Passed(String),
    /// It failed in the way a record defect shows: the records disagree with the text.
    RecordsDisagree(String),
    /// It failed for another reason, or could not run.
    Failed(String),
}

/// Why the selftest's records do not agree with the text of its sites.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelftestRecords {
    /// A record's old bytes are not the previous record's new bytes at that site.
    ChainBroken {
        /// The site.
        addr: u64,
        /// The record's old bytes.
        old: Vec<u8>,
        /// The previous record's new bytes.
        previous: Vec<u8>,
    },
    /// The last record's new bytes are not what the site holds after the load.
    FinalText {
        /// The site.
        addr: u64,
        /// The last record's new bytes.
        records: Vec<u8>,
        /// The text there, from `/proc/kcore`.
        text: Vec<u8>,
    },
    /// A site the selftest changes at least [`SELFTEST_MIN_RECORDS`] times has fewer records.
    TooFewRecords {
        /// The site.
        addr: u64,
        /// Its records.
        records: usize,
    },
}

impl std::fmt::Display for SelftestRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ChainBroken {
                addr,
                old,
                previous,
            } => write!(
                f,
                "at {addr:#x} a record's old bytes {old:02x?} are not the previous record's new bytes {previous:02x?}"
            ),
            Self::FinalText {
                addr,
                records,
                text,
            } => write!(
                f,
                "at {addr:#x} the records end at {records:02x?}, the text is {text:02x?}"
            ),
            Self::TooFewRecords { addr, records } => write!(
                f,
                "at {addr:#x} {records} records, for a site the selftest changes at least {SELFTEST_MIN_RECORDS} times"
            ),
        }
    }
}

/// Checks the records at each of `sites` against the text: in time order each record's old
/// bytes are the previous record's new bytes, the last record's new bytes are what the site
/// holds now (`now`, read after the load), and there are at least `min` of them. Without the
/// text from before the load (the module's text exists only once it is loaded, by which time
/// its init has flipped the keys), the first record's old bytes are taken on trust; the count
/// makes up for it. Returns how many records it checked.
pub fn selftest_records(
    sites: &[u64],
    pokes: &[TextPokeRec],
    now: &BTreeMap<u64, Vec<u8>>,
    min: usize,
) -> Result<usize, SelftestRecords> {
    let mut checked = 0;
    for &addr in sites {
        let mut mine: Vec<&TextPokeRec> = pokes.iter().filter(|p| p.addr == addr).collect();
        mine.sort_by_key(|p| (p.time, p.id));
        for pair in mine.windows(2) {
            if let [a, b] = pair {
                if b.old != a.new {
                    return Err(SelftestRecords::ChainBroken {
                        addr,
                        old: b.old.clone(),
                        previous: a.new.clone(),
                    });
                }
            }
        }
        if let Some(last) = mine.last() {
            let text = now.get(&addr).cloned().unwrap_or_default();
            if !text.starts_with(&last.new) || last.new.is_empty() {
                return Err(SelftestRecords::FinalText {
                    addr,
                    records: last.new.clone(),
                    text,
                });
            }
        }
        if mine.len() < min {
            return Err(SelftestRecords::TooFewRecords {
                addr,
                records: mine.len(),
            });
        }
        checked += mine.len();
    }
    Ok(checked)
}

/// The size of section `name` in `elf`, a little-endian ELF64 object (a `.ko`).
pub fn elf_section_size(elf: &[u8], name: &str) -> Option<u64> {
    let u16_at = |o: usize| Some(u16::from_le_bytes(elf.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(elf.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(elf.get(o..o + 8)?.try_into().ok()?));
    // ELF magic, 64-bit, little-endian.
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let shoff = usize::try_from(u64_at(0x28)?).ok()?;
    let (entsize, count, strndx) = (
        usize::from(u16_at(0x3a)?),
        usize::from(u16_at(0x3c)?),
        usize::from(u16_at(0x3e)?),
    );
    let header = |i: usize| shoff.checked_add(i.checked_mul(entsize)?);
    let strings = usize::try_from(u64_at(header(strndx)?.checked_add(0x18)?)?).ok()?;
    (0..count).find_map(|i| {
        let h = header(i)?;
        let at = strings.checked_add(usize::try_from(u32_at(h)?).ok()?)?;
        let rest = elf.get(at..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        (rest.get(..end)? == name.as_bytes())
            .then(|| u64_at(h.checked_add(0x20)?))
            .flatten()
    })
}

/// The code addresses of the jump entries in `table`, a copy of a `__jump_table` loaded at
/// `at`: relative entries (`s32 code, s32 target, long key`, 16 bytes) on both arches.
pub fn jump_entry_codes(at: u64, table: &[u8]) -> Vec<u64> {
    table
        .chunks_exact(16)
        .enumerate()
        .filter_map(|(i, e)| {
            let code = i32::from_le_bytes(e.get(..4)?.try_into().ok()?);
            Some((at + 16 * i as u64).wrapping_add_signed(i64::from(code)))
        })
        .collect()
}

/// The jump label sites in the selftest's test functions (`test_key_func()`'s, named
/// `KEY_static_...`), which the selftest flips, from the loaded module's own jump table:
/// its address from `/sys/module`, its size from the `.ko`, its entries from `/proc/kcore`.
fn selftest_sites(kcore: &Kcore) -> Result<Vec<u64>, String> {
    let path = format!("/sys/module/{SELFTEST}/sections/__jump_table");
    let at = sys::read_text(&path)
        .map_err(|e| format!("{path}: {e}"))
        .and_then(|t| {
            u64::from_str_radix(t.trim().trim_start_matches("0x"), 16).map_err(|e| e.to_string())
        })?;
    let ko = format!("{}/{SELFTEST}.ko", guest::MODULES);
    let size = sys::read_file(&ko)
        .map_err(|e| format!("{ko}: {e}"))
        .and_then(|elf| {
            elf_section_size(&elf, "__jump_table").ok_or(format!("{ko}: no __jump_table"))
        })?;
    let table = kcore
        .read(at, size as usize)
        .map_err(|e| format!("kcore at the jump table: {e}"))?;
    let funcs = kallsyms::module_functions(SELFTEST)?;
    let tested = |code: u64| {
        let i = funcs.partition_point(|(a, _)| *a <= code);
        let Some((start, name)) = i.checked_sub(1).and_then(|i| funcs.get(i)) else {
            return false;
        };
        let end = funcs.get(i).map_or(start + 256, |(a, _)| *a);
        code < end && name.contains("_key_static_")
    };
    let mut sites: Vec<u64> = jump_entry_codes(at, &table)
        .into_iter()
        .filter(|&c| tested(c))
        .collect();
    sites.sort_unstable();
    sites.dedup();
    if sites.is_empty() {
        return Err(format!(
            "no jump label site in {SELFTEST}'s test functions ({} entries)",
            table.len() / 16
        ));
    }
    Ok(sites)
}

/// The kernel's own static-key selftest (lib/test_static_keys.c, `CONFIG_TEST_STATIC_KEYS=m`),
/// loaded while textpoke is the kernel's patcher. Its init flips keys of its own and of
/// test_static_key_base with `static_key_slow_inc`/`_dec` and `static_branch_enable`/`_disable`,
/// and checks every branch against `static_key_enabled()`: a mismatch fails the load with
/// `EINVAL`. Every CPU's `PERF_RECORD_TEXT_POKE`s are recorded meanwhile, and checked against
/// the module's text while it is loaded ([`selftest_records`]) at every jump label site of its
/// test functions (from its jump table). textpoke's counters are logged only. Both modules are
/// unloaded again.
pub fn kernel_selftest_run(kcore: &Kcore) -> KernelCheck {
    let mut rec = match Recorder::open(&RecorderConfig { data_pages: 256 }) {
        Ok(r) => r,
        Err(e) => return KernelCheck::Failed(format!("perf recorder: {e}")),
    };
    let before = counters();
    let loaded = guest::load(SELFTEST_BASE, "").and_then(|()| guest::load(SELFTEST, ""));
    // While it is loaded: its sites and their text.
    let sites = loaded.clone().and_then(|()| {
        let sites = selftest_sites(kcore)?;
        let now = sites
            .iter()
            .map(|&a| {
                kcore
                    .read(a, 8)
                    .map(|t| (a, t))
                    .map_err(|e| format!("kcore at {a:#x}: {e}"))
            })
            .collect::<Result<BTreeMap<u64, Vec<u8>>, String>>()?;
        Ok((sites, now))
    });
    let drain = rec.drain();
    let moved = counters_moved(&before, &counters());
    let delta = |k: &str| moved.get(k).copied().unwrap_or(0);
    let detail = format!(
        "textpoke's counters: {} batches, {} sites, {} records, {} syncs, {} failed, {} handed back",
        delta("kernel.batches"),
        delta("kernel.sites"),
        delta("kernel.records"),
        delta("kernel.syncs"),
        delta("kernel.failed"),
        delta("kernel.declined"),
    );
    log(&format!(
        "kernel patching: kernel_static_keys_selftest: {detail}"
    ));
    let unloaded: Result<(), String> = [SELFTEST, SELFTEST_BASE]
        .iter()
        .try_for_each(|m| sys::unload_module(m).map_err(|e| format!("unloading {m}: {e}")));
    let (sites, now) = match (sites, unloaded) {
        (Ok(s), Ok(())) => s,
        (Err(e), _) | (_, Err(e)) => return KernelCheck::Failed(format!("{e}; {detail}")),
    };
    if !drain.is_clean() {
        return KernelCheck::Failed(format!(
            "perf may have lost records ({} lost, errors {:?}, {} full buffers)",
            drain.lost_records, drain.errors, drain.full_buffers
        ));
    }
    match selftest_records(&sites, &drain.pokes, &now, SELFTEST_MIN_RECORDS) {
        Ok(n) => KernelCheck::Passed(format!(
            "{n} records at the {} jump label sites of {SELFTEST}'s test functions chain, end at their text and number at least {SELFTEST_MIN_RECORDS} each; {detail}",
            sites.len()
        )),
        Err(r) => KernelCheck::RecordsDisagree(format!("{r} ({} sites; {detail})", sites.len())),
    }
}

/// [`kernel_selftest_run`] as a KTAP case.
pub fn kernel_selftest_case(kcore: &Kcore) -> Case {
    const NAME: &str = "kernel_static_keys_selftest";
    match kernel_selftest_run(kcore) {
        KernelCheck::Passed(line) => Case::pass(NAME).with_log(line),
        KernelCheck::RecordsDisagree(e) | KernelCheck::Failed(e) => Case::fail(NAME, e),
    }
}

/// arm64 `MOV X9, X30`, the first instruction of an ftrace-patchable function.
const MOV_X9_X30: u32 = 0xaa1e_03e9;

/// Whether the running kernel's ftrace calls through per-function ops literals
/// (`DYNAMIC_FTRACE_WITH_CALL_OPS`): only such a kernel has `ftrace_list_ops` (kernel/trace/
/// ftrace.c), which `/proc/kallsyms` lists (`KALLSYMS_ALL`, tools/kconfig/common.config).
pub fn ftrace_call_ops() -> bool {
    static CALL_OPS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CALL_OPS.get_or_init(|| {
        kallsyms::find("ftrace_list_ops", In::Kernel)
            .unwrap_or_else(|e| panic!("{e}"))
            .is_some()
    })
}

/// Makes `before` agree with `after` on arm64 ftrace's per-function ops pointers (data, not
/// instructions: an 8-byte literal right before a patchable function's `MOV X9, X30`, which
/// the function tracer writes with `aarch64_insn_write_literal_u64()` and nobody records), on a
/// kernel that has them ([`ftrace_call_ops`]). Without them, the 8 bytes before a function are
/// the end of the one before it, which may be a call site (a function of three instructions:
/// `MOV X9, X30`, the call site, `RET`). Returns how many literals it copied.
pub fn copy_ftrace_literals(before: &mut [u8], after: &[u8]) -> usize {
    if ftrace_call_ops() {
        copy_literals(before, after)
    } else {
        0
    }
}

/// [`copy_ftrace_literals`] on a kernel with ops literals.
fn copy_literals(before: &mut [u8], after: &[u8]) -> usize {
    let word = |b: &[u8], off: usize| -> Option<u32> {
        Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
    };
    let mut copied = 0;
    let mut off = 0;
    while off + 12 <= after.len().min(before.len()) {
        if before.get(off..off + 8) != after.get(off..off + 8)
            && word(after, off + 8) == Some(MOV_X9_X30)
        {
            if let (Some(b), Some(a)) = (before.get_mut(off..off + 8), after.get(off..off + 8)) {
                b.copy_from_slice(a);
                copied += 1;
            }
        }
        off += 8;
    }
    copied
}

/// Checks that every record changes something. (A record repeated, or one missing, breaks
/// the replay's chain of old and new bytes; an instruction may change twice in one
/// transition, as ftrace's own call site does, and then has two records.)
pub fn one_record_per_change(pokes: &[TextPokeRec]) -> Result<(), String> {
    match pokes.iter().find(|p| p.old == p.new) {
        Some(p) => Err(format!("a record at {:#x} changes nothing", p.addr)),
        None => Ok(()),
    }
}

/// The first address where `now` differs from `then` (both snapshots of `[base, ..)`).
pub fn first_difference(base: u64, then: &[u8], now: &[u8]) -> Option<u64> {
    if then.len() != now.len() {
        return Some(base);
    }
    then.iter()
        .zip(now)
        .position(|(a, b)| a != b)
        .map(|i| base + i as u64)
}

/// textpoke's `kernel.*` counters now (empty if textpoke is not loaded).
pub(crate) fn counters() -> BTreeMap<String, u64> {
    scenario::engine_stats()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k.starts_with("kernel."))
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect()
}

/// How textpoke's `kernel.*` counters moved from `before` to `after` (see [`counters`]).
pub(crate) fn counters_moved(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.saturating_sub(before.get(k).copied().unwrap_or(0)),
            )
        })
        .collect()
}

/// What one transition did.
struct Transition {
    /// Records in the kernel image's text, in time order.
    pokes: Vec<TextPokeRec>,
    /// Records anywhere (module text and trampolines included).
    all: usize,
    /// How textpoke's `kernel.*` counters moved.
    delta: BTreeMap<String, u64>,
    /// arm64 ftrace ops literals changed (data, not recorded).
    literals: usize,
    /// Replayed records that reproduced the text after.
    replayed: usize,
    /// The text before (ftrace ops literals as after) and after.
    before: Vec<u8>,
    after: Vec<u8>,
}

impl Transition {
    fn delta(&self, key: &str) -> u64 {
        self.delta.get(key).copied().unwrap_or(0)
    }
}

/// Keeps every CPU busy in the kernel (the scheduler, locks, RCU, file reads: where static
/// keys, tracepoints and traced functions are) until dropped, so that CPUs meet the guards of
/// the changes being made.
struct Load {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start() -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let cpus = sys::online_cpus().map(|c| c.len()).unwrap_or(1);
        let threads = (0..cpus)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let _ = std::fs::read("/proc/self/stat");
                        std::thread::yield_now();
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Runs `action` with every CPU busy and its text pokes recorded, and the kernel text read
/// before and after, and checks the records against the text.
fn transition(
    kcore: &Kcore,
    text: (u64, usize),
    busy: bool,
    action: impl FnOnce() -> Result<(), String>,
) -> Result<Transition, String> {
    transition_checked(kcore, text, busy, action).map_err(|e| match e {
        TransitionError::Replay(f) => f.to_string(),
        TransitionError::Other(e) => e,
    })
}

/// Why a transition's check failed: its records do not replay onto the text, or something
/// else.
enum TransitionError {
    Replay(checks::ReplayFailure),
    Other(String),
}

impl From<String> for TransitionError {
    fn from(e: String) -> Self {
        Self::Other(e)
    }
}

/// [`transition`], with a replay that failed told apart.
fn transition_checked(
    kcore: &Kcore,
    (base, len): (u64, usize),
    busy: bool,
    action: impl FnOnce() -> Result<(), String>,
) -> Result<Transition, TransitionError> {
    let c0 = counters();
    // Room for the function tracer's pokes of every function (see `RecorderConfig`).
    let mut rec = Recorder::open(&RecorderConfig { data_pages: 1024 })
        .map_err(|e| format!("perf recorder: {e}"))?;
    let mut before = kcore
        .read(base, len)
        .map_err(|e| format!("kcore before: {e}"))?;
    {
        let _load = busy.then(Load::start);
        action()?;
    }
    let drain = rec.drain();
    let after = kcore
        .read(base, len)
        .map_err(|e| format!("kcore after: {e}"))?;
    let c1 = counters();
    if !drain.is_clean() {
        return Err(TransitionError::Other(format!(
            "perf may have lost records ({} lost, errors {:?}, {} full buffers)",
            drain.lost_records, drain.errors, drain.full_buffers
        )));
    }
    let all = drain.pokes.len();
    let end = base.saturating_add(len as u64);
    let pokes: Vec<TextPokeRec> = drain
        .pokes
        .into_iter()
        .filter(|p| p.addr >= base && p.addr < end)
        .collect();
    let literals = if is_x86() {
        0
    } else {
        copy_ftrace_literals(&mut before, &after)
    };
    let replayed =
        checks::replay_checked(base, &before, &after, &pokes).map_err(TransitionError::Replay)?;
    one_record_per_change(&pokes)?;
    let delta = counters_moved(&c0, &c1);
    Ok(Transition {
        pokes,
        all,
        delta,
        literals,
        replayed,
        before,
        after,
    })
}

/// One checked transition through textpoke, as a KTAP case, and what it did. If `undoes` is
/// the transition this one reverses, the text must be back to what it was before that one.
fn through_textpoke(
    name: &str,
    kcore: &Kcore,
    text: (u64, usize),
    undoes: Option<&Transition>,
    busy: bool,
    action: impl FnOnce() -> Result<(), String>,
) -> (Case, Option<Transition>) {
    through_textpoke_of(
        name,
        kcore,
        text,
        undoes,
        busy,
        Changes::Instructions,
        action,
    )
}

/// What a transition must change.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Changes {
    /// Instructions, each with its record.
    Instructions,
    /// Instructions, or on an arm64 kernel with `DYNAMIC_FTRACE_WITH_CALL_OPS` only the call
    /// sites' ops literals (data, unrecorded): a second function tracer with the same filter
    /// keeps every call site on `ftrace_caller` there and changes only the ops it calls.
    InstructionsOrOps,
}

/// [`through_textpoke`], with what the transition must change.
fn through_textpoke_of(
    name: &str,
    kcore: &Kcore,
    text: (u64, usize),
    undoes: Option<&Transition>,
    busy: bool,
    changes: Changes,
    action: impl FnOnce() -> Result<(), String>,
) -> (Case, Option<Transition>) {
    log(&format!("kernel patching: {name}"));
    let t = match transition(kcore, text, busy, action) {
        Ok(t) => t,
        Err(e) => {
            log(&format!("kernel patching: {name} failed: {e}"));
            return (Case::fail(name, e), None);
        }
    };
    let x86 = is_x86();
    let (sites, records) = (t.delta("kernel.sites"), t.delta("kernel.records"));
    let summary = format!(
        "{} instructions changed, {} records in the text checked ({} anywhere; {} replayed exactly); \
         textpoke: {sites} sites in {} batches, {} syncs, {records} records, {} traps, {} handed back{}",
        t.pokes.len(),
        t.pokes.len(),
        t.all,
        t.replayed,
        t.delta("kernel.batches"),
        t.delta("kernel.syncs"),
        t.delta("kernel.traps"),
        t.delta("kernel.declined"),
        if t.literals > 0 {
            format!("; {} ftrace ops literals (data) left out", t.literals)
        } else {
            String::new()
        }
    );
    log(&format!("kernel patching: {name}: {summary}"));
    let ops_only = changes == Changes::InstructionsOrOps && t.pokes.is_empty() && t.literals > 0;
    let problem = if ops_only {
        None
    } else if t.pokes.is_empty() {
        Some("the text did not change".to_string())
    } else if sites == 0 {
        // The engine's word, and the only one: on x86 the stock path emits the same records,
        // so nothing outside textpoke can tell who made the change.
        Some("textpoke made none of the changes".to_string())
    } else if !x86 && records != t.all as u64 {
        // arm64's stock path records nothing: every record is textpoke's, and perf got each.
        Some(format!(
            "textpoke emitted {records} records, perf saw {}",
            t.all
        ))
    } else if t.delta("kernel.failed") > 0 {
        Some("a kernel batch failed".to_string())
    } else {
        undoes
            .and_then(|on| {
                // The ops literals are data (see `copy_ftrace_literals`), which ftrace need not
                // put back as they were.
                let mut then = on.before.clone();
                if !x86 {
                    copy_ftrace_literals(&mut then, &t.after);
                }
                first_difference(text.0, &then, &t.after)
            })
            .map(|a| format!("the text did not return to what it was: first difference at {a:#x}"))
    };
    let case = match problem {
        Some(p) => Case::fail(name, format!("{p} ({summary})")),
        None => Case::pass(name).with_log(summary),
    };
    (case, Some(t))
}

/// A transition and the one that undoes it, both checked through textpoke, with every CPU
/// kept busy in the kernel meanwhile.
fn pair(
    cases: &mut Vec<Case>,
    (on_name, off_name): (&str, &str),
    kcore: &Kcore,
    text: (u64, usize),
    on: impl FnOnce() -> Result<(), String>,
    off: impl FnOnce() -> Result<(), String>,
) {
    pair_with(cases, (on_name, off_name), kcore, text, true, on, off);
}

/// [`pair`], with the CPUs busy only if `busy`.
fn pair_with(
    cases: &mut Vec<Case>,
    (on_name, off_name): (&str, &str),
    kcore: &Kcore,
    text: (u64, usize),
    busy: bool,
    on: impl FnOnce() -> Result<(), String>,
    off: impl FnOnce() -> Result<(), String>,
) {
    let (case, t) = through_textpoke(on_name, kcore, text, None, busy, on);
    cases.push(case);
    let (case, _) = through_textpoke(off_name, kcore, text, t.as_ref(), busy, off);
    cases.push(case);
}

pub(crate) fn write(path: &str, value: &str) -> Result<(), String> {
    sys::write_file(path, value.as_bytes())
        .map(drop)
        .map_err(|e| format!("writing {value:?} to {path}: {e}"))
}

/// Sets `kernel.sched_schedstats` and checks the key reads back as set.
fn schedstats(on: bool) -> Result<(), String> {
    let want = if on { "1" } else { "0" };
    write(SCHEDSTATS, want)?;
    let now = sys::read_text(SCHEDSTATS).map_err(|e| format!("{SCHEDSTATS}: {e}"))?;
    if now.trim() != want {
        return Err(format!(
            "sched_schedstats reads {:?} after writing {want}",
            now.trim()
        ));
    }
    Ok(())
}

/// The tracepoint groups whose keys the trap path's own code runs (lockdep, RCU, IRQ flags):
/// those of them this kernel has.
fn trap_path_events() -> Vec<String> {
    ["lock", "rcu", "preemptirq"]
        .iter()
        .map(|g| format!("{TRACING}/events/{g}/enable"))
        .filter(|p| std::path::Path::new(p).exists())
        .collect()
}

fn set_events(paths: &[String], on: bool) -> Result<(), String> {
    for p in paths {
        write(p, if on { "1" } else { "0" })?;
    }
    Ok(())
}

/// The function tracer's filter: a few hundred functions the executors and the kernel call
/// all the time.
const FILTER: &str = "*sched* *lock* *rcu*";

/// The function-graph tracer's filter: what the busy CPUs ([`Load`]) call, and little else.
/// With [`FILTER`]'s locks and RCU every CPU runs the graph tracer's entry and return at nearly
/// every call it makes, which under TCG on the arm64 KASAN kernel (CFI, no `CALL_OPS`) makes
/// each way of the toggle take many minutes.
const GRAPH_FILTER: &str = "vfs_* do_sys_* *sched_yield* proc_*";

pub(crate) fn tracer(name: &str) -> Result<(), String> {
    write(&format!("{TRACING}/current_tracer"), name)
}

pub(crate) fn filter(f: &str) -> Result<(), String> {
    // Opened with O_TRUNC, the file drops its old filter; an empty one means every function.
    // Words are separate globs.
    let path = format!("{TRACING}/set_ftrace_filter");
    std::fs::write(&path, f).map_err(|e| format!("writing {f:?} to {path}: {e}"))
}

/// `kernel.sched_schedstats` turned on through textpoke, its records replayed onto the kernel
/// text (for the negative control): [`KernelCheck::RecordsDisagree`] only if the replay failed.
pub fn schedstats_run(kcore: &Kcore) -> KernelCheck {
    let text = match kernel_text() {
        Ok(text) => text,
        Err(e) => return KernelCheck::Failed(e),
    };
    match transition_checked(kcore, text, true, || schedstats(true)) {
        Ok(t) => KernelCheck::Passed(format!(
            "{} records replayed exactly onto the kernel text",
            t.replayed
        )),
        Err(TransitionError::Replay(f)) => {
            KernelCheck::RecordsDisagree(format!("the kcore replay failed: {f}"))
        }
        Err(TransitionError::Other(e)) => KernelCheck::Failed(e),
    }
}

/// What [`tracer_run`] saw: the check, and textpoke's kernel batches and hand-backs.
pub struct Counted {
    /// The records replayed onto the kernel text, or why not.
    pub check: KernelCheck,
    /// Kernel batches textpoke committed.
    pub batches: u64,
    /// Kernel changes textpoke handed back to the stock path.
    pub declined: u64,
}

/// The function tracer set to `name` through textpoke, with the filter the caller set, its
/// records replayed onto the kernel text: [`KernelCheck::RecordsDisagree`] only if the replay
/// failed.
pub fn tracer_run(kcore: &Kcore, name: &str) -> Counted {
    let text = match kernel_text() {
        Ok(text) => text,
        Err(e) => {
            return Counted {
                check: KernelCheck::Failed(e),
                batches: 0,
                declined: 0,
            }
        }
    };
    match transition_checked(kcore, text, false, || tracer(name)) {
        Ok(t) => Counted {
            check: KernelCheck::Passed(format!(
                "{} records replayed exactly onto the kernel text",
                t.replayed
            )),
            batches: t.delta("kernel.batches"),
            declined: t.delta("kernel.declined"),
        },
        Err(e) => Counted {
            check: match e {
                TransitionError::Replay(f) => {
                    KernelCheck::RecordsDisagree(format!("the kcore replay failed: {f}"))
                }
                TransitionError::Other(e) => KernelCheck::Failed(e),
            },
            batches: 0,
            declined: 0,
        },
    }
}

/// A failed case's diagnostic ("" for any other).
pub fn diagnostic(case: &Case) -> &str {
    match &case.result {
        CaseResult::Fail(d) => d,
        _ => "",
    }
}

/// Turns `kernel.sched_schedstats` off again after [`schedstats_run`], logging any failure.
pub fn schedstats_case_off(kcore: &Kcore) {
    let case = match kernel_text() {
        Ok(text) => {
            through_textpoke("sched_schedstats_off", kcore, text, None, true, || {
                schedstats(false)
            })
            .0
        }
        Err(e) => Case::fail("sched_schedstats_off", e),
    };
    if !case.passed() {
        log(&format!(
            "turning sched_schedstats off again failed: {}",
            diagnostic(&case)
        ));
    }
}

/// The cases run with textpoke loaded as the kernel's patcher.
pub fn cases(kcore: &Kcore) -> Case {
    let text = match kernel_text() {
        Ok(t) => t,
        Err(e) => return Case::fail("kernel_patching", e),
    };
    let mut c = Vec::new();
    module_keys(kcore, &mut c);
    c.push(kernel_selftest_case(kcore));
    pair(
        &mut c,
        ("sched_schedstats_on", "sched_schedstats_off"),
        kcore,
        text,
        || schedstats(true),
        || schedstats(false),
    );
    let sched = vec![format!("{TRACING}/events/sched/enable")];
    pair(
        &mut c,
        ("tracepoints_sched_on", "tracepoints_sched_off"),
        kcore,
        text,
        || set_events(&sched, true),
        || set_events(&sched, false),
    );
    // The trap path's neighbours: every CPU takes locks (and so runs lockdep's tracepoints) all
    // the time, so they meet these guards; the handler, entered first thing, runs none of them.
    let trap_path = trap_path_events();
    log(&format!(
        "kernel patching: trap-path event groups {trap_path:?}"
    ));
    pair(
        &mut c,
        ("tracepoints_trap_path_on", "tracepoints_trap_path_off"),
        kcore,
        text,
        || set_events(&trap_path, true),
        || set_events(&trap_path, false),
    );
    pair(
        &mut c,
        (
            "function_tracer_filtered_on",
            "function_tracer_filtered_off",
        ),
        kcore,
        text,
        || filter(FILTER).and_then(|()| tracer("function")),
        || tracer("nop"),
    );
    instance_cases(kcore, text, &mut c);
    pair(
        &mut c,
        ("function_graph_filtered_on", "function_graph_filtered_off"),
        kcore,
        text,
        || filter(GRAPH_FILTER).and_then(|()| tracer("function_graph")),
        || tracer("nop").and_then(|()| filter(FILTER)),
    );
    // Every function (about 13000 sites on arm64), without the busy threads: under
    // single-threaded TCG, a CPU that traps on nearly every call it makes starves the one that
    // writes, and each way takes minutes on arm64 instead of seconds. The other CPU still runs
    // the kernel's own work meanwhile.
    let (case, all_on) =
        through_textpoke("function_tracer_all_on", kcore, text, None, false, || {
            filter("").and_then(|()| tracer("function"))
        });
    c.push(case);
    // A module that loads while every function is traced gets its call sites enabled as it
    // loads (`ftrace_module_enable()`), outside any update.
    c.push(module_loaded_while_tracing(kcore));
    let (case, _) = through_textpoke(
        "function_tracer_all_off",
        kcore,
        text,
        all_on.as_ref(),
        false,
        || tracer("nop"),
    );
    c.push(case);
    // Back to every function for whoever traces next (the real-perf case).
    if let Err(e) = filter("") {
        c.push(Case::fail("ftrace_filter_cleared", e));
    }
    Case::group("kernel_patching", c)
}

/// The tracer instance of [`instance_cases`].
const INSTANCE: &str = "/sys/kernel/debug/tracing/instances/textpoke";

/// A second function tracer in an instance, on top of the top-level one, each step checked
/// as every transition is, with every CPU busy in traced functions meanwhile: the function
/// tracer on, a second one enabled in an instance and disabled again, then `nop`. Each step
/// changes `ftrace_caller`'s call (`ftrace_update_ftrace_func()`) around `function_trace_op`,
/// which `ftrace_modify_all_code()` orders against the call sites: on an arm64 kernel without
/// `DYNAMIC_FTRACE_WITH_CALL_OPS` (CFI, as Android's GKI), those changes must be made where the
/// kernel orders them, or a CPU in a traced function calls the old tracer function with the
/// new op (`ftrace_list_end`, whose private data is NULL).
fn instance_cases(kcore: &Kcore, text: (u64, usize), c: &mut Vec<Case>) {
    let made = std::fs::create_dir(INSTANCE)
        .or_else(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                Ok(())
            } else {
                Err(e)
            }
        })
        .map_err(|e| format!("creating {INSTANCE}: {e}"))
        .and_then(|()| {
            std::fs::write(format!("{INSTANCE}/set_ftrace_filter"), FILTER)
                .map_err(|e| format!("the instance's filter: {e}"))
        });
    if let Err(e) = made {
        c.push(Case::fail("instance_created", e));
        return;
    }
    let instance = |name: &str| write(&format!("{INSTANCE}/current_tracer"), name);
    let (case, top_on) =
        through_textpoke("instance_top_function_on", kcore, text, None, true, || {
            filter(FILTER).and_then(|()| tracer("function"))
        });
    c.push(case);
    let (case, second_on) = through_textpoke_of(
        "instance_second_function_on",
        kcore,
        text,
        None,
        true,
        Changes::InstructionsOrOps,
        || instance("function"),
    );
    c.push(case);
    let (case, _) = through_textpoke_of(
        "instance_second_function_off",
        kcore,
        text,
        second_on.as_ref(),
        true,
        Changes::InstructionsOrOps,
        || instance("nop"),
    );
    c.push(case);
    let (case, _) = through_textpoke(
        "instance_top_function_off",
        kcore,
        text,
        top_on.as_ref(),
        true,
        || tracer("nop"),
    );
    c.push(case);
    if let Err(e) = std::fs::remove_dir(INSTANCE) {
        c.push(Case::fail(
            "instance_removed",
            format!("removing {INSTANCE}: {e}"),
        ));
    }
}

/// A module the function tracer meets as it loads: the static-key sample (samples/textpoke_keys.c),
/// C without textpoke's API, whose hundreds of small functions are all traced.
const TRACED_MODULE: &str = "textpoke_keys";

/// The ftrace call sites of module `name`: `(address, function)` from
/// `available_filter_functions_addrs`.
fn module_call_sites(name: &str) -> Result<Vec<(u64, String)>, String> {
    let path = format!("{TRACING}/available_filter_functions_addrs");
    let text = sys::read_text(&path).map_err(|e| format!("{path}: {e}"))?;
    let tag = format!("[{name}]");
    Ok(text
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            match w.as_slice() {
                [addr, f, m] if *m == tag => {
                    Some((u64::from_str_radix(addr, 16).ok()?, (*f).to_owned()))
                }
                _ => None,
            }
        })
        .collect())
}

/// While every function is traced, [`TRACED_MODULE`] loads (its call sites enabled as it does)
/// and unloads again. Every call site of the module must then hold its call, with exactly one
/// record at it whose old bytes are the NOP the module was loaded with and whose new bytes are
/// what `/proc/kcore` shows; and unloading changes no text, so it must be recorded nowhere in
/// the module.
fn module_loaded_while_tracing(kcore: &Kcore) -> Case {
    const NAME: &str = "module_loaded_while_tracing_recorded";
    let nop: &[u8] = if is_x86() {
        &[0x0f, 0x1f, 0x44, 0x00, 0x00]
    } else {
        &[0x1f, 0x20, 0x03, 0xd5]
    };
    let run = || -> Result<String, String> {
        let mut rec = Recorder::open(&RecorderConfig { data_pages: 256 })
            .map_err(|e| format!("perf recorder: {e}"))?;
        guest::load(TRACED_MODULE, "")?;
        let calls = module_call_sites(TRACED_MODULE);
        let texts: Result<Vec<Vec<u8>>, String> =
            calls.as_ref().map_err(Clone::clone).and_then(|calls| {
                calls
                    .iter()
                    .map(|(a, _)| kcore.read(*a, nop.len()).map_err(|e| format!("kcore: {e}")))
                    .collect()
            });
        let loaded = rec.drain();
        let unloaded = sys::unload_module(TRACED_MODULE)
            .map_err(|e| format!("unloading {TRACED_MODULE}: {e}"));
        let unload_drain = rec.drain();
        let (calls, texts) = (calls?, texts?);
        unloaded?;
        for d in [&loaded, &unload_drain] {
            if !d.is_clean() {
                return Err(format!(
                    "perf may have lost records ({} lost)",
                    d.lost_records
                ));
            }
        }
        if calls.is_empty() {
            return Err(format!("no call sites of {TRACED_MODULE} listed"));
        }
        for ((addr, f), now) in calls.iter().zip(&texts) {
            // Changes only: the module's text as it first runs, described after these in
            // records with no old bytes (kernel/new_text.rs), is new_text.rs's to judge.
            let at: Vec<_> = loaded
                .pokes
                .iter()
                .filter(|p| p.addr == *addr && !p.old.is_empty())
                .collect();
            match at.as_slice() {
                [r] if r.old == nop && r.new == *now && now.as_slice() != nop => {}
                _ => {
                    return Err(format!(
                        "{f} at {addr:#x} holds {now:02x?} with {} records ({:02x?})",
                        at.len(),
                        at.iter().map(|r| (&r.old, &r.new)).collect::<Vec<_>>()
                    ))
                }
            }
        }
        let (lo, hi) = (
            calls.iter().map(|c| c.0).min().unwrap_or(0),
            calls.iter().map(|c| c.0).max().unwrap_or(0),
        );
        let at_unload = unload_drain
            .pokes
            .iter()
            .filter(|p| p.addr >= lo && p.addr <= hi)
            .count();
        if at_unload > 0 {
            return Err(format!(
                "{at_unload} records in the module's text as it unloaded"
            ));
        }
        Ok(format!(
            "{} call sites of {TRACED_MODULE} enabled as it loaded, each with its record;              none recorded as it unloaded",
            calls.len()
        ))
    };
    match run() {
        Ok(found) => Case::pass(NAME).with_log(found),
        Err(e) => Case::fail(NAME, e),
    }
}

/// A change of the kernel's, made through its own interface.
pub type Action<'a> = &'a dyn Fn() -> Result<(), String>;

/// The function tracer (filtered) and `kernel.sched_schedstats` on and off again, each
/// transition checked as [`cases`] checks it: for the hotplug scenario (scenarios/hotplug.rs),
/// which runs each change inside `around` (a CPU going offline and online meanwhile).
pub fn hotplug_transitions(
    kcore: &Kcore,
    around: &dyn Fn(Action) -> Result<(), String>,
) -> Vec<Case> {
    let text = match kernel_text() {
        Ok(t) => t,
        Err(e) => return vec![Case::fail("hotplug_kernel_text", e)],
    };
    let mut c = Vec::new();
    pair(
        &mut c,
        ("hotplug_function_tracer_on", "hotplug_function_tracer_off"),
        kcore,
        text,
        || around(&|| filter(FILTER).and_then(|()| tracer("function"))),
        || around(&|| tracer("nop")),
    );
    pair(
        &mut c,
        (
            "hotplug_sched_schedstats_on",
            "hotplug_sched_schedstats_off",
        ),
        kcore,
        text,
        || around(&|| schedstats(true)),
        || around(&|| schedstats(false)),
    );
    if let Err(e) = filter("") {
        c.push(Case::fail("hotplug_ftrace_filter_cleared", e));
    }
    c
}

/// textpoke alone (no module depends on it) cannot be unloaded while the kernel holds changes
/// it handed to it: once the function tracer's enable has queued [`MIDWAY`] changes with
/// textpoke (`kernel.queued`: handed over, not committed yet), or had as many committed,
/// thousands remaining in the same update, `delete_module` must fail with `EWOULDBLOCK` (in
/// use), and textpoke must still be loaded when the enable ends. Between two updates, or two
/// phases of one, the kernel holds nothing and textpoke may go, so an attempt after just any
/// batch proves nothing: it may rightly unload, and the stock path then finishes the enable.
/// Then the tracer is turned off again and textpoke unloads.
pub fn unload_refused_mid_update() -> Case {
    /// Changes queued when the attempt is made: well into the enable, far from its end.
    const MIDWAY: u64 = 2000;
    const NAME: &str = "unload_refused_mid_update";
    let run = || -> Result<String, String> {
        // (queued, committed) changes of the kernel's.
        let progress = || {
            let c = counters();
            let get = |k: &str| c.get(k).copied().unwrap_or(0);
            (get("kernel.queued"), get("kernel.sites"))
        };
        let (_, s0) = progress();
        filter("")?;
        let enable = std::thread::spawn(|| tracer("function"));
        let start = std::time::Instant::now();
        let (mut held, mut done) = (0, 0);
        while held < MIDWAY && done < MIDWAY && !enable.is_finished() {
            if start.elapsed() > std::time::Duration::from_secs(120) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            let (q, s) = progress();
            (held, done) = (q, s.saturating_sub(s0));
        }
        let midway = (held >= MIDWAY || done >= MIDWAY) && !enable.is_finished();
        let tried = sys::unload_module("textpoke");
        let enabled = enable
            .join()
            .map_err(|_| "the enabling thread panicked".to_string())?;
        tracer("nop")?;
        enabled?;
        if !midway {
            return Err(format!(
                "the enable ended before the attempt could be made in its middle \
                 (last seen: {held} changes queued, {done} committed)"
            ));
        }
        match tried {
            Err(e) if e.raw_os_error() == Some(libc::EWOULDBLOCK) => {}
            Err(e) => return Err(format!("delete_module failed with {e}, not EWOULDBLOCK")),
            Ok(()) => return Err("textpoke was unloaded in the middle of an update".into()),
        }
        if !std::path::Path::new("/sys/module/textpoke").exists() {
            return Err("textpoke went away".into());
        }
        Ok(format!(
            "delete_module(textpoke) in the middle of the function tracer's enable, with \
             {held} of its changes queued with textpoke and {done} committed: EWOULDBLOCK \
             (in use)"
        ))
    };
    match run() {
        Ok(found) => Case::pass(NAME).with_log(found),
        Err(e) => Case::fail(NAME, e),
    }
}

/// After textpoke is unloaded: the stock path changes the key's text again, with records on x86
/// and none on arm64, and no guard of textpoke's is left in the text.
pub fn stock_cases(kcore: &Kcore) -> Case {
    let text = match kernel_text() {
        Ok(t) => t,
        Err(e) => return Case::fail("stock_after_unload", e),
    };
    let run = |on: bool| -> Case {
        let name = if on {
            "stock_sched_schedstats_on"
        } else {
            "stock_sched_schedstats_off"
        };
        let t = match transition(kcore, text, true, || schedstats(on)) {
            Err(e) => return Case::fail(name, e),
            Ok(t) => t,
        };
        Case::check(name, !t.pokes.is_empty(), "the text did not change")
            .with_log(format!("{} records", t.pokes.len()))
    };
    if is_x86() {
        return Case::group("stock_after_unload", vec![run(true), run(false)]);
    }
    // arm64 records nothing, so a replay cannot explain the change: check the text directly.
    let name = "stock_arm64_records_nothing";
    let stock = (|| -> Result<Case, String> {
        let mut rec = Recorder::open(&RecorderConfig { data_pages: 64 })
            .map_err(|e| format!("perf recorder: {e}"))?;
        let before = kcore.read(text.0, text.1).map_err(|e| e.to_string())?;
        schedstats(true)?;
        let after = kcore.read(text.0, text.1).map_err(|e| e.to_string())?;
        schedstats(false)?;
        let n = rec.drain().pokes.len();
        let changed = before
            .chunks(4)
            .zip(after.chunks(4))
            .filter(|(a, b)| a != b)
            .count();
        let guards = after
            .chunks_exact(4)
            .filter(|w| *w == 0xd420_0100u32.to_le_bytes())
            .count();
        Ok(Case::check(
            name,
            n == 0 && changed > 0 && guards == 0,
            format!("{n} records, {changed} instructions changed, {guards} BRK #0x008 left"),
        )
        .with_log(format!(
            "stock arm64: {changed} instructions changed, {n} records, no guard left"
        )))
    })();
    Case::group(
        "stock_after_unload",
        vec![stock.unwrap_or_else(|e| Case::fail(name, e))],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(addr: u64, old: &[u8], new: &[u8]) -> TextPokeRec {
        TextPokeRec {
            addr,
            old: old.to_vec(),
            new: new.to_vec(),
            ..TextPokeRec::default()
        }
    }

    #[test]
    fn a_record_without_a_change_or_repeated_is_refused() {
        let a = rec(0x10, &[1], &[2]);
        let b = rec(0x11, &[1], &[2]);
        assert!(one_record_per_change(&[a.clone(), b.clone()]).is_ok());
        assert!(one_record_per_change(&[rec(0x30, &[1], &[1])]).is_err());
        // A repeated record breaks the replay's chain; a missing one leaves the text apart.
        let (before, after) = ([1u8, 1], [2u8, 2]);
        assert!(checks::replay(0x10, &before, &after, &[a.clone(), b.clone()]).is_ok());
        assert!(checks::replay(0x10, &before, &after, &[a.clone(), a, b.clone()]).is_err());
        assert!(checks::replay(0x10, &before, &after, &[b]).is_err());
    }

    fn timed(addr: u64, old: &[u8], new: &[u8], time: u64) -> TextPokeRec {
        TextPokeRec {
            time,
            ..rec(addr, old, new)
        }
    }

    #[test]
    fn selftest_records_against_the_text() {
        const NOP: &[u8] = &[0x66, 0x90];
        const JMP: &[u8] = &[0xeb, 0x10];
        let now = BTreeMap::from([
            (0x100, [NOP, &[0xc3; 6]].concat()),
            (0x200, [JMP, &[0xc3; 6]].concat()),
        ]);
        // 0x100 flipped and back; 0x200 set at load, flipped, flipped back.
        let good = vec![
            timed(0x200, NOP, JMP, 1),
            timed(0x100, NOP, JMP, 2),
            timed(0x200, JMP, NOP, 3),
            timed(0x100, JMP, NOP, 4),
            timed(0x200, NOP, JMP, 5),
        ];
        assert_eq!(selftest_records(&[0x100, 0x200], &good, &now, 2), Ok(5));
        // The defect's way: every record of a batch's first site dropped. Here the dropped
        // pair cancels out, and only the count sees it.
        let dropped: Vec<_> = good
            .iter()
            .filter(|r| r.time != 2 && r.time != 4)
            .cloned()
            .collect();
        assert_eq!(
            selftest_records(&[0x100, 0x200], &dropped, &now, 2),
            Err(SelftestRecords::TooFewRecords {
                addr: 0x100,
                records: 0
            })
        );
        // One in the middle missing breaks the chain.
        let middle: Vec<_> = good.iter().filter(|r| r.time != 3).cloned().collect();
        assert!(matches!(
            selftest_records(&[0x100, 0x200], &middle, &now, 2),
            Err(SelftestRecords::ChainBroken { addr: 0x200, .. })
        ));
        // The last one missing leaves the records short of the text.
        let last: Vec<_> = good.iter().filter(|r| r.time != 4).cloned().collect();
        assert!(matches!(
            selftest_records(&[0x100, 0x200], &last, &now, 1),
            Err(SelftestRecords::FinalText { addr: 0x100, .. })
        ));
        // No records where the selftest changes the text: caught by the count.
        assert!(selftest_records(&[0x100], &[], &now, 2).is_err());
    }

    /// A minimal little-endian ELF64 with a null section, `name` (`size` bytes) and the
    /// section-name table.
    fn elf_with(name: &str, size: u64) -> Vec<u8> {
        let strings = [b"\0".as_slice(), name.as_bytes(), b"\0.shstrtab\0"].concat();
        let shoff = 64 + strings.len();
        let mut elf = vec![0u8; 64];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        elf[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        elf[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        elf[0x3e..0x40].copy_from_slice(&2u16.to_le_bytes());
        elf.extend_from_slice(&strings);
        let header = |name_off: u32, offset: u64, size: u64| {
            let mut h = vec![0u8; 64];
            h[..4].copy_from_slice(&name_off.to_le_bytes());
            h[0x18..0x20].copy_from_slice(&offset.to_le_bytes());
            h[0x20..0x28].copy_from_slice(&size.to_le_bytes());
            h
        };
        elf.extend(header(0, 0, 0));
        elf.extend(header(1, 0, size));
        elf.extend(header(2 + name.len() as u32, 64, strings.len() as u64));
        elf
    }

    #[test]
    fn a_section_size_from_the_ko() {
        let elf = elf_with("__jump_table", 48);
        assert_eq!(elf_section_size(&elf, "__jump_table"), Some(48));
        assert_eq!(elf_section_size(&elf, ".shstrtab"), Some(24));
        assert_eq!(elf_section_size(&elf, "__jump"), None);
        assert_eq!(elf_section_size(&elf[..40], "__jump_table"), None);
        assert_eq!(elf_section_size(b"not an elf", "__jump_table"), None);
    }

    #[test]
    fn jump_entries_are_relative_to_themselves() {
        let mut table = Vec::new();
        for code in [-0x100i32, 0x40] {
            table.extend_from_slice(&code.to_le_bytes());
            table.extend_from_slice(&[0; 12]);
        }
        assert_eq!(jump_entry_codes(0x1000, &table), [0xf00, 0x1050]);
        // A partial entry is no entry.
        assert_eq!(jump_entry_codes(0x1000, &table[..20]), [0xf00]);
    }

    #[test]
    fn first_difference_finds_the_first_changed_byte() {
        assert_eq!(first_difference(0x100, &[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_difference(0x100, &[1, 2, 3], &[1, 9, 9]), Some(0x101));
        assert_eq!(first_difference(0x100, &[1, 2], &[1, 2, 3]), Some(0x100));
    }

    #[test]
    fn only_ops_literals_before_mov_x9_x30_are_copied() {
        let mut before = vec![0u8; 24];
        let mut after = vec![0u8; 24];
        // A literal at 0 before a patchable function at 8.
        after[..8].copy_from_slice(&0xffff_0000_1234_5678u64.to_le_bytes());
        after[8..12].copy_from_slice(&MOV_X9_X30.to_le_bytes());
        before[8..12].copy_from_slice(&MOV_X9_X30.to_le_bytes());
        // An instruction change elsewhere stays.
        after[16..20].copy_from_slice(&0x1400_0001u32.to_le_bytes());
        assert_eq!(copy_literals(&mut before, &after), 1);
        assert_eq!(before[..8], after[..8]);
        assert_ne!(before[16..20], after[16..20]);
    }
}
