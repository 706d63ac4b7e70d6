//! Text that appears while a tracer listens: a module loaded, run, unloaded and loaded again
//! under a recorder.
//!
//! A decoder that started before the module loaded has no copy of its text; textpoke describes
//! it (kernel/new_text.rs): a `PERF_RECORD_KSYMBOL` register of each of its texts with the bytes
//! in text-poke records with no old bytes, an unregister of its init text once it is live, and
//! of its core text when it goes. This check is the decoder: it keeps, per registered range,
//! the bytes the records give, in time order (a register starts an empty map, a record with no
//! old bytes fills it, a change record changes it, an unregister removes it), and at each point
//! requires every live map to be filled and equal to `/proc/kcore`:
//! - `loaded`: the static-key sample loaded; its core text, whose functions `/proc/kallsyms`
//!   places inside the registered range (the kernel's word, not textpoke's), is mapped;
//! - `init_text_retired`: its init text was registered and unregistered again, before the
//!   loader freed it;
//! - `run_and_flipped`: its executors run every site while every key flips, which changes its
//!   text through jump labels; the map must follow through the flips' records, and the text
//!   must differ from what was registered (the writer ran);
//! - `records_withheld_caught`: the control, at that point: the same judgement without the
//!   change records inside the map must fail;
//! - `unloaded`: its core text unregistered, no map left;
//! - `reloaded`: loaded again (at the same address if the allocator gives it back, which the
//!   log says) and mapped from its own register (`mapped_again`), then unloaded again
//!   (`unmapped_again`). (A case named as its group confuses kunit.py's parser.)
//!
//! A point is read again until it agrees, a bounded number of times, as in `writers.rs`: a
//! record and its write are not one atomic step for a reader.

use std::collections::BTreeMap;
use std::time::Duration;
use textpoke_agent::platform::guest::{self, log};
use textpoke_agent::platform::kallsyms;
use textpoke_agent::platform::kcore::Kcore;
use textpoke_agent::platform::perf::{KsymbolRec, Recorder, RecorderConfig, TextPokeRec};
use textpoke_agent::platform::realperf::{parse_script_text_pokes, Perf, PerfScriptPoke};
use textpoke_agent::platform::sys;
use textpoke_agent::report::ktap::Case;

use crate::scenarios::kernel_patching::write;

/// The module loaded mid-trace: static keys (jump labels) in its own text, and executors.
const MODULE: &str = "textpoke_keys";
const KEYS: &str = "/sys/kernel/debug/textpoke_keys";
/// `PERF_RECORD_KSYMBOL_TYPE_OOL`.
const OOL: u16 = 2;
/// Reads of one point before it counts as disagreeing, and the pause between them.
const READS: usize = 100;
const PAUSE: Duration = Duration::from_millis(20);

/// One event of the stream, for the decoder's replay.
#[derive(Clone, Debug)]
enum Event {
    Ksymbol(KsymbolRec),
    Poke(TextPokeRec),
}

impl Event {
    /// Time order, a register before the records at the same time and an unregister after.
    fn key(&self) -> (u64, u8) {
        match self {
            Self::Ksymbol(k) if !k.unregister => (k.time, 0),
            Self::Poke(p) => (p.time, 1),
            Self::Ksymbol(k) => (k.time, 2),
        }
    }
}

/// A registered range as the decoder holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Map {
    name: String,
    /// The bytes, `None` where no record filled them yet.
    bytes: Vec<Option<u8>>,
}

/// What the records built, replayed in time order.
#[derive(Debug, Default)]
struct Replayed {
    maps: BTreeMap<u64, Map>,
    /// Change records applied inside a map.
    changes: usize,
    /// Registers and unregisters seen, as `(name, addr, len, unregister)`.
    history: Vec<(String, u64, u32, bool)>,
}

