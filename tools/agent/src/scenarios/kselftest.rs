//! The kernel's own test suites, with textpoke as the kernel's patcher and without it.
//!
//! textpoke takes over every jump-label and ftrace change while it is loaded (patch 0008), so the
//! kernel maintainers' suites for those patchers must pass with it as they pass without it. Each
//! suite runs twice in the same boot, first on the stock path (textpoke not loaded), then with
//! textpoke loaded, its records collected and the kernel text read before and after each suite:
//!
//! - ftracetest (tools/testing/selftests/ftrace of the same source, packed by
//!   tools/initramfs.sh), the cases chosen by [`FTRACE_SUBSET`] (all of [`FTRACE_DIRS`] with
//!   `textpoke.kselftest_dirs=all`);
//! - kprobes' KUnit suite (`CONFIG_KPROBES_SANITY_TEST=m`), whose KTAP the module prints as it
//!   loads;
//! - on the kernels with livepatch (x86's), the livepatch selftests
//!   (tools/testing/selftests/livepatch, packed by tools/initramfs.sh with their test modules),
//!   each script one case and each of its tests another: livepatch redirects functions through
//!   ftrace, so through textpoke.
//!
//! Every case of either run, and every livepatch test a script declares, becomes one KTAP case
//! here: it fails when it passed on the stock path and did not with textpoke. A case that passes
//! neither way is no finding of textpoke's when it is one of [`KNOWN_LIMITATIONS`], the guest
//! kernel's, with the outcome listed there: it passes with the reason in its log line. Any other
//! fails. With textpoke, the records emitted during each suite's run, replayed in time order
//! onto the kernel text read before it, must give the text read after it, byte for byte.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use textpoke_agent::oracle::checks;
use textpoke_agent::platform::guest::{self, log};
use textpoke_agent::platform::kcore::Kcore;
use textpoke_agent::platform::perf::{Drain, Recorder, RecorderConfig};
use textpoke_agent::platform::sys;
use textpoke_agent::report::ktap::Case;

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

/// How long one ftracetest run of [`FTRACE_SUBSET`] may take before it counts as hung.
const FTRACETEST_LIMIT: Duration = Duration::from_secs(1200);

/// How long each case of another selection (`textpoke.kselftest_dirs`) may take: the function
/// tracer's own cases turn tracing on for every kernel function, minutes each under TCG.
const FTRACETEST_CASE_LIMIT: Duration = Duration::from_secs(180);

/// How long one ftracetest run of `cases` may take before it counts as hung.
fn ftracetest_limit(cases: usize) -> Duration {
    if sys::cmdline_param("textpoke.kselftest_dirs").is_none() {
        return FTRACETEST_LIMIT;
    }
    FTRACETEST_CASE_LIMIT.saturating_mul(u32::try_from(cases).unwrap_or(u32::MAX))
}

/// Where tools/initramfs.sh packs the livepatch selftests (tools/testing/selftests/livepatch of
/// the same source), their test modules built in `test_modules/`: for the kernels with livepatch,
/// x86's (arm64 has none in 6.12).
const LIVEPATCH: &str = "/usr/share/kselftest/livepatch";

/// The programs the livepatch selftests call beyond busybox (tools/debian-bundle.sh): first in
/// their PATH, and no one else's; and util-linux's `chrt`, which ftracetest's wakeup tracer
/// cases run, last in ftracetest's PATH (busybox first, as the rest of its cases have always
/// run).
const KSELFTEST_BIN: &str = "/usr/lib/kselftest/bin";

/// How long one livepatch selftest script may take before it counts as hung. Each of its waits
/// gives up by itself after a minute (`loop_until` in functions.sh).
const LIVEPATCH_LIMIT: Duration = Duration::from_secs(600);

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

/// One case file as ftracetest announces it: its path below `test.d`, its description as its
/// KTAP line gives it (whitespace collapsed, as ftracetest's unquoted `echo` does), and whether it
/// runs a second time inside a trace instance (`flags: instance`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseFile {
    /// Below `test.d`, for example `ftrace/fgraph-filter.tc`.
    pub path: String,
    /// What its `description:` line says.
    pub description: String,
    /// Whether it has the `instance` flag.
    pub instance: bool,
}

