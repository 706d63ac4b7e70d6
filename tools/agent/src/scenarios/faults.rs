//! Allocation failures injected with the kernel's own fault injection, then a kmemleak scan:
//! the end of the unload-stress boot (`make test-debug`, `scenarios/stress.rs`).
//!
//! # How failures are injected
//!
//! `FAILSLAB` with `/proc/thread-self/fail-nth`, as syzkaller injects faults: writing N there
//! makes the N-th allocation of this thread that passes failslab's filters fail, and reading it
//! back says whether that happened (0) or the operation made fewer allocations. failslab's stack
//! filter (`require-start`/`require-end`, `FAULT_INJECTION_STACKTRACE_FILTER`) is set to
//! textpoke's text, so the count takes only allocations with a textpoke function on the stack:
//! textpoke's own, and the kernel's made on its behalf. Each operation is repeated with N = 1,
//! 2, ... until it completes without consuming N, so every allocation point it reaches fails in
//! turn, and the whole enumeration runs [`ROUNDS`] times. `ignore-gfp-wait` is off, so
//! `GFP_KERNEL` allocations are candidates; `verbose` is 0, so nothing is printed.
//!
//! `FUNCTION_ERROR_INJECTION` was not chosen: it fails functions marked for it, and textpoke's
//! allocations are Rust calls into the allocator, not such functions. `FAIL_PAGE_ALLOC` fails
//! page allocations, which textpoke makes only through `kvmalloc`'s fallback; failslab reaches
//! both of `kvmalloc`'s attempts, the slab one and the `vmalloc` one (whose `vmap_area` is
//! slab-allocated), though `fail-nth` fails only one of them per run: a growing `KVVec`, which
//! tries `krealloc` and then `kvmalloc`, survives it.
//!
//! Which allocation point each failure hit is what the kernel's tracing says: a return probe on
//! `should_failslab()` whose non-zero returns record a stack trace, in a trace instance of its
//! own; the point is the innermost textpoke function on that stack. The number of traces must
//! equal the number of failures injected.
//!
//! # What must hold
//!
//! With a listener open, so that every batch runs the whole guarded protocol, records included
//! (with nobody listening the same code runs with fewer steps):
//!
//! - `flip`: one batch the agent's own thread begins, fills, commits and ends (the exerciser's
//!   `flip` command) either succeeds, every site then holding its other instruction, or fails
//!   with `ENOMEM`, every site unchanged; read through `/proc/kcore`.
//! - `load_exerciser`: the exerciser's init registers its sites; a failed load returns
//!   `ENOMEM` and leaves no module and no site registered.
//! - Both must have had a run fail with `ENOMEM`: one that survived every failure injected
//!   never reached the state a failed run leaves, which is what they check.
//! - `schedstats_on/off` and `ftrace_on/off`: the kernel's own changes (a static key, the
//!   function tracer on the syscall wrappers, more functions than the kernel queue keeps room
//!   for). No change is handed back to the kernel's own path for lack of memory (on arm64 that
//!   path writes with no record, which the listener would miss). The ftrace transition's
//!   failures must hit the queue's growth. One failure does not stop it: the kernel crate's
//!   `KVVec` reallocates with `krealloc`, then `kvmalloc`, and `fail-nth` fails one allocation,
//!   so the queue's commit-and-retry when growing fails is not reached here (nor was the
//!   hand-back it replaced): the negative controls' `kernel_queue_full_commits_and_goes_on`
//!   runs it, with the debug build's queue refusing to grow. The text afterwards is what the kernel made of the same
//!   transition with textpoke unloaded (x86's calls into ftrace trampolines only as calls: a
//!   trampoline's address is the kernel's to choose at each start).
//! - Each kernel case must have emitted records (the listener made its batches guarded ones);
//!   else the log check below holds at 0 = 0.
//! - A record that textpoke's own log (debugfs `records`) could not keep is counted as dropped:
//!   over each kernel case, emptied at its start, the records emitted (textpoke's counters) are
//!   those in the log plus those it counts dropped. (How many a failure drops is not fixed: the
//!   log's growth survives one failure as the queue's does, and a full log drops every record.)
//!
//! # kmemleak
//!
//! After the cycles and the injection, with both modules unloaded: two scans, after the five
//! seconds kmemleak waits before it suspects an object. Nothing it reports may be attributable
//! to textpoke or its samples: a backtrace naming one of them, or an address in no symbol (a
//! module that has since gone: no other module is loaded in this boot).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use textpoke_agent::platform::exerciser::{self, Site};
use textpoke_agent::platform::guest::{self, load, log};
use textpoke_agent::platform::kcore::Kcore;
use textpoke_agent::platform::sys;
use textpoke_agent::report::document::load_textpoke;
use textpoke_agent::report::ktap::Case;

use crate::scenarios::kernel_patching::{self, kernel_text, TRACING};

const FAILSLAB: &str = "/sys/kernel/debug/failslab";
const FAIL_NTH: &str = "/proc/thread-self/fail-nth";
/// The trace instance the probe's stacks go to: switching the top instance's tracer (the
/// `ftrace` operations do) empties its buffer, not this one's.
const INSTANCE: &str = "textpoke_faults";
const PROBE_GROUP: &str = "textpoke_faults";
const PROBE: &str = "failslab";
const KMEMLEAK: &str = "/sys/kernel/debug/kmemleak";
const EXERCISER_PARAMS: &str = "pool_sites=16";
/// Whole enumerations per operation: every allocation point an operation reaches fails this
/// many times at least.
pub const ROUNDS: usize = 3;
/// Most allocations one operation may make before the enumeration gives up on it.
const MAX_NTH: u32 = 400;
/// The function tracer's filter for the `ftrace` operations: the syscall wrappers, some
/// hundreds of functions, more than the kernel queue's room (`kernel_queue::KERNEL_MIN_SITES`,
/// 256), so that enabling them grows it.
pub fn ftrace_filter() -> &'static str {
    if guest::is_x86() {
        "__x64_sys_*"
    } else {
        "__arm64_sys_*"
    }
}

