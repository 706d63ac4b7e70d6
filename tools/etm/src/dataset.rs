//! A boot's observed executions, as the guest agent prints them and the host reads them back.
//!
//! The breakpoint observer (tools/agent/src/oracle/observer.rs) knows, for thousands of executions of
//! a few branch sites per boot, which path each CPU took and when, from the CPU's debug unit
//! and the text read at the hit, and perf delivered the `PERF_RECORD_TEXT_POKE` records of the
//! same sites. [`crate::observed`] turns that into a CoreSight trace whose truth is known. This
//! file is the one definition of the lines that carry it from the guest's console to the host:
//! the agent compiles it too (`#[path]`), so it uses only `std`.
//!
//! Every line starts with [`PREFIX`] (after whatever the console puts before it):
//!
//! - `begin`;
//! - `site INDEX ADDR ON OFF TAKEN FALL INITIAL`, per watched site: hex address, the two
//!   instructions' bytes in hex, where each path goes, and the path in effect before the first
//!   record (from `/proc/kcore`: 1 = `ON`);
//! - `poke TIME ADDR OLD NEW`, per record at a watched site, in time order (perf clock, ns);
//! - `execs ITEM ...`, the executions in time order, many per line, each
//!   `DT:CPU:SITE:PG`: nanoseconds since the one before (the first: since 0), the CPU, the
//!   site's INDEX, and `PG` = path (bit 0: 1 = the jump ran) plus 2 if the CPU read the
//!   guard at the site when it hit the path's breakpoint;
//! - `end SITES POKES EXECS`: the counts, so that a line the console lost fails the read.

use std::fmt::Write as _;

/// What starts each line, after the console's own prefix.
pub const PREFIX: &str = "textpoke-etm: ";

/// Executions per `execs` line: a console line stays well under printk's limit (1024 bytes).
pub const EXECS_PER_LINE: usize = 48;

/// A watched branch site: where it is, its two instructions, where each path goes. The
/// observer watches these (tools/agent/src/oracle/observer.rs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watched {
    /// The exerciser's index of the site.
    pub index: usize,
    /// The site's address.
    pub addr: u64,
    /// The instruction of path 1 (`on`): a jump to `taken`.
    pub on: Vec<u8>,
    /// The instruction of path 0 (`off`): falls through to `fall`.
    pub off: Vec<u8>,
    /// The taken path's first instruction.
    pub taken: u64,
    /// The instruction after the site.
    pub fall: u64,
}

/// A watched site as the dataset carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// The site.
    pub watched: Watched,
    /// The path in effect before the site's first record (1 = `on`).
    pub initial: u8,
}

/// A `PERF_RECORD_TEXT_POKE` at a watched site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Poke {
    /// The perf clock's time, ns.
    pub time: u64,
    /// The address of the first changed byte.
    pub addr: u64,
    /// The bytes before.
    pub old: Vec<u8>,
    /// The bytes after.
    pub new: Vec<u8>,
}

/// One execution of a watched site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exec {
    /// The perf clock's time of the path's breakpoint hit, ns.
    pub time: u64,
    /// The CPU.
    pub cpu: u32,
    /// The site's index ([`Site::index`]).
    pub site: usize,
    /// The path it took: 1 the jump, 0 the fall-through.
    pub path: u8,
    /// Whether the CPU read the guard at the site when it hit: it trapped on it.
    pub guard: bool,
}

/// Everything one boot printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dataset {
    /// The watched sites.
    pub sites: Vec<Site>,
    /// Their records, in time order.
    pub pokes: Vec<Poke>,
    /// Their executions, in time order.
    pub execs: Vec<Exec>,
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 * bytes.len());
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err(format!("`{s}`: an odd number of hex digits"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| format!("`{s}` is not hex bytes"))
        })
        .collect()
}

fn num<T: std::str::FromStr>(s: Option<&str>, what: &str) -> Result<T, String> {
    let s = s.ok_or_else(|| format!("no {what}"))?;
    s.parse()
        .map_err(|_| format!("{what} `{s}` is not a number"))
}

fn addr(s: Option<&str>, what: &str) -> Result<u64, String> {
    let s = s.ok_or_else(|| format!("no {what}"))?;
    u64::from_str_radix(s, 16).map_err(|_| format!("{what} `{s}` is not a hex address"))
}

impl Dataset {
    /// The lines that carry it, [`PREFIX`] included, without line ends. Sorts the records and
    /// the executions by time first.
    pub fn lines(&self) -> Vec<String> {
        let mut pokes = self.pokes.clone();
        pokes.sort_by_key(|p| p.time);
        let mut execs = self.execs.clone();
        execs.sort_by_key(|e| e.time);
        let mut out = vec![format!("{PREFIX}begin")];
        for s in &self.sites {
            let w = &s.watched;
            out.push(format!(
                "{PREFIX}site {} {:x} {} {} {:x} {:x} {}",
                w.index,
                w.addr,
                hex(&w.on),
                hex(&w.off),
                w.taken,
                w.fall,
                s.initial
            ));
        }
        for p in &pokes {
            out.push(format!(
                "{PREFIX}poke {} {:x} {} {}",
                p.time,
                p.addr,
                hex(&p.old),
                hex(&p.new)
            ));
        }
        let mut last = 0u64;
        for chunk in execs.chunks(EXECS_PER_LINE) {
            let mut line = format!("{PREFIX}execs");
            for e in chunk {
                let pg = e.path | u8::from(e.guard) << 1;
                let _ = write!(line, " {}:{}:{}:{pg}", e.time - last, e.cpu, e.site);
                last = e.time;
            }
            out.push(line);
        }
        out.push(format!(
            "{PREFIX}end {} {} {}",
            self.sites.len(),
            pokes.len(),
            execs.len()
        ));
        out
    }

