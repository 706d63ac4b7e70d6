//! textpoke tested from outside: samples/textpoke_outsider.c uses only kernel/textpoke.h.
//!
//! - Its verdicts on the header's contract, including inputs the header does not list, and
//!   on another module's site (which it may neither change nor unregister).
//! - Kprobes that copied a site's text keep it from changing: one registered disabled on the
//!   site, and on x86 an optimized one beside it, racing commits while the site runs.
//! - Foreign traps reach their owners under load: a kprobe armed next to textpoke's sites, and
//!   on x86 an `INT3` in the outsider's text claimed by its own die notifier, below textpoke's.
//! - Sites cannot outlive their owner: the outsider never unregisters its sites; once it is
//!   unloaded, textpoke has forgotten them and a change at their addresses gets `ENOENT`.

use std::collections::BTreeMap;
use textpoke_agent::platform::exerciser::{self, Site};
use textpoke_agent::platform::guest::{is_x86, load};
use textpoke_agent::platform::kcore::Kcore;
use textpoke_agent::platform::sys;
use textpoke_agent::report::ktap::Case;
use textpoke_core::refusal;

use crate::scenarios::badinput::refused;
use crate::scenarios::scenario::region;

const DIR: &str = "/sys/kernel/debug/textpoke_outsider";

/// The load under which foreign traps must reach their owners.
const SPEC: &str = "keys=4 sites=8 ftrace=16 flips=3 pokers=1";

/// How many times the foreign `INT3` runs (x86).
const INT3_RUNS: u64 = 2000;

/// The verdict lines `textpoke_outsider: case NAME: got G expected X`, as `(NAME, G, X)`.
pub fn verdict_lines(lines: &[String]) -> Vec<(&str, &str, &str)> {
    lines
        .iter()
        .filter_map(|l| l.split_once("textpoke_outsider: case ").map(|(_, r)| r))
        .filter_map(|r| {
            let (name, rest) = r.split_once(": got ")?;
            let (got, expected) = rest.split_once(" expected ")?;
            Some((name, got.trim(), expected.trim()))
        })
        .collect()
}

/// Every verdict the outsider prints (samples/textpoke_outsider.c), by name, on the guest
/// kernels: the outsider counts the verdicts it prints, so a return before a `verdict()` would
/// shrink its count and the lines alike. A verdict missing from the boot, or one no list names,
/// fails `outsider_verdicts_expected`.
const VERDICTS: &[&str] = &[
    "add_foreign_site",
    "add_guard",
    "add_len_0",
    "add_null_batch",
    "add_null_insn",
    "add_null_owner",
    "add_unlisted",
    "begin_null",
    "change_under_disabled_kprobe",
    "change_under_kprobe",
    "commit_empty",
    "commit_null_batch",
    "disabled_kprobe_on_registered_site",
    "disabled_kprobe_site_unchanged",
    "encode_len_0",
    "encode_len_8",
    "encode_null_out",
    "encode_unknown_op",
    "ftrace_entry_found",
    "kernel_traps_counted_as_seen",
    "kernel_traps_seen",
    "keyed_function_off",
    "kprobe_enabled",
    "kprobe_on_future_site",
    "kprobe_on_registered_site",
    "kprobe_race_commit_errors",
    "kprobe_race_contended",
    "kprobe_race_hits_missed",
    "kprobe_race_site_changes_after",
    "kprobe_race_site_whole",
    "kprobe_still_fires",
    "register_after_kprobe_gone",
    "register_armed_kprobed_site",
    "register_ftrace_entry_0",
    "register_ftrace_site",
    "register_jump_label_site",
    "register_kept_site_0",
    "register_kept_site_1",
    "register_kernel_text",
    "register_kprobed_site",
    "register_len_0",
    "register_len_6",
    "register_null_owner",
    "register_own_site",
    "stats_null_batch",
    "stats_null_out",
    "traced_function_runs",
    "unregister_foreign_site",
    "unregister_own_site",
    "unregister_unknown",
];

