//! Negative controls: every guest check shown to fail when what it checks is broken.
//!
//! Each control loads the debug build of textpoke (`CONFIG_TEXTPOKE_DEBUG_PROTOCOL`, the only
//! build with the `debug_protocol` switch; kernel/debug.rs), selects one seeded defect, runs a
//! scenario under the same load the correct engine passes, and passes only if the check that
//! claims to cover the defect fails on it. Each control starts from freshly loaded modules, so
//! that a defect that leaves text and registry apart cannot leak into the next.

use std::collections::{BTreeMap, BTreeSet};
use textpoke_agent::oracle::checks::{self, Violation};
use textpoke_agent::oracle::observer;
use textpoke_agent::platform::exerciser::{self, Site};
use textpoke_agent::platform::guest::{self, load, MODULES};
use textpoke_agent::platform::kcore::Kcore;
use textpoke_agent::platform::sys;
use textpoke_agent::report::ktap::{Case, CaseResult};
use textpoke_core::defects::{self, SeededDefect};
use textpoke_core::refusal;

use crate::scenarios::kernel_patching;
use crate::scenarios::outsider;
use crate::scenarios::scenario::{self, region, Evidence};

/// The debug build of textpoke, packed next to the production one (tools/guests.sh).
pub const DEBUG_TEXTPOKE: &str = "debug/textpoke";

/// The load the defects must be caught under: keys of several sites each, so that a trap can
/// emulate another site's instruction, and an odd number of flips, so that the text changes.
const SPEC: &str = "keys=4 sites=8 ftrace=16 flips=3 pokers=1";

/// A seeded defect and the check that must catch it.
struct Control {
    /// The defect, whose `caught_by` names this control's case (kernel/defects.rs).
    defect: SeededDefect,
    /// The check that must fail: `Ok(what it found)` if it did, `Err(why not)` if it passed.
    caught: fn(&Evidence, &[Site]) -> Result<String, String>,
}

/// A run under a defect proves something only if perf delivered every record: a lost record
/// would pass for a dropped one, and break the replay as a skipped write does.
fn drained_clean(ev: &Evidence) -> Result<(), String> {
    let d = &ev.drain;
    if !d.is_clean() || d.lost_records > 0 {
        return Err(format!(
            "perf lost {} records ({} events, {} full buffers, errors {:?}): the run proves nothing",
            d.lost_records, d.lost_events, d.full_buffers, d.errors
        ));
    }
    if ev.batches.is_empty() {
        return Err("the scenario made no batch".into());
    }
    Ok(())
}

/// [`drained_clean`], and the scenario completed: every batch committed.
fn completed_clean(ev: &Evidence) -> Result<(), String> {
    if let Err(errno) = ev.run {
        return Err(format!(
            "the scenario failed (errno {errno}) before its checks could judge it"
        ));
    }
    if let Some(b) = ev.batches.iter().find(|b| b.errno != 0) {
        return Err(format!("a batch failed with errno {}: {b:?}", b.errno));
    }
    drained_clean(ev)
}

/// The sites a step-skipping or record defect hits: in each batch, its first change in
/// address order that is not made with the other CPUs parked (kernel/batch.rs: the engine
/// sorts a batch's changes by address, and its victim is the first guarded one). One entry
/// per batch that has one; a site may be the victim of several batches.
pub fn victims(ev: &Evidence, sites: &[Site]) -> Vec<usize> {
    let parked = scenario::parked_kinds();
    ev.batches
        .iter()
        .filter_map(|b| {
            b.changes
                .iter()
                .filter_map(|&(i, _)| sites.get(i))
                .filter(|s| !parked.contains(&s.kind.as_str()))
                .min_by_key(|s| s.addr)
                .map(|s| s.index)
        })
        .collect()
}

/// The victim site (see [`victims`]) whose text covers `addr`.
fn victim_at(ev: &Evidence, sites: &[Site], addr: u64) -> Option<usize> {
    victims(ev, sites).into_iter().find(|&i| {
        sites
            .get(i)
            .is_some_and(|s| (s.addr..s.addr + s.len as u64).contains(&addr))
    })
}

/// The ordering checker must find violations of kind `signature` (the defect's own), in a run
/// that completed with every record, and only on sites the run's batches changed.
fn ordering_signature(
    ev: &Evidence,
    sites: &[Site],
    signature: Violation,
) -> Result<String, String> {
    completed_clean(ev)?;
    let r = ev.ordering(sites)?;
    let changed: BTreeSet<usize> = ev
        .batches
        .iter()
        .flat_map(|b| b.changes.iter().map(|&(i, _)| i))
        .collect();
    let elsewhere: Vec<usize> = r
        .violating_sites
        .keys()
        .copied()
        .filter(|i| !changed.contains(i))
        .collect();
    if !elsewhere.is_empty() || r.count(Violation::UnknownSite) > 0 {
        return Err(format!(
            "violations on sites no batch of the run changed: {elsewhere:?} ({} of unknown sites)",
            r.count(Violation::UnknownSite)
        ));
    }
    let n = r.count(signature);
    if n == 0 {
        return Err(format!(
            "no {signature:?} violation in {} executions (violations by kind: {:?})",
            r.checked, r.by_violation
        ));
    }
    Ok(format!(
        "the ordering checker found {n} {signature:?} violations in {} executions, on {} sites the batches changed (all violations by kind: {:?})",
        r.checked,
        r.violating_sites.len(),
        r.by_violation
    ))
}

fn emulate_old_caught(ev: &Evidence, sites: &[Site]) -> Result<String, String> {
    ordering_signature(ev, sites, Violation::TrappedAsOld)
}

fn emulate_other_caught(ev: &Evidence, sites: &[Site]) -> Result<String, String> {
    ordering_signature(ev, sites, Violation::TrappedAsOtherSite)
}

fn unguarded_caught(ev: &Evidence, sites: &[Site]) -> Result<String, String> {
    ordering_signature(ev, sites, Violation::AheadOfRecord)
}

/// The kcore replay must fail at the text of the defect's victim (see [`victims`]). The run
/// need not complete: the engine reads the guards back before it writes the heads, finds the
/// victim's missing, and fails its batch with `EIO` (the text changed behind its back), which
/// ends the scenario; any other failure fails the control.
fn skipped_write_caught(ev: &Evidence, sites: &[Site]) -> Result<String, String> {
    drained_clean(ev)?;
    let eio = i64::from(refusal::TEXT_CHANGED.errno);
    if let Some(b) = ev.batches.iter().find(|b| b.errno != 0 && b.errno != eio) {
        return Err(format!(
            "a batch failed with errno {}, not the defect's EIO: {b:?}",
            b.errno
        ));
    }
    if ev.run.is_err() && ev.batches.iter().all(|b| b.errno == 0) {
        return Err(format!(
            "the scenario failed ({:?}) with every batch committed",
            ev.run
        ));
    }
    let (base, _) = region(sites);
    match checks::replay_checked(base, &ev.before, &ev.after, &ev.site_pokes(sites)) {
        Ok(n) => Err(format!("the kcore replay of {n} records was exact")),
        Err(f) => match victim_at(ev, sites, f.addr()) {
            Some(i) => Ok(format!(
                "the kcore replay failed at the defect's victim, site {i}: {f}"
            )),
            None => Err(format!(
                "the kcore replay failed at {:#x}, no victim of the defect ({:?}): {f}",
                f.addr(),
                victims(ev, sites)
            )),
        },
    }
}

/// Per site: changes the exerciser asked for, minus records perf delivered.
fn missing_records(ev: &Evidence, sites: &[Site]) -> BTreeMap<usize, i64> {
    let mut out: BTreeMap<usize, i64> = BTreeMap::new();
    for b in &ev.batches {
        for &(i, _) in &b.changes {
            *out.entry(i).or_default() += 1;
        }
    }
    for p in ev.site_pokes(sites) {
        if let Some(s) = sites.iter().find(|s| s.addr == p.addr) {
            *out.entry(s.index).or_default() -= 1;
        }
    }
    out.retain(|_, n| *n != 0);
    out
}