/// Replays `events` (sorted with [`Event::key`]); `keep` decides which change records count.
fn replay(events: &[Event], keep: impl Fn(&TextPokeRec) -> bool) -> Result<Replayed, String> {
    let mut r = Replayed::default();
    for e in events {
        match e {
            Event::Ksymbol(k) if k.ksym_type != OOL => {}
            Event::Ksymbol(k) => {
                r.history
                    .push((k.name.clone(), k.addr, k.len, k.unregister));
                if k.unregister {
                    if r.maps.remove(&k.addr).is_none() {
                        return Err(format!(
                            "an unregister of {} at {:#x} with no map there",
                            k.name, k.addr
                        ));
                    }
                } else {
                    let map = Map {
                        name: k.name.clone(),
                        bytes: vec![None; k.len as usize],
                    };
                    if let Some(old) = r.maps.insert(k.addr, map) {
                        return Err(format!(
                            "{} registered at {:#x}, where {} was never unregistered",
                            k.name, k.addr, old.name
                        ));
                    }
                }
            }
            Event::Poke(p) => {
                let Some((start, map)) = r.maps.range_mut(..=p.addr).next_back() else {
                    continue;
                };
                let off = (p.addr - start) as usize;
                if off >= map.bytes.len() {
                    continue;
                }
                let len = p.new.len().max(p.old.len());
                let Some(held) = map.bytes.get_mut(off..off + len) else {
                    return Err(format!(
                        "a record at {:#x} of {len} bytes runs past the end of {}",
                        p.addr, map.name
                    ));
                };
                if p.old.is_empty() {
                    for (h, b) in held.iter_mut().zip(&p.new) {
                        *h = Some(*b);
                    }
                } else if keep(p) {
                    let now: Vec<Option<u8>> = p.old.iter().map(|&b| Some(b)).collect();
                    if held != now.as_slice() {
                        return Err(format!(
                            "a record at {:#x} changes {:02x?}, but {} holds {:02x?} there",
                            p.addr, p.old, map.name, held
                        ));
                    }
                    for (h, b) in held.iter_mut().zip(&p.new) {
                        *h = Some(*b);
                    }
                    r.changes += 1;
                }
            }
        }
    }
    Ok(r)
}

/// Every live map, filled and equal to kcore; the number of bytes compared.
fn judge(r: &Replayed, kcore: &Kcore) -> Result<usize, String> {
    let mut bytes = 0;
    for (addr, map) in &r.maps {
        if let Some(i) = map.bytes.iter().position(Option::is_none) {
            return Err(format!(
                "{} at {addr:#x}: no record gave byte +{i:#x} of {:#x}",
                map.name,
                map.bytes.len()
            ));
        }
        let k = kcore
            .read(*addr, map.bytes.len())
            .map_err(|e| format!("kcore at {addr:#x}: {e}"))?;
        if let Some(i) = k.iter().zip(&map.bytes).position(|(a, b)| Some(*a) != *b) {
            return Err(format!(
                "{} at {addr:#x} differs from kcore at +{i:#x}: kcore {:02x?}, records {:02x?}",
                map.name,
                &k[i..(i + 8).min(k.len())],
                &map.bytes[i..(i + 8).min(k.len())]
            ));
        }
        bytes += k.len();
    }
    Ok(bytes)
}

/// The decoder: every event so far.
struct Decoder {
    events: Vec<Event>,
}

impl Decoder {
    fn take(&mut self, recorder: &mut Recorder) -> Result<(), String> {
        let drain = recorder.drain();
        if !drain.is_clean() || drain.lost_events > 0 {
            return Err(format!(
                "perf lost {} records ({} full buffers), errors {:?}",
                drain.lost_events, drain.full_buffers, drain.errors
            ));
        }
        self.events
            .extend(drain.ksymbols.into_iter().map(Event::Ksymbol));
        self.events.extend(drain.pokes.into_iter().map(Event::Poke));
        self.events.sort_by_key(Event::key);
        Ok(())
    }

    /// Drains and judges, again until it agrees and `want` holds of the replay: the replay and
    /// a line that says what agreed.
    fn agree(
        &mut self,
        name: &str,
        kcore: &Kcore,
        recorder: &mut Recorder,
        want: impl Fn(&Replayed) -> Result<String, String>,
    ) -> Result<(Replayed, String), String> {
        let mut last = String::new();
        for read in 1..=READS {
            self.take(recorder)?;
            let verdict = replay(&self.events, |_| true).and_then(|r| {
                let bytes = judge(&r, kcore)?;
                let line = want(&r)?;
                Ok((r, bytes, line))
            });
            match verdict {
                Ok((r, bytes, line)) => {
                    let line = format!(
                        "{name}: {} maps ({bytes} bytes) equal kcore, {} change records \
                         replayed, after {read} reads; {line}",
                        r.maps.len(),
                        r.changes
                    );
                    return Ok((r, line));
                }
                Err(e) => last = e,
            }
            std::thread::sleep(PAUSE);
        }
        Err(format!("after {READS} reads: {last}"))
    }

