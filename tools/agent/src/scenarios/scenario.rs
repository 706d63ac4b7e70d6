//! One scenario: run it with a perf recorder on every CPU and `/proc/kcore` snapshots around
//! it, then judge the evidence.
//!
//! Every check compares the engine's work with evidence the engine does not produce: the
//! records as perf delivered them, the text itself through `/proc/kcore`, the changes the
//! exerciser asked for (its `batches` file), and the executions as the exerciser's executors
//! observed them (paths taken, and traps as the CPU itself tells them: a mark left below the
//! stack pointer that only an exception entry overwrites). textpoke's own counters and its log
//! of records are logged as context, never judged.

use std::collections::{BTreeMap, HashMap, HashSet};
use textpoke_agent::oracle::checks;
use textpoke_agent::oracle::observer;
use textpoke_agent::platform::exerciser::{self, BatchLine, Site};
use textpoke_agent::platform::guest::log;
use textpoke_agent::platform::kcore::Kcore;
use textpoke_agent::platform::perf::{self, Drain, Recorder, RecorderConfig, TextPokeRec};
use textpoke_agent::platform::sys;
use textpoke_agent::platform::uapi::ExecRecord;
use textpoke_agent::report::ktap::Case;
use textpoke_core::record::SampleIdLayout;

/// textpoke's counters.
const ENGINE_STATS: &str = "/sys/kernel/debug/textpoke/stats";

/// The scenarios of the test suite, and the trapped executions each wants of every guarded
/// kind (or of all together: [`TrapsWanted::for_spec`]). Sizes are chosen for single-threaded
/// TCG, where every all-CPU sync waits for each vCPU's turn: enough batches for hundreds of
/// trapped executions of every kind in the first, few enough to finish in seconds.
///
/// Each flips its keys an odd number of times, so that the text after differs from the text
/// before and the kcore replay has something to prove. Between them they change every kind of
/// site the arch's pools have (a unit test below holds them to it).
pub const SCENARIOS: &[(&str, &str, u64)] = &[
    (
        "scenario_one_poker",
        "keys=6 sites=8 ftrace=16 flips=5 pokers=1",
        MIN_TRAPPED_ONE_POKER,
    ),
    (
        "scenario_concurrent_pokers",
        "keys=9 sites=4 ftrace=8 flips=5 pokers=3",
        1,
    ),
];

/// Trapped executions `scenario_one_poker` wants of every guarded kind: README.md says
/// hundreds, and a guarded window hit only now and then would leave the trap path barely
/// tried. A fifth of the fewest the boots see (arm64 at two CPUs, as the CPU tells traps), so
/// that a slow vCPU schedule does not fail it.
const MIN_TRAPPED_ONE_POKER: u64 = 100;

/// Site kinds whose changes the engine makes with every other CPU parked, never behind a guard
/// (kernel/textpoke.h: on arm64, changes from or to `RET` and `MOV X9, X30`). An execution of
/// one of them must never trap.
pub fn parked_kinds() -> &'static [&'static str] {
    if cfg!(target_arch = "aarch64") {
        &["ret", "mov_x9_x30"]
    } else {
        &[]
    }
}

/// The kernel text covering every site: `(base, length)`.
pub fn region(sites: &[Site]) -> (u64, usize) {
    let lo = sites.iter().map(|s| s.addr).min().unwrap_or(0);
    let hi = sites
        .iter()
        .map(|s| s.addr + s.len as u64)
        .max()
        .unwrap_or(0);
    (lo, (hi - lo) as usize)
}

/// The engine's log of the records it emitted.
pub fn engine_log() -> Result<Vec<TextPokeRec>, String> {
    let bytes = sys::read_file(exerciser::ENGINE_RECORDS)
        .map_err(|e| format!("reading engine log: {e}"))?;
    let layout = SampleIdLayout::new(perf::SAMPLE_TYPE);
    let mut d = Drain::default();
    d.add_stream(&bytes, layout, 0);
    if !d.errors.is_empty() {
        return Err(format!("engine log malformed: {:?}", d.errors));
    }
    Ok(d.pokes)
}

/// Empties the engine's log.
pub fn clear_engine_log() -> Result<(), String> {
    sys::write_file(exerciser::ENGINE_RECORDS, b"clear")
        .map(drop)
        .map_err(|e| format!("clearing engine log: {e}"))
}

/// textpoke's counters.
pub fn engine_stats() -> Result<BTreeMap<String, String>, String> {
    sys::read_text(ENGINE_STATS)
        .map(|t| exerciser::key_values(&t))
        .map_err(|e| format!("reading {ENGINE_STATS}: {e}"))
}

/// Everything a scenario run left behind.
pub struct Evidence {
    /// How the exerciser's `run` command ended.
    pub run: Result<(), i32>,
    /// What perf delivered.
    pub drain: Drain,
    /// The engine's own log.
    pub engine: Result<Vec<TextPokeRec>, String>,
    /// `/proc/kcore` over the sites' region before and after.
    pub before: Vec<u8>,
    /// As above, after.
    pub after: Vec<u8>,
    /// The exerciser's `result` file.
    pub result: BTreeMap<String, String>,
    /// Its `batches` file.
    pub batches: Vec<BatchLine>,
    /// Its logged executions.
    pub execs: Vec<ExecRecord>,
    /// textpoke's counters before and after.
    pub stats: (BTreeMap<String, String>, BTreeMap<String, String>),
    /// How the ordering check tells a trap (see [`checks::TrapEvidence`]).
    pub traps: checks::TrapEvidence,
    /// Function-call IPIs, summed over CPUs, just before and just after the run; `None` when
    /// the breakpoint observer ran beside it (it moves breakpoints on every CPU, by IPIs of
    /// its own).
    pub call_ipis: Option<(u64, u64)>,
}

