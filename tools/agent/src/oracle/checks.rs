//! The verifications the agent runs on a scenario's evidence: the ordering invariant, record
//! matching, and kcore replay. Pure functions over parsed data, unit-tested on the host.

use crate::platform::exerciser::Site;
use crate::platform::perf::TextPokeRec;
use crate::platform::uapi::ExecRecord;
use std::collections::{BTreeMap, HashMap};
use textpoke_core::replay::{Applied, ReplayError, TextImage};

/// A site's switch-over points: the records' timestamps and the path in effect after each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Timeline {
    /// Path in effect before the first record.
    pub initial: u8,
    /// (record time, path after it), in time order.
    pub events: Vec<(u64, u8)>,
}

impl Timeline {
    /// Path in effect after the first `j` events.
    pub fn path(&self, j: usize) -> u8 {
        match j.checked_sub(1) {
            None => self.initial,
            Some(i) => self.events.get(i).map_or(self.initial, |e| e.1),
        }
    }

    /// Number of events at or before `t`.
    pub fn count_at(&self, t: u64) -> usize {
        self.events.partition_point(|e| e.0 <= t)
    }
}

/// Builds each site's timeline from the records that touch it.
///
/// A record whose new bytes are neither of the site's instructions is an error.
pub fn timelines(
    sites: &[Site],
    pokes: &[TextPokeRec],
) -> Result<HashMap<usize, Timeline>, String> {
    let by_addr: HashMap<u64, &Site> = sites.iter().map(|s| (s.addr, s)).collect();
    let mut out: HashMap<usize, Timeline> = HashMap::new();
    let mut sorted: Vec<&TextPokeRec> = pokes
        .iter()
        .filter(|p| by_addr.contains_key(&p.addr))
        .collect();
    sorted.sort_by_key(|p| p.time);
    for p in sorted {
        let site = by_addr[&p.addr];
        let path = |bytes: &[u8]| -> Result<u8, String> {
            if bytes == site.on.as_slice() {
                Ok(1)
            } else if bytes == site.off.as_slice() {
                Ok(0)
            } else {
                Err(format!(
                    "record at {:#x} with bytes {bytes:02x?} that are neither of the site's",
                    p.addr
                ))
            }
        };
        let (old, new) = (path(&p.old)?, path(&p.new)?);
        let t = out.entry(site.index).or_insert_with(|| Timeline {
            initial: old,
            events: Vec::new(),
        });
        t.events.push((p.time, new));
    }
    Ok(out)
}

/// How an execution broke the ordering invariant: each seeded defect has its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Violation {
    /// An execution of a site the exerciser does not list.
    UnknownSite,
    /// A trapped execution that behaved as no instruction of its site (path 2): the trap
    /// emulated another site's instruction (debug defect 6).
    TrappedAsOtherSite,
    /// A trapped execution that behaved as the instruction its batch replaced: the trap
    /// emulated the old instruction (debug defect 5).
    TrappedAsOld,
    /// An execution that did not trap and behaved as no instruction of its site.
    OtherSite,
    /// An execution that did not trap and ran the instruction the site's next record installs,
    /// nearer to that record than to the one before: the new instruction ran before its record
    /// with no guard (debug defect 3, unguarded writes).
    AheadOfRecord,
    /// An execution that did not trap and ran the instruction the last record before it
    /// replaced, nearer to that record than to the next one.
    BehindRecord,
}

/// How the ordering check tells a trapped execution: by what the CPU saw, or (where something
/// else interrupts the executions too) by what both the CPU and textpoke saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrapEvidence {
    /// The CPU's own word ([`ExecRecord::cpu_trapped`]): with interrupts off, only a trap
    /// overwrites the executor's stack mark.
    Cpu,
    /// The CPU's word and textpoke's count together: for runs under the breakpoint observer on
    /// arm64, whose debug exceptions save their state on the executors' stacks too, so that
    /// the CPU's word alone cannot tell a breakpoint hit from a trap on a guard.
    CpuAndEngine,
}

