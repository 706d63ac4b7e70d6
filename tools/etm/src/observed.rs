//! A boot's observed executions as a CoreSight trace, decoded by perf against three record
//! streams.
//!
//! The guest's breakpoint observer knows which path each CPU took at a watched branch site and
//! when ([`crate::dataset`]). This module writes the ETMv4 trace an ETM would emit for those
//! executions, puts it in a perf.data with the boot's `PERF_RECORD_TEXT_POKE` records of the
//! same sites, and has perf decode it. For every execution in the trace, the decoded path at
//! the site is compared with the one the CPU took.
//!
//! # The trace
//!
//! One trace queue (`--per-thread`) holds every CPU's executions in time order: which CPU ran
//! an execution does not change which bytes were at its site at its time, and that is all the
//! decode of one execution depends on. Each execution is a fragment, as an ETM filtered to the
//! sites' addresses emits one whenever a CPU enters the range: Trace On, a timestamp (an ETM
//! emits one when the trace restarts), Address with Context at the site (EL1), one E atom. The
//! timestamp is the perf time of the path's breakpoint hit (TIME_CONV maps trace timestamps 1:1
//! to perf time), a few instructions after the site ran: the observer has no earlier time. The
//! image perf decodes against holds each site's bytes as `/proc/kcore` read them before the
//! run, and at the site's fall-through address a `B` to the taken path, the encoder's own: so
//! the one atom is the site's jump when the site holds the jump, and that `B` when it holds the
//! `NOP`. The decoded branch's source says which bytes perf held at the site when it decoded
//! that execution.
//!
//! # What is left out, and why
//!
//! - Executions whose CPU read textpoke's guard at the site: on hardware the trace shows the
//!   `BRK` exception there and then the address the handler resumed at, so no decoder takes
//!   the site's bytes for them, right or wrong.
//! - Executions the observer cannot place (its "undecided", observer.rs): the path that the
//!   site's last record before the hit replaced, with no guard read. The execution may have
//!   run the site before that record and been interrupted before its path's breakpoint; the
//!   trace would time its atom before the record, the hit's time is after it.
//!
//! # The streams
//!
//! - [`Stream::Recorded`]: the records as perf delivered them in the guest. With perf's
//!   cs-etm applying records in time order (tools/patches/0012), every execution must decode
//!   to its path.
//! - [`Stream::Dropped`]: no record, as the stock arm64 kernel writes none.
//! - [`Stream::BeforeAfter`]: seed 001's pair in place of each record, as an unguarded
//!   change emits it: a BEFORE record (the old bytes written over themselves, "about to
//!   change") at the record's time, and the AFTER record (old and new) once the write is
//!   done, placed just after the first execution that ran the new instruction without the
//!   guard. That AFTER is a record emitted after its write, the defect the guarded protocol's
//!   order exists to prevent; placed any later, more executions would decode wrong.
//!
//! The two last are the check's seeded defects: each must produce wrong paths.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::a64::{self, NOP};
use crate::dataset::{Dataset, Exec, Poke, Site};
use crate::decode::{self, PID, TRACE_ID};
use crate::elf;
use crate::etm;
use crate::perfdata::{self as pd, PerfFile};

/// Which records the perf.data carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// The boot's own.
    Recorded,
    /// None.
    Dropped,
    /// A BEFORE record at each record's time, and its AFTER after the write.
    BeforeAfter,
}

impl Stream {
    /// Every stream, the one that must decode right first.
    pub const ALL: [Self; 3] = [Self::Recorded, Self::Dropped, Self::BeforeAfter];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Recorded => "recorded",
            Self::Dropped => "dropped",
            Self::BeforeAfter => "before-after",
        }
    }
}

/// How the executions of a dataset were sorted before the trace was written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// In the trace.
    pub traced: usize,
    /// Left out: the CPU read the guard.
    pub trapped: usize,
    /// Left out: the observer cannot place them.
    pub undecided: usize,
}

