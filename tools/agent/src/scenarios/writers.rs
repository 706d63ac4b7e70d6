//! The kernel's other writers of text, while a tracer listens: kprobes.
//!
//! A decoder needs every change to the text it decodes, whoever makes it, and at every moment,
//! not only once the change is undone (docs/writers.md lists the writers). With a recorder open
//! on every CPU, a kprobe is created, armed, hit, disarmed and removed through the kernel's own
//! interface (kprobe events in tracefs), twice: at the first instruction of a function, and at
//! the first instruction inside it that the kernel probes with a breakpoint of its own rather
//! than through ftrace. At each of those points:
//! - the function's bytes as read before the first probe, plus every record since, in time
//!   order, equal the function in `/proc/kcore`;
//! - every piece of out-of-line text the records created (a record with no old bytes: kprobes'
//!   single-step slots, x86 optprobes' detour buffers, ftrace trampolines), updated by the
//!   records inside it, equals kcore at its address until a record with no new bytes frees it;
//! - the kernel shows the writer ran: the function's text differs from before while the probe is
//!   armed and is as before once it is disarmed, and `kprobe_profile` counts the hits.
//!
//! x86 has recorded kprobes since v5.9; arm64 does with patch 0013 of the series, and without
//! it every point from "armed" on fails. `records_withheld_caught` is the check's own control:
//! the armed inner probe judged without the records at its address must fail.
//!
//! A point is read again until it agrees, a bounded number of times: a writer emits its record
//! on one side of its write (x86 records arming after it), and x86 optimizes and unoptimizes a
//! probe later, from a worker, so one read can fall between a record and its write. A missing
//! record never agrees.

use std::collections::BTreeMap;
use std::time::Duration;
use textpoke_agent::oracle::checks;
use textpoke_agent::platform::guest::{is_x86, log};
use textpoke_agent::platform::kallsyms::{self, In};
use textpoke_agent::platform::kcore::Kcore;
use textpoke_agent::platform::perf::{Recorder, RecorderConfig, TextPokeRec};
use textpoke_agent::platform::sys;
use textpoke_agent::report::ktap::Case;

use crate::scenarios::kernel_patching::{write, TRACING};

const KPROBES_LIST: &str = "/sys/kernel/debug/kprobes/list";
/// The kprobe events' group in tracefs.
const EVENT_GROUP: &str = "textpoke_writers";
/// The bytes of the probed function compared at each point, from its start: past both probes
/// and an x86 optprobe's 5-byte jump at the inner one.
const WINDOW: usize = 96;
/// The offsets tried for the inner probe, from 1.
const INNER_MAX: u64 = 48;
/// Reads of one point before it counts as disagreeing, and the pause between them.
const READS: usize = 100;
const PAUSE: Duration = Duration::from_millis(20);
/// Calls of the probed function at the "hit" point.
const CALLS: u64 = 16;

/// The probed function: the wrapper of `getppid(2)`, which nothing in the guest but this check
/// calls.
fn function() -> &'static str {
    if is_x86() {
        "__x64_sys_getppid"
    } else {
        "__arm64_sys_getppid"
    }
}

/// A kprobe event of [`EVENT_GROUP`]; disabled and removed when dropped.
struct Probe {
    event: &'static str,
    addr: u64,
    removed: bool,
}

impl Probe {
    /// Creates the event at `function+offset` (`addr`). Errors carry the kernel's errno: the
    /// kernel refuses an offset that is not an instruction boundary or that it cannot probe.
    fn create(event: &'static str, function: &str, offset: u64, addr: u64) -> Result<Self, String> {
        write(
            &format!("{TRACING}/kprobe_events"),
            &format!("p:{EVENT_GROUP}/{event} {function}+{offset}"),
        )?;
        Ok(Self {
            event,
            addr,
            removed: false,
        })
    }

    fn enable(&self, on: bool) -> Result<(), String> {
        write(
            &format!("{TRACING}/events/{EVENT_GROUP}/{}/enable", self.event),
            if on { "1" } else { "0" },
        )
    }

