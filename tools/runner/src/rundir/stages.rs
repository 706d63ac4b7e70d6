//! The scripts' timed stages of a run (`DIR/stages.jsonl`): each kernel, the host lane's
//! checks, the guests' builds, the wait for the host lane. tools/lib.sh's `timed` runs a stage
//! and records it with `textpoke-runner stage`; the stage table of `textpoke-runner report`
//! (`crate::report::times`) reads them back.

use std::io::Write as _;
use std::path::Path;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::rundir::layout as rundir;

/// One timed stage of a run, as `DIR/stages.jsonl` holds it (one JSON object a line).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    /// What ran: `kernel x86_64`, `host-tests`, `guest arm64 patched`, ...
    pub name: String,
    /// Which lane of the script ran it (`main`, `host`): stages of two lanes overlap.
    pub lane: String,
    /// When it started, in seconds since the Unix epoch.
    pub started: f64,
    /// Its wall time, in seconds.
    pub seconds: f64,
    /// The user and system time of the processes it ran, in seconds, if the script could tell.
    #[serde(default)]
    pub cpu: Option<f64>,
    /// Its exit status.
    pub status: i32,
}

/// The CPU seconds in a line of bash's `times` (`0m1.250s 0m0.500s`: user, then system).
pub fn times_seconds(line: &str) -> Result<f64, String> {
    let one = |t: &str| -> Option<f64> {
        let (m, s) = t.strip_suffix('s')?.split_once('m')?;
        Some(m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
    };
    let parts: Vec<&str> = line.split_whitespace().collect();
    match parts.as_slice() {
        [user, system] => Ok(one(user)
            .zip(one(system))
            .map(|(u, s)| u + s)
            .ok_or_else(|| format!("`{line}` is no line of bash's `times`"))?),
        _ => Err(format!("`{line}` is no line of bash's `times`")),
    }
}

/// Seconds since the Unix epoch of `t`.
pub fn epoch_seconds(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Appends `stage` to `DIR/stages.jsonl`. One `write` of one line, so that the two lanes of a
/// script, appending at once, never interleave within a line.
pub fn append(dir: &Path, stage: &Stage) -> Result<(), String> {
    let path = rundir::stages(dir);
    let mut line = serde_json::to_string(stage).map_err(|e| e.to_string())?;
    line.push('\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|e| format!("cannot append to {}: {e}", path.display()))
}

/// The stages of `DIR/stages.jsonl`, by start time; none if the run recorded none. A line that
/// does not parse is an error: a stage the table silently left out would misstate the run.
pub fn read_stages(dir: &Path) -> Result<Vec<Stage>, String> {
    let path = rundir::stages(dir);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let mut stages = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str::<Stage>(l)
                .map_err(|e| format!("{} line {}: {e}", path.display(), i + 1))
        })
        .collect::<Result<Vec<_>, _>>()?;
    stages.sort_by(|a, b| a.started.total_cmp(&b.started));
    Ok(stages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_append_and_read_back_in_start_order() {
        let dir = std::env::temp_dir().join(format!("textpoke-stages-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let stage = |name: &str, started: f64| Stage {
            name: name.to_owned(),
            lane: "main".to_owned(),
            started,
            seconds: 2.0,
            cpu: Some(3.5),
            status: 0,
        };
        append(&dir, &stage("b", 20.0)).unwrap();
        append(&dir, &stage("a", 10.0)).unwrap();
        let read = read_stages(&dir).unwrap();
        assert_eq!(read, [stage("a", 10.0), stage("b", 20.0)]);
        std::fs::write(rundir::stages(&dir), "{not json}\n").unwrap();
        assert!(read_stages(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn cpu_seconds_from_bash_times() {
        assert_eq!(times_seconds("1m2.500s 0m0.250s"), Ok(62.75));
        assert_eq!(times_seconds("0m0.000s 0m0.000s"), Ok(0.0));
        assert!(times_seconds("0m1.000s").is_err());
        assert!(times_seconds("1.0 2.0").is_err());
    }
}
