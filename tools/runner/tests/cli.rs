//! End-to-end tests of the binary: `boot` against stand-in emulators (shell scripts passed with
//! `--qemu` that print what a guest would), then `summary` and `parse` over what it wrote.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_textpoke-runner");

/// A scratch directory, removed when the test passes.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "textpoke-runner-test-{}-{test}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

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

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
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

fn log_of(s: &Scratch, name: &str) -> String {
    fs::read_to_string(s.out().join(format!("{name}.log"))).unwrap()
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
    let stdout = String::from_utf8_lossy(&o.stdout);
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

    let o = run(&["summary", s.out().to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        stdout.lines().last(),
        Some("3 passed, 0 failed"),
        "{stdout}"
    );
    assert!(stdout.contains("\n0 skipped\n"), "{stdout}");

    let log_path = s.out().join("x86-pass.log");
    let o = run(&[
        "parse",
        log_path.to_str().unwrap(),
        "--require-doc",
        "textpoke_selftest",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
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
    let o = run(&["summary", s.out().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        stdout.lines().last(),
        Some("5 passed, 3 failed"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Failing KTAP tests:\n  fails: agent/b\n"),
        "{stdout}"
    );
    assert!(stdout.contains("fails.log"), "{stdout}");
    assert!(stdout.contains("no-qemu.log"), "{stdout}");
}

#[test]
fn timeout_kills_the_emulator() {
    let s = Scratch::new("timeout");
    let hang = s.fake_qemu(
        "hang",
        "printf 'KTAP version 1\\n1..3\\nok 1 a\\n'; exec sleep 600",
    );
    let start = Instant::now();
    let (o, r) = boot(
        &s,
        "hang",
        &hang,
        &["--timeout", "2", "--expect", "timeout"],
    );
    assert!(start.elapsed().as_secs() < 20);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(r["verdict"], "timeout");
    assert_eq!(
        r["reason"],
        "timeout as expected: timeout: qemu killed after 2 s"
    );
    assert_eq!(r["qemu_status"], Value::Null);
    let secs = r["seconds"].as_f64().unwrap();
    assert!((2.0..10.0).contains(&secs), "{secs}");
    let log = log_of(&s, "hang");
    assert!(log.contains("\nok 1 a\n"), "{log}");
    assert!(
        log.ends_with("[textpoke-runner] timeout: killed qemu after 2 s\n"),
        "{log}"
    );

    // `parse` reads the outcome back from the log.
    let path = s.out().join("hang.log");
    let o = run(&["parse", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("verdict timeout"),
        "{}",
        text(&o)
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
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("planned 2 results but only 1"), "{stdout}");
    assert!(
        stdout.contains("FAILED: verdict not-ok, expected pass"),
        "{stdout}"
    );
    let o = run(&["parse", path.to_str().unwrap(), "--expect", "not-ok"]);
    assert!(o.status.success(), "{}", text(&o));
}

/// A guest whose single KTAP document holds the two suites every test boot must show.
const SUITES_GUEST: &str = r#"
printf '[    1.000000] KTAP version 1\r\n[    1.000001] 1..2\r\n'
printf '[    1.000002]     KTAP version 1\r\n[    1.000003]     # Subtest: textpoke_selftest\r\n'
printf '[    1.000004]     1..1\r\n[    1.000005]     ok 1 a\r\n[    1.000006] ok 1 textpoke_selftest\r\n'
printf '[    1.000007]     KTAP version 1\r\n[    1.000008]     # Subtest: textpoke_agent\r\n'
printf '[    1.000009]     1..1\r\n[    1.000010]     ok 1 b\r\n[    1.000011] ok 2 textpoke_agent\r\n'
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
        String::from_utf8_lossy(&o.stdout),
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
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("SKIPPED arm64-smp2: not run: no arm64 patched guest was built"),
        "{stdout}"
    );
    assert!(stdout.contains("OK x86_64-smp2 [x86_64 smp=2]"), "{stdout}");
    let o = run(&["summary", out]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains(
            "Planned but never run (no report):\n  x86_64-smp2.kunit\n  arm64-smp2\n  \
             arm64-smp2.kunit\n  arm64-smp4\n  x86_64-mitigations\n  harness-foreign-brk\n  \
             harness-foreign-brk-swallowed\n"
        ),
        "{stdout}"
    );
    // 2 tests in each of the 2 x86_64 guest boots; the harness boots came out as pass, not as
    // the failures they must be (4 failed); the 4 arm64 boots and the x86_64 mitigations boot
    // never ran, and neither did the kunit.py cross-checks, since no kunit.py was given (7
    // failed).
    assert_eq!(
        stdout.lines().last(),
        Some("4 passed, 11 failed"),
        "{stdout}"
    );
}
