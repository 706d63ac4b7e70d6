//! Running a manifest's boots: one boot under QEMU judged into its report ([`boot`]), a
//! planned set of them a few at a time ([`run`]), the kunit.py cross-check of a boot's counts
//! ([`kunit_check`]), and a host check's recorded result ([`record`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::judge::verdict::{self, Counts, Verdict};
use crate::judge::{ktap, splat};
use crate::plan::manifest::{Manifest, PlannedBoot, Variant};
use crate::platform::qemu::{self, Arch, Machine};
use crate::rundir::boot_report::{BootInfo, BootReport};
use crate::rundir::layout::{self as rundir, MANIFEST};

/// A built guest: what `tools/guests.sh ARCH VARIANT` printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// Guest architecture.
    pub arch: Arch,
    /// Which kernel.
    pub variant: Variant,
    /// Kernel image.
    pub kernel: PathBuf,
    /// Initramfs.
    pub initrd: PathBuf,
}

impl std::str::FromStr for Artifact {
    type Err = String;
    /// Parses `ARCH:VARIANT:KERNEL:INITRD`.
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.splitn(4, ':').collect();
        let [arch, variant, kernel, initrd] = parts.as_slice() else {
            return Err(format!("`{s}` is not ARCH:VARIANT:KERNEL:INITRD"));
        };
        let arch = match *arch {
            "x86_64" => Arch::X86_64,
            "arm64" => Arch::Arm64,
            other => return Err(format!("unknown arch `{other}`")),
        };
        Ok(Self {
            arch,
            variant: variant.parse()?,
            kernel: PathBuf::from(kernel),
            initrd: PathBuf::from(initrd),
        })
    }
}

/// Writes `DIR/NAME.json` for a host check that passed or failed, for the summary. `name` must
/// be one of the checks of DIR's manifest: a report under any other name would stand for no
/// planned check, and leave the one meant without a report.
pub fn record(
    out: &Path,
    name: &str,
    ok: bool,
    reason: &str,
    log: &str,
) -> Result<BootReport, String> {
    let manifest = Manifest::read(out)?.ok_or_else(|| {
        format!(
            "{} has no {MANIFEST}: run `textpoke-runner plan` first",
            out.display()
        )
    })?;
    if !manifest.checks.iter().any(|c| c == name) {
        return Err(format!(
            "`{name}` is not a host check of the plan in {} (its checks: {})",
            out.display(),
            manifest.checks.join(", ")
        ));
    }
    let report = BootReport {
        name: name.to_owned(),
        arch: host_arch(),
        smp: 0,
        mem_mb: 0,
        verdict: if ok { Verdict::Pass } else { Verdict::NotOk },
        expected: Verdict::Pass,
        expect_log: None,
        ok,
        reason: reason.to_owned(),
        counts: Counts {
            passed: usize::from(ok),
            failed: usize::from(!ok),
            skipped: 0,
        },
        failing_tests: if ok {
            Vec::new()
        } else {
            vec![name.to_owned()]
        },
        documents: Vec::new(),
        splat: None,
        log: log.to_owned(),
        seconds: 0.0,
        started: 0.0,
        longest_silence: 0.0,
        qemu_status: None,
        command: Vec::new(),
    };
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    let path = rundir::report(out, name);
    std::fs::write(&path, json + "\n")
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(report)
}

/// The arch the host runs on, for host checks' reports.
fn host_arch() -> Arch {
    if cfg!(target_arch = "aarch64") {
        Arch::Arm64
    } else {
        Arch::X86_64
    }
}

/// How console progress is shown while boots run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Echo {
    /// Only each boot's summary line.
    Quiet,
    /// KTAP results and the first splat.
    Results,
    /// Every console line.
    All,
}