    /// [`Decoder::agree`] as a case.
    fn point(
        &mut self,
        name: &str,
        kcore: &Kcore,
        recorder: &mut Recorder,
        want: impl Fn(&Replayed) -> Result<String, String>,
    ) -> (Case, Option<Replayed>) {
        match self.agree(name, kcore, recorder, want) {
            Ok((r, line)) => (Case::pass(name).with_log(line), Some(r)),
            Err(e) => (Case::fail(name, e), None),
        }
    }
}

/// The one live map named `[MODULE]`, as `(addr, len)`.
fn core_map(r: &Replayed) -> Result<(u64, usize), String> {
    let want = format!("[{MODULE}]");
    let found: Vec<_> = r.maps.iter().filter(|(_, m)| m.name == want).collect();
    match found.as_slice() {
        [(addr, m)] => Ok((**addr, m.bytes.len())),
        _ => Err(format!(
            "{} maps named {want} (registers and unregisters so far: {:?})",
            found.len(),
            r.history
        )),
    }
}

/// Whether `/proc/kallsyms` places every function of the module inside `[addr, addr + len)`.
fn functions_inside(addr: u64, len: usize) -> Result<String, String> {
    let functions = kallsyms::module_functions(MODULE)?;
    let outside: Vec<_> = functions
        .iter()
        .filter(|(a, _)| *a < addr || *a >= addr + len as u64)
        .collect();
    if functions.is_empty() || !outside.is_empty() {
        return Err(format!(
            "{} of {} functions of {MODULE} in /proc/kallsyms lie outside its map at \
             {addr:#x}+{len:#x}: {outside:x?}",
            outside.len(),
            functions.len()
        ));
    }
    Ok(format!(
        "[{MODULE}] at {addr:#x}, {len:#x} bytes, holds its {} functions",
        functions.len()
    ))
}

/// The workload of [`real_perf_case`]: `AGENT new-text-cycle`, run by `perf record`.
pub const CYCLE_SUBCOMMAND: &str = "new-text-cycle";
/// Where the workload leaves the module's text as kcore showed it after the flips: the address
/// in hex, a newline, then the bytes.
const CYCLE_SNAPSHOT: &str = "/tmp/new-text-snapshot";
/// How much the workload reads from the page of the module's first function: past its text.
const SNAPSHOT_LEN: usize = 16 << 12;

/// The workload: [`MODULE`] loaded, its executors run while every key flips, its text read
/// from kcore into [`CYCLE_SNAPSHOT`], and unloaded.
pub fn cycle() -> Result<(), String> {
    let kcore = Kcore::open().map_err(|e| format!("/proc/kcore: {e}"))?;
    guest::load(MODULE, "")?;
    let run = (|| {
        for c in ["start", "flip", "stop"] {
            write(&format!("{KEYS}/control"), c)?;
        }
        let (lo, _) = kallsyms::function_span(MODULE)?;
        let base = lo & !0xfff;
        let text = kcore
            .read(base, SNAPSHOT_LEN)
            .map_err(|e| format!("kcore at {base:#x}: {e}"))?;
        let mut out = format!("{base:x}\n").into_bytes();
        out.extend(text);
        std::fs::write(CYCLE_SNAPSHOT, out).map_err(|e| format!("{CYCLE_SNAPSHOT}: {e}"))
    })();
    let unloaded = sys::unload_module(MODULE).map_err(|e| format!("unloading {MODULE}: {e}"));
    run.and(unloaded)
}

/// `PERF_RECORD_KSYMBOL addr ADDR len LEN type TYPE flags 0xFLAGS name NAME`, as
/// `perf_event__fprintf_ksymbol()` prints it (after any `-F` columns), as a [`KsymbolRec`]
/// with the line's time, if the line is one.
fn parse_script_ksymbol(line: &str) -> Option<KsymbolRec> {
    let rest = &line[line.find("PERF_RECORD_KSYMBOL ")? + "PERF_RECORD_KSYMBOL ".len()..];
    let w: Vec<&str> = rest.split_whitespace().collect();
    let ["addr", addr, "len", len, "type", ty, "flags", flags, "name", name, ..] = w.as_slice()
    else {
        return None;
    };
    let time = line
        .split_whitespace()
        .find_map(|t| {
            t.strip_suffix(':')
                .and_then(|t| t.replace('.', "").parse().ok())
        })
        .unwrap_or(0);
    Some(KsymbolRec {
        addr: u64::from_str_radix(addr.trim_start_matches("0x"), 16).ok()?,
        len: len.parse().ok()?,
        ksym_type: ty.parse().ok()?,
        unregister: u16::from_str_radix(flags.trim_start_matches("0x"), 16).ok()? & 1 != 0,
        name: (*name).to_owned(),
        time,
    })
}