/// One stream's decode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The stream.
    pub stream: Stream,
    /// Records in its perf.data.
    pub records: usize,
    /// Executions in the trace.
    pub traced: usize,
    /// Executions perf decoded (branches at a watched site or its fall-through).
    pub decoded: usize,
    /// Of those, decoded with the other path than the CPU took.
    pub wrong: usize,
    /// Decoder errors in perf's packet dump, and perf's unexpected stderr lines.
    pub errors: Vec<String>,
    /// The first wrong executions, for the report.
    pub examples: Vec<String>,
}

/// The dataset's sites by address.
fn by_addr(d: &Dataset) -> HashMap<u64, &Site> {
    d.sites.iter().map(|s| (s.watched.addr, s)).collect()
}

/// The dataset's sites by index.
fn by_index(d: &Dataset) -> HashMap<usize, &Site> {
    d.sites.iter().map(|s| (s.watched.index, s)).collect()
}

/// A site's path after `bytes` were written to it, if they are one of its instructions.
fn path_of(site: &Site, bytes: &[u8]) -> Option<u8> {
    if bytes == site.watched.on.as_slice() {
        Some(1)
    } else if bytes == site.watched.off.as_slice() {
        Some(0)
    } else {
        None
    }
}

/// Per site index: `(record time, path after it)` in time order. A record at no watched site
/// is an error, as is one whose new bytes are neither instruction, and one whose old bytes are
/// not what the site held before it by the site's initial bytes and its earlier records: a
/// decoder that checks them would refuse it, and perf, which does not, would hide it.
fn timelines(d: &Dataset) -> Result<HashMap<usize, Vec<(u64, u8)>>, String> {
    let by_addr = by_addr(d);
    let mut pokes: Vec<&Poke> = d.pokes.iter().collect();
    pokes.sort_by_key(|p| p.time);
    let mut out: HashMap<usize, Vec<(u64, u8)>> = HashMap::new();
    for p in pokes {
        let s = by_addr
            .get(&p.addr)
            .ok_or_else(|| format!("a record at {:#x}, no watched site", p.addr))?;
        let path = path_of(s, &p.new)
            .ok_or_else(|| format!("a record writes {:02x?} at site {:#x}", p.new, p.addr))?;
        let events = out.entry(s.watched.index).or_default();
        let held = events.last().map_or(s.initial, |e| e.1);
        let held_bytes = if held == 1 {
            &s.watched.on
        } else {
            &s.watched.off
        };
        if p.old != *held_bytes {
            return Err(format!(
                "the record at {:#x} at {} ns changes {:02x?}, but the site held {held_bytes:02x?} \
                 by its earlier records",
                p.addr, p.time, p.old
            ));
        }
        events.push((p.time, path));
    }
    Ok(out)
}

/// The path in effect at `t` at `site`.
fn path_at(site: &Site, timeline: &[(u64, u8)], t: u64) -> u8 {
    let j = timeline.partition_point(|e| e.0 <= t);
    j.checked_sub(1)
        .and_then(|i| timeline.get(i))
        .map_or(site.initial, |e| e.1)
}

/// The executions the trace holds, in time order, and how the rest were left out.
pub fn select(d: &Dataset) -> Result<(Vec<Exec>, Selection), String> {
    let sites = by_index(d);
    let tl = timelines(d)?;
    let mut sel = Selection::default();
    let mut out = Vec::new();
    for e in &d.execs {
        let site = sites
            .get(&e.site)
            .ok_or_else(|| format!("an execution at site {}, which is not watched", e.site))?;
        let events = tl.get(&e.site).map_or(&[][..], Vec::as_slice);
        let j = events.partition_point(|r| r.0 <= e.time);
        // The observer's rule (observer.rs): the path in effect, or the one the site's next
        // record installs (a violation unless the guard was read), goes in the trace.
        if e.guard {
            sel.trapped += 1;
        } else if path_at(site, events, e.time) == e.path
            || events.get(j).is_some_and(|next| next.1 == e.path)
        {
            out.push(*e);
        } else {
            sel.undecided += 1;
        }
    }
    out.sort_by_key(|e| e.time);
    sel.traced = out.len();
    Ok((out, sel))
}