/// Fewest functions [`ftrace_filter`] must name: past the kernel queue's room (one change per
/// function).
const FTRACE_FUNCTIONS: usize = 257;

/// Whether an allocation point is the kernel queue's growth (`kernel_queue::State::room_for_one`,
/// and the commit state it reserves). `patcher::commit`'s is the queue's room given back, no
/// growth.
fn queue_growth(point: &str) -> bool {
    ["kernel_queue::", "entry::CommitState::"]
        .iter()
        .any(|p| point.starts_with(p))
}
const ENOMEM: i32 = 12;
/// How old kmemleak wants an object before it suspects it (`jiffies_min_age`), with a margin.
const KMEMLEAK_MIN_AGE: Duration = Duration::from_secs(6);

/// Writes `value` to `path`, naming both on failure.
fn put(path: &str, value: &str) -> Result<(), String> {
    sys::write_file(path, value.as_bytes())
        .map(drop)
        .map_err(|e| format!("writing {value:?} to {path}: {e}"))
}

/// `[start, end)` of textpoke's text: from its first function to a page past the start of its
/// last (`/proc/kallsyms`).
fn textpoke_text() -> Result<(u64, u64), String> {
    let (lo, hi) = textpoke_agent::platform::kallsyms::function_span("textpoke")?;
    Ok((lo, hi + 4096))
}

/// Runs `op` with the `n`-th filtered allocation of this thread failing; returns what `op`
/// returned and whether the failure was injected (`false`: `op` made fewer allocations).
fn with_nth<T>(n: u32, op: impl FnOnce() -> T) -> Result<(T, bool), String> {
    put(FAIL_NTH, &n.to_string())?;
    let out = op();
    let left = sys::read_text(FAIL_NTH).map_err(|e| format!("{FAIL_NTH}: {e}"));
    // Never leave a failure pending for whatever this thread does next.
    let reset = put(FAIL_NTH, "0");
    let left: u32 = left?
        .trim()
        .parse()
        .map_err(|e| format!("{FAIL_NTH}: {e}"))?;
    reset?;
    Ok((out, left == 0))
}

/// failslab set up for [`with_nth`] over textpoke's text, and the probe that records where each
/// failure hit; both undone on drop.
struct Injector {
    instance: String,
}

impl Injector {
    fn new() -> Result<Self, String> {
        let (start, end) = textpoke_text()?;
        for (file, value) in [
            ("ignore-gfp-wait", "N".to_string()),
            ("verbose", "0".into()),
            // fail-nth alone decides: no random failure.
            ("probability", "0".into()),
            ("stacktrace-depth", "32".into()),
            ("require-start", start.to_string()),
            ("require-end", end.to_string()),
        ] {
            put(&format!("{FAILSLAB}/{file}"), &value)?;
        }
        log(&format!(
            "faults: failslab over textpoke's text {start:#x}..{end:#x}"
        ));
        // An event enabled with `record-cmd` on starts the recording of command names, which
        // hooks the scheduler's tracepoints and so flips their static keys: text the kernel
        // transitions' references describe. An instance takes the option from the top level
        // when it is made, and has no file of its own for it.
        let record_cmd = format!("{TRACING}/options/record-cmd");
        let was = sys::read_text(&record_cmd).map_err(|e| format!("{record_cmd}: {e}"))?;
        put(&record_cmd, "0")?;
        let instance = format!("{TRACING}/instances/{INSTANCE}");
        let made = if std::path::Path::new(&instance).exists() {
            Ok(())
        } else {
            std::fs::create_dir(&instance).map_err(|e| format!("creating {instance}: {e}"))
        };
        put(&record_cmd, was.trim())?;
        made?;
        let me = Self { instance };
        // `should_failslab()` returns an int: only the register's low half is its value.
        let def = format!("r:{PROBE_GROUP}/{PROBE} should_failslab ret=$retval:s32");
        std::fs::OpenOptions::new()
            .append(true)
            .open(format!("{TRACING}/kprobe_events"))
            .and_then(|mut f| std::io::Write::write_all(&mut f, def.as_bytes()))
            .map_err(|e| format!("defining {def:?}: {e}"))?;
        let event = me.event();
        put(&format!("{event}/filter"), "ret != 0")?;
        // A trigger fires on every hit unless it has a condition of its own; the event's filter
        // decides only what is recorded.
        put(&format!("{event}/trigger"), "stacktrace if ret != 0")?;
        put(&format!("{event}/enable"), "1")?;
        Ok(me)
    }

    fn event(&self) -> String {
        format!("{}/events/{PROBE_GROUP}/{PROBE}", self.instance)
    }

    /// Empties the instance's buffer.
    fn clear(&self) -> Result<(), String> {
        std::fs::write(format!("{}/trace", self.instance), "")
            .map_err(|e| format!("clearing the {INSTANCE} trace: {e}"))
    }