/// x86's further verdicts: the optimized-kprobe race (`optprobe_race`), which only x86's
/// kprobes (`CONFIG_OPTPROBES`) can show.
const X86_VERDICTS: &[&str] = &[
    "optprobe_race_commit_errors",
    "optprobe_race_commits_under_copy",
    "optprobe_race_contended",
    "optprobe_race_odd_results",
    "optprobe_race_site_changes_after",
    "optprobe_race_site_whole",
    "optprobe_race_stale_runs",
];

/// arm64's further verdicts: its traced function's entry holds more instructions textpoke must
/// refuse, `MOV X9, X30` before the call.
const ARM64_VERDICTS: &[&str] = &["register_ftrace_entry_1"];

/// And on an arm64 kernel with `DYNAMIC_FTRACE_WITH_CALL_OPS`
/// ([`crate::scenarios::kernel_patching::ftrace_call_ops`]: the production guest kernel, not the
/// KASAN one built with clang 19) the two words of the ftrace ops literal before the function.
const CALL_OPS_VERDICTS: &[&str] = &["register_ftrace_entry_2", "register_ftrace_entry_3"];

/// The verdicts of this arch the outsider must print.
fn expected_verdicts() -> Vec<&'static str> {
    let mut all = VERDICTS.to_vec();
    if is_x86() {
        all.extend_from_slice(X86_VERDICTS);
    } else {
        all.extend_from_slice(ARM64_VERDICTS);
        if crate::scenarios::kernel_patching::ftrace_call_ops() {
            all.extend_from_slice(CALL_OPS_VERDICTS);
        }
    }
    all
}

/// Whether the verdicts `seen` over the whole outsider run are exactly `expected`.
fn verdicts_expected(seen: &[String], expected: &[&str]) -> Case {
    let seen: std::collections::BTreeSet<&str> = seen.iter().map(String::as_str).collect();
    let expected: std::collections::BTreeSet<&str> = expected.iter().copied().collect();
    let missing: Vec<_> = expected.difference(&seen).collect();
    let unlisted: Vec<_> = seen.difference(&expected).collect();
    Case::check(
        "outsider_verdicts_expected",
        missing.is_empty() && unlisted.is_empty(),
        format!("verdicts never printed: {missing:?}; printed but in no list: {unlisted:?}"),
    )
    .with_log(format!("{} distinct verdicts printed", seen.len()))
}

/// One case per verdict line, after one that checks that the outsider's count of them (its
/// `N verdicts` line) matches: a verdict that was never printed fails as `NAME_reported`. The
/// verdicts' names go to `seen`.
fn verdicts(name: &str, lines: &[String], seen: &mut Vec<String>) -> Vec<Case> {
    let found = verdict_lines(lines);
    seen.extend(found.iter().map(|(n, _, _)| (*n).to_owned()));
    let said = lines.iter().rev().find_map(|l| {
        l.split_once("textpoke_outsider: ")?
            .1
            .strip_suffix(" verdicts")?
            .parse::<usize>()
            .ok()
    });
    let mut out = vec![Case::check(
        format!("{name}_reported"),
        said == Some(found.len()) && !found.is_empty(),
        format!("{} verdict lines, the outsider said {said:?}", found.len()),
    )];
    out.extend(found.into_iter().map(|(name, got, expected)| {
        Case::check(
            format!("outsider_{name}"),
            got == expected,
            format!("textpoke answered {got}, textpoke.h says {expected}"),
        )
    }));
    out
}

/// Runs the outsider's command `cmd` and returns its verdicts (their names to `seen`), with
/// `name`'s count check, and the summary line that starts with `summary` as the first case's log.
fn command_verdicts(name: &str, cmd: &str, summary: &str, seen: &mut Vec<String>) -> Vec<Case> {
    let cursor = sys::dmesg_cursor().unwrap_or_default();
    let ran = command(cmd);
    let lines = sys::dmesg_since(cursor).map(|(l, _)| l).unwrap_or_default();
    let mut out = verdicts(name, &lines, seen);
    if let Err(e) = ran {
        out.insert(0, Case::fail(name, e));
    }
    if let (Some(first), Some(line)) = (
        out.first_mut(),
        lines
            .iter()
            .find_map(|l| l.split_once(summary).map(|(_, r)| r.to_owned())),
    ) {
        first.log.push(format!("{summary}{line}"));
    }
    out
}

