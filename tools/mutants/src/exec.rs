//! Building the test binaries of the copy and running one test with a time limit.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A kind of killing test: one test target of `textpoke-core`, built with its own flags. The
/// kinds built with the same flags share a target directory (so dependencies compile once per
/// set of flags).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Kind {
    /// `tests/pending_loom.rs` under `--cfg loom`.
    Loom,
    /// `tests/pending.rs`: unit tests and the multi-threaded stress test.
    Stress,
    /// `tests/x86_insn.rs`: the x86-64 codec, emulation and listing policy.
    X86Insn,
    /// `tests/arm64_insn.rs`: the arm64 codec, emulation and acceptance.
    Arm64Insn,
    /// `tests/plan.rs`: the step planner's exact plans and its recovery.
    Plan,
    /// `tests/model.rs`: the SMP instruction-cache model run against the planner.
    Model,
    /// `tests/record.rs`: the `PERF_RECORD_TEXT_POKE` writer, against golden records.
    Record,
    /// `tests/listener_model.rs`: the listener handshake's model, run with the engine's rule of
    /// when a commit lets go of `text_mutex`.
    ListenerModel,
    /// The guest agent's own unit tests (`textpoke-agent`'s binary): the harness's judgements
    /// that a host test can pin down.
    Agent,
}

impl Kind {
    /// Every kind, in the order they run.
    pub const ALL: [Kind; 9] = [
        Kind::Loom,
        Kind::Stress,
        Kind::X86Insn,
        Kind::Arm64Insn,
        Kind::Plan,
        Kind::Model,
        Kind::Record,
        Kind::ListenerModel,
        Kind::Agent,
    ];

    /// The prefix of this kind's test names (`loom:...`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Loom => "loom",
            Kind::Stress => "stress",
            Kind::X86Insn => "x86_insn",
            Kind::Arm64Insn => "arm64_insn",
            Kind::Plan => "plan",
            Kind::Model => "model",
            Kind::Record => "record",
            Kind::ListenerModel => "listener_model",
            Kind::Agent => "agent",
        }
    }

    /// The kind named `name`.
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The test target that holds this kind's tests: a test of `textpoke-core`, or the agent's
    /// binary.
    fn test_target(self) -> &'static str {
        match self {
            Kind::Loom => "pending_loom",
            Kind::Stress => "pending",
            Kind::X86Insn => "x86_insn",
            Kind::Arm64Insn => "arm64_insn",
            Kind::Plan => "plan",
            Kind::Model => "model",
            Kind::Record => "record",
            Kind::ListenerModel => "listener_model",
            Kind::Agent => "textpoke-agent",
        }
    }

    /// cargo's arguments that select this kind's test target.
    fn cargo_target(self) -> [&'static str; 4] {
        match self {
            Kind::Agent => ["-p", "textpoke-agent", "--bin", self.test_target()],
            _ => ["-p", "textpoke-core", "--test", self.test_target()],
        }
    }

    /// Whether this kind builds under `--cfg loom`.
    fn loom(self) -> bool {
        matches!(self, Kind::Loom)
    }
}

/// Builds the test binaries of the copy in `work`.
pub struct Builder {
    /// The copy of the workspace.
    pub work: PathBuf,
    /// Holds one target directory per kind.
    pub target_base: PathBuf,
    /// Passes `--offline` to cargo.
    pub offline: bool,
}

/// A built test binary.
pub struct Built {
    /// Path of the test executable.
    pub exe: PathBuf,
    /// Whether cargo found it up to date (nothing was compiled).
    pub fresh: bool,
}

impl Builder {
    /// The target directory of `kind`: `loom` under `--cfg loom`, `host` without (shared by
    /// every kind built without it).
    pub fn target_dir(&self, kind: Kind) -> PathBuf {
        self.target_base
            .join(if kind.loom() { "loom" } else { "host" })
    }

    /// Builds `kind`'s test binary; cargo's diagnostics go to `log`.
    pub fn build(&self, kind: Kind, log: &Path) -> Result<Built, String> {
        let stderr = File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
        let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cmd.current_dir(&self.work)
            .args(["test", "--release", "--locked"])
            .args(kind.cargo_target())
            .arg("--no-run")
            .arg("--message-format=json-render-diagnostics")
            .env("CARGO_TARGET_DIR", self.target_dir(kind))
            // Each mutant changes one file: incremental compilation rebuilds its crate in seconds.
            .env("CARGO_PROFILE_RELEASE_INCREMENTAL", "true")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_BUILD_RUSTFLAGS")
            .stdout(Stdio::piped())
            .stderr(stderr);
        if self.offline {
            cmd.arg("--offline");
        }
        if kind.loom() {
            cmd.env("RUSTFLAGS", "--cfg loom");
        } else {
            cmd.env_remove("RUSTFLAGS");
        }
        let mut child = cmd.spawn().map_err(|e| format!("run cargo: {e}"))?;
        let mut json = String::new();
        if let Some(mut out) = child.stdout.take() {
            out.read_to_string(&mut json)
                .map_err(|e| format!("read cargo's output: {e}"))?;
        }
        let status = child.wait().map_err(|e| format!("wait for cargo: {e}"))?;
        if !status.success() {
            return Err(format!(
                "cargo failed ({status}); see {}:\n{}",
                log.display(),
                tail(log, 25)
            ));
        }
        artifact(&json, kind.test_target())
            .ok_or_else(|| format!("cargo built no test `{}`", kind.test_target()))
    }
}