    /// Its hits, as `kprobe_profile` counts them.
    fn hits(&self) -> Result<u64, String> {
        let path = format!("{TRACING}/kprobe_profile");
        let text = sys::read_text(&path).map_err(|e| format!("{path}: {e}"))?;
        text.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|f| f.first() == Some(&self.event))
            .and_then(|f| f.get(1).and_then(|n| n.parse().ok()))
            .ok_or_else(|| format!("no {} in {path}", self.event))
    }

    /// Its line in kprobes' list (`ADDRESS  k  SYMBOL+OFFSET  [FLAGS]`).
    fn list_line(&self) -> Result<String, String> {
        let text = sys::read_text(KPROBES_LIST).map_err(|e| format!("{KPROBES_LIST}: {e}"))?;
        text.lines()
            .find(|l| {
                l.split_whitespace()
                    .next()
                    .and_then(|a| u64::from_str_radix(a, 16).ok())
                    == Some(self.addr)
            })
            .map(str::to_owned)
            .ok_or_else(|| format!("no probe at {:#x} in {KPROBES_LIST}", self.addr))
    }

    /// Whether kprobes lists it as an ftrace-based probe (`[FTRACE]`), which writes no
    /// breakpoint of its own.
    fn through_ftrace(&self) -> Result<bool, String> {
        Ok(self.list_line()?.contains("[FTRACE]"))
    }

    /// Deletes the event (the kernel disarms and unregisters it).
    fn delete(&self) -> Result<(), String> {
        write(
            &format!("{TRACING}/kprobe_events"),
            &format!("-:{EVENT_GROUP}/{}", self.event),
        )
    }

    fn remove(mut self) -> Result<(), String> {
        self.removed = true;
        self.delete()
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if !self.removed {
            let _ = self.enable(false);
            let _ = self.delete();
        }
    }
}

/// What the decoder holds: the function's bytes read before, and every record since.
struct Copy {
    base: u64,
    before: Vec<u8>,
    pokes: Vec<TextPokeRec>,
}

/// What one agreeing read showed.
struct Seen {
    /// The function's bytes in kcore.
    now: Vec<u8>,
    /// Records that changed the function.
    replayed: usize,
    /// Out-of-line texts alive, and their bytes compared with kcore.
    out_of_line: usize,
    out_of_line_bytes: usize,
}

impl Copy {
    fn in_window(&self, p: &TextPokeRec) -> bool {
        let end = self.base + WINDOW as u64;
        p.addr < end && p.addr + p.old.len().max(p.new.len()) as u64 > self.base
    }

    /// Judges the copy against kcore now, with the records `keep` lets through.
    fn judge(&self, kcore: &Kcore, keep: impl Fn(&TextPokeRec) -> bool) -> Result<Seen, String> {
        let now = kcore
            .read(self.base, WINDOW)
            .map_err(|e| format!("kcore at {:#x}: {e}", self.base))?;
        let mut sorted: Vec<&TextPokeRec> = self.pokes.iter().filter(|p| keep(p)).collect();
        sorted.sort_by_key(|p| (p.time, p.id));
        let window: Vec<TextPokeRec> = sorted
            .iter()
            .filter(|p| self.in_window(p))
            .map(|p| (*p).clone())
            .collect();
        let replayed = checks::replay(self.base, &self.before, &now, &window)
            .map_err(|e| format!("the function: {e}"))?;
        // Out-of-line text, by start address. A change elsewhere that no created text covers
        // is not this check's: the kernel_patching group judges the kernel's text.
        let mut texts: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        for p in sorted.iter().filter(|p| !self.in_window(p)) {
            if p.old.is_empty() {
                texts.insert(p.addr, p.new.clone());
            } else if p.new.is_empty() {
                texts.remove(&p.addr);
            } else if let Some((start, bytes)) = texts.range_mut(..=p.addr).next_back() {
                let off = (p.addr - start) as usize;
                let Some(held) = bytes.get_mut(off..off + p.old.len()) else {
                    continue;
                };
                if held != p.old.as_slice() {
                    return Err(format!(
                        "a record at {:#x} changes {:02x?}, but the text created at {start:#x} \
                         holds {held:02x?} there",
                        p.addr, p.old
                    ));
                }
                if p.new.len() == p.old.len() {
                    held.copy_from_slice(&p.new);
                }
            }
        }
        let mut out_of_line_bytes = 0;
        for (addr, bytes) in &texts {
            let k = kcore
                .read(*addr, bytes.len())
                .map_err(|e| format!("kcore at {addr:#x}: {e}"))?;
            if k != *bytes {
                return Err(format!(
                    "the out-of-line text at {addr:#x} ({} bytes) differs from its records: \
                     kcore {k:02x?}, records {bytes:02x?}",
                    bytes.len()
                ));
            }
            out_of_line_bytes += bytes.len();
        }
        Ok(Seen {
            now,
            replayed,
            out_of_line: texts.len(),
            out_of_line_bytes,
        })
    }