/// Kprobes racing commits on one site: [`KPROBE_RACE`] rounds of each.
const KPROBE_RACE: u32 = 2000;
/// Rounds of an optimized kprobe beside a site racing its commits (x86).
const OPTPROBE_RACE: u32 = 40;
/// Rounds of the optimized-kprobe race with nothing executing the function, in the control of
/// the seeded defect that ignores other patchers (x86): three probes over the NOP.
pub const OPTPROBE_UNEXECUTED: u32 = 6;
/// Flips of the outsider's own static key while its site runs with interrupts off.
const KERNEL_TRAP_FLIPS: u32 = 200;

/// The addresses of the sites the outsider kept registered.
fn kept(lines: &[String]) -> Option<Vec<u64>> {
    let rest = lines.iter().find_map(|l| {
        l.split_once("textpoke_outsider: kept sites ")
            .map(|(_, r)| r.to_owned())
    })?;
    rest.split_whitespace()
        .map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        .collect()
}

fn counters() -> Result<BTreeMap<String, String>, String> {
    sys::read_text(format!("{DIR}/counters"))
        .map(|t| exerciser::key_values(&t))
        .map_err(|e| format!("outsider counters: {e}"))
}

/// Runs the loaded outsider's optimized-kprobe race (x86) with nothing executing the probed
/// function, `rounds` rounds; returns the kernel log lines it printed.
pub fn optprobe_unexecuted(rounds: u32) -> Result<Vec<String>, String> {
    let cursor = sys::dmesg_cursor().unwrap_or_default();
    command(&format!("optprobe_unexecuted {rounds}"))?;
    sys::dmesg_since(cursor)
        .map(|(l, _)| l)
        .map_err(|e| format!("reading the kernel log: {e}"))
}

fn command(cmd: &str) -> Result<(), String> {
    sys::write_file(format!("{DIR}/control"), cmd.as_bytes())
        .map(drop)
        .map_err(|e| format!("outsider `{cmd}`: {e}"))
}

/// Foreign traps under load; returns the cases.
fn foreign_traps() -> Vec<Case> {
    let mut out = Vec::new();
    let armed = command("kprobe");
    let load = std::thread::spawn(|| exerciser::command(&format!("run {SPEC}")));
    let int3 = if is_x86() {
        Some(command(&format!("int3 {INT3_RUNS}")))
    } else {
        None
    };
    let ran = load
        .join()
        .map_err(|_| "the scenario thread panicked".to_owned());
    let disarmed = command("unkprobe");
    let c = counters();
    out.push(Case::check(
        "foreign_traps_under_load",
        matches!(ran, Ok(Ok(()))),
        format!("the scenario running meanwhile: {ran:?}"),
    ));
    out.push(match (&armed, &disarmed, &c) {
        (Ok(()), Ok(()), Ok(c)) => match exerciser::number(c, "kprobe_hits") {
            Ok(n) => Case::check(
                "kprobe_next_to_sites_reaches_its_owner",
                n > 0,
                "the kprobe next to textpoke's sites never fired",
            )
            .with_log(format!("{n} kprobe hits")),
            Err(e) => Case::fail("kprobe_next_to_sites_reaches_its_owner", e),
        },
        _ => Case::fail(
            "kprobe_next_to_sites_reaches_its_owner",
            format!("arming {armed:?}, disarming {disarmed:?}, counters {c:?}"),
        ),
    });
    if let Some(int3) = int3 {
        out.push(match (int3, &c) {
            (Ok(()), Ok(c)) => match exerciser::number(c, "int3_seen") {
                Ok(n) => Case::check(
                    "foreign_int3_reaches_its_owner",
                    n == INT3_RUNS,
                    format!("the outsider's notifier saw {n} of its {INT3_RUNS} INT3s"),
                ),
                Err(e) => Case::fail("foreign_int3_reaches_its_owner", e),
            },
            (r, c) => Case::fail(
                "foreign_int3_reaches_its_owner",
                format!("running the INT3s: {r:?}, counters {c:?}"),
            ),
        });
    }
    out
}

