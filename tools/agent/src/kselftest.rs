//! The kernel's own test suites, with textpoke as the kernel's patcher and without it.
//!
//! textpoke takes over every jump-label and ftrace change while it is loaded (patch 0008), so the
//! kernel maintainers' suites for those patchers must pass with it as they pass without it. Each
//! suite runs twice in the same boot, first on the stock path (textpoke not loaded), then with
//! textpoke loaded, its records collected and the kernel text read before and after:
//!
//! - ftracetest (tools/testing/selftests/ftrace of the same source, packed by
//!   tools/initramfs.sh), the cases chosen by [`FTRACE_SUBSET`] (all of [`FTRACE_DIRS`] with
//!   `textpoke.kselftest_dirs=all`);
//! - kprobes' KUnit suite (`CONFIG_KPROBES_SANITY_TEST=m`), whose KTAP the module prints as it
//!   loads.
//!
//! Every case of either run becomes one KTAP case here: it fails only when it passed on the stock
//! path and did not with textpoke. A case that fails or is unsupported both ways is no finding of
//! textpoke's; it passes with its outcome in its log line, and docs/results.md lists those as
//! the guest kernel's limitations. With textpoke, the records emitted during the run, replayed
//! in time order onto the kernel text read before it, must give the text read after it, byte
//! for byte.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use textpoke_agent::checks;
use textpoke_agent::kcore::Kcore;
use textpoke_agent::ktap::Case;
use textpoke_agent::perf::{Recorder, RecorderConfig};
use textpoke_agent::sys;

use crate::log;

/// Where tools/initramfs.sh packs ftracetest.
const FTRACETEST: &str = "/usr/share/kselftest/ftrace";

/// The ftracetest directories whose cases make the kernel patch its text: the function and
/// graph tracers with their filters and instances, ftrace direct calls, the latency tracers,
/// and kprobe events, whose probes share x86's breakpoint with textpoke's guards.
/// `textpoke.kselftest_dirs=all` on the kernel command line runs them all.
pub const FTRACE_DIRS: &[&str] = &["ftrace", "instances", "tracer", "direct", "kprobe"];

/// What `make test` runs of those, by rule rather than by result: the whole directories whose
/// cases each take seconds under TCG (`instances`, `kprobe`, `tracer`), and of the function
/// tracer's own directory, whose cases turn tracing on for every kernel function and take
/// minutes each, the two that change text under the two events the project's own checks do
/// not cause: CPU hotplug while tracing (`func_hotplug`) and a module loaded while tracing
/// (`func_mod_trace`). `direct` and the rest of `ftrace` (ten times as long) run with
/// `textpoke.kselftest_dirs=all`; `textpoke.kselftest_dirs=a,b` picks others (a directory, or a
/// case as `dir/case.tc`).
pub const FTRACE_SUBSET: &[&str] = &[
    "instances",
    "kprobe",
    "tracer",
    "ftrace/func_hotplug.tc",
    "ftrace/func_mod_trace.tc",
];

/// How long one ftracetest run may take before it counts as hung.
const FTRACETEST_LIMIT: Duration = Duration::from_secs(1200);

/// One case's outcome, as ftracetest's KTAP says it (`ok`, `not ok`, and its directives).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Passed (or an expected failure, `XFAIL`).
    Pass,
    /// Failed.
    Fail,
    /// Could not run here: a missing kernel feature or tool (`SKIP`).
    Unsupported,
    /// Neither passed nor failed (`UNRESOLVED`, an error of the test itself).
    Unresolved,
}

/// Parses ftracetest's KTAP output (`-K`): `(description, outcome)` per case, in order.
pub fn parse_ftracetest(out: &str) -> Vec<(String, Outcome)> {
    out.lines()
        .filter_map(|l| {
            let (ok, rest) = if let Some(r) = l.strip_prefix("not ok ") {
                (false, r)
            } else {
                (true, l.strip_prefix("ok ")?)
            };
            let (_, rest) = rest.split_once(' ')?;
            let (name, directive) = match rest.split_once(" # ") {
                Some((n, d)) => (n, d.trim()),
                None => (rest, ""),
            };
            let outcome = match (ok, directive.split_whitespace().next().unwrap_or("")) {
                (true, "SKIP") => Outcome::Unsupported,
                (true, _) => Outcome::Pass,
                (false, "UNRESOLVED") => Outcome::Unresolved,
                (false, _) => Outcome::Fail,
            };
            Some((name.trim().to_owned(), outcome))
        })
        .collect()
}