/// Where ftracetest's case files are.
fn test_d() -> std::path::PathBuf {
    Path::new(FTRACETEST).join("test.d")
}

impl CaseFile {
    /// Reads the header of the case file whose path below `test.d` is `path`.
    fn read(path: String) -> Result<Self, String> {
        let file = test_d().join(&path);
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        Ok(Self::parse(path, &text))
    }

    /// The file itself.
    fn file(&self) -> std::path::PathBuf {
        test_d().join(&self.path)
    }

    /// The header of a case file's `text`, as ftracetest's `testcase` and `test_on_instance`
    /// read it.
    fn parse(path: String, text: &str) -> Self {
        let field = |name: &str| {
            text.lines().find_map(|l| {
                let rest = l.strip_prefix('#')?.trim_start_matches([' ', '\t']);
                rest.strip_prefix(name)?
                    .strip_prefix(':')
                    .map(str::to_owned)
            })
        };
        let description = field("description")
            .unwrap_or_default()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let instance = field("flags").is_some_and(|f| f.contains("instance"));
        Self {
            path,
            description,
            instance,
        }
    }
}

/// ftracetest's results keyed by case file: it runs `cases` in the order given, then again,
/// each in a trace instance, those with the `instance` flag (their keys end ` (instance)`). Each
/// result's description must be its file's: two files may share a description
/// (`fgraph-filter.tc` and `fgraph-multi.tc` do), so the description cannot be the key.
pub fn key_by_file(
    cases: &[CaseFile],
    results: Vec<(String, Outcome)>,
) -> Result<Vec<(String, Outcome)>, String> {
    let order = cases
        .iter()
        .map(|c| (c.path.clone(), c.description.clone()))
        .chain(cases.iter().filter(|c| c.instance).map(|c| {
            (
                format!("{} (instance)", c.path),
                format!("(instance) {}", c.description),
            )
        }));
    let mut out = Vec::new();
    let mut results = results.into_iter();
    for (key, description) in order {
        let Some((name, outcome)) = results.next() else {
            return Err(format!(
                "ftracetest gave no result for {key} and the cases after it"
            ));
        };
        if name != description {
            return Err(format!(
                "ftracetest's result for {key} is {name:?}, whose description is {description:?}"
            ));
        }
        out.push((key, outcome));
    }
    match results.next() {
        Some((name, _)) => Err(format!(
            "ftracetest gave a result for no case file: {name:?}"
        )),
        None => Ok(out),
    }
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

/// Parses what a livepatch selftest script prints: `TEST: DESCRIPTION ... ok` per case, `not ok`
/// (or another word, `FAIL`) when it failed, nothing after the dots when the script died inside
/// it. A script ends at its first failure, so the cases after it are missing.
pub fn parse_livepatch(out: &str) -> Vec<(String, Outcome)> {
    out.lines()
        .filter_map(|l| {
            let (name, result) = l.strip_prefix("TEST: ")?.split_once(" ...")?;
            let outcome = if result.trim() == "ok" {
                Outcome::Pass
            } else {
                Outcome::Fail
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
/// sorted by path.
fn ftrace_cases(entries: &[String]) -> Result<Vec<CaseFile>, String> {
    let root = test_d();
    let mut cases = Vec::new();
    for d in entries {
        let path = root.join(d);
        if path.extension().is_some_and(|x| x == "tc") {
            if !path.is_file() {
                return Err(format!("{}: no such case", path.display()));
            }
            cases.push(CaseFile::read(d.clone())?);
            continue;
        }
        let entries = std::fs::read_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        for e in entries {
            let p = e.map_err(|e| e.to_string())?.path();
            if p.extension().is_some_and(|x| x == "tc") {
                let below = p
                    .strip_prefix(&root)
                    .map_err(|e| format!("{}: {e}", p.display()))?
                    .to_string_lossy()
                    .into_owned();
                cases.push(CaseFile::read(below)?);
            }
        }
    }
    cases.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(cases)
}

/// Runs ftracetest on `cases`; its KTAP, parsed and keyed by case file ([`key_by_file`]). Each
/// case's result line goes to the log with the seconds since the one before, which is what the
/// case took.
fn run_ftracetest(cases: &[CaseFile]) -> Result<Vec<(String, Outcome)>, String> {
    use std::io::BufRead;
    let logdir = "/tmp/ftracetest-logs";
    let _ = std::fs::remove_dir_all(logdir);
    let mut child = Command::new("/bin/sh")
        .current_dir(FTRACETEST)
        .arg("./ftracetest")
        // The two `--fail-` options only make ftracetest keep the logs of those cases too (its
        // exit status is not read); their KTAP lines stay as they are.
        .args([
            "-K",
            "-l",
            logdir,
            "--fail-unsupported",
            "--fail-unresolved",
        ])
        .args(cases.iter().map(CaseFile::file))
        .env(
            "PATH",
            format!("/usr/bin:/bin:/usr/sbin:/sbin:{KSELFTEST_BIN}"),
        )
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
    // Its exit status is not read: the KTAP says what passed.
    wait_limited(&mut child, ftracetest_limit(cases.len()), "ftracetest")?;
    let text = reader
        .join()
        .map_err(|_| "ftracetest: the output reader panicked")?;
    let results = parse_ftracetest(&text);
    log_kept_ftracetest_logs(logdir);
    key_by_file(cases, results)
}

/// Logs the end of every case log ftracetest kept: it removes those of the cases that passed
/// (or failed as expected), and the rest end with the command that failed or the requirement
/// missing (cases run under `set -x`), which is the reason a case does not pass.
fn log_kept_ftracetest_logs(logdir: &str) {
    let mut logs: Vec<_> = walk(Path::new(logdir))
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains("-log."))
        })
        .collect();
    logs.sort();
    for p in logs {
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(6)..].join(" | ");
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        log(&format!(
            "ftracetest kept {}: ... {tail}",
            name.unwrap_or_default()
        ));
    }
}

/// Every file under `dir`, recursively.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Where tools/initramfs.sh installs the kernel's modules (`modules_install`), this kernel's.
fn modules_dir() -> Result<std::path::PathBuf, String> {
    let release = sys::read_text("/proc/sys/kernel/osrelease")
        .map_err(|e| format!("/proc/sys/kernel/osrelease: {e}"))?;
    Ok(Path::new("/lib/modules").join(release.trim()))
}

/// The first file named `name` under `dir`.
fn find_file(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    walk(dir)
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == name))
}