    /// The stacks recorded since the last [`Injector::clear`], innermost frame first.
    fn stacks(&self) -> Result<Vec<Vec<String>>, String> {
        let text = sys::read_text(format!("{}/trace", self.instance))
            .map_err(|e| format!("reading the {INSTANCE} trace: {e}"))?;
        Ok(parse_stacks(&text))
    }
}

impl Drop for Injector {
    fn drop(&mut self) {
        let event = self.event();
        let _ = put(&format!("{event}/enable"), "0");
        let _ = put(&format!("{event}/trigger"), "!stacktrace");
        let _ = std::fs::remove_dir(&self.instance);
        let _ = std::fs::OpenOptions::new()
            .append(true)
            .open(format!("{TRACING}/kprobe_events"))
            .and_then(|mut f| {
                std::io::Write::write_all(&mut f, format!("-:{PROBE_GROUP}/{PROBE}").as_bytes())
            });
        let _ = put(&format!("{FAILSLAB}/ignore-gfp-wait"), "Y");
    }
}

/// The stacks of a trace: each `<stack trace>` entry's ` => frame` lines.
pub fn parse_stacks(trace: &str) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut open = false;
    for line in trace.lines() {
        if line.contains("<stack trace>") {
            out.push(Vec::new());
            open = true;
        } else if let (true, Some(frame)) = (open, line.trim_start().strip_prefix("=> ")) {
            if let Some(s) = out.last_mut() {
                s.push(frame.trim().to_owned());
            }
        } else {
            open = false;
        }
    }
    out
}

