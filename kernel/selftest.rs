// SPDX-License-Identifier: GPL-2.0

//! The load-time self-test.
//!
//! It checks what can be checked without another module's sites: the plan, the pending table,
//! and the whole trap path on each of the arch's own sites ([`Arch::selftest_sites`]: guard
//! written, CPU traps, handler emulates the new instruction, guard removed), plus the arch's own
//! cases. Batches on real sites are exercised by the samples, driven from the guest agent.
//!
//! Results go to the kernel log as `textpoke: selftest: 1..N`, `textpoke: selftest: ok I NAME`
//! and `textpoke: selftest: not ok I NAME: WHY` lines. They are not a KTAP document of their
//! own: each boot prints exactly one, the guest agent's, which turns these lines into its
//! `textpoke_selftest` suite (also when the module refused to load), so that the kernel's own
//! KTAP parser reads every result of a boot.

use crate::arch::{Arch, TrapSite};
use crate::cpu::{self, NoPreempt};
use crate::current_arch::CurrentArch;
use crate::engine::Engine;
use crate::entry::Entry;
use crate::patch_series::TrapHook;
use crate::plan::{Change, Cost, Plan};
use crate::replaced::{Replaced, LARGEST_BATCH};
use kernel::prelude::*;

/// The self-test's results as log lines (see the module documentation).
struct Report {
    planned: usize,
    reported: usize,
    failed: usize,
}

impl Report {
    fn start(planned: usize) -> Self {
        pr_info!("selftest: 1..{planned}\n");
        Self {
            planned,
            reported: 0,
            failed: 0,
        }
    }

    fn result(&mut self, name: &str, outcome: Result<(), &str>) {
        self.reported = self.reported.saturating_add(1);
        match outcome {
            Ok(()) => pr_info!("selftest: ok {} {name}\n", self.reported),
            Err(why) => {
                self.failed = self.failed.saturating_add(1);
                pr_err!("selftest: not ok {} {name}: {why}\n", self.reported);
            }
        }
    }

    /// `true` if every planned test was reported and passed.
    fn finish(self) -> bool {
        self.failed == 0 && self.reported == self.planned
    }
}

/// Runs every test, with the trap handler registered as `hook`; `true` if all passed.
pub(crate) fn run(engine: &Engine, hook: &TrapHook) -> bool {
    let sites = CurrentArch::selftest_sites();
    let cases = CurrentArch::selftest_cases();
    let mut t = Report::start(4 + sites.len() + cases.len());
    t.result("plan_cost_matches_protocol", plan_cost());
    t.result("pending_table_publish_lookup_retire", pending_table(engine));
    t.result("replaced_holds_last_two_batches", replaced(engine));
    t.result("trap_hook_claimed_once", claimed_once(hook));
    for site in sites {
        t.result(site.name, trap(engine, site));
    }
    for case in cases {
        t.result(case.name, (case.run)(&engine.exports.arch));
    }
    t.finish()
}

/// [`Replaced`] remembers every site of the last two batches, the largest included: a batch of
/// [`LARGEST_BATCH`] sites, a small one, another of [`LARGEST_BATCH`], on a record of the
/// test's own (its addresses no CPU executes, 4 bytes apart as arm64's instructions are).
fn replaced(engine: &Engine) -> Result<(), &'static str> {
    type Sites = core::iter::Take<core::iter::StepBy<core::ops::RangeFrom<u64>>>;
    fn batch(first: u64, n: usize) -> Sites {
        (first..).step_by(4).take(n)
    }
    let r = Replaced::new().map_err(|_| "no memory for a record")?;
    let (a, b, c) = (
        batch(0x10_0000, LARGEST_BATCH),
        batch(0x90_0000, 10),
        batch(0x100_0000, LARGEST_BATCH),
    );
    let all = |mut sites: Sites| sites.all(|s| r.contains(s));
    let text = engine.exports.generic.lock_text();
    r.record_batch(text.holds(), a.clone());
    if !all(a.clone()) {
        return Err("a site of a batch of the largest size not found");
    }
    r.record_batch(text.holds(), b.clone());
    if !all(a.clone()) || !all(b.clone()) {
        return Err("a site of the batch before the last not found");
    }
    r.record_batch(text.holds(), c.clone());
    drop(text);
    if !all(b.clone()) || !all(c.clone()) {
        return Err("a site of the last two batches not found");
    }
    if a.clone().any(|s| r.contains(s)) {
        return Err("a site of the third batch back still found");
    }
    if r.contains(0x90_0000 + 4 * 10) || r.contains(0x90_0002) {
        return Err("a site never recorded found");
    }
    Ok(())
}