/// Boots `boot` from `artifact` with `qemu_program` (or the usual emulator), writes
/// `DIR/NAME.log` and `DIR/NAME.json`, and returns the report.
pub fn boot(
    boot: &PlannedBoot,
    artifact: &Artifact,
    out: &Path,
    qemu_program: Option<&str>,
    mttcg: bool,
    echo: Echo,
) -> Result<BootReport, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let log_path = rundir::log(out, &boot.name);
    let json_path = rundir::report(out, &boot.name);
    let machine = Machine {
        arch: boot.arch,
        kernel: artifact.kernel.clone(),
        initrd: artifact.initrd.clone(),
        smp: boot.smp,
        mem_mb: boot.mem_mb,
        append: Some(boot.append.clone()),
        qemu: qemu_program.map(str::to_owned),
        mttcg,
    };
    let cmd = qemu::command(&machine);
    let name = &boot.name;
    if echo != Echo::Quiet {
        println!("[{name}] {}", qemu::shell_words(&cmd));
    }
    let mut splat_seen = false;
    let mut progress = |line: &str| match echo {
        Echo::All => println!("[{name}] {line}"),
        Echo::Results => {
            if ktap::is_result_line(line) {
                println!("[{name}] {}", ktap::strip_console_prefix(line));
            } else if !splat_seen {
                if let Some(s) = splat::find(line) {
                    splat_seen = true;
                    println!("[{name}] splat: {}", s.text);
                }
            }
        }
        Echo::Quiet => {}
    };
    let started = crate::rundir::stages::epoch_seconds(std::time::SystemTime::now());
    let run = qemu::run(
        &cmd,
        &log_path,
        qemu::Limits {
            silence: Duration::from_secs(boot.silence),
            cap: Duration::from_secs(boot.cap),
        },
        &mut progress,
    )
    .map_err(|e| format!("running {}: {e}", cmd[0]))?;
    let judgement = verdict::judge(&run.log, &run.outcome, &boot.require);
    let (ok, reason) = verdict::check(
        &judgement,
        &run.log,
        boot.expect,
        boot.expect_log.as_deref(),
    );
    let report = BootReport::new(
        BootInfo {
            name: boot.name.clone(),
            arch: boot.arch,
            smp: boot.smp,
            mem_mb: boot.mem_mb,
            expected: boot.expect,
            expect_log: boot.expect_log.clone(),
            log: log_path.display().to_string(),
            seconds: (run.seconds * 10.0).round() / 10.0,
            started,
            longest_silence: (run.longest_silence * 10.0).round() / 10.0,
            qemu_status: run.outcome.exit_status(),
            command: cmd,
        },
        &judgement,
        ok,
        reason,
    );
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(&json_path, json + "\n")
        .map_err(|e| format!("cannot write {}: {e}", json_path.display()))?;
    Ok(report)
}

/// Counts of a run of `kunit.py parse`, from its closing line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KunitCounts {
    /// Tests kunit.py ran (counted), in all.
    pub total: usize,
    /// Passed.
    pub passed: usize,
    /// Failed.
    pub failed: usize,
    /// Skipped.
    pub skipped: usize,
}

/// Reads kunit.py's `Testing complete. Ran N tests: passed: P, failed: F, skipped: S` line
/// (the parts that are zero are left out by kunit.py).
pub fn parse_kunit_summary(output: &str) -> Option<KunitCounts> {
    let line = output
        .lines()
        .map(|l| l.trim())
        // kunit.py colours its output when it thinks it writes to a terminal.
        .map(|l| l.replace("\u{1b}[0m", "").replace("\u{1b}[1;32m", ""))
        .find(|l| l.contains("Testing complete. Ran "))?;
    let after = line.split("Testing complete. Ran ").nth(1)?;
    let (total, rest) = after.split_once(" test")?;
    let mut c = KunitCounts {
        total: total.trim().parse().ok()?,
        ..KunitCounts::default()
    };
    for part in rest.split([',', ':']).collect::<Vec<_>>().windows(2) {
        let (key, value) = (part[0].trim(), part[1].trim());
        let n = value.split_whitespace().next().and_then(|v| v.parse().ok());
        match (key.rsplit(' ').next(), n) {
            (Some("passed"), Some(n)) => c.passed = n,
            (Some("failed"), Some(n)) => c.failed = n,
            (Some("skipped"), Some(n)) => c.skipped = n,
            _ => {}
        }
    }
    Some(c)
}

/// Whether kunit.py's counts of a log are the runner's. Two counts of nothing agree only
/// vacuously: a log with no test in it (a boot that timed out before printing its KTAP) fails.
pub fn kunit_agrees(k: &KunitCounts, ours: &Counts) -> bool {
    k.total > 0
        && k.passed == ours.passed
        && k.failed == ours.failed
        && k.skipped == ours.skipped
        && k.total == ours.passed + ours.failed + ours.skipped
}