/// The identifiers of a Rust v0 symbol (`_R...`), outermost path first: the crate, then each
/// path segment, up to its first generic arguments. `None` for any other symbol.
pub fn v0_idents(sym: &str) -> Option<Vec<String>> {
    let s = sym
        .split(['+', ' ', '.'])
        .next()?
        .strip_prefix("_R")?
        .as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    // Skips a base-62 number and its `_` (disambiguators, back-references).
    let skip_to_underscore = |i: &mut usize| {
        while *i < s.len() && s[*i] != b'_' {
            *i += 1;
        }
        *i += 1;
    };
    while i < s.len() {
        match s[i] {
            b'0'..=b'9' => {
                let mut n = 0usize;
                while i < s.len() && s[i].is_ascii_digit() {
                    n = n.checked_mul(10)?.checked_add(usize::from(s[i] - b'0'))?;
                    i += 1;
                }
                if s.get(i) == Some(&b'_') {
                    i += 1;
                }
                let ident = s.get(i..i.checked_add(n)?)?;
                out.push(String::from_utf8_lossy(ident).into_owned());
                i += n;
            }
            // A nested path's namespace follows its tag.
            b'N' => i += 2,
            b'C' => {
                i += 1;
                if s.get(i) == Some(&b's') {
                    skip_to_underscore(&mut i);
                }
            }
            b's' | b'B' => skip_to_underscore(&mut i),
            b'I' | b'E' => break,
            _ => i += 1,
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The allocation point a failure's stack names: its innermost textpoke function, as
/// `module::Type::function` for Rust (the crate left out) or the C name. `None` if no frame is
/// textpoke's (which [`Tally`] reports).
pub fn point_of(stack: &[String]) -> Option<String> {
    stack.iter().find_map(|frame| {
        let name = frame.split(['+', ' ']).next()?;
        match v0_idents(name) {
            Some(idents) if idents.first().map(String::as_str) == Some("textpoke") => {
                Some(idents.get(1..)?.join("::"))
            }
            Some(_) => None,
            None => (name.starts_with("textpoke_")
                && !name.starts_with("textpoke_exerciser")
                && frame.contains("[textpoke]"))
            .then(|| name.to_owned()),
        }
    })
}

/// What one operation's enumerations did.
#[derive(Default, Debug)]
struct Tally {
    /// Failures injected.
    injected: usize,
    /// Per allocation point, the failures it took.
    points: BTreeMap<String, usize>,
    /// Stacks in which no frame was textpoke's.
    unattributed: usize,
    /// How the calls ended: "ok", or an errno's name.
    outcomes: BTreeMap<String, usize>,
    /// The first check that failed.
    problem: Option<String>,
    /// The most allocations one run of the operation made.
    allocations: u32,
}

impl Tally {
    fn fail(&mut self, why: String) {
        if self.problem.is_none() {
            log(&format!("faults: {why}"));
            self.problem = Some(why);
        }
    }

    fn outcome(&mut self, what: &str) {
        *self.outcomes.entry(what.to_owned()).or_default() += 1;
    }

    /// Why the operation's failure path went unjudged: no run failed with `ENOMEM`, so textpoke
    /// survived every failure injected and no check of what a failed run leaves behind ran.
    fn no_enomem(&self) -> Option<String> {
        (self.outcomes.get("ENOMEM").copied().unwrap_or(0) == 0).then(|| {
            "no run failed with ENOMEM: textpoke survived every failure injected, so what a \
             failed run leaves was never checked"
                .to_owned()
        })
    }

    fn summary(&self) -> String {
        let points: Vec<String> = self
            .points
            .iter()
            .map(|(p, n)| format!("{p} ×{n}"))
            .collect();
        let outcomes: Vec<String> = self
            .outcomes
            .iter()
            .map(|(o, n)| format!("{o} ×{n}"))
            .collect();
        format!(
            "{} failures injected over {ROUNDS} rounds ({} allocations in a run at most), at {} \
             points: {}; calls: {}{}",
            self.injected,
            self.allocations,
            self.points.len(),
            points.join(", "),
            outcomes.join(", "),
            if self.unattributed > 0 {
                format!("; {} failures on no textpoke stack", self.unattributed)
            } else {
                String::new()
            }
        )
    }
}

/// Runs `op` under every `n` until it completes without consuming `n`, [`ROUNDS`] times;
/// `op(injected)` is called after each run with whether its failure was injected, and checks
/// what the run did.
fn enumerate(
    name: &str,
    inj: &Injector,
    mut setup: impl FnMut() -> Result<(), String>,
    mut op: impl FnMut() -> Result<(), i32>,
    mut check: impl FnMut(Result<(), i32>, bool) -> Result<(), String>,
) -> Tally {
    let mut t = Tally::default();
    let start = Instant::now();
    if let Err(e) = inj.clear() {
        t.fail(e);
        return t;
    }
    'rounds: for _ in 0..ROUNDS {
        for n in 1..=MAX_NTH {
            if let Err(e) = setup() {
                t.fail(format!("{name}: setting up for failure {n}: {e}"));
                break 'rounds;
            }
            let (r, injected) = match with_nth(n, &mut op) {
                Ok(x) => x,
                Err(e) => {
                    t.fail(format!("{name}: {e}"));
                    break 'rounds;
                }
            };
            t.outcome(match r {
                Ok(()) => "ok",
                Err(ENOMEM) => "ENOMEM",
                Err(_) => "other errno",
            });
            if let Err(e) = check(r, injected) {
                t.fail(format!("{name}: with allocation {n} failing: {e}"));
                break 'rounds;
            }
            if !injected {
                t.allocations = t.allocations.max(n - 1);
                continue 'rounds;
            }
            t.injected += 1;
        }
        t.fail(format!(
            "{name}: more than {MAX_NTH} allocations in one run"
        ));
        break;
    }
    match inj.stacks() {
        Ok(stacks) => {
            for s in &stacks {
                match point_of(s) {
                    Some(p) => *t.points.entry(p).or_default() += 1,
                    None => t.unattributed += 1,
                }
            }
            if stacks.len() != t.injected {
                t.fail(format!(
                    "{name}: {} failures injected, {} stacks traced",
                    t.injected,
                    stacks.len()
                ));
            }
        }
        Err(e) => t.fail(e),
    }
    log(&format!(
        "faults: {name}: {} in {:.1} s",
        t.summary(),
        start.elapsed().as_secs_f64()
    ));
    t
}

fn case(name: &str, t: &Tally, extra: Option<String>) -> Case {
    let problem = t
        .problem
        .clone()
        .or(extra)
        .or_else(|| (t.injected == 0).then(|| "no failure was injected".to_owned()));
    match problem {
        Some(p) => Case::fail(name, format!("{p} ({})", t.summary())),
        None => Case::pass(name).with_log(format!("{name}: {}", t.summary())),
    }
}

/// Whether the text at each site holds its `off` (false) or `on` (true) instruction, or the
/// first site that holds neither.
fn site_states(kcore: &Kcore, sites: &[&Site]) -> Result<Vec<bool>, String> {
    sites
        .iter()
        .map(|s| {
            let now = kcore
                .read(s.addr, s.len)
                .map_err(|e| format!("kcore at {:#x}: {e}", s.addr))?;
            if now == s.on {
                Ok(true)
            } else if now == s.off {
                Ok(false)
            } else {
                Err(format!(
                    "site {} at {:#x} holds {now:02x?}, neither {:02x?} nor {:02x?}",
                    s.index, s.addr, s.off, s.on
                ))
            }
        })
        .collect()
}

/// textpoke's counter `key` (debugfs `stats`).
fn status(key: &str) -> Result<u64, String> {
    exerciser::number(&crate::scenarios::scenario::engine_stats()?, key)
}

/// Records textpoke emitted so far, for modules' batches and the kernel's.
fn emitted() -> Result<u64, String> {
    Ok(status("records")? + status("kernel.records")?)
}

/// One batch of the agent's own, over a site of each kind.
fn flip_case(kcore: &Kcore, inj: &Injector) -> Case {
    const NAME: &str = "faults_flip";
    let sites = match exerciser::sites() {
        Ok(s) => s,
        Err(e) => return Case::fail(NAME, format!("exerciser sites: {e}")),
    };
    let mut chosen: Vec<&Site> = Vec::new();
    for s in &sites {
        if chosen.iter().all(|c| c.kind != s.kind) {
            chosen.push(s);
        }
    }
    let cmd = exerciser::flip_command(&chosen);
    let before = std::cell::RefCell::new(Vec::new());
    let t = enumerate(
        NAME,
        inj,
        || {
            *before.borrow_mut() = site_states(kcore, &chosen)?;
            Ok(())
        },
        || exerciser::command(&cmd),
        |r, _| {
            let before = before.borrow();
            let before = &*before;
            let after = site_states(kcore, &chosen)?;
            let flipped: Vec<bool> = before.iter().map(|b| !b).collect();
            match r {
                Ok(()) if after == flipped => {}
                Ok(()) => return Err(format!("succeeded, but sites went {before:?} -> {after:?}")),
                Err(ENOMEM) if after == *before => {}
                Err(ENOMEM) => {
                    return Err(format!(
                        "failed with ENOMEM, but sites went {before:?} -> {after:?}"
                    ))
                }
                Err(e) => return Err(format!("failed with errno {e}")),
            }
            match status("in_flight")? {
                0 => Ok(()),
                n => Err(format!("{n} batches still in flight")),
            }
        },
    );
    case(NAME, &t, t.no_enomem())
}

/// The exerciser's load, which registers its sites.
fn load_case(inj: &Injector) -> Case {
    const NAME: &str = "faults_load_exerciser";
    let loaded = || std::path::Path::new("/sys/module/textpoke_exerciser").exists();
    let path = format!("{}/textpoke_exerciser.ko", guest::MODULES);
    let t = enumerate(
        NAME,
        inj,
        || {
            if loaded() {
                sys::unload_module("textpoke_exerciser")
                    .map_err(|e| format!("unloading the exerciser: {e}"))?;
            }
            Ok(())
        },
        || sys::load_module(&path, EXERCISER_PARAMS).map_err(|e| e.raw_os_error().unwrap_or(-1)),
        |r, _| {
            let registered = status("sites_registered")?;
            match r {
                Ok(()) if loaded() && registered > 0 => Ok(()),
                Ok(()) => Err(format!("loaded, but {registered} sites registered")),
                Err(ENOMEM) if !loaded() && registered == 0 => Ok(()),
                Err(ENOMEM) => Err(format!(
                    "failed with ENOMEM, but the module is {}and {registered} sites are registered",
                    if loaded() { "" } else { "not " }
                )),
                Err(e) => Err(format!("failed with errno {e}")),
            }
        },
    );
    case(NAME, &t, t.no_enomem())
}

/// The bytes a kernel transition changes, as the kernel makes it with textpoke unloaded: the
/// ranges where the text before and after it differ, and both texts there.
struct Reference {
    ranges: Vec<(u64, Vec<u8>, Vec<u8>)>,
}

impl Reference {
    /// Takes `on` then `off` with textpoke unloaded; the text after `off` must be as before.
    fn take(
        kcore: &Kcore,
        on: &dyn Fn() -> Result<(), String>,
        off: &dyn Fn() -> Result<(), String>,
    ) -> Result<Self, String> {
        let (base, len) = kernel_text()?;
        let read = || kcore.read(base, len).map_err(|e| format!("kcore: {e}"));
        let before = read()?;
        on()?;
        let after = read()?;
        off()?;
        let back = read()?;
        if let Some(a) = kernel_patching::first_difference(base, &before, &back) {
            return Err(format!(
                "the stock path did not undo its own transition: first difference at {a:#x}"
            ));
        }
        let ranges = changed_ranges(base, &before, &after, guest::is_x86());
        if ranges.is_empty() {
            return Err("the transition changed no byte of the kernel text".into());
        }
        Ok(Self { ranges })
    }

    /// Whether the text is as the stock path left it after the transition (`on`) or before it;
    /// on x86 a call the reference made is matched by any call (ftrace's trampolines move).
    fn holds(&self, kcore: &Kcore, on: bool) -> Result<(), String> {
        for (addr, off_bytes, on_bytes) in &self.ranges {
            let want = if on { on_bytes } else { off_bytes };
            let now = kcore
                .read(*addr, want.len())
                .map_err(|e| format!("kcore at {addr:#x}: {e}"))?;
            if !same_text(want, &now, guest::is_x86()) {
                return Err(format!(
                    "{addr:#x} holds {now:02x?}, the stock path left {want:02x?}"
                ));
            }
        }
        Ok(())
    }
}

/// The ranges where `before` and `after` (the text at `base`) differ, with both texts there.
///
/// An instruction's changed bytes, and those of a neighbour up to 8 bytes on, are one range. On
/// x86 a call whose target alone changed starts at its opcode, so that [`same_text`] knows it
/// for a call: its first changed byte may be any of the displacement's four (a target that
/// moved by less than 256 bytes changes only the low one; one whose low byte happens to match
/// changes only the higher ones).
fn changed_ranges(
    base: u64,
    before: &[u8],
    after: &[u8],
    x86: bool,
) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
    let len = before.len().min(after.len());
    let mut ranges = Vec::new();
    let mut i = 0;
    while i < len {
        if before[i] == after[i] {
            i += 1;
            continue;
        }
        // The nearest call in both texts whose displacement holds byte `i`.
        let call = (i.saturating_sub(4)..i)
            .rev()
            .find(|&op| x86 && before[op] == 0xe8 && after[op] == 0xe8);
        let start = call.unwrap_or(i);
        let mut end = i + 1;
        while let Some(j) = (end..len.min(end + 8)).find(|&j| before[j] != after[j]) {
            end = j + 1;
        }
        ranges.push((
            base + start as u64,
            before[start..end].to_vec(),
            after[start..end].to_vec(),
        ));
        i = end;
    }
    ranges
}

/// Whether `now` is the text `want` the stock path left: the same bytes or, on x86, a call where
/// it made a call (ftrace's trampolines move).
fn same_text(want: &[u8], now: &[u8], x86: bool) -> bool {
    let call = |b: &[u8]| x86 && b.first() == Some(&0xe8);
    now == want || (call(want) && call(now))
}

/// Hand-backs for lack of memory (or room) textpoke logged since `cursor`.
fn handed_back(cursor: sys::LogCursor) -> usize {
    sys::dmesg_since(cursor)
        .map(|(lines, _)| {
            lines
                .iter()
                .filter(|l| {
                    l.contains("kernel changes back to the stock path")
                        && (l.contains("NoMemory") || l.contains("NoRoom"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// A kernel transition pair under injection: `on` from the state before, `off` from after.
fn kernel_cases(
    kcore: &Kcore,
    inj: &Injector,
    name: &str,
    reference: &Reference,
    on: &dyn Fn() -> Result<(), String>,
    off: &dyn Fn() -> Result<(), String>,
) -> Vec<Case> {
    let mut out = Vec::new();
    for (dir, go, undo) in [("on", on, off), ("off", off, on)] {
        let case_name = format!("faults_{name}_{dir}");
        let cursor = sys::dmesg_cursor().unwrap_or_default();
        // The engine's log from empty (its dropped count from 0), so that what it holds at the
        // end is what this case's records left there.
        let cleared = crate::scenarios::scenario::clear_engine_log();
        let emitted_before = emitted();
        let to_on = dir == "on";
        let t = enumerate(
            &case_name,
            inj,
            || {
                undo()?;
                reference.holds(kcore, !to_on)
            },
            || {
                go().map_err(|e| {
                    log(&format!("faults: {e}"));
                    -1
                })
            },
            |r, _| {
                if r.is_err() {
                    return Err("the transition itself failed".into());
                }
                reference.holds(kcore, to_on)
            },
        );
        let back = handed_back(cursor);
        let in_log = t
            .points
            .iter()
            .filter(|(p, _)| p.starts_with("poke_log::"))
            .map(|(_, n)| *n as u64)
            .sum::<u64>();
        // Every record emitted is in the log or counted as dropped.
        let log = (|| -> Result<(u64, u64, u64), String> {
            cleared?;
            let emitted = emitted()?.saturating_sub(emitted_before?);
            let logged = crate::scenarios::scenario::engine_log()?.len() as u64;
            Ok((emitted, logged, status("records_dropped")?))
        })();
        let growth: usize = t
            .points
            .iter()
            .filter(|(p, _)| queue_growth(p))
            .map(|(_, n)| n)
            .sum();
        let untrue_log = match &log {
            Err(e) => Some(format!("the engine's log: {e}")),
            // The listener must have made the transition a guarded, recorded one: else the log
            // check holds at 0 == 0 and the quiet path, not the guarded one, was injected.
            Ok((0, _, _)) => Some("no record emitted: the transition ran unrecorded".to_owned()),
            Ok((emitted, logged, dropped)) if emitted.checked_sub(*logged) != Some(*dropped) => {
                Some(format!(
                    "{emitted} records emitted, {logged} in the engine's log, which counted \
                     {dropped} dropped ({in_log} failures hit it)"
                ))
            }
            Ok(_) => None,
        };
        let extra = if untrue_log.is_some() {
            untrue_log
        } else if back > 0 {
            Some(format!(
                "{back} kernel changes handed back to the stock path for lack of memory, with a \
                 listener open"
            ))
        } else if name == "ftrace" && growth == 0 {
            Some("no failure hit the kernel queue's growth".to_owned())
        } else {
            None
        };
        let mut c = case(&case_name, &t, extra);
        if c.passed() {
            c = c.with_log(format!(
                "{case_name}: {}; {growth} failures of the kernel queue's growth, no hand-back, \
                 every change in the text as the stock path makes it",
                t.summary()
            ));
        }
        out.push(c);
    }
    // Leave the transition undone.
    if let Err(e) = off() {
        log(&format!("faults: {name}: undoing: {e}"));
    }
    out
}

fn schedstats(on: bool) -> Result<(), String> {
    kernel_patching::write(
        "/proc/sys/kernel/sched_schedstats",
        if on { "1" } else { "0" },
    )
}

fn ftrace(on: bool) -> Result<(), String> {
    kernel_patching::tracer(if on { "function" } else { "nop" })
}

/// The fault-injection cases, with textpoke and the exerciser unloaded before and after.
pub fn cases(kcore: &Kcore) -> Vec<Case> {
    const NAME: &str = "fault_injection";
    if !std::path::Path::new(FAILSLAB).exists() || !std::path::Path::new(FAIL_NTH).exists() {
        return vec![Case::fail(NAME, format!("no {FAILSLAB} or {FAIL_NTH}"))];
    }
    // The kernel's own transitions, made by its own path first.
    if let Err(e) = kernel_patching::filter(ftrace_filter()) {
        return vec![Case::fail(NAME, e)];
    }
    let named = sys::read_text(format!("{TRACING}/set_ftrace_filter"))
        .map(|f| f.lines().filter(|l| !l.starts_with('#')).count())
        .unwrap_or(0);
    if named < FTRACE_FUNCTIONS {
        return vec![Case::fail(
            NAME,
            format!(
                "the filter {} names {named} functions, not {FTRACE_FUNCTIONS}",
                ftrace_filter()
            ),
        )];
    }
    let on_s = || schedstats(true);
    let off_s = || schedstats(false);
    let on_f = || ftrace(true);
    let off_f = || ftrace(false);
    let sched_ref = match Reference::take(kcore, &on_s, &off_s) {
        Ok(r) => r,
        Err(e) => {
            return vec![Case::fail(
                NAME,
                format!("sched_schedstats without textpoke: {e}"),
            )]
        }
    };
    let ftrace_ref = match Reference::take(kcore, &on_f, &off_f) {
        Ok(r) => r,
        Err(e) => {
            return vec![Case::fail(
                NAME,
                format!("the function tracer without textpoke: {e}"),
            )]
        }
    };
    let (loaded, _) = load_textpoke("");
    if let Err(e) = loaded {
        return vec![Case::fail(NAME, e)];
    }
    // A listener, so that batches take the whole guarded protocol, records included.
    let _listening = match textpoke_agent::platform::perf::Listener::open() {
        Ok(l) => l,
        Err(e) => return vec![Case::fail(NAME, format!("opening a listener: {e}"))],
    };
    let mut out = Vec::new();
    match Injector::new() {
        Err(e) => out.push(Case::fail(NAME, e)),
        Ok(inj) => {
            out.push(load_case(&inj));
            if std::path::Path::new("/sys/module/textpoke_exerciser").exists()
                || load("textpoke_exerciser", EXERCISER_PARAMS).is_ok()
            {
                out.push(flip_case(kcore, &inj));
            } else {
                out.push(Case::fail("faults_flip", "the exerciser did not load"));
            }
            out.extend(kernel_cases(
                kcore,
                &inj,
                "schedstats",
                &sched_ref,
                &on_s,
                &off_s,
            ));
            out.extend(kernel_cases(
                kcore,
                &inj,
                "ftrace",
                &ftrace_ref,
                &on_f,
                &off_f,
            ));
        }
    }
    let _ = kernel_patching::filter("");
    for m in ["textpoke_exerciser", "textpoke"] {
        if std::path::Path::new(&format!("/sys/module/{m}")).exists() {
            if let Err(e) = sys::unload_module(m) {
                out.push(Case::fail(NAME, format!("unloading {m} afterwards: {e}")));
            }
        }
    }
    out
}

/// One leak kmemleak reports: its header line and backtrace.
#[derive(Debug, PartialEq, Eq)]
pub struct Leak {
    pub header: String,
    pub frames: Vec<String>,
}

impl Leak {
    /// Whether textpoke or one of its samples allocated it: a frame names one, or is an address
    /// in no symbol (a module that has gone).
    pub fn ours(&self) -> bool {
        self.frames
            .iter()
            .any(|sym| sym.contains("textpoke") || sym.starts_with("0x"))
    }
}

/// The leaks of kmemleak's report.
pub fn parse_leaks(report: &str) -> Vec<Leak> {
    let mut out: Vec<Leak> = Vec::new();
    let mut in_trace = false;
    for line in report.lines() {
        if line.starts_with("unreferenced object") {
            out.push(Leak {
                header: line.to_owned(),
                frames: Vec::new(),
            });
            in_trace = false;
        } else if line.trim_start().starts_with("backtrace") {
            in_trace = true;
        } else if in_trace && !line.trim().is_empty() {
            // mm/kmemleak.c prints each frame as `    %pS`.
            if let Some(l) = out.last_mut() {
                l.frames.push(line.trim().to_owned());
            }
        }
    }
    out
}

/// kmemleak's scan, with both modules unloaded.
pub fn kmemleak_case() -> Case {
    const NAME: &str = "kmemleak_nothing_of_ours";
    if !std::path::Path::new(KMEMLEAK).exists() {
        return Case::fail(NAME, format!("no {KMEMLEAK}"));
    }
    std::thread::sleep(KMEMLEAK_MIN_AGE);
    for _ in 0..2 {
        if let Err(e) = put(KMEMLEAK, "scan") {
            return Case::fail(NAME, e);
        }
    }
    let report = match sys::read_text(KMEMLEAK) {
        Ok(r) => r,
        Err(e) => return Case::fail(NAME, format!("reading {KMEMLEAK}: {e}")),
    };
    let leaks = parse_leaks(&report);
    let ours: Vec<&Leak> = leaks.iter().filter(|l| l.ours()).collect();
    let line = format!(
        "kmemleak: {} suspected leaks after two scans, {} of them textpoke's or its samples'",
        leaks.len(),
        ours.len()
    );
    log(&line);
    for l in ours.iter().take(3) {
        log(&format!("kmemleak: {} {:?}", l.header, l.frames));
    }
    // What the others are, so that a leak wrongly left out can be seen in the log.
    for l in leaks.iter().filter(|l| !l.ours()).take(3) {
        log(&format!("kmemleak: not ours: {} {:?}", l.header, l.frames));
    }
    Case::check(
        NAME,
        ours.is_empty(),
        format!(
            "{line}: the first: {}",
            ours.first()
                .map(|l| format!("{} {:?}", l.header, l.frames))
                .unwrap_or_default()
        ),
    )
    .with_log(line)
}

/// Marks every leak kmemleak suspects so far as reported, so that the scan after the stress
/// reports only what came after.
pub fn kmemleak_clear() {
    if let Err(e) = put(KMEMLEAK, "clear") {
        log(&format!("kmemleak: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_path_is_judged_only_if_a_run_failed() {
        let mut t = Tally::default();
        t.outcome("ok");
        t.outcome("other errno");
        assert!(t.no_enomem().is_some());
        t.outcome("ENOMEM");
        assert!(t.no_enomem().is_none());
    }

    #[test]
    fn a_call_whose_target_changed_is_one_range_from_its_opcode() {
        // ftrace_call's `call`: the target moved by less than 256 bytes, then with the low
        // displacement byte equal (only the higher ones changed), then a NOP made a call.
        let before = [0x90, 0xe8, 0x10, 0x20, 0x00, 0x00, 0x90];
        for after in [
            [0x90, 0xe8, 0x18, 0x20, 0x00, 0x00, 0x90],
            [0x90, 0xe8, 0x10, 0x53, 0x00, 0x00, 0x90],
            [0x90, 0xe8, 0x10, 0x20, 0x01, 0x00, 0x90],
        ] {
            let ranges = changed_ranges(0x1000, &before, &after, true);
            assert_eq!(ranges.len(), 1, "{after:02x?}");
            let (addr, off, on) = &ranges[0];
            assert_eq!(*addr, 0x1001, "{after:02x?}");
            assert_eq!((off[0], on[0]), (0xe8, 0xe8));
            // Another call target is the same text; other bytes are not.
            let other_call = &[0xe8, 0x77, 0x66, 0x00, 0x00][..on.len()];
            let nop = &[0x0f, 0x1f, 0x44, 0x00, 0x00][..on.len()];
            assert!(same_text(on, other_call, true));
            assert!(!same_text(on, nop, true));
            assert!(!same_text(on, other_call, false));
        }
        let nop = [0x0f, 0x1f, 0x44, 0x00, 0x00, 0x90];
        let call = [0xe8, 0x10, 0x20, 0x00, 0x00, 0x90];
        assert_eq!(
            changed_ranges(0, &nop, &call, true),
            vec![(0, nop[..3].to_vec(), call[..3].to_vec())]
        );
        // Changes more than 8 bytes apart are two ranges; on arm64 no byte is a call.
        let a = [0u8; 20];
        let mut b = a;
        b[2] = 1;
        b[12] = 1;
        assert_eq!(changed_ranges(0, &a, &b, false).len(), 2);
        let mut c = before;
        c[3] = 0x53;
        assert_eq!(changed_ranges(0, &before, &c, false)[0].0, 3);
    }

    #[test]
    fn v0_symbols_give_their_path() {
        assert_eq!(
            v0_idents("_RNvMs_NtCs5DbNhHa1iJh_8textpoke5batchNtB4_11CommitState4push"),
            Some(vec![
                "textpoke".into(),
                "batch".into(),
                "CommitState".into(),
                "push".into()
            ])
        );
        assert_eq!(v0_idents("textpoke_batch_begin"), None);
        // A kernel-crate function instantiated for a textpoke type belongs to the kernel crate.
        let generic = "_RNvMs0_NtNtCs1peUGmbrgHn_6kernel5alloc4kvecINtB5_3VecNtNtCs5DbNhHa1iJh_8textpoke5batch5EntryE7reserveB9_";
        assert_eq!(v0_idents(generic).unwrap().first().unwrap(), "kernel");
    }

    #[test]
    fn a_stack_names_its_innermost_textpoke_function() {
        let stack: Vec<String> = [
            "should_failslab",
            "__kmalloc_noprof",
            "_RNvMs0_NtNtCs1peUGmbrgHn_6kernel5alloc4kvecINtB5_3VecNtNtCs5DbNhHa1iJh_8textpoke5batch5EntryE7reserveB9_ [textpoke]",
            "_RNvMs_NtCs5DbNhHa1iJh_8textpoke5batchNtB4_5Batch3add [textpoke]",
            "textpoke_batch_add [textpoke]",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(point_of(&stack).as_deref(), Some("batch::Batch::add"));
        let c_only: Vec<String> = vec!["kmalloc".into(), "textpoke_batch_begin [textpoke]".into()];
        assert_eq!(point_of(&c_only).as_deref(), Some("textpoke_batch_begin"));
        assert_eq!(point_of(&["kmalloc".to_string()]), None);
    }

    #[test]
    fn trace_stacks_are_read_entry_by_entry() {
        let trace = "\
# tracer: nop
     agent-1  [001] .....  10.0: failslab: (slab_pre_alloc_hook <- should_failslab) ret=0xfffffff4
     agent-1  [001] .....  10.0: <stack trace>
 => kmalloc
 => textpoke_batch_begin
     agent-1  [001] .....  11.0: failslab: (x <- should_failslab) ret=0xfffffff4
     agent-1  [001] .....  11.0: <stack trace>
 => vmalloc
";
        assert_eq!(
            parse_stacks(trace),
            vec![
                vec!["kmalloc".to_string(), "textpoke_batch_begin".to_string()],
                vec!["vmalloc".to_string()]
            ]
        );
    }

    #[test]
    fn kmemleak_leaks_are_ours_by_name_or_by_a_vanished_module() {
        let report = "\
unreferenced object 0xffff888004a1b2c0 (size 64):
  comm \"init\", pid 1, jiffies 4294901234
  hex dump (first 32 bytes):
    00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00  ................
  backtrace (crc 1234abcd):
    __kmalloc_noprof+0x1a0/0x3c0
    0xffffffffc0012345
    do_one_initcall+0x8b/0x2f0
unreferenced object 0xffff888004a1b300 (size 32):
  comm \"swapper/0\", pid 1, jiffies 4294890000
  backtrace (crc 5678):
    __kmalloc_noprof+0x1a0/0x3c0
    acpi_init+0x10/0x20
unreferenced object 0xffff888004a1b400 (size 32):
  comm \"textpoke-agent\", pid 1, jiffies 4294890000
  backtrace (crc 9abc):
    kmalloc_trace_noprof+0x20/0x30
    textpoke_batch_begin+0x40/0x90 [textpoke]
";
        let leaks = parse_leaks(report);
        assert_eq!(leaks.len(), 3);
        assert!(leaks[0].ours());
        assert!(!leaks[1].ours());
        assert!(leaks[2].ours());
        assert_eq!(
            leaks[1].frames,
            ["__kmalloc_noprof+0x1a0/0x3c0", "acpi_init+0x10/0x20"]
        );
    }
}