/// Another handler cannot claim the guard trap while textpoke holds it: a second owner would be
/// handed traps on guards whose pending instructions only textpoke knows.
fn claimed_once(hook: &TrapHook) -> Result<(), &'static str> {
    match hook.second_claim() {
        Err(e) if e == EBUSY => Ok(()),
        Err(_) => Err("second claim refused with an errno other than EBUSY"),
        Ok(()) => Err("a second claim of the guard trap succeeded"),
    }
}

/// The change `site` undergoes, as the pending table holds it.
fn entry_of(site: &TrapSite) -> Result<Entry, &'static str> {
    let addr = (site.addr)();
    let (old, new) = (site.change)().map_err(|e| e.as_str())?;
    let insn = CurrentArch::accept(addr, new.as_slice()).map_err(|e| e.as_str())?;
    Entry::new(addr, insn, Change::new(old, new), false).map_err(|_| "old instruction not listed")
}

/// The first self-test site's change: a real one, for the checks that need any.
fn first() -> Result<Entry, &'static str> {
    entry_of(
        CurrentArch::selftest_sites()
            .first()
            .ok_or("no self-test site")?,
    )
}

fn plan_cost() -> Result<(), &'static str> {
    let c = first()?.change;
    let cost = Cost::of(Plan::new(CurrentArch::PLAN, &[c, c]));
    // x86: guards, tails, first bytes; arm64: guards, instructions.
    let syncs = match CurrentArch::PLAN {
        crate::plan::Arch::X86 => 3,
        crate::plan::Arch::Arm64 => 2,
    };
    if cost.syncs != syncs || cost.records != 2 {
        return Err("unexpected sync or record count");
    }
    Ok(())
}

fn pending_table(engine: &Engine) -> Result<(), &'static str> {
    // Addresses no CPU executes: only the table's bookkeeping is under test.
    let e = first()?;
    let entries = [Entry { addr: 0x1000, ..e }, Entry { addr: 0x2000, ..e }];
    let found = engine
        .table
        .with_published(&entries, cpu::cond_resched, || {
            let _pinned = NoPreempt::new();
            let c = cpu::current();
            (
                engine.table.lookup(c, 0x2000).map(|p| p.addr),
                engine.table.lookup(c, 0x2001).is_none(),
            )
        })
        .map_err(|_| "publish refused")?;
    if found != (Some(0x2000), true) {
        return Err("lookup while published");
    }
    if engine.table.lookup(0, 0x2000).is_some() {
        return Err("still found after retire");
    }
    Ok(())
}

/// Guards a self-test site, executes it (it must trap and behave as the new instruction), then
/// puts the old instruction back.
fn trap(engine: &Engine, s: &TrapSite) -> Result<(), &'static str> {
    let entry = entry_of(s)?;
    let site = entry.addr;
    if (s.call)() != 0 {
        return Err("site did not hold its original instruction");
    }
    let write = |bytes: &[u8]| {
        let held = engine.exports.generic.lock_text();
        CurrentArch::write(&engine.exports.arch, held.holds(), site, bytes)
            .map_err(|_| "write failed")
    };
    let old_head = entry
        .change
        .old
        .as_slice()
        .get(..<CurrentArch as Arch>::HEAD_LEN)
        .ok_or("old instruction shorter than its head")?;
    let outcome = engine
        .table
        .with_published(
            &[entry],
            cpu::cond_resched,
            || -> Result<(u32, u64), &'static str> {
                write(<CurrentArch as Arch>::GUARD)?;
                CurrentArch::sync_all();
                let observed = {
                    let _pinned = NoPreempt::new();
                    let c = cpu::current();
                    let before = engine.stats.cpu_traps(c);
                    let path = (s.call)();
                    (path, engine.stats.cpu_traps(c).wrapping_sub(before))
                };
                // Back to the original: the guard covers exactly the old head.
                write(old_head)?;
                CurrentArch::sync_all();
                Ok(observed)
            },
        )
        .map_err(|_| "publish refused")??;
    match outcome {
        (1, 1) if (s.call)() == 0 => Ok(()),
        (1, 1) => Err("original instruction not restored"),
        (1, _) => Err("took the new path without a counted trap"),
        _ => Err("trap did not emulate the new instruction"),
    }
}