/// Waits for `child` to exit; kills it once it has run `limit`, and says so naming `what`.
fn wait_limited(
    child: &mut std::process::Child,
    limit: Duration,
    what: &str,
) -> Result<std::process::ExitStatus, String> {
    let start = Instant::now();
    loop {
        match child.try_wait().map_err(|e| format!("{what}: {e}"))? {
            Some(status) => return Ok(status),
            None if start.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what} ran longer than {limit:?}"));
            }
            None => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// KUnit's filter of the suites and cases a module runs (`suite.case` globs).
const KUNIT_FILTER: &str = "/sys/module/kunit/parameters/filter_glob";

/// The cases of kprobes' KUnit suite that run: all of them. Its stack-trace cases need an exact
/// unwinder (`ARCH_CORRECT_STACKTRACE_ON_KRETPROBE`), which the x86 guest kernel has in ORC
/// (tools/kconfig/x86_64.config).
const KUNIT_CASES: &str = "kprobes_test";

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
    put(KUNIT_FILTER, KUNIT_CASES.as_bytes())?;
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

/// Runs every livepatch selftest script (`test-*.sh`, in name order, as kselftest's runner would
/// run them one by one) and returns each script's result, keyed by its name, and each of its
/// cases', keyed `SCRIPT/DESCRIPTION`. `Ok(None)` when this kernel has no livepatch.
fn run_livepatch() -> Result<Option<Vec<(String, Outcome)>>, String> {
    let Some(scripts) = livepatch_scripts()? else {
        return Ok(None);
    };
    let mut results = Vec::new();
    for script in &scripts {
        let (out, err) = ("/tmp/livepatch.out", "/tmp/livepatch.err");
        let file = |p: &str| std::fs::File::create(p).map_err(|e| format!("{p}: {e}"));
        let start = Instant::now();
        let mut child = Command::new(format!("{KSELFTEST_BIN}/bash"))
            .arg(format!("./{script}"))
            .current_dir(LIVEPATCH)
            .env(
                "PATH",
                format!("{KSELFTEST_BIN}:/usr/bin:/bin:/usr/sbin:/sbin"),
            )
            // functions.sh skips every case unless KDIR names a directory, the kernel tree it
            // would build the test modules in; they come built.
            .env("KDIR", LIVEPATCH)
            .stdin(Stdio::null())
            .stdout(file(out)?)
            .stderr(file(err)?)
            .spawn()
            .map_err(|e| format!("starting {script}: {e}"))?;
        let status = wait_limited(&mut child, LIVEPATCH_LIMIT, script)?;
        let text = |p: &str| sys::read_text(p).map_err(|e| format!("{p}: {e}"));
        let (stdout, stderr) = (text(out)?, text(err)?);
        // kselftest's exit codes: 0 passed, 4 skipped.
        let outcome = match status.code() {
            Some(0) => Outcome::Pass,
            Some(4) => Outcome::Unsupported,
            _ => Outcome::Fail,
        };
        let cases = parse_livepatch(&stdout);
        // Not `livepatch:`: functions.sh takes the kernel's lines with that word for its own.
        log(&format!(
            "livepatch selftest {script}: {status}, {} cases ({:.1} s){}",
            cases.len(),
            start.elapsed().as_secs_f64(),
            if outcome == Outcome::Pass {
                String::new()
            } else {
                format!("; its output: {stdout:?}, {stderr:?}")
            }
        ));
        results.push((script.clone(), outcome));
        results.extend(cases.into_iter().map(|(n, o)| (format!("{script}/{n}"), o)));
    }
    Ok(Some(results))
}

/// The livepatch selftest scripts (`test-*.sh`), sorted; `None` when this kernel has no
/// livepatch.
fn livepatch_scripts() -> Result<Option<Vec<String>>, String> {
    if !Path::new("/sys/kernel/livepatch").is_dir() {
        return Ok(None);
    }
    let mut scripts: Vec<String> = std::fs::read_dir(LIVEPATCH)
        .map_err(|e| format!("{LIVEPATCH}: {e}"))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("test-") && n.ends_with(".sh"))
        .collect();
    scripts.sort();
    if scripts.is_empty() {
        return Err(format!("no test-*.sh under {LIVEPATCH}"));
    }
    Ok(Some(scripts))
}

