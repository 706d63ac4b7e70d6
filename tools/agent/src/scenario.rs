//! One scenario: run it with a perf recorder on every CPU and `/proc/kcore` snapshots around
//! it, then judge the evidence.
//!
//! Every check compares the engine's work with evidence the engine does not produce: the
//! records as perf delivered them, the text itself through `/proc/kcore`, and the executions as
//! the exerciser's executors observed them (paths taken, traps seen on their own CPU). The
//! engine's own log of records is compared too, but only as one more check, never as the
//! reference.

use std::collections::{BTreeMap, HashSet};
use textpoke_agent::checks;
use textpoke_agent::exerciser::{self, BatchLine, Site};
use textpoke_agent::kcore::Kcore;
use textpoke_agent::ktap::Case;
use textpoke_agent::observer;
use textpoke_agent::perf::{self, Drain, Recorder, RecorderConfig, TextPokeRec};
use textpoke_agent::sys;
use textpoke_agent::uapi::ExecRecord;
use textpoke_core::record::SampleIdLayout;

use crate::log;

/// textpoke's counters.
const ENGINE_STATS: &str = "/sys/kernel/debug/textpoke/stats";

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
        Ok(checks::check_ordering(sites, &lines, &windows, &self.execs))
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
    let run = exerciser::command(&format!("run {spec}"));
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
    };
    Ok((ev, observed))
}

/// Runs a scenario and judges it, as a KTAP subtest.
pub fn case(name: &str, spec: &str, sites: &[Site], kcore: &Kcore) -> Case {
    match run(spec, sites, kcore) {
        Ok(ev) => judge(name, spec, &ev, sites),
        Err(e) => Case::fail(name, e),
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

/// The checks of one scenario's evidence.
pub fn judge(name: &str, spec: &str, ev: &Evidence, sites: &[Site]) -> Case {
    let ours = ev.site_pokes(sites);
    let (base, _) = region(sites);
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
    let changed: u64 = ev.batches.iter().map(|b| b.sites).sum();
    children.push(Case::check(
        "one_record_per_site_change",
        ours.len() as u64 == changed && changed > 0,
        format!("{} records for {changed} site changes", ours.len()),
    ));
    children.push(
        match checks::records_match_text(sites, base, &ev.before, &ev.after, &ours) {
            Ok(n) => Case::pass("records_match_text").with_log(format!(
                "{n} records chain from the text before to the text after"
            )),
            Err(e) => Case::fail("records_match_text", e),
        },
    );
    children.push(match &ev.engine {
        Ok(engine) => match checks::same_pokes("perf", &ours, "engine log", engine) {
            Ok(n) => {
                Case::pass("records_match_engine_log").with_log(format!("{n} records matched"))
            }
            Err(e) => Case::fail("records_match_engine_log", e),
        },
        Err(e) => Case::fail("records_match_engine_log", e.clone()),
    });
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
                    "{} violations in {} executions: {:?}",
                    r.violations, r.checked, r.examples
                ),
            )
            .with_log(format!(
                "{} executions checked against {} records",
                r.checked,
                ours.len()
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
    for key in ev.result.keys() {
        let Some(kind) = key.strip_prefix("executions.") else {
            continue;
        };
        if ev.result(key).unwrap_or(0) == 0 {
            continue;
        }
        let trapped = ev.result(&format!("trapped.{kind}"));
        children.push(if parked_kinds().contains(&kind) {
            zero(
                &format!("parked_never_trapped_{kind}"),
                trapped,
                "executions trapped on a site only ever changed with the other CPUs parked",
            )
        } else {
            match trapped {
                Ok(n) => Case::check(
                    format!("trap_path_taken_{kind}"),
                    n > 0,
                    format!("no {kind} execution trapped: the guarded window was never hit"),
                ),
                Err(e) => Case::fail(format!("trap_path_taken_{kind}"), e),
            }
        });
    }
    if spec.contains("pokers=") && !spec.contains("pokers=1") {
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
    children.push(zero(
        "no_late_traps",
        ev.result("late_traps"),
        "executions outside batches trapped on a guard",
    ));
    children.push(zero(
        "no_vanished_guards",
        ev.stat_delta("traps.vanished_guard"),
        "traps on guards already replaced",
    ));
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