/// The addresses of every exerciser site.
fn site_addrs(sites: &[Site]) -> HashSet<u64> {
    sites.iter().map(|s| s.addr).collect()
}

impl Evidence {
    /// The recorded pokes of exerciser sites (the kernel's own pokes left out).
    pub fn site_pokes(&self, sites: &[Site]) -> Vec<TextPokeRec> {
        let addrs = site_addrs(sites);
        self.drain
            .pokes
            .iter()
            .filter(|p| addrs.contains(&p.addr))
            .cloned()
            .collect()
    }

    /// A number of the exerciser's `result` file.
    pub fn result(&self, key: &str) -> Result<u64, String> {
        exerciser::number(&self.result, key)
    }

    /// How much textpoke's counter `key` grew during the run.
    pub fn stat_delta(&self, key: &str) -> Result<u64, String> {
        let before = exerciser::number(&self.stats.0, key)?;
        let after = exerciser::number(&self.stats.1, key)?;
        Ok(after.wrapping_sub(before))
    }

    /// The ordering check of this run.
    pub fn ordering(&self, sites: &[Site]) -> Result<checks::OrderingReport, String> {
        let mut lines = checks::timelines(sites, &self.site_pokes(sites))?;
        // A site no record touched held what it held before the run throughout (a batch that
        // failed before its record, for one).
        let (base, _) = region(sites);
        for s in sites {
            let at = (s.addr - base) as usize;
            let then = self.before.get(at..at + s.len);
            let initial = if then == Some(s.on.as_slice()) {
                1
            } else if then == Some(s.off.as_slice()) {
                0
            } else {
                continue;
            };
            lines.entry(s.index).or_insert(checks::Timeline {
                initial,
                events: Vec::new(),
            });
        }
        let windows = checks::windows_by_site(&self.batches);
        Ok(checks::check_ordering(
            sites,
            &lines,
            &windows,
            &self.execs,
            self.traps,
        ))
    }
}

/// Runs scenario `spec` and collects its evidence.
pub fn run(spec: &str, sites: &[Site], kcore: &Kcore) -> Result<Evidence, String> {
    run_observed(spec, sites, kcore, None).map(|(ev, _)| ev)
}

/// As [`run`], with the breakpoint observer watching meanwhile if `observe` says how; returns
/// what it collected too.
pub fn run_observed(
    spec: &str,
    sites: &[Site],
    kcore: &Kcore,
    observe: Option<observer::Config>,
) -> Result<(Evidence, Option<observer::Collected>), String> {
    let (base, len) = region(sites);
    // On arm64 the observer's breakpoints are debug exceptions taken on the executors' own
    // stacks: the CPU's word alone cannot tell them from traps there (x86 takes them on a
    // stack of their own).
    let traps = if observe.is_some() && cfg!(target_arch = "aarch64") {
        checks::TrapEvidence::CpuAndEngine
    } else {
        checks::TrapEvidence::Cpu
    };
    clear_engine_log()?;
    let stats_before = engine_stats()?;
    let before = kcore
        .read(base, len)
        .map_err(|e| format!("kcore before: {e}"))?;
    let mut recorder = Recorder::open(&RecorderConfig { data_pages: 512 })
        .map_err(|e| format!("opening the TEXT_POKE recorder: {e}"))?;
    let observer = observe
        .map(observer::Observer::start)
        .transpose()
        .map_err(|e| format!("starting the observer: {e}"))?;
    log(&format!("scenario {spec}"));
    let ipis_before = match observer {
        None => Some(sys::call_ipis()?),
        Some(_) => None,
    };
    let run = exerciser::command(&format!("run {spec}"));
    let call_ipis = match ipis_before {
        Some(before) => Some((before, sys::call_ipis()?)),
        None => None,
    };
    let observed = observer.map(observer::Observer::stop);
    let drain = recorder.drain();
    recorder.close();
    let after = kcore
        .read(base, len)
        .map_err(|e| format!("kcore after: {e}"))?;
    let ev = Evidence {
        run,
        drain,
        engine: engine_log(),
        before,
        after,
        result: exerciser::result().map_err(|e| format!("result: {e}"))?,
        batches: exerciser::batches().map_err(|e| format!("batches: {e}"))?,
        execs: exerciser::executions().map_err(|e| format!("executions: {e}"))?,
        stats: (stats_before, engine_stats()?),
        traps,
        call_ipis,
    };
    Ok((ev, observed))
}

/// The trapped executions a scenario wants: the evidence that the trap path ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrapsWanted {
    /// At least this many of every guarded kind: one `trap_path_taken_KIND` case each.
    EachKind(u64),
    /// At least this many of the guarded kinds together: one `trap_path_taken` case, each kind's
    /// count in its log (see [`TrapsWanted::for_spec`]).
    AllKinds(u64),
    /// None asked for: each kind's count is logged, and no case judges it (the hotplug scenario
    /// at two CPUs, where no executor can run while a guard stands).
    Nothing,
}