/// The records of `stream`, in time order.
pub fn stream_records(d: &Dataset, traced: &[Exec], stream: Stream) -> Result<Vec<Poke>, String> {
    match stream {
        Stream::Recorded => Ok(d.pokes.clone()),
        Stream::Dropped => Ok(Vec::new()),
        Stream::BeforeAfter => {
            let by_addr = by_addr(d);
            let mut out = Vec::new();
            for (i, p) in d.pokes.iter().enumerate() {
                let site = by_addr
                    .get(&p.addr)
                    .ok_or_else(|| format!("a record at {:#x}, no watched site", p.addr))?;
                let path = path_of(site, &p.new)
                    .ok_or_else(|| format!("a record writes {:02x?} at {:#x}", p.new, p.addr))?;
                let next = d.pokes[i + 1..]
                    .iter()
                    .find(|q| q.addr == p.addr)
                    .map_or(u64::MAX, |q| q.time);
                // The first unguarded execution of the new instruction before the site's next
                // record: the write had happened by then.
                let index = site.watched.index;
                let first = traced.iter().find(|e| {
                    e.site == index && e.path == path && e.time > p.time && e.time < next
                });
                let after = match first {
                    Some(e) if e.time + 1 < next => e.time + 1,
                    _ => p.time,
                };
                out.push(Poke {
                    new: p.old.clone(),
                    ..p.clone()
                });
                out.push(Poke {
                    time: after,
                    ..p.clone()
                });
            }
            // Stable: a BEFORE stays ahead of an AFTER at the same time.
            out.sort_by_key(|p| p.time);
            Ok(out)
        }
    }
}

/// The image perf decodes against: from the page of the lowest site to the page after the
/// highest fall-through, `NOP` but for each site's bytes before the run and a `B` to its taken
/// path at its fall-through address.
fn image(d: &Dataset) -> Result<(u64, Vec<u32>), String> {
    let mut lo = u64::MAX;
    let mut hi = 0;
    for Site { watched: w, .. } in &d.sites {
        if w.on.len() != 4 || w.off.len() != 4 || w.fall != w.addr + 4 {
            return Err(format!(
                "site {:#x}: not an arm64 branch site (on {:02x?}, off {:02x?}, fall {:#x})",
                w.addr, w.on, w.off, w.fall
            ));
        }
        lo = lo.min(w.addr);
        hi = hi.max(w.fall + 4);
    }
    if d.sites.is_empty() {
        return Err("no watched site".into());
    }
    let base = lo & !0xfff;
    let end = (hi + 0xfff) & !0xfff;
    if end - base > 1 << 24 {
        return Err(format!("the sites span {:#x} bytes", end - base));
    }
    let mut words = vec![NOP; ((end - base) / 4) as usize];
    let mut used = HashMap::new();
    for Site {
        watched: w,
        initial,
    } in &d.sites
    {
        let before = if *initial == 1 { &w.on } else { &w.off };
        let word = u32::from_le_bytes(before.as_slice().try_into().map_err(|_| "4 bytes")?);
        for (at, what) in [(w.addr, word), (w.fall, a64::b(w.fall, w.taken))] {
            if used.insert(at, w.index).is_some() {
                return Err(format!(
                    "site {:#x}: its words overlap another site's",
                    w.addr
                ));
            }
            words[((at - base) / 4) as usize] = what;
        }
    }
    Ok((base, words))
}

/// Where the branch of each traced execution must decode from: the site when it took the
/// jump, its fall-through address otherwise.
fn expected(d: &Dataset, traced: &[Exec]) -> Vec<u64> {
    let sites = by_index(d);
    traced
        .iter()
        .map(|e| {
            let s = sites[&e.site];
            if e.path == 1 {
                s.watched.addr
            } else {
                s.watched.fall
            }
        })
        .collect()
}

