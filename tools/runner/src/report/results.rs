//! A finished run's results as a short Markdown block (`textpoke-runner report`), for the
//! README and docs/results.md: a row per planned boot and per check, the run's `N passed, M
//! failed` (the same count as `summary`), its wall time where the files tell it, and, given the
//! bench report of a `make bench` run, the ratios its sections stand on.
//!
//! A document takes the block between two HTML comments, [`BEGIN`] and [`END`], which Markdown
//! does not show; [`replace_block`] replaces what is between them and nothing else, so the text
//! around the block stays the authors'.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::bench::report::ArchReport;
use crate::bench::section::ratio_ci_text;
use crate::judge::verdict::Verdict;
use crate::plan::manifest::{Manifest, Source};
use crate::report::summary::tally_run;
use crate::rundir::boot_report::{self, BootReport, Entry};
use crate::rundir::layout as rundir;

/// The marker before the block in a document.
pub const BEGIN: &str = "<!-- textpoke-runner report: begin -->";
/// The marker after the block in a document.
pub const END: &str = "<!-- textpoke-runner report: end -->";

/// Everything the block is made of.
#[derive(Clone, Debug)]
pub struct RunResults {
    /// The run directory's name, which tools/test.sh makes its start time.
    pub name: String,
    /// The plan.
    pub manifest: Manifest,
    /// The reports found.
    pub entries: Vec<Entry>,
    /// From the manifest's writing (the plan, before anything is built) to the last report's,
    /// if the file times tell it.
    pub wall: Option<Duration>,
    /// The bench report, if there is one.
    pub bench: Option<Bench>,
}

/// A bench report, as `bench-report` wrote it.
#[derive(Clone, Debug)]
pub struct Bench {
    /// Where it was read, for people: the directory as given, or `bench/` of the run.
    pub from: String,
    /// Per arch, x86_64 first.
    pub reports: Vec<ArchReport>,
}

/// The bench reports (`bench-ARCH.json`) in `dir`, none if there is no such directory.
fn bench_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    rundir::files(dir, rundir::is_bench_json)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))
}

fn read_bench(files: &[PathBuf]) -> Result<Vec<ArchReport>, String> {
    let mut reports = files
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p)
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
        })
        .collect::<Result<Vec<ArchReport>, String>>()?;
    reports.sort_by_key(|r| r.arch != "x86_64");
    Ok(reports)
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).ok()?.modified().ok()
}

/// Reads the run directory `dir`, and the bench report in `bench` (a directory holding
/// `bench-ARCH.json`, or whose `bench/` does), or else in `dir/bench` if there is one there.
pub fn read(dir: &Path, bench: Option<&Path>) -> Result<RunResults, String> {
    let manifest = Manifest::read(dir)?.ok_or_else(|| {
        format!(
            "{} has no {}: it is no run directory, or its run was never planned",
            dir.display(),
            rundir::MANIFEST
        )
    })?;
    let entries =
        boot_report::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let last_report = entries.iter().filter_map(|e| modified(&e.path)).max();
    let wall = modified(&rundir::manifest(dir))
        .zip(last_report)
        .and_then(|(start, end)| end.duration_since(start).ok());
    let (from, files) = match bench {
        Some(b) => {
            // A run directory of `make bench` keeps them in its bench/, and tools/bench.sh
            // copies them to a directory of their own.
            let mut files = bench_files(b)?;
            if files.is_empty() {
                files = bench_files(&rundir::bench_dir(b))?;
            }
            if files.is_empty() {
                return Err(format!(
                    "{} has no bench-ARCH.json, nor has {} (`textpoke-runner bench-report` \
                     writes them)",
                    b.display(),
                    rundir::bench_dir(b).display()
                ));
            }
            (b.display().to_string(), files)
        }
        None => (
            format!("{}/ of the run", rundir::BENCH),
            bench_files(&rundir::bench_dir(dir))?,
        ),
    };
    let bench = if files.is_empty() {
        None
    } else {
        Some(Bench {
            from,
            reports: read_bench(&files)?,
        })
    };
    Ok(RunResults {
        name: dir
            .canonicalize()
            .unwrap_or_else(|_| dir.to_path_buf())
            .file_name()
            .map_or_else(
                || dir.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
        manifest,
        entries,
        wall,
        bench,
    })
}

/// A duration for people: `45 s`, `36 min 23 s`, `1 h 02 min`.
pub fn duration_text(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, s) => format!("{s} s"),
        (0, m, s) => format!("{m} min {s} s"),
        (h, m, _) => format!("{h} h {m:02} min"),
    }
}