/// Debian's perf, recording while [`cycle`] runs: `perf script` must show the module's
/// register, its bytes, the flips' change records and its unregister, and those records
/// replayed as [`replay`] does must give the text the workload read from kcore. How many
/// records perf's own bookkeeping found no map for is logged, not judged: perf 6.12 loses a
/// registered map in two ways (docs/protocol.md, "Text that appears").
pub fn real_perf_case(perf: &Perf) -> Case {
    const NAME: &str = "real_perf_maps_new_module";
    let run = || -> Result<String, String> {
        let me = std::env::current_exe().map_err(|e| e.to_string())?;
        const DIR: &str = "/tmp/perf-new-text";
        let dir = std::path::Path::new(DIR);
        let _ = std::fs::remove_dir_all(dir);
        let _ = std::fs::remove_file(CYCLE_SNAPSHOT);
        perf.record(
            dir,
            &[me.to_string_lossy().as_ref(), CYCLE_SUBCOMMAND],
            &["--no-bpf-event", "-e", "dummy"],
        )
        .map_err(|e| format!("perf record: {e}"))?;
        let snapshot = std::fs::read(CYCLE_SNAPSHOT)
            .map_err(|e| format!("{CYCLE_SNAPSHOT} (the workload failed?): {e}"))?;
        let nl = snapshot
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("no address in the snapshot")?;
        let base = std::str::from_utf8(&snapshot[..nl])
            .ok()
            .and_then(|a| u64::from_str_radix(a, 16).ok())
            .ok_or("a bad address in the snapshot")?;
        let text = &snapshot[nl + 1..];
        let script = perf
            .run([
                "script",
                "-v",
                "-i",
                DIR,
                "--show-text-poke-events",
                "--show-bpf-events",
                "--ns",
                "-F",
                "time",
            ])
            .map_err(|e| format!("perf script: {e}"))?;
        // `perf report -D` dumps every record raw: the module's must be among them.
        let dump = perf
            .run(["report", "-D", "-i", DIR])
            .map_err(|e| format!("perf report -D: {e}"))?;
        let dumped = |what: &str| {
            dump.stdout
                .lines()
                .filter(|l| l.contains(what) && l.contains(&format!("[{MODULE}]")))
                .count()
        };
        let dumped_ksymbols = dumped("PERF_RECORD_KSYMBOL");
        if dumped_ksymbols < 2 {
            return Err(format!(
                "perf report -D shows {dumped_ksymbols} KSYMBOL records of [{MODULE}]"
            ));
        }
        let ksymbols: Vec<KsymbolRec> = script
            .stdout
            .lines()
            .filter_map(parse_script_ksymbol)
            .collect();
        let pokes = parse_script_text_pokes(&script.stdout).map_err(|e| e.to_string())?;
        let mut events: Vec<Event> = ksymbols.iter().cloned().map(Event::Ksymbol).collect();
        events.extend(pokes.iter().map(|p| {
            Event::Poke(TextPokeRec {
                addr: p.addr,
                old: p.old.clone(),
                new: p.new.clone(),
                time: p.time_ns.unwrap_or(0),
                ..TextPokeRec::default()
            })
        }));
        events.sort_by_key(Event::key);
        let name = format!("[{MODULE}]");
        let register = ksymbols
            .iter()
            .find(|k| k.name == name && !k.unregister)
            .ok_or(format!(
                "perf script shows no register of {name}: {ksymbols:?}"
            ))?;
        if !ksymbols
            .iter()
            .any(|k| k.name == name && k.unregister && k.addr == register.addr)
        {
            return Err(format!(
                "perf script shows no unregister of {name}: {ksymbols:?}"
            ));
        }
        // The text as perf held it before the module unloaded: every event but the unregisters.
        let held: Vec<Event> = events
            .into_iter()
            .filter(|e| !matches!(e, Event::Ksymbol(k) if k.unregister))
            .collect();
        let r = replay(&held, |_| true)?;
        let map = r.maps.get(&register.addr).ok_or("no map at the register")?;
        let off = register
            .addr
            .checked_sub(base)
            .map(|o| o as usize)
            .filter(|o| o + map.bytes.len() <= text.len())
            .ok_or(format!(
                "{name} at {:#x} lies outside the workload's snapshot at {base:#x}",
                register.addr
            ))?;
        let kcore = &text[off..off + map.bytes.len()];
        if let Some(i) = kcore
            .iter()
            .zip(&map.bytes)
            .position(|(a, b)| Some(*a) != *b)
        {
            return Err(format!(
                "perf's {name} differs from kcore at +{i:#x}: kcore {:02x?}, perf {:02x?}",
                &kcore[i..(i + 8).min(kcore.len())],
                &map.bytes[i..(i + 8).min(kcore.len())]
            ));
        }
        let end = register.addr + u64::from(register.len);
        let unmapped: Vec<&str> = script
            .stderr
            .lines()
            .filter(|l| l.contains("Failed to find kernel text poke address map"))
            .filter(|l| {
                l.rsplit(' ')
                    .next()
                    .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
                    .is_some_and(|a| a >= register.addr && a < end)
            })
            .collect();
        let inside = |p: &&PerfScriptPoke| p.addr >= register.addr && p.addr < end;
        let changes = pokes
            .iter()
            .filter(inside)
            .filter(|p| !p.old.is_empty())
            .count();
        if changes == 0 {
            return Err(format!("perf script shows no change record in {name}"));
        }
        // Not judged: whether perf 6.12 found a map for each record. It drops the maps a
        // register made when it loads its kcore copy later, and an unregister inside the
        // copy's module map removes that whole map (docs/protocol.md, "Text that appears").
        Ok(format!(
            "perf script: {name} at {:#x}, {} bytes, registered and unregistered ({dumped_ksymbols} \
             KSYMBOL records of it in perf report -D); {changes} change records in it; its text replayed from perf's records equals kcore ({} \
             bytes); perf found no map for {} records",
            register.addr,
            register.len,
            map.bytes.len(),
            unmapped.len()
        ))
    };
    match run() {
        Ok(line) => Case::pass(NAME).with_log(line),
        Err(e) => Case::fail(NAME, e),
    }
}