/// `console` without its empty KTAP documents: a `KTAP version` line whose next KTAP line is
/// the plan `1..0` (timestamps and indentation aside). Kernel lines printed between the two (the
/// console interleaves them) are kept.
pub fn without_empty_ktap(console: &str) -> String {
    let text = |l: &str| -> String {
        let t = l.trim_start();
        let t = match t.strip_prefix('[') {
            Some(rest) => rest.split_once(']').map_or(t, |(_, after)| after),
            None => t,
        };
        t.trim().to_owned()
    };
    let is_ktap = |t: &str| {
        t.starts_with("KTAP version")
            || t.starts_with("TAP version")
            || t.starts_with("ok ")
            || t.starts_with("not ok ")
            || t.starts_with('#')
            || t.split_once("..")
                .is_some_and(|(a, _)| !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit()))
    };
    let lines: Vec<&str> = console.lines().collect();
    let mut dropped = vec![false; lines.len()];
    for i in 0..lines.len() {
        if !text(lines[i]).starts_with("KTAP version") {
            continue;
        }
        let plan = (i + 1..lines.len()).find(|&j| is_ktap(&text(lines[j])));
        if let Some(j) = plan.filter(|&j| text(lines[j]) == "1..0") {
            dropped[i] = true;
            dropped[j] = true;
        }
    }
    let mut out = String::with_capacity(console.len());
    for (line, _) in lines.iter().zip(&dropped).filter(|(_, d)| !**d) {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Runs `python3 KUNIT parse LOG` and compares its counts with the runner's for the same log;
/// writes `DIR/NAME.kunit.json` as a one-test check and returns its report.
pub fn kunit_check(boot: &BootReport, kunit: &Path, out: &Path) -> Result<BootReport, String> {
    let name = rundir::kunit_name(&boot.name);
    // kunit.py reads the log's first KTAP document; the kernel's built-in KUnit executor prints
    // an empty one at boot when it has no suite, which is left out.
    let console =
        std::fs::read_to_string(&boot.log).map_err(|e| format!("reading {}: {e}", boot.log))?;
    let input = out.join(format!("{name}.input.log"));
    std::fs::write(&input, without_empty_ktap(&console))
        .map_err(|e| format!("writing {}: {e}", input.display()))?;
    let output = Command::new("python3")
        .arg(kunit)
        .arg("parse")
        .arg(&input)
        .output();
    let (ok, reason) = match output {
        Err(e) => (
            false,
            format!("could not run python3 {}: {e}", kunit.display()),
        ),
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            std::fs::write(rundir::log(out, &name), &text)
                .map_err(|e| format!("writing the kunit.py output: {e}"))?;
            match parse_kunit_summary(&text) {
                None => (
                    false,
                    format!(
                        "kunit.py printed no `Testing complete` line (exit {:?})",
                        o.status.code()
                    ),
                ),
                Some(k) => {
                    let ours = boot.counts;
                    let same = kunit_agrees(&k, &ours);
                    (
                        same,
                        format!(
                            "kunit.py counted {} tests (passed {}, failed {}, skipped {}); the runner {} (passed {}, failed {}, skipped {})",
                            k.total,
                            k.passed,
                            k.failed,
                            k.skipped,
                            ours.passed + ours.failed + ours.skipped,
                            ours.passed,
                            ours.failed,
                            ours.skipped
                        ),
                    )
                }
            }
        }
    };
    let report = BootReport {
        name: name.clone(),
        arch: boot.arch,
        smp: boot.smp,
        mem_mb: boot.mem_mb,
        verdict: if ok { Verdict::Pass } else { Verdict::NotOk },
        expected: Verdict::Pass,
        expect_log: None,
        ok,
        reason,
        counts: Counts {
            passed: usize::from(ok),
            failed: usize::from(!ok),
            skipped: 0,
        },
        failing_tests: if ok { Vec::new() } else { vec![name.clone()] },
        documents: Vec::new(),
        splat: None,
        log: rundir::log(out, &name).display().to_string(),
        seconds: 0.0,
        started: 0.0,
        longest_silence: 0.0,
        qemu_status: None,
        command: vec![
            "python3".into(),
            kunit.display().to_string(),
            "parse".into(),
            boot.log.clone(),
        ],
    };
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    let path = rundir::report(out, &name);
    std::fs::write(&path, json + "\n")
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(report)
}

/// What [`run`] returns for each planned report: its name, and the report or why there is none.
pub type Outcome = (String, Result<BootReport, String>);

/// How [`run`] runs a manifest.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Boots at once (single-threaded TCG uses one host core per boot).
    pub jobs: usize,
    /// The emulator to use instead of `qemu-system-*`.
    pub qemu: Option<String>,
    /// Progress shown.
    pub echo: Echo,
    /// `tools/testing/kunit/kunit.py` of the guest kernel's source, for the cross-checks.
    pub kunit: Option<PathBuf>,
}

