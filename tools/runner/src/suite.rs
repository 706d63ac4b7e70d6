//! The boots each make target runs, as typed data: the matrix, the manifest a run writes
//! before anything is built, and running a planned set of boots a few at a time.
//!
//! `tools/test.sh` (and `run.sh`, `bench.sh`) only build: they ask [`plan`] which kernels and
//! initramfs images the suite needs (`textpoke-runner plan`), build those, and hand the paths
//! of whatever was built to [`run`] (`textpoke-runner suite`). The manifest lists every planned
//! boot and host check up front, so a boot that never ran, because its guest failed to build or
//! its artifacts were never handed over, or a host check that never recorded its result,
//! because the shell running it died or `record` failed, is a failure the summary names rather
//! than a silent gap.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::judge::{self, Counts, Verdict};
use crate::qemu::{self, Arch, Machine};
use crate::report::{BootInfo, BootReport};
use crate::rundir::{self, MANIFEST};
use crate::splat;

/// What a make target runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Suite {
    /// `make test`: the guest test suite at two CPU counts per arch, plus the harness checks.
    Test,
    /// `make run`: the demo, one boot per arch.
    Run,
    /// `make bench`: the benchmarks, one boot per arch.
    Bench,
    /// `make test-debug`: the guest test suite and the unload stress on the KASAN kernel.
    TestDebug,
    /// `make test-full`: the guest test suite with all of the kernel's ftracetest directories
    /// that change text, with and without textpoke; hours under TCG, so in no other target.
    TestFull,
}

/// Which kernel (and initramfs) a boot needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// Debian's 6.12 with `tools/patches`.
    Patched,
    /// Debian's 6.12 without the series: textpoke must refuse to load.
    Unpatched,
    /// The patched kernel with IBT and Debian's CPU mitigations, return thunks included, built
    /// with clang 19 (x86_64 only; tools/kconfig/mitigations.config).
    Mitigations,
    /// The patched kernel with KASAN, lockdep and other debug checks (tools/kconfig/kasan.config);
    /// on arm64 also control-flow integrity and shadow call stacks as Android's GKI builds them,
    /// so ftrace without CALL_OPS, with clang 19 (tools/kconfig/cfi.config).
    Kasan,
}

impl Variant {
    /// Every variant, with the name `tools/kernel.sh` and `tools/guests.sh` know it by.
    pub const ALL: [(Self, &'static str); 4] = [
        (Self::Patched, "patched"),
        (Self::Unpatched, "unpatched"),
        (Self::Mitigations, "mitigations"),
        (Self::Kasan, "kasan"),
    ];
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = Self::ALL
            .iter()
            .find(|(v, _)| v == self)
            .map_or("?", |(_, n)| n);
        f.write_str(name)
    }
}

impl std::str::FromStr for Variant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .find(|(_, n)| *n == s)
            .map(|(v, _)| *v)
            .ok_or_else(|| {
                format!("unknown variant `{s}` (patched, unpatched, mitigations or kasan)")
            })
    }
}

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

/// One planned boot: everything needed to run and judge it but the artifact paths.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedBoot {
    /// Names its log and report.
    pub name: String,
    /// Guest architecture.
    pub arch: Arch,
    /// Which kernel.
    pub variant: Variant,
    /// Guest CPUs.
    pub smp: u32,
    /// Guest memory in MiB.
    pub mem_mb: u32,
    /// Hard limit on QEMU's run time, in seconds.
    pub timeout: u64,
    /// Extra kernel arguments.
    pub append: String,
    /// The verdict that counts as ok (anything but `pass` checks the harness itself).
    pub expect: Verdict,
    /// Text some console line must contain.
    pub expect_log: Option<String>,
    /// KTAP suites (top-level subtests) or named documents that must be present.
    pub require: Vec<String>,
    /// Whether to check that the kernel's own KTAP parser counts this boot's results as the
    /// runner does (`tools/testing/kunit/kunit.py parse`).
    pub kunit_check: bool,
}

impl PlannedBoot {
    fn artifact_key(&self) -> (Arch, Variant) {
        (self.arch, self.variant)
    }
}