/// Writes the trace of `traced` with `records` into `dir` (which must exist): the perf.data
/// and the image as `vmlinux`; returns their paths.
fn build(
    d: &Dataset,
    traced: &[Exec],
    records: &[Poke],
    dir: &Path,
) -> Result<(PathBuf, PathBuf), String> {
    let (base, words) = image(d)?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let dir = fs::canonicalize(dir).map_err(|e| format!("resolving {}: {e}", dir.display()))?;
    let elf_path = dir.join("vmlinux");
    let syms = [
        elf::Sym::new("_text", base, 0),
        elf::Sym::new("_stext", base, 0),
        elf::Sym::new("watched_sites", base, bytes.len() as u64),
    ];
    fs::write(&elf_path, elf::write_elf(base, &bytes, &syms))
        .map_err(|e| format!("writing {}: {e}", elf_path.display()))?;

    let first = traced
        .iter()
        .map(|e| e.time)
        .chain(records.iter().map(|p| p.time))
        .min()
        .unwrap_or(0);
    let last = traced
        .iter()
        .map(|e| e.time)
        .chain(records.iter().map(|p| p.time))
        .max()
        .unwrap_or(0);
    if first < 1000 {
        return Err(format!(
            "a time of {first} ns: the side-band records go before it"
        ));
    }
    let sites = by_index(d);
    let mut e = etm::Encoder::new();
    e.async_();
    e.trace_info();
    for x in traced {
        let site = sites.get(&x.site).ok_or("an execution at no site")?;
        e.trace_on();
        e.timestamp(x.time);
        e.addr_ctxt64(site.watched.addr, 1, Some(PID));
        e.atom(true);
    }
    e.timestamp(last + 5);
    let aux = etm::format_frames(&e.out, TRACE_ID);

    let attrs = decode::events(true, true, true, false);
    let [etm_attr, dummy_attr] = &attrs;
    let sample_type = etm_attr.sample_type;
    let mut f = PerfFile::new(attrs.to_vec());
    let etm_tr = |t: u64| pd::id_trailer(sample_type, &pd::sample_id(PID, t, etm_attr.id));
    let dummy_id = |t: u64| pd::sample_id(PID, t, dummy_attr.id);
    let dummy_tr = |t: u64| pd::id_trailer(sample_type, &dummy_id(t));
    f.time_conv(0, 1, 0);
    f.auxtrace_info(
        pd::PERF_AUXTRACE_CS_ETM,
        &decode::cs_etm_metadata(decode::TRCCONFIGR_CID | decode::TRCCONFIGR_TS, &[0]),
    );
    f.comm(PID, "prog", true, &dummy_tr(first - 1000));
    f.mmap_kernel(base, bytes.len() as u64, &dummy_tr(first - 1000));
    f.itrace_start(PID, &etm_tr(first - 500));
    for p in records {
        f.text_poke(p.addr, &p.old, &p.new, sample_type, &dummy_id(p.time));
    }
    f.aux(0, aux.len() as u64, 0, &etm_tr(first - 500));
    f.exit(PID, &dummy_tr(last + 100_000));
    f.auxtrace(&aux, 0x1234_5678_9abc_def0, 0, PID, u32::MAX);
    f.finished_round();
    f.features = decode::features(&attrs, 1);
    let perf_data = dir.join("perf.data");
    fs::write(&perf_data, f.finish())
        .map_err(|e| format!("writing {}: {e}", perf_data.display()))?;
    Ok((perf_data, elf_path))
}

/// Decodes `traced` against `stream`'s records with [`decode::perf()`], in `dir`.
pub fn decode_stream(
    d: &Dataset,
    traced: &[Exec],
    stream: Stream,
    dir: &Path,
) -> Result<Outcome, String> {
    let records = stream_records(d, traced, stream)?;
    let (perf_data, vmlinux) = build(d, traced, &records, dir)?;
    let decoded = decode::decode_file(&perf_data, Some(&vmlinux))?;
    let want = expected(d, traced);
    // Each fragment shows as `0 => site` (the trace starts) and `source => 0` (it stops at
    // the next Trace On): the sources at a watched site or fall-through are the decoded paths.
    let sources: HashSet<u64> = d
        .sites
        .iter()
        .flat_map(|s| [s.watched.addr, s.watched.fall])
        .collect();
    let got: Vec<u64> = decoded
        .branches
        .iter()
        .map(|b| b.0)
        .filter(|from| sources.contains(from))
        .collect();
    let mut errors = decoded.dump_errors.clone();
    errors.extend(decoded.unexpected_stderr.iter().cloned());
    let compared = got.len().min(want.len());
    if got.len() + 1 < want.len() || got.len() > want.len() {
        errors.push(format!(
            "perf decoded {} branches at the sites for {} executions",
            got.len(),
            want.len()
        ));
    }
    let mut wrong = 0;
    let mut examples = Vec::new();
    for (i, (g, w)) in got.iter().zip(&want).enumerate().take(compared) {
        if g != w {
            wrong += 1;
            if examples.len() < 4 {
                let x = traced[i];
                examples.push(format!(
                    "execution {i} (cpu {} at {} ns, path {}): perf's branch from {g:#x}, the \
                     truth's from {w:#x}",
                    x.cpu, x.time, x.path
                ));
            }
        }
    }
    Ok(Outcome {
        stream,
        records: records.len(),
        traced: traced.len(),
        decoded: compared,
        wrong,
        errors,
        examples,
    })
}

