//! `--guest` (`make mutants-guest`): each mutant of a kernel-only file ([`mutants::KERNEL_ONLY`])
//! built into the guest and booted, to see whether the check of `make test` it names fails.
//!
//! No host test can build those files, so `make test` only lists their mutants, each with the
//! guest check that it says catches it ([`Mutant::guest`]). This mode shows it: in a scratch copy
//! of the tree (`DIR/guest/work`, refreshed from the repository file by file so that unchanged
//! files keep their times and the builds stay incremental), for each such mutant it writes the
//! mutated file, builds the guest with `tools/guests.sh` (the kernel is shared, the modules and
//! the agent rebuild), boots the named groups with `textpoke-runner boot` and reads the boot's
//! report: the mutant is killed if the boot failed on the named case (or, where the named check
//! is a splat, on a splat). A boot that failed otherwise is reported as killed by something
//! else, which fails the run as a survivor does: the table must name the check that catches it.
//! Then the file is restored. Mutants with no guest check say why in their `allowed` reason and
//! are listed, not booted.
//!
//! Not part of `make test`: each mutant costs a module build and a boot (minutes under TCG).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use crate::mutants::{self, Fails, GuestKiller, Mutant};

/// What a boot of a mutant showed.
#[derive(Debug, PartialEq)]
pub enum Fate {
    /// The boot failed on the check the table names.
    Killed(String),
    /// The boot failed, but not on that check: what it failed on.
    KilledOtherwise(String),
    /// The boot passed.
    Survived,
}

/// The fields of the runner's boot report (`NAME.json`) this mode reads.
#[derive(serde::Deserialize)]
struct BootReport {
    ok: bool,
    reason: String,
    failing_tests: Vec<String>,
    splat: Option<serde_json::Value>,
}

/// The fate of a boot that reported `report`, for a mutant whose check is `fails`.
fn judge(fails: Fails, report: &BootReport) -> Fate {
    if report.ok {
        return Fate::Survived;
    }
    let named = match fails {
        Fails::Case(case) => report
            .failing_tests
            .iter()
            .find(|t| t.rsplit('/').next() == Some(case))
            .cloned(),
        Fails::Splat => report.splat.as_ref().map(|s| format!("a splat: {s}")),
    };
    match named {
        Some(by) => Fate::Killed(by),
        None => Fate::KilledOtherwise(report.reason.clone()),
    }
}