/// The tests a livepatch selftest script declares, in order: its `start_test "DESCRIPTION"`
/// lines. A script ends at its first failure, so a test after it would otherwise vanish from
/// both runs instead of being reported.
pub fn livepatch_tests(script: &str) -> Vec<String> {
    script
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix("start_test \"")?;
            Some(rest.strip_suffix('"')?.to_owned())
        })
        .collect()
}

/// The keys of every livepatch case, as [`run_livepatch_into`] names them, decided before
/// either run: each script and each test it declares. Empty when this kernel has no livepatch;
/// `livepatch`, which fails, when its scripts cannot be read.
fn livepatch_plan() -> Vec<String> {
    let scripts = match livepatch_scripts() {
        Ok(Some(s)) => s,
        Ok(None) => return Vec::new(),
        Err(_) => return vec!["livepatch".to_owned()],
    };
    let mut keys = Vec::new();
    for script in scripts {
        // A script that cannot be read plans `livepatch`, which no run reports: it fails.
        let Ok(text) = sys::read_text(format!("{LIVEPATCH}/{script}")) else {
            keys.push("livepatch".to_owned());
            continue;
        };
        keys.extend(
            livepatch_tests(&text)
                .into_iter()
                .map(|t| format!("livepatch/{script}/{t}")),
        );
        keys.push(format!("livepatch/{script}"));
    }
    keys
}