/// One record dropped per batch (defect 8): the record check and the kcore replay must both
/// fail at a victim's text, in a run that completed with every record perf was given, and the
/// records missing must be exactly one per batch, each at that batch's victim.
fn dropped_record_caught(ev: &Evidence, sites: &[Site]) -> Result<String, String> {
    completed_clean(ev)?;
    let (base, _) = region(sites);
    let ours = ev.site_pokes(sites);
    let mut expected: BTreeMap<usize, i64> = BTreeMap::new();
    for v in victims(ev, sites) {
        *expected.entry(v).or_default() += 1;
    }
    let missing = missing_records(ev, sites);
    if missing != expected {
        return Err(format!(
            "records missing per site {missing:?}, not one per batch at its victim {expected:?}"
        ));
    }
    let record = match checks::records_match_text_checked(sites, base, &ev.before, &ev.after, &ours)
    {
        Ok(n) => {
            return Err(format!(
                "the record check accepted {n} records against the text"
            ))
        }
        Err(m) if victim_at(ev, sites, m.addr()).is_some() => m,
        Err(m) => return Err(format!("the record check failed off the victims: {m}")),
    };
    let replay = match checks::replay_checked(base, &ev.before, &ev.after, &ours) {
        Ok(n) => return Err(format!("the kcore replay of {n} records was exact")),
        Err(f) if victim_at(ev, sites, f.addr()).is_some() => f,
        Err(f) => return Err(format!("the kcore replay failed off the victims: {f}")),
    };
    Ok(format!(
        "{} records for {} changes, one missing per batch at its victim; the record check: {record}; the replay: {replay}",
        ours.len(),
        ev.batches.iter().map(|b| b.changes.len()).sum::<usize>()
    ))
}

/// A record with wrong old bytes per batch (defect 9): the record check must find a record's
/// old bytes are not the text, at a victim, in a run that completed with every record.
fn wrong_old_bytes_caught(ev: &Evidence, sites: &[Site]) -> Result<String, String> {
    completed_clean(ev)?;
    let (base, _) = region(sites);
    match checks::records_match_text_checked(
        sites,
        base,
        &ev.before,
        &ev.after,
        &ev.site_pokes(sites),
    ) {
        Ok(n) => Err(format!(
            "the record check accepted {n} records against the text"
        )),
        Err(m @ checks::RecordMismatch::OldBytes { .. })
            if victim_at(ev, sites, m.addr()).is_some() =>
        {
            Ok(format!("the record check failed at a victim: {m}"))
        }
        Err(m) => Err(format!(
            "the record check failed, but not on a victim's old bytes: {m}"
        )),
    }
}

const CONTROLS: &[Control] = &[
    Control {
        defect: defects::EMULATE_OLD,
        caught: emulate_old_caught,
    },
    Control {
        defect: defects::EMULATE_OTHER,
        caught: emulate_other_caught,
    },
    Control {
        defect: defects::UNGUARDED_NOSYNC,
        caught: unguarded_caught,
    },
    Control {
        defect: defects::SKIP_FINAL_WRITE,
        caught: skipped_write_caught,
    },
    Control {
        defect: defects::DROP_RECORD,
        caught: dropped_record_caught,
    },
    Control {
        defect: defects::WRONG_OLD_BYTES,
        caught: wrong_old_bytes_caught,
    },
];

/// The exerciser's parameters for the controls: [`SPEC`] uses at most 16 sites of a pool (arm64
/// has two key kinds, so two keys of 8 sites each share one; ftrace takes 16 call sites), and
/// registering all ~5000 sites at each of the controls' loads took about 4 s of a TCG boot per
/// load. A pool too small for the scenario fails the control, never passes it: the exerciser
/// refuses the scenario (`EINVAL`, "not enough ... sites").
const CONTROL_EXERCISER_PARAMS: &str = "pool_sites=32";

/// Unloads the exerciser and textpoke, then loads `textpoke` (a path below the modules
/// directory) and the exerciser again, with `exerciser_params`.
pub fn reload(textpoke: &str, exerciser_params: &str) -> Result<Vec<Site>, String> {
    for m in ["textpoke_exerciser", "textpoke"] {
        // Absent is fine: a failed control may have left either out.
        if let Err(e) = sys::unload_module(m) {
            if e.raw_os_error() != Some(libc::ENOENT) {
                return Err(format!("unloading {m}: {e}"));
            }
        }
    }
    load(textpoke, "")?;
    load("textpoke_exerciser", exerciser_params)?;
    exerciser::sites().map_err(|e| format!("sites: {e}"))
}

/// x86: textpoke claiming a foreign `INT3` (defect 10) is caught by the outsider's own die
/// notifier, which no longer sees all of its traps. (On arm64 the patch series hands textpoke
/// only `BRK #0x008`, so no other breakpoint can reach it; the boot-level check of a foreign
/// `BRK #0x008` is in the runner's matrix: `harness-foreign-brk*`.)
fn foreign_int3_control() -> Case {
    const NAME: &str = defects::SWALLOW_FOREIGN.caught_by;
    const RUNS: u64 = 100;
    let run = || -> Result<String, String> {
        let sites = reload(DEBUG_TEXTPOKE, CONTROL_EXERCISER_PARAMS)?;
        let site = sites
            .iter()
            .find(|s| s.kind == "jmp32")
            .ok_or("no jmp32 site")?;
        load("textpoke_outsider", &format!("foreign={:#x}", site.addr))?;
        let dir = "/sys/kernel/debug/textpoke_outsider";
        let mode = defects::SWALLOW_FOREIGN.mode;
        sys::set_module_param("textpoke", "debug_protocol", &mode.to_string())
            .map_err(|e| format!("setting debug_protocol={mode}: {e}"))?;
        let ran = sys::write_file(format!("{dir}/control"), format!("int3 {RUNS}").as_bytes());
        sys::set_module_param("textpoke", "debug_protocol", "0")
            .map_err(|e| format!("resetting debug_protocol: {e}"))?;
        ran.map_err(|e| format!("running the INT3s: {e}"))?;
        let counters = sys::read_text(format!("{dir}/counters"))
            .map(|t| exerciser::key_values(&t))
            .map_err(|e| format!("outsider counters: {e}"))?;
        let seen = exerciser::number(&counters, "int3_seen")?;
        sys::unload_module("textpoke_outsider").map_err(|e| format!("unloading outsider: {e}"))?;
        swallowed(seen, RUNS)
    };
    match run() {
        Ok(found) => Case::pass(NAME).with_log(found),
        Err(e) => Case::fail(NAME, e),
    }
}

/// The INT3 control's verdict: the defect claims every trap at a guard instruction, so the
/// outsider's notifier must have seen none of its `runs` INT3s. Some but not all is another
/// fault (textpoke's handler claiming some traps), and all of them is no catch.
fn swallowed(seen: u64, runs: u64) -> Result<String, String> {
    match seen {
        _ if runs == 0 => Err("no INT3 ran: the control proves nothing".into()),
        0 => Ok(format!(
            "textpoke swallowed all {runs} of the outsider's INT3s: its notifier saw none"
        )),
        n if n >= runs => Err(format!(
            "not caught: the outsider's notifier saw all {runs} INT3s"
        )),
        n => Err(format!(
            "the outsider's notifier saw {n} of its {runs} INT3s: not the defect's signature (every one swallowed)"
        )),
    }
}

