//! The boots each make target runs, as typed data: the matrix, and the manifest a run writes
//! before anything is built.
//!
//! `tools/test.sh` (and `run.sh`, `bench.sh`) only build: they ask [`plan`] which kernels and
//! initramfs images the suite needs (`textpoke-runner plan`), build those, and hand the paths
//! of whatever was built to the run of plan/run.rs (`textpoke-runner suite`). The manifest lists
//! every planned boot and host check up front, so a boot that never ran, because its guest
//! failed to build or its artifacts were never handed over, or a host check that never recorded
//! its result, because the shell running it died or `record` failed, is a failure the summary
//! names rather than a silent gap.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::judge::verdict::Verdict;
use crate::platform::qemu::Arch;
use crate::rundir::layout as rundir;

/// The groups of a test boot's document, as the agent defines them: one list for both sides.
#[path = "../../../agent/src/scenarios/groups.rs"]
pub mod agent_groups;

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
    /// The longest the console may stay silent, in seconds: a hang (see
    /// [`qemu::Limits`](crate::platform::qemu::Limits)).
    pub silence: u64,
    /// The longest the boot may run at all, in seconds.
    pub cap: u64,
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
    /// The verdict that counts as ok: the plan's, which the report must repeat (a report that
    /// says it expected something else is judged against what was planned, not itself).
    pub expect: Verdict,
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
                expect: Verdict::Pass,
            });
            std::iter::once(Expected {
                name: b.name.clone(),
                source: Source::Boot,
                expect: b.expect,
            })
            .chain(check)
        });
        let checks = self.checks.iter().map(|c| Expected {
            name: c.clone(),
            source: Source::HostCheck,
            expect: Verdict::Pass,
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

/// Which groups of the agent's document (`agent_groups::GROUPS`) a test boot runs, by what only
/// that boot can show. Each arch's `-smp 2` boot runs every group: the kernel's own suites and
/// the negative controls (checks of the checks) run there only, and every other group at least
/// there. The other boots repeat only what their difference can change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// `{arch}-smp2`: every group.
    Full,
    /// `{arch}-smp4`: what more CPUs can change: every CPU synchronized, trapping and executing
    /// at once. The scenarios (concurrent pokers, executors on every CPU), the observed
    /// scenario, the outsider (a kprobe armed and disarmed at a site that another thread
    /// commits to throughout, its `INT3`s under a scenario), the kernel's own patching (its
    /// batches and syncs), CPU hotplug (more CPUs to take down under a batch) and the listener
    /// (starts mid-storm, records on every CPU's buffer). Not the bad input (each request
    /// refused before any CPU is involved), Debian's perf (the records the scenarios' own
    /// recorder checks at four CPUs, read by the same tool; `perf record` in a storm, whose
    /// subject is its order of steps, not the CPUs), nor the controls.
    MoreCpus,
    /// `x86_64-mitigations`: what a distribution's config and compiler change: the text. Every
    /// group that writes, emulates or reads instructions of the kernel's or a module's text
    /// built with IBT, return thunks and retpolines by clang 19: the scenarios and the observed
    /// one, the bad input (its return-thunk case exists only here), the outsider (registering
    /// over the kernel's own sites in that text), the kernel's own patching and Debian's perf
    /// against its text. Not hotplug, the listener (nor `perf record` in a storm) or the
    /// controls, whose subject is timing and the checks themselves, not the instructions.
    OtherText,
    /// The KASAN and lockdep boots (`make test-debug`): textpoke's own code under the memory
    /// and lock checkers, so every group that runs it, but the controls (checks of the checks,
    /// each reloading the modules, in `make test`), the kernel's suites (`-smp 2`) and `perf
    /// record` in a storm (minutes of updates of every function, whose subject is the order of
    /// perf's steps; lockdep meets the buffers and enables of `text_poke` events under
    /// `text_mutex` in the other groups' recorders and in Debian's perf).
    Checked,
    /// `make test-full`'s boot: the -smp 2 boot's groups with all of ftracetest.
    Ftracetest,
}

impl Role {
    /// The names of the groups a boot of this role runs, in document order.
    fn groups(self) -> Vec<&'static str> {
        let none: &[&str] = match self {
            Self::Full => &[],
            Self::MoreCpus => &[
                "real_perf",
                "bad_input",
                "kernel_suites",
                "stock_recorder",
                "negative_controls",
            ],
            Self::OtherText => &[
                "cpu_hotplug",
                "listener",
                "kernel_suites",
                "stock_recorder",
                "negative_controls",
            ],
            Self::Checked => &["kernel_suites", "stock_recorder", "negative_controls"],
            Self::Ftracetest => &["negative_controls"],
        };
        agent_groups::GROUPS
            .iter()
            .map(|g| g.name)
            .filter(|g| !none.contains(g))
            .collect()
    }

    /// `textpoke.groups=...` for a boot of this role.
    fn append(self) -> String {
        format!(" textpoke.groups={}", self.groups().join(","))
    }
}