/// Parses KUnit's KTAP, as the kernel log has it (indented subtests): the results of the
/// suite `suite`'s tests, `(name, outcome)`.
pub fn parse_kunit(lines: &[String], suite: &str) -> Vec<(String, Outcome)> {
    let mut inside = false;
    let mut out = Vec::new();
    for l in lines {
        let t = l.trim();
        if t == format!("# Subtest: {suite}") {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        // The suite's own result line ends it.
        if (t.starts_with("ok ") || t.starts_with("not ok ")) && t.ends_with(suite) {
            break;
        }
        let (ok, rest) = if let Some(r) = t.strip_prefix("not ok ") {
            (false, r)
        } else if let Some(r) = t.strip_prefix("ok ") {
            (true, r)
        } else {
            continue;
        };
        let Some((_, rest)) = rest.split_once(' ') else {
            continue;
        };
        let (name, directive) = match rest.split_once(" # ") {
            Some((n, d)) => (n, d),
            None => (rest, ""),
        };
        let outcome = match (ok, directive.trim().starts_with("SKIP")) {
            (true, true) => Outcome::Unsupported,
            (true, false) => Outcome::Pass,
            (false, _) => Outcome::Fail,
        };
        out.push((name.trim().to_owned(), outcome));
    }
    out
}

/// The ftracetest case files of `entries` (directories of `test.d`, or single cases in them),
/// sorted.
fn ftrace_cases(entries: &[String]) -> Result<Vec<String>, String> {
    let mut cases = Vec::new();
    for d in entries {
        let path = Path::new(FTRACETEST).join("test.d").join(d);
        if path.extension().is_some_and(|x| x == "tc") {
            if !path.is_file() {
                return Err(format!("{}: no such case", path.display()));
            }
            cases.push(path.to_string_lossy().into_owned());
            continue;
        }
        let entries = std::fs::read_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        for e in entries {
            let p = e.map_err(|e| e.to_string())?.path();
            if p.extension().is_some_and(|x| x == "tc") {
                cases.push(p.to_string_lossy().into_owned());
            }
        }
    }
    cases.sort();
    Ok(cases)
}

/// Runs ftracetest on `cases`; its KTAP, parsed. Each case's result line goes to the log with
/// the seconds since the one before, which is what the case took.
fn run_ftracetest(cases: &[String]) -> Result<Vec<(String, Outcome)>, String> {
    use std::io::BufRead;
    let logdir = "/tmp/ftracetest-logs";
    let _ = std::fs::remove_dir_all(logdir);
    let mut child = Command::new("/bin/sh")
        .current_dir(FTRACETEST)
        .arg("./ftracetest")
        .args(["-K", "-l", logdir])
        .args(cases)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting ftracetest: {e}"))?;
    let stdout = child.stdout.take().ok_or("ftracetest: no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let mut last = Instant::now();
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("ok ") || line.starts_with("not ok ") {
                log(&format!(
                    "ftracetest: {line} ({:.1} s)",
                    last.elapsed().as_secs_f64()
                ));
                last = Instant::now();
            }
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let start = Instant::now();
    loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(_) => break,
            None if start.elapsed() > FTRACETEST_LIMIT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("ftracetest ran longer than {FTRACETEST_LIMIT:?}"));
            }
            None => std::thread::sleep(Duration::from_millis(200)),
        }
    }
    let text = reader
        .join()
        .map_err(|_| "ftracetest: the output reader panicked")?;
    let results = parse_ftracetest(&text);
    // A case flagged `instance` runs once more inside a trace instance, with a result of its
    // own: at least one result per case.
    if results.len() < cases.len() {
        return Err(format!(
            "ftracetest reported {} results for {} cases",
            results.len(),
            cases.len()
        ));
    }
    Ok(results)
}

/// Where tools/initramfs.sh installs the kernel's modules (`modules_install`), this kernel's.
fn modules_dir() -> Result<std::path::PathBuf, String> {
    let release = sys::read_text("/proc/sys/kernel/osrelease")
        .map_err(|e| format!("/proc/sys/kernel/osrelease: {e}"))?;
    Ok(Path::new("/lib/modules").join(release.trim()))
}

/// The first file named `name` under `dir`.
fn find_file(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(found) = find_file(&p, name) {
                return Some(found);
            }
        } else if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
    }
    None
}