impl TrapsWanted {
    /// At least `min` of every guarded kind, unless the spec's pokers are as many as the CPUs:
    /// then the executors share every CPU with pokers, and the executor of one kind can be
    /// scheduled out of every window its kind's guards stand in (seen at two CPUs with three
    /// pokers: none of thousands of executions of one kind trapped, hundreds of each other's
    /// did), so `min` of all of them together.
    pub fn for_spec(min: u64, spec: &Shape, cpus: usize) -> Self {
        if spec.pokers >= cpus {
            Self::AllKinds(min)
        } else {
            Self::EachKind(min)
        }
    }
}

/// What the agent needs of a scenario's spec, read as the exerciser reads it
/// (samples/exerciser/scenario.rs, `Spec::parse`): the same keys, defaults and refusals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Static-key-like groups (`keys=`).
    pub keys: usize,
    /// Sites in each key's group (`sites=`).
    pub sites: usize,
    /// Sites of the ftrace group (`ftrace=`).
    pub ftrace: usize,
    /// Concurrent pokers (`pokers=`, one unless named).
    pub pokers: usize,
}

impl Shape {
    /// Reads `spec`; what the exerciser would refuse is an error naming the spec.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let refused = |why: &str| format!("scenario spec {spec:?}: {why}");
        let mut shape = Self {
            keys: 0,
            sites: 0,
            ftrace: 0,
            pokers: 1,
        };
        let mut flips = 0;
        for word in spec.split_whitespace() {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| refused(&format!("{word:?} is not key=value")))?;
            let value: usize = value
                .parse()
                .map_err(|_| refused(&format!("{word:?} has no number")))?;
            match key {
                "keys" => shape.keys = value,
                "sites" => shape.sites = value,
                "ftrace" => shape.ftrace = value,
                "flips" => flips = value,
                "pokers" => shape.pokers = value,
                "avoid" => {}
                _ => return Err(refused(&format!("no key {key:?}"))),
            }
        }
        if flips == 0
            || shape.pokers == 0
            || (shape.keys == 0 || shape.sites == 0) && shape.ftrace == 0
        {
            return Err(refused("no flips, no pokers or no sites"));
        }
        Ok(shape)
    }
}

/// Whether the online CPUs stay the same through a scenario's run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Cpus {
    /// They do: each sync interrupts the same CPUs, so its IPIs are judged.
    Steady,
    /// CPUs go offline and online during it (the hotplug group's runs): the IPIs are not judged.
    Changing,
}

/// Runs a scenario and judges it, as a KTAP subtest, wanting `traps`.
pub fn case(
    name: &str,
    spec: &str,
    shape: &Shape,
    traps: TrapsWanted,
    sites: &[Site],
    kcore: &Kcore,
    cpus: Cpus,
) -> Case {
    match run(spec, sites, kcore) {
        Ok(mut ev) => {
            if cpus == Cpus::Changing {
                ev.call_ipis = None;
            }
            judge(name, spec, shape, traps, &ev, sites)
        }
        Err(e) => Case::fail(name, e),
    }
}

/// `syncs_reach_every_cpu`: the kernel's own count of function-call IPIs (`/proc/interrupts`,
/// `ipis` before and after the run) shows every sync the run's batches counted (the exerciser's
/// `syncs`) interrupting another CPU. A sync is `on_each_cpu()` (x86) or `kick_all_cpus_sync()`
/// (arm64), which sends an IPI to each other online CPU and waits for them all; a lone poker's
/// syncs follow one another. The floor is one IPI per sync, not one per other CPU: arm64 at four
/// CPUs counted fewer than that (126 for 50 syncs, 150 sent), the reason not established (an SGI
/// raised while one of the same number is still pending is taken once). A sync counted and not
/// made, which no coherent TCG guest can see in the text, shows here.
fn syncs_reach_every_cpu(ev: &Evidence, (before, after): (u64, u64)) -> Case {
    const NAME: &str = "syncs_reach_every_cpu";
    let judged = ev.result("syncs").and_then(|syncs| {
        let cpus = sys::online_cpus().map_err(|e| format!("online CPUs: {e}"))?;
        ipis_cover_syncs(after.saturating_sub(before), syncs, cpus.len() as u64)
    });
    match judged {
        Ok(line) => Case::pass(NAME).with_log(line),
        Err(e) => Case::fail(NAME, e),
    }
}

/// Whether the kernel counts an IPI for the syncs. On x86 a sync with one other CPU to
/// interrupt sends it a lone IPI, which the kernel leaves out when that CPU idles polling
/// (`call_function_single_prep_ipi()`; cpuidle's poll state), the call then run from its idle
/// loop and counted nowhere; to two or more it sends every one. arm64 (6.12) never idles
/// polling. So the check runs on arm64, and on x86 with three CPUs or more (an error reading
/// them runs it, to fail on the error).
fn every_ipi_counted() -> bool {
    cfg!(target_arch = "aarch64") || sys::online_cpus().map_or(true, |c| c.len() >= 3)
}

