// SPDX-License-Identifier: GPL-2.0

//! Scenarios: keys of sites flipped by concurrent pokers while executors run every site.
//!
//! `keys=K sites=S ftrace=F flips=N pokers=P`: K static-key-like groups of S sites each (key k
//! uses the key pools in turn, [`KEY_KINDS`], so every kind gets keys) and one ftrace-like
//! group of F call sites. P poker kthreads share the keys (key k belongs to
//! poker k mod P; the ftrace group to poker 0), and each flips each of its groups N times, one
//! batch per group and flip: like `static_key_enable()` patching every site of a key at once.
//! With P > 1, batches of different pokers are in flight at the same time. A flip toggles each
//! site of the group from wherever it is (scenarios of different shapes share sites): with N odd
//! a scenario ends with every site in the other state than it started in, so that the text
//! before and after differs.

use super::engine_api::{self, Batch, BatchStats};
use super::executor::{Executor, Executors, KINDS};
use super::pool::PoolKind;
use super::Shared;
use crate::clock;
use crate::kthread::{self, Kthread};
use core::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use kernel::{c_str, new_mutex, prelude::*, sync::Arc, sync::Mutex};

/// A scenario's parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spec {
    pub(crate) keys: usize,
    pub(crate) sites: usize,
    pub(crate) ftrace: usize,
    pub(crate) flips: usize,
    pub(crate) pokers: usize,
    /// A CPU the pokers stay off (`avoid=N`): the one the guest's hotplug group takes offline
    /// and back, where perf's per-CPU events stop at the first offline and would miss records.
    pub(crate) avoid: Option<usize>,
}

impl Spec {
    /// Parses `key=value` words; unknown keys and missing or zero values are refused.
    pub(crate) fn parse(words: &[u8]) -> Result<Self> {
        let mut spec = Self {
            keys: 0,
            sites: 0,
            ftrace: 0,
            flips: 0,
            pokers: 1,
            avoid: None,
        };
        for word in words
            .split(|b| b.is_ascii_whitespace())
            .filter(|w| !w.is_empty())
        {
            let mut kv = word.splitn(2, |b| *b == b'=');
            let (Some(k), Some(v)) = (kv.next(), kv.next()) else {
                return Err(EINVAL);
            };
            let v = core::str::from_utf8(v)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .ok_or(EINVAL)?;
            match k {
                b"keys" => spec.keys = v,
                b"sites" => spec.sites = v,
                b"ftrace" => spec.ftrace = v,
                b"flips" => spec.flips = v,
                b"pokers" => spec.pokers = v,
                b"avoid" => spec.avoid = Some(v),
                _ => return Err(EINVAL),
            }
        }
        if spec.flips == 0
            || spec.pokers == 0
            || (spec.keys == 0 || spec.sites == 0) && spec.ftrace == 0
        {
            return Err(EINVAL);
        }
        Ok(spec)
    }
}

/// The pools keys use, in turn: every pool but the call sites' (the ftrace group's). On arm64
/// that includes the `MOV X9, X30` prologues, which the engine changes with every other CPU
/// parked, as it does `RET`: a key of them takes its functions from the pool's end, away from
/// the ftrace group's (from its start), and [`run`] refuses a scenario in which a function
/// could run its call with its prologue off (the trampoline returns through X9).
/// The guest agent plans a scenario's per-kind cases from the same list, by name
/// (tools/agent/src/scenarios/scenario.rs, `key_kinds`): change both together.
#[cfg(CONFIG_X86_64)]
const KEY_KINDS: &[PoolKind] = &[PoolKind::Branch, PoolKind::ShortBranch, PoolKind::Ret];
#[cfg(CONFIG_ARM64)]
const KEY_KINDS: &[PoolKind] = &[PoolKind::Branch, PoolKind::Ret, PoolKind::Prologue];

