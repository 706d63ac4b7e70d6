//! Client of the exerciser's debugfs interface (samples/exerciser/uapi.rs) and of textpoke's
//! own debugfs files.

use crate::platform::sys;
use crate::platform::uapi::{ExecRecord, EXEC_RECORD_SIZE};
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

/// The `flip` command of `sites`: one batch the writer's own thread begins, fills with each
/// site's other instruction, commits and ends.
pub fn flip_command(sites: &[&Site]) -> String {
    let indices: Vec<String> = sites.iter().map(|s| s.index.to_string()).collect();
    format!("flip {}", indices.join(" "))
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

/// A numeric value of a `key value` map; an error naming the key if it is absent or not a
/// number, never a default: a status file that lost a key must fail the check that reads it.
pub fn number(map: &BTreeMap<String, String>, key: &str) -> Result<u64, String> {
    let value = map
        .get(key)
        .ok_or_else(|| format!("the status file has no `{key}`"))?;
    value
        .parse()
        .map_err(|_| format!("`{key}` is `{value}`, not a number"))
}

/// One batch of the last scenario.
#[derive(Clone, Debug, Default)]
pub struct BatchLine {
    /// Poker index.
    pub poker: u32,
    /// Key, or -1 for the ftrace group.
    pub group: i64,
    /// Each site the batch changed, and the path it changed it to (0 `off`, 1 `on`).
    pub changes: Vec<(usize, u8)>,
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

/// Parses the `batches` file; every line must be well formed.
pub fn parse_batches(text: &str) -> Result<Vec<BatchLine>, String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let bad = || format!("malformed batches line `{l}`");
            let words: Vec<&str> = l.split_whitespace().collect();
            let (numbers, pairs) = words.split_at(words.len().min(10));
            let v: Vec<i64> = numbers
                .iter()
                .map(|w| w.parse().map_err(|_| bad()))
                .collect::<Result<_, _>>()?;
            let [poker, group, sites, nsecs, syncs, writes, records, start, end, errno] =
                v.as_slice()
            else {
                return Err(bad());
            };
            let changes = pairs
                .iter()
                .map(|p| {
                    let (site, to) = p.split_once(':').ok_or_else(bad)?;
                    Ok((
                        site.parse().map_err(|_| bad())?,
                        to.parse().map_err(|_| bad())?,
                    ))
                })
                .collect::<Result<Vec<(usize, u8)>, String>>()?;
            let u = |x: &i64| u64::try_from(*x).map_err(|_| bad());
            Ok(BatchLine {
                poker: u32::try_from(*poker).map_err(|_| bad())?,
                group: *group,
                changes,
                sites: u(sites)?,
                nsecs: u(nsecs)?,
                syncs: u(syncs)?,
                writes: u(writes)?,
                records: u(records)?,
                start: u(start)?,
                end: u(end)?,
                errno: *errno,
            })
        })
        .collect()
}

/// The `batches` file.
pub fn batches() -> Result<Vec<BatchLine>, String> {
    parse_batches(&sys::read_text(format!("{DIR}/batches")).map_err(|e| e.to_string())?)
}

/// The executions logged during the last scenario.
pub fn executions() -> io::Result<Vec<ExecRecord>> {
    let bytes = sys::read_file(format!("{DIR}/executions"))?;
    Ok(bytes
        .chunks_exact(EXEC_RECORD_SIZE)
        .filter_map(|c| c.try_into().ok().map(ExecRecord::from_bytes))
        .collect())
}

#[cfg(test)]
mod exec_record_tests {
    use crate::platform::uapi::{ExecRecord, EXEC_RECORD_SIZE, TRAP_COUNTED, TRAP_SEEN};

    #[test]
    fn an_execution_record_carries_both_trap_bits() {
        assert_eq!(EXEC_RECORD_SIZE, 24);
        let mut b = [0u8; EXEC_RECORD_SIZE];
        b[..8].copy_from_slice(&10u64.to_ne_bytes());
        b[8..16].copy_from_slice(&20u64.to_ne_bytes());
        b[16..20].copy_from_slice(&7u32.to_ne_bytes());
        b[20..22].copy_from_slice(&3u16.to_ne_bytes());
        b[22] = 1;
        for (trap, seen, counted) in [
            (0, false, false),
            (TRAP_SEEN, true, false),
            (TRAP_COUNTED, false, true),
            (TRAP_SEEN | TRAP_COUNTED, true, true),
        ] {
            b[23] = trap;
            let e = ExecRecord::from_bytes(&b);
            assert_eq!(
                (e.start, e.end, e.site, e.cpu, e.path, e.trap),
                (10, 20, 7, 3, 1, trap)
            );
            assert_eq!((e.cpu_trapped(), e.counted()), (seen, counted));
        }
    }
}
