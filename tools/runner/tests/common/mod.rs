//! What the end-to-end tests of the binary share: a scratch directory for each test, and the
//! binary's runs, with all of their output at hand for a failed assertion.

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_textpoke-runner");

/// A scratch directory, removed when the test passes: a failed test leaves it to look at.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// An empty directory for `test`, named after the test file too, so that no two tests of
    /// the crate share one.
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "textpoke-runner-{}-{}-{test}",
            env!("CARGO_CRATE_NAME"),
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

/// Runs the binary with `args` to its end.
pub fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// All that a run left, for the message of a failed assertion.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// What a run printed.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