/// Where [`run`] learns of the built guests.
#[derive(Clone, Debug)]
pub enum Artifacts {
    /// All of them, known from the start.
    Given(Vec<Artifact>),
    /// As they are built: a file the build appends a line to per guest, `ARCH:VARIANT:KERNEL:
    /// INITRD` (what `--artifact` takes), and the line [`ARTIFACTS_DONE`] once no more will
    /// come. A boot starts as soon as its guest is there, while later guests still build.
    From(PathBuf),
}

/// The last line of an artifacts file ([`Artifacts::From`]): every guest that will be built
/// is named above it.
pub const ARTIFACTS_DONE: &str = "done";

/// What an artifacts file has said so far: the guests built, and whether it is complete.
/// Only whole lines count (a line being appended is read again next time); a line that is
/// neither an artifact nor [`ARTIFACTS_DONE`] is an error.
pub fn read_artifacts(text: &str) -> Result<(Vec<Artifact>, bool), String> {
    let mut built = Vec::new();
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    let whole = if complete {
        &lines[..]
    } else {
        &lines[..lines.len().saturating_sub(1)]
    };
    for line in whole.iter().map(|l| l.trim()).filter(|l| !l.is_empty()) {
        if line == ARTIFACTS_DONE {
            return Ok((built, true));
        }
        built.push(line.parse::<Artifact>()?);
    }
    Ok((built, false))
}

/// The boots a run has still to start, and what it knows of the guests.
struct Queue<'a> {
    manifest: &'a Manifest,
    source: &'a Artifacts,
    /// Indices into the manifest's boots not started yet, in the manifest's order.
    waiting: Vec<usize>,
    built: BTreeMap<(u8, Variant), Artifact>,
    /// No more guests will come.
    done: bool,
}

/// What a worker does next.
enum Next {
    /// Boot the manifest's boot `.0` from `.1`.
    Boot(usize, Artifact),
    /// Report boot `.0` as not run: its guest was never built.
    NotBuilt(usize),
    /// Nothing to start yet: guests are still being built.
    Wait,
    /// Every boot has been started or reported.
    Finished,
}

impl Queue<'_> {
    /// Reads what the source says now.
    fn refresh(&mut self) -> Result<(), String> {
        let (built, done) = match self.source {
            Artifacts::Given(v) => (v.clone(), true),
            Artifacts::From(path) => {
                let text = match std::fs::read_to_string(path) {
                    Ok(t) => t,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
                    Err(e) => return Err(format!("{}: {e}", path.display())),
                };
                read_artifacts(&text).map_err(|e| format!("{}: {e}", path.display()))?
            }
        };
        for a in built {
            self.built.insert((arch_key(a.arch), a.variant), a);
        }
        self.done = done;
        Ok(())
    }

    fn next(&mut self) -> Next {
        if let Err(e) = self.refresh() {
            // A source that cannot be read will never name the rest: report them as not run.
            eprintln!("textpoke-runner: {e}");
            self.done = true;
        }
        let boots = &self.manifest.boots;
        // The first waiting boot whose guest is built, and that guest.
        let ready = self.waiting.iter().enumerate().find_map(|(p, &i)| {
            let b = boots.get(i)?;
            let a = self.built.get(&(arch_key(b.arch), b.variant))?;
            Some((p, i, a.clone()))
        });
        match ready {
            Some((p, i, a)) => {
                self.waiting.remove(p);
                Next::Boot(i, a)
            }
            None if self.done => match self.waiting.first() {
                Some(_) => Next::NotBuilt(self.waiting.remove(0)),
                None => Next::Finished,
            },
            None => Next::Wait,
        }
    }
}

/// How often a worker with nothing to start looks for newly built guests.
const POLL: Duration = Duration::from_secs(2);

