//! End-to-end tests of the binary: `boot` against stand-in emulators (shell scripts passed with
//! `--qemu` that print what a guest would), then `summary` and `parse` over what it wrote.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Instant;

use serde_json::Value;

use common::{run, text, Scratch};

impl Scratch {
    /// Writes an executable stand-in for QEMU with `body` as its shell script.
    fn fake_qemu(&self, name: &str, body: &str) -> String {
        let path = self.0.join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path.to_string_lossy().into_owned()
    }

    fn out(&self) -> PathBuf {
        self.0.join("out")
    }
}

/// Boots `name` with the stand-in `qemu`; returns the process output and the JSON report.
fn boot(s: &Scratch, name: &str, qemu: &str, extra: &[&str]) -> (Output, Value) {
    let out = s.out();
    let mut args = vec![
        "boot",
        "--name",
        name,
        "--arch",
        "x86_64",
        "--kernel",
        "/boot/bzImage-test",
        "--initrd",
        "/tmp/initrd-test.cpio",
        "--out",
        out.to_str().unwrap(),
        "--qemu",
        qemu,
    ];
    args.extend_from_slice(extra);
    let o = run(&args);
    let json = fs::read_to_string(out.join(format!("{name}.json")))
        .unwrap_or_else(|e| panic!("no report ({e}): {}", text(&o)));
    (o, serde_json::from_str(&json).unwrap())
}

/// Writes into `out` the manifest of a plan of the x86_64 boots `names`, each with the verdict
/// it expects, and no host check, as `plan` would: `summary` judges a directory against its
/// plan.
fn plan_boots(out: &Path, names: &[(&str, &str)]) {
    let boots: Vec<Value> = names
        .iter()
        .map(|(name, expect)| {
            serde_json::json!({
                "name": name,
                "arch": "x86_64",
                "variant": "patched",
                "smp": 2,
                "mem_mb": 1024,
                "silence": 600,
                "cap": 900,
                "append": "",
                "expect": expect,
                "expect_log": null,
                "require": [],
                "kunit_check": false,
            })
        })
        .collect();
    let manifest = serde_json::json!({
        "suite": "run",
        "arches": ["x86_64"],
        "boots": boots,
        "checks": [],
    });
    fs::write(out.join("manifest.json"), manifest.to_string()).unwrap();
}

fn log_of(s: &Scratch, name: &str) -> String {
    fs::read_to_string(s.out().join(format!("{name}.log"))).unwrap()
}