/// textpoke's trap path, as the running kernel knows it: every `[textpoke]` function in its
/// `.kprobes.text` section (bounds from `/sys/module/textpoke/sections`) and the C helpers it
/// calls; `(name, address)`.
fn trap_path_functions() -> Result<Vec<(String, u64)>, String> {
    let sections = "/sys/module/textpoke/sections";
    let start_of = |name: &str| -> Result<u64, String> {
        let t = sys::read_text(format!("{sections}/{name}")).map_err(|e| format!("{name}: {e}"))?;
        u64::from_str_radix(t.trim().trim_start_matches("0x"), 16).map_err(|e| e.to_string())
    };
    let start = start_of(".kprobes.text")?;
    let mut end = u64::MAX;
    for e in std::fs::read_dir(sections).map_err(|e| e.to_string())? {
        let name = e.map_err(|e| e.to_string())?.file_name();
        if let Ok(a) = start_of(&name.to_string_lossy()) {
            if a > start {
                end = end.min(a);
            }
        }
    }
    let helpers = ["textpoke_helper_cpu", "textpoke_read_text_nofault"];
    Ok(
        textpoke_agent::platform::kallsyms::module_functions("textpoke")?
            .into_iter()
            .filter(|(a, name)| (start..end).contains(a) || helpers.contains(&name.as_str()))
            .map(|(a, name)| (name, a))
            .collect(),
    )
}

/// `register_kprobe` refuses every function of the trap path; a function off it (the commit) is
/// accepted, so that the check can tell.
fn trap_path_unprobeable() -> Case {
    const NAME: &str = "trap_path_refuses_kprobes";
    let run = || -> Result<String, String> {
        let fns = trap_path_functions()?;
        if fns.len() < 3 {
            return Err(format!(
                "only {} trap-path functions found: {fns:?}",
                fns.len()
            ));
        }
        let probe = |addr: u64| command(&format!("try_kprobe {addr:x}"));
        let accepted: Vec<&String> = fns
            .iter()
            .filter(|(_, a)| probe(*a).is_ok())
            .map(|(n, _)| n)
            .collect();
        if !accepted.is_empty() {
            return Err(format!(
                "kprobes accepted trap-path functions: {accepted:?}"
            ));
        }
        let commit = crate::scenarios::badinput::kallsyms("textpoke_batch_commit")?;
        probe(commit).map_err(|e| format!("a kprobe off the trap path was refused too: {e}"))?;
        Ok(format!(
            "register_kprobe refused all {} trap-path functions and accepted textpoke_batch_commit",
            fns.len()
        ))
    };
    match run() {
        Ok(log) => Case::pass(NAME).with_log(log),
        Err(e) => Case::fail(NAME, e),
    }
}