/// Runs every boot of `manifest` whose guest `artifacts` names, `jobs` at a time, each as soon
/// as its guest is there, in the manifest's order among those ready, and writes their reports
/// into `out`. A boot whose guest is never built is not run: the summary, which reads the
/// manifest, reports it. Returns the reports written, in the manifest's order, and one line
/// per boot for a person.
pub fn run(
    manifest: &Manifest,
    artifacts: &Artifacts,
    out: &Path,
    opts: &RunOptions,
) -> Vec<Outcome> {
    let queue = Mutex::new(Queue {
        manifest,
        source: artifacts,
        waiting: (0..manifest.boots.len()).collect(),
        built: BTreeMap::new(),
        done: false,
    });
    // With each outcome, its boot's place in the manifest, for a stable order.
    let results: Mutex<Vec<(usize, Outcome)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..opts.jobs.max(1) {
            s.spawn(|| loop {
                let next = queue.lock().unwrap().next();
                let (i, artifact) = match next {
                    Next::Boot(i, a) => (i, a),
                    Next::Wait => {
                        std::thread::sleep(POLL);
                        continue;
                    }
                    Next::Finished => return,
                    Next::NotBuilt(i) => {
                        let Some(b) = manifest.boots.get(i) else {
                            continue;
                        };
                        let why = format!("not run: no {} {} guest was built", b.arch, b.variant);
                        println!("SKIPPED {}: {why}", b.name);
                        results
                            .lock()
                            .unwrap()
                            .push((i, (b.name.clone(), Err(why))));
                        continue;
                    }
                };
                let Some(b) = manifest.boots.get(i) else {
                    continue;
                };
                let r = boot(b, &artifact, out, opts.qemu.as_deref(), false, opts.echo);
                if let Ok(report) = &r {
                    println!("{}", summary_line(report));
                }
                let mut done = vec![(i, (b.name.clone(), r.clone()))];
                if let (Some(kunit), Ok(report)) = (&opts.kunit, &r) {
                    if b.kunit_check {
                        let k = kunit_check(report, kunit, out);
                        if let Ok(k) = &k {
                            println!("{}", summary_line(k));
                        }
                        done.push((i, (rundir::kunit_name(&b.name), k)));
                    }
                }
                results.lock().unwrap().extend(done);
            });
        }
    });
    let mut v = results.into_inner().unwrap();
    v.sort_by(|(i, (a, _)), (j, (b, _))| (i, a).cmp(&(j, b)));
    v.into_iter().map(|(_, o)| o).collect()
}

fn arch_key(a: Arch) -> u8 {
    match a {
        Arch::X86_64 => 0,
        Arch::Arm64 => 1,
    }
}