/// The value of the JSON string field `key` in `line` (cargo's messages; no escapes expected
/// in the values read here).
fn json_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!("\"{key}\":"))?;
    let rest = line.get(start.saturating_add(key.len()).saturating_add(3)..)?;
    let rest = rest.trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        return s.split('"').next();
    }
    rest.split([',', '}']).next()
}

/// The test executable named `target` in cargo's JSON messages.
fn artifact(json: &str, target: &str) -> Option<Built> {
    json.lines()
        .filter(|l| json_field(l, "reason") == Some("compiler-artifact"))
        .filter(|l| l.contains(&format!("\"name\":\"{target}\"")))
        .find_map(|l| {
            let exe = json_field(l, "executable")?;
            Some(Built {
                exe: PathBuf::from(exe),
                fresh: json_field(l, "fresh") == Some("true"),
            })
        })
}

/// The names of the tests in a libtest binary.
pub fn list_tests(exe: &Path) -> Result<Vec<String>, String> {
    let out = Command::new(exe)
        .args(["--list", "--format", "terse"])
        .output()
        .map_err(|e| format!("run {}: {e}", exe.display()))?;
    if !out.status.success() {
        return Err(format!("{} --list failed", exe.display()));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_owned)
        .collect())
}

/// How one run of one test ended.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// It passed.
    Pass,
    /// It failed; the panic message, if any.
    Fail(String),
    /// It did not finish: it ran past its time limit, or loom found a livelock or deadlock.
    Hang(String),
}

/// Runs test `name` of `exe` alone, killing it after `limit`; its output goes to `log`.
pub fn run_test(exe: &Path, name: &str, limit: Duration, log: &Path) -> Result<Outcome, String> {
    let out = File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("dup {}: {e}", log.display()))?;
    let mut child = Command::new(exe)
        .args(["--exact", name, "--nocapture", "--test-threads", "1"])
        .env("RUST_BACKTRACE", "0")
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("run {}: {e}", exe.display()))?;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("wait: {e}"))? {
            break status;
        }
        if start.elapsed() > limit {
            // The test binary is our child, not cargo's: killing it ends the test.
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Outcome::Hang(format!(
                "timed out after {} s",
                limit.as_secs()
            )));
        }
        thread::sleep(Duration::from_millis(20));
    };
    let text = fs::read_to_string(log).unwrap_or_default();
    if status.success() {
        if !text.contains("test result: ok. 1 passed") {
            return Err(format!("test {name} did not run; see {}", log.display()));
        }
        return Ok(Outcome::Pass);
    }
    let message = panic_message(&text).unwrap_or_else(|| format!("exited with {status}"));
    let lower = message.to_lowercase();
    if lower.contains("deadlock") || lower.contains("exceeded maximum number of branches") {
        return Ok(Outcome::Hang(message));
    }
    Ok(Outcome::Fail(message))
}

/// The first line of the first panic message in a test's output.
pub fn panic_message(output: &str) -> Option<String> {
    let mut lines = output.lines();
    while let Some(line) = lines.next() {
        if let Some((_, after)) = line.split_once("panicked at ") {
            // `thread 'x' panicked at file:line:col:` then the message on the next line; older
            // toolchains put `'message', file:line:col` on the same line.
            if after.ends_with(':') {
                return lines.next().map(|m| m.trim().to_owned());
            }
            return Some(after.trim().to_owned());
        }
    }
    None
}

/// The last `n` lines of the file `path`.
pub fn tail(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines
        .get(lines.len().saturating_sub(n)..)
        .unwrap_or_default()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_test_executable() {
        let json = concat!(
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tools/core#textpoke-core@0.1.0","target":{"kind":["lib"],"name":"textpoke_core"},"executable":null,"fresh":true}"#,
            "\n",
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/tools/core#textpoke-core@0.1.0","target":{"kind":["test"],"crate_types":["bin"],"name":"pending_loom","src_path":"/w/tools/core/tests/pending_loom.rs"},"profile":{},"executable":"/t/release/deps/pending_loom-0123","fresh":false}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
        );
        let built = artifact(json, "pending_loom").unwrap();
        assert_eq!(
            built.exe,
            PathBuf::from("/t/release/deps/pending_loom-0123")
        );
        assert!(!built.fresh);
        assert!(artifact(json, "pending").is_none());
    }

    #[test]
    fn reads_panic_messages() {
        let new = "running 1 test\nthread 'a' (12) panicked at tools/core/tests/x.rs:66:21:\nassertion `left == right` failed: read poisoned\n  left: 1\n";
        assert_eq!(
            panic_message(new).as_deref(),
            Some("assertion `left == right` failed: read poisoned")
        );
        let old = "thread 'a' panicked at 'boom', src/x.rs:1:2\n";
        assert_eq!(panic_message(old).as_deref(), Some("'boom', src/x.rs:1:2"));
        assert_eq!(panic_message("test a ... ok\n"), None);
    }
}