/// One batch of a run.
pub(crate) struct BatchRecord {
    pub(crate) poker: usize,
    /// Key index, or `usize::MAX` for the ftrace group.
    pub(crate) group: usize,
    /// Each site the batch changed, and whether to its `on` instruction (else to `off`).
    pub(crate) changes: KVec<(usize, bool)>,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) stats: BatchStats,
    /// 0, or the errno the commit failed with.
    pub(crate) errno: i32,
}

/// A key, or the ftrace group: sites that change together.
struct Group {
    /// Key index, or `usize::MAX` for the ftrace group.
    index: usize,
    /// The sites, by index.
    sites: KVec<usize>,
}

#[pin_data]
struct Poker {
    shared: Arc<Shared>,
    index: usize,
    groups: KVec<usize>,
    all: Arc<KVec<Group>>,
    flips: usize,
    #[pin]
    batches: Mutex<KVec<BatchRecord>>,
    done: AtomicBool,
    error: AtomicI32,
}

/// Flips every site of group `g` to its other instruction, in one batch.
fn flip(p: &Poker, g: &Group) -> Result {
    let shared = &p.shared;
    let mut batch = Batch::begin()?;
    let mut changes = KVec::with_capacity(g.sites.len(), GFP_KERNEL)?;
    for &i in g.sites.iter() {
        let site = shared.sites.get(i).ok_or(EINVAL)?;
        let on = shared.state.get(i).ok_or(EINVAL)?.load(Ordering::Acquire) == 0;
        batch.add(site.addr, if on { site.on() } else { site.off() })?;
        changes.push((i, on), GFP_KERNEL)?;
    }
    // Odd epochs tell the executors these sites are changing: they log their executions for the
    // ordering check instead of checking them against the committed state.
    let bump = |p: &Poker| {
        for &i in g.sites.iter() {
            if let Some(e) = p.shared.epoch.get(i) {
                e.fetch_add(1, Ordering::SeqCst);
            }
        }
    };
    bump(p);
    let start = clock::now();
    let committed = batch.commit();
    let end = clock::now();
    for &(i, on) in changes.iter() {
        let (Some(s), Some(site)) = (shared.state.get(i), shared.sites.get(i)) else {
            continue;
        };
        // A failed commit leaves each site old or new, as far as its record went (textpoke's
        // recovery): the text says which, and the executors check what it says.
        let now_on = match committed {
            Ok(()) => on,
            Err(_) => holds(site.addr, site.on()),
        };
        s.store(u8::from(now_on), Ordering::Release);
    }
    bump(p);
    let record = BatchRecord {
        poker: p.index,
        group: g.index,
        changes,
        start,
        end,
        stats: batch.stats()?,
        errno: committed.err().map_or(0, engine_api::errno_of),
    };
    // A batch the record of which is lost would go unchecked: fail the run instead.
    p.batches.lock().push(record, GFP_KERNEL).map_err(|_| {
        pr_err!("scenario: no memory to record a batch\n");
        ENOMEM
    })?;
    committed
}

/// Flips sites `indices` to their other instruction in one batch that the calling task begins,
/// fills, commits and ends, then sets their state from the text: whatever failed, the text
/// says where each site stands.
pub(crate) fn flip_here(shared: &Shared, indices: &[usize]) -> Result {
    let committed = (|| {
        let mut batch = Batch::begin()?;
        for &i in indices {
            let site = shared.sites.get(i).ok_or(EINVAL)?;
            let on = shared.state.get(i).ok_or(EINVAL)?.load(Ordering::Acquire) == 0;
            batch.add(site.addr, if on { site.on() } else { site.off() })?;
        }
        batch.commit()
    })();
    for &i in indices {
        if let (Some(s), Some(site)) = (shared.state.get(i), shared.sites.get(i)) {
            s.store(u8::from(holds(site.addr, site.on())), Ordering::Release);
        }
    }
    committed
}

/// Whether the text at `addr` is `insn`.
fn holds(addr: u64, insn: &[u8]) -> bool {
    let mut now = [0u8; 8];
    now.get_mut(..insn.len())
        .is_some_and(|now| crate::kernel_text::read(addr, now).is_ok() && *now == *insn)
}

