//! The breakpoint observer: evidence of which instruction ran that owes nothing to textpoke or
//! its exerciser, from the CPU's debug unit (breakpoints moved in place, commit 32ff77e8cc).
//!
//! # What it watches
//!
//! Branch sites (static-key style: `NOP` off, a jump to the taken path on). Per site, on every
//! CPU, hardware execute breakpoints on its taken path (T: the jump ran) and its fall-through
//! instruction (F: the `NOP` ran). The scenarios have hundreds of sites and a CPU has four (x86)
//! or six (QEMU's arm64 `max`) breakpoint registers, so the observer sweeps its breakpoints from
//! site to site, moving each in place with `PERF_EVENT_IOC_MODIFY_ATTRIBUTES`.
//!
//! It does not watch the site itself, which would tell when an execution started: on both
//! arches a breakpoint there hides the outcome of the executions that trap on the guard. x86
//! resumes from the site's debug exception with `RF` set, the guard's `INT3` saves it and the
//! `IRET` to the emulated target restores it, which suppresses the target's breakpoint; arm64
//! steps over an EL1 breakpoint with single-step, and stepping over the guard's `BRK` loses the
//! trapped execution's later hit: with a breakpoint on the site, only a small fraction of the
//! executions that meet the guard are seen to.
//!
//! # Telling a trap apart
//!
//! A CPU that meets textpoke's guard traps and resumes where the site's new instruction would
//! have taken it, so T or F fires as if the instruction had run. The observer tells the two
//! apart with the text itself: a BPF program on every breakpoint (crate::platform::bpf) reads
//! the site's first bytes in the debug exception, on the CPU that hit it, and sends them with
//! the hit.
//!
//! # The verdict of one execution
//!
//! An execution is a T or F hit at time `t`. Against the `PERF_RECORD_TEXT_POKE` records of that
//! site alone, with the path before the first record taken from `/proc/kcore`:
//!
//! - the path it took is the one in effect at `t`: consistent, "old" or "new" by whether a
//!   record came before `t`;
//! - else, if the site's next record installs that path, the CPU ran the new instruction before
//!   its record, which the guarded protocol allows only through the guard: the guard goes in
//!   before the record (with a sync) and stays until after it, so it must still be at the site
//!   at `t`. Guard there: a trapped execution; otherwise a violation (what an unguarded
//!   "nosync" write produces);
//! - else it took the path the last record before `t` replaced: it may have begun before the
//!   record and been interrupted on its way, and without its start the observer cannot tell;
//!   counted as undecided.
//!
//! The checks against the records use only what perf delivered, the text, and the CPU.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::oracle::checks::Timeline;
use crate::platform::bpf::{self, Map, Prog, SiteWord};
use crate::platform::breakpoint::{
    for_each_record, u32_at, u64_at, Breakpoint, Scope, PERF_RECORD_LOST, PERF_RECORD_SAMPLE,
};
use crate::platform::perf::{self, MappedRing, PerfEventAttr, TextPokeRec};

/// A watched site: where it is, its two instructions, where each path goes (defined with the
/// lines that carry it to the host).
pub use crate::oracle::etm_dataset::Watched;

/// The guard as the site's first four bytes read little-endian show it: x86 `INT3` in the low
/// byte, arm64 `BRK #0x008` (kernel/textpoke.h) in all four.
pub fn is_guard(word: u32) -> bool {
    if cfg!(target_arch = "aarch64") {
        word == 0xd420_0100
    } else {
        word & 0xff == 0xcc
    }
}

/// One hit, as the observer's BPF program sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObsHit {
    /// The perf clock's time.
    pub time: u64,
    /// The CPU that hit it.
    pub cpu: u32,
    /// What the program saw.
    pub seen: SiteWord,
}