impl TrapEvidence {
    /// Whether `e` trapped on a guard, by this evidence.
    pub fn trapped(self, e: &ExecRecord) -> bool {
        match self {
            Self::Cpu => e.cpu_trapped(),
            Self::CpuAndEngine => e.cpu_trapped() && e.counted(),
        }
    }
}

/// What the ordering check found.
#[derive(Clone, Debug, Default)]
pub struct OrderingReport {
    /// Executions checked.
    pub checked: u64,
    /// Executions that broke the invariant.
    pub violations: u64,
    /// The violations by kind.
    pub by_violation: BTreeMap<Violation, u64>,
    /// The violations by site index (executions of unknown sites left out).
    pub violating_sites: BTreeMap<usize, u64>,
    /// Trapped executions that no batch of their site was in flight for: each is a failure of
    /// its own (a trap nobody can account for).
    pub unmatched: u64,
    /// Trapped executions that several batches of their site overlap (an execution slowed down,
    /// by the breakpoint observer's debug exceptions for one, can span two flips): the guard
    /// was one of theirs, so the path must be one of their new instructions, which with flips
    /// back and forth decides little. Counted, so that a run made of them shows.
    pub multi_batch: u64,
    /// Descriptions of the first few violations and unmatched executions.
    pub examples: Vec<String>,
    /// Per site kind: (old, new, trapped) executions, relative to the nearest record.
    pub by_kind: BTreeMap<String, [u64; 3]>,
}

impl OrderingReport {
    /// Violations of kind `v`.
    pub fn count(&self, v: Violation) -> u64 {
        self.by_violation.get(&v).copied().unwrap_or(0)
    }

    fn violation(&mut self, v: Violation, site: Option<usize>) {
        self.violations += 1;
        *self.by_violation.entry(v).or_default() += 1;
        if let Some(i) = site {
            *self.violating_sites.entry(i).or_default() += 1;
        }
    }
}

/// When a batch changing a site was in flight, and what it changed the site to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchWindow {
    /// Commit start (perf's clock).
    pub start: u64,
    /// Commit end.
    pub end: u64,
    /// The path of the instruction the batch installed at the site (0 `off`, 1 `on`).
    pub to: u8,
}

/// Each site's batch windows, from the exerciser's `batches` file.
pub fn windows_by_site(
    batches: &[crate::platform::exerciser::BatchLine],
) -> HashMap<usize, Vec<BatchWindow>> {
    let mut out: HashMap<usize, Vec<BatchWindow>> = HashMap::new();
    for b in batches {
        for &(site, to) in &b.changes {
            out.entry(site).or_default().push(BatchWindow {
                start: b.start,
                end: b.end,
                to,
            });
        }
    }
    out
}