/// Runs the livepatch selftests into `out`, keyed `livepatch/…`, or `livepatch` if they could
/// not run. False when this kernel has no livepatch, so none ran.
fn run_livepatch_into(out: &mut BTreeMap<String, Result<Outcome, String>>) -> bool {
    match run_livepatch() {
        Ok(Some(r)) => out.extend(
            r.into_iter()
                .map(|(n, o)| (format!("livepatch/{n}"), Ok(o))),
        ),
        Ok(None) => {
            log("kernel suites: no livepatch in this kernel, so none of its selftests");
            return false;
        }
        Err(e) => {
            out.insert("livepatch".to_owned(), Err(e));
        }
    }
    true
}

/// What textpoke's `kernel.*` counters say it did, from how they moved
/// ([`crate::scenarios::kernel_patching::counters_moved`]).
fn what_textpoke_did(moved: &BTreeMap<String, u64>) -> String {
    let n = |k: &str| moved.get(k).copied().unwrap_or(0);
    format!(
        "{} changes in {} batches, {} records, {} traps, {} handed back",
        n("kernel.sites"),
        n("kernel.batches"),
        n("kernel.records"),
        n("kernel.traps"),
        n("kernel.declined"),
    )
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

/// Runs ftracetest on `cases` into `out`, keyed `ftracetest/DIR/FILE.tc` (and ` (instance)`),
/// or `key` if it failed.
fn run_ftrace_into(
    cases: Result<Vec<CaseFile>, String>,
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

/// The arches a [`Limitation`] holds on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum On {
    /// Both guest kernels.
    Both,
    /// The x86 guest kernels.
    X86,
    /// The arm64 guest kernels.
    Arm64,
}

/// A case of the kernel's suites that cannot pass in these guests, with or without textpoke.
#[derive(Debug)]
pub struct Limitation {
    /// The case, as [`judge`] is given it (`ftracetest/DIR/FILE.tc`, …).
    pub case: &'static str,
    /// Where.
    pub on: On,
    /// What it gives, both ways.
    pub outcome: Outcome,
    /// Why, from the log its run keeps.
    pub why: &'static str,
}

/// Why ftracetest's `direct` cases cannot run on arm64.
const NO_DIRECT_SAMPLE: &str = "the arm64 guest kernels are built without the ftrace-direct \
                                sample module it loads (tools/kconfig/x86_64.config says why)";

/// The cases of the kernel's suites that `make test` and `make test-full` run and the guest
/// kernels cannot pass, and why. docs/results.md lists them from here. A case that passes
/// neither way and is not here, or gives another outcome than the one here, fails: a suite
/// that stops running, or a case that breaks on both paths, is a finding, never a silent pass.
pub const KNOWN_LIMITATIONS: &[Limitation] = &[
    Limitation {
        case: "ftracetest/kprobe/kprobe_eventname.tc",
        on: On::Both,
        outcome: Outcome::Unresolved,
        why: "its second part probes a GCC `.isra.` clone, and clang makes none: no function \
              to probe",
    },
    Limitation {
        case: "ftracetest/kprobe/kretprobe_maxactive.tc",
        on: On::Both,
        outcome: Outcome::Fail,
        why: "it probes inet_csk_accept, which the guest kernels, built without networking, \
              lack",
    },
    Limitation {
        case: "ftracetest/ftrace/fgraph-retval.tc",
        on: On::Both,
        outcome: Outcome::Unsupported,
        why: "the guest kernels are built without FUNCTION_GRAPH_RETVAL: no \
              options/funcgraph-retval",
    },
    Limitation {
        case: "ftracetest/direct/ftrace-direct.tc",
        on: On::Arm64,
        outcome: Outcome::Unresolved,
        why: NO_DIRECT_SAMPLE,
    },
    Limitation {
        case: "ftracetest/direct/kprobe-direct.tc",
        on: On::Arm64,
        outcome: Outcome::Unresolved,
        why: NO_DIRECT_SAMPLE,
    },
    Limitation {
        case: "ftracetest/kprobe/kprobe_opt_types.tc",
        on: On::Arm64,
        outcome: Outcome::Unsupported,
        why: "the case knows no arm64 instruction to probe (\"Please implement other \
              architecture here\")",
    },
    Limitation {
        case: "ftracetest/kprobe/kprobe_non_uniq_symbol.tc",
        on: On::Arm64,
        outcome: Outcome::Unsupported,
        why: "it wants name_show defined twice, and the arm64 guest kernel has one",
    },
];

/// The known limitation of case `name` on this arch, if any.
fn known_limitation(name: &str) -> Option<&'static Limitation> {
    let here = if guest::is_x86() { On::X86 } else { On::Arm64 };
    KNOWN_LIMITATIONS
        .iter()
        .find(|l| l.case == name && (l.on == On::Both || l.on == here))
}