/// What the observer concluded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdicts {
    /// Executions whose path was in effect, by "old" (before the site's first record in
    /// effect) and "new".
    pub old_ran: u64,
    /// As above, the path a record installed.
    pub new_ran: u64,
    /// Executions that met the guard (new path before its record, guard at the site).
    pub trapped: u64,
    /// Executions that took the path the last record replaced: one that began before the
    /// record and was interrupted on its way, or one that should not have run; the observer
    /// cannot know when an execution began.
    pub undecided: u64,
    /// Executions that contradict the records.
    pub violations: u64,
    /// Executions that found the guard at their site when they reached T or F, whatever their
    /// verdict: most traps come after the record (the tails, the heads and two syncs follow
    /// it), where they need no telling apart, and only those between the guard sync and the
    /// record count as `trapped`.
    pub met_guard: u64,
    /// Hits that belong to no watched site, or whose site the program could not name.
    pub stray: u64,
    /// Hits dropped as the same execution hit again: same CPU, same breakpoint and the same
    /// register fingerprint as the hit before. On arm64 the kernel steps over a breakpoint
    /// with single-step, and an interrupt taken before the stepped instruction runs (a sync's
    /// IPI, for one) makes the breakpoint fire again when it returns.
    pub retriggered: u64,
    /// The first few violations ([`EXAMPLES`] at most), described.
    pub examples: Vec<String>,
}

/// Violations described in [`Verdicts::examples`], at most.
pub const EXAMPLES: usize = 8;

impl Verdicts {
    /// Executions classified.
    pub fn classified(&self) -> u64 {
        self.old_ran + self.new_ran + self.trapped + self.undecided + self.violations
    }

    /// The counts in one line: executions classified, by verdict, then the hits that were none.
    pub fn counts(&self) -> String {
        format!(
            "{} executions classified ({} met the guard): old {}, new {}, trapped {}, undecided \
             {}, violations {}; stray {}, hit again {}",
            self.classified(),
            self.met_guard,
            self.old_ran,
            self.new_ran,
            self.trapped,
            self.undecided,
            self.violations,
            self.stray,
            self.retriggered
        )
    }

    /// Adds `other`'s counts to these, and its examples while there is room.
    pub fn add(&mut self, other: Verdicts) {
        self.old_ran += other.old_ran;
        self.new_ran += other.new_ran;
        self.trapped += other.trapped;
        self.undecided += other.undecided;
        self.violations += other.violations;
        self.met_guard += other.met_guard;
        self.stray += other.stray;
        self.retriggered += other.retriggered;
        let room = EXAMPLES.saturating_sub(self.examples.len());
        self.examples.extend(other.examples.into_iter().take(room));
    }
}

/// Whether a breakpoint can fire twice for one execution, so that a CPU's hit with the same
/// breakpoint and register fingerprint as its previous one must be dropped: on arm64, which
/// steps over a kernel breakpoint with single-step (an interrupt taken before the stepped
/// instruction runs makes it fire again). x86 resumes with `RF`, which suppresses that; there
/// two executions in a row with the same registers are two executions.
pub const HITS_REPEAT: bool = cfg!(target_arch = "aarch64");

/// One execution of a watched site, as its path's breakpoint saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Execution {
    /// The perf clock's time of the hit.
    pub time: u64,
    /// The CPU.
    pub cpu: u32,
    /// The site's index ([`Watched::index`]).
    pub site: usize,
    /// 1: the jump ran (T), 0: the fall-through (F).
    pub path: u8,
    /// Whether the CPU read the guard at the site when it hit.
    pub guard: bool,
    /// The site's first four bytes it read.
    pub word: u32,
}

/// The executions in `hits` (any order), per CPU in time order, with the hits that are none:
/// with `repeat` ([`HITS_REPEAT`]), a hit like the CPU's previous one is the same execution
/// (counted in `retriggered`), and a hit at no watched site or path is `stray`.
pub fn executions(
    watched: &[Watched],
    hits: &[ObsHit],
    repeat: bool,
) -> (Vec<Execution>, Verdicts) {
    let by_addr: HashMap<u64, &Watched> = watched.iter().map(|w| (w.addr, w)).collect();
    let mut per_cpu: BTreeMap<u32, Vec<&ObsHit>> = BTreeMap::new();
    for h in hits {
        per_cpu.entry(h.cpu).or_default().push(h);
    }
    let mut v = Verdicts::default();
    let mut out = Vec::new();
    for stream in per_cpu.values_mut() {
        stream.sort_by_key(|h| h.time);
        let mut previous: Option<&ObsHit> = None;
        for h in stream.iter() {
            let again = repeat
                && previous.is_some_and(|p| {
                    p.seen.bp_addr == h.seen.bp_addr && p.seen.fingerprint == h.seen.fingerprint
                });
            previous = Some(h);
            if again {
                v.retriggered += 1;
                continue;
            }
            let Some(w) = by_addr.get(&h.seen.site) else {
                v.stray += 1;
                continue;
            };
            let path = if h.seen.bp_addr == w.taken {
                1
            } else if h.seen.bp_addr == w.fall {
                0
            } else {
                v.stray += 1;
                continue;
            };
            out.push(Execution {
                time: h.time,
                cpu: h.cpu,
                site: w.index,
                path,
                guard: is_guard(h.seen.word),
                word: h.seen.word,
            });
        }
    }
    (out, v)
}