/// A run's plan, written to `DIR/manifest.json` before anything is built.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// What was asked for.
    pub suite: Suite,
    /// The arches asked for.
    pub arches: Vec<Arch>,
    /// Every boot the run must produce a report for.
    pub boots: Vec<PlannedBoot>,
    /// The host checks the run must record a result for (`textpoke-runner record`).
    #[serde(default)]
    pub checks: Vec<String>,
}

/// A report a run must produce (`DIR/NAME.json`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    /// The report's name.
    pub name: String,
    /// What writes it.
    pub source: Source,
}

/// What writes a planned report, and so what a missing one says went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A boot, run by `textpoke-runner suite`.
    Boot,
    /// The kunit.py cross-check of a boot's log, run by `suite` after the boot.
    KunitCheck,
    /// A host check, recorded by `textpoke-runner record`.
    HostCheck,
}

impl Source {
    /// Why a report of this kind can be missing, for a person.
    pub fn why_missing(self) -> &'static str {
        match self {
            Self::Boot => "boot: its guest was not built, or the suite did not run it",
            Self::KunitCheck => {
                "kunit.py cross-check: its boot did not report, or no kunit.py was given"
            }
            Self::HostCheck => {
                "host check: its lane died, or `textpoke-runner record` of it never ran or failed"
            }
        }
    }
}

impl Manifest {
    /// The `(arch, variant)` pairs the boots need, in a stable order.
    pub fn artifacts(&self) -> Vec<(Arch, Variant)> {
        let mut v: Vec<(Arch, Variant)> = Vec::new();
        for b in &self.boots {
            if !v.contains(&b.artifact_key()) {
                v.push(b.artifact_key());
            }
        }
        v
    }

    /// Every report the run must produce: one per boot, one per kunit.py cross-check and one
    /// per host check, in the manifest's order.
    pub fn expected_reports(&self) -> Vec<Expected> {
        let boots = self.boots.iter().flat_map(|b| {
            let check = b.kunit_check.then(|| Expected {
                name: rundir::kunit_name(&b.name),
                source: Source::KunitCheck,
            });
            std::iter::once(Expected {
                name: b.name.clone(),
                source: Source::Boot,
            })
            .chain(check)
        });
        let checks = self.checks.iter().map(|c| Expected {
            name: c.clone(),
            source: Source::HostCheck,
        });
        boots.chain(checks).collect()
    }

    /// Writes the manifest into `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let path = rundir::manifest(dir);
        let json = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(&path, json + "\n").map_err(|e| format!("writing {}: {e}", path.display()))
    }

    /// Reads the manifest of `dir`, if it has one.
    pub fn read(dir: &Path) -> Result<Option<Self>, String> {
        let path = rundir::manifest(dir);
        match std::fs::read_to_string(&path) {
            Ok(s) => serde_json::from_str(&s)
                .map(Some)
                .map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }
}

/// The suites every test boot's single KTAP document must contain.
const TEST_SUITES: [&str; 2] = ["textpoke_selftest", "textpoke_agent"];

fn guest(arch: Arch, name: &str, smp: u32, mem_mb: u32, mode: &str, suite: &str) -> PlannedBoot {
    PlannedBoot {
        name: name.to_owned(),
        arch,
        variant: Variant::Patched,
        smp,
        mem_mb,
        timeout: 900,
        append: format!("textpoke.mode={mode}"),
        expect: Verdict::Pass,
        expect_log: None,
        require: vec![TEST_SUITES[0].to_owned(), suite.to_owned()],
        kunit_check: false,
    }
}

/// A boot of the x86_64 guest that must fail in the way `expect` says: a check of the harness.
fn harness(name: &str, check: &str, expect: Verdict, expect_log: Option<&str>) -> PlannedBoot {
    PlannedBoot {
        name: format!("harness-{name}"),
        arch: Arch::X86_64,
        variant: Variant::Patched,
        smp: 2,
        mem_mb: 1024,
        timeout: 900,
        append: format!("textpoke.mode=check={check}"),
        expect,
        expect_log: expect_log.map(str::to_owned),
        require: Vec::new(),
        kunit_check: false,
    }
}

/// What the bad-input group says when the command line and the exerciser disagree on return
/// thunks (tools/agent/src/badinput.rs).
const RETURN_THUNKS_CLAIMED_LOG: &str =
    "textpoke.return_thunks=1 but the exerciser's ret sites switch to";