/// Runs `summary` over `out`, which must exit with `code`; returns what it printed.
fn summary(out: &Path, code: i32) -> String {
    let o = run(&["summary", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(code), "{}", text(&o));
    common::stdout(&o)
}

/// Asserts that the summary `stdout` ends with the count `count`.
fn assert_count(stdout: &str, count: &str) {
    assert_eq!(stdout.lines().last(), Some(count), "{stdout}");
}

/// Asserts that the summary `stdout` names host check `name` as never reported.
fn assert_never_reported(stdout: &str, name: &str) {
    assert!(
        stdout.contains(&format!("\n  {name}: never reported (host check")),
        "{name} not named: {stdout}"
    );
}

const PASSING_GUEST: &str = r#"
echo "qemu args: $*" >&2
printf '[    0.000000] Linux version 6.12.0\r\n'
printf '[    1.000000] KTAP version 1\r\n[    1.000001] 1..3\r\n[    1.000002] # textpoke_selftest\r\n'
printf '[    1.100000] ok 1 pending_lookup\r\n'
printf '[    1.200000]   random indented noise\r\n'
printf '[    1.300000] ok 2 warns_on_bad_input\r\n'
printf '[    1.400000] ok 3 third\r\n'
printf '[    2.000000] reboot: Restarting system'
"#;

#[test]
fn boot_pass_then_summary_and_parse() {
    let s = Scratch::new("pass");
    let qemu = s.fake_qemu("qemu", PASSING_GUEST);
    let (o, r) = boot(
        &s,
        "x86-pass",
        &qemu,
        &[
            "--smp",
            "4",
            "--append",
            "textpoke.x=1",
            "--require-doc",
            "textpoke_selftest",
            "--expect-log",
            "Restarting system",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(r["verdict"], "pass", "{r}");
    assert_eq!(r["expected"], "pass");
    assert_eq!(r["ok"], true);
    assert_eq!(r["smp"], 4);
    assert_eq!(r["arch"], "x86_64");
    assert_eq!(r["mem_mb"], 1024);
    assert_eq!(r["counts"]["passed"], 3);
    assert_eq!(r["counts"]["skipped"], 0);
    assert_eq!(r["counts"]["failed"], 0);
    assert_eq!(r["qemu_status"], 0);
    assert_eq!(r["documents"][0]["name"], "textpoke_selftest");
    assert!(r["seconds"].as_f64().unwrap() < 30.0);
    let stdout = common::stdout(&o);
    assert!(
        stdout.contains("[x86-pass] ok 1 pending_lookup"),
        "{stdout}"
    );
    assert!(
        stdout.contains("OK x86-pass [x86_64 smp=4]: verdict pass"),
        "{stdout}"
    );

    let log = log_of(&s, "x86-pass");
    assert!(log.starts_with("[textpoke-runner] command: "), "{log}");
    assert!(log.contains("-smp 4"), "{log}");
    assert!(log.contains("rdinit=/init textpoke.x=1'"), "{log}");
    assert!(
        log.contains("[    1.100000] ok 1 pending_lookup\r\n"),
        "{log}"
    );
    // A last line without a newline is kept, and the stand-in saw QEMU's arguments.
    assert!(log.contains("reboot: Restarting system\n"), "{log}");
    assert!(
        log.contains("[textpoke-runner] qemu: qemu args: -M q35"),
        "{log}"
    );
    assert!(
        log.ends_with("[textpoke-runner] qemu exited with status 0\n"),
        "{log}"
    );

    plan_boots(&s.out(), &[("x86-pass", "pass")]);
    let stdout = summary(&s.out(), 0);
    assert_count(&stdout, "3 passed, 0 failed");
    assert!(stdout.contains("\n0 skipped\n"), "{stdout}");

    let log_path = s.out().join("x86-pass.log");
    let o = run(&[
        "parse",
        log_path.to_str().unwrap(),
        "--require-doc",
        "textpoke_selftest",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = common::stdout(&o);
    assert_eq!(
        stdout.lines().last(),
        Some("3 passed, 0 failed, 0 skipped"),
        "{stdout}"
    );
    let o = run(&[
        "parse",
        log_path.to_str().unwrap(),
        "--require-doc",
        "textpoke_agent",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

#[test]
fn harness_checks_and_failures() {
    let s = Scratch::new("checks");
    let not_ok = s.fake_qemu(
        "not-ok",
        r#"printf 'KTAP version 1\n1..2\n# agent\n# b: EXPECTATION FAILED\nnot ok 1 b\nok 2 c\n'"#,
    );
    let (o, r) = boot(&s, "fails", &not_ok, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(r["verdict"], "not-ok");
    assert_eq!(r["ok"], false);
    assert_eq!(r["failing_tests"][0], "agent/b");
    assert!(r["reason"].as_str().unwrap().contains("agent/b"), "{r}");

    let (o, r) = boot(&s, "check-not-ok", &not_ok, &["--expect", "not-ok"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(r["ok"], true);

    let warn = s.fake_qemu(
        "warn",
        r#"printf 'KTAP version 1\n1..1\nok 1 a\n[    3.0] WARNING: CPU: 1 PID: 7 at mm/x.c:1 f+0x0/0x1\n[    3.1] Kernel panic - not syncing: kernel: panic_on_warn set ...\n'"#,
    );
    let (o, r) = boot(
        &s,
        "check-warn",
        &warn,
        &["--expect", "splat", "--expect-log", "panic_on_warn set"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(r["verdict"], "splat");
    assert_eq!(r["splat"]["line"], 6, "{r}");

    let bad_exit = s.fake_qemu("exit1", "echo 'qemu: could not load kernel' >&2; exit 1");
    let (o, r) = boot(&s, "check-exit", &bad_exit, &["--expect", "qemu-exit"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(r["qemu_status"], 1);

    let (o, r) = boot(&s, "no-qemu", "/nonexistent/qemu-system-x86_64", &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(r["verdict"], "qemu-exit");
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains("could not be started"),
        "{r}"
    );

    let silent = s.fake_qemu("silent", "echo 'Linux version 6.12'");
    let (o, r) = boot(&s, "check-missing", &silent, &["--expect", "missing-ktap"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(r["verdict"], "missing-ktap");

    // A harness check that does not come out as expected fails.
    let (o, r) = boot(&s, "check-wrong", &silent, &["--expect", "not-ok"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(r["ok"], false);

    // fails: 1 passed + 1 failed; checks: not-ok, warn, exit, missing pass, wrong fails;
    // no-qemu: expected pass, nothing failing, so it counts one failure.
    plan_boots(
        &s.out(),
        &[
            ("fails", "pass"),
            ("check-not-ok", "not-ok"),
            ("check-warn", "splat"),
            ("check-exit", "qemu-exit"),
            ("no-qemu", "pass"),
            ("check-missing", "missing-ktap"),
            ("check-wrong", "not-ok"),
        ],
    );
    let stdout = summary(&s.out(), 1);
    assert_count(&stdout, "5 passed, 3 failed");
    assert!(
        stdout.contains("Failing KTAP tests:\n  fails: agent/b\n"),
        "{stdout}"
    );
    assert!(stdout.contains("fails.log"), "{stdout}");
    assert!(stdout.contains("no-qemu.log"), "{stdout}");
}

/// Boots a fake emulator that prints a line and sleeps, under `limits`: the runner must kill it
/// after 2 s for the reason `why` gives, and `parse` must read that back from the log.
fn killed_after_two_seconds(name: &str, limits: &[&str], why: &str) {
    let s = Scratch::new(name);
    let hang = s.fake_qemu(
        name,
        "printf 'KTAP version 1\\n1..3\\nok 1 a\\n'; exec sleep 600",
    );
    let start = Instant::now();
    let args: Vec<&str> = limits
        .iter()
        .copied()
        .chain(["--expect", "timeout"])
        .collect();
    let (o, r) = boot(&s, name, &hang, &args);
    assert!(start.elapsed().as_secs() < 20);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(r["verdict"], "timeout");
    assert_eq!(
        r["reason"],
        format!("timeout as expected: timeout: qemu killed after 2 s{why}")
    );
    assert_eq!(r["qemu_status"], Value::Null);
    let secs = r["seconds"].as_f64().unwrap();
    assert!((2.0..10.0).contains(&secs), "{secs}");
    let log = log_of(&s, name);
    assert!(log.contains("\nok 1 a\n"), "{log}");
    assert!(
        log.ends_with(&format!(
            "[textpoke-runner] timeout: killed qemu after 2 s{why}\n"
        )),
        "{log}"
    );

    // `parse` reads the outcome back from the log.
    let path = s.out().join(format!("{name}.log"));
    let o = run(&["parse", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        common::stdout(&o).contains("verdict timeout"),
        "{}",
        text(&o)
    );
}

#[test]
fn timeout_kills_the_emulator() {
    killed_after_two_seconds("hang", &["--timeout", "2"], "");
}

#[test]
fn a_silent_console_kills_the_emulator() {
    killed_after_two_seconds(
        "silent",
        &["--silence", "2", "--timeout", "600"],
        " without console output",
    );
}

#[test]
fn timeout_survives_an_emulator_that_ignores_sigterm() {
    let s = Scratch::new("stubborn");
    let stubborn = s.fake_qemu(
        "stubborn",
        "trap '' TERM; echo started; while :; do sleep 1; done",
    );
    let start = Instant::now();
    let (o, r) = boot(
        &s,
        "stubborn",
        &stubborn,
        &["--timeout", "1", "--expect", "timeout"],
    );
    assert!(start.elapsed().as_secs() < 20);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(r["verdict"], "timeout");
}

#[test]
fn parse_a_plain_serial_log() {
    let s = Scratch::new("parse");
    let path: &Path = &s.0.join("serial.log");
    fs::write(
        path,
        "KTAP version 1\n1..2\n  # Subtest: suite\n  1..1\n  ok 1 t\nok 1 suite\n",
    )
    .unwrap();
    let o = run(&["parse", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stdout = common::stdout(&o);
    assert!(stdout.contains("planned 2 results but only 1"), "{stdout}");
    assert!(
        stdout.contains("FAILED: verdict not-ok, expected pass"),
        "{stdout}"
    );
    let o = run(&["parse", path.to_str().unwrap(), "--expect", "not-ok"]);
    assert!(o.status.success(), "{}", text(&o));
}

/// A guest whose single KTAP document holds the two suites every test boot must show, and every
/// case of the agent's groups, which the test boots' command lines ask for.
const SUITES_GUEST: &str = r#"
printf '[    1.000000] KTAP version 1\r\n[    1.000001] 1..2\r\n'
printf '[    1.000002]     KTAP version 1\r\n[    1.000003]     # Subtest: textpoke_selftest\r\n'
printf '[    1.000004]     1..1\r\n[    1.000005]     ok 1 a\r\n[    1.000006] ok 1 textpoke_selftest\r\n'
printf '[    1.000007]     KTAP version 1\r\n[    1.000008]     # Subtest: textpoke_agent\r\n'
printf '[    1.000009]     1..16\r\n'
printf '[    1.000010]     ok 1 scenario_one_poker\r\n'
printf '[    1.000011]     ok 2 scenario_concurrent_pokers\r\n'
printf '[    1.000012]     ok 3 scenario_observed\r\n'
printf '[    1.000013]     ok 4 real_perf_records_match_text\r\n'
printf '[    1.000014]     ok 5 real_perf_sees_kernel_ftrace_pokes\r\n'
printf '[    1.000015]     ok 6 real_perf_maps_new_module\r\n'
printf '[    1.000016]     ok 7 bad_input\r\n'
printf '[    1.000017]     ok 8 outsider\r\n'
printf '[    1.000018]     ok 9 kernel_suites\r\n'
printf '[    1.000019]     ok 10 kernel_patching\r\n'
printf '[    1.000020]     ok 11 other_writers\r\n'
printf '[    1.000021]     ok 12 new_text\r\n'
printf '[    1.000022]     ok 13 cpu_hotplug\r\n'
printf '[    1.000023]     ok 14 listener\r\n'
printf '[    1.000024]     ok 15 stock_recorder\r\n'
printf '[    1.000025]     ok 16 negative_controls\r\n'
printf '[    1.000026] ok 2 textpoke_agent\r\n'
"#;

#[test]
fn a_skip_fails_a_boot_expected_to_pass() {
    let s = Scratch::new("skip");
    let qemu = s.fake_qemu(
        "qemu",
        &PASSING_GUEST.replace("ok 3 third", "ok 3 third # SKIP not here"),
    );
    let (o, r) = boot(&s, "x86-skip", &qemu, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(r["ok"], false);
    assert_eq!(r["reason"], "unexpected SKIP: textpoke_selftest/third");
}

#[test]
fn plan_suite_and_a_guest_that_was_never_built() {
    let s = Scratch::new("suite");
    let qemu = s.fake_qemu("qemu", SUITES_GUEST);
    let out = s.out();
    let out = out.to_str().unwrap();
    let o = run(&[
        "plan", "test", "--arch", "x86_64", "--arch", "arm64", "--out", out,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        common::stdout(&o),
        "x86_64 patched\narm64 patched\nx86_64 mitigations\nx86_64 unpatched\n"
    );
    // Only the x86_64 guests were built: the arm64 one "failed".
    let o = run(&[
        "suite",
        "--out",
        out,
        "--qemu",
        &qemu,
        "--artifact",
        "x86_64:patched:/k/bzImage:/i/x.cpio",
        "--artifact",
        "x86_64:unpatched:/k/bzImage-u:/i/u.cpio",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stdout = common::stdout(&o);
    assert!(
        stdout.contains("SKIPPED arm64-smp2: not run: no arm64 patched guest was built"),
        "{stdout}"
    );
    assert!(stdout.contains("OK x86_64-smp2 [x86_64 smp=2]"), "{stdout}");
    let stdout = summary(Path::new(out), 1);
    let missing: Vec<&str> = stdout
        .lines()
        .skip_while(|l| *l != "Planned but never reported:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    let boot = "never reported (boot: its guest was not built, or the suite did not run it)";
    let kunit = "never reported (kunit.py cross-check: its boot did not report, or no kunit.py \
                 was given)";
    let host = "never reported (host check: its lane died, or `textpoke-runner record` of it \
                never ran or failed)";
    let mut want = vec![
        format!("  x86_64-smp2.kunit: {kunit}"),
        format!("  arm64-smp2: {boot}"),
        format!("  arm64-smp2.kunit: {kunit}"),
        format!("  arm64-smp4: {boot}"),
        format!("  x86_64-mitigations: {boot}"),
        format!("  harness-foreign-brk: {boot}"),
        format!("  harness-foreign-brk-swallowed: {boot}"),
    ];
    // No host check was recorded either.
    for c in [
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
        "etm-observed",
    ] {
        want.push(format!("  {c}: {host}"));
    }
    assert_eq!(missing, want, "{stdout}");
    // 17 tests in each of the 2 x86_64 guest boots (the self-test's and the 16 cases of the
    // groups); the harness boots came out as pass, not as the failures they must be (5
    // failed); the 3 arm64 boots and the x86_64 mitigations boot never ran, and neither did the
    // kunit.py cross-checks, since no kunit.py was given (6 failed); and the 12 host checks
    // never reported.
    assert_count(&stdout, "34 passed, 24 failed");
}

#[test]
fn suite_starts_boots_from_an_artifacts_file_until_done() {
    let s = Scratch::new("suite-from");
    let qemu = s.fake_qemu("qemu", SUITES_GUEST);
    let out = s.out();
    let out = out.to_str().unwrap();
    let o = run(&["plan", "test", "--arch", "x86_64", "--out", out]);
    assert!(o.status.success(), "{}", text(&o));
    // The build announced the patched guest, then gave up on the others.
    let file = s.out().join("artifacts.list");
    fs::write(&file, "x86_64:patched:/k/bzImage:/i/x.cpio\ndone\n").unwrap();
    let o = run(&[
        "suite",
        "--out",
        out,
        "--qemu",
        &qemu,
        "--artifacts-from",
        file.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stdout = common::stdout(&o);
    assert!(stdout.contains("OK x86_64-smp2 [x86_64 smp=2]"), "{stdout}");
    assert!(stdout.contains("OK x86_64-smp4 [x86_64 smp=4]"), "{stdout}");
    assert!(
        stdout
            .contains("SKIPPED x86_64-mitigations: not run: no x86_64 mitigations guest was built"),
        "{stdout}"
    );
    assert!(
        stdout.contains("SKIPPED harness-no-series: not run: no x86_64 unpatched guest was built"),
        "{stdout}"
    );
}

/// The manifest `plan` wrote into `out`.
fn manifest(out: &Path) -> Value {
    let json = fs::read_to_string(out.join("manifest.json")).unwrap();
    serde_json::from_str(&json).unwrap()
}

/// Writes `out/NAME.json` for a boot or kunit.py cross-check that came out as `expected`, as
/// `suite` would have: two passing tests for a boot expected to pass, one result otherwise.
fn fake_report(out: &Path, name: &str, expected: &Value) {
    let tests = if expected == "pass" && !name.ends_with(".kunit") {
        2
    } else {
        1
    };
    let report = serde_json::json!({
        "name": name,
        "arch": "x86_64",
        "smp": 2,
        "mem_mb": 1024,
        "verdict": expected,
        "expected": expected,
        "ok": true,
        "reason": format!("{expected} as expected"),
        "counts": {"passed": tests, "failed": 0, "skipped": 0},
        "log": out.join(format!("{name}.log")),
        "seconds": 1.0,
    });
    fs::write(out.join(format!("{name}.json")), report.to_string()).unwrap();
}

/// Plans `make test` on both arches into `out` and writes a report for each planned boot and
/// kunit.py cross-check, every one as expected: what a run leaves but for its host checks.
/// Returns the manifest.
fn plan_and_boot_everything(out: &Path) -> Value {
    let o = run(&[
        "plan",
        "test",
        "--arch",
        "x86_64",
        "--arch",
        "arm64",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let m = manifest(out);
    for boot in m["boots"].as_array().unwrap() {
        let name = boot["name"].as_str().unwrap();
        fake_report(out, name, &boot["expect"]);
        if boot["kunit_check"] == true {
            fake_report(out, &format!("{name}.kunit"), &Value::from("pass"));
        }
    }
    m
}

/// Records host check `name` as tools/test.sh does.
fn record(out: &Path, name: &str, status: i32) -> Output {
    run(&[
        "record",
        "--out",
        out.to_str().unwrap(),
        "--name",
        name,
        "--status",
        &status.to_string(),
        "--reason",
        "as tools/test.sh records it",
        "--log",
        out.join(format!("{name}.log")).to_str().unwrap(),
    ])
}

/// The host checks the manifest of `out` plans.
fn planned_checks(m: &Value) -> Vec<String> {
    m["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect()
}

/// Records every host check the manifest `m` of `out` plans but those in `lost`, each passing.
fn record_planned(out: &Path, m: &Value, lost: &[&str]) {
    for name in planned_checks(m) {
        if !lost.contains(&name.as_str()) {
            let o = record(out, &name, 0);
            assert!(o.status.success(), "{}", text(&o));
        }
    }
}

#[test]
fn a_killed_host_lane_fails_the_summary_by_name() {
    let s = Scratch::new("killed-lane");
    let out = s.out();
    let m = plan_and_boot_everything(&out);
    // The host lane got through the workspace's tests and loom, then died; the foreground
    // recorded checkpatch and lint.
    let lane_recorded = ["host-tests", "loom"];
    let lost = ["mutants", "fuzz-smoke", "clippy", "rustfmt"];
    record_planned(&out, &m, &lost);
    let stdout = summary(&out, 1);
    for name in lost {
        assert_never_reported(&stdout, name);
    }
    for name in lane_recorded {
        assert!(!stdout.contains(&format!("  {name}: never")), "{stdout}");
    }
    // 4 guest boots of 2 tests, 7 harness boots, 2 kunit.py cross-checks, 8 host checks.
    assert_count(&stdout, "27 passed, 4 failed");
}

#[test]
fn a_finished_run_without_loom_s_report_fails_by_name() {
    let s = Scratch::new("no-loom");
    let out = s.out();
    let m = plan_and_boot_everything(&out);
    record_planned(&out, &m, &[]);
    assert_count(&summary(&out, 0), "31 passed, 0 failed");

    fs::remove_file(out.join("loom.json")).unwrap();
    let stdout = summary(&out, 1);
    assert_never_reported(&stdout, "loom");
    assert_count(&stdout, "30 passed, 1 failed");
}

#[test]
fn a_failed_record_counts_its_check_as_failed() {
    let s = Scratch::new("record-fails");
    let out = s.out();
    let m = plan_and_boot_everything(&out);
    for name in planned_checks(&m) {
        // A misspelt name is no check of the plan: `record` refuses it, and the check it
        // meant never reports.
        let name = if name == "loom" { "lomo".into() } else { name };
        let o = record(&out, &name, 0);
        assert_eq!(o.status.success(), name != "lomo", "{}", text(&o));
    }
    // A check that failed is recorded, and fails.
    let o = record(&out, "clippy", 1);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let stdout = summary(&out, 1);
    assert_never_reported(&stdout, "loom");
    assert!(!stdout.contains("lomo"), "{stdout}");
    assert!(
        stdout.contains("\n  clippy: as tools/test.sh records it"),
        "{stdout}"
    );
    assert_count(&stdout, "29 passed, 2 failed");
}

#[test]
fn a_directory_without_a_plan_fails() {
    let s = Scratch::new("no-plan");
    let o = run(&["summary", s.0.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("has no manifest.json"), "{stderr}");
    assert!(o.stdout.is_empty(), "{}", text(&o));
    let o = run(&["summary", s.0.join("nonexistent").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn bench_report_adds_the_foreign_traps_section() {
    let s = Scratch::new("bench-foreign-traps");
    let mut log = String::from(
        "[    9.0] textpoke-bench: {\"arch\":\"x86_64\",\"cpus\":4,\"mode\":\"textpoke\",\
         \"n\":16,\"round\":0,\"ns\":10,\"syncs\":0,\"records\":16,\"call_ipis\":4,\"stall_ns\":1}\n",
    );
    for round in 0..4u64 {
        for (mode, per_hit) in [("textpoke_loaded", 12_000), ("no_textpoke", 10_000)] {
            log.push_str(&format!(
                "[   60.{round}] textpoke-trapcost: {{\"arch\":\"x86_64\",\"cpus\":4,\
                 \"round\":{round},\"rounds\":4,\"mode\":\"{mode}\",\"n\":100,\
                 \"probed_ns\":{},\"unprobed_ns\":400,\"hits\":100,\"post_hits\":100}}\n",
                100 * (per_hit + round) + 400
            ));
        }
    }
    fs::write(s.0.join("x86_64-bench.log"), log).unwrap();
    let o = run(&["bench-report", s.0.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = common::stdout(&o);
    assert!(
        stdout.contains("### Foreign traps: a kprobe hit with textpoke loaded and without"),
        "{}",
        text(&o)
    );
    // 12001.5 / 10001.5 per hit: well above the goal, and the interval says so.
    assert!(
        stdout.contains("| 1.20 (1.20–1.20) | ≤ 1.05 | not met |"),
        "{}",
        text(&o)
    );
    let json: Value =
        serde_json::from_str(&fs::read_to_string(s.0.join("bench/bench-x86_64.json")).unwrap())
            .unwrap();
    assert_eq!(json["foreign_traps"]["ratio"]["verdict"], "not_met");
    assert_eq!(
        json["foreign_traps"]["samples"].as_array().unwrap().len(),
        8
    );
}