    /// Drains the recorder and judges, again until it agrees and `want` holds.
    fn point(
        &mut self,
        name: &str,
        kcore: &Kcore,
        recorder: &mut Recorder,
        want: impl Fn(&Seen) -> Result<(), String>,
    ) -> Case {
        let mut last = String::new();
        for read in 1..=READS {
            let drain = recorder.drain();
            if drain.lost_events > 0 || !drain.errors.is_empty() {
                return Case::fail(
                    name,
                    format!(
                        "perf lost {} records, errors {:?}",
                        drain.lost_events, drain.errors
                    ),
                );
            }
            self.pokes.extend(drain.pokes);
            match self.judge(kcore, |_| true) {
                Ok(seen) => match want(&seen) {
                    Ok(()) => {
                        return Case::pass(name).with_log(format!(
                            "{name}: {} records replayed onto the function, {} out-of-line \
                             texts ({} bytes) equal kcore, after {read} reads",
                            seen.replayed, seen.out_of_line, seen.out_of_line_bytes
                        ))
                    }
                    Err(e) => last = e,
                },
                Err(e) => last = e,
            }
            std::thread::sleep(PAUSE);
        }
        Case::fail(name, format!("after {READS} reads: {last}"))
    }
}

fn changed(seen: &Seen, before: &[u8]) -> Result<(), String> {
    if seen.now == before {
        Err("the function's text is as before: the probe wrote nothing".to_owned())
    } else {
        Ok(())
    }
}

fn restored(seen: &Seen, before: &[u8]) -> Result<(), String> {
    match seen.now.iter().zip(before).position(|(a, b)| a != b) {
        Some(i) => Err(format!(
            "the function's text differs from before at +{i:#x}"
        )),
        None => Ok(()),
    }
}

/// One probe's life, judged at each point: `armed`, `hit`, `disarmed`, `removed`.
fn life(
    probe: Probe,
    copy: &mut Copy,
    kcore: &Kcore,
    recorder: &mut Recorder,
    armed_hook: impl FnOnce(&Copy, &Kcore),
) -> Vec<Case> {
    let before = copy.before.clone();
    let mut c = Vec::new();
    if let Err(e) = probe.enable(true) {
        c.push(Case::fail("armed", e));
        return c;
    }
    c.push(
        copy.point("armed", kcore, recorder, |s| changed(s, &before))
            .with_log(probe.list_line().unwrap_or_else(|e| e)),
    );
    armed_hook(copy, kcore);
    let hits_before = probe.hits();
    for _ in 0..CALLS {
        // SAFETY: `getppid` takes nothing and cannot fail.
        unsafe { libc::getppid() };
    }
    let hit = hits_before.and_then(|b| probe.hits().map(|a| a - b));
    c.push(match hit {
        Ok(n) if n >= CALLS => copy
            .point("hit", kcore, recorder, |s| changed(s, &before))
            .with_log(format!("{n} hits of {CALLS} calls")),
        Ok(n) => Case::fail("hit", format!("{n} hits of {CALLS} calls")),
        Err(e) => Case::fail("hit", e),
    });
    c.push(match probe.enable(false) {
        Ok(()) => copy.point("disarmed", kcore, recorder, |s| restored(s, &before)),
        Err(e) => Case::fail("disarmed", e),
    });
    c.push(match probe.remove() {
        Ok(()) => copy.point("removed", kcore, recorder, |s| restored(s, &before)),
        Err(e) => Case::fail("removed", e),
    });
    c
}