/// KUnit's filter of the suites and cases a module runs (`suite.case` globs).
const KUNIT_FILTER: &str = "/sys/module/kunit/parameters/filter_glob";

/// The cases of kprobes' KUnit suite that run. Its stack-trace cases need an exact unwinder
/// (`ARCH_CORRECT_STACKTRACE_ON_KRETPROBE`), which the x86 guest kernel has not (it unwinds by
/// guessing, `UNWINDER_GUESS`): there they fail, and one sleeps in atomic context, a splat that
/// would end the boot, with or without textpoke. Every other case runs, as do all on arm64.
fn kunit_cases() -> &'static str {
    if crate::is_x86() {
        "kprobes_test.test_k*"
    } else {
        "kprobes_test"
    }
}

/// Loads kprobes' KUnit suite (`test_kprobes.ko`, from the kernel's installed modules) and
/// returns its results. KUnit prints them to the kernel log as the module loads; the console
/// is kept to warnings meanwhile, so that the boot's console carries only the agent's KTAP.
fn run_kunit_kprobes() -> Result<Vec<(String, Outcome)>, String> {
    const PRINTK: &str = "/proc/sys/kernel/printk";
    let dir = modules_dir()?;
    let ko = find_file(&dir, "test_kprobes.ko")
        .ok_or_else(|| format!("no test_kprobes.ko under {}", dir.display()))?;
    let printk = sys::read_text(PRINTK).map_err(|e| format!("{PRINTK}: {e}"))?;
    let level = printk
        .split_whitespace()
        .next()
        .ok_or_else(|| format!("{PRINTK} is empty"))?
        .to_owned();
    let cursor = sys::dmesg_cursor().map_err(|e| e.to_string())?;
    let put = |path: &str, value: &[u8]| {
        sys::write_file(path, value)
            .map(drop)
            .map_err(|e| format!("{path}: {e}"))
    };
    put(KUNIT_FILTER, kunit_cases().as_bytes())?;
    // From here on both settings are put back whatever happens.
    let loaded = put(PRINTK, b"4").and_then(|()| {
        sys::load_module(&ko, "").map_err(|e| format!("loading {}: {e}", ko.display()))
    });
    let restored = put(PRINTK, level.as_bytes()).and(put(KUNIT_FILTER, b"*"));
    let lines = sys::dmesg_since(cursor)
        .map(|(l, _)| l)
        .map_err(|e| e.to_string())?;
    if loaded.is_ok() {
        sys::unload_module("test_kprobes").map_err(|e| format!("unloading test_kprobes: {e}"))?;
    }
    restored?;
    loaded?;
    let results = parse_kunit(&lines, "kprobes_test");
    if results.is_empty() {
        return Err("no kprobes_test results in the kernel log".into());
    }
    Ok(results)
}

/// The ftracetest cases that take CPUs offline. With textpoke they run after its records are
/// checked: perf's per-CPU events end for good when their CPU goes offline, so a record
/// emitted there afterwards reaches no recorder, as it would reach no `perf record` (the
/// hotplug group of the guest suite records around the same limit).
const TAKES_CPUS_OFFLINE: &[&str] = &["func_hotplug.tc"];

fn takes_cpus_offline(case: &str) -> bool {
    TAKES_CPUS_OFFLINE
        .iter()
        .any(|n| Path::new(case).file_name().is_some_and(|f| f == *n))
}

/// Runs ftracetest on `cases` into `out`, keyed `ftracetest/CASE`, or `key` if it failed.
fn run_ftrace_into(
    cases: Result<Vec<String>, String>,
    key: &str,
    out: &mut BTreeMap<String, Result<Outcome, String>>,
) {
    match cases.and_then(|c| {
        if c.is_empty() {
            Ok(Vec::new())
        } else {
            run_ftracetest(&c)
        }
    }) {
        Ok(r) => out.extend(
            r.into_iter()
                .map(|(n, o)| (format!("ftracetest/{n}"), Ok(o))),
        ),
        Err(e) => {
            out.insert(key.to_owned(), Err(e));
        }
    }
}

/// Runs kprobes' KUnit suite into `out`, keyed `kprobes_kunit/CASE`.
fn run_kunit_into(out: &mut BTreeMap<String, Result<Outcome, String>>) {
    match run_kunit_kprobes() {
        Ok(r) => out.extend(
            r.into_iter()
                .map(|(n, o)| (format!("kprobes_kunit/{n}"), Ok(o))),
        ),
        Err(e) => {
            out.insert("kprobes_kunit".to_owned(), Err(e));
        }
    }
}