/// What the agent logs right before it hangs on purpose (tools/agent/src/main.rs).
pub const HANG_LOG: &str = "textpoke-agent: hanging on purpose: the runner must time out";

/// What the outsider prints when a foreign `BRK #0x008` returned (samples/textpoke_outsider.c):
/// only the kernel can print it, and only after the BRK was swallowed, so a boot in which no
/// BRK ran (a module or the defect switch failed to load or set) cannot pass for a catch.
pub const SWALLOWED_LOG: &str =
    "textpoke_outsider: a BRK #0x008 that is not textpoke's was swallowed";

/// Kernel arguments of the KASAN boots (see [`plan`]).
const KASAN_APPEND: &str = "preempt=none rcupdate.rcu_cpu_stall_timeout=300";

/// The unload stress: [`STRESS_SUITE`]'s load/unload cycles of textpoke and the exerciser,
/// with unloads tried while batches are live (tools/agent/src/stress.rs).
pub const STRESS_SUITE: &str = "textpoke_stress";

/// The boots `suite` runs on `arches`.
pub fn plan(suite: Suite, arches: &[Arch]) -> Manifest {
    let mut boots = Vec::new();
    for &arch in arches {
        match suite {
            Suite::TestDebug => {
                // KASAN (inline, with vmalloc shadow), lockdep, DEBUG_ATOMIC_SLEEP,
                // DEBUG_PREEMPT, DEBUG_LIST and DEBUG_OBJECTS, under panic_on_warn: any report
                // is a splat that fails the boot. KASAN slows TCG down three- to fourfold: the
                // negative controls (a check of the checkers, each reloading the modules) stay
                // in `make test`, and a grace period can wait longer than RCU's 21 s for a vCPU
                // to get its turn (as in the benchmarks). The kernel is built preemptible with
                // the model chosen at boot (PREEMPT_DYNAMIC); these boots choose the test
                // kernel's, `none`. The arm64 one is also the kernel with control-flow integrity,
                // so without CALL_OPS: the suite meets ftrace's other ordering there.
                let mut suite = guest(
                    arch,
                    &format!("{arch}-kasan-smp4"),
                    4,
                    2048,
                    "test",
                    "textpoke_agent",
                );
                suite.variant = Variant::Kasan;
                suite.timeout = 1800;
                suite.append.push_str(" textpoke.controls=0 ");
                suite.append.push_str(KASAN_APPEND);
                boots.push(suite);
                let mut stress = guest(
                    arch,
                    &format!("{arch}-kasan-stress"),
                    4,
                    2048,
                    "stress",
                    STRESS_SUITE,
                );
                stress.variant = Variant::Kasan;
                stress.timeout = 1800;
                stress.append.push(' ');
                stress.append.push_str(KASAN_APPEND);
                boots.push(stress);
            }
            Suite::TestFull => {
                // `make test`'s -smp 2 boot with all of FTRACE_DIRS (tools/agent/src/
                // kselftest.rs) instead of its subset: the function tracer's own cases and
                // ftrace direct calls, minutes each, twice. The negative controls stay in
                // `make test`, which runs them on this kernel.
                // 2 GiB: the replay holds every record of all of ftracetest, millions of them.
                let mut full = guest(
                    arch,
                    &format!("{arch}-full"),
                    2,
                    2048,
                    "test",
                    "textpoke_agent",
                );
                full.append.push_str(
                    " textpoke.kselftest=1 textpoke.kselftest_dirs=all textpoke.controls=0",
                );
                full.timeout = 4 * 3600;
                boots.push(full);
            }
            Suite::Test => {
                let mut smp2 = guest(
                    arch,
                    &format!("{arch}-smp2"),
                    2,
                    1024,
                    "test",
                    "textpoke_agent",
                );
                // One log per arch goes through the kernel's own KTAP parser too, and the
                // kernel's own test suites run once per arch, with and without textpoke.
                smp2.kunit_check = true;
                smp2.append.push_str(" textpoke.kselftest=1");
                // The arm64 one prints the observer's executions, which the host check
                // ETM_OBSERVED turns into a CoreSight trace for perf to decode.
                if arch == Arch::Arm64 {
                    smp2.append.push_str(" textpoke.etm_dataset=1");
                }
                // The kernel's suites run twice in it: minutes more than the other boots.
                smp2.timeout = 1800;
                boots.push(smp2);
                boots.push(guest(
                    arch,
                    &format!("{arch}-smp4"),
                    4,
                    2048,
                    "test",
                    "textpoke_agent",
                ));
            }
            Suite::Run => boots.push(guest(
                arch,
                &format!("{arch}-demo"),
                2,
                1024,
                "run",
                "textpoke_demo",
            )),
            Suite::Bench => {
                let mut b = guest(
                    arch,
                    &format!("{arch}-bench"),
                    4,
                    2048,
                    "bench",
                    "textpoke_bench",
                );
                // Under TCG one arm64 batch of 4096 sites takes tens of seconds with upstream's
                // mechanism as with ours.
                b.timeout = 3600;
                b.append.push_str(" rcupdate.rcu_cpu_stall_timeout=300");
                boots.push(b);
            }
        }
    }
    if suite == Suite::Test && arches.contains(&Arch::X86_64) {
        // x86 as distributions build it: IBT and every CPU mitigation Debian enables (return
        // thunks, retpolines, page-table isolation, ...), clang 19, objtool-checked modules,
        // the same suite.
        let mut mitigations = guest(
            Arch::X86_64,
            "x86_64-mitigations",
            2,
            1024,
            "test",
            "textpoke_agent",
        );
        mitigations.variant = Variant::Mitigations;
        // The agent then asks for the bad-input case that only such a kernel has, so that it
        // cannot vanish unnoticed (tools/agent/src/badinput.rs).
        mitigations.append.push_str(" textpoke.return_thunks=1");
        boots.push(mitigations);
    }
    if suite == Suite::Test && arches.contains(&Arch::X86_64) {
        boots.push(harness(
            "not-ok",
            "not_ok",
            Verdict::NotOk,
            Some("a_test_that_fails"),
        ));
        // The agent's last line before it hangs: a kernel that hangs before the agent starts
        // times out too, and must not count.
        let mut hang = harness("hang", "hang", Verdict::Timeout, Some(HANG_LOG));
        hang.timeout = 40;
        boots.push(hang);
        boots.push(harness(
            "warn",
            "warn",
            Verdict::Splat,
            Some("harness_warn"),
        ));
        let mut no_series = harness(
            "no-series",
            "no_series",
            Verdict::NotOk,
            Some("lacks the textpoke patch series"),
        );
        no_series.variant = Variant::Unpatched;
        boots.push(no_series);
        // The patched kernel has no return thunks: told it has, the bad-input group's check
        // that the runner and the exerciser agree must fail (the mitigations boot relies on it).
        let mut thunks = harness(
            "return-thunks-claimed",
            "return_thunks_claimed",
            Verdict::NotOk,
            Some(RETURN_THUNKS_CLAIMED_LOG),
        );
        thunks.append.push_str(" textpoke.return_thunks=1");
        boots.push(thunks);
    }
    if suite == Suite::Test && arches.contains(&Arch::Arm64) {
        // A `BRK #0x008` that is no guard of textpoke's must kill the kernel ("Oops - BRK"),
        // not be hidden; the debug build's seeded defect that swallows it must be caught.
        let mut brk = harness(
            "foreign-brk",
            "foreign_brk",
            Verdict::Splat,
            Some("Oops - BRK"),
        );
        brk.arch = Arch::Arm64;
        boots.push(brk);
        let mut swallowed = harness(
            "foreign-brk-swallowed",
            "foreign_brk_swallowed",
            Verdict::NotOk,
            Some(SWALLOWED_LOG),
        );
        swallowed.arch = Arch::Arm64;
        boots.push(swallowed);
    }
    for b in &mut boots {
        b.require.extend(groups_asked(&b.append));
    }
    let mut checks = Vec::new();
    if suite == Suite::Test {
        checks.extend(
            HOST_CHECKS
                .iter()
                .map(|c| (*c).to_owned())
                .chain(arches.iter().map(|a| format!("lint-{a}"))),
        );
        if arches.contains(&Arch::Arm64) {
            checks.push(ETM_OBSERVED.to_owned());
        }
    }
    Manifest {
        suite,
        arches: arches.to_vec(),
        boots,
        checks,
    }
}

