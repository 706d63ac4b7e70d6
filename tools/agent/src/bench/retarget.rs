//! The measurement of the commit that added the ioctl (32ff77e8cc, "perf/core: Implement fast
//! breakpoint modification via _IOC_MODIFY_ATTRIBUTES"), in the guest: moving a hardware
//! breakpoint with `PERF_EVENT_IOC_MODIFY_ATTRIBUTES` against closing the event and opening a
//! new one with a fresh ring buffer (`munmap`, `close`, `perf_event_open`, `mmap`), which is
//! what a tool had to do before the ioctl existed. The commit reports the ioctl about 10 times cheaper when the
//! breakpoints never trap and about 4 times when they always do.
//!
//! The breakpoints watch functions of this process ([`TARGETS`]), as the commit's tests did:
//! user breakpoints of one thread. Each sample retargets [`RETARGETS`] times, cycling through
//! the targets so that every retarget changes the address. "never": none of them runs; "always":
//! after each retarget the agent calls the function just watched, so the breakpoint fires once
//! (a debug exception and a perf sample). Both methods read their ring buffer after every
//! retarget, so they do the same work apart from the retarget itself.
//!
//! Each sample is one `textpoke-retarget:` JSON line (tools/runner/src/bench/retarget.rs reads them),
//! the two methods interleaved (modify, reopen, modify, ...). Its `hits` are the samples found
//! in the buffers, each at the address just called: `n` for "always" and 0 for "never", or the
//! measurement did not measure what it says and its KTAP case fails.

use std::hint::black_box;
use std::time::Instant;
use textpoke_agent::platform::breakpoint::{Breakpoint, Hits, Scope};
use textpoke_agent::report::ktap::Case;

/// Retargets per sample.
pub const RETARGETS: u32 = 256;
/// Samples per (traps, method).
pub const ROUNDS: u32 = 20;
/// Data pages of each ring buffer: room for more than [`RETARGETS`] samples.
const DATA_PAGES: usize = 8;

macro_rules! targets {
    ($($name:ident = $k:expr),* $(,)?) => {
        $(
            #[inline(never)]
            extern "C" fn $name() -> u64 {
                black_box($k)
            }
        )*
        /// Distinct functions to watch (distinct constants, so that no two fold into one).
        const TARGETS: &[extern "C" fn() -> u64] = &[$($name),*];
    };
}

targets!(
    t0 = 0x10,
    t1 = 0x11,
    t2 = 0x12,
    t3 = 0x13,
    t4 = 0x14,
    t5 = 0x15,
    t6 = 0x16,
    t7 = 0x17
);

fn addr_of(i: usize) -> u64 {
    TARGETS[i % TARGETS.len()] as usize as u64
}

/// Whether the breakpoint fires during the measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traps {
    /// The watched addresses never run.
    Never,
    /// The watched address runs once after each retarget.
    Always,
}

impl Traps {
    fn name(self) -> &'static str {
        match self {
            Self::Never => "never",
            Self::Always => "always",
        }
    }
}

/// How a breakpoint moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// `PERF_EVENT_IOC_MODIFY_ATTRIBUTES`.
    Modify,
    /// `munmap` and `close`, then `perf_event_open` and `mmap`.
    Reopen,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Self::Modify => "modify",
            Self::Reopen => "reopen",
        }
    }
}

/// One sample's outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Wall time of all retargets (and, for "always", the calls), in nanoseconds.
    pub ns: u64,
    /// Hits at the address just called.
    pub hits: u64,
    /// Hits anywhere else, lost or throttled records, unparsable records.
    pub stray: u64,
}