/// An engine that lets sites onto other patchers' text (defect 11) is caught by the outsider's
/// verdicts: registering over its jump label entry, its ftrace site and a kprobed address, and
/// changing a site a kprobe registered disabled has copied, must each be refused with
/// `ETXTBSY`. Each of the four is a request textpoke would grant but for the other patcher
/// (samples/textpoke_outsider.c), so under the defect each must give exactly 0: any other
/// errno is some other refusal, and catches nothing. On x86 the optimized-kprobe race, run with
/// nothing executing the function (the defect may tear it), must also have had commits go
/// through while a probe's copy of the site stood.
fn other_patchers_control() -> Case {
    const NAME: &str = defects::IGNORE_OTHER_PATCHERS.caught_by;
    const OWNED: [&str; 4] = [
        "register_jump_label_site",
        "register_ftrace_site",
        "register_kprobed_site",
        "change_under_disabled_kprobe",
    ];
    let run = || -> Result<String, String> {
        let sites = reload(DEBUG_TEXTPOKE, CONTROL_EXERCISER_PARAMS)?;
        let branch = if guest::is_x86() { "jmp32" } else { "b" };
        let foreign = sites
            .iter()
            .find(|s| s.kind == branch)
            .ok_or("no branch site")?
            .addr;
        let mode = defects::IGNORE_OTHER_PATCHERS.mode;
        sys::set_module_param("textpoke", "debug_protocol", &mode.to_string())
            .map_err(|e| format!("setting debug_protocol={mode}: {e}"))?;
        let cursor = sys::dmesg_cursor().unwrap_or_default();
        let loaded = load("textpoke_outsider", &format!("foreign={foreign:#x}"));
        let lines = sys::dmesg_since(cursor).map(|(l, _)| l).unwrap_or_default();
        let raced = match (&loaded, guest::is_x86()) {
            (Ok(_), true) => Some(outsider::optprobe_unexecuted(outsider::OPTPROBE_UNEXECUTED)),
            _ => None,
        };
        sys::set_module_param("textpoke", "debug_protocol", "0")
            .map_err(|e| format!("resetting debug_protocol: {e}"))?;
        loaded?;
        sys::unload_module("textpoke_outsider").map_err(|e| format!("unloading outsider: {e}"))?;
        let verdicts = outsider::verdict_lines(&lines);
        let owned = registered_over_owners(&verdicts, &OWNED)?;
        match raced {
            None => Ok(owned),
            Some(raced) => {
                let raced = raced?;
                Ok(format!(
                    "{owned}; {}",
                    changed_under_copy(&outsider::verdict_lines(&raced))?
                ))
            }
        }
    };
    match run() {
        Ok(found) => Case::pass(NAME).with_log(found),
        Err(e) => Case::fail(NAME, e),
    }
}

/// The unexecuted optimized-kprobe race's verdict: caught if commits went through while a
/// probe's copy of the site stood, which only an engine that ignores kprobes lets happen.
fn changed_under_copy(verdicts: &[(&str, &str, &str)]) -> Result<String, String> {
    const NAME: &str = "optprobe_race_commits_under_copy";
    let got: Vec<&str> = verdicts
        .iter()
        .filter(|(n, _, _)| *n == NAME)
        .map(|(_, got, _)| *got)
        .collect();
    match got.as_slice() {
        [n] if n.parse::<u32>().is_ok_and(|n| n > 0) => Ok(format!(
            "{n} commits went through under an optimized probe's copy of the site"
        )),
        _ => Err(format!(
            "not caught: {NAME} should count commits under a probe's copy once, and gave {got:?}"
        )),
    }
}

/// The verdicts of `owned` (registrations over other patchers' text): caught if every one is
/// there, once, and registered (0).
fn registered_over_owners(
    verdicts: &[(&str, &str, &str)],
    owned: &[&str],
) -> Result<String, String> {
    let got: Vec<(&str, Vec<&str>)> = owned
        .iter()
        .map(|name| {
            let v = verdicts
                .iter()
                .filter(|(n, _, _)| n == name)
                .map(|(_, got, _)| *got)
                .collect();
            (*name, v)
        })
        .collect();
    if got.iter().all(|(_, v)| v.as_slice() == ["0"]) {
        Ok(format!(
            "textpoke granted all {} requests over other patchers' text: {}",
            owned.len(),
            owned.join(", ")
        ))
    } else {
        Err(format!(
            "not caught: not every request over another patcher's text gave 0: {got:?} ({} verdict lines)",
            verdicts.len()
        ))
    }
}

/// A module batch that lets go of `text_mutex` between finding no listener and writing (the
/// seeded defect) must break a mid-storm listener's copy: the listener check of
/// `scenarios/listener.rs`, with nobody else listening and the exerciser's batches alone, must
/// fail on a record or on the copy's end.
fn listener_handshake_control(kcore: &Kcore) -> Case {
    const NAME: &str = defects::SKIP_LISTENER_HANDSHAKE.caught_by;
    let run = || -> Result<String, String> {
        let (_, outcome) = under_defect(defects::SKIP_LISTENER_HANDSHAKE.mode, |sites| {
            Ok(crate::scenarios::listener::mid_storm(
                kcore,
                sites,
                crate::scenarios::listener::Storm::ModuleOnly,
                None,
            ))
        })?;
        handshake_caught(outcome)
    };
    match run() {
        Ok(found) => Case::pass(NAME).with_log(found),
        Err(e) => Case::fail(NAME, e),
    }
}

/// A guarded module batch that lets go of `text_mutex` across its syncs after its records too
/// (the seeded defect, pausing there) must break the second listener's copy in
/// `two_listeners_mid_storm` (scenarios/listener.rs): on x86 it arrives across the sync between
/// a site's record and its head and copies a guard whose record it missed. x86 only: arm64
/// writes each site right after its records, before any sync, so the defect opens no window
/// there (the listener model finds none either).
fn text_released_after_record_control(kcore: &Kcore) -> Case {
    const NAME: &str = defects::RELEASE_TEXT_AFTER_RECORD.caught_by;
    let run = || -> Result<String, String> {
        let (_, outcome) = under_defect(defects::RELEASE_TEXT_AFTER_RECORD.mode, |sites| {
            Ok(crate::scenarios::listener::two_listeners(kcore, sites))
        })?;
        handshake_caught(outcome)
    };
    match run() {
        Ok(found) => Case::pass(NAME).with_log(found),
        Err(e) => Case::fail(NAME, e),
    }
}

/// One record dropped per batch (defect 8) must also fail the listener's floor: with a listener
/// open, each change the kernel's batches made (kcore read while the tracer was on says which)
/// must have its records. The replay after it cannot tell, since the run leaves the text as it
/// found it.
fn listener_floor_control(kcore: &Kcore) -> Case {
    const NAME: &str = "control_dropped_record_caught_by_listener_floor";
    let run = || -> Result<String, String> {
        let (_, case) = under_defect(defects::DROP_RECORD.mode, |sites| {
            Ok(crate::scenarios::listener::guarded_case(kcore, sites))
        })?;
        floor_caught(&case.result)
    };
    match run() {
        Ok(found) => Case::pass(NAME).with_log(found),
        Err(e) => Case::fail(NAME, e),
    }
}

/// The floor control's verdict: caught only when the listener's case failed on its floor.
fn floor_caught(result: &CaseResult) -> Result<String, String> {
    use crate::scenarios::listener::UNRECORDED_KERNEL_CHANGES;
    match result {
        CaseResult::Fail(e) if e.contains(UNRECORDED_KERNEL_CHANGES) => Ok(format!("caught: {e}")),
        CaseResult::Fail(e) => Err(format!("the check failed, but not on its floor: {e}")),
        other => Err(format!("not caught: {other:?}")),
    }
}

/// The handshake control's verdict on the mid-storm listener check's outcome: caught only when
/// it failed on the listener's copy (its kcore snapshot plus records against the text), not
/// for any other reason.
fn handshake_caught(outcome: Result<String, String>) -> Result<String, String> {
    match outcome {
        Err(e) if e.contains(crate::scenarios::listener::COPY) => Ok(format!("caught: {e}")),
        Err(e) => Err(format!(
            "the check failed, but not on the listener's copy: {e}"
        )),
        Ok(line) => Err(format!("not caught: {line}")),
    }
}

/// Reloads the debug build, runs `f` on its sites with `debug_protocol=mode`, and sets the
/// switch back to 0 whatever `f` returned. Returns the sites and `f`'s result.
fn under_defect<T>(
    mode: i32,
    f: impl FnOnce(&[Site]) -> Result<T, String>,
) -> Result<(Vec<Site>, T), String> {
    let sites = reload(DEBUG_TEXTPOKE, CONTROL_EXERCISER_PARAMS)?;
    sys::set_module_param("textpoke", "debug_protocol", &mode.to_string())
        .map_err(|e| format!("setting debug_protocol={mode}: {e}"))?;
    let out = f(&sites);
    sys::set_module_param("textpoke", "debug_protocol", "0")
        .map_err(|e| format!("resetting debug_protocol: {e}"))?;
    Ok((sites, out?))
}