/// The agent's groups that a test boot's command line asks for, as paths the boot's document
/// must hold: the agent plans its cases from the same command line (tools/agent/src/plan.rs),
/// so a group it was asked for and left out of its plan, or a boot whose arguments lost the
/// request, fails the boot by name instead of shrinking its count.
fn groups_asked(append: &str) -> Vec<String> {
    let args: Vec<&str> = append.split_whitespace().collect();
    let mut groups = Vec::new();
    if args.contains(&"textpoke.mode=test") {
        if !args.contains(&"textpoke.controls=0") {
            groups.push("textpoke_agent/negative_controls".to_owned());
        }
        if args.contains(&"textpoke.kselftest=1") {
            groups.push("textpoke_agent/kernel_suites".to_owned());
        }
    }
    groups
}

/// The host checks of `make test`, recorded by tools/test.sh with `textpoke-runner record`.
pub const HOST_CHECKS: &[&str] = &[
    "host-tests",
    "loom",
    "mutants",
    "fuzz-smoke",
    "clippy",
    "rustfmt",
    "checkpatch",
    "perf-cs-etm",
];

/// The host check of `make test` that decodes the arm64 -smp 2 boot's observed executions as a
/// CoreSight trace (`textpoke-runner etm-observed`, run by tools/test.sh after the boots).
pub const ETM_OBSERVED: &str = "etm-observed";

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
            if crate::ktap::is_result_line(line) {
                println!("[{name}] {}", crate::ktap::strip_console_prefix(line));
            } else if !splat_seen {
                if let Some(s) = splat::find(line) {
                    splat_seen = true;
                    println!("[{name}] splat: {}", s.text);
                }
            }
        }
        Echo::Quiet => {}
    };
    let run = qemu::run(
        &cmd,
        &log_path,
        Duration::from_secs(boot.timeout),
        &mut progress,
    )
    .map_err(|e| format!("running {}: {e}", cmd[0]))?;
    let judgement = judge::judge(&run.log, &run.outcome, &boot.require);
    let (ok, reason) = judge::check(
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

/// Runs every boot of `manifest` whose artifact is in `artifacts`, `jobs` at a time, and writes
/// their reports into `out`. A boot without its artifact is not run: the summary, which reads
/// the manifest, reports it. Returns the reports written, in the manifest's order, and one line
/// per boot for a person.
pub fn run(
    manifest: &Manifest,
    artifacts: &[Artifact],
    out: &Path,
    opts: &RunOptions,
) -> Vec<Outcome> {
    let by_key: BTreeMap<(u8, Variant), &Artifact> = artifacts
        .iter()
        .map(|a| ((arch_key(a.arch), a.variant), a))
        .collect();
    let next = AtomicUsize::new(0);
    // With each outcome, its boot's place in the manifest, for a stable order.
    let results: Mutex<Vec<(usize, Outcome)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..opts.jobs.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(b) = manifest.boots.get(i) else {
                    return;
                };
                let Some(artifact) = by_key.get(&(arch_key(b.arch), b.variant)) else {
                    let why = format!("not run: no {} {} guest was built", b.arch, b.variant);
                    println!("SKIPPED {}: {why}", b.name);
                    results
                        .lock()
                        .unwrap()
                        .push((i, (b.name.clone(), Err(why))));
                    continue;
                };
                let r = boot(b, artifact, out, opts.qemu.as_deref(), false, opts.echo);
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
    fn test_plan_covers_both_arches_and_the_harness() {
        let m = plan(Suite::Test, &[Arch::X86_64, Arch::Arm64]);
        let names: Vec<&str> = m.boots.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "x86_64-smp2",
                "x86_64-smp4",
                "arm64-smp2",
                "arm64-smp4",
                "x86_64-mitigations",
                "harness-not-ok",
                "harness-hang",
                "harness-warn",
                "harness-no-series",
                "harness-return-thunks-claimed",
                "harness-foreign-brk",
                "harness-foreign-brk-swallowed"
            ]
        );
        assert_eq!(
            m.artifacts(),
            [
                (Arch::X86_64, Variant::Patched),
                (Arch::Arm64, Variant::Patched),
                (Arch::X86_64, Variant::Mitigations),
                (Arch::X86_64, Variant::Unpatched)
            ]
        );
        let mitigations = m
            .boots
            .iter()
            .find(|b| b.variant == Variant::Mitigations)
            .unwrap();
        assert_eq!((mitigations.arch, mitigations.smp), (Arch::X86_64, 2));
        assert_eq!(
            mitigations.require,
            [TEST_SUITES[0], TEST_SUITES[1], CONTROLS]
        );
        assert!(mitigations.append.contains("textpoke.return_thunks=1"));
        let expected = m.expected_reports();
        let named = |source| {
            expected
                .iter()
                .filter(|e| e.source == source)
                .map(|e| e.name.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            named(Source::KunitCheck),
            ["x86_64-smp2.kunit", "arm64-smp2.kunit"]
        );
        assert_eq!(named(Source::Boot), names);
        // Every host check is expected too, lint once per arch, and the decode of the arm64
        // boot's executions, which that boot is asked to print.
        assert_eq!(
            named(Source::HostCheck),
            [
                "host-tests",
                "loom",
                "mutants",
                "fuzz-smoke",
                "clippy",
                "rustfmt",
                "checkpatch",
                "perf-cs-etm",
                "lint-x86_64",
                "lint-arm64",
                ETM_OBSERVED
            ]
        );
        let dataset_asked: Vec<&str> = m
            .boots
            .iter()
            .filter(|b| b.append.contains("textpoke.etm_dataset=1"))
            .map(|b| b.name.as_str())
            .collect();
        assert_eq!(dataset_asked, ["arm64-smp2"]);
        assert!(!plan(Suite::Test, &[Arch::X86_64])
            .checks
            .iter()
            .any(|c| c == ETM_OBSERVED));
        // The demo builds no unpatched kernel.
        let demo = plan(Suite::Run, &[Arch::X86_64, Arch::Arm64]);
        assert_eq!(demo.boots.len(), 2);
        assert!(demo.artifacts().iter().all(|(_, v)| *v == Variant::Patched));
        // One arch: its boots and its own harness checks only.
        assert_eq!(plan(Suite::Test, &[Arch::Arm64]).boots.len(), 4);
    }

    const CONTROLS: &str = "textpoke_agent/negative_controls";

    #[test]
    fn a_group_the_command_line_asks_for_cannot_vanish() {
        use crate::judge::{self, Outcome, Verdict};
        let m = plan(Suite::Test, &[Arch::X86_64, Arch::Arm64]);
        let boot = |name: &str| m.boots.iter().find(|b| b.name == name).unwrap().clone();
        for name in ["x86_64-smp2", "arm64-smp2"] {
            let want = [
                TEST_SUITES[0],
                TEST_SUITES[1],
                CONTROLS,
                "textpoke_agent/kernel_suites",
            ];
            assert_eq!(boot(name).require, want, "{name}");
        }
        assert!(boot("x86_64-smp4").require.contains(&CONTROLS.to_owned()));
        // The KASAN boots are told not to run the controls, and are not asked for them.
        let debug = plan(Suite::TestDebug, &[Arch::X86_64]);
        assert_eq!(debug.boots[0].require, TEST_SUITES);
        // A document that planned no controls (its command line lost the request) fails by name.
        let log = "KTAP version 1\n1..2\n    KTAP version 1\n    1..1\n    ok 1 a\nok 1 textpoke_selftest\n    KTAP version 1\n    1..1\n    ok 1 scenario\nok 2 textpoke_agent\n";
        let j = judge::judge(log, &Outcome::Exited(0), &boot("x86_64-smp4").require);
        assert_eq!(j.verdict, Verdict::MissingKtap, "{}", j.reason);
        assert!(j.reason.contains(CONTROLS), "{}", j.reason);
        let with = log.replace("ok 1 scenario", "ok 1 negative_controls");
        let j = judge::judge(&with, &Outcome::Exited(0), &boot("x86_64-smp4").require);
        assert_eq!(j.verdict, Verdict::Pass, "{}", j.reason);
    }

    #[test]
    fn harness_boots_need_a_line_only_their_cause_prints() {
        use crate::judge::Outcome;
        let m = plan(Suite::Test, &[Arch::X86_64, Arch::Arm64]);
        let boot = |name: &str| m.boots.iter().find(|b| b.name == name).unwrap().clone();
        let hang = boot("harness-hang");
        assert_eq!(hang.expect_log.as_deref(), Some(HANG_LOG));
        let swallowed = boot("harness-foreign-brk-swallowed");
        assert_eq!(swallowed.expect_log.as_deref(), Some(SWALLOWED_LOG));
        // The unswallowed one stays with the kernel's own report.
        assert_eq!(
            boot("harness-foreign-brk").expect_log.as_deref(),
            Some("Oops - BRK")
        );
        // A kernel that hangs before the agent starts times out too: no catch.
        let early = "[    0.000000] Linux version 6.12.0\n[    1.0] Run /init as init process\n";
        let j = judge::judge(early, &Outcome::TimedOut(40), &hang.require);
        assert_eq!(j.verdict, Verdict::Timeout);
        assert!(!judge::check(&j, early, hang.expect, hang.expect_log.as_deref()).0);
        let agent = format!("{early}[    2.0] {HANG_LOG}\n");
        let j = judge::judge(&agent, &Outcome::TimedOut(40), &hang.require);
        assert!(judge::check(&j, &agent, hang.expect, hang.expect_log.as_deref()).0);
        // A swallowed-BRK boot whose BRK never ran (the debug module failed to load) fails as
        // not ok too, but without the outsider's line it is no catch.
        let no_brk =
            "[    1.0] KTAP version 1\n[    1.0] 1..1\n[    1.0] not ok 1 foreign_brk_setup\n\
                      [    2.0] reboot: Restarting system\n";
        let j = judge::judge(no_brk, &Outcome::Exited(0), &swallowed.require);
        assert_eq!(j.verdict, Verdict::NotOk);
        assert!(
            !judge::check(
                &j,
                no_brk,
                swallowed.expect,
                swallowed.expect_log.as_deref()
            )
            .0
        );
        let caught = format!(
            "[    1.0] {SWALLOWED_LOG}\n[    1.1] KTAP version 1\n[    1.1] 1..1\n\
             [    1.1] not ok 1 foreign_brk_reported\n[    2.0] reboot: Restarting system\n"
        );
        let j = judge::judge(&caught, &Outcome::Exited(0), &swallowed.require);
        assert!(
            judge::check(
                &j,
                &caught,
                swallowed.expect,
                swallowed.expect_log.as_deref()
            )
            .0
        );
    }

    #[test]
    fn test_debug_boots_the_kasan_kernel_with_the_suite_and_the_stress() {
        let m = plan(Suite::TestDebug, &[Arch::X86_64, Arch::Arm64]);
        let names: Vec<&str> = m.boots.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "x86_64-kasan-smp4",
                "x86_64-kasan-stress",
                "arm64-kasan-smp4",
                "arm64-kasan-stress"
            ]
        );
        assert_eq!(
            m.artifacts(),
            [
                (Arch::X86_64, Variant::Kasan),
                (Arch::Arm64, Variant::Kasan)
            ]
        );
        assert!(m
            .boots
            .iter()
            .all(|b| b.smp == 4 && b.expect == Verdict::Pass));
        assert_eq!(
            m.boots[0].append,
            format!("textpoke.mode=test textpoke.controls=0 {KASAN_APPEND}")
        );
        assert_eq!(
            m.boots[1].append,
            format!("textpoke.mode=stress {KASAN_APPEND}")
        );
        assert_eq!(m.boots[1].require, ["textpoke_selftest", STRESS_SUITE]);
        assert!(m.checks.is_empty());
        assert_eq!(plan(Suite::TestDebug, &[Arch::Arm64]).boots.len(), 2);
    }

    #[test]
    fn test_full_runs_all_of_ftracetest_on_the_patched_kernel_and_requires_it() {
        let m = plan(Suite::TestFull, &[Arch::X86_64, Arch::Arm64]);
        let names: Vec<&str> = m.boots.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["x86_64-full", "arm64-full"]);
        assert_eq!(
            m.artifacts(),
            [
                (Arch::X86_64, Variant::Patched),
                (Arch::Arm64, Variant::Patched)
            ]
        );
        for b in &m.boots {
            assert!(b.append.contains("textpoke.kselftest_dirs=all"));
            // The kernel suites cannot drop out of the document unnoticed.
            assert!(b
                .require
                .iter()
                .any(|r| r == "textpoke_agent/kernel_suites"));
            assert_eq!(b.expect, Verdict::Pass);
        }
        assert!(m.checks.is_empty());
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