/// Text for a Markdown table cell: one line, no column breaks.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// What came of a report, for its row.
fn result_text(r: &BootReport) -> String {
    match (r.ok, r.expected == Verdict::Pass) {
        (true, true) => "ok".to_owned(),
        (true, false) => format!("ok ({} as expected)", r.verdict),
        (false, true) => format!("FAILED ({})", r.verdict),
        (false, false) => format!("FAILED ({}, expected {})", r.verdict, r.expected),
    }
}

/// The block: the results of the run, and its bench's ratios if there are any.
pub fn markdown(run: &RunResults) -> String {
    let mut out = String::new();
    let suite = clap::ValueEnum::to_possible_value(&run.manifest.suite)
        .map_or_else(|| "?".to_owned(), |v| v.get_name().to_owned());
    let arches: Vec<String> = run.manifest.arches.iter().map(|a| a.to_string()).collect();
    let _ = writeln!(
        out,
        "Results of `make {suite}`, run `{}` ({}):\n",
        cell(&run.name),
        arches.join(", ")
    );
    let find = |name: &str| {
        run.entries
            .iter()
            .find(|e| rundir::report_name(&e.path) == Some(name))
    };
    let planned = run.manifest.expected_reports();

    let _ = writeln!(
        out,
        "| boot | arch | smp | result | passed | failed | skipped | seconds |"
    );
    let _ = writeln!(out, "|---|---|---:|---|---:|---:|---:|---:|");
    for b in &run.manifest.boots {
        let row = match find(&b.name).map(|e| &e.report) {
            Some(Ok(r)) => format!(
                "{} | {} | {} | {} | {:.1}",
                result_text(r),
                r.counts.passed,
                r.counts.failed,
                r.counts.skipped,
                r.seconds
            ),
            Some(Err(e)) => format!("FAILED (unreadable report: {}) | | | |", cell(e)),
            None => "FAILED (never reported) | | | |".to_owned(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {row} |",
            cell(&b.name),
            b.arch,
            b.smp
        );
    }

    // The cross-checks and host checks, then whatever report the plan does not name: the
    // total counts it, so the table shows it.
    let checks: Vec<&str> = planned
        .iter()
        .filter(|e| e.source != Source::Boot)
        .map(|e| e.name.as_str())
        .collect();
    let unplanned: Vec<&Entry> = run
        .entries
        .iter()
        .filter(|e| {
            let name = rundir::report_name(&e.path);
            !planned.iter().any(|p| Some(p.name.as_str()) == name)
        })
        .collect();
    if !checks.is_empty() || !unplanned.is_empty() {
        let _ = writeln!(out, "\n| check | result | what |");
        let _ = writeln!(out, "|---|---|---|");
        let rows = checks
            .iter()
            .map(|&name| (name.to_owned(), find(name), ""))
            .chain(unplanned.iter().map(|e| {
                let name = rundir::report_name(&e.path).unwrap_or("?").to_owned();
                (name, Some(*e), " (not planned)")
            }));
        for (name, entry, note) in rows {
            let (result, what) = match entry.map(|e| &e.report) {
                Some(Ok(r)) => (result_text(r), cell(&r.reason)),
                Some(Err(e)) => ("FAILED (unreadable report)".to_owned(), cell(e)),
                None => ("FAILED (never reported)".to_owned(), String::new()),
            };
            let _ = writeln!(out, "| {}{note} | {result} | {what} |", cell(&name));
        }
    }

    let t = tally_run(&run.entries, &planned).tally;
    let _ = writeln!(out, "\n{} passed, {} failed", t.passed, t.failed);
    let mut notes = Vec::new();
    if t.skipped > 0 {
        notes.push(format!("{} skipped", t.skipped));
    }
    if let Some(wall) = run.wall {
        notes.push(format!(
            "wall time {} (from the plan to the last report)",
            duration_text(wall)
        ));
    }
    if !notes.is_empty() {
        let _ = writeln!(out, "\n{}.", capitalise(&notes.join("; ")));
    }

    if let Some(bench) = &run.bench {
        let _ = writeln!(
            out,
            "\nThe bench report (`{}`): ratios of medians with their 95% bootstrap intervals.\n",
            cell(&bench.from)
        );
        let _ = writeln!(out, "| arch | ratio | value (95% CI) |");
        let _ = writeln!(out, "|---|---|---:|");
        for r in &bench.reports {
            for h in r.headlines() {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} |",
                    cell(&r.arch),
                    cell(&h.what),
                    ratio_ci_text(h.ratio, h.ci95)
                );
            }
        }
    }
    out
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map_or_else(String::new, |f| f.to_uppercase().chain(c).collect())
}