/// The case of one suite case, judged from its stock and its textpoke outcome.
pub fn judge(
    name: &str,
    stock: Option<&Result<Outcome, String>>,
    with: Option<&Result<Outcome, String>>,
) -> Case {
    let case_name = format!(
        "kernel_suite_{}",
        name.replace(['/', ' ', '-', ':', '.'], "_")
    );
    match (stock, with) {
        (_, Some(Ok(Outcome::Pass))) => Case::pass(case_name)
            .with_log(format!("{name}: passes with textpoke (stock: {stock:?})")),
        (Some(Ok(Outcome::Pass)), w) => Case::fail(
            case_name,
            format!("{name} passes on the stock path and not with textpoke: {w:?}"),
        ),
        (s, w) => Case::pass(case_name).with_log(format!(
            "{name} does not pass on this guest kernel either way (stock: {s:?}, textpoke: {w:?})"
        )),
    }
}

/// What of ftracetest to run: [`FTRACE_SUBSET`], or as `textpoke.kselftest_dirs` says.
fn dirs() -> Vec<String> {
    match sys::cmdline_param("textpoke.kselftest_dirs").as_deref() {
        Some("all") => FTRACE_DIRS.iter().map(|d| (*d).to_owned()).collect(),
        Some(list) => list.split(',').map(str::to_owned).collect(),
        None => FTRACE_SUBSET.iter().map(|d| (*d).to_owned()).collect(),
    }
}

/// The stock run: textpoke must not be loaded. Returns the results to compare with.
pub fn stock() -> BTreeMap<String, Result<Outcome, String>> {
    log("kernel suites: the stock path");
    let start = Instant::now();
    let mut r = BTreeMap::new();
    run_ftrace_into(ftrace_cases(&dirs()), "ftracetest", &mut r);
    run_kunit_into(&mut r);
    log(&format!(
        "kernel suites: stock run took {:.0} s",
        start.elapsed().as_secs_f64()
    ));
    r
}