/// Every outsider check.
pub fn cases(sites: &[Site], kcore: &Kcore) -> Case {
    let mut children = Vec::new();
    let branch = if is_x86() { "jmp32" } else { "b" };
    let Some(site) = sites.iter().find(|s| s.kind == branch) else {
        return Case::fail("outsider", "no branch site");
    };
    let cursor = sys::dmesg_cursor().unwrap_or_default();
    // The kprobe goes on the instruction right after the exerciser's first site.
    let params = format!(
        "foreign={:#x} kprobe_at={:#x}",
        site.addr,
        site.addr + site.len as u64
    );
    if let Err(e) = load("textpoke_outsider", &params) {
        return Case::group("outsider", vec![Case::fail("load_outsider", e)]);
    }
    let lines = sys::dmesg_since(cursor).map(|(l, _)| l).unwrap_or_default();
    let mut seen = Vec::new();
    children.extend(verdicts("outsider", &lines, &mut seen));
    children.extend(foreign_traps());
    children.extend(command_verdicts(
        "outsider_kprobe_race",
        &format!("kprobe_race {KPROBE_RACE}"),
        "kprobe race: ",
        &mut seen,
    ));
    if is_x86() {
        // With a tracer listening, so that the commits guard the site and its guard stands
        // while kprobes' optimizer may run.
        match textpoke_agent::platform::perf::Listener::open() {
            Ok(_listening) => children.extend(command_verdicts(
                "outsider_optprobe_race",
                &format!("optprobe_race {OPTPROBE_RACE}"),
                "optprobe race: ",
                &mut seen,
            )),
            Err(e) => children.push(Case::fail(
                "outsider_optprobe_race",
                format!("opening a listener: {e}"),
            )),
        }
    }
    children.extend(command_verdicts(
        "outsider_kernel_traps",
        &format!("kernel_traps {KERNEL_TRAP_FLIPS}"),
        "kernel traps: ",
        &mut seen,
    ));
    children.push(verdicts_expected(&seen, &expected_verdicts()));
    children.push(trap_path_unprobeable());
    let kept = kept(&lines);
    // Unloading without unregistering: textpoke forgets the sites, with a log line.
    let cursor = sys::dmesg_cursor().unwrap_or_default();
    let unloaded = sys::unload_module("textpoke_outsider");
    let lines = sys::dmesg_since(cursor).map(|(l, _)| l).unwrap_or_default();
    children.push(Case::check(
        "departed_module_sites_forgotten",
        unloaded.is_ok()
            && lines
                .iter()
                .any(|l| l.contains("a departing module left 2 sites registered")),
        format!("unloading: {unloaded:?}; textpoke's log line missing: {lines:?}"),
    ));
    match kept {
        Some(addrs) if addrs.len() == 2 => {
            let (base, len) = region(sites);
            for (i, addr) in addrs.iter().enumerate() {
                children.push(refused(
                    &format!("change_at_departed_site_{i}"),
                    kcore,
                    &[(base, len)],
                    refusal::NOT_REGISTERED.errno,
                    &format!("refusing change at {addr:#x}: not a registered site"),
                    || exerciser::command(&format!("bad foreign_add {addr:#x}")),
                ));
            }
        }
        other => children.push(Case::fail(
            "outsider_kept_sites",
            format!("no `kept sites` line with two addresses: {other:?}"),
        )),
    }
    Case::group("outsider", children)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn every_listed_verdict_must_be_printed_and_no_other() {
        assert!(verdicts_expected(&names(VERDICTS), VERDICTS).passed());
        // Printed more than once (a verdict of a repeated command) is still printed.
        let mut twice = names(VERDICTS);
        twice.push(VERDICTS[0].to_owned());
        assert!(verdicts_expected(&twice, VERDICTS).passed());
        // One that vanished (a return before its `verdict()`)...
        assert!(!verdicts_expected(&names(&VERDICTS[1..]), VERDICTS).passed());
        // ...and one no list names.
        let mut more = names(VERDICTS);
        more.push("register_something_new".to_owned());
        assert!(!verdicts_expected(&more, VERDICTS).passed());
        // arm64's are not x86's.
        let mut arm64 = names(VERDICTS);
        arm64.extend(names(ARM64_VERDICTS));
        assert!(!verdicts_expected(&arm64, VERDICTS).passed());
    }

    #[test]
    fn the_lists_name_each_verdict_once() {
        let mut all = VERDICTS.to_vec();
        all.extend_from_slice(X86_VERDICTS);
        all.extend_from_slice(ARM64_VERDICTS);
        all.extend_from_slice(CALL_OPS_VERDICTS);
        let distinct: std::collections::BTreeSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len());
    }
}