/// The repository's files (tracked, and untracked but not ignored), relative to `root`.
fn tree_files(root: &Path) -> Result<Vec<PathBuf>, String> {
    let out = Command::new("git")
        .current_dir(root)
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .output()
        .map_err(|e| format!("git ls-files: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git ls-files in {}: {}",
            root.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
        .collect())
}

/// Makes `work` hold the tree's files as they are under `root`, writing only those that differ
/// (so that make and cargo find the rest up to date); returns how many it wrote.
fn refresh(root: &Path, work: &Path) -> Result<usize, String> {
    let mut written = 0;
    for rel in tree_files(root)? {
        let from = root.join(&rel);
        let to = work.join(&rel);
        let Ok(bytes) = fs::read(&from) else {
            // A file deleted in the working tree but still tracked.
            continue;
        };
        if fs::read(&to).ok().as_deref() == Some(bytes.as_slice()) {
            continue;
        }
        if let Some(dir) = to.parent() {
            fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        fs::write(&to, &bytes).map_err(|e| format!("{}: {e}", to.display()))?;
        let mode = fs::metadata(&from)
            .map_err(|e| format!("{}: {e}", from.display()))?
            .permissions();
        fs::set_permissions(&to, mode).map_err(|e| format!("{}: {e}", to.display()))?;
        written += 1;
    }
    Ok(written)
}

/// Builds the guest of `arch` in `work`: the kernel image and the initramfs.
fn build_guest(work: &Path, arch: &str, log: &Path) -> Result<(String, String), String> {
    let stderr = fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let out = Command::new(work.join("tools/guests.sh"))
        .current_dir(work)
        .arg(arch)
        .stderr(stderr)
        .output()
        .map_err(|e| format!("tools/guests.sh: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "tools/guests.sh {arch} failed: see {}",
            log.display()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines().rev();
    match (lines.next(), lines.next()) {
        (Some(initrd), Some(kernel)) => Ok((kernel.to_owned(), initrd.to_owned())),
        _ => Err(format!(
            "tools/guests.sh {arch} printed no kernel and initramfs"
        )),
    }
}

/// Boots `killer`'s groups on the guest, as `name`, and reads the runner's report.
fn boot(
    runner: &Path,
    name: &str,
    killer: &GuestKiller,
    (kernel, initrd): &(String, String),
    logs: &Path,
) -> Result<BootReport, String> {
    let status = Command::new(runner)
        .args(["boot", "--name", name, "--arch", killer.arch])
        .args(["--kernel", kernel, "--initrd", initrd])
        .arg("--out")
        .arg(logs)
        .args(["--smp", &killer.smp.to_string()])
        .args([
            "--append",
            &format!("textpoke.mode=test textpoke.groups={}", killer.groups),
        ])
        .args([
            "--require",
            "textpoke_selftest",
            "--require",
            "textpoke_agent",
        ])
        .arg("-q")
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("{}: {e}", runner.display()))?;
    let path = logs.join(format!("{name}.json"));
    let text = fs::read_to_string(&path)
        .map_err(|e| format!("{}: {e} (the runner exited with {status})", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Runs the mode over the kernel-only mutants of `selected`; see the module documentation.
pub fn run(
    root: &Path,
    base: &Path,
    runner: &Path,
    selected: &[&Mutant],
) -> Result<ExitCode, String> {
    let work = base.join("guest/work");
    let logs = base.join("guest/logs");
    fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let runner = runner
        .canonicalize()
        .map_err(|e| format!("{}: {e}", runner.display()))?;
    let written = refresh(root, &work)?;
    println!(
        "textpoke-mutants --guest: the tree copied to {} ({written} files written); logs in {}",
        work.display(),
        logs.display()
    );
    let mut rows = Vec::new();
    let mut bad = 0;
    for m in selected.iter().filter(|m| mutants::kernel_only(m.file)) {
        let Some(killer) = &m.guest else {
            println!(
                "{:<30} no guest check: {}",
                m.name,
                m.allowed.unwrap_or("(no reason given)")
            );
            rows.push((m.name, "-".to_owned(), "not booted".to_owned(), 0.0));
            continue;
        };
        let file = work.join(m.file);
        let original = fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        fs::write(&file, mutants::apply(m, &original)?)
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let start = Instant::now();
        let name = format!("mutant-{}", m.name);
        let outcome = build_guest(&work, killer.arch, &logs.join(format!("{name}.build.log")))
            .and_then(|guest| boot(&runner, &name, killer, &guest, &logs));
        fs::write(&file, &original).map_err(|e| format!("{}: {e}", file.display()))?;
        let secs = start.elapsed().as_secs_f64();
        let boot_name = format!("{}-smp{} {}", killer.arch, killer.smp, killer.groups);
        let fate = match outcome {
            Ok(report) => judge(killer.fails, &report),
            Err(e) => {
                bad += 1;
                println!("{:<30} error: {e}", m.name);
                rows.push((m.name, boot_name, format!("error: {e}"), secs));
                continue;
            }
        };
        let line = match &fate {
            Fate::Killed(by) => format!("killed by {by}"),
            Fate::KilledOtherwise(why) => {
                bad += 1;
                format!("failed, but not on {:?}: {why}", killer.fails)
            }
            Fate::Survived => {
                bad += 1;
                "SURVIVED".to_owned()
            }
        };
        println!("{:<30} {boot_name}: {line} ({secs:.0} s)", m.name);
        rows.push((m.name, boot_name, line, secs));
    }
    println!("\n| mutant | boot | fate | seconds |\n|---|---|---|---|");
    for (name, boot, fate, secs) in &rows {
        println!("| `{name}` | {boot} | {fate} | {secs:.0} |");
    }
    let booted = rows.iter().filter(|r| r.1 != "-").count();
    println!(
        "{} kernel-only mutants: {booted} booted, {} killed by their named check, {bad} not",
        rows.len(),
        booted - bad
    );
    Ok(if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(ok: bool, failing: &[&str], splat: bool) -> BootReport {
        BootReport {
            ok,
            reason: "why".into(),
            failing_tests: failing.iter().map(|s| s.to_string()).collect(),
            splat: splat.then(|| serde_json::json!("Oops")),
        }
    }

    #[test]
    fn a_mutant_is_killed_only_by_the_check_it_names() {
        let case = Fails::Case("two_listeners_mid_storm");
        let by = "textpoke_agent/listener/two_listeners_mid_storm";
        assert_eq!(
            judge(case, &report(false, &[by], false)),
            Fate::Killed(by.into())
        );
        assert_eq!(judge(case, &report(true, &[], false)), Fate::Survived);
        assert_eq!(
            judge(case, &report(false, &["textpoke_agent/listener/x"], false)),
            Fate::KilledOtherwise("why".into())
        );
        // A case whose name only ends like the named one is another case.
        assert_eq!(
            judge(
                case,
                &report(false, &["a/b/not_two_listeners_mid_storm"], false)
            ),
            Fate::KilledOtherwise("why".into())
        );
        assert!(matches!(
            judge(Fails::Splat, &report(false, &[], true)),
            Fate::Killed(_)
        ));
        assert_eq!(
            judge(Fails::Splat, &report(false, &[by], false)),
            Fate::KilledOtherwise("why".into())
        );
    }
}