/// The run with textpoke loaded as the kernel's patcher, judged against `stock`.
pub fn with_textpoke(stock: &BTreeMap<String, Result<Outcome, String>>, kcore: &Kcore) -> Case {
    log("kernel suites: with textpoke");
    let start = Instant::now();
    let text = match crate::kernel_patching::kernel_text() {
        Ok(t) => t,
        Err(e) => return Case::fail("kernel_suites", e),
    };
    let counters = crate::kernel_patching::counters();
    let mut rec = match Recorder::open(&RecorderConfig { data_pages: 2048 }) {
        Ok(r) => r,
        Err(e) => return Case::fail("kernel_suites", format!("perf recorder: {e}")),
    };
    let before = kcore.read(text.0, text.1);
    let cases = ftrace_cases(&dirs());
    let (late, early): (Vec<String>, Vec<String>) = cases
        .as_ref()
        .map(|c| c.iter().cloned().partition(|c| takes_cpus_offline(c)))
        .unwrap_or_default();
    let mut results = BTreeMap::new();
    run_ftrace_into(cases.map(|_| early), "ftracetest", &mut results);
    run_kunit_into(&mut results);
    let drain = rec.drain();
    let after = kcore.read(text.0, text.1);
    drop(rec);
    // What textpoke did while its records were taken.
    let moved =
        crate::kernel_patching::counters_moved(&counters, &crate::kernel_patching::counters());
    run_ftrace_into(Ok(late), "ftracetest (CPUs offline)", &mut results);
    log(&format!(
        "kernel suites: with textpoke took {:.0} s",
        start.elapsed().as_secs_f64()
    ));
    let mut children: Vec<Case> = stock
        .keys()
        .chain(results.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|name| judge(name, stock.get(name), results.get(name)))
        .collect();
    // The records against the text itself.
    let delta = |k: &str| moved.get(k).copied().unwrap_or(0);
    let replay = (|| -> Result<String, String> {
        if !drain.is_clean() {
            return Err(format!(
                "perf may have lost records ({} lost)",
                drain.lost_records
            ));
        }
        let (mut before, after) = (
            before.map_err(|e| format!("kcore before: {e}"))?,
            after.map_err(|e| format!("kcore after: {e}"))?,
        );
        let end = text.0.saturating_add(text.1 as u64);
        let pokes: Vec<_> = drain
            .pokes
            .iter()
            .filter(|p| p.addr >= text.0 && p.addr < end)
            .cloned()
            .collect();
        if !crate::is_x86() {
            crate::kernel_patching::copy_ftrace_literals(&mut before, &after);
        }
        let n = checks::replay_checked(text.0, &before, &after, &pokes).map_err(|e| {
            // The records at that address, in time order, and the text there before and after:
            // enough to tell whose change went unrecorded.
            let at = e.addr();
            let mut there: Vec<_> = pokes
                .iter()
                .filter(|p| p.addr <= at && at < p.addr.saturating_add(p.old.len().max(1) as u64))
                .collect();
            there.sort_by_key(|p| (p.time, p.id));
            let bytes = |img: &[u8]| {
                let off = usize::try_from(at.saturating_sub(text.0)).unwrap_or(usize::MAX);
                img.get(off..off.saturating_add(8)).map(<[u8]>::to_vec)
            };
            format!(
                "{e}; records there (time, old, new): {:02x?}; text before {:02x?}, after {:02x?}",
                there
                    .iter()
                    .take(8)
                    .map(|p| (p.time, &p.old, &p.new))
                    .collect::<Vec<_>>(),
                bytes(&before),
                bytes(&after)
            )
        })?;
        Ok(format!(
            "{} records in the kernel text replayed onto kcore before the suites give kcore after \
             ({n} changes); textpoke: {} changes in {} batches, {} records, {} traps, {} handed back",
            pokes.len(),
            delta("kernel.sites"),
            delta("kernel.batches"),
            delta("kernel.records"),
            delta("kernel.traps"),
            delta("kernel.declined"),
        ))
    })();
    children.push(match replay {
        Ok(l) => Case::pass("kernel_suites_records_replay_onto_kcore").with_log(l),
        Err(e) => Case::fail("kernel_suites_records_replay_onto_kcore", e),
    });
    Case::group("kernel_suites", children)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ftracetest_ktap_is_parsed_per_case() {
        let out = "TAP version 13\n1..4\nok 1 Basic trace file check\n\
                   not ok 2 ftrace - function graph filters\n\
                   ok 3 Kprobe dynamic event - adding and removing # SKIP\n\
                   not ok 4 Test wakeup tracer # UNRESOLVED\n# Totals: pass:1\n";
        assert_eq!(
            parse_ftracetest(out),
            [
                ("Basic trace file check".to_owned(), Outcome::Pass),
                ("ftrace - function graph filters".to_owned(), Outcome::Fail),
                (
                    "Kprobe dynamic event - adding and removing".to_owned(),
                    Outcome::Unsupported
                ),
                ("Test wakeup tracer".to_owned(), Outcome::Unresolved),
            ]
        );
    }

    #[test]
    fn kunit_results_are_those_of_the_suite() {
        let lines: Vec<String> = [
            "KTAP version 1",
            "1..1",
            "    KTAP version 1",
            "    # Subtest: kprobes_test",
            "    1..3",
            "    ok 1 test_kprobe",
            "    not ok 2 test_kprobes",
            "    ok 3 test_kretprobe # SKIP not supported",
            "# kprobes_test: pass:1 fail:1 skip:1 total:3",
            "not ok 1 kprobes_test",
            "ok 1 unrelated",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        assert_eq!(
            parse_kunit(&lines, "kprobes_test"),
            [
                ("test_kprobe".to_owned(), Outcome::Pass),
                ("test_kprobes".to_owned(), Outcome::Fail),
                ("test_kretprobe".to_owned(), Outcome::Unsupported),
            ]
        );
    }

    #[test]
    fn a_case_fails_only_when_it_passed_stock_and_not_with_textpoke() {
        let pass = Ok(Outcome::Pass);
        let fail = Ok(Outcome::Fail);
        let unsupported = Ok(Outcome::Unsupported);
        assert!(judge("a", Some(&pass), Some(&pass)).passed());
        assert!(!judge("a", Some(&pass), Some(&fail)).passed());
        assert!(!judge("a", Some(&pass), None).passed());
        assert!(judge("a", Some(&fail), Some(&fail)).passed());
        assert!(judge("a", Some(&unsupported), Some(&unsupported)).passed());
        assert!(judge("a", Some(&fail), Some(&pass)).passed());
        assert!(!judge("a", Some(&pass), Some(&Err("hung".into()))).passed());
    }
}