/// Checks every logged execution against its site's timeline and batches.
///
/// The invariant (commit e17d43b93e54, which added the record; kernel/plan.rs): an execution that did not trap ran the instruction
/// in effect at some moment between its start and end, that is the old one only if it started
/// before the record and the new one only if it ended after it. A trapped execution (as
/// `traps` tells) is matched to the one batch of its site whose commit overlaps it, which must
/// exist (the guard was that batch's), and must have behaved exactly as that batch's new
/// instruction. An execution that behaved as neither of its site's instructions (path 2) is
/// always a violation. Each violation is classified ([`Violation`]).
pub fn check_ordering(
    sites: &[Site],
    lines: &HashMap<usize, Timeline>,
    windows: &HashMap<usize, Vec<BatchWindow>>,
    execs: &[ExecRecord],
    traps: TrapEvidence,
) -> OrderingReport {
    let mut r = OrderingReport::default();
    let empty = Timeline::default();
    let no_windows = Vec::new();
    for e in execs {
        let Some(site) = sites.get(e.site as usize) else {
            r.violation(Violation::UnknownSite, None);
            r.examples
                .push(format!("execution of unknown site {}", e.site));
            continue;
        };
        let t = lines.get(&site.index).unwrap_or(&empty);
        let (j0, j1) = (t.count_at(e.start), t.count_at(e.end));
        let trapped = traps.trapped(e);
        r.checked += 1;
        let broken = if trapped && e.path > 1 {
            Some(Violation::TrappedAsOtherSite)
        } else if trapped {
            let w = windows.get(&site.index).unwrap_or(&no_windows);
            let overlapping: Vec<&BatchWindow> = w
                .iter()
                .filter(|w| w.start <= e.end && e.start <= w.end)
                .collect();
            let as_new = match overlapping.as_slice() {
                [batch] => e.path == batch.to,
                [_, _, ..] => {
                    r.multi_batch += 1;
                    overlapping.iter().any(|b| b.to == e.path)
                }
                [] => {
                    r.unmatched += 1;
                    if r.examples.len() < 8 {
                        r.examples.push(format!(
                            "site {} ({} at {:#x}) cpu {} trapped during [{}, {}], which no batch of the site overlaps",
                            site.index, site.kind, site.addr, e.cpu, e.start, e.end,
                        ));
                    }
                    continue;
                }
            };
            (!as_new).then_some(Violation::TrappedAsOld)
        } else if e.path > 1 {
            Some(Violation::OtherSite)
        } else if (j0..=j1).any(|j| t.path(j) == e.path) {
            None
        } else {
            // Not in effect during the execution: the path the next record installs, or the one
            // the last record replaced. With two paths it can be both; the nearer record in
            // time decides.
            let ahead_by = t
                .events
                .get(j1)
                .filter(|n| n.1 == e.path)
                .map(|n| n.0.saturating_sub(e.end));
            let behind_by = j0
                .checked_sub(1)
                .filter(|&i| t.path(i) == e.path)
                .and_then(|i| t.events.get(i))
                .map(|p| e.start.saturating_sub(p.0));
            let ahead = match (ahead_by, behind_by) {
                (Some(a), Some(b)) => a <= b,
                (Some(_), None) => true,
                _ => false,
            };
            Some(if ahead {
                Violation::AheadOfRecord
            } else {
                Violation::BehindRecord
            })
        };
        let counts = r.by_kind.entry(site.kind.clone()).or_insert([0; 3]);
        if trapped {
            counts[2] += 1;
        } else {
            // Old or new relative to the record nearest in time.
            let mid = e.start / 2 + e.end / 2;
            let k = t.count_at(mid);
            let before_next = t.events.get(k).map(|n| n.0.saturating_sub(mid));
            let after_prev = k
                .checked_sub(1)
                .and_then(|i| t.events.get(i))
                .map(|p| mid.saturating_sub(p.0));
            let is_old = match (before_next, after_prev) {
                (Some(b), Some(a)) => b < a,
                (Some(_), None) => true,
                _ => false,
            };
            counts[usize::from(!is_old)] += 1;
        }
        if let Some(v) = broken {
            r.violation(v, Some(site.index));
            if r.examples.len() < 8 {
                r.examples.push(format!(
                    "{v:?}: site {} ({} at {:#x}) cpu {} path {} trap bits {} during [{}, {}]: records before start {}, before end {}, timeline {:?}",
                    site.index,
                    site.kind,
                    site.addr,
                    e.cpu,
                    e.path,
                    e.trap,
                    e.start,
                    e.end,
                    j0,
                    j1,
                    t.events.iter().take(6).collect::<Vec<_>>()
                ));
            }
        }
    }
    r
}

/// Why the records of a site do not match its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordMismatch {
    /// A record's old bytes are not the site's text at that point (the text before, or the
    /// previous record's new bytes): a record missing before it, or wrong old bytes.
    OldBytes {
        /// The site's index.
        site: usize,
        /// Its address.
        addr: u64,
        /// The record's old bytes.
        old: Vec<u8>,
        /// What the text was.
        text: Vec<u8>,
    },
    /// The last record's new bytes (or the text before, without records) are not the text
    /// after: a record missing at the end, or a record without its write.
    EndText {
        /// The site's index.
        site: usize,
        /// Its address.
        addr: u64,
        /// Where the records end.
        records: Vec<u8>,
        /// The text after.
        text: Vec<u8>,
    },
    /// The site is outside the snapshots.
    Outside {
        /// Its address.
        addr: u64,
    },
}