/// The breakpoint observer alone (scenarios/observed.rs) must catch the unguarded "nosync"
/// writes: it sees the new instruction run before its record with no guard at the site. Nothing
/// from the exerciser's executors goes into its verdict.
fn observer_control(kcore: &Kcore) -> Case {
    const NAME: &str = "control_unguarded_nosync_caught_by_observer";
    const MODE: i32 = defects::UNGUARDED_NOSYNC.mode;
    let run = || -> Result<String, String> {
        let (_, o) = under_defect(MODE, |sites| {
            crate::scenarios::observed::run(crate::scenarios::observed::CONTROL_SPEC, sites, kcore)
        })?;
        observer_caught(&o.ev, &o.collected, &o.verdicts)
    };
    match run() {
        Ok(found) => Case::pass(NAME)
            .with_log(format!(
                "debug_protocol={MODE} under {}",
                crate::scenarios::observed::CONTROL_SPEC
            ))
            .with_log(found),
        Err(e) => Case::fail(NAME, e),
    }
}

/// The observer control's verdict: violations the observer saw, in a run that proves
/// something: every batch committed, perf lost no record (a lost record makes a correct write
/// look unrecorded) and the observer lost no hit and stopped on no error.
fn observer_caught(
    ev: &Evidence,
    c: &observer::Collected,
    v: &observer::Verdicts,
) -> Result<String, String> {
    completed_clean(ev)?;
    let line = crate::scenarios::observed::summary(c, v);
    if let Some(e) = &c.error {
        return Err(format!("the observer stopped on an error ({e}): {line}"));
    }
    if c.lost > 0 || c.bad > 0 {
        return Err(format!("the observer lost hits: {line}"));
    }
    if v.violations > 0 {
        Ok(format!("{line}; first: {:?}", v.examples.first()))
    } else {
        Err(format!("not caught: {line}"))
    }
}

/// The BEFORE/AFTER pair first proposed on LKML (debug mode 4; docs/protocol.md) watched by the observer: how many executions
/// ended between a site's two records, where the records cannot say which instruction ran. The
/// single guarded record leaves no such interval (the host model's figures: docs/protocol.md).
fn before_after_observed(kcore: &Kcore) -> Case {
    const NAME: &str = defects::BEFORE_AFTER.caught_by;
    const MODE: i32 = defects::BEFORE_AFTER.mode;
    let run = || -> Result<String, String> {
        let (sites, o) = under_defect(MODE, |sites| {
            crate::scenarios::observed::run(crate::scenarios::observed::CONTROL_SPEC, sites, kcore)
        })?;
        before_after_caught(&o.ev, &sites, &o.watched, &o.collected, &o.verdicts)
    };
    match run() {
        Ok(found) => Case::pass(NAME).with_log(found),
        Err(e) => Case::fail(NAME, e),
    }
}

/// The BEFORE/AFTER control's verdict: some observed execution ended between a site's two
/// records, in a run whose records all arrived (a lost one would unpair the others).
fn before_after_caught(
    ev: &Evidence,
    sites: &[Site],
    watched: &[observer::Watched],
    c: &observer::Collected,
    v: &observer::Verdicts,
) -> Result<String, String> {
    completed_clean(ev)?;
    let intervals = observer::before_after_intervals(&ev.site_pokes(sites));
    let pairs: usize = intervals.values().map(Vec::len).sum();
    let [off, on] = observer::inside_intervals(watched, &intervals, &c.hits);
    let line = format!(
        "{pairs} BEFORE/AFTER pairs; {} of {} observed executions ended inside one ({off} took path 0, {on} path 1); {}",
        off + on,
        v.classified(),
        crate::scenarios::observed::summary(c, v)
    );
    if pairs > 0 && off + on > 0 {
        Ok(line)
    } else {
        Err(format!("not caught: {line}"))
    }
}

fn control(c: &Control, kcore: &Kcore) -> Case {
    let run = || -> Result<(String, Vec<String>), String> {
        let (sites, ev) = under_defect(c.defect.mode, |sites| scenario::run(SPEC, sites, kcore))?;
        let notes = vec![format!("debug_protocol={} under {SPEC}", c.defect.mode)];
        match (c.caught)(&ev, &sites) {
            Ok(found) => Ok((found, notes)),
            Err(why) => Err(format!("not caught: {why}")),
        }
    };
    match run() {
        Ok((found, notes)) => notes
            .into_iter()
            .fold(Case::pass(c.defect.caught_by), Case::with_log)
            .with_log(found),
        Err(e) => Case::fail(c.defect.caught_by, e),
    }
}

/// Runs the kernel check `check` under one record dropped per batch (defect 8, which kernel
/// batches get too), reloads the correct engine, runs `after` (to put things back through it),
/// and passes only if the check found its records disagreeing with the text: a check that
/// passed, or failed for another reason (a module that did not load, perf losing records),
/// caught nothing.
fn kernel_record_control(
    name: &str,
    check: impl FnOnce() -> kernel_patching::KernelCheck,
    after: impl FnOnce(),
) -> Case {
    let run = || -> Result<String, String> {
        let (_, outcome) = under_defect(defects::DROP_RECORD.mode, |_| Ok(check()))?;
        reload("textpoke", CONTROL_EXERCISER_PARAMS)?;
        after();
        kernel_caught(outcome)
    };
    match run() {
        Ok(found) => Case::pass(name).with_log(found),
        Err(e) => Case::fail(name, e),
    }
}

/// Whether a kernel check under the record defect caught it: only records that disagree with
/// the text do.
fn kernel_caught(outcome: kernel_patching::KernelCheck) -> Result<String, String> {
    match outcome {
        kernel_patching::KernelCheck::RecordsDisagree(why) => {
            Ok(format!("the records disagree with the text: {why}"))
        }
        kernel_patching::KernelCheck::Passed(line) => Err(format!("not caught: it passed: {line}")),
        kernel_patching::KernelCheck::Failed(e) => {
            Err(format!("not caught: it failed for another reason: {e}"))
        }
    }
}

/// The write-failure matrix: a batch of [`FAULT_SPEC`]'s sites under executors, committed once
/// whole and then once with each of its writes failing in turn (`textpoke.fail_write=k`, debug
/// builds), and once with `k` past its last write. A failed commit must return `EIO` and leave
/// every site whole, old where no record went out and new where one did, with no guard left
/// and the records replaying onto kcore; the executors must see no execution break the
/// ordering invariant, and the next batch must go through.
fn fault_injection_matrix(kcore: &Kcore) -> Case {
    const NAME: &str = "write_failure_recovered_at_every_write";
    let run = || -> Result<(String, Vec<String>), String> {
        let sites = reload(DEBUG_TEXTPOKE, CONTROL_EXERCISER_PARAMS)?;
        let set = |k: u32| {
            sys::set_module_param("textpoke", "fail_write", &k.to_string())
                .map_err(|e| format!("setting fail_write={k}: {e}"))
        };
        // The batch's writes, from one run without a failure.
        let whole = scenario::run(FAULT_SPEC, &sites, kcore)?;
        let writes = match whole.batches.as_slice() {
            [b] if b.errno == 0 && b.writes > 0 => b.writes,
            other => return Err(format!("the run without a failure: {other:?}")),
        };
        let mut rows = Vec::new();
        let mut bad = Vec::new();
        for k in 1..=writes + 1 {
            set(k as u32)?;
            let ev = scenario::run(FAULT_SPEC, &sites, kcore);
            set(0)?;
            let ev = ev?;
            match fault_verdict(&ev, &sites, k <= writes) {
                Ok(row) => rows.push(format!("fail_write={k}: {row}")),
                Err(e) => bad.push(format!("fail_write={k}: {e}")),
            }
        }
        // The sites are as textpoke's registry has them: one more batch goes through.
        let after = scenario::run(FAULT_SPEC, &sites, kcore)?;
        if after.run.is_err() {
            bad.push(format!(
                "the batch after the matrix failed: {:?}",
                after.run
            ));
        }
        if bad.is_empty() {
            Ok((
                format!("{writes} writes per batch; every failure recovered"),
                rows,
            ))
        } else {
            Err(bad.join("; "))
        }
    };
    match run() {
        Ok((found, rows)) => rows
            .into_iter()
            .fold(Case::pass(NAME).with_log(found), Case::with_log),
        Err(e) => Case::fail(NAME, e),
    }
}

/// What [`listener_in_recovery`] checks, by name, and the control that must see it fail.
const LISTENER_IN_RECOVERY: &str = "listener_started_in_recovery_gets_a_true_copy";

