//! Client of the exerciser's debugfs interface (samples/exerciser/uapi.rs) and of textpoke's
//! own debugfs files.

use crate::sys;
use crate::uapi::{ExecRecord, EXEC_RECORD_SIZE};
use std::collections::BTreeMap;
use std::io;

const DIR: &str = "/sys/kernel/debug/textpoke_exerciser";
/// textpoke's engine log of emitted records (`PERF_RECORD_TEXT_POKE` wire format).
pub const ENGINE_RECORDS: &str = "/sys/kernel/debug/textpoke/records";

/// One site as the exerciser lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// Index, as executions name it.
    pub index: usize,
    /// Kind name (`jmp32`, `call`, `b`, `bl`, ...).
    pub kind: String,
    /// Address of the site's first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: usize,
    /// The instruction at load (path 0).
    pub off: Vec<u8>,
    /// The instruction it switches to (path 1).
    pub on: Vec<u8>,
}

fn hex_bytes(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Parses the `sites` file.
pub fn parse_sites(text: &str) -> Option<Vec<Site>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let [index, kind, addr, len, off, on] = w.as_slice() else {
                return None;
            };
            Some(Site {
                index: index.parse().ok()?,
                kind: (*kind).to_string(),
                addr: u64::from_str_radix(addr.trim_start_matches("0x"), 16).ok()?,
                len: len.parse().ok()?,
                off: hex_bytes(off)?,
                on: hex_bytes(on)?,
            })
        })
        .collect()
}

/// The exerciser's sites.
pub fn sites() -> io::Result<Vec<Site>> {
    let text = sys::read_text(format!("{DIR}/sites"))?;
    parse_sites(&text)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed sites file"))
}

/// Sends one command; `Err(errno)` if the exerciser refused it.
pub fn command(cmd: &str) -> Result<(), i32> {
    match sys::write_file(format!("{DIR}/control"), cmd.as_bytes()) {
        Ok(_) => Ok(()),
        Err(e) => Err(e.raw_os_error().unwrap_or(-1)),
    }
}

/// The `result` file as a map.
pub fn result() -> io::Result<BTreeMap<String, String>> {
    Ok(key_values(&sys::read_text(format!("{DIR}/result"))?))
}

/// Parses `key value` lines.
pub fn key_values(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().to_string()))
        })
        .collect()
}

/// A numeric value of a `key value` map (0 if absent or malformed).
pub fn number(map: &BTreeMap<String, String>, key: &str) -> u64 {
    map.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// One batch of the last scenario.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchLine {
    /// Poker index.
    pub poker: u32,
    /// Key, or -1 for the ftrace group.
    pub group: i64,
    /// Sites changed.
    pub sites: u64,
    /// Commit time.
    pub nsecs: u64,
    /// All-CPU syncs.
    pub syncs: u64,
    /// Text writes.
    pub writes: u64,
    /// Records emitted.
    pub records: u64,
    /// Commit start (perf clock).
    pub start: u64,
    /// Commit end.
    pub end: u64,
    /// 0 or the errno of a failed commit.
    pub errno: i64,
}

/// The `batches` file.
pub fn batches() -> io::Result<Vec<BatchLine>> {
    let text = sys::read_text(format!("{DIR}/batches"))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let v: Vec<i64> = l
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            let [poker, group, sites, nsecs, syncs, writes, records, start, end, errno] =
                v.as_slice()
            else {
                return None;
            };
            let u = |x: &i64| u64::try_from(*x).unwrap_or(0);
            Some(BatchLine {
                poker: u32::try_from(*poker).unwrap_or(0),
                group: *group,
                sites: u(sites),
                nsecs: u(nsecs),
                syncs: u(syncs),
                writes: u(writes),
                records: u(records),
                start: u(start),
                end: u(end),
                errno: *errno,
            })
        })
        .collect())
}

/// The executions logged during the last scenario.
pub fn executions() -> io::Result<Vec<ExecRecord>> {
    let bytes = sys::read_file(format!("{DIR}/executions"))?;
    Ok(bytes
        .chunks_exact(EXEC_RECORD_SIZE)
        .filter_map(|c| c.try_into().ok().map(ExecRecord::from_bytes))
        .collect())
}