/// The inner probe: at the first offset the kernel probes with a breakpoint of its own.
fn inner_probe(function: &str, base: u64) -> Result<(Probe, u64), String> {
    for offset in 1..=INNER_MAX {
        let Ok(probe) = Probe::create("inner", function, offset, base + offset) else {
            // Not an instruction boundary, or an instruction kprobes refuses.
            continue;
        };
        if !probe.through_ftrace()? {
            return Ok((probe, offset));
        }
        probe.remove()?;
    }
    Err(format!(
        "no offset in 1..={INNER_MAX} of {function} that kprobes probes with a breakpoint"
    ))
}

/// The cases, with a recorder of their own (whatever listener the suite holds).
pub fn cases(kcore: &Kcore) -> Case {
    let function = function();
    let setup = (|| -> Result<(Copy, Recorder), String> {
        let base = kallsyms::address(function, In::Kernel)?;
        let recorder = Recorder::open(&RecorderConfig { data_pages: 64 })
            .map_err(|e| format!("opening the recorder: {e}"))?;
        let before = kcore
            .read(base, WINDOW)
            .map_err(|e| format!("kcore at {base:#x}: {e}"))?;
        Ok((
            Copy {
                base,
                before,
                pokes: Vec::new(),
            },
            recorder,
        ))
    })();
    let (mut copy, mut recorder) = match setup {
        Ok(s) => s,
        Err(e) => return Case::fail("other_writers", e),
    };
    log(&format!(
        "other writers: kprobes on {function} at {:#x}",
        copy.base
    ));
    let mut c = Vec::new();
    // On x86 the entry is an ftrace site, so kprobes arms it through ftrace (textpoke's
    // records); on arm64 it writes a breakpoint.
    c.push(match Probe::create("entry", function, 0, copy.base) {
        Ok(probe) => Case::group(
            "kprobe_entry",
            life(probe, &mut copy, kcore, &mut recorder, |_, _| {}),
        ),
        Err(e) => Case::fail("kprobe_entry", e),
    });
    let mut withheld = None;
    c.push(match inner_probe(function, copy.base) {
        Ok((probe, offset)) => {
            let addr = probe.addr;
            Case::group(
                "kprobe_inner",
                life(probe, &mut copy, kcore, &mut recorder, |copy, kcore| {
                    // The check's control, while the probe is armed: without the records at
                    // the probe's address, the same judgement must fail.
                    let dropped = copy.pokes.iter().filter(|p| p.addr == addr).count();
                    let verdict = copy.judge(kcore, |p| p.addr != addr);
                    withheld = Some(match verdict {
                        _ if dropped == 0 => Case::fail(
                            "records_withheld_caught",
                            format!("no record at {addr:#x} to withhold: the defect did not run"),
                        ),
                        Ok(_) => Case::fail(
                            "records_withheld_caught",
                            format!("{dropped} records at {addr:#x} withheld, and it agreed"),
                        ),
                        Err(e) => Case::pass("records_withheld_caught")
                            .with_log(format!("{dropped} records at +{offset} withheld: {e}")),
                    });
                }),
            )
        }
        Err(e) => Case::fail("kprobe_inner", e),
    });
    c.push(withheld.unwrap_or_else(|| {
        Case::fail("records_withheld_caught", "the inner probe was never armed")
    }));
    Case::group("other_writers", c)
}