impl RecordMismatch {
    /// The address of the site the mismatch is at.
    pub fn addr(&self) -> u64 {
        match *self {
            Self::OldBytes { addr, .. } | Self::EndText { addr, .. } | Self::Outside { addr } => {
                addr
            }
        }
    }
}

impl std::fmt::Display for RecordMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::OldBytes {
                site,
                addr,
                old,
                text,
            } => write!(
                f,
                "site {site} at {addr:#x}: a record's old bytes {old:02x?} are not the text {text:02x?}"
            ),
            Self::EndText {
                site,
                addr,
                records,
                text,
            } => write!(
                f,
                "site {site} at {addr:#x}: its records end at {records:02x?}, the text after is {text:02x?}"
            ),
            Self::Outside { addr } => write!(f, "site {addr:#x} is outside the kcore snapshot"),
        }
    }
}

/// Checks the records of every site against the text itself, read through `/proc/kcore`:
/// `before` and `after` are snapshots of `[base, base + len)`. Per site, in time order, the
/// first record's old bytes are the text before, each record's old bytes are the previous
/// record's new ones, and the last record's new bytes are the text after; a site without
/// records kept its text. Returns the number of records checked.
pub fn records_match_text(
    sites: &[Site],
    base: u64,
    before: &[u8],
    after: &[u8],
    pokes: &[TextPokeRec],
) -> Result<usize, String> {
    records_match_text_checked(sites, base, before, after, pokes).map_err(|e| e.to_string())
}

/// [`records_match_text`], with the mismatch typed.
pub fn records_match_text_checked(
    sites: &[Site],
    base: u64,
    before: &[u8],
    after: &[u8],
    pokes: &[TextPokeRec],
) -> Result<usize, RecordMismatch> {
    let text = |image: &[u8], s: &Site| -> Result<Vec<u8>, RecordMismatch> {
        usize::try_from(s.addr.wrapping_sub(base))
            .ok()
            .and_then(|off| image.get(off..off + s.len))
            .map(<[u8]>::to_vec)
            .ok_or(RecordMismatch::Outside { addr: s.addr })
    };
    let mut checked = 0;
    for s in sites {
        let mut mine: Vec<&TextPokeRec> = pokes.iter().filter(|p| p.addr == s.addr).collect();
        mine.sort_by_key(|p| (p.time, p.id));
        let mut now = text(before, s)?;
        for p in &mine {
            if p.old != now {
                return Err(RecordMismatch::OldBytes {
                    site: s.index,
                    addr: s.addr,
                    old: p.old.clone(),
                    text: now,
                });
            }
            now.clone_from(&p.new);
            checked += 1;
        }
        let end = text(after, s)?;
        if now != end {
            return Err(RecordMismatch::EndText {
                site: s.index,
                addr: s.addr,
                records: now,
                text: end,
            });
        }
    }
    Ok(checked)
}

/// The largest number of `(start, end)` intervals that overlap at one moment.
pub fn max_overlap(intervals: impl Iterator<Item = (u64, u64)>) -> usize {
    // Ends sort before starts at the same time: touching intervals do not overlap.
    let mut points: Vec<(u64, i32)> = intervals.flat_map(|(s, e)| [(s, 1), (e, -1)]).collect();
    points.sort_by_key(|&(t, d)| (t, d));
    let (mut now, mut max) = (0i32, 0i32);
    for (_, d) in points {
        now += d;
        max = max.max(now);
    }
    usize::try_from(max).unwrap_or(0)
}

