//! Negative controls: every guest check shown to fail when what it checks is broken.
//!
//! Each control loads the debug build of textpoke (`CONFIG_TEXTPOKE_DEBUG_PROTOCOL`, the only
//! build with the `debug_protocol` switch; kernel/debug.rs), selects one seeded defect, runs a
//! scenario under the same load the correct engine passes, and passes only if the check that
//! claims to cover the defect fails on it. Each control starts from freshly loaded modules, so
//! that a defect that leaves text and registry apart cannot leak into the next.

use textpoke_agent::checks;
use textpoke_agent::exerciser::{self, Site};
use textpoke_agent::kcore::Kcore;
use textpoke_agent::ktap::Case;
use textpoke_agent::sys;

use crate::outsider;
use crate::scenario::{self, region, Evidence};
use crate::{load, MODULES};

/// The debug build of textpoke, packed next to the production one (tools/guests.sh).
pub const DEBUG_TEXTPOKE: &str = "debug/textpoke";

/// The load the defects must be caught under: keys of several sites each, so that a trap can
/// emulate another site's instruction, and an odd number of flips, so that the text changes.
const SPEC: &str = "keys=4 sites=8 ftrace=16 flips=3 pokers=1";

/// A seeded defect and the check that must catch it.
struct Control {
    name: &'static str,
    /// `textpoke.debug_protocol` (kernel/debug.rs).
    mode: u32,
    /// The check that must fail: `Ok(what it found)` if it did, `Err(why not)` if it passed.
    caught: fn(&Evidence, &[Site]) -> Result<String, String>,
}

fn ordering_caught(ev: &Evidence, sites: &[Site]) -> Result<String, String> {
    let r = ev.ordering(sites)?;
    if r.violations > 0 {
        Ok(format!(
            "the ordering checker found {} violations in {} executions",
            r.violations, r.checked
        ))
    } else {
        Err(format!(
            "the ordering checker found no violation in {} executions",
            r.checked
        ))
    }
}

fn replay_caught(ev: &Evidence, sites: &[Site]) -> Result<String, String> {
    let (base, _) = region(sites);
    match checks::replay(base, &ev.before, &ev.after, &ev.site_pokes(sites)) {
        Err(e) => Ok(format!("the kcore replay failed: {e}")),
        Ok(n) => Err(format!("the kcore replay of {n} records was exact")),
    }
}

fn record_check_caught(ev: &Evidence, sites: &[Site]) -> Result<String, String> {
    let (base, _) = region(sites);
    let ours = ev.site_pokes(sites);
    let changed: u64 = ev.batches.iter().map(|b| b.sites).sum();
    match checks::records_match_text(sites, base, &ev.before, &ev.after, &ours) {
        Err(e) => Ok(format!(
            "the record check failed: {e} ({} records, {changed} changes)",
            ours.len()
        )),
        Ok(n) if n as u64 != changed => Ok(format!("{n} records for {changed} site changes")),
        Ok(n) => Err(format!(
            "the record check accepted {n} records against the text"
        )),
    }
}

fn record_and_replay_caught(ev: &Evidence, sites: &[Site]) -> Result<String, String> {
    let records = record_check_caught(ev, sites)?;
    let replay = replay_caught(ev, sites)?;
    Ok(format!("{records}; {replay}"))
}