/// One line saying how a boot went.
pub fn summary_line(r: &BootReport) -> String {
    format!(
        "{} {} [{} smp={}]: verdict {}, expected {} ({} passed, {} failed, {} skipped, {:.1} s): {}{}",
        if r.ok { "OK" } else { "FAILED" },
        r.name,
        r.arch,
        r.smp,
        r.verdict,
        r.expected,
        r.counts.passed,
        r.counts.failed,
        r.counts.skipped,
        r.seconds,
        r.reason,
        if r.ok {
            String::new()
        } else {
            format!(" (log: {})", r.log)
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_ktap_document_is_left_out_for_kunit_py() {
        let log = "[    2.0] KTAP version 1\n[    2.0] 1..0\n[    9.0] KTAP version 1\n\
                   [    9.0] 1..2\n[    9.1] ok 1 a\n";
        assert_eq!(
            without_empty_ktap(log),
            "[    9.0] KTAP version 1\n[    9.0] 1..2\n[    9.1] ok 1 a\n"
        );
    }

    #[test]
    fn an_empty_ktap_document_split_by_kernel_lines_is_left_out() {
        let log = "[ 1.7] KTAP version 1\n[ 1.7] Freeing initrd memory: 48868K\n[ 1.7] 1..0\n\
                   [ 9.0] KTAP version 1\n[ 9.0] 1..1\n[ 9.1] ok 1 a\n";
        assert_eq!(
            without_empty_ktap(log),
            "[ 1.7] Freeing initrd memory: 48868K\n[ 9.0] KTAP version 1\n[ 9.0] 1..1\n\
             [ 9.1] ok 1 a\n"
        );
    }

    #[test]
    fn kunit_agreeing_on_no_test_fails() {
        let none = KunitCounts::default();
        assert!(!kunit_agrees(&none, &Counts::default()));
        let some = KunitCounts {
            total: 3,
            passed: 2,
            failed: 1,
            skipped: 0,
        };
        let ours = Counts {
            passed: 2,
            failed: 1,
            skipped: 0,
        };
        assert!(kunit_agrees(&some, &ours));
        assert!(!kunit_agrees(&some, &Counts { passed: 3, ..ours }));
    }

    #[test]
    fn artifact_argument() {
        let a: Artifact = "arm64:patched:/k/Image:/i/x.cpio".parse().unwrap();
        assert_eq!(a.arch, Arch::Arm64);
        assert_eq!(a.variant, Variant::Patched);
        assert_eq!(a.initrd, PathBuf::from("/i/x.cpio"));
        assert!("arm64:debug:/k:/i".parse::<Artifact>().is_err());
        for (variant, name) in Variant::ALL {
            let a: Artifact = format!("x86_64:{name}:/k:/i").parse().unwrap();
            assert_eq!(a.variant, variant);
            assert_eq!(variant.to_string(), name);
        }
        assert!("riscv:patched:/k:/i".parse::<Artifact>().is_err());
        assert!("arm64:patched:/k".parse::<Artifact>().is_err());
    }

    #[test]
    fn an_artifacts_file_is_read_by_whole_lines_up_to_done() {
        let x86 = "x86_64:patched:/k/bzImage:/i/x86.cpio";
        let arm = "arm64:patched:/k/Image:/i/arm.cpio";
        // Nothing yet, then a line being written, then one whole line.
        assert_eq!(read_artifacts(""), Ok((Vec::new(), false)));
        assert_eq!(read_artifacts("x86_64:pat"), Ok((Vec::new(), false)));
        let (built, done) = read_artifacts(&format!("{x86}\n{arm}")).unwrap();
        assert_eq!((built.len(), done), (1, false));
        let (built, done) = read_artifacts(&format!("{x86}\n{arm}\ndone\n")).unwrap();
        assert_eq!((built.len(), done), (2, true));
        assert_eq!(built[1].arch, Arch::Arm64);
        assert!(read_artifacts("what is this\n").is_err());
    }

    #[test]
    fn boots_start_as_their_guests_come_in_the_manifests_order() {
        let manifest = crate::plan::manifest::plan(
            crate::plan::manifest::Suite::Test,
            &[Arch::X86_64, Arch::Arm64],
        );
        let dir = std::env::temp_dir().join(format!("textpoke-queue-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("artifacts");
        let source = Artifacts::From(file.clone());
        let mut q = Queue {
            manifest: &manifest,
            source: &source,
            waiting: (0..manifest.boots.len()).collect(),
            built: BTreeMap::new(),
            done: false,
        };
        let name = |n: &Next| match n {
            Next::Boot(i, _) => format!("boot {}", manifest.boots[*i].name),
            Next::NotBuilt(i) => format!("not built {}", manifest.boots[*i].name),
            Next::Wait => "wait".to_owned(),
            Next::Finished => "finished".to_owned(),
        };
        // No file yet: wait.
        assert_eq!(name(&q.next()), "wait");
        std::fs::write(&file, "arm64:patched:/k/Image:/i/arm.cpio\n").unwrap();
        assert_eq!(name(&q.next()), "boot arm64-smp2");
        assert_eq!(name(&q.next()), "boot arm64-smp4");
        assert_eq!(name(&q.next()), "boot harness-foreign-brk");
        assert_eq!(name(&q.next()), "boot harness-foreign-brk-swallowed");
        assert_eq!(name(&q.next()), "wait");
        std::fs::write(
            &file,
            "arm64:patched:/k/Image:/i/arm.cpio\nx86_64:patched:/k/bzImage:/i/x.cpio\ndone\n",
        )
        .unwrap();
        // The x86 patched boots, then every boot whose guest never came, then the end.
        let mut rest = Vec::new();
        loop {
            let n = q.next();
            if matches!(n, Next::Finished) {
                break;
            }
            rest.push(name(&n));
        }
        assert_eq!(rest.first().map(String::as_str), Some("boot x86_64-smp2"));
        assert!(rest.contains(&"not built x86_64-mitigations".to_owned()));
        assert!(rest.contains(&"not built harness-no-series".to_owned()));
        // Four arm64 boots started before; every other boot once, booted or not built.
        assert_eq!(rest.len() + 4, manifest.boots.len());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn kunit_summary_line() {
        let out = "[09:00:00] ============ textpoke_agent (3 subtests) ==========\n\
                   [09:00:00] Testing complete. Ran 58 tests: passed: 56, failed: 1, skipped: 1\n";
        assert_eq!(
            parse_kunit_summary(out),
            Some(KunitCounts {
                total: 58,
                passed: 56,
                failed: 1,
                skipped: 1
            })
        );
        assert_eq!(
            parse_kunit_summary("Testing complete. Ran 6 tests: passed: 6\n"),
            Some(KunitCounts {
                total: 6,
                passed: 6,
                ..KunitCounts::default()
            })
        );
        assert_eq!(parse_kunit_summary("no tests\n"), None);
    }
}