/// Checks that two record streams describe the same pokes: same count, and for every address
/// the same sequence of (old, new). `a` and `b` name the streams in messages.
pub fn same_pokes(
    a_name: &str,
    a: &[TextPokeRec],
    b_name: &str,
    b: &[TextPokeRec],
) -> Result<usize, String> {
    type Seq<'x> = BTreeMap<u64, Vec<(&'x [u8], &'x [u8])>>;
    fn per_addr(recs: &[TextPokeRec]) -> Seq<'_> {
        let mut sorted: Vec<&TextPokeRec> = recs.iter().collect();
        sorted.sort_by_key(|r| (r.time, r.id));
        let mut m: Seq<'_> = BTreeMap::new();
        for r in sorted {
            m.entry(r.addr).or_default().push((&r.old, &r.new));
        }
        m
    }
    if a.len() != b.len() {
        return Err(format!(
            "{a_name} has {} records, {b_name} has {}",
            a.len(),
            b.len()
        ));
    }
    let (ma, mb) = (per_addr(a), per_addr(b));
    for (addr, seq) in &ma {
        match mb.get(addr) {
            Some(other) if other == seq => {}
            Some(other) => {
                let (n, m) = (seq.len(), other.len());
                let (x, y) = (seq.first(), other.first());
                return Err(format!(
                    "at {addr:#x}: {a_name} has {n} pokes {x:02x?}.., {b_name} {m} {y:02x?}.."
                ));
            }
            None => return Err(format!("{a_name} pokes {addr:#x}, {b_name} never does")),
        }
    }
    Ok(a.len())
}

/// Why a replay of the records onto the text before did not give the text after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayFailure {
    /// The record at `addr` says its old bytes were something the replayed text does not hold:
    /// a record missing before it, or wrong old bytes. `offset` is the first differing byte's.
    OldBytes {
        /// The record's address.
        addr: u64,
        /// Offset of the first differing byte from `addr`.
        offset: usize,
        /// The record's old bytes.
        old: Vec<u8>,
        /// The record's new bytes.
        new: Vec<u8>,
        /// What the replayed text held there.
        held: Vec<u8>,
        /// Records at the same address replayed before it.
        earlier: usize,
    },
    /// The record at `addr` cannot be applied at all.
    Unusable {
        /// The record's address.
        addr: u64,
        /// Why.
        what: &'static str,
    },
    /// Every record applied, and the replayed text differs from the text after, first at
    /// `addr`: a change without a record, or a record without its change.
    TextDiffers {
        /// The first differing byte's address.
        addr: u64,
    },
}

impl ReplayFailure {
    /// The address the failure names: the record's, or the first differing byte's.
    pub fn addr(&self) -> u64 {
        match *self {
            Self::OldBytes { addr, .. }
            | Self::Unusable { addr, .. }
            | Self::TextDiffers { addr } => addr,
        }
    }
}

impl std::fmt::Display for ReplayFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::OldBytes {
                addr,
                offset,
                old,
                new,
                held,
                earlier,
            } => write!(
                f,
                "record at {addr:#x}: old bytes differ at offset {offset} (the record changes \
                 {old:02x?} to {new:02x?}, the text held {held:02x?}, after {earlier} records at \
                 the same address)"
            ),
            Self::Unusable { addr, what } => write!(f, "record at {addr:#x}: {what}"),
            Self::TextDiffers { addr } => {
                write!(f, "replayed text differs from kcore at {addr:#x}")
            }
        }
    }
}

/// Replays `pokes` (in time order) onto `before`, a snapshot of `[base, base + len)`, and checks
/// the result equals `after`. Pokes outside the region are ignored.
pub fn replay(
    base: u64,
    before: &[u8],
    after: &[u8],
    pokes: &[TextPokeRec],
) -> Result<usize, String> {
    replay_checked(base, before, after, pokes).map_err(|e| e.to_string())
}