/// A listener that starts while a failed batch recovers gets a copy that its records keep
/// right: the batch's last write (a head, behind a guard whose record went out) fails, and
/// recovery waits a second (`fail_pause_ms`, debug builds) before it writes the head; a
/// recorder opens as soon as the failure is logged, copies the sites through kcore, and
/// collects records until the batch is over. Its copy, replayed, must end equal to the text
/// (`scenarios/listener.rs`'s [`replay`](crate::scenarios::listener::replay)). A batch that
/// lets go of `text_mutex` while it recovers lets the listener be counted in the pause: its
/// copy holds the guard, and the head that recovery then writes has no record.
///
/// Runs on the debug build (loaded by the caller), with a listener of its own so that the batch
/// is guarded, and puts both parameters back whatever happens.
fn listener_in_recovery(kcore: &Kcore, sites: &[Site]) -> Result<String, String> {
    use crate::scenarios::listener::{replay, COPY};
    use textpoke_agent::platform::perf::{Listener, Recorder, RecorderConfig};
    use textpoke_agent::platform::sys::monotonic_ns;
    const PAUSE_MS: u32 = 1000;
    let _listening = Listener::open().map_err(|e| format!("opening a listener: {e}"))?;
    let whole = scenario::run(FAULT_SPEC, sites, kcore)?;
    let writes = match whole.batches.as_slice() {
        [b] if b.errno == 0 && b.writes > 0 && b.records > 0 => b.writes,
        other => return Err(format!("the guarded run without a failure: {other:?}")),
    };
    let set = |param: &str, v: u32| {
        sys::set_module_param("textpoke", param, &v.to_string())
            .map_err(|e| format!("setting {param}={v}: {e}"))
    };
    let (base, len) = region(sites);
    let cursor = sys::dmesg_cursor().map_err(|e| format!("/dev/kmsg: {e}"))?;
    set("fail_write", writes as u32)?;
    set("fail_pause_ms", PAUSE_MS)?;
    let commit = std::thread::spawn(|| exerciser::command(&format!("run {FAULT_SPEC}")));
    // The failure's log line: the batch is in its pause from here on.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut failed = false;
    let mut at = cursor;
    while !failed && std::time::Instant::now() < deadline {
        let (lines, next) = sys::dmesg_since(at).map_err(|e| format!("/dev/kmsg: {e}"))?;
        at = next;
        failed = lines
            .iter()
            .any(|l| l.contains("write failed; taking the guards out"));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let open_start = std::time::Instant::now();
    let opened = failed.then(|| Recorder::open_monotonic(&RecorderConfig { data_pages: 64 }));
    let open_ms = open_start.elapsed().as_millis();
    let copy = kcore.read(base, len).map_err(|e| format!("kcore: {e}"));
    let copied_by = monotonic_ns();
    let ran = commit.join().unwrap_or(Err(-1));
    let reset = set("fail_write", 0).and(set("fail_pause_ms", 0));
    if !failed {
        return Err("no write failed within 10 s".to_owned());
    }
    reset?;
    let rec = opened
        .unwrap_or_else(|| Err(std::io::Error::other("not opened")))
        .map_err(|e| format!("opening the recorder: {e}"))?;
    // The run fails with its batch's EIO.
    if ran != Err(5) {
        return Err(format!("run {FAULT_SPEC}: {ran:?}, not EIO"));
    }
    let batches = exerciser::batches()?;
    match batches.as_slice() {
        [b] if b.errno == 5 => {}
        other => return Err(format!("the failing run's batches: {other:?}")),
    }
    let drain = rec.drain_whole()?;
    let mut copy = copy?;
    let replayed = replay(base, &mut copy, &drain.pokes, copied_by)?;
    let now = kcore.read(base, len).map_err(|e| format!("kcore: {e}"))?;
    if let Some(a) = kernel_patching::first_difference(base, &now, &copy) {
        return Err(format!(
            "{COPY}, started in recovery, ends unlike the text at {a:#x}"
        ));
    }
    Ok(format!(
        "write {writes} of {writes} failed; a listener started in the {PAUSE_MS} ms pause \
         (its open returned after {open_ms} ms) got {} records ({} replayed, {} already in its \
         copy) and a copy equal to the text",
        drain.pokes.len(),
        replayed.replayed,
        replayed.already
    ))
}

/// [`listener_in_recovery`] on the correct debug build.
fn listener_in_recovery_case(kcore: &Kcore) -> Case {
    let run = || {
        let sites = reload(DEBUG_TEXTPOKE, CONTROL_EXERCISER_PARAMS)?;
        listener_in_recovery(kcore, &sites)
    };
    match run() {
        Ok(line) => Case::pass(LISTENER_IN_RECOVERY).with_log(line),
        Err(e) => Case::fail(LISTENER_IN_RECOVERY, e),
    }
}

/// The same with `text_mutex` released during recovery (the seeded defect): it must fail on the
/// listener's copy, and for no other reason.
fn text_released_on_failure_control(kcore: &Kcore) -> Case {
    const NAME: &str = defects::RELEASE_TEXT_ON_FAILURE.caught_by;
    let run = || -> Result<String, String> {
        let (_, outcome) = under_defect(defects::RELEASE_TEXT_ON_FAILURE.mode, |sites| {
            Ok(listener_in_recovery(kcore, sites))
        })?;
        match outcome {
            Err(e) if e.contains(crate::scenarios::listener::COPY) => Ok(format!("caught: {e}")),
            Err(e) => Err(format!(
                "{LISTENER_IN_RECOVERY} failed, but not on the listener's copy: {e}"
            )),
            Ok(line) => Err(format!("not caught: {line}")),
        }
    };
    match run() {
        Ok(found) => Case::pass(NAME).with_log(found),
        Err(e) => Case::fail(NAME, e),
    }
}

/// What [`conflict_run`] checks, by name.
const CONFLICT_RESOLVED: &str = "other_patchers_writes_at_guards_resolved";

/// Another patcher's write at a guarded site (the debug build's `conflict_write=kind`, at the
/// batch's first guarded site, just before its guards are checked), in one batch of the first
/// four sites with a recorder open: the commit fails with `EIO`, no site is left holding the
/// guard, and the records, replayed onto the text read before, end as the text is. `kind` 1
/// (x86): the old bytes behind the guard, which the batch must write over again; 2: the old
/// instruction over the guard, which the batch leaves, with a record that says so.
fn conflict_run(kcore: &Kcore, sites: &[Site], kind: u32) -> Result<String, String> {
    use textpoke_agent::platform::perf::{Recorder, RecorderConfig};
    const EIO: i32 = 5;
    let chosen: Vec<&Site> = sites.iter().take(4).collect();
    let cmd = exerciser::flip_command(&chosen);
    let (base, len) = region(sites);
    let before = kcore.read(base, len).map_err(|e| format!("kcore: {e}"))?;
    let rec = Recorder::open(&RecorderConfig { data_pages: 64 })
        .map_err(|e| format!("opening the recorder: {e}"))?;
    let set = |v: u32| {
        sys::set_module_param("textpoke", "conflict_write", &v.to_string())
            .map_err(|e| format!("setting conflict_write={v}: {e}"))
    };
    set(kind)?;
    let flipped = exerciser::command(&cmd);
    set(0)?;
    let after = kcore.read(base, len).map_err(|e| format!("kcore: {e}"))?;
    let drain = rec.drain_whole()?;
    if flipped != Err(EIO) {
        return Err(format!("`{cmd}` returned {flipped:?}, not EIO"));
    }
    for s in &chosen {
        let at = (s.addr - base) as usize;
        if after
            .get(at..)
            .is_some_and(crate::scenarios::listener::is_guard)
        {
            return Err(format!("site {:#x} still holds the guard", s.addr));
        }
    }
    let replayed = checks::replay(base, &before, &after, &drain.pokes)?;
    Ok(format!(
        "conflict_write={kind}: EIO, no guard left, {replayed} records replayed onto the text"
    ))
}

/// The kinds of [`conflict_run`] this arch has: the bytes behind a guard only on x86.
fn conflict_kinds() -> &'static [u32] {
    if guest::is_x86() {
        &[1, 2]
    } else {
        &[2]
    }
}

