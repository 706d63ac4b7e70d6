//! Where a run's time went: the stage table of `textpoke-runner report`.
//!
//! Three sources, each written as the run goes: the scripts' timed stages
//! ([`crate::rundir::stages`]), each boot's start and wall time (its report), and the wall time
//! of every top-level group of a boot's document, which the guest agent logs as a console line
//! ([`GROUP_LINE`]). [`read`] gathers them and [`markdown`] renders them: the stages and boots on
//! one time line, then the groups' seconds with a column per boot, so that the cost of every
//! check is visible and kept with the run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::judge::ktap::strip_console_prefix;
use crate::rundir::boot_report::{BootReport, Entry};
use crate::rundir::layout as rundir;
use crate::rundir::stages::{epoch_seconds, read_stages, Stage};

/// What the guest agent logs when a top-level group of its document ends:
/// `textpoke-agent: elapsed GROUP SECONDS s` (tools/agent, `platform::guest::timed`).
pub const GROUP_LINE: &str = "textpoke-agent: elapsed ";

/// The agent's groups and their seconds, in the order a console log shows them.
pub fn groups(console: &str) -> Vec<(String, f64)> {
    console
        .lines()
        .filter_map(|l| {
            let rest = strip_console_prefix(l).strip_prefix(GROUP_LINE)?;
            let (name, secs) = rest.trim_end().strip_suffix(" s")?.rsplit_once(' ')?;
            Some((name.to_owned(), secs.parse().ok()?))
        })
        .collect()
}

/// One boot's time: when it started, how long it ran and its groups' seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct BootTime {
    /// The boot's name.
    pub name: String,
    /// When QEMU started, in seconds since the Unix epoch (0 if the report does not say).
    pub started: f64,
    /// QEMU's wall time.
    pub seconds: f64,
    /// The longest the console stayed silent.
    pub longest_silence: f64,
    /// The agent's groups, as its console logged them.
    pub groups: Vec<(String, f64)>,
}

/// Where a run's time went.
#[derive(Clone, Debug, PartialEq)]
pub struct Times {
    /// When the run started: its manifest's writing (the plan comes first), else its first
    /// stage.
    pub start: f64,
    /// The scripts' stages.
    pub stages: Vec<Stage>,
    /// The boots, in the order of the reports given.
    pub boots: Vec<BootTime>,
}

/// Gathers the times of run directory `dir`, whose reports are `entries`.
pub fn read(dir: &Path, entries: &[Entry]) -> Result<Times, String> {
    let stages = read_stages(dir)?;
    let boots = entries
        .iter()
        .filter_map(|e| e.report.as_ref().ok())
        .filter(|r| !r.command.is_empty())
        .map(|r: &BootReport| BootTime {
            name: r.name.clone(),
            started: r.started,
            seconds: r.seconds,
            longest_silence: r.longest_silence,
            groups: std::fs::read_to_string(&r.log)
                .map(|c| groups(&c))
                .unwrap_or_default(),
        })
        .collect();
    let planned = std::fs::metadata(rundir::manifest(dir))
        .and_then(|m| m.modified())
        .ok()
        .map(epoch_seconds);
    let first = stages.first().map(|s| s.started);
    let start = planned.or(first).unwrap_or(0.0);
    Ok(Times {
        start,
        stages,
        boots,
    })
}

/// Seconds as the tables show them.
fn secs(s: f64) -> String {
    format!("{s:.0}")
}