/// The case of one suite case, judged from its stock and its textpoke outcome, and what is known
/// of it on this guest kernel.
pub fn judge(
    name: &str,
    stock: Option<&Result<Outcome, String>>,
    with: Option<&Result<Outcome, String>>,
    known: Option<&Limitation>,
) -> Case {
    let case_name = format!(
        "kernel_suite_{}",
        name.replace(['/', ' ', '-', ':', '.'], "_")
    );
    match (stock, with, known) {
        (_, Some(Ok(Outcome::Pass)), _) => Case::pass(case_name)
            .with_log(format!("{name}: passes with textpoke (stock: {stock:?})")),
        (Some(Ok(Outcome::Pass)), w, _) => Case::fail(
            case_name,
            format!("{name} passes on the stock path and not with textpoke: {w:?}"),
        ),
        (Some(Ok(s)), Some(Ok(w)), Some(l)) if *s == l.outcome && *w == l.outcome => {
            Case::pass(case_name).with_log(format!(
                "{name}: {s:?} both ways, a known limitation of this guest kernel: {}",
                l.why
            ))
        }
        (s, w, _) => Case::fail(
            case_name,
            format!(
                "{name} passes neither way (stock: {s:?}, textpoke: {w:?}), and no known \
                 limitation of this guest kernel says so (KNOWN_LIMITATIONS: {known:?})"
            ),
        ),
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
    run_livepatch_into(&mut r);
    log(&format!(
        "kernel suites: stock run took {:.0} s",
        start.elapsed().as_secs_f64()
    ));
    r
}

/// How often the recorder is drained while a suite runs.
const DRAIN_EVERY: Duration = Duration::from_millis(50);

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Runs `run` while a thread drains `rec` every [`DRAIN_EVERY`]: all of ftracetest makes
/// millions of records, far more than the buffers hold. Returns what `run` returned and every
/// record of the run, pokes sorted by time.
fn drained_while<T>(rec: &mut Recorder, run: impl FnOnce() -> T) -> (T, Drain) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let drainer = scope.spawn(|| {
            let mut all = Drain::default();
            loop {
                // The last drain starts after `run` returned, so it takes its last records.
                let last = stop.load(Ordering::Acquire);
                all.absorb(rec.drain());
                if last {
                    break;
                }
                std::thread::sleep(DRAIN_EVERY);
            }
            all.pokes.sort_by_key(|p| p.time);
            all
        });
        let out = {
            // Set however `run` ends, so that the drainer always stops.
            let _stop = StopOnDrop(&stop);
            run()
        };
        let all = drainer
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (out, all)
    })
}