/// [`conflict_run`] of each kind on the correct debug build.
fn conflict_case(kcore: &Kcore) -> Case {
    let run = || -> Result<Vec<String>, String> {
        let sites = reload(DEBUG_TEXTPOKE, CONTROL_EXERCISER_PARAMS)?;
        conflict_kinds()
            .iter()
            .map(|&k| conflict_run(kcore, &sites, k))
            .collect()
    };
    match run() {
        Ok(lines) => lines
            .into_iter()
            .fold(Case::pass(CONFLICT_RESOLVED), Case::with_log),
        Err(e) => Case::fail(CONFLICT_RESOLVED, e),
    }
}

/// The same under the seeded defect that leaves another patcher's bytes as they are and
/// corrects no record: each kind must fail for its own reason, the guard left behind (1) or
/// records that no longer end as the text (2).
fn conflicts_ignored_control(kcore: &Kcore) -> Case {
    const NAME: &str = defects::IGNORE_CONFLICTS.caught_by;
    let run = || -> Result<Vec<String>, String> {
        let mut found = Vec::new();
        for &kind in conflict_kinds() {
            let (_, outcome) = under_defect(defects::IGNORE_CONFLICTS.mode, |sites| {
                Ok(conflict_run(kcore, sites, kind))
            })?;
            let want = if kind == 1 {
                "still holds the guard"
            } else {
                "replayed text differs"
            };
            match outcome {
                Err(e) if e.contains(want) => found.push(format!("conflict_write={kind}: {e}")),
                Err(e) => {
                    return Err(format!(
                        "conflict_write={kind} failed, but not with \"{want}\": {e}"
                    ))
                }
                Ok(line) => return Err(format!("not caught: {line}")),
            }
        }
        Ok(found)
    };
    match run() {
        Ok(found) => found.into_iter().fold(Case::pass(NAME), Case::with_log),
        Err(e) => Case::fail(NAME, e),
    }
}

/// What [`queue_full_run`] checks, by name.
const QUEUE_FULL: &str = "kernel_queue_full_commits_and_goes_on";

/// The kernel queue unable to grow (the debug build's `refuse_growth`), with a listener open:
/// the function tracer on the syscall wrappers, on and off, more changes than the queue's room.
/// Each transition's records must replay onto the kernel text, textpoke must hand no change
/// back, and it must have committed more than one batch (what the queue held went first).
/// On arm64 a change handed back is written by the stock path with no record.
fn queue_full_run(kcore: &Kcore) -> Result<String, String> {
    use textpoke_agent::platform::perf::Listener;
    let _listening = Listener::open().map_err(|e| format!("opening a listener: {e}"))?;
    kernel_patching::filter(crate::scenarios::faults::ftrace_filter())?;
    let set = |v: u32| {
        sys::set_module_param("textpoke", "refuse_growth", &v.to_string())
            .map_err(|e| format!("setting refuse_growth={v}: {e}"))
    };
    set(1)?;
    let runs = [
        ("on", kernel_patching::tracer_run(kcore, "function")),
        ("off", kernel_patching::tracer_run(kcore, "nop")),
    ];
    set(0)?;
    kernel_patching::filter("")?;
    let mut lines = Vec::new();
    for (dir, r) in runs {
        match r.check {
            kernel_patching::KernelCheck::Passed(line) if r.declined == 0 && r.batches >= 2 => {
                lines.push(format!("{dir}: {line}, in {} kernel batches", r.batches))
            }
            kernel_patching::KernelCheck::Passed(line) => {
                return Err(format!(
                    "{dir}: {line}, but {} changes handed back and {} kernel batches",
                    r.declined, r.batches
                ))
            }
            kernel_patching::KernelCheck::RecordsDisagree(e) => {
                return Err(format!("{dir}: the records disagree with the text: {e}"))
            }
            kernel_patching::KernelCheck::Failed(e) => return Err(format!("{dir}: {e}")),
        }
    }
    Ok(lines.join("; "))
}

/// [`queue_full_run`] on the correct debug build.
fn queue_full_case(kcore: &Kcore) -> Case {
    let run = || {
        reload(DEBUG_TEXTPOKE, CONTROL_EXERCISER_PARAMS)?;
        queue_full_run(kcore)
    };
    match run() {
        Ok(line) => Case::pass(QUEUE_FULL).with_log(line),
        Err(e) => Case::fail(QUEUE_FULL, e),
    }
}

/// The control of seeded defect `defect`: `check` run under it must fail, and with `want` in
/// its reason (the defect's own signature); `what` names the check in the failure.
fn caught_by_signature(
    defect: defects::SeededDefect,
    what: &str,
    want: &str,
    check: impl FnOnce() -> Result<String, String>,
) -> Case {
    let run = || -> Result<String, String> {
        let (_, outcome) = under_defect(defect.mode, |_| Ok(check()))?;
        match outcome {
            Err(e) if e.contains(want) => Ok(format!("caught: {e}")),
            Err(e) => Err(format!("{what} failed, but not with \"{want}\": {e}")),
            Ok(line) => Err(format!("not caught: {line}")),
        }
    };
    match run() {
        Ok(found) => Case::pass(defect.caught_by).with_log(found),
        Err(e) => Case::fail(defect.caught_by, e),
    }
}

/// The same under the seeded defect that hands the change back when the queue cannot grow:
/// on arm64 the records must disagree with the text (the stock path records nothing); on x86,
/// whose stock path records its changes, the hand-backs themselves are the signature.
fn queue_full_control(kcore: &Kcore) -> Case {
    let want = if guest::is_x86() {
        "changes handed back"
    } else {
        "the records disagree with the text"
    };
    caught_by_signature(defects::HAND_BACK_WHEN_FULL, QUEUE_FULL, want, || {
        queue_full_run(kcore)
    })
}

/// A module loaded while a tracer listens, under the seeded defect that describes no module's
/// text: the decoder of new_text.rs must find no map of it once it loaded.
fn new_text_control(kcore: &Kcore) -> Case {
    caught_by_signature(
        defects::NEW_TEXT_UNDESCRIBED,
        "loaded",
        "0 maps named",
        || crate::scenarios::new_text::loaded_once(kcore),
    )
}

/// The load of the write-failure matrix: one batch of four sites, flipped once.
const FAULT_SPEC: &str = "keys=1 sites=4 ftrace=0 flips=1 pokers=1";

/// One row of the matrix: the batch failed (or not) as `fails` says, every site of it is whole
/// and agrees with its records, no guard is left, the records replay onto kcore and no
/// execution broke the ordering invariant. Returns the sites' states.
fn fault_verdict(ev: &Evidence, sites: &[Site], fails: bool) -> Result<String, String> {
    const EIO: i64 = 5;
    let [b] = ev.batches.as_slice() else {
        return Err(format!("{} batches, not one", ev.batches.len()));
    };
    let want = if fails { EIO } else { 0 };
    if b.errno != want {
        return Err(format!("the commit returned errno {}, not {want}", b.errno));
    }
    let (base, _) = region(sites);
    let pokes = ev.site_pokes(sites);
    let guard: &[u8] = if guest::is_x86() {
        &[0xcc]
    } else {
        &[0x00, 0x01, 0x20, 0xd4]
    };
    let (mut old, mut new) = (0, 0);
    for &(i, _) in &b.changes {
        let s = sites.get(i).ok_or(format!("no site {i}"))?;
        let at = (s.addr - base) as usize;
        let (then, now) = (
            ev.before.get(at..at + s.len).ok_or("site outside kcore")?,
            ev.after.get(at..at + s.len).ok_or("site outside kcore")?,
        );
        let recs: Vec<_> = pokes.iter().filter(|p| p.addr == s.addr).collect();
        match recs.as_slice() {
            [] if now == then => old += 1,
            [r] if r.old == then && r.new == now => new += 1,
            _ => {
                return Err(format!(
                    "site {:#x} holds {now:02x?} (was {then:02x?}) with {} records",
                    s.addr,
                    recs.len()
                ))
            }
        }
        if now.starts_with(guard) {
            return Err(format!("site {:#x} still holds the guard", s.addr));
        }
    }
    checks::replay(base, &ev.before, &ev.after, &pokes)?;
    let ordering = ev.ordering(sites)?;
    if ordering.violations > 0 {
        return Err(format!(
            "{} ordering violations in {} executions",
            ordering.violations, ordering.checked
        ));
    }
    let stable = ev.result("stable_violations")?;
    if stable > 0 {
        return Err(format!("{stable} executions disagreed with the text"));
    }
    Ok(format!(
        "{old} sites old, {new} new, {} records, {} executions checked",
        pokes.len(),
        ordering.checked
    ))
}

