//! The layout of a run directory: the one place that names its files.
//!
//! `plan` writes `DIR/manifest.json`; each boot streams its console to `DIR/NAME.log` and
//! writes its report to `DIR/NAME.json`; a boot's kunit.py cross-check is reported as the check
//! `NAME.kunit` (`DIR/NAME.kunit.log`, `DIR/NAME.kunit.json`); a host check writes
//! `DIR/CHECK.json` (its log is wherever tools/test.sh put it, usually `DIR/CHECK.log`); the
//! bench report goes to `DIR/bench/bench-ARCH.{md,json,svg}`, out of the way of the reports;
//! the scripts' timed stages go to `DIR/stages.jsonl`, one JSON object a line.
//! Every other `*.json` of DIR is a report, and every `*.log` a console log.

use std::path::{Path, PathBuf};

/// The manifest's file name in a run directory.
pub const MANIFEST: &str = "manifest.json";

/// The file of a run directory that the scripts' timed stages are appended to
/// (`textpoke-runner stage`): JSON lines, so not a report.
pub const STAGES: &str = "stages.jsonl";

/// Suffix of the name of a boot's kunit.py cross-check.
pub const KUNIT_SUFFIX: &str = "kunit";

/// The subdirectory the bench report goes to.
pub const BENCH: &str = "bench";

const REPORT_EXT: &str = "json";
const LOG_EXT: &str = "log";

/// `DIR/manifest.json`.
pub fn manifest(dir: &Path) -> PathBuf {
    dir.join(MANIFEST)
}

/// `DIR/stages.jsonl`.
pub fn stages(dir: &Path) -> PathBuf {
    dir.join(STAGES)
}

/// `DIR/NAME.json`: the report of a boot or check.
pub fn report(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.{REPORT_EXT}"))
}

/// `DIR/NAME.log`: the console log of a boot, or the output of a check.
pub fn log(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.{LOG_EXT}"))
}

/// The name of the boot or check whose report is `path` (`DIR/NAME.json`).
pub fn report_name(path: &Path) -> Option<&str> {
    path.file_stem()?.to_str()
}

/// The report next to a log: `DIR/NAME.json` for `DIR/NAME.log`.
pub fn report_of_log(log: &Path) -> PathBuf {
    log.with_extension(REPORT_EXT)
}

/// The name of the kunit.py cross-check of boot `boot`.
pub fn kunit_name(boot: &str) -> String {
    format!("{boot}.{KUNIT_SUFFIX}")
}

/// `DIR/bench`: where the bench report of a run directory goes, a directory of its own so that
/// the run directory's `*.json` stay reports.
pub fn bench_dir(dir: &Path) -> PathBuf {
    dir.join(BENCH)
}

/// `bench-ARCH.EXT` in the bench report's directory `to`.
pub fn bench_file(to: &Path, arch: &str, ext: &str) -> PathBuf {
    to.join(format!("bench-{arch}.{ext}"))
}

/// Whether `path` is a bench report's JSON (`bench-ARCH.json`).
pub fn is_bench_json(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == REPORT_EXT)
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("bench-"))
}

/// Whether `path` is a report: a `*.json` other than the manifest.
pub fn is_report(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == REPORT_EXT)
        && path.file_name().is_some_and(|n| n != MANIFEST)
}

/// Whether `path` is a console log (or a check's output): a `*.log`.
pub fn is_log(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == LOG_EXT)
}

/// The files of `dir` that `keep` keeps, sorted by name.
pub fn files(dir: &Path, keep: fn(&Path) -> bool) -> std::io::Result<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    paths.retain(|p| keep(p));
    paths.sort();
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths() {
        let dir = Path::new("/runs/1");
        assert_eq!(manifest(dir), Path::new("/runs/1/manifest.json"));
        assert_eq!(
            report(dir, "x86_64-smp2"),
            Path::new("/runs/1/x86_64-smp2.json")
        );
        assert_eq!(log(dir, "loom"), Path::new("/runs/1/loom.log"));
        let kunit = kunit_name("arm64-smp2");
        assert_eq!(kunit, "arm64-smp2.kunit");
        assert_eq!(
            report(dir, &kunit),
            Path::new("/runs/1/arm64-smp2.kunit.json")
        );
        assert_eq!(report_name(&report(dir, &kunit)), Some(kunit.as_str()));
        assert_eq!(
            report_of_log(&log(dir, &kunit)),
            Path::new("/runs/1/arm64-smp2.kunit.json")
        );
        assert_eq!(
            bench_file(&bench_dir(dir), "arm64", "svg"),
            Path::new("/runs/1/bench/bench-arm64.svg")
        );
        assert!(is_report(&report(dir, "a")) && !is_report(&manifest(dir)));
        assert!(!is_report(&log(dir, "a")) && is_log(&log(dir, "a")));
        assert!(is_bench_json(&bench_file(dir, "x86_64", "json")));
        assert!(!is_bench_json(&bench_file(dir, "x86_64", "md")));
        assert!(!is_bench_json(&report(dir, "x86_64-smp2")));
    }
}