/// Retargets `n` times with `method`, calling the target each time if `traps` is "always".
pub fn sample(traps: Traps, method: Method, n: u32) -> Result<Outcome, String> {
    let open = |i: usize| {
        Breakpoint::open(addr_of(i), Scope::ThisThread, DATA_PAGES)
            .map_err(|e| format!("perf_event_open(breakpoint at {:#x}): {e}", addr_of(i)))
    };
    let mut bp = Some(open(0)?);
    let mut out = Outcome::default();
    let mut hits = Hits::default();
    let start = Instant::now();
    for i in 1..=n as usize {
        match method {
            Method::Modify => {
                let b = bp.as_mut().ok_or("no breakpoint")?;
                b.retarget(addr_of(i))
                    .map_err(|e| format!("PERF_EVENT_IOC_MODIFY_ATTRIBUTES: {e}"))?;
            }
            Method::Reopen => {
                // The old event goes first, as a tool short of debug registers must.
                drop(bp.take());
                bp = Some(open(i)?);
            }
        }
        if traps == Traps::Always {
            black_box(TARGETS[i % TARGETS.len()]());
        }
        hits.hits.clear();
        let b = bp.as_mut().ok_or("no breakpoint")?;
        b.drain(&mut hits)?;
        let called = addr_of(i);
        for h in &hits.hits {
            if h.ip == called && traps == Traps::Always {
                out.hits += 1;
            } else {
                out.stray += 1;
            }
        }
    }
    out.ns = start.elapsed().as_nanos() as u64;
    out.stray += hits.lost + hits.throttled + hits.errors;
    Ok(out)
}

/// Every sample, logged with `log`; a KTAP case per traps kind.
pub fn run(arch: &str, cpus: usize, log: impl Fn(&str)) -> Vec<Case> {
    let mut cases = Vec::new();
    for traps in [Traps::Never, Traps::Always] {
        let name = format!("retarget_{}", traps.name());
        let mut problems = Vec::new();
        let mut samples = 0;
        'rounds: for round in 0..ROUNDS {
            for method in [Method::Modify, Method::Reopen] {
                match sample(traps, method, RETARGETS) {
                    Ok(o) => {
                        log(&format!(
                            "textpoke-retarget: {{\"arch\":\"{arch}\",\"cpus\":{cpus},\"traps\":\"{}\",\
                             \"method\":\"{}\",\"round\":{round},\"rounds\":{ROUNDS},\"n\":{RETARGETS},\
                             \"ns\":{},\"hits\":{}}}",
                            traps.name(),
                            method.name(),
                            o.ns,
                            o.hits
                        ));
                        samples += 1;
                        let want = match traps {
                            Traps::Never => 0,
                            Traps::Always => u64::from(RETARGETS),
                        };
                        if o.hits != want || o.stray != 0 {
                            problems.push(format!(
                                "{} round {round}: {} hits at the called address (want {want}), {} stray",
                                method.name(),
                                o.hits,
                                o.stray
                            ));
                        }
                    }
                    Err(e) => {
                        problems.push(format!("{} round {round}: {e}", method.name()));
                        break 'rounds;
                    }
                }
            }
        }
        cases.push(
            Case::check(name, problems.is_empty(), format!("{problems:?}"))
                .with_log(format!("{samples} samples of {RETARGETS} retargets")),
        );
    }
    cases
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_distinct() {
        let mut a: Vec<u64> = (0..TARGETS.len()).map(addr_of).collect();
        a.sort_unstable();
        a.dedup();
        assert_eq!(a.len(), TARGETS.len());
    }

    /// On a machine that lets this user set breakpoints (`perf_event_paranoid` <= 2 or root):
    /// `cargo test -p textpoke-agent -- --ignored retarget`.
    #[test]
    #[ignore = "needs perf breakpoints on the host"]
    fn both_methods_see_every_hit_here() {
        for method in [Method::Modify, Method::Reopen] {
            let o = sample(Traps::Always, method, 16).unwrap();
            assert_eq!((o.hits, o.stray), (16, 0), "{method:?}");
            let o = sample(Traps::Never, method, 16).unwrap();
            assert_eq!((o.hits, o.stray), (0, 0), "{method:?}");
        }
    }
}