/// The production build has no debug switch at all; then every control on the debug build.
/// Ends with the production modules loaded again.
pub fn cases(kcore: &Kcore) -> Case {
    let mut children = Vec::new();
    let param = "/sys/module/textpoke/parameters/debug_protocol";
    children.push(Case::check(
        "production_build_has_no_debug_switch",
        sys::read_text("/sys/module/textpoke/initstate").is_ok()
            && !std::path::Path::new(param).exists(),
        format!("{param} exists in the production build (or textpoke is not loaded)"),
    ));
    let debug_present = std::path::Path::new(&format!("{MODULES}/{DEBUG_TEXTPOKE}.ko")).exists();
    if !debug_present {
        children.push(Case::fail(
            "debug_build_present",
            format!("{MODULES}/{DEBUG_TEXTPOKE}.ko is missing from the initramfs"),
        ));
    } else {
        for c in CONTROLS {
            children.push(control(c, kcore));
        }
        children.push(observer_control(kcore));
        children.push(before_after_observed(kcore));
        // The kcore replay of `kernel_patching` must fail; the key goes back to its default
        // through the correct engine.
        children.push(kernel_record_control(
            "control_kernel_dropped_record_caught",
            || kernel_patching::schedstats_run(kcore),
            || kernel_patching::schedstats_case_off(kcore),
        ));
        // The static-key selftest's records must disagree with its module's text (its own
        // checks pass: the text is right, only the record stream is short).
        children.push(kernel_record_control(
            "control_kernel_selftest_dropped_record_caught",
            || kernel_patching::kernel_selftest_run(kcore),
            || {},
        ));
        if guest::is_x86() {
            children.push(foreign_int3_control());
            children.push(text_released_after_record_control(kcore));
        }
        children.push(other_patchers_control());
        children.push(listener_handshake_control(kcore));
        children.push(listener_floor_control(kcore));
        children.push(fault_injection_matrix(kcore));
        children.push(listener_in_recovery_case(kcore));
        children.push(text_released_on_failure_control(kcore));
        children.push(conflict_case(kcore));
        children.push(conflicts_ignored_control(kcore));
        children.push(queue_full_case(kcore));
        children.push(queue_full_control(kcore));
        children.push(new_text_control(kcore));
    }
    // Every site again, for whatever runs after the controls.
    children.push(match reload("textpoke", "") {
        Ok(_) => Case::pass("production_build_reloaded"),
        Err(e) => Case::fail("production_build_reloaded", e),
    });
    Case::group("negative_controls", children)
}

#[cfg(test)]
mod tests {
    use super::*;
    use textpoke_agent::platform::exerciser::BatchLine;
    use textpoke_agent::platform::perf::{Drain, TextPokeRec};
    use textpoke_agent::platform::uapi::{ExecRecord, TRAP_COUNTED, TRAP_SEEN};

    const OFF: [u8; 5] = [0x0f, 0x1f, 0x44, 0, 0];
    const ON: [u8; 5] = [0xe9, 1, 0, 0, 0];

    fn sites() -> Vec<Site> {
        (0..3)
            .map(|i| Site {
                index: i,
                kind: "jmp32".into(),
                addr: 0x1000 + 5 * i as u64,
                len: 5,
                off: OFF.to_vec(),
                on: ON.to_vec(),
            })
            .collect()
    }

    fn text(states: [bool; 3]) -> Vec<u8> {
        states
            .iter()
            .flat_map(|&on| if on { ON } else { OFF })
            .collect()
    }

    fn rec(site: usize, time: u64) -> TextPokeRec {
        TextPokeRec {
            addr: 0x1000 + 5 * site as u64,
            old: OFF.to_vec(),
            new: ON.to_vec(),
            time,
            ..TextPokeRec::default()
        }
    }

    /// One batch turning sites 1 and 0 on (listed out of address order: the victim is the
    /// lowest address, site 0), site 2 untouched; every record, the text as the batch left it.
    fn evidence() -> Evidence {
        Evidence {
            run: Ok(()),
            drain: Drain {
                pokes: vec![rec(0, 150), rec(1, 150)],
                ..Drain::default()
            },
            engine: Ok(Vec::new()),
            before: text([false; 3]),
            after: text([true, true, false]),
            result: BTreeMap::new(),
            batches: vec![BatchLine {
                changes: vec![(1, 1), (0, 1)],
                sites: 2,
                start: 100,
                end: 200,
                ..BatchLine::default()
            }],
            execs: Vec::new(),
            stats: Default::default(),
            traps: checks::TrapEvidence::Cpu,
            call_ipis: None,
        }
    }

    fn lost(mut ev: Evidence) -> Evidence {
        ev.drain.lost_records = 1;
        ev
    }