/// Judges `hits` (any order) against each watched site's `timelines` (by site index; a site
/// without records keeps the path `initial` gives it). With `repeat` ([`HITS_REPEAT`]), a hit
/// like the CPU's previous one is the same execution, counted once.
pub fn judge(
    watched: &[Watched],
    timelines: &HashMap<usize, Timeline>,
    initial: &HashMap<usize, u8>,
    hits: &[ObsHit],
    repeat: bool,
) -> Verdicts {
    let by_index: HashMap<usize, &Watched> = watched.iter().map(|w| (w.index, w)).collect();
    let (executions, mut v) = executions(watched, hits, repeat);
    let note = |v: &mut Verdicts, what: String| {
        v.violations += 1;
        if v.examples.len() < EXAMPLES {
            v.examples.push(what);
        }
    };
    for e in &executions {
        let addr = by_index.get(&e.site).map_or(0, |w| w.addr);
        let path = e.path;
        let t1 = e.time;
        let fallback = Timeline {
            initial: initial.get(&e.site).copied().unwrap_or(0),
            events: Vec::new(),
        };
        let tl = timelines.get(&e.site).unwrap_or(&fallback);
        let j1 = tl.count_at(t1);
        if e.guard {
            v.met_guard += 1;
        }
        if tl.path(j1) == path {
            if j1 > 0 {
                v.new_ran += 1;
            } else {
                v.old_ran += 1;
            }
        } else if tl.events.get(j1).is_some_and(|next| next.1 == path) {
            if e.guard {
                v.trapped += 1;
            } else {
                let next = tl.events.get(j1).map_or(0, |e| e.0);
                note(
                    &mut v,
                    format!(
                        "site {addr:#x} cpu {}: path {path} at {t1}, {} ns before the record that installs it, and no guard at the site (its bytes {:08x})",
                        e.cpu, next.saturating_sub(t1), e.word
                    ),
                );
            }
        } else {
            v.undecided += 1;
        }
    }
    v
}

/// The pair of records around an unguarded change first proposed on LKML (docs/protocol.md), as textpoke's debug mode 4 emits
/// them (kernel/plan.rs, `Protocol::BeforeAfter`): per site, the intervals from a BEFORE record
/// (old and new bytes the same: "about to change") to the site's next record (AFTER).
pub fn before_after_intervals(pokes: &[TextPokeRec]) -> HashMap<u64, Vec<(u64, u64)>> {
    let mut by_site: HashMap<u64, Vec<&TextPokeRec>> = HashMap::new();
    for p in pokes {
        by_site.entry(p.addr).or_default().push(p);
    }
    let mut out: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    for (addr, mut recs) in by_site {
        recs.sort_by_key(|p| p.time);
        for pair in recs.windows(2) {
            if let [before, after] = pair {
                if before.old == before.new && after.old != after.new {
                    out.entry(addr).or_default().push((before.time, after.time));
                }
            }
        }
    }
    out
}

/// The executions (T and F hits) that ended inside a BEFORE/AFTER interval of their site: the
/// records say only that the site was changing, so a decoder cannot tell which instruction
/// ran. Returns how many took path 0 and path 1.
pub fn inside_intervals(
    watched: &[Watched],
    intervals: &HashMap<u64, Vec<(u64, u64)>>,
    hits: &[ObsHit],
) -> [u64; 2] {
    let mut out = [0; 2];
    for h in hits {
        let Some(w) = watched.iter().find(|w| w.addr == h.seen.site) else {
            continue;
        };
        let path = if h.seen.bp_addr == w.taken {
            1
        } else if h.seen.bp_addr == w.fall {
            0
        } else {
            continue;
        };
        let inside = intervals
            .get(&w.addr)
            .is_some_and(|iv| iv.iter().any(|&(b, a)| b < h.time && h.time < a));
        if inside {
            out[path] += 1;
        }
    }
    out
}