/// Whether `ipis` function-call IPIs can be `syncs` all-CPU syncs on `cpus` CPUs, each of which
/// interrupts another CPU at least: `Ok(summary)` if at least one IPI per sync was taken.
pub fn ipis_cover_syncs(ipis: u64, syncs: u64, cpus: u64) -> Result<String, String> {
    if cpus < 2 || syncs == 0 {
        return Err(format!(
            "{syncs} syncs on {cpus} CPUs: nothing a sync must interrupt"
        ));
    }
    let line = format!(
        "{ipis} function-call IPIs for {syncs} syncs on {cpus} CPUs (one per sync at least; {} \
         if every other CPU's were counted)",
        syncs.saturating_mul(cpus - 1)
    );
    if ipis >= syncs {
        Ok(line)
    } else {
        Err(format!("too few: {line}"))
    }
}

/// A case that passes when counter `value` is zero, failing with the count.
fn zero(name: &str, value: Result<u64, String>, what: &str) -> Case {
    match value {
        Ok(0) => Case::pass(name),
        Ok(n) => Case::fail(name, format!("{n} {what}")),
        Err(e) => Case::fail(name, e),
    }
}

/// The key kinds of the exerciser's pools on arm64 (`aarch64`) or x86, in the order the
/// scenarios' keys take them (samples/exerciser/scenario.rs, `KEY_KINDS`, by the names its
/// `sites` file gives them); with [`call_kind`], every kind the pools have.
pub fn key_kinds(aarch64: bool) -> &'static [&'static str] {
    if aarch64 {
        &["b", "ret", "mov_x9_x30"]
    } else {
        &["jmp32", "jmp8", "ret"]
    }
}

/// The ftrace group's kind.
pub fn call_kind(aarch64: bool) -> &'static str {
    if aarch64 {
        "bl"
    } else {
        "call"
    }
}

/// The kinds scenario `spec` changes, fixed before it runs: key `k` takes the `k`-th key kind
/// (round robin), the ftrace group the call kind.
pub fn spec_kinds(spec: &Shape, aarch64: bool) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    if spec.sites > 0 {
        out.extend(key_kinds(aarch64).iter().take(spec.keys));
    }
    if spec.ftrace > 0 {
        out.push(call_kind(aarch64));
    }
    out
}

/// Per site: (changes the exerciser's batches asked for, records perf delivered).
pub fn changes_and_records(
    batches: &[BatchLine],
    sites: &[Site],
    pokes: &[TextPokeRec],
) -> BTreeMap<usize, (u64, u64)> {
    let mut out: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
    for b in batches {
        for &(i, _) in &b.changes {
            out.entry(i).or_default().0 += 1;
        }
    }
    let by_addr: HashMap<u64, usize> = sites.iter().map(|s| (s.addr, s.index)).collect();
    for p in pokes {
        if let Some(&i) = by_addr.get(&p.addr) {
            out.entry(i).or_default().1 += 1;
        }
    }
    out
}

/// One record per change the exerciser asked for, site by site, and some changes at all.
pub fn one_record_per_change(
    batches: &[BatchLine],
    sites: &[Site],
    pokes: &[TextPokeRec],
) -> Result<String, String> {
    let counts = changes_and_records(batches, sites, pokes);
    let changes: u64 = counts.values().map(|c| c.0).sum();
    let records: u64 = counts.values().map(|c| c.1).sum();
    let off: Vec<String> = counts
        .iter()
        .filter(|(_, (c, r))| c != r)
        .take(8)
        .map(|(i, (c, r))| format!("site {i}: {c} changes, {r} records"))
        .collect();
    if changes == 0 {
        return Err("the batches asked for no change".into());
    }
    if !off.is_empty() {
        return Err(format!(
            "{records} records for {changes} changes: {}",
            off.join("; ")
        ));
    }
    Ok(format!(
        "{records} records for the {changes} changes the batches asked for, site by site"
    ))
}

/// The guard as a site's first bytes show it.
fn guard() -> &'static [u8] {
    if cfg!(target_arch = "aarch64") {
        &[0x00, 0x01, 0x20, 0xd4]
    } else {
        &[0xcc]
    }
}

/// The sites whose text in `after` (a snapshot from `base`) starts with `guard`.
pub fn guards_left(sites: &[Site], base: u64, after: &[u8], guard: &[u8]) -> Vec<u64> {
    sites
        .iter()
        .filter(|s| {
            usize::try_from(s.addr.wrapping_sub(base))
                .ok()
                .and_then(|at| after.get(at..at + guard.len()))
                .is_some_and(|t| t == guard)
        })
        .map(|s| s.addr)
        .collect()
}

/// The executions whose two trap bits disagree, from the executors' counters over every
/// execution (`seen_only.KIND`: the CPU saw an exception textpoke did not count;
/// `counted_only.KIND`: textpoke counted a trap the CPU did not see) and from the logged
/// executions: `(seen only, counted only)`. textpoke.h promises `textpoke_cpu_traps()` counts
/// exactly this CPU's traps on module sites' guards.
pub fn trap_bits_disagree(
    result: &BTreeMap<String, String>,
    kinds: &[&str],
    execs: &[ExecRecord],
) -> Result<(u64, u64), String> {
    let (mut seen, mut counted) = (0, 0);
    for kind in kinds {
        seen += exerciser::number(result, &format!("seen_only.{kind}"))?;
        counted += exerciser::number(result, &format!("counted_only.{kind}"))?;
    }
    // The logged executions are among those counted, but their bits come to the agent as
    // they were recorded: a counter that missed one shows here.
    let logged_seen = execs
        .iter()
        .filter(|e| e.cpu_trapped() && !e.counted())
        .count() as u64;
    let logged_counted = execs
        .iter()
        .filter(|e| e.counted() && !e.cpu_trapped())
        .count() as u64;
    Ok((seen.max(logged_seen), counted.max(logged_counted)))
}