    #[test]
    fn other_patchers_ignored_needs_all_three_registered() {
        let owned = ["a", "b", "c"];
        let v = |a: &'static str, b: &'static str, c: &'static str| {
            vec![
                ("a", a, "-26"),
                ("x", "0", "0"),
                ("b", b, "-26"),
                ("c", c, "-26"),
            ]
        };
        assert!(registered_over_owners(&v("0", "0", "0"), &owned).is_ok());
        // The production engine: every one refused.
        assert!(registered_over_owners(&v("-26", "-26", "-26"), &owned).is_err());
        // Refused for another reason (a wrong length, a kprobe's breakpoint in the text): no
        // catch, whatever the verdict's expectation.
        assert!(registered_over_owners(&v("-90", "0", "-95"), &owned).is_err());
        // A verdict missing (the outsider never got that far), or printed twice.
        assert!(registered_over_owners(&v("0", "0", "0")[..3], &owned).is_err());
        let mut twice = v("0", "0", "0");
        twice.push(("a", "0", "-26"));
        assert!(registered_over_owners(&twice, &owned).is_err());
        assert!(registered_over_owners(&[], &owned).is_err());
    }

    #[test]
    fn commits_under_a_probes_copy_catch_only_when_counted_once() {
        const N: &str = "optprobe_race_commits_under_copy";
        assert!(changed_under_copy(&[(N, "3", "0")]).is_ok());
        // The production engine refuses every one.
        assert!(changed_under_copy(&[(N, "0", "0")]).is_err());
        assert!(changed_under_copy(&[(N, "-16", "0")]).is_err());
        assert!(changed_under_copy(&[]).is_err());
        assert!(changed_under_copy(&[(N, "3", "0"), (N, "3", "0")]).is_err());
        assert!(changed_under_copy(&[("other", "3", "0")]).is_err());
    }

    #[test]
    fn a_kernel_check_catches_only_with_records_against_the_text() {
        use kernel_patching::KernelCheck;
        assert!(kernel_caught(KernelCheck::RecordsDisagree("at 0x10".into())).is_ok());
        assert!(kernel_caught(KernelCheck::Passed("fine".into())).is_err());
        assert!(kernel_caught(KernelCheck::Failed("no module".into())).is_err());
    }

    #[test]
    fn the_victim_is_a_batchs_first_guarded_site_by_address() {
        assert_eq!(victims(&evidence(), &sites()), [0]);
    }

    #[test]
    fn a_skipped_write_is_caught_only_at_its_victim() {
        let s = sites();
        // The correct engine: nothing to catch.
        assert!(skipped_write_caught(&evidence(), &s).is_err());
        // The victim kept its old text, its record went out: caught.
        let mut ev = evidence();
        ev.after = text([false, true, false]);
        assert!(
            skipped_write_caught(&ev, &s).is_ok(),
            "{:?}",
            skipped_write_caught(&ev, &s)
        );
        // The batch failed with EIO (the engine found the guard missing): still the defect's.
        let mut failed = evidence();
        failed.after = text([false, true, false]);
        failed.run = Err(5);
        failed.batches[0].errno = 5;
        assert!(skipped_write_caught(&failed, &s).is_ok());
        // Any other errno is not.
        failed.batches[0].errno = 12;
        assert!(skipped_write_caught(&failed, &s).is_err());
        // The text apart at another site than the victim: not this defect.
        let mut elsewhere = evidence();
        elsewhere.after = text([true, false, false]);
        assert!(skipped_write_caught(&elsewhere, &s).is_err());
        // Records lost by perf break the replay too: proves nothing.
        let mut lost_one = lost(evidence());
        lost_one.drain.pokes.remove(0);
        assert!(skipped_write_caught(&lost_one, &s).is_err());
    }

    #[test]
    fn a_dropped_record_is_caught_only_at_its_victim() {
        let s = sites();
        assert!(dropped_record_caught(&evidence(), &s).is_err());
        let mut ev = evidence();
        ev.drain.pokes.retain(|p| p.addr != 0x1000);
        assert!(
            dropped_record_caught(&ev, &s).is_ok(),
            "{:?}",
            dropped_record_caught(&ev, &s)
        );
        // The same records missing because perf lost them: not caught.
        assert!(dropped_record_caught(&lost(ev), &s).is_err());
        // A record missing elsewhere than at the victim.
        let mut elsewhere = evidence();
        elsewhere.drain.pokes.retain(|p| p.addr != 0x1005);
        assert!(dropped_record_caught(&elsewhere, &s).is_err());
        // Two missing in one batch: not one per batch.
        let mut both = evidence();
        both.drain.pokes.clear();
        assert!(dropped_record_caught(&both, &s).is_err());
    }

    #[test]
    fn wrong_old_bytes_are_caught_only_at_the_victim() {
        let s = sites();
        assert!(wrong_old_bytes_caught(&evidence(), &s).is_err());
        let mut ev = evidence();
        ev.drain.pokes[0].old = ON.to_vec();
        assert!(wrong_old_bytes_caught(&ev, &s).is_ok());
        let mut elsewhere = evidence();
        elsewhere.drain.pokes[1].old = ON.to_vec();
        assert!(wrong_old_bytes_caught(&elsewhere, &s).is_err());
        assert!(wrong_old_bytes_caught(&lost(ev), &s).is_err());
    }

    fn exec(site: u32, start: u64, end: u64, path: u8, trap: u8) -> ExecRecord {
        ExecRecord {
            start,
            end,
            site,
            cpu: 0,
            path,
            trap,
        }
    }

    #[test]
    fn each_ordering_control_wants_its_own_signature() {
        let s = sites();
        let both = TRAP_SEEN | TRAP_COUNTED;
        // No violation: none of the three is caught.
        let mut clean = evidence();
        clean.execs = vec![exec(0, 120, 130, 1, both), exec(0, 160, 170, 1, 0)];
        for caught in [emulate_old_caught, emulate_other_caught, unguarded_caught] {
            assert!(caught(&clean, &s).is_err());
        }
        // A trap that ran the old instruction: defect 5's, and only its.
        let mut old = evidence();
        old.execs = vec![exec(0, 120, 130, 0, both)];
        assert!(emulate_old_caught(&old, &s).is_ok());
        assert!(emulate_other_caught(&old, &s).is_err());
        assert!(unguarded_caught(&old, &s).is_err());
        // A trap that ran another site's: defect 6's.
        let mut other = evidence();
        other.execs = vec![exec(1, 120, 130, 2, both)];
        assert!(emulate_other_caught(&other, &s).is_ok());
        assert!(emulate_old_caught(&other, &s).is_err());
        // The new instruction before its record, no trap: defect 3's.
        let mut ahead = evidence();
        ahead.execs = vec![exec(0, 120, 130, 1, 0)];
        assert!(unguarded_caught(&ahead, &s).is_ok());
        assert!(emulate_old_caught(&ahead, &s).is_err());
        // Not caught when the run failed, or perf lost records.
        let mut failed = evidence();
        failed.execs = ahead.execs.clone();
        failed.run = Err(5);
        assert!(unguarded_caught(&failed, &s).is_err());
        assert!(unguarded_caught(&lost(ahead), &s).is_err());
        // Violations on a site no batch changed are no catch.
        let mut stray = evidence();
        stray.execs = vec![exec(2, 120, 130, 1, 0), exec(0, 120, 130, 1, 0)];
        assert!(unguarded_caught(&stray, &s).is_err());
    }

    #[test]
    fn the_int3_control_wants_every_int3_swallowed() {
        assert!(swallowed(0, 100).is_ok());
        // The defect switched off: the outsider's notifier sees all of them.
        assert!(swallowed(100, 100).unwrap_err().starts_with("not caught"));
        // Some swallowed is another fault, and no INT3 run proves nothing.
        assert!(swallowed(37, 100)
            .unwrap_err()
            .contains("not the defect's signature"));
        assert!(swallowed(0, 0).is_err());
    }

    #[test]
    fn the_handshake_control_wants_the_copy_to_disagree() {
        let copy = format!(
            "{} with its records ends unlike the text at 0x10",
            crate::scenarios::listener::COPY
        );
        assert!(handshake_caught(Err(copy)).is_ok());
        assert!(handshake_caught(Ok("replayed 12 records".into()))
            .unwrap_err()
            .starts_with("not caught"));
        assert!(handshake_caught(Err("perf lost 3 records".into()))
            .unwrap_err()
            .contains("not on the listener's copy"));
    }

    #[test]
    fn the_floor_control_wants_the_floor_to_fail() {
        use crate::scenarios::listener::UNRECORDED_KERNEL_CHANGES;
        let floor = format!("1 of 2 {UNRECORDED_KERNEL_CHANGES}, the first at 0x10: ...");
        assert!(floor_caught(&CaseResult::Fail(floor)).is_ok());
        assert!(floor_caught(&CaseResult::Pass)
            .unwrap_err()
            .starts_with("not caught"));
        assert!(
            floor_caught(&CaseResult::Fail("perf lost 3 records".into()))
                .unwrap_err()
                .contains("not on its floor")
        );
    }

    fn observed(violations: u64) -> (observer::Collected, observer::Verdicts) {
        let v = observer::Verdicts {
            new_ran: 10,
            violations,
            ..observer::Verdicts::default()
        };
        (observer::Collected::default(), v)
    }

    #[test]
    fn the_observer_control_wants_violations_in_a_complete_run() {
        let (c, v) = observed(2);
        assert!(observer_caught(&evidence(), &c, &v).is_ok());
        // The defect switched off: no violation.
        let (c, clean) = observed(0);
        assert!(observer_caught(&evidence(), &c, &clean)
            .unwrap_err()
            .starts_with("not caught"));
        // Violations from a lost record, from lost hits or after an error prove nothing.
        assert!(observer_caught(&lost(evidence()), &c, &v).is_err());
        let mut lossy = c.clone();
        lossy.lost = 1;
        assert!(observer_caught(&evidence(), &lossy, &v).is_err());
        let mut stopped = c;
        stopped.error = Some("EBUSY".into());
        assert!(observer_caught(&evidence(), &stopped, &v).is_err());
    }

    fn hit(time: u64, site: &Site, path: u64) -> observer::ObsHit {
        observer::ObsHit {
            time,
            cpu: 1,
            seen: textpoke_agent::platform::bpf::SiteWord {
                bp_addr: site.addr + 0x100 * (path + 1),
                site: site.addr,
                word: 0,
                fingerprint: time,
            },
        }
    }

    #[test]
    fn the_before_after_control_wants_an_execution_between_a_pair() {
        let sites = sites();
        let watched: Vec<observer::Watched> = sites
            .iter()
            .map(|s| observer::Watched {
                index: s.index,
                addr: s.addr,
                on: s.on.clone(),
                off: s.off.clone(),
                taken: s.addr + 0x200,
                fall: s.addr + 0x100,
            })
            .collect();
        let mut paired = evidence();
        let before = TextPokeRec {
            new: OFF.to_vec(),
            ..rec(0, 120)
        };
        paired.drain.pokes.insert(0, before);
        let (c, v) = observed(0);
        let inside = observer::Collected {
            hits: vec![hit(130, &sites[0], 1)],
            ..c.clone()
        };
        assert!(before_after_caught(&paired, &sites, &watched, &inside, &v).is_ok());
        // The defect switched off: one record per change, no pair to end inside.
        assert!(
            before_after_caught(&evidence(), &sites, &watched, &inside, &v)
                .unwrap_err()
                .starts_with("not caught")
        );
        // A pair, but every execution outside it.
        let outside = observer::Collected {
            hits: vec![hit(160, &sites[0], 1)],
            ..c
        };
        assert!(before_after_caught(&paired, &sites, &watched, &outside, &v).is_err());
        assert!(before_after_caught(&lost(paired), &sites, &watched, &inside, &v).is_err());
    }
}