/// Data pages of each CPU's output buffer: 8 MiB with 4 KiB pages, some 131000 hits (64 bytes
/// each) between two drains. A sweep step is meant to last [`Config::dwell`], but a retarget
/// waits for an IPI to every CPU, and CPUs that hit a breakpoint constantly answer late: an
/// arm64 `-smp 4` boot once took 150953 hits in 4 steps, and a 2 MiB buffer lost one.
const OUTPUT_PAGES: usize = 2048;
/// The attr flag `watermark`: wake up after `wakeup_watermark` bytes, not events.
const WATERMARK: u64 = 1 << 14;

/// `PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_RAW`.
const OUTPUT_SAMPLE_TYPE: u64 = (1 << 2) | (1 << 7) | (1 << 10);

/// Decodes a copy of one output buffer's records into `hits`; returns (lost records,
/// unparsable records).
pub fn parse_output(bytes: &[u8], hits: &mut Vec<ObsHit>) -> (u64, u64) {
    let (mut lost, mut bad) = (0, 0);
    let whole = for_each_record(bytes, |kind, record| match kind {
        PERF_RECORD_SAMPLE => {
            let hit = (|| {
                let raw_size = u32_at(record, 24)? as usize;
                Some(ObsHit {
                    time: u64_at(record, 8)?,
                    cpu: u32_at(record, 16)?,
                    seen: SiteWord::parse(record.get(28..28 + raw_size)?)?,
                })
            })();
            match hit {
                Some(h) => hits.push(h),
                None => bad += 1,
            }
        }
        PERF_RECORD_LOST => lost += 1,
        _ => {}
    });
    if !whole {
        bad += 1;
    }
    (lost, bad)
}

/// What a run of the observer collected.
#[derive(Clone, Debug, Default)]
pub struct Collected {
    /// Every hit.
    pub hits: Vec<ObsHit>,
    /// `PERF_RECORD_LOST` records in the output buffers: hits missing.
    pub lost: u64,
    /// Unparsable output records.
    pub bad: u64,
    /// Sweep steps taken.
    pub steps: u64,
    /// The first error of the sweep, if any (the sweep stops there).
    pub error: Option<String>,
}

/// How the observer watches.
#[derive(Clone, Debug)]
pub struct Config {
    /// The sites, swept in turn.
    pub sites: Vec<Watched>,
    /// How long the breakpoints stay on one site.
    pub dwell: Duration,
    /// The clock the hits are timed on: that of the records they are judged against.
    pub clock: Clock,
}

/// The clock of the hits' times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// perf's own, as [`perf::Recorder::open`]'s records.
    Perf,
    /// `CLOCK_MONOTONIC`, as [`perf::Recorder::open_monotonic`]'s records and userspace.
    Monotonic,
}

struct Cpu {
    output: MappedRing,
    _output_fd: std::os::fd::OwnedFd,
    bps: Vec<Breakpoint>,
}

/// A running observer; [`Observer::stop`] ends it.
pub struct Observer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Collected>>,
    /// The sample-rate cap before [`Observer::start`] raised it, put back by `stop`.
    rate_before: Vec<u8>,
}

/// The sysctl that caps breakpoint samples per second and CPU: with one sample per hit the
/// default (100000 per second, `HZ` ticks) would throttle the events.
const MAX_SAMPLE_RATE: &str = "/proc/sys/kernel/perf_event_max_sample_rate";