/// [`replay`], with the failure typed.
pub fn replay_checked(
    base: u64,
    before: &[u8],
    after: &[u8],
    pokes: &[TextPokeRec],
) -> Result<usize, ReplayFailure> {
    let mut image = before.to_vec();
    let mut sorted: Vec<&TextPokeRec> = pokes.iter().collect();
    sorted.sort_by_key(|p| (p.time, p.id));
    let mut applied = 0;
    {
        let mut t = TextImage::new(base, &mut image);
        for (i, p) in sorted.iter().enumerate() {
            match t.apply(&p.as_text_poke()) {
                Ok(Applied::NotCovered) => {}
                Ok(_) => applied += 1,
                Err(ReplayError::OldMismatch { offset }) => {
                    // A mismatch is found only where the image covers the record; if not,
                    // the replay itself is wrong, and says so.
                    let Some(held) = p
                        .addr
                        .checked_sub(base)
                        .and_then(|o| usize::try_from(o).ok())
                        .and_then(|o| t.bytes.get(o..o.saturating_add(p.old.len())))
                        .map(<[u8]>::to_vec)
                    else {
                        return Err(ReplayFailure::Unusable {
                            addr: p.addr,
                            what: "an old-bytes mismatch outside the image",
                        });
                    };
                    return Err(ReplayFailure::OldBytes {
                        addr: p.addr,
                        offset,
                        old: p.old.clone(),
                        new: p.new.clone(),
                        held,
                        // Every record before it at its address applied (or it would have
                        // failed first).
                        earlier: sorted[..i].iter().filter(|q| q.addr == p.addr).count(),
                    });
                }
                Err(e) => {
                    return Err(ReplayFailure::Unusable {
                        addr: p.addr,
                        what: e.as_str(),
                    })
                }
            }
        }
    }
    if image != after {
        let first = image
            .iter()
            .zip(after)
            .position(|(x, y)| x != y)
            .unwrap_or(0);
        return Err(ReplayFailure::TextDiffers {
            addr: base + first as u64,
        });
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(index: usize, addr: u64) -> Site {
        Site {
            index,
            kind: "jmp32".into(),
            addr,
            len: 5,
            off: vec![0x0f, 0x1f, 0x44, 0, 0],
            on: vec![0xe9, 1, 0, 0, 0],
        }
    }

    fn poke(addr: u64, time: u64, on: bool, s: &Site) -> TextPokeRec {
        let (old, new) = if on {
            (s.off.clone(), s.on.clone())
        } else {
            (s.on.clone(), s.off.clone())
        };
        TextPokeRec {
            addr,
            old,
            new,
            time,
            ..TextPokeRec::default()
        }
    }

    fn exec(site: u32, start: u64, end: u64, path: u8, trapped: u8) -> ExecRecord {
        ExecRecord {
            start,
            end,
            site,
            cpu: 0,
            path,
            trap: if trapped != 0 {
                crate::platform::uapi::TRAP_SEEN | crate::platform::uapi::TRAP_COUNTED
            } else {
                0
            },
        }
    }

    #[test]
    fn ordering_accepts_the_protocol_and_rejects_each_violation() {
        let s = site(0, 0x1000);
        let sites = vec![s.clone()];
        // Off until 100, on until 200, off after.
        let pokes = vec![poke(0x1000, 100, true, &s), poke(0x1000, 200, false, &s)];
        let lines = timelines(&sites, &pokes).unwrap();
        let good = [
            exec(0, 10, 20, 0, 0),   // old before the record
            exec(0, 90, 110, 0, 0),  // old, started before the record
            exec(0, 90, 110, 1, 0),  // new, ended after it
            exec(0, 120, 130, 1, 0), // new
            exec(0, 95, 99, 1, 1),   // trapped before the record: emulates new
            exec(0, 195, 198, 0, 1), // trapped in the second batch's window: emulates its new
        ];
        // The batches: the first switches on during [90, 105], the second off during
        // [190, 205].
        let windows = HashMap::from([(
            0,
            vec![
                BatchWindow {
                    start: 90,
                    end: 105,
                    to: 1,
                },
                BatchWindow {
                    start: 190,
                    end: 205,
                    to: 0,
                },
            ],
        )]);
        let r = check_ordering(&sites, &lines, &windows, &good, TrapEvidence::Cpu);
        assert_eq!(
            (r.checked, r.violations, r.unmatched),
            (6, 0, 0),
            "{:?}",
            r.examples
        );
        let bad = [
            exec(0, 101, 110, 0, 0), // old after the record
            exec(0, 50, 99, 1, 0),   // new before the record
            exec(0, 201, 210, 1, 0), // the first batch's new instruction after the second record
            exec(0, 95, 99, 0, 1),   // trapped in the first batch, emulating the old one
            exec(0, 120, 130, 2, 0), // another site's behaviour
        ];
        let r = check_ordering(&sites, &lines, &windows, &bad, TrapEvidence::Cpu);
        assert_eq!(r.violations, 5, "{:?}", r.examples);
        // Each defect's signature: the unguarded write's new instruction before its record,
        // the emulation of the old instruction, another site's behaviour.
        assert_eq!(r.count(Violation::BehindRecord), 2, "{:?}", r.by_violation);
        assert_eq!(r.count(Violation::AheadOfRecord), 1);
        assert_eq!(r.count(Violation::TrappedAsOld), 1);
        assert_eq!(r.count(Violation::OtherSite), 1);
        assert_eq!(r.violating_sites, BTreeMap::from([(0, 5)]));
        // A trap that behaved as another site's instruction.
        let other = [exec(0, 95, 99, 2, 1)];
        let r = check_ordering(&sites, &lines, &windows, &other, TrapEvidence::Cpu);
        assert_eq!(r.count(Violation::TrappedAsOtherSite), 1);
        // The CPU's word alone: an execution textpoke did not count is still a trap; with both
        // required (under the observer on arm64), it is not, and then the old instruction
        // after the record is a violation of its own.
        let mut seen_only = exec(0, 101, 104, 0, 0);
        seen_only.trap = crate::platform::uapi::TRAP_SEEN;
        let r = check_ordering(&sites, &lines, &windows, &[seen_only], TrapEvidence::Cpu);
        assert_eq!((r.violations, r.count(Violation::TrappedAsOld)), (1, 1));
        let r = check_ordering(
            &sites,
            &lines,
            &windows,
            &[seen_only],
            TrapEvidence::CpuAndEngine,
        );
        assert_eq!((r.violations, r.count(Violation::BehindRecord)), (1, 1));
        // The engine's count alone is no trap: the CPU did not see one.
        let mut counted_only = exec(0, 95, 99, 1, 0);
        counted_only.trap = crate::platform::uapi::TRAP_COUNTED;
        let r = check_ordering(&sites, &lines, &windows, &[counted_only], TrapEvidence::Cpu);
        assert_eq!(r.count(Violation::AheadOfRecord), 1);
        // A trap while no batch of the site was in flight is unmatched, whatever its path.
        let stray = [exec(0, 210, 220, 0, 1), exec(0, 150, 160, 1, 1)];
        let r = check_ordering(&sites, &lines, &windows, &stray, TrapEvidence::Cpu);
        assert_eq!((r.violations, r.unmatched), (0, 2), "{:?}", r.examples);
        // A trap that both batches overlap behaves as one of their new instructions (path 2,
        // no site's, is a violation before that question).
        let long = [exec(0, 100, 195, 0, 1), exec(0, 100, 195, 2, 1)];
        let r = check_ordering(&sites, &lines, &windows, &long, TrapEvidence::Cpu);
        assert_eq!(
            (r.violations, r.unmatched, r.multi_batch),
            (1, 0, 1),
            "{:?}",
            r.examples
        );
    }

    #[test]
    fn records_against_the_text() {
        let s = site(0, 0x1004);
        let before: Vec<u8> = [vec![0; 4], s.off.clone(), vec![0; 3]].concat();
        let after: Vec<u8> = [vec![0; 4], s.on.clone(), vec![0; 3]].concat();
        let sites = [s.clone()];
        let pokes = vec![
            poke(0x1004, 1, true, &s),
            poke(0x1004, 2, false, &s),
            poke(0x1004, 3, true, &s),
        ];
        assert_eq!(
            records_match_text(&sites, 0x1000, &before, &after, &pokes),
            Ok(3)
        );
        // A dropped record breaks the chain.
        assert!(records_match_text(&sites, 0x1000, &before, &after, &pokes[1..]).is_err());
        // Wrong old bytes.
        let mut wrong = pokes.clone();
        wrong[0].old = s.on.clone();
        assert!(records_match_text(&sites, 0x1000, &before, &after, &wrong).is_err());
        assert!(matches!(
            records_match_text_checked(&sites, 0x1000, &before, &after, &wrong),
            Err(RecordMismatch::OldBytes {
                site: 0,
                addr: 0x1004,
                ..
            })
        ));
        // The last record missing: the records end where the text does not.
        assert!(matches!(
            records_match_text_checked(&sites, 0x1000, &before, &after, &pokes[..2]),
            Err(RecordMismatch::EndText { addr: 0x1004, .. })
        ));
        // The text never changed although the records say it did.
        assert!(records_match_text(&sites, 0x1000, &before, &before, &pokes).is_err());
        // No records and no change.
        assert_eq!(
            records_match_text(&sites, 0x1000, &before, &before, &[]),
            Ok(0)
        );
    }

    #[test]
    fn overlap_of_intervals() {
        assert_eq!(max_overlap([(0, 10), (20, 30)].into_iter()), 1);
        assert_eq!(max_overlap([(0, 10), (10, 20)].into_iter()), 1);
        assert_eq!(max_overlap([(0, 10), (5, 20), (6, 7)].into_iter()), 3);
        assert_eq!(max_overlap(std::iter::empty()), 0);
    }

    #[test]
    fn timelines_reject_foreign_bytes() {
        let s = site(0, 0x1000);
        let mut p = poke(0x1000, 1, true, &s);
        p.new = vec![0xcc; 5];
        assert!(timelines(&[s], &[p]).is_err());
    }

    #[test]
    fn same_pokes_compares_per_address_sequences() {
        let s = site(0, 0x1000);
        let a = vec![poke(0x1000, 1, true, &s), poke(0x1000, 2, false, &s)];
        let mut b = a.clone();
        assert_eq!(same_pokes("a", &a, "b", &b), Ok(2));
        b.swap(0, 1);
        b[0].time = 1;
        b[1].time = 2;
        assert!(same_pokes("a", &a, "b", &b).is_err());
        assert!(same_pokes("a", &a, "b", &a[..1]).is_err());
    }

    #[test]
    fn replay_detects_a_missing_record() {
        let s = site(0, 0x1004);
        let before: Vec<u8> = [vec![0; 4], s.off.clone(), vec![0; 3]].concat();
        let after: Vec<u8> = [vec![0; 4], s.on.clone(), vec![0; 3]].concat();
        let pokes = vec![
            poke(0x1004, 1, true, &s),
            poke(0x1004, 2, false, &s),
            poke(0x1004, 3, true, &s),
        ];
        assert_eq!(replay(0x1000, &before, &after, &pokes), Ok(3));
        assert!(replay(0x1000, &before, &after, &pokes[..2]).is_err());
        assert!(replay(
            0x1000,
            &before,
            &after,
            &[pokes[0].clone(), pokes[2].clone()]
        )
        .is_err());
        // Typed: the record missing at the end leaves the text apart at the site; one missing
        // in the middle breaks the next record's old bytes.
        assert_eq!(
            replay_checked(0x1000, &before, &after, &pokes[..2]),
            Err(ReplayFailure::TextDiffers { addr: 0x1004 })
        );
        assert_eq!(
            replay_checked(
                0x1000,
                &before,
                &after,
                &[pokes[0].clone(), pokes[2].clone()]
            ),
            Err(ReplayFailure::OldBytes {
                addr: 0x1004,
                offset: 0,
                old: pokes[2].old.clone(),
                new: pokes[2].new.clone(),
                held: pokes[0].new.clone(),
                earlier: 1,
            })
        );
    }
}