const CONTROLS: &[Control] = &[
    Control {
        name: "control_emulate_old_caught",
        mode: 5,
        caught: ordering_caught,
    },
    Control {
        name: "control_emulate_other_site_caught",
        mode: 6,
        caught: ordering_caught,
    },
    Control {
        name: "control_unguarded_nosync_caught",
        mode: 3,
        caught: ordering_caught,
    },
    Control {
        name: "control_skipped_write_caught",
        mode: 7,
        caught: replay_caught,
    },
    Control {
        name: "control_dropped_record_caught",
        mode: 8,
        caught: record_and_replay_caught,
    },
    Control {
        name: "control_wrong_old_bytes_caught",
        mode: 9,
        caught: record_check_caught,
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
    const NAME: &str = "control_swallowed_foreign_int3_caught";
    const RUNS: u64 = 100;
    let run = || -> Result<String, String> {
        let sites = reload(DEBUG_TEXTPOKE, CONTROL_EXERCISER_PARAMS)?;
        let site = sites
            .iter()
            .find(|s| s.kind == "jmp32")
            .ok_or("no jmp32 site")?;
        load("textpoke_outsider", &format!("foreign={:#x}", site.addr))?;
        let dir = "/sys/kernel/debug/textpoke_outsider";
        sys::set_module_param("textpoke", "debug_protocol", "10")
            .map_err(|e| format!("setting debug_protocol=10: {e}"))?;
        let ran = sys::write_file(format!("{dir}/control"), format!("int3 {RUNS}").as_bytes());
        sys::set_module_param("textpoke", "debug_protocol", "0")
            .map_err(|e| format!("resetting debug_protocol: {e}"))?;
        ran.map_err(|e| format!("running the INT3s: {e}"))?;
        let counters = sys::read_text(format!("{dir}/counters"))
            .map(|t| exerciser::key_values(&t))
            .map_err(|e| format!("outsider counters: {e}"))?;
        let seen = exerciser::number(&counters, "int3_seen")?;
        sys::unload_module("textpoke_outsider").map_err(|e| format!("unloading outsider: {e}"))?;
        if seen < RUNS {
            Ok(format!(
                "the outsider's notifier saw {seen} of its {RUNS} INT3s"
            ))
        } else {
            Err(format!(
                "not caught: the outsider's notifier saw all {RUNS} INT3s"
            ))
        }
    };
    match run() {
        Ok(found) => Case::pass(NAME).with_log(found),
        Err(e) => Case::fail(NAME, e),
    }
}

/// A registry that lets sites onto other patchers' text (defect 11) is caught by the outsider's
/// verdicts: registering over its jump label entry, its ftrace site and a kprobed address must
/// each be refused with `ETXTBSY`.
fn other_patchers_control() -> Case {
    const NAME: &str = "control_other_patchers_ignored_caught";
    const OWNED: [&str; 3] = [
        "register_jump_label_site",
        "register_ftrace_site",
        "register_kprobed_site",
    ];
    let run = || -> Result<String, String> {
        let sites = reload(DEBUG_TEXTPOKE, CONTROL_EXERCISER_PARAMS)?;
        let branch = if crate::is_x86() { "jmp32" } else { "b" };
        let foreign = sites
            .iter()
            .find(|s| s.kind == branch)
            .ok_or("no branch site")?
            .addr;
        sys::set_module_param("textpoke", "debug_protocol", "11")
            .map_err(|e| format!("setting debug_protocol=11: {e}"))?;
        let cursor = sys::dmesg_cursor().unwrap_or_default();
        let loaded = load("textpoke_outsider", &format!("foreign={foreign:#x}"));
        let lines = sys::dmesg_since(cursor).map(|(l, _)| l).unwrap_or_default();
        sys::set_module_param("textpoke", "debug_protocol", "0")
            .map_err(|e| format!("resetting debug_protocol: {e}"))?;
        loaded?;
        sys::unload_module("textpoke_outsider").map_err(|e| format!("unloading outsider: {e}"))?;
        let verdicts = outsider::verdict_lines(&lines);
        let wrong: Vec<String> = verdicts
            .iter()
            .filter(|(name, got, expected)| OWNED.contains(name) && got != expected)
            .map(|(name, got, _)| format!("{name} got {got}"))
            .collect();
        if wrong.len() == OWNED.len() {
            Ok(format!(
                "the outsider's verdicts failed: {}",
                wrong.join(", ")
            ))
        } else {
            Err(format!(
                "not caught: {} of {} registrations on other patchers' text failed their verdict ({} verdict lines)",
                wrong.len(),
                OWNED.len(),
                verdicts.len()
            ))
        }
    };
    match run() {
        Ok(found) => Case::pass(NAME).with_log(found),
        Err(e) => Case::fail(NAME, e),
    }
}

/// Reloads the debug build, runs `f` on its sites with `debug_protocol=mode`, and sets the
/// switch back to 0 whatever `f` returned. Returns the sites and `f`'s result.
fn under_defect<T>(
    mode: u32,
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

/// The breakpoint observer alone (observed.rs) must catch the unguarded "nosync" writes: it
/// sees the new instruction run before its record with no guard at the site. Nothing from the
/// exerciser's executors goes into its verdict.
fn observer_control(kcore: &Kcore) -> Case {
    const NAME: &str = "control_unguarded_nosync_caught_by_observer";
    const MODE: u32 = 3;
    let run = || -> Result<String, String> {
        let (_, (_, c, v)) = under_defect(MODE, |sites| {
            crate::observed::run(crate::observed::CONTROL_SPEC, sites, kcore)
        })?;
        let line = crate::observed::summary(&c, &v);
        if v.violations > 0 {
            Ok(format!("{line}; first: {:?}", v.examples.first()))
        } else {
            Err(format!("not caught: {line}"))
        }
    };
    match run() {
        Ok(found) => Case::pass(NAME)
            .with_log(format!(
                "debug_protocol={MODE} under {}",
                crate::observed::CONTROL_SPEC
            ))
            .with_log(found),
        Err(e) => Case::fail(NAME, e),
    }
}

/// Seed 001's BEFORE/AFTER pair (debug mode 4) watched by the observer: how many executions
/// ended between a site's two records, where the records cannot say which instruction ran. The
/// single guarded record leaves no such interval (the host model's figures: docs/protocol.md).
fn before_after_observed(kcore: &Kcore) -> Case {
    const NAME: &str = "before_after_leaves_executions_undecided";
    const MODE: u32 = 4;
    let run = || -> Result<String, String> {
        let (sites, (ev, c, v)) = under_defect(MODE, |sites| {
            crate::observed::run(crate::observed::CONTROL_SPEC, sites, kcore)
        })?;
        let watched = crate::observed::watched(&sites)?;
        let intervals = textpoke_agent::observer::before_after_intervals(&ev.site_pokes(&sites));
        let pairs: usize = intervals.values().map(Vec::len).sum();
        let [off, on] = textpoke_agent::observer::inside_intervals(&watched, &intervals, &c.hits);
        let line = format!(
            "{pairs} BEFORE/AFTER pairs; {} of {} observed executions ended inside one ({off} took path 0, {on} path 1); {}",
            off + on,
            v.classified(),
            crate::observed::summary(&c, &v)
        );
        if pairs > 0 && off + on > 0 {
            Ok(line)
        } else {
            Err(line)
        }
    };
    match run() {
        Ok(found) => Case::pass(NAME).with_log(found),
        Err(e) => Case::fail(NAME, e),
    }
}

fn control(c: &Control, kcore: &Kcore) -> Case {
    let run = || -> Result<(String, Vec<String>), String> {
        let (sites, ev) = under_defect(c.mode, |sites| scenario::run(SPEC, sites, kcore))?;
        let notes = vec![format!("debug_protocol={} under {SPEC}", c.mode)];
        match (c.caught)(&ev, &sites) {
            Ok(found) => Ok((found, notes)),
            Err(why) => Err(format!("not caught: {why}")),
        }
    };
    match run() {
        Ok((found, notes)) => notes
            .into_iter()
            .fold(Case::pass(c.name), Case::with_log)
            .with_log(found),
        Err(e) => Case::fail(c.name, e),
    }
}

/// Runs the kernel check `case` under one record dropped per batch (defect 8, which kernel
/// batches get too), reloads the correct engine, runs `after` (to put things back through it),
/// and passes if the check failed.
fn kernel_record_control(name: &str, case: impl FnOnce() -> Case, after: impl FnOnce()) -> Case {
    let run = || -> Result<String, String> {
        let (_, case) = under_defect(8, |_| Ok(case()))?;
        reload("textpoke", CONTROL_EXERCISER_PARAMS)?;
        after();
        if case.passed() {
            Err(format!("not caught: {} passed its checks", case.name))
        } else {
            Ok(format!(
                "{} failed its checks: {}",
                case.name,
                crate::kernel_patching::diagnostic(&case)
            ))
        }
    };
    match run() {
        Ok(found) => Case::pass(name).with_log(found),
        Err(e) => Case::fail(name, e),
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
    let guard: &[u8] = if crate::is_x86() {
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
            || crate::kernel_patching::schedstats_case(kcore),
            || crate::kernel_patching::schedstats_case_off(kcore),
        ));
        // The static-key selftest's one record per site must fail (its own checks pass: the
        // text is right, only the record stream is short).
        children.push(kernel_record_control(
            "control_kernel_selftest_dropped_record_caught",
            crate::kernel_patching::kernel_selftest_case,
            || {},
        ));
        if crate::is_x86() {
            children.push(foreign_int3_control());
        }
        children.push(other_patchers_control());
        children.push(fault_injection_matrix(kcore));
    }
    // Every site again, for whatever runs after the controls.
    children.push(match reload("textpoke", "") {
        Ok(_) => Case::pass("production_build_reloaded"),
        Err(e) => Case::fail("production_build_reloaded", e),
    });
    Case::group("negative_controls", children)
}