impl Observer {
    /// Sets the program, the maps and every CPU's events up on the first site, then sweeps.
    pub fn start(config: Config) -> Result<Self, String> {
        let first = config.sites.first().ok_or("no site to watch")?.clone();
        let cpus = crate::platform::sys::online_cpus().map_err(|e| format!("online CPUs: {e}"))?;
        let sites = Map::create(
            bpf::BPF_MAP_TYPE_HASH,
            8,
            8,
            (3 * config.sites.len()).max(1) as u32,
        )
        .map_err(|e| format!("BPF hash map: {e}"))?;
        for w in &config.sites {
            for addr in [w.addr, w.taken, w.fall] {
                sites
                    .update(&addr.to_ne_bytes(), &w.addr.to_ne_bytes())
                    .map_err(|e| format!("BPF map update: {e}"))?;
            }
        }
        let slots = cpus.iter().max().map_or(1, |&c| c + 1);
        let out = Map::create(bpf::BPF_MAP_TYPE_PERF_EVENT_ARRAY, 4, 4, slots)
            .map_err(|e| format!("BPF perf event array: {e}"))?;
        let prog = Prog::load_perf_event(&bpf::site_word_program(sites.raw_fd(), out.raw_fd()))?;
        let mut per_cpu = Vec::new();
        for &cpu in &cpus {
            let attr = PerfEventAttr {
                type_: perf::PERF_TYPE_SOFTWARE,
                size: perf::PERF_ATTR_SIZE_VER8,
                config: bpf::PERF_COUNT_SW_BPF_OUTPUT,
                sample_period: 1,
                sample_type: OUTPUT_SAMPLE_TYPE,
                // No wakeups: the sweep polls. A wakeup is an irq_work, a self-interrupt,
                // which on arm64 lands between the breakpoint and the instruction the kernel
                // single-steps over it, so the breakpoint fires again, forever.
                flags: WATERMARK,
                wakeup_events: (OUTPUT_PAGES * 4096) as u32,
                ..PerfEventAttr::default()
            };
            let attr = match config.clock {
                Clock::Perf => attr,
                Clock::Monotonic => attr.on_monotonic_clock(),
            };
            let fd = perf::perf_event_open(&attr, -1, cpu as i32, -1, perf::PERF_FLAG_FD_CLOEXEC)
                .map_err(|e| format!("BPF output event on cpu {cpu}: {e}"))?;
            let output = MappedRing::map(&fd, OUTPUT_PAGES).map_err(|e| format!("mmap: {e}"))?;
            out.update(&cpu.to_ne_bytes(), &(fd.as_raw_fd() as u32).to_ne_bytes())
                .map_err(|e| format!("BPF perf event array update: {e}"))?;
            let mut bps = Vec::new();
            for addr in roles(&first) {
                let bp = Breakpoint::open(addr, Scope::KernelOnCpu(cpu), 1)
                    .map_err(|e| format!("breakpoint at {addr:#x} on cpu {cpu}: {e}"))?;
                prog.attach(&bp)
                    .map_err(|e| format!("PERF_EVENT_IOC_SET_BPF: {e}"))?;
                bps.push(bp);
            }
            per_cpu.push(Cpu {
                output,
                _output_fd: fd,
                bps,
            });
        }
        // Last, so that a failure above leaves it as it was.
        let rate_before = crate::platform::sys::read_file(MAX_SAMPLE_RATE)
            .map_err(|e| format!("reading {MAX_SAMPLE_RATE}: {e}"))?;
        crate::platform::sys::write_file(MAX_SAMPLE_RATE, b"10000000")
            .map_err(|e| format!("raising {MAX_SAMPLE_RATE}: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            // The maps and the program live as long as the events that use them.
            let _keep = (sites, out, prog);
            sweep(&config, &mut per_cpu, &flag)
        });
        Ok(Self {
            stop,
            thread: Some(thread),
            rate_before,
        })
    }

    /// Stops the sweep, closes every event and returns what it collected.
    pub fn stop(mut self) -> Collected {
        self.stop.store(true, Ordering::Release);
        let collected = self
            .thread
            .take()
            .map(|t| {
                t.join().unwrap_or_else(|_| Collected {
                    error: Some("the sweep thread panicked".into()),
                    ..Collected::default()
                })
            })
            .unwrap_or_default();
        let mut collected = collected;
        if let Err(e) = crate::platform::sys::write_file(MAX_SAMPLE_RATE, &self.rate_before) {
            collected
                .error
                .get_or_insert(format!("restoring {MAX_SAMPLE_RATE}: {e}"));
        }
        collected
    }
}

/// The addresses a CPU's breakpoints watch for `w`, in the order of its events.
fn roles(w: &Watched) -> [u64; 2] {
    [w.taken, w.fall]
}

fn drain(per_cpu: &mut [Cpu], scratch: &mut Vec<u8>, into: &mut Collected) {
    for c in per_cpu.iter() {
        scratch.clear();
        if let Err(e) = c.output.ring().drain_into(scratch) {
            into.error.get_or_insert(format!("output ring: {e}"));
        }
        let (lost, bad) = parse_output(scratch, &mut into.hits);
        into.lost += lost;
        into.bad += bad;
    }
}

