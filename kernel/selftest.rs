// SPDX-License-Identifier: GPL-2.0

//! The load-time self-test, reported as a KTAP document named `textpoke_selftest`.
//!
//! It checks what can be checked without another module's sites: the patch series, the plan,
//! the pending table, the record codec, the all-CPU sync, and the whole trap path on each of
//! the arch's own sites in [`selftest_site::SITES`] (guard written, CPU traps, handler emulates
//! the new instruction, guard removed). Batches on real sites are exercised by the samples,
//! driven from the guest agent.

use crate::arch::{self, selftest_site};
use crate::cpu::{self, NoPreempt};
use crate::engine::{Engine, PendingInsn};
use crate::ktap::Ktap;
use crate::plan::{Change, Cost, Plan};
use crate::poke_log::LAYOUT;
use crate::record::{self, Record, SampleId};

/// A site of textpoke's own that the self-test guards and executes on the current CPU.
pub(crate) struct TrapSite {
    /// The KTAP case.
    pub(crate) name: &'static str,
    /// The site's address.
    pub(crate) addr: fn() -> u64,
    /// Runs the site's function: 0 if the site executed `old`, 1 if it behaved as `new`.
    pub(crate) call: fn() -> u32,
    /// The instruction the site holds.
    pub(crate) old: arch::Insn,
    /// The instruction the self-test has the trap handler emulate.
    pub(crate) new: fn() -> arch::Insn,
}

/// Cases only one arch has: arm64's exclusive claim of the guard's `BRK` immediate.
#[cfg(CONFIG_ARM64)]
const ARCH_CASES: usize = 1;
#[cfg(not(CONFIG_ARM64))]
const ARCH_CASES: usize = 0;

/// Runs every test; `true` if all passed.
pub(crate) fn run(engine: &Engine) -> bool {
    let planned = 5 + selftest_site::SITES.len() + ARCH_CASES;
    let mut t = Ktap::start("textpoke_selftest", planned);
    // Reaching this point means `Series::resolve` found every export.
    t.result("patch_series_resolved", Ok(()));
    t.result("plan_cost_matches_protocol", plan_cost());
    t.result("pending_table_publish_lookup_retire", pending_table(engine));
    t.result("record_codec_round_trip", record_round_trip());
    arch::sync_all();
    t.result("all_cpu_sync_returns", Ok(()));
    for site in &selftest_site::SITES {
        t.result(site.name, trap(engine, site));
    }
    #[cfg(CONFIG_ARM64)]
    t.result("brk_immediate_claimed_once", second_claim_refused(engine));
    t.finish()
}

/// Another patcher cannot claim the guard's immediate while textpoke holds it: a second owner
/// would be handed traps on guards whose pending instructions only textpoke knows.
#[cfg(CONFIG_ARM64)]
fn second_claim_refused(engine: &Engine) -> Result<(), &'static str> {
    match arch::TrapHook::register(&engine.series) {
        Err(e) if e == kernel::error::code::EBUSY => Ok(()),
        Err(_) => Err("second claim refused with an errno other than EBUSY"),
        // Dropping it unregisters textpoke's hook too; the failed self-test then refuses the
        // load, and no guard has been written.
        Ok(_second) => Err("a second claim of the guard immediate succeeded"),
    }
}

/// The change `site` undergoes, and its new instruction.
fn change_of(site: &TrapSite) -> Result<(Change, arch::Insn), &'static str> {
    let addr = (site.addr)();
    let new = (site.new)();
    let old = site.old.encode(addr).map_err(|e| e.as_str())?;
    let new_bytes = new.encode(addr).map_err(|e| e.as_str())?;
    Ok((
        Change {
            old,
            new: new_bytes,
        },
        new,
    ))
}

/// The first self-test site: a real one, for the checks that need any.
fn first_site() -> Result<&'static TrapSite, &'static str> {
    selftest_site::SITES.first().ok_or("no self-test site")
}

/// The first self-test site's change.
fn change() -> Result<(Change, arch::Insn), &'static str> {
    change_of(first_site()?)
}

fn plan_cost() -> Result<(), &'static str> {
    let (c, _) = change()?;
    let cost = Cost::of(Plan::new(arch::PLAN_ARCH, &[c, c]));
    // x86: guards, tails, first bytes; arm64: guards, instructions.
    let syncs = match arch::PLAN_ARCH {
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
    let (_, insn) = change()?;
    let entries = [
        PendingInsn {
            addr: 0x1000,
            len: 4,
            insn,
        },
        PendingInsn {
            addr: 0x2000,
            len: 4,
            insn,
        },
    ];
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

fn record_round_trip() -> Result<(), &'static str> {
    let (c, _) = change()?;
    let sample = SampleId {
        time: Some(42),
        ..SampleId::default()
    };
    let mut buf = [0u8; 128];
    let site = (first_site()?.addr)();
    let n = record::write_text_poke(
        &mut buf,
        record::PERF_RECORD_MISC_KERNEL,
        site,
        c.old.as_slice(),
        c.new.as_slice(),
        &sample,
        LAYOUT,
    )
    .map_err(|e| e.as_str())?;
    let (parsed, used) =
        record::parse_record(buf.get(..n).unwrap_or(&[]), LAYOUT).map_err(|e| e.as_str())?;
    match parsed {
        Record::TextPoke(p)
            if used == n
                && p.addr == site
                && p.old == c.old.as_slice()
                && p.new == c.new.as_slice() =>
        {
            Ok(())
        }
        _ => Err("parsed record differs"),
    }
}

/// Guards a self-test site, executes it (it must trap and behave as the new instruction), then
/// puts the old instruction back.
fn trap(engine: &Engine, s: &TrapSite) -> Result<(), &'static str> {
    let (c, insn) = change_of(s)?;
    let site = (s.addr)();
    if (s.call)() != 0 {
        return Err("site did not hold its original instruction");
    }
    let len = u8::try_from(c.new.len()).map_err(|_| "length")?;
    let entries = [PendingInsn {
        addr: site,
        len,
        insn,
    }];
    let write = |bytes: &[u8]| {
        let held = engine.series.lock_text();
        arch::write(&engine.series, &held, site, bytes).map_err(|_| "write failed")
    };
    let outcome = engine
        .table
        .with_published(
            &entries,
            cpu::cond_resched,
            || -> Result<(u32, u64), &'static str> {
                write(arch::GUARD)?;
                arch::sync_all();
                let observed = {
                    let _pinned = NoPreempt::new();
                    let c = cpu::current();
                    let before = engine.stats.cpu_traps(c);
                    let path = (s.call)();
                    (path, engine.stats.cpu_traps(c).wrapping_sub(before))
                };
                // Back to the original: the guard covers exactly the old head.
                write(c.old.as_slice().get(..arch::HEAD_LEN).unwrap_or(&[]))?;
                arch::sync_all();
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