fn poke(p: &Poker) {
    let mut result = Ok(());
    'flips: for _ in 0..p.flips {
        for &g in p.groups.iter() {
            result = p.all.get(g).ok_or(EINVAL).and_then(|g| flip(p, g));
            if result.is_err() {
                break 'flips;
            }
            crate::cpu::cond_resched();
        }
    }
    if let Err(e) = result {
        p.error.store(engine_api::errno_of(e), Ordering::Relaxed);
    }
    p.done.store(true, Ordering::Release);
}

/// What a run produced.
pub(crate) struct Outcome {
    pub(crate) spec: Spec,
    pub(crate) executors: KVec<Arc<Executor>>,
    pub(crate) batches: KVec<BatchRecord>,
    /// First poker error (an errno), or 0.
    pub(crate) errno: i32,
    pub(crate) nsecs: u64,
}

/// The site indices of `kind`, in pool order.
fn of_kind(shared: &Shared, kind: PoolKind) -> impl DoubleEndedIterator<Item = usize> + '_ {
    shared
        .sites
        .iter()
        .enumerate()
        .filter(move |(_, s)| s.kind == kind)
        .map(|(i, _)| i)
}

/// The site of the other kind in the same function as site `i` (arm64's `bl` functions have a
/// prologue site and a call site).
fn partner(shared: &Shared, i: usize, kind: PoolKind) -> Option<usize> {
    let func = shared.sites.get(i)?.func;
    shared
        .sites
        .iter()
        .position(|s| s.kind == kind && s.func == func)
}

/// Refuses (`EINVAL`) a scenario in which a function could run its call site on with its
/// `MOV X9, X30` prologue off: a prologue key must take functions whose call site is off and
/// outside the ftrace group, and the ftrace group functions whose prologue is on.
fn prologues_stay_under_calls(shared: &Shared, groups: &[Group]) -> Result {
    let ftrace: KVec<usize> = match groups.iter().find(|g| g.index == usize::MAX) {
        Some(g) => {
            let mut v = KVec::new();
            v.extend_from_slice(&g.sites, GFP_KERNEL)?;
            v
        }
        None => KVec::new(),
    };
    let state = |i: usize| shared.state.get(i).map(|s| s.load(Ordering::Acquire));
    for g in groups.iter().filter(|g| g.index != usize::MAX) {
        for &i in g.sites.iter() {
            if shared.sites.get(i).map(|s| s.kind) != Some(PoolKind::Prologue) {
                continue;
            }
            if let Some(call) = partner(shared, i, PoolKind::Call) {
                if ftrace.contains(&call) || state(call) != Some(0) {
                    pr_err!("scenario: prologue site {i} is under a call site that may be on\n");
                    return Err(EINVAL);
                }
            }
        }
    }
    for &call in ftrace.iter() {
        if let Some(p) = partner(shared, call, PoolKind::Prologue) {
            if state(p) != Some(1) {
                pr_err!("scenario: call site {call} is under a prologue that is off\n");
                return Err(EINVAL);
            }
        }
    }
    Ok(())
}