    /// Reads the dataset from a console log: the lines between the last `begin` and its
    /// `end`, whose counts must match what was read.
    pub fn parse(log: &str) -> Result<Self, String> {
        let body: Vec<&str> = log
            .lines()
            .filter_map(|l| l.split_once(PREFIX).map(|(_, rest)| rest.trim_end()))
            .collect();
        let start = body
            .iter()
            .rposition(|l| *l == "begin")
            .ok_or_else(|| format!("no `{PREFIX}begin` line"))?;
        let mut d = Dataset::default();
        let mut last = 0u64;
        for line in &body[start + 1..] {
            let mut w = line.split(' ');
            match w.next() {
                Some("site") => d.sites.push(Site {
                    watched: Watched {
                        index: num(w.next(), "site index")?,
                        addr: addr(w.next(), "site address")?,
                        on: unhex(w.next().ok_or("no ON bytes")?)?,
                        off: unhex(w.next().ok_or("no OFF bytes")?)?,
                        taken: addr(w.next(), "taken address")?,
                        fall: addr(w.next(), "fall-through address")?,
                    },
                    initial: num(w.next(), "initial path")?,
                }),
                Some("poke") => d.pokes.push(Poke {
                    time: num(w.next(), "record time")?,
                    addr: addr(w.next(), "record address")?,
                    old: unhex(w.next().ok_or("no old bytes")?)?,
                    new: unhex(w.next().ok_or("no new bytes")?)?,
                }),
                Some("execs") => {
                    for item in w {
                        let mut f = item.split(':');
                        let dt: u64 = num(f.next(), "time step")?;
                        let cpu = num(f.next(), "CPU")?;
                        let site = num(f.next(), "site")?;
                        let pg: u8 = num(f.next(), "path")?;
                        if pg > 3 || f.next().is_some() {
                            return Err(format!("execution `{item}` is not DT:CPU:SITE:PG"));
                        }
                        last = last
                            .checked_add(dt)
                            .ok_or_else(|| format!("execution `{item}`: time overflows"))?;
                        d.execs.push(Exec {
                            time: last,
                            cpu,
                            site,
                            path: pg & 1,
                            guard: pg & 2 != 0,
                        });
                    }
                }
                Some("end") => {
                    let want: [usize; 3] = [
                        num(w.next(), "site count")?,
                        num(w.next(), "record count")?,
                        num(w.next(), "execution count")?,
                    ];
                    let have = [d.sites.len(), d.pokes.len(), d.execs.len()];
                    if want != have {
                        return Err(format!(
                            "the end line counts {want:?} sites, records and executions, \
                             the lines before it hold {have:?}: the console lost some"
                        ));
                    }
                    if d.pokes.windows(2).any(|p| p[0].time > p[1].time) {
                        return Err("records out of time order".into());
                    }
                    return Ok(d);
                }
                other => return Err(format!("unknown line `{}`", other.unwrap_or(""))),
            }
        }
        Err(format!("no `{PREFIX}end` line after the last begin"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Dataset {
        Dataset {
            sites: vec![Site {
                watched: Watched {
                    index: 3,
                    addr: 0xffff_8000_7a01_0040,
                    on: vec![0x02, 0, 0, 0x14],
                    off: vec![0x1f, 0x20, 0x03, 0xd5],
                    taken: 0xffff_8000_7a01_0048,
                    fall: 0xffff_8000_7a01_0044,
                },
                initial: 0,
            }],
            pokes: vec![Poke {
                time: 2_000,
                addr: 0xffff_8000_7a01_0040,
                old: vec![0x1f, 0x20, 0x03, 0xd5],
                new: vec![0x02, 0, 0, 0x14],
            }],
            execs: (0..100)
                .map(|i| Exec {
                    time: 1_000 + 20 * i,
                    cpu: (i % 2) as u32,
                    site: 3,
                    path: u8::from(i >= 50),
                    guard: i == 49,
                })
                .collect(),
        }
    }

    #[test]
    fn lines_read_back_from_a_console_log() {
        let d = sample();
        let log: String = d
            .lines()
            .iter()
            .enumerate()
            .map(|(i, l)| format!("[ {i}.000000] textpoke-agent: {l}\nunrelated line\n"))
            .collect();
        assert_eq!(Dataset::parse(&log), Ok(d));
        // 100 executions at 48 per line: three lines.
        assert_eq!(
            sample()
                .lines()
                .iter()
                .filter(|l| l.contains("execs"))
                .count(),
            3
        );
    }

    #[test]
    fn a_lost_line_or_a_missing_end_fails_the_read() {
        let lines = sample().lines();
        let lost: Vec<&String> = lines.iter().filter(|l| !l.contains(": poke ")).collect();
        let log = lost.iter().map(|l| format!("{l}\n")).collect::<String>();
        let e = Dataset::parse(&log).unwrap_err();
        assert!(e.contains("the console lost some"), "{e}");
        let cut = lines[..lines.len() - 1].join("\n");
        assert!(Dataset::parse(&cut)
            .unwrap_err()
            .contains("no `textpoke-etm: end`"));
        assert!(Dataset::parse("nothing").unwrap_err().contains("begin"));
    }
}