/// `text` with what is between its [`BEGIN`] and [`END`] lines replaced by `block`. The markers
/// must each be there once, in that order; `name` names the document in the error.
pub fn replace_block(text: &str, block: &str, name: &str) -> Result<String, String> {
    let find = |marker: &str| -> Result<usize, String> {
        let mut at = text.match_indices(marker).map(|(i, _)| i);
        match (at.next(), at.next()) {
            (Some(i), None) => Ok(i),
            (None, _) => Err(format!("{name} has no `{marker}` line")),
            (Some(_), Some(_)) => Err(format!(
                "{name} has `{marker}` more than once: which block is meant?"
            )),
        }
    };
    let (begin, end) = (find(BEGIN)?, find(END)?);
    if end < begin {
        return Err(format!("{name} has `{END}` before `{BEGIN}`"));
    }
    let from = begin + BEGIN.len();
    let mut out = String::with_capacity(text.len() + block.len());
    out.push_str(&text[..from]);
    out.push('\n');
    out.push_str(block);
    if !block.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&text[end..]);
    Ok(out)
}

/// Replaces the block of each of `files` with the block given with it. Every file is checked
/// before any is written, so a file without its markers leaves all of them as they were.
pub fn update_files(files: &[(&Path, &str)]) -> Result<(), String> {
    let updated = files
        .iter()
        .map(|(f, block)| {
            let text = std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read {}: {e}", f.display()))?;
            Ok((*f, replace_block(&text, block, &f.display().to_string())?))
        })
        .collect::<Result<Vec<_>, String>>()?;
    for (f, text) in updated {
        std::fs::write(f, text).map_err(|e| format!("cannot write {}: {e}", f.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_block_is_replaced() {
        let doc = format!("# Title\n\nBefore.\n{BEGIN}\nold\nlines\n{END}\nAfter.\n");
        let new = replace_block(&doc, "| a |\n", "README.md").unwrap();
        assert_eq!(
            new,
            format!("# Title\n\nBefore.\n{BEGIN}\n| a |\n{END}\nAfter.\n")
        );
        // Again: the same.
        assert_eq!(replace_block(&new, "| a |\n", "README.md").unwrap(), new);
        // Markers with nothing between them, and a block without its last newline.
        let empty = format!("{BEGIN}{END}");
        assert_eq!(
            replace_block(&empty, "x", "d").unwrap(),
            format!("{BEGIN}\nx\n{END}")
        );
    }

    #[test]
    fn markers_must_be_there_once_and_in_order() {
        let err = replace_block("no markers\n", "x", "docs/results.md").unwrap_err();
        assert!(
            err.starts_with("docs/results.md has no `<!-- textpoke-runner report: begin -->`"),
            "{err}"
        );
        let err = replace_block(&format!("{BEGIN}\n"), "x", "README.md").unwrap_err();
        assert!(
            err.contains("README.md has no `<!-- textpoke-runner report: end -->`"),
            "{err}"
        );
        let err = replace_block(&format!("{END}\n{BEGIN}\n"), "x", "README.md").unwrap_err();
        assert!(err.contains("before"), "{err}");
        let err =
            replace_block(&format!("{BEGIN}\n{END}\n{BEGIN}\n{END}\n"), "x", "R").unwrap_err();
        assert!(err.contains("more than once"), "{err}");
    }

    #[test]
    fn durations_for_people() {
        assert_eq!(duration_text(Duration::from_secs(45)), "45 s");
        assert_eq!(
            duration_text(Duration::from_secs(36 * 60 + 23)),
            "36 min 23 s"
        );
        assert_eq!(
            duration_text(Duration::from_secs(3600 + 2 * 60 + 59)),
            "1 h 02 min"
        );
    }

    #[test]
    fn cells_stay_in_their_column() {
        assert_eq!(cell("a | b\n  c"), "a \\| b c");
    }
}