/// The `loaded` point alone, with a recorder of its own, and the module unloaded again: for
/// the seeded defect that describes no module (scenarios/controls.rs), which must fail it with
/// no map of the module.
pub fn loaded_once(kcore: &Kcore) -> Result<String, String> {
    if std::path::Path::new(&format!("/sys/module/{MODULE}")).exists() {
        return Err(format!("{MODULE} is loaded already"));
    }
    let mut recorder = Recorder::open(&RecorderConfig { data_pages: 64 })
        .map_err(|e| format!("opening the recorder: {e}"))?;
    let mut d = Decoder { events: Vec::new() };
    guest::load(MODULE, "")?;
    let verdict = d.agree("loaded", kcore, &mut recorder, |r| {
        let (addr, len) = core_map(r)?;
        functions_inside(addr, len)
    });
    sys::unload_module(MODULE).map_err(|e| format!("unloading {MODULE}: {e}"))?;
    verdict.map(|(_, line)| line)
}

/// The cases, with a recorder of their own.
pub fn cases(kcore: &Kcore) -> Case {
    if std::path::Path::new(&format!("/sys/module/{MODULE}")).exists() {
        return Case::fail("new_text", format!("{MODULE} is loaded already"));
    }
    let mut recorder = match Recorder::open(&RecorderConfig { data_pages: 64 }) {
        Ok(r) => r,
        Err(e) => return Case::fail("new_text", format!("opening the recorder: {e}")),
    };
    let mut d = Decoder { events: Vec::new() };
    log(&format!("new text: {MODULE} loaded mid-trace"));
    let mut c = Vec::new();
    if let Err(e) = guest::load(MODULE, "") {
        return Case::fail("new_text", e);
    }
    let (case, loaded) = d.point("loaded", kcore, &mut recorder, |r| {
        let (addr, len) = core_map(r)?;
        functions_inside(addr, len)
    });
    c.push(case);
    let first = loaded.as_ref().and_then(|r| core_map(r).ok());
    c.push(match loaded {
        None => Case::fail("init_text_retired", "not loaded"),
        Some(r) => {
            let init = format!("[{MODULE}].init");
            let seen: Vec<_> = r.history.iter().filter(|h| h.0 == init).collect();
            match seen.as_slice() {
                [(_, a, l, false), (_, b, m, true)] if a == b && l == m => {
                    Case::pass("init_text_retired").with_log(format!(
                        "{init} at {a:#x}, {l:#x} bytes, registered then unregistered"
                    ))
                }
                _ => Case::fail(
                    "init_text_retired",
                    format!("{init}: {seen:?}, not one register and its unregister"),
                ),
            }
        }
    });
    let registered = first.and_then(|(addr, len)| {
        replay(&d.events, |_| false)
            .ok()
            .and_then(|r| r.maps.get(&addr).cloned())
            .map(|m| (addr, len, m))
    });
    let flipped = write(&format!("{KEYS}/control"), "start")
        .and_then(|()| write(&format!("{KEYS}/control"), "flip"))
        .and_then(|()| write(&format!("{KEYS}/control"), "stop"));
    c.push(match flipped {
        Err(e) => Case::fail("run_and_flipped", e),
        Ok(()) => {
            let (case, _) = d.point("run_and_flipped", kcore, &mut recorder, |r| {
                let (addr, _) = core_map(r)?;
                match &registered {
                    Some((a, _, m)) if *a == addr && r.maps.get(&addr) != Some(m) => {
                        Ok(format!("{} change records since the register", r.changes))
                    }
                    Some(_) => Err("the text is as registered: the flips wrote nothing".into()),
                    None => Err("no register to compare with".into()),
                }
            });
            case
        }
    });
    // The control: the flips' records withheld, the same judgement must fail.
    c.push(match &registered {
        None => Case::fail("records_withheld_caught", "no register to withhold from"),
        Some((addr, len, _)) => {
            let inside = |p: &TextPokeRec| p.addr >= *addr && p.addr < addr + *len as u64;
            let withheld = d
                .events
                .iter()
                .filter(|e| matches!(e, Event::Poke(p) if !p.old.is_empty() && inside(p)))
                .count();
            let verdict = replay(&d.events, |p| !inside(p)).and_then(|r| judge(&r, kcore));
            match verdict {
                _ if withheld == 0 => Case::fail(
                    "records_withheld_caught",
                    "no change record inside the module to withhold: the defect did not run",
                ),
                Ok(_) => Case::fail(
                    "records_withheld_caught",
                    format!("{withheld} change records withheld, and it agreed"),
                ),
                Err(e) => Case::pass("records_withheld_caught")
                    .with_log(format!("{withheld} change records withheld: {e}")),
            }
        }
    });
    let gone = |r: &Replayed| match r.maps.len() {
        0 => Ok("no map left".to_owned()),
        n => Err(format!("{n} maps left: {:?}", r.history)),
    };
    c.push(match sys::unload_module(MODULE) {
        Err(e) => Case::fail("unloaded", format!("unloading {MODULE}: {e}")),
        Ok(()) => d.point("unloaded", kcore, &mut recorder, gone).0,
    });
    c.push(match guest::load(MODULE, "") {
        Err(e) => Case::fail("reloaded", e),
        Ok(()) => {
            let (case, _) = d.point("mapped_again", kcore, &mut recorder, |r| {
                let (addr, len) = core_map(r)?;
                let inside = functions_inside(addr, len)?;
                let place = match first {
                    Some((a, _)) if a == addr => "at the same address".to_owned(),
                    Some((a, _)) => format!("{:#x} bytes from the first load", addr.abs_diff(a)),
                    None => "the first load unmapped".to_owned(),
                };
                Ok(format!("{inside}, {place}"))
            });
            let unloaded = sys::unload_module(MODULE)
                .map_err(|e| format!("unloading {MODULE}: {e}"))
                .map(|()| d.point("unmapped_again", kcore, &mut recorder, gone).0);
            Case::group(
                "reloaded",
                vec![
                    case,
                    unloaded.unwrap_or_else(|e| Case::fail("unmapped_again", e)),
                ],
            )
        }
    });
    Case::group("new_text", c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ksym(addr: u64, len: u32, unregister: bool, time: u64) -> Event {
        Event::Ksymbol(KsymbolRec {
            addr,
            len,
            ksym_type: OOL,
            unregister,
            name: "[m]".to_owned(),
            time,
        })
    }

    fn poke(addr: u64, old: &[u8], new: &[u8], time: u64) -> Event {
        Event::Poke(TextPokeRec {
            addr,
            old: old.to_vec(),
            new: new.to_vec(),
            time,
            ..TextPokeRec::default()
        })
    }

    fn sorted(mut events: Vec<Event>) -> Vec<Event> {
        events.sort_by_key(Event::key);
        events
    }

    fn bytes(r: &Replayed, addr: u64) -> Vec<Option<u8>> {
        r.maps[&addr].bytes.clone()
    }

    #[test]
    fn a_register_is_filled_then_changed_then_removed() {
        let before = poke(0x1001, &[9], &[8], 5);
        let events = sorted(vec![
            // A change before the register (the loader's) is not the map's: its result is in
            // the register's bytes.
            before.clone(),
            // At the register's time, listed first: the register still comes first.
            poke(0x1000, &[], &[1, 2], 10),
            ksym(0x1000, 4, false, 10),
            poke(0x1002, &[], &[3, 4], 11),
            poke(0x1001, &[2], &[7], 12),
        ]);
        let r = replay(&events, |_| true).unwrap();
        assert_eq!(bytes(&r, 0x1000), [Some(1), Some(7), Some(3), Some(4)]);
        assert_eq!(r.changes, 1);
        // Withheld, the change is not applied.
        let r = replay(&events, |_| false).unwrap();
        assert_eq!(bytes(&r, 0x1000), [Some(1), Some(2), Some(3), Some(4)]);
        // The unregister at the same time as the last record comes after it.
        let mut gone = events.clone();
        gone.push(ksym(0x1000, 4, true, 12));
        let r = replay(&sorted(gone), |_| true).unwrap();
        assert!(r.maps.is_empty());
        assert_eq!(r.history.len(), 2);
    }

    #[test]
    fn holes_wrong_old_bytes_and_unmatched_ksymbols_are_errors() {
        let r = replay(
            &sorted(vec![
                ksym(0x1000, 4, false, 1),
                poke(0x1000, &[], &[1, 2], 2),
            ]),
            |_| true,
        )
        .unwrap();
        assert_eq!(bytes(&r, 0x1000)[2], None);
        let wrong = sorted(vec![
            ksym(0x1000, 2, false, 1),
            poke(0x1000, &[], &[1, 2], 2),
            poke(0x1000, &[5], &[6], 3),
        ]);
        assert!(replay(&wrong, |_| true)
            .unwrap_err()
            .contains("changes [05]"));
        let past_end = sorted(vec![
            ksym(0x1000, 2, false, 1),
            poke(0x1001, &[], &[1, 2], 2),
        ]);
        assert!(replay(&past_end, |_| true)
            .unwrap_err()
            .contains("runs past the end"));
        assert!(replay(&[ksym(0x1000, 2, true, 1)], |_| true)
            .unwrap_err()
            .contains("no map there"));
        let twice = sorted(vec![ksym(0x1000, 2, false, 1), ksym(0x1000, 2, false, 2)]);
        assert!(replay(&twice, |_| true)
            .unwrap_err()
            .contains("never unregistered"));
    }

    #[test]
    fn perf_script_ksymbol_lines_parse() {
        let k = parse_script_ksymbol(
            "    28.957505611: PERF_RECORD_KSYMBOL addr ffffffffa003e000 len 4096 type 2 \
             flags 0x1 name [textpoke_keys].init",
        )
        .unwrap();
        assert_eq!(
            (
                k.addr,
                k.len,
                k.ksym_type,
                k.unregister,
                k.name.as_str(),
                k.time
            ),
            (
                0xffff_ffff_a003_e000,
                4096,
                2,
                true,
                "[textpoke_keys].init",
                28_957_505_611
            )
        );
        assert_eq!(
            parse_script_ksymbol("PERF_RECORD_TEXT_POKE ffffffffa003e000"),
            None
        );
        assert_eq!(
            parse_script_ksymbol("PERF_RECORD_KSYMBOL addr zz len 1 type 2 flags 0x0 name x"),
            None
        );
    }
}