/// How long a boot's console may stay silent before the boot counts as hung, in seconds. The
/// agent prints its KTAP document at the end and a line per group of it, so a silence can be as
/// long as a whole group (the slowest take six minutes on an idle host); the longest silence of
/// each boot is in the run's group table (`textpoke-runner report`).
const SILENCE: u64 = 900;
/// How long a boot may run at all, in seconds: only a guest that never stops printing meets it,
/// on a host busy enough to slow a boot several times over.
const CAP: u64 = 3600;

/// The suites every test boot's single KTAP document must contain.
const TEST_SUITES: [&str; 2] = ["textpoke_selftest", "textpoke_agent"];

fn guest(arch: Arch, name: &str, smp: u32, mem_mb: u32, mode: &str, suite: &str) -> PlannedBoot {
    PlannedBoot {
        name: name.to_owned(),
        arch,
        variant: Variant::Patched,
        smp,
        mem_mb,
        silence: SILENCE,
        cap: CAP,
        append: format!("textpoke.mode={mode}"),
        expect: Verdict::Pass,
        expect_log: None,
        require: vec![TEST_SUITES[0].to_owned(), suite.to_owned()],
        kunit_check: false,
    }
}

/// What the kernel prints when it meets a `BRK #0x008` nobody claims.
const OOPS_BRK_LOG: &str = "Oops - BRK";

/// As [`harness`], on the arm64 guest of `variant`.
fn arm64_harness(
    name: &str,
    check: &str,
    expect: Verdict,
    expect_log: &str,
    variant: Variant,
) -> PlannedBoot {
    PlannedBoot {
        arch: Arch::Arm64,
        variant,
        ..harness(name, check, expect, Some(expect_log))
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
        silence: SILENCE,
        cap: CAP,
        append: format!("textpoke.mode=check={check}"),
        expect,
        expect_log: expect_log.map(str::to_owned),
        require: Vec::new(),
        kunit_check: false,
    }
}

/// What the bad-input group says when the command line and the exerciser disagree on return
/// thunks (tools/agent/src/scenarios/badinput.rs).
const RETURN_THUNKS_CLAIMED_LOG: &str =
    "textpoke.return_thunks=1 but the exerciser's ret sites switch to";

/// What the agent logs right before it hangs on purpose (tools/agent/src/main.rs).
pub const HANG_LOG: &str = "textpoke-agent: hanging on purpose: the runner must time out";

/// What the outsider prints when a foreign `BRK #0x008` returned (samples/textpoke_outsider.c):
/// only the kernel can print it, and only after the BRK was swallowed, so a boot in which no
/// BRK ran (a module or the defect switch failed to load or set) cannot pass for a catch.
pub const SWALLOWED_LOG: &str =
    "textpoke_outsider: a BRK #0x008 that is not textpoke's was swallowed";