/// The checks of one scenario's evidence; the guarded kinds must have the trapped executions
/// `traps` asks for.
pub fn judge(
    name: &str,
    spec: &str,
    shape: &Shape,
    traps: TrapsWanted,
    ev: &Evidence,
    sites: &[Site],
) -> Case {
    let ours = ev.site_pokes(sites);
    let (base, _) = region(sites);
    let aarch64 = cfg!(target_arch = "aarch64");
    let kinds = spec_kinds(shape, aarch64);
    let mut children = Vec::new();
    let committed = ev.batches.iter().filter(|b| b.errno == 0).count();
    children.push(Case::check(
        "run_completed",
        ev.run.is_ok() && committed == ev.batches.len() && !ev.batches.is_empty(),
        format!(
            "command: {:?}, {committed} of {} batches committed",
            ev.run,
            ev.batches.len()
        ),
    ));
    children.push(Case::check(
        "perf_records_not_lost",
        ev.drain.is_clean(),
        format!(
            "lost {} records ({} events), {} full buffers, errors {:?}",
            ev.drain.lost_records, ev.drain.lost_events, ev.drain.full_buffers, ev.drain.errors
        ),
    ));
    let engine_sites: u64 = ev.batches.iter().map(|b| b.sites).sum();
    children.push(
        match one_record_per_change(&ev.batches, sites, &ours) {
            Ok(line) => Case::pass("one_record_per_site_change").with_log(line),
            Err(e) => Case::fail("one_record_per_site_change", e),
        }
        .with_log(format!(
            "textpoke's batch stats say {engine_sites} sites changed"
        )),
    );
    let engine_log = match &ev.engine {
        Ok(engine) => match checks::same_pokes("perf", &ours, "engine log", engine) {
            Ok(n) => format!("textpoke's own log of records agrees with perf's ({n} records)"),
            Err(e) => format!("textpoke's own log of records differs from perf's: {e}"),
        },
        Err(e) => format!("textpoke's own log of records: {e}"),
    };
    children.push(
        match checks::records_match_text(sites, base, &ev.before, &ev.after, &ours) {
            Ok(n) => Case::pass("records_match_text").with_log(format!(
                "{n} records chain from the text before to the text after"
            )),
            Err(e) => Case::fail("records_match_text", e),
        }
        // Context only: the engine's word is no evidence.
        .with_log(engine_log),
    );
    children.push(match checks::replay(base, &ev.before, &ev.after, &ours) {
        Ok(n) => Case::pass("kcore_replay_exact")
            .with_log(format!("{n} records replayed onto the kcore snapshot")),
        Err(e) => Case::fail("kcore_replay_exact", e),
    });
    children.push(Case::check(
        "text_changed",
        ev.before != ev.after,
        "the text after the scenario equals the text before: the replay proves nothing",
    ));
    match ev.ordering(sites) {
        Ok(r) => {
            let mut c = Case::check(
                "ordering_no_violations",
                r.violations == 0 && r.checked > 0,
                format!(
                    "{} violations in {} executions ({:?}): {:?}",
                    r.violations, r.checked, r.by_violation, r.examples
                ),
            )
            .with_log(format!(
                "{} executions checked against {} records, traps as {:?} tells them",
                r.checked,
                ours.len(),
                ev.traps
            ));
            if r.multi_batch > 0 {
                c = c.with_log(format!(
                    "{} trapped executions spanned several batches of their site",
                    r.multi_batch
                ));
            }
            for (kind, [old, new, trapped]) in &r.by_kind {
                c = c.with_log(format!("{kind}: old {old}, new {new}, trapped {trapped}"));
            }
            children.push(c);
            children.push(Case::check(
                "trapped_executions_matched",
                r.unmatched == 0,
                format!(
                    "{} trapped executions overlap no batch of their site: {:?}",
                    r.unmatched, r.examples
                ),
            ));
        }
        Err(e) => children.push(Case::fail("ordering_no_violations", e)),
    }
    children.push(
        match trap_bits_disagree(&ev.result, &kinds, &ev.execs) {
            Ok((seen, counted)) => {
                let line = format!(
                    "{seen} executions the CPU saw trap and textpoke did not count, {counted} textpoke counted and the CPU did not see"
                );
                match ev.traps {
                    checks::TrapEvidence::Cpu => {
                        Case::check("trap_bits_agree", seen == 0 && counted == 0, line)
                    }
                    // The observer's breakpoint hits are exceptions textpoke rightly does not
                    // count: only the other direction is a contradiction.
                    checks::TrapEvidence::CpuAndEngine => Case::check(
                        "trap_bits_agree",
                        counted == 0,
                        line.clone(),
                    )
                    .with_log(format!("under the observer's breakpoints: {line}")),
                }
            }
            Err(e) => Case::fail("trap_bits_agree", e),
        },
    );
    children.push(zero(
        "stack_mark_sound",
        ev.result("mark_misplaced"),
        "executions whose stack mark was set and read at different stack pointers",
    ));
    let trapped_key = match ev.traps {
        checks::TrapEvidence::Cpu => "trapped",
        checks::TrapEvidence::CpuAndEngine => "trapped_counted",
    };
    // Each planned kind's executions and trapped executions: an error when none ran.
    let counts = |kind: &str| {
        let runs = ev.result(&format!("executions.{kind}"))?;
        if runs == 0 {
            return Err(format!(
                "no {kind} execution ran: the scenario plans {kind} sites"
            ));
        }
        Ok((runs, ev.result(&format!("{trapped_key}.{kind}"))?))
    };
    let line = |kind: &str, n: u64, runs: u64| {
        format!("{n} of {runs} {kind} executions trapped (the CPU's word)")
    };
    // Parked kinds must never trap; the guarded ones are judged as `traps` asks.
    let mut guarded = Vec::new();
    for kind in &kinds {
        if parked_kinds().contains(kind) {
            let name = format!("parked_never_trapped_{kind}");
            children.push(match counts(kind) {
                Ok((_, n)) => Case::check(
                    name,
                    n == 0,
                    format!("{n} executions trapped on a site only ever changed with the other CPUs parked"),
                ),
                Err(e) => Case::fail(name, e),
            });
        } else {
            guarded.push((kind, counts(kind)));
        }
    }
    match traps {
        TrapsWanted::EachKind(min) => {
            for (kind, counted) in guarded {
                let name = format!("trap_path_taken_{kind}");
                children.push(match counted {
                    Ok((runs, n)) => Case::check(
                        name,
                        n >= min,
                        format!(
                            "{n} of {runs} {kind} executions trapped, fewer than {min}: the guarded window was not hit enough"
                        ),
                    )
                    .with_log(line(kind, n, runs)),
                    Err(e) => Case::fail(name, e),
                });
            }
        }
        TrapsWanted::AllKinds(_) | TrapsWanted::Nothing => {
            let (mut total, mut lines, mut errors) = (0u64, Vec::new(), Vec::new());
            for (kind, counted) in guarded {
                match counted {
                    Ok((runs, n)) => {
                        total = total.saturating_add(n);
                        lines.push(line(kind, n, runs));
                    }
                    Err(e) => errors.push(e),
                }
            }
            let lines = lines.join("; ");
            if let TrapsWanted::AllKinds(min) = traps {
                children.push(
                    Case::check(
                        "trap_path_taken",
                        errors.is_empty() && total >= min,
                        format!(
                            "{total} executions of the guarded kinds trapped (at least {min} wanted), {}: {lines}",
                            errors.join("; ")
                        ),
                    )
                    .with_log(lines),
                );
            } else {
                children.push(Case::check(
                    "executions_of_every_kind_ran",
                    errors.is_empty(),
                    errors.join("; "),
                ));
                log(&format!("{name}: no trapped execution asked for: {lines}"));
            }
        }
    }
    if shape.pokers > 1 {
        // Concurrent pokers must really have had batches in flight at the same time.
        let overlap = checks::max_overlap(ev.batches.iter().map(|b| (b.start, b.end)));
        children.push(
            Case::check(
                "batches_in_flight_together",
                overlap >= 2,
                format!("at most {overlap} batch in flight at any time"),
            )
            .with_log(format!("up to {overlap} batches were in flight at once")),
        );
    }
    children.push(zero(
        "stable_executions_consistent",
        ev.result("stable_violations"),
        "executions outside batches ran a non-committed instruction",
    ));
    children.push(zero(
        "executions_log_complete",
        ev.result("log_dropped"),
        "executions during batches did not fit in the log and went unchecked",
    ));
    let late_key = match ev.traps {
        checks::TrapEvidence::Cpu => "late_traps",
        checks::TrapEvidence::CpuAndEngine => "late_traps_counted",
    };
    children.push(zero(
        "no_late_traps",
        ev.result(late_key),
        "executions outside batches trapped (the CPU's word) on a guard",
    ));
    let left = guards_left(sites, base, &ev.after, guard());
    children.push(
        Case::check(
            "no_guard_left",
            left.is_empty(),
            format!(
                "{} sites hold a guard after the scenario: {:#x?}",
                left.len(),
                left.iter().take(8).collect::<Vec<_>>()
            ),
        )
        .with_log(format!(
            "textpoke counted {} traps on guards already replaced",
            ev.stat_delta("traps.vanished_guard")
                .map_or_else(|e| e, |n| n.to_string())
        )),
    );
    // A lone poker's syncs never overlap one another, so each interrupts every other CPU.
    if let (1, Some(ipis), true) = (shape.pokers, ev.call_ipis, every_ipi_counted()) {
        children.push(syncs_reach_every_cpu(ev, ipis));
    }
    let mut case = Case::group(name, children).with_log(format!("spec {spec}"));
    for key in [
        "batches",
        "sites_changed",
        "syncs",
        "records",
        "logged",
        "nsecs",
    ] {
        case = case.with_log(format!(
            "{key} {}",
            ev.result.get(key).map_or("?", String::as_str)
        ));
    }
    case
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sync_must_interrupt_every_other_cpu() {
        // 10 syncs: 10 IPIs at least, whatever the CPUs.
        assert!(ipis_cover_syncs(10, 10, 4).is_ok());
        assert!(ipis_cover_syncs(30, 10, 2).is_ok());
        let short = ipis_cover_syncs(9, 10, 4).unwrap_err();
        assert!(short.starts_with("too few"), "{short}");
        // Syncs counted but never sent.
        assert!(ipis_cover_syncs(0, 10, 2).is_err());
        // Nothing to judge is no pass.
        assert!(ipis_cover_syncs(5, 0, 2).is_err());
        assert!(ipis_cover_syncs(5, 10, 1).is_err());
    }

    fn site(index: usize, kind: &str, addr: u64) -> Site {
        Site {
            index,
            kind: kind.into(),
            addr,
            len: 5,
            off: vec![0x0f, 0x1f, 0x44, 0, 0],
            on: vec![0xe9, 1, 0, 0, 0],
        }
    }

    fn rec(addr: u64) -> TextPokeRec {
        TextPokeRec {
            addr,
            ..TextPokeRec::default()
        }
    }

    fn batch(changes: &[(usize, u8)]) -> BatchLine {
        BatchLine {
            changes: changes.to_vec(),
            sites: changes.len() as u64,
            ..BatchLine::default()
        }
    }

    fn kinds(spec: &str, aarch64: bool) -> Vec<&'static str> {
        spec_kinds(&Shape::parse(spec).unwrap(), aarch64)
    }

    #[test]
    fn kinds_are_planned_from_the_spec() {
        assert_eq!(
            kinds("keys=6 sites=8 ftrace=16 flips=5 pokers=1", false),
            ["jmp32", "jmp8", "ret", "call"]
        );
        assert_eq!(
            kinds("keys=6 sites=8 ftrace=16 flips=5 pokers=1", true),
            ["b", "ret", "mov_x9_x30", "bl"]
        );
        assert_eq!(kinds("keys=1 sites=8 flips=51 pokers=1", true), ["b"]);
        assert_eq!(kinds("ftrace=4 flips=1", false), ["call"]);
        // Every parked kind is a key kind: the scenarios reach it.
        for k in ["ret", "mov_x9_x30"] {
            assert!(key_kinds(true).contains(&k));
        }
    }

    /// Evidence whose exerciser `result` file says how many executions of each kind ran and
    /// how many of those trapped (the CPU's word); nothing else happened.
    fn trap_evidence(counts: &[(&str, u64, u64)]) -> Evidence {
        let mut result = BTreeMap::new();
        for (kind, ran, trapped) in counts {
            result.insert(format!("executions.{kind}"), ran.to_string());
            result.insert(format!("trapped.{kind}"), trapped.to_string());
        }
        Evidence {
            run: Ok(()),
            drain: Drain::default(),
            engine: Ok(Vec::new()),
            before: Vec::new(),
            after: Vec::new(),
            result,
            batches: Vec::new(),
            execs: Vec::new(),
            stats: (BTreeMap::new(), BTreeMap::new()),
            traps: checks::TrapEvidence::Cpu,
            call_ipis: None,
        }
    }

    /// Whether `judge` of `counts` under `traps` passes its case `name`; `None` if it has none.
    fn trap_case(counts: &[(&str, u64, u64)], traps: TrapsWanted, name: &str) -> Option<bool> {
        let spec = "keys=3 sites=4 ftrace=8 flips=5 pokers=3";
        let sites = [site(0, "jmp32", 0x100)];
        let shape = Shape::parse(spec).unwrap();
        let case = judge("s", spec, &shape, traps, &trap_evidence(counts), &sites);
        let textpoke_agent::report::ktap::CaseResult::Group(children) = case.result else {
            panic!("judge returns a group");
        };
        children.iter().find(|c| c.name == name).map(Case::passed)
    }

    #[test]
    fn the_trap_path_cases_fail_when_their_kinds_did_not_trap() {
        // x86's kinds of that spec: jmp32, jmp8, ret (the keys) and call (ftrace).
        let all = [
            ("jmp32", 1000, 10),
            ("jmp8", 1000, 10),
            ("ret", 1000, 10),
            ("call", 1000, 10),
        ];
        let mut no_call = all;
        no_call[3].2 = 0;
        let mut none = all;
        for k in &mut none {
            k.2 = 0;
        }
        let mut call_never_ran = all;
        call_never_ran[3] = ("call", 0, 0);
        let each = TrapsWanted::EachKind(1);
        assert_eq!(trap_case(&all, each, "trap_path_taken_call"), Some(true));
        assert_eq!(
            trap_case(&no_call, each, "trap_path_taken_call"),
            Some(false)
        );
        assert_eq!(trap_case(&no_call, each, "trap_path_taken_ret"), Some(true));
        assert_eq!(trap_case(&all, each, "trap_path_taken"), None);
        let together = TrapsWanted::AllKinds(1);
        assert_eq!(trap_case(&no_call, together, "trap_path_taken"), Some(true));
        assert_eq!(trap_case(&none, together, "trap_path_taken"), Some(false));
        assert_eq!(
            trap_case(&call_never_ran, together, "trap_path_taken"),
            Some(false)
        );
        assert_eq!(trap_case(&all, together, "trap_path_taken_call"), None);
        let nothing = TrapsWanted::Nothing;
        assert_eq!(
            trap_case(&none, nothing, "executions_of_every_kind_ran"),
            Some(true)
        );
        assert_eq!(
            trap_case(&call_never_ran, nothing, "executions_of_every_kind_ran"),
            Some(false)
        );
    }

    #[test]
    fn traps_are_wanted_of_every_kind_unless_pokers_crowd_the_cpus() {
        let spec = Shape::parse("keys=9 sites=4 ftrace=8 flips=5 pokers=3").unwrap();
        assert_eq!(TrapsWanted::for_spec(1, &spec, 2), TrapsWanted::AllKinds(1));
        assert_eq!(TrapsWanted::for_spec(1, &spec, 3), TrapsWanted::AllKinds(1));
        assert_eq!(TrapsWanted::for_spec(1, &spec, 4), TrapsWanted::EachKind(1));
        let one = Shape::parse("keys=6 sites=8 ftrace=16 flips=5 pokers=1").unwrap();
        assert_eq!(
            TrapsWanted::for_spec(100, &one, 2),
            TrapsWanted::EachKind(100)
        );
        // No pokers named: one, as the exerciser reads it.
        let unnamed = Shape::parse("keys=1 sites=8 flips=2").unwrap();
        assert_eq!(unnamed.pokers, 1);
        assert_eq!(
            TrapsWanted::for_spec(1, &unnamed, 2),
            TrapsWanted::EachKind(1)
        );
        // Ten pokers are more than one (a substring test of "pokers=1" said otherwise).
        assert_eq!(
            Shape::parse("ftrace=4 flips=1 pokers=10").unwrap().pokers,
            10
        );
    }

    #[test]
    fn specs_the_exerciser_refuses_are_refused() {
        for spec in [
            "nonsense",
            "keys=1 sites=8",
            "keys=1 sites=8 flips=2 pokers=0",
            "keys=1 flips=2",
            "keys=1 sites=8 flips=x",
            "keys=1 sites=8 flips=2 colour=3",
        ] {
            let e = Shape::parse(spec).unwrap_err();
            assert!(e.contains(spec), "{e}");
        }
        assert!(Shape::parse("keys=1 sites=8 flips=2 avoid=1").is_ok());
    }

    #[test]
    fn the_test_suites_scenarios_use_every_kind_of_both_arches() {
        for aarch64 in [false, true] {
            let mut all: Vec<&str> = key_kinds(aarch64).to_vec();
            all.push(call_kind(aarch64));
            for (_, spec, _) in SCENARIOS {
                assert_eq!(kinds(spec, aarch64), all, "{spec}");
            }
        }
    }

    #[test]
    fn records_are_counted_per_change_site_by_site() {
        let sites = [site(0, "jmp32", 0x100), site(1, "jmp32", 0x110)];
        let batches = [batch(&[(0, 1), (1, 1)]), batch(&[(0, 0)])];
        let good = [rec(0x100), rec(0x110), rec(0x100)];
        assert!(one_record_per_change(&batches, &sites, &good).is_ok());
        // As many records in all, but one site has two for one change.
        let skewed = [rec(0x100), rec(0x100), rec(0x100)];
        assert!(one_record_per_change(&batches, &sites, &skewed).is_err());
        // One missing.
        assert!(one_record_per_change(&batches, &sites, &good[..2]).is_err());
        // No change at all is no pass.
        assert!(one_record_per_change(&[], &sites, &[]).is_err());
    }

    #[test]
    fn guards_left_in_the_text() {
        let sites = [site(0, "jmp32", 0x100), site(1, "jmp32", 0x105)];
        let mut after = vec![0x0f, 0x1f, 0x44, 0, 0, 0xe9, 1, 0, 0, 0];
        assert!(guards_left(&sites, 0x100, &after, &[0xcc]).is_empty());
        after[5] = 0xcc;
        assert_eq!(guards_left(&sites, 0x100, &after, &[0xcc]), [0x105]);
    }

    #[test]
    fn trap_bits_must_agree() {
        let result = |seen: u64, counted: u64| -> BTreeMap<String, String> {
            BTreeMap::from([
                ("seen_only.jmp32".to_owned(), seen.to_string()),
                ("counted_only.jmp32".to_owned(), counted.to_string()),
            ])
        };
        assert_eq!(
            trap_bits_disagree(&result(0, 0), &["jmp32"], &[]),
            Ok((0, 0))
        );
        assert_eq!(
            trap_bits_disagree(&result(2, 1), &["jmp32"], &[]),
            Ok((2, 1))
        );
        // A counter the executor does not show is an error, not a zero.
        assert!(trap_bits_disagree(&result(0, 0), &["jmp32", "jmp8"], &[]).is_err());
        // Logged executions count too.
        let e = ExecRecord {
            trap: textpoke_agent::platform::uapi::TRAP_COUNTED,
            ..ExecRecord::default()
        };
        assert_eq!(
            trap_bits_disagree(&result(0, 0), &["jmp32"], &[e]),
            Ok((0, 1))
        );
    }
}