/// The stage table and the groups' table, in Markdown; empty if the run timed nothing.
pub fn markdown(t: &Times) -> String {
    let mut out = String::new();
    if t.stages.is_empty() && t.boots.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "Where the time went, in seconds from the plan (stages of the two lanes overlap):\n"
    );
    let _ = writeln!(out, "| stage | lane | from | to | seconds | CPU seconds |");
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|");
    let mut rows: Vec<(f64, String)> = t
        .stages
        .iter()
        .map(|s| {
            let from = s.started - t.start;
            let failed = if s.status == 0 { "" } else { " (failed)" };
            (
                from,
                format!(
                    "| {}{failed} | {} | {} | {} | {} | {} |",
                    s.name,
                    s.lane,
                    secs(from),
                    secs(from + s.seconds),
                    secs(s.seconds),
                    s.cpu.map_or_else(String::new, secs)
                ),
            )
        })
        .collect();
    rows.extend(t.boots.iter().filter(|b| b.started > 0.0).map(|b| {
        let from = b.started - t.start;
        (
            from,
            format!(
                "| boot {} | boots | {} | {} | {} | |",
                b.name,
                secs(from),
                secs(from + b.seconds),
                secs(b.seconds)
            ),
        )
    }));
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (_, row) in &rows {
        let _ = writeln!(out, "{row}");
    }
    let end = t
        .stages
        .iter()
        .map(|s| s.started + s.seconds)
        .chain(t.boots.iter().map(|b| b.started + b.seconds))
        .fold(t.start, f64::max);
    let cpu = t
        .stages
        .iter()
        .filter_map(|s| s.cpu)
        .fold(0.0, |a, b| a + b);
    let _ = writeln!(
        out,
        "\nFrom the plan to the last stage: {} s. The stages' CPU seconds (boots not counted, \
         each at most one core for its wall time): {}.",
        secs(end - t.start),
        secs(cpu)
    );

    let timed: Vec<&BootTime> = t.boots.iter().filter(|b| !b.groups.is_empty()).collect();
    if timed.is_empty() {
        return out;
    }
    // Every group any boot ran, in the order the first boot to run it ran it.
    let mut order: Vec<&str> = Vec::new();
    for b in &timed {
        for (g, _) in &b.groups {
            if !order.contains(&g.as_str()) {
                order.push(g);
            }
        }
    }
    let _ = writeln!(
        out,
        "\nSeconds per group of the agent's document, per boot (blank: not run there):\n"
    );
    let names: Vec<&str> = timed.iter().map(|b| b.name.as_str()).collect();
    let _ = writeln!(out, "| group | {} | all boots |", names.join(" | "));
    let _ = writeln!(out, "|---|{}---:|", "---:|".repeat(names.len()));
    let per_boot: Vec<BTreeMap<&str, f64>> = timed
        .iter()
        .map(|b| {
            let mut m = BTreeMap::new();
            for (g, s) in &b.groups {
                *m.entry(g.as_str()).or_insert(0.0) += s;
            }
            m
        })
        .collect();
    for g in &order {
        let cells: Vec<String> = per_boot
            .iter()
            .map(|m| m.get(g).map_or_else(String::new, |s| secs(*s)))
            .collect();
        let all: f64 = per_boot.iter().filter_map(|m| m.get(g)).sum();
        let _ = writeln!(out, "| {g} | {} | {} |", cells.join(" | "), secs(all));
    }
    let totals: Vec<String> = timed.iter().map(|b| secs(b.seconds)).collect();
    let all: f64 = timed.iter().map(|b| b.seconds).sum();
    let _ = writeln!(
        out,
        "| (the whole boot) | {} | {} |",
        totals.join(" | "),
        secs(all)
    );
    let silences: Vec<String> = timed.iter().map(|b| secs(b.longest_silence)).collect();
    let longest = timed.iter().map(|b| b.longest_silence).fold(0.0, f64::max);
    let _ = writeln!(
        out,
        "| (the longest silent console) | {} | {} |",
        silences.join(" | "),
        secs(longest)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_lines_are_read_from_a_console_log() {
        let log = "[    3.100000] textpoke-agent: mode test\n\
                   [   12.500000] textpoke-agent: elapsed load_textpoke 0.4 s\r\n\
                   [  130.000000] textpoke-agent: elapsed listener 35.25 s\n\
                   textpoke-agent: elapsed not a number s\n";
        assert_eq!(
            groups(log),
            [
                ("load_textpoke".to_owned(), 0.4),
                ("listener".to_owned(), 35.25)
            ]
        );
    }

    #[test]
    fn the_table_puts_stages_and_boots_on_one_time_line_and_groups_per_boot() {
        let t = Times {
            start: 100.0,
            stages: vec![Stage {
                name: "kernel x86_64".to_owned(),
                lane: "main".to_owned(),
                started: 100.0,
                seconds: 600.0,
                cpu: Some(1100.0),
                status: 0,
            }],
            boots: vec![
                BootTime {
                    name: "x86_64-smp2".to_owned(),
                    started: 700.0,
                    seconds: 300.0,
                    longest_silence: 41.0,
                    groups: vec![("listener".to_owned(), 20.0), ("scenario".to_owned(), 5.0)],
                },
                BootTime {
                    name: "x86_64-smp4".to_owned(),
                    started: 700.0,
                    seconds: 250.0,
                    longest_silence: 12.0,
                    groups: vec![("listener".to_owned(), 30.0)],
                },
            ],
        };
        let md = markdown(&t);
        assert!(
            md.contains("| kernel x86_64 | main | 0 | 600 | 600 | 1100 |"),
            "{md}"
        );
        assert!(
            md.contains("| boot x86_64-smp2 | boots | 600 | 900 | 300 | |"),
            "{md}"
        );
        assert!(
            md.contains("From the plan to the last stage: 900 s. The stages' CPU seconds"),
            "{md}"
        );
        assert!(md.contains("each at most one core for its wall time): 1100."));
        assert!(md.contains("| listener | 20 | 30 | 50 |"), "{md}");
        assert!(md.contains("| scenario | 5 |  | 5 |"), "{md}");
        assert!(
            md.contains("| (the whole boot) | 300 | 250 | 550 |"),
            "{md}"
        );
        assert!(
            md.contains("| (the longest silent console) | 41 | 12 | 41 |"),
            "{md}"
        );
    }
}