/// The verdict on a dataset's three decodes: the recorded stream decodes every execution to
/// its path with no error, and each seeded stream is caught with wrong paths.
pub fn verdict(outcomes: &[Outcome], sel: &Selection, min_traced: usize) -> Result<(), String> {
    let mut problems = Vec::new();
    // An execution the observer cannot place is one this check cannot judge: none is allowed.
    if sel.undecided > 0 {
        problems.push(format!(
            "{} executions the observer could not place (undecided)",
            sel.undecided
        ));
    }
    if sel.traced < min_traced {
        problems.push(format!(
            "{} executions in the trace, fewer than {min_traced}",
            sel.traced
        ));
    }
    for o in outcomes {
        if !o.errors.is_empty() {
            problems.push(format!(
                "{}: decoder errors {:?}",
                o.stream.name(),
                o.errors
            ));
        }
        match o.stream {
            Stream::Recorded if o.wrong > 0 => problems.push(format!(
                "{}: {} of {} executions decoded with the wrong path: {:?}",
                o.stream.name(),
                o.wrong,
                o.decoded,
                o.examples
            )),
            Stream::Recorded if o.records == 0 => {
                problems.push("recorded: no record at a watched site".into())
            }
            Stream::Dropped | Stream::BeforeAfter if o.wrong == 0 => problems.push(format!(
                "{}: every execution decoded right: the seeded defect was not caught",
                o.stream.name()
            )),
            _ => {}
        }
    }
    for s in Stream::ALL {
        if !outcomes.iter().any(|o| o.stream == s) {
            problems.push(format!("{}: not decoded", s.name()));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::Watched;

    const ON: [u8; 4] = [0x02, 0, 0, 0x14]; // b .+8
    const OFF: [u8; 4] = [0x1f, 0x20, 0x03, 0xd5]; // nop

    fn site(index: usize, addr: u64) -> Site {
        Site {
            watched: Watched {
                index,
                addr,
                on: ON.to_vec(),
                off: OFF.to_vec(),
                taken: addr + 8,
                fall: addr + 4,
            },
            initial: 0,
        }
    }

    fn exec(time: u64, site: usize, path: u8, guard: bool) -> Exec {
        Exec {
            time,
            cpu: 0,
            site,
            path,
            guard,
        }
    }

    /// One site turned on at 5000 and off at 9000.
    fn dataset() -> Dataset {
        let a = 0xffff_8000_7a01_0040;
        Dataset {
            sites: vec![site(0, a)],
            pokes: vec![
                Poke {
                    time: 5_000,
                    addr: a,
                    old: OFF.to_vec(),
                    new: ON.to_vec(),
                },
                Poke {
                    time: 9_000,
                    addr: a,
                    old: ON.to_vec(),
                    new: OFF.to_vec(),
                },
            ],
            execs: vec![
                exec(4_000, 0, 0, false),
                exec(4_900, 0, 1, true), // trapped before the record
                exec(6_000, 0, 1, false),
                exec(7_000, 0, 1, false),
                exec(9_500, 0, 0, false),
                exec(9_600, 0, 1, false), // undecided: after the last record, its old path
            ],
        }
    }

    #[test]
    fn trapped_and_undecided_executions_stay_out_of_the_trace() {
        let (traced, sel) = select(&dataset()).unwrap();
        assert_eq!(
            sel,
            Selection {
                traced: 4,
                trapped: 1,
                undecided: 1
            }
        );
        let times: Vec<u64> = traced.iter().map(|e| e.time).collect();
        assert_eq!(times, [4_000, 6_000, 7_000, 9_500]);
    }

    #[test]
    fn a_new_path_before_its_record_without_the_guard_stays_in_the_trace() {
        // A violation, not undecided: the next record installs the path it took.
        let mut d = dataset();
        d.execs = vec![exec(4_950, 0, 1, false), exec(5_500, 0, 0, false)];
        let (traced, sel) = select(&d).unwrap();
        assert_eq!((traced.len(), sel.undecided), (2, 0));
    }

    #[test]
    fn an_after_record_follows_the_first_unguarded_execution_of_its_new_instruction() {
        let d = dataset();
        let (traced, _) = select(&d).unwrap();
        let pairs = stream_records(&d, &traced, Stream::BeforeAfter).unwrap();
        let times: Vec<u64> = pairs.iter().map(|p| p.time).collect();
        assert_eq!(times, [5_000, 6_001, 9_000, 9_501]);
        // BEFORE: the old bytes over themselves; AFTER: the record as it was.
        assert_eq!(pairs[0].new, pairs[0].old);
        assert_eq!(
            pairs[1],
            Poke {
                time: 6_001,
                ..d.pokes[0].clone()
            }
        );
        assert!(stream_records(&d, &traced, Stream::Dropped)
            .unwrap()
            .is_empty());
        assert_eq!(
            stream_records(&d, &traced, Stream::Recorded).unwrap(),
            d.pokes
        );
    }

    #[test]
    fn the_image_holds_the_sites_before_the_run_and_a_branch_after_each() {
        let d = dataset();
        let (base, words) = image(&d).unwrap();
        let s = &d.sites[0];
        assert_eq!(base, s.watched.addr & !0xfff);
        let at = |a: u64| words[((a - base) / 4) as usize];
        assert_eq!(at(s.watched.addr), NOP);
        assert_eq!(at(s.watched.fall), a64::b(s.watched.fall, s.watched.taken));
        let mut overlapping = d.clone();
        overlapping.sites.push(site(1, s.watched.fall));
        assert!(image(&overlapping).unwrap_err().contains("overlap"));
    }

    #[test]
    fn the_verdict_wants_the_recorded_stream_right_and_both_defects_caught() {
        let sel = Selection {
            traced: 10,
            ..Selection::default()
        };
        let o = |stream, wrong| Outcome {
            stream,
            records: 2,
            traced: 10,
            decoded: 10,
            wrong,
            errors: Vec::new(),
            examples: Vec::new(),
        };
        let good = [
            o(Stream::Recorded, 0),
            o(Stream::Dropped, 3),
            o(Stream::BeforeAfter, 1),
        ];
        assert_eq!(verdict(&good, &sel, 10), Ok(()));
        assert!(verdict(&good, &sel, 11).is_err());
        let mut wrong = good.clone();
        wrong[0].wrong = 1;
        assert!(verdict(&wrong, &sel, 10).unwrap_err().contains("recorded"));
        let mut missed = good.clone();
        missed[2].wrong = 0;
        assert!(verdict(&missed, &sel, 10)
            .unwrap_err()
            .contains("not caught"));
        assert!(verdict(&good[..2], &sel, 10)
            .unwrap_err()
            .contains("not decoded"));
        let undecided = Selection {
            undecided: 1,
            ..sel
        };
        assert!(verdict(&good, &undecided, 10)
            .unwrap_err()
            .contains("undecided"));
    }

    #[test]
    fn a_record_whose_old_bytes_break_the_timeline_is_refused() {
        assert!(timelines(&dataset()).is_ok());
        // The second record's old bytes as the first's: perf would apply it all the same.
        let mut d = dataset();
        d.pokes[1].old = OFF.to_vec();
        assert!(select(&d).unwrap_err().contains("but the site held"));
        // A record dropped: the next one's old bytes are not what the site holds.
        let mut d = dataset();
        d.pokes.remove(0);
        assert!(select(&d).unwrap_err().contains("but the site held"));
        // Records out of file order are taken in time order.
        let mut d = dataset();
        d.pokes.reverse();
        assert!(select(&d).is_ok());
    }
}