/// The records one suite's run made in the kernel text, replayed onto the text read before it:
/// what they changed, or why they do not give the text read after it.
fn replay_suite(
    text: (u64, usize),
    before: std::io::Result<Vec<u8>>,
    after: std::io::Result<Vec<u8>>,
    drain: &textpoke_agent::platform::perf::Drain,
) -> Result<String, String> {
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
    if !guest::is_x86() {
        crate::scenarios::kernel_patching::copy_ftrace_literals(&mut before, &after);
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
    Ok(format!("{} records replayed ({n} changes)", pokes.len()))
}

/// The run with textpoke loaded as the kernel's patcher, judged against `stock`.
pub fn with_textpoke(stock: &BTreeMap<String, Result<Outcome, String>>, kcore: &Kcore) -> Case {
    log("kernel suites: with textpoke");
    let start = Instant::now();
    let text = match crate::scenarios::kernel_patching::kernel_text() {
        Ok(t) => t,
        Err(e) => return Case::fail("kernel_suites", e),
    };
    let counters = crate::scenarios::kernel_patching::counters();
    let mut rec = match Recorder::open(&RecorderConfig { data_pages: 2048 }) {
        Ok(r) => r,
        Err(e) => return Case::fail("kernel_suites", format!("perf recorder: {e}")),
    };
    let cases = ftrace_cases(&dirs());
    let (late, early): (Vec<CaseFile>, Vec<CaseFile>) = cases
        .as_ref()
        .map(|c| c.iter().cloned().partition(|c| takes_cpus_offline(&c.path)))
        .unwrap_or_default();
    let mut results = BTreeMap::new();
    // Each suite that ran (`run` says whether it did): what textpoke did meanwhile, and its
    // records replayed onto the text read before it, which must give the text read after it.
    let mut per_suite: Vec<(&str, String, Result<String, String>)> = Vec::new();
    let mut suite = |name: &'static str, run: &mut dyn FnMut() -> bool| {
        let before = kcore.read(text.0, text.1);
        let counted = crate::scenarios::kernel_patching::counters();
        let (ran, drain) = drained_while(&mut rec, run);
        let after = kcore.read(text.0, text.1);
        if ran {
            let now = crate::scenarios::kernel_patching::counters();
            let moved = crate::scenarios::kernel_patching::counters_moved(&counted, &now);
            let replay = replay_suite(text, before, after, &drain);
            per_suite.push((name, what_textpoke_did(&moved), replay));
        }
    };
    suite("ftracetest", &mut || {
        run_ftrace_into(
            cases.clone().map(|_| early.clone()),
            "ftracetest",
            &mut results,
        );
        true
    });
    suite("kprobes' KUnit suite", &mut || {
        run_kunit_into(&mut results);
        true
    });
    suite("livepatch selftests", &mut || {
        run_livepatch_into(&mut results)
    });
    drop(rec);
    let moved = crate::scenarios::kernel_patching::counters_moved(
        &counters,
        &crate::scenarios::kernel_patching::counters(),
    );
    run_ftrace_into(Ok(late), "ftracetest (CPUs offline)", &mut results);
    log(&format!(
        "kernel suites: with textpoke took {:.0} s",
        start.elapsed().as_secs_f64()
    ));
    let planned = livepatch_plan();
    let mut children: Vec<Case> = stock
        .keys()
        .chain(results.keys())
        .chain(planned.iter())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(|name| {
            judge(
                name,
                stock.get(name),
                results.get(name),
                known_limitation(name),
            )
        })
        .collect();
    // The records against the text itself, suite by suite.
    let lines: Vec<String> = per_suite
        .iter()
        .map(|(name, did, replay)| match replay {
            Ok(r) => format!("{name}: {r}; textpoke, {did}"),
            Err(e) => format!("{name}: {e}; textpoke, {did}"),
        })
        .collect();
    let failed: Vec<&str> = per_suite
        .iter()
        .filter(|(_, _, r)| r.is_err())
        .map(|(name, _, _)| *name)
        .collect();
    let mut replay = Case::check(
        "kernel_suites_records_replay_onto_kcore",
        failed.is_empty() && !per_suite.is_empty(),
        format!(
            "the records of {failed:?} do not replay onto kcore read before that suite to give \
             kcore read after it: {}",
            lines.join("; ")
        ),
    );
    for line in lines {
        replay = replay.with_log(line);
    }
    children.push(replay.with_log(format!(
        "the records in the kernel text replayed onto kcore read before each suite give kcore \
         read after it; textpoke in all, {}",
        what_textpoke_did(&moved)
    )));
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
    fn ftracetest_results_are_keyed_by_file() {
        let filter = CaseFile::parse(
            "ftrace/fgraph-filter.tc".into(),
            "#!/bin/sh\n# SPDX-License-Identifier: GPL-2.0\n\
             # description: ftrace - function graph filters\n\
             # requires: set_ftrace_filter function_graph:tracer\n\
             # flags: instance\n",
        );
        assert_eq!(
            filter,
            CaseFile {
                path: "ftrace/fgraph-filter.tc".into(),
                description: "ftrace - function graph filters".into(),
                instance: true,
            }
        );
        let multi = CaseFile::parse(
            "ftrace/fgraph-multi.tc".into(),
            "#\tdescription:  ftrace -  function graph filters\n",
        );
        assert_eq!(multi.description, "ftrace - function graph filters");
        assert!(!multi.instance);
        let cases = [filter, multi];
        let desc = |s: &str| s.to_owned();
        // The two share a description and fail differently: each keeps its own outcome.
        let results = vec![
            (desc("ftrace - function graph filters"), Outcome::Pass),
            (desc("ftrace - function graph filters"), Outcome::Fail),
            (
                desc("(instance) ftrace - function graph filters"),
                Outcome::Unresolved,
            ),
        ];
        assert_eq!(
            key_by_file(&cases, results.clone()).unwrap(),
            [
                ("ftrace/fgraph-filter.tc".to_owned(), Outcome::Pass),
                ("ftrace/fgraph-multi.tc".to_owned(), Outcome::Fail),
                (
                    "ftrace/fgraph-filter.tc (instance)".to_owned(),
                    Outcome::Unresolved
                ),
            ]
        );
        // A result missing, one too many, or out of the files' order, is an error.
        assert!(key_by_file(&cases, results[..2].to_vec()).is_err());
        let mut more = results.clone();
        more.push((desc("Basic trace file check"), Outcome::Pass));
        assert!(key_by_file(&cases, more).is_err());
        let mut swapped = results;
        swapped.swap(1, 2);
        assert!(key_by_file(&cases, swapped).is_err());
    }

    #[test]
    fn livepatch_output_is_parsed_per_case() {
        // As test-livepatch.sh prints them: a pass, a failure with the difference after it,
        // and a case the script died in (an `insmod` that failed), its error on stderr.
        let out = "TEST: basic function patching ... ok\n\
                   TEST: multiple livepatches ... not ok\n\n--- expected\n+++ result\n\
                   TEST: atomic replace livepatch ... ";
        assert_eq!(
            parse_livepatch(out),
            [
                ("basic function patching".to_owned(), Outcome::Pass),
                ("multiple livepatches".to_owned(), Outcome::Fail),
                ("atomic replace livepatch".to_owned(), Outcome::Fail),
            ]
        );
    }

    #[test]
    fn livepatch_tests_are_those_the_script_declares() {
        let script =
            "setup_config\n\n# - load a livepatch\nstart_test \"basic function patching\"\n\
                      load_lp $MOD\n\tstart_test \"multiple livepatches\"\necho start_test\n";
        assert_eq!(
            livepatch_tests(script),
            ["basic function patching", "multiple livepatches"]
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
        assert!(judge("a", Some(&pass), Some(&pass), None).passed());
        assert!(!judge("a", Some(&pass), Some(&fail), None).passed());
        assert!(!judge("a", Some(&pass), None, None).passed());
        assert!(judge("a", Some(&fail), Some(&pass), None).passed());
        assert!(!judge("a", Some(&pass), Some(&Err("hung".into())), None).passed());
    }

    #[test]
    fn a_case_passing_neither_way_passes_only_as_its_known_limitation() {
        let known = Limitation {
            case: "a",
            on: On::Both,
            outcome: Outcome::Unsupported,
            why: "no such feature here",
        };
        let (fail, unsupported) = (Ok(Outcome::Fail), Ok(Outcome::Unsupported));
        let k = Some(&known);
        assert!(judge("a", Some(&unsupported), Some(&unsupported), k).passed());
        // Not known, another outcome than the known one, or run neither way: a finding.
        assert!(!judge("a", Some(&unsupported), Some(&unsupported), None).passed());
        assert!(!judge("a", Some(&fail), Some(&fail), k).passed());
        assert!(!judge("a", Some(&unsupported), Some(&fail), k).passed());
        assert!(!judge("a", None, None, k).passed());
        assert!(!judge("a", Some(&Err("hung".into())), Some(&unsupported), k).passed());
    }

    #[test]
    fn known_limitations_name_distinct_cases() {
        for (i, l) in KNOWN_LIMITATIONS.iter().enumerate() {
            assert!(!l.why.is_empty() && l.outcome != Outcome::Pass, "{l:?}");
            assert!(
                KNOWN_LIMITATIONS[..i].iter().all(|m| m.case != l.case),
                "{l:?} twice"
            );
        }
    }
}