/// Runs `spec` to completion.
pub(crate) fn run(shared: &Arc<Shared>, spec: Spec) -> Result<Outcome> {
    let mut groups: KVec<Group> = KVec::new();
    let mut used = [0usize; KINDS.len()];
    for k in 0..spec.keys {
        let kind = *KEY_KINDS.get(k % KEY_KINDS.len()).ok_or(EINVAL)?;
        let slot = used.get_mut(kind as usize).ok_or(EINVAL)?;
        let mut sites = KVec::new();
        if kind == PoolKind::Prologue {
            for i in of_kind(shared, kind).rev().skip(*slot).take(spec.sites) {
                sites.push(i, GFP_KERNEL)?;
            }
        } else {
            for i in of_kind(shared, kind).skip(*slot).take(spec.sites) {
                sites.push(i, GFP_KERNEL)?;
            }
        }
        if sites.len() != spec.sites || spec.sites > engine_api::MAX_BATCH {
            pr_err!(
                "scenario: not enough {} sites for {} keys of {}\n",
                kind.name(),
                spec.keys,
                spec.sites
            );
            return Err(EINVAL);
        }
        *slot = slot.saturating_add(spec.sites);
        groups.push(Group { index: k, sites }, GFP_KERNEL)?;
    }
    if spec.ftrace > 0 {
        let mut sites = KVec::new();
        for i in of_kind(shared, PoolKind::Call).take(spec.ftrace) {
            sites.push(i, GFP_KERNEL)?;
        }
        if sites.len() != spec.ftrace {
            pr_err!(
                "scenario: not enough call sites for ftrace={}\n",
                spec.ftrace
            );
            return Err(EINVAL);
        }
        groups.push(
            Group {
                index: usize::MAX,
                sites,
            },
            GFP_KERNEL,
        )?;
    }
    prologues_stay_under_calls(shared, &groups)?;
    let mut active = KVec::new();
    for g in groups.iter() {
        active.extend_from_slice(&g.sites, GFP_KERNEL)?;
    }

    // Hand the groups out to the pokers: keys round-robin, the ftrace group to poker 0.
    let mut per_poker: KVec<KVec<usize>> = KVec::new();
    for _ in 0..spec.pokers {
        per_poker.push(KVec::new(), GFP_KERNEL)?;
    }
    for (i, g) in groups.iter().enumerate() {
        let p = if g.index == usize::MAX {
            0
        } else {
            g.index.checked_rem(spec.pokers).unwrap_or(0)
        };
        per_poker.get_mut(p).ok_or(EINVAL)?.push(i, GFP_KERNEL)?;
    }
    let groups = Arc::new(groups, GFP_KERNEL)?;

    let start = clock::now();
    let executors = Executors::start(shared, Arc::new(active, GFP_KERNEL)?)?;
    // Let every executor get going before the first batch.
    kthread::sleep_ms(20);
    let mut pokers = KVec::new();
    let mut threads = KVec::new();
    let groups_all = groups.clone();
    for (index, groups) in per_poker.into_iter().enumerate() {
        // The initializer moves what it names: clone outside it.
        let (shared, all) = (shared.clone(), groups_all.clone());
        let p = Arc::pin_init(
            try_pin_init!(Poker {
                shared,
                index,
                groups,
                all,
                flips: spec.flips,
                batches <- new_mutex!(KVec::new()),
                done: AtomicBool::new(false),
                error: AtomicI32::new(0),
            }),
            GFP_KERNEL,
        )?;
        let thread = match spec.avoid {
            None => Kthread::spawn(c_str!("textpoke_poker"), p.clone(), poke)?,
            Some(avoid) => {
                // Round-robin over the other online CPUs, each poker bound to one.
                let others = || crate::cpu::online().filter(move |&c| c != avoid);
                let n = others().count();
                let cpu = others()
                    .nth(index.checked_rem(n).ok_or(EINVAL)?)
                    .ok_or(EINVAL)?;
                Kthread::on_cpu(cpu, c_str!("textpoke_poker/%u"), p.clone(), poke)?
            }
        };
        threads.push(thread, GFP_KERNEL)?;
        pokers.push(p, GFP_KERNEL)?;
    }
    while !pokers.iter().all(|p| p.done.load(Ordering::Acquire)) {
        kthread::sleep_ms(5);
    }
    drop(threads);
    kthread::sleep_ms(10);
    let executors = executors.stop();
    let nsecs = clock::now().saturating_sub(start);

    let mut batches = KVec::new();
    let mut errno = 0;
    for p in pokers.iter() {
        let mine = core::mem::take(&mut *p.batches.lock());
        for b in mine {
            batches.push(b, GFP_KERNEL)?;
        }
        if errno == 0 {
            errno = p.error.load(Ordering::Relaxed);
        }
    }
    Ok(Outcome {
        spec,
        executors,
        batches,
        errno,
        nsecs,
    })
}