/// What the agent's kmemleak check says when it finds a leak of textpoke's or its samples'
/// (`kmemleak_case` in tools/agent/src/scenarios/faults.rs): only a failing check prints it.
pub const KMEMLEAK_CAUGHT_LOG: &str = "of them textpoke's or its samples': the first: unreferenced";

/// Kernel arguments of the KASAN boots (see [`plan`]).
const KASAN_APPEND: &str = "preempt=none rcupdate.rcu_cpu_stall_timeout=300";

/// The unload stress: [`STRESS_SUITE`]'s load/unload cycles of textpoke and the exerciser,
/// with unloads tried while batches are live (tools/agent/src/scenarios/stress.rs).
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
                // Two CPUs, as `make test`'s full boots: TCG runs a guest's vCPUs in turn on one
                // host thread, so each all-CPU sync of a batch waits for every vCPU's turn and
                // four CPUs take about twice as long; the sanitizers' reports need a trap on
                // one CPU beside a batch on another, which two give, and `make test`'s -smp 4
                // boots keep the wider races.
                let mut suite = guest(
                    arch,
                    &format!("{arch}-kasan-smp2"),
                    2,
                    2048,
                    "test",
                    "textpoke_agent",
                );
                suite.variant = Variant::Kasan;
                suite.silence = 2 * SILENCE;
                suite.cap = 2 * CAP;
                suite.append.push_str(&Role::Checked.append());
                suite.append.push(' ');
                suite.append.push_str(KASAN_APPEND);
                boots.push(suite);
                let mut stress = guest(
                    arch,
                    &format!("{arch}-kasan-stress"),
                    2,
                    2048,
                    "stress",
                    STRESS_SUITE,
                );
                stress.variant = Variant::Kasan;
                stress.silence = 2 * SILENCE;
                stress.cap = 2 * CAP;
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
                full.append.push_str(&Role::Ftracetest.append());
                full.append.push_str(" textpoke.kselftest_dirs=all");
                full.silence = 2 * SILENCE;
                full.cap = 4 * CAP;
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
                smp2.append.push_str(&Role::Full.append());
                // The arm64 one prints the observer's executions, which the host check
                // ETM_OBSERVED turns into a CoreSight trace for perf to decode.
                if arch == Arch::Arm64 {
                    smp2.append.push_str(" textpoke.etm_dataset=1");
                }
                // The kernel's suites run twice in it: minutes more than the other boots.
                smp2.cap = 2 * CAP;
                boots.push(smp2);
                let mut smp4 = guest(
                    arch,
                    &format!("{arch}-smp4"),
                    4,
                    2048,
                    "test",
                    "textpoke_agent",
                );
                smp4.append.push_str(&Role::MoreCpus.append());
                boots.push(smp4);
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
                b.silence = 2 * SILENCE;
                b.cap = 3 * CAP;
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
        mitigations.append.push_str(&Role::OtherText.append());
        // The agent then asks for the bad-input case that only such a kernel has, so that it
        // cannot vanish unnoticed (tools/agent/src/scenarios/badinput.rs).
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
        hang.silence = 40;
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
        boots.push(arm64_harness(
            "foreign-brk",
            "foreign_brk",
            Verdict::Splat,
            OOPS_BRK_LOG,
            Variant::Patched,
        ));
        boots.push(arm64_harness(
            "foreign-brk-swallowed",
            "foreign_brk_swallowed",
            Verdict::NotOk,
            SWALLOWED_LOG,
            Variant::Patched,
        ));
    }
    if suite == Suite::TestDebug && arches.contains(&Arch::X86_64) {
        // A module that leaks, unloaded before the scans: the unload stress's kmemleak check
        // (only the KASAN kernels have kmemleak) must fail on its leaks.
        let mut leak = harness(
            "kmemleak",
            "kmemleak",
            Verdict::NotOk,
            Some(KMEMLEAK_CAUGHT_LOG),
        );
        leak.variant = Variant::Kasan;
        leak.mem_mb = 2048;
        leak.silence = 2 * SILENCE;
        leak.append.push(' ');
        leak.append.push_str(KASAN_APPEND);
        boots.push(leak);
    }
    if suite == Suite::TestDebug && arches.contains(&Arch::Arm64) {
        // With textpoke loaded and unloaded again, the kernel's trap hook is at its default: a
        // `BRK #0x008` must meet the stock kernel ("Oops - BRK"). The arm64 KASAN kernel is the
        // one with control-flow integrity, where a default of the wrong type for the hook's
        // indirect call dies as a CFI failure instead.
        let mut unloaded = arm64_harness(
            "foreign-brk-unloaded",
            "foreign_brk_unloaded",
            Verdict::Splat,
            OOPS_BRK_LOG,
            Variant::Kasan,
        );
        unloaded.append.push(' ');
        unloaded.append.push_str(KASAN_APPEND);
        boots.push(unloaded);
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

/// The agent's cases that a test boot's command line asks for (`textpoke.groups=`, or the
/// agent's default without it), as paths the boot's document must hold: the agent plans its
/// cases from the same command line and the same list of groups
/// (tools/agent/src/scenarios/groups.rs), so a group it was asked for and left out of its
/// plan, or a boot whose arguments lost the request, fails the boot by name instead of
/// shrinking its count. A list the agent would refuse is planned as a case that cannot exist,
/// so that the boot fails.
fn groups_asked(append: &str) -> Vec<String> {
    let args: Vec<&str> = append.split_whitespace().collect();
    if !args.contains(&"textpoke.mode=test") {
        return Vec::new();
    }
    let value = args.iter().find_map(|a| a.strip_prefix("textpoke.groups="));
    match agent_groups::asked(value) {
        Ok(groups) => groups
            .iter()
            .flat_map(|g| g.cases.iter())
            .map(|c| format!("textpoke_agent/{c}"))
            .collect(),
        Err(e) => vec![format!("textpoke_agent/groups_asked: {e}")],
    }
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
    "writers",
    "perf-cs-etm",
];

/// The host check of `make test` that decodes the arm64 -smp 2 boot's observed executions as a
/// CoreSight trace (`textpoke-runner etm-observed`, run by tools/test.sh after the boots).
pub const ETM_OBSERVED: &str = "etm-observed";

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(mitigations
            .require
            .contains(&"textpoke_agent/bad_input".to_owned()));
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
                "writers",
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

    /// The groups a boot's command line asks for.
    fn groups_of(b: &PlannedBoot) -> Vec<&str> {
        let arg = b
            .append
            .split_whitespace()
            .find_map(|a| a.strip_prefix("textpoke.groups="))
            .unwrap_or_default();
        arg.split(',').filter(|g| !g.is_empty()).collect()
    }

    /// Only the patched kernel's guests carry the debug build of textpoke (tools/guests.sh):
    /// every boot that loads it, for the negative controls or a seeded defect of a harness
    /// boot, is of that variant.
    #[test]
    fn only_patched_boots_load_the_debug_build() {
        for suite in [Suite::Test, Suite::TestDebug, Suite::TestFull] {
            let m = plan(suite, &[Arch::X86_64, Arch::Arm64]);
            for b in &m.boots {
                let controls = groups_of(b).contains(&"negative_controls")
                    || (b.append.contains("textpoke.mode=test")
                        && !b.append.contains("textpoke.groups="));
                let seeded = b.append.contains("swallowed");
                if controls || seeded {
                    assert_eq!(b.variant, Variant::Patched, "{}", b.name);
                }
            }
        }
    }

    #[test]
    fn every_group_is_planned_in_a_boot_of_each_arch_and_the_full_one_runs_all() {
        let all: Vec<&str> = agent_groups::GROUPS.iter().map(|g| g.name).collect();
        let m = plan(Suite::Test, &[Arch::X86_64, Arch::Arm64]);
        for arch in [Arch::X86_64, Arch::Arm64] {
            let mut planned: Vec<&str> = m
                .boots
                .iter()
                .filter(|b| b.arch == arch && b.append.contains("textpoke.mode=test"))
                .flat_map(groups_of)
                .collect();
            planned.sort_unstable();
            planned.dedup();
            let mut want = all.clone();
            want.sort_unstable();
            assert_eq!(planned, want, "{arch}");
            let full = m.boots.iter().find(|b| b.name == format!("{arch}-smp2"));
            assert_eq!(full.map(groups_of), Some(all.clone()), "{arch}-smp2");
        }
        // The smp4 and mitigations boots each run fewer, and only what their difference can
        // change; the controls and the kernel's suites run in the -smp 2 boots alone.
        for b in m.boots.iter().filter(|b| !b.name.ends_with("-smp2")) {
            let g = groups_of(b);
            assert!(
                !g.contains(&"negative_controls") && !g.contains(&"kernel_suites"),
                "{}",
                b.name
            );
        }
        let smp4 = groups_of(m.boots.iter().find(|b| b.name == "x86_64-smp4").unwrap());
        // More CPUs change the races: the listener's, hotplug's and the outsider's kprobe
        // against commits.
        for g in ["listener", "cpu_hotplug", "outsider"] {
            assert!(smp4.contains(&g), "x86_64-smp4 lacks {g}");
        }
        let mitigations = m
            .boots
            .iter()
            .find(|b| b.name == "x86_64-mitigations")
            .unwrap();
        assert!(groups_of(mitigations).contains(&"bad_input"));
    }

    #[test]
    fn a_group_the_command_line_asks_for_cannot_vanish() {
        use crate::judge::verdict::{self, Verdict};
        use crate::platform::qemu::Outcome;
        let m = plan(Suite::Test, &[Arch::X86_64, Arch::Arm64]);
        let boot = |name: &str| m.boots.iter().find(|b| b.name == name).unwrap().clone();
        for name in ["x86_64-smp2", "arm64-smp2"] {
            let b = boot(name);
            // Every case of every group, each required by name.
            let want: Vec<String> = TEST_SUITES
                .iter()
                .map(|s| (*s).to_owned())
                .chain(
                    agent_groups::GROUPS
                        .iter()
                        .flat_map(|g| g.cases.iter())
                        .map(|c| format!("textpoke_agent/{c}")),
                )
                .collect();
            assert_eq!(b.require, want, "{name}");
        }
        assert!(!boot("x86_64-smp4").require.contains(&CONTROLS.to_owned()));
        assert!(boot("x86_64-smp4")
            .require
            .contains(&"textpoke_agent/listener".to_owned()));
        // The KASAN boots are not asked for the controls.
        let debug = plan(Suite::TestDebug, &[Arch::X86_64]);
        assert!(!debug.boots[0].require.contains(&CONTROLS.to_owned()));
        assert!(debug.boots[0]
            .require
            .contains(&"textpoke_agent/kernel_patching".to_owned()));
        // A document that planned no listener group (its command line lost the request) fails
        // by name.
        let smp4 = boot("x86_64-smp4");
        let cases: Vec<String> = smp4
            .require
            .iter()
            .filter_map(|r| r.strip_prefix("textpoke_agent/"))
            .map(str::to_owned)
            .collect();
        let doc = |cases: &[String]| {
            let mut log = "KTAP version 1\n1..2\n    KTAP version 1\n    1..1\n    ok 1 a\nok 1 textpoke_selftest\n".to_owned();
            log.push_str(&format!("    KTAP version 1\n    1..{}\n", cases.len()));
            for (i, c) in cases.iter().enumerate() {
                log.push_str(&format!("    ok {} {c}\n", i + 1));
            }
            log.push_str("ok 2 textpoke_agent\n");
            log
        };
        let j = verdict::judge(&doc(&cases), &Outcome::Exited(0), &smp4.require);
        assert_eq!(j.verdict, Verdict::Pass, "{}", j.reason);
        let without: Vec<String> = cases.iter().filter(|c| *c != "listener").cloned().collect();
        let j = verdict::judge(&doc(&without), &Outcome::Exited(0), &smp4.require);
        assert_eq!(j.verdict, Verdict::MissingKtap, "{}", j.reason);
        assert!(j.reason.contains("textpoke_agent/listener"), "{}", j.reason);
        // A list the agent would refuse cannot pass either.
        assert!(groups_asked("textpoke.mode=test textpoke.groups=nonsense")
            .iter()
            .any(|r| r.contains("groups_asked")));
    }

    #[test]
    fn harness_boots_need_a_line_only_their_cause_prints() {
        use crate::judge::verdict;
        use crate::platform::qemu::Outcome;
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
        let j = verdict::judge(early, &Outcome::Silent(40), &hang.require);
        assert_eq!(j.verdict, Verdict::Timeout);
        assert!(!verdict::check(&j, early, hang.expect, hang.expect_log.as_deref()).0);
        let agent = format!("{early}[    2.0] {HANG_LOG}\n");
        let j = verdict::judge(&agent, &Outcome::Silent(40), &hang.require);
        assert!(verdict::check(&j, &agent, hang.expect, hang.expect_log.as_deref()).0);
        // A swallowed-BRK boot whose BRK never ran (the debug module failed to load) fails as
        // not ok too, but without the outsider's line it is no catch.
        let no_brk =
            "[    1.0] KTAP version 1\n[    1.0] 1..1\n[    1.0] not ok 1 foreign_brk_setup\n\
                      [    2.0] reboot: Restarting system\n";
        let j = verdict::judge(no_brk, &Outcome::Exited(0), &swallowed.require);
        assert_eq!(j.verdict, Verdict::NotOk);
        assert!(
            !verdict::check(
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
        let j = verdict::judge(&caught, &Outcome::Exited(0), &swallowed.require);
        assert!(
            verdict::check(
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
                "x86_64-kasan-smp2",
                "x86_64-kasan-stress",
                "arm64-kasan-smp2",
                "arm64-kasan-stress",
                "harness-kmemleak",
                "harness-foreign-brk-unloaded"
            ]
        );
        assert_eq!(
            m.artifacts(),
            [
                (Arch::X86_64, Variant::Kasan),
                (Arch::Arm64, Variant::Kasan)
            ]
        );
        let (guests, checks) = m.boots.split_at(4);
        assert!(guests
            .iter()
            .all(|b| b.smp == 2 && b.expect == Verdict::Pass));
        let leak = &checks[0];
        assert_eq!(
            (
                leak.arch,
                leak.variant,
                leak.expect,
                leak.expect_log.as_deref()
            ),
            (
                Arch::X86_64,
                Variant::Kasan,
                Verdict::NotOk,
                Some(KMEMLEAK_CAUGHT_LOG)
            )
        );
        assert_eq!(
            leak.append,
            format!("textpoke.mode=check=kmemleak {KASAN_APPEND}")
        );
        let brk = &checks[1];
        assert_eq!(
            (brk.arch, brk.variant, brk.expect, brk.expect_log.as_deref()),
            (
                Arch::Arm64,
                Variant::Kasan,
                Verdict::Splat,
                Some(OOPS_BRK_LOG)
            )
        );
        assert_eq!(
            brk.append,
            format!("textpoke.mode=check=foreign_brk_unloaded {KASAN_APPEND}")
        );
        assert_eq!(
            m.boots[0].append,
            format!(
                "textpoke.mode=test{} {KASAN_APPEND}",
                Role::Checked.append()
            )
        );
        assert_eq!(
            m.boots[1].append,
            format!("textpoke.mode=stress {KASAN_APPEND}")
        );
        assert_eq!(m.boots[1].require, ["textpoke_selftest", STRESS_SUITE]);
        assert!(m.checks.is_empty());
        assert_eq!(plan(Suite::TestDebug, &[Arch::Arm64]).boots.len(), 3);
        assert_eq!(plan(Suite::TestDebug, &[Arch::X86_64]).boots.len(), 3);
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
}