/// Makes the calling thread real-time (`SCHED_FIFO`): the executors are kernel threads of a
/// `PREEMPT_NONE` kernel, slowed down by the hits they cause, and a normal thread waits behind
/// them for so long that the output buffers fill up.
fn realtime() -> Result<(), String> {
    // SAFETY: `sched_param` is a plain C struct (musl's has more fields than glibc's), for
    // which all-zero bytes are a valid value.
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    param.sched_priority = 10;
    // SAFETY: `param` is a valid `struct sched_param` the kernel only reads; pid 0 is the
    // calling thread. The system call, not musl's wrapper, which refuses (POSIX makes it
    // per-process, Linux per-thread).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setscheduler,
            0,
            libc::SCHED_FIFO,
            &param as *const libc::sched_param,
        )
    };
    if rc != 0 {
        return Err(format!(
            "sched_setscheduler: {}",
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn sweep(config: &Config, per_cpu: &mut [Cpu], stop: &AtomicBool) -> Collected {
    let mut c = Collected::default();
    if let Err(e) = realtime() {
        c.error = Some(e);
        return c;
    }
    let mut scratch = Vec::new();
    let mut i = 0;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(config.dwell);
        drain(per_cpu, &mut scratch, &mut c);
        i = (i + 1) % config.sites.len();
        let w = &config.sites[i];
        let roles = roles(w);
        for k in 0..per_cpu.len() {
            if let Some(cpu) = per_cpu.get_mut(k) {
                for (bp, &addr) in cpu.bps.iter_mut().zip(&roles) {
                    if let Err(e) = bp.retarget(addr) {
                        c.error.get_or_insert(format!("retarget to {addr:#x}: {e}"));
                        return c;
                    }
                }
            }
            // Each retarget can take long (above): empty the buffers between them too.
            drain(per_cpu, &mut scratch, &mut c);
        }
        c.steps += 1;
    }
    drain(per_cpu, &mut scratch, &mut c);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUARD: u32 = if cfg!(target_arch = "aarch64") {
        0xd420_0100
    } else {
        0xcc
    };

    fn site() -> Watched {
        Watched {
            index: 3,
            addr: 0x100,
            on: vec![1],
            off: vec![0],
            taken: 0x110,
            fall: 0x104,
        }
    }

    fn hit(time: u64, cpu: u32, bp_addr: u64, word: u32) -> ObsHit {
        ObsHit {
            time,
            cpu,
            seen: SiteWord {
                bp_addr,
                site: 0x100,
                word,
                // Each execution its own registers.
                fingerprint: time,
            },
        }
    }

    /// Off until a record at 1000 switches the site on.
    fn verdicts(hits: &[ObsHit]) -> Verdicts {
        let tl = HashMap::from([(
            3,
            Timeline {
                initial: 0,
                events: vec![(1000, 1)],
            },
        )]);
        judge(&[site()], &tl, &HashMap::new(), hits, true)
    }

    #[test]
    fn consistent_executions() {
        let v = verdicts(&[
            hit(20, 0, 0x104, 0),
            hit(1010, 1, 0x110, 1),
            hit(2000, 0, 0x110, 1),
        ]);
        assert_eq!((v.old_ran, v.new_ran, v.violations), (1, 2, 0), "{v:?}");
    }

    #[test]
    fn new_before_its_record_is_a_trap_only_with_the_guard_there() {
        let v = verdicts(&[hit(900, 0, 0x110, GUARD)]);
        assert_eq!((v.trapped, v.violations, v.met_guard), (1, 0, 1));
        // What an unguarded write does: the new instruction already in place.
        let v = verdicts(&[hit(900, 0, 0x110, 1)]);
        assert_eq!((v.trapped, v.violations), (0, 1));
        assert!(v.examples[0].contains("100 ns before the record"), "{v:?}");
    }

    #[test]
    fn old_after_its_record_is_undecided() {
        // It may have begun before the record; without its start nobody can say.
        let v = verdicts(&[hit(1100, 0, 0x104, 1)]);
        assert_eq!((v.undecided, v.violations), (1, 0));
    }

    #[test]
    fn hits_elsewhere_are_stray() {
        // A hit of an unwatched site, and one of a watched site's own address.
        let mut other = hit(1060, 0, 0x900, 0);
        other.seen.site = 0x900;
        let v = verdicts(&[other, hit(1070, 0, 0x100, 0)]);
        assert_eq!((v.stray, v.classified()), (2, 0));
    }

    #[test]
    fn the_same_execution_hit_again_counts_once() {
        // Stuck at F across the record (an interrupt before the stepped instruction): the
        // second hit would be the old path after its record.
        let mut again = hit(1100, 0, 0x104, 1);
        again.seen.fingerprint = 990;
        let v = verdicts(&[hit(990, 0, 0x104, 0), again]);
        assert_eq!((v.old_ran, v.retriggered, v.undecided), (1, 1, 0), "{v:?}");
        // The same registers on another CPU, or at another breakpoint, are another execution.
        let mut other_cpu = again;
        other_cpu.cpu = 1;
        let v = verdicts(&[hit(990, 0, 0x104, 0), other_cpu]);
        assert_eq!((v.retriggered, v.undecided), (0, 1));
        // Where a breakpoint cannot fire twice (x86), two hits are two executions.
        let mut again = hit(1100, 0, 0x104, 1);
        again.seen.fingerprint = 990;
        let tl = HashMap::from([(
            3,
            Timeline {
                initial: 0,
                events: vec![(1000, 1)],
            },
        )]);
        let v = judge(
            &[site()],
            &tl,
            &HashMap::new(),
            &[hit(990, 0, 0x104, 0), again],
            false,
        );
        assert_eq!((v.retriggered, v.undecided), (0, 1));
    }

    #[test]
    fn a_site_without_records_keeps_its_initial_path() {
        let initial = HashMap::from([(3, 1)]);
        let v = judge(
            &[site()],
            &HashMap::new(),
            &initial,
            &[hit(5, 0, 0x110, 1)],
            true,
        );
        assert_eq!((v.old_ran, v.violations), (1, 0));
        let v = judge(
            &[site()],
            &HashMap::new(),
            &initial,
            &[hit(5, 0, 0x104, 0)],
            true,
        );
        assert_eq!(
            v.undecided, 1,
            "the other path, no record: undecided without a start"
        );
    }

    #[test]
    fn before_after_intervals_and_the_hits_inside() {
        let rec = |time, old: u8, new: u8| TextPokeRec {
            addr: 0x100,
            time,
            old: vec![old],
            new: vec![new],
            ..TextPokeRec::default()
        };
        // BEFORE at 10, AFTER at 50; then a plain record at 70 (no interval).
        let iv = before_after_intervals(&[rec(50, 0, 1), rec(10, 0, 0), rec(70, 1, 0)]);
        assert_eq!(iv[&0x100], vec![(10, 50)]);
        let hits = [
            hit(20, 0, 0x104, 0),
            hit(30, 1, 0x110, 0),
            hit(60, 0, 0x110, 0),
            hit(25, 0, 0x100, 0),
        ];
        assert_eq!(inside_intervals(&[site()], &iv, &hits), [1, 1]);
    }

    #[test]
    fn output_records_decode() {
        let mut rec = Vec::new();
        rec.extend(9u32.to_ne_bytes());
        rec.extend(0u16.to_ne_bytes());
        rec.extend(64u16.to_ne_bytes());
        rec.extend(77u64.to_ne_bytes());
        rec.extend(2u32.to_ne_bytes());
        rec.extend(0u32.to_ne_bytes());
        rec.extend(36u32.to_ne_bytes());
        rec.extend(0x110u64.to_ne_bytes());
        rec.extend(0x100u64.to_ne_bytes());
        rec.extend(0xccu64.to_ne_bytes());
        rec.extend(77u64.to_ne_bytes());
        rec.extend([0; 4]);
        assert_eq!(rec.len(), 64);
        let mut lost = 2u32.to_ne_bytes().to_vec();
        lost.extend(0u16.to_ne_bytes());
        lost.extend(24u16.to_ne_bytes());
        lost.extend([0; 16]);
        rec.extend(lost);
        let mut hits = Vec::new();
        assert_eq!(parse_output(&rec, &mut hits), (1, 0));
        assert_eq!(hits, vec![hit(77, 2, 0x110, 0xcc)]);
        assert_eq!(parse_output(&rec[..60], &mut Vec::new()), (0, 1));
    }
}
