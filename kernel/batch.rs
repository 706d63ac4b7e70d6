// SPDX-License-Identifier: GPL-2.0

//! A batch: sites to change together, then the guarded protocol executed step by step.
//!
//! A batch owns its sites from [`Batch::add`] until it is committed or dropped (another batch
//! naming one of them gets `EBUSY`), and pins their modules and textpoke itself, so neither
//! can be unloaded while it exists. [`Batch::commit`] runs the planner's steps (`plan.rs`)
//! verbatim: the pending table is published before the first guard and retired after the last
//! sync, and each step maps to one primitive: `text_poke()` or `aarch64_insn_write()` plus cache
//! maintenance under `text_mutex`, an all-CPU sync, or `perf_event_text_poke()`.
//!
//! Several batches may be committed concurrently from different threads: each holds
//! `text_mutex` only while it writes, never across a sync, so their phases interleave, and the
//! pending table resolves any guard of any of them.

use crate::arch;
use crate::clock;
use crate::cpu::{self, HotplugGuard, NoPreempt};
use crate::debug;
use crate::engine::{Engine, PendingInsn};
use crate::errno;
use crate::insn::{InsnBytes, MAX_INSN_LEN};
use crate::kernel_text;
use crate::module_text::ModuleRef;
use crate::pending::PublishError;
use crate::plan::{Change, Plan, Protocol, Step};
use crate::series::TextMutexGuard;
use crate::sites::Found;
use core::sync::atomic::Ordering;
use kernel::{ffi::c_void, prelude::*};

/// Most sites in one batch (`TEXTPOKE_MAX_BATCH` in kernel/textpoke.h).
pub(crate) const MAX_SITES: usize = 4096;

/// What a commit cost (`struct textpoke_batch_stats` in kernel/textpoke.h).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct BatchStats {
    /// Wall time of the commit, in nanoseconds.
    pub(crate) nsecs: u64,
    /// Sites changed.
    pub(crate) sites: u32,
    /// All-CPU syncs (machine-wide IPI rounds).
    pub(crate) syncs: u32,
    /// Text writes.
    pub(crate) writes: u32,
    /// `PERF_RECORD_TEXT_POKE` records emitted.
    pub(crate) records: u32,
}

struct Entry {
    addr: u64,
    old: InsnBytes,
    new: InsnBytes,
    insn: arch::Insn,
    /// Keeps the site's module loaded while the batch exists.
    _owner: ModuleRef,
}

/// A batch of site changes.
pub(crate) struct Batch {
    id: u64,
    entries: KVec<Entry>,
    committed: bool,
    stats: BatchStats,
    /// Keeps textpoke loaded while the batch exists.
    _engine: ModuleRef,
}

impl Batch {
    /// An empty batch.
    pub(crate) fn new(engine: &Engine) -> Result<Self> {
        Ok(Self {
            id: engine.next_batch_id(),
            entries: KVec::new(),
            committed: false,
            stats: BatchStats::default(),
            _engine: engine.module.get()?,
        })
    }

    /// What the commit cost (zeroes before it).
    pub(crate) fn stats(&self) -> BatchStats {
        self.stats
    }

    /// Adds the change of the registered site at `addr` to the instruction `bytes`.
    ///
    /// Everything about the change is checked here, so that a commit only fails if the text
    /// changed behind the engine's back; see [`crate::errno`] for the errno of each refusal.
    /// A refused change leaves the batch as it was.
    pub(crate) fn add(&mut self, engine: &Engine, addr: u64, bytes: &[u8]) -> Result {
        let id = self.id;
        let refuse = |why: &str, e: Error| {
            pr_err!("batch {id}: refusing change at {addr:#x}: {why}\n");
            e
        };
        if self.committed {
            return Err(refuse("batch already committed", errno::already()));
        }
        if self.entries.len() >= MAX_SITES {
            return Err(refuse("batch is full", errno::too_big()));
        }
        let mut sites = engine.sites.lock();
        let index = match sites.find(addr) {
            Found::Site(i) => i,
            Found::Inside => return Err(refuse("inside another site", errno::inside_site())),
            Found::Nowhere => return Err(refuse("not a registered site", errno::not_registered())),
        };
        let site = sites.get_mut(index).ok_or(errno::not_registered())?;
        if site.batch == id {
            return Err(refuse("site already in this batch", errno::duplicate()));
        }
        if site.batch != 0 {
            return Err(refuse(
                "site owned by another batch in flight",
                errno::busy(),
            ));
        }
        if arch::is_guard(bytes) {
            return Err(refuse(
                "new instruction is the guard itself",
                errno::guard_collision(),
            ));
        }
        let insn =
            arch::Insn::decode(addr, bytes).map_err(|e| refuse(e.as_str(), errno::insn(e)))?;
        let new = InsnBytes::new(bytes).map_err(|e| refuse(e.as_str(), errno::insn(e)))?;
        if new.len() != site.len() {
            return Err(refuse(
                "instruction size differs from the site's",
                errno::wrong_size(),
            ));
        }
        let owner = site
            .owner
            .get()
            .map_err(|_| refuse("its module is going away", errno::module_gone()))?;
        // Reserve first so that claiming the site cannot be followed by a failed push.
        self.entries.reserve(1, GFP_KERNEL)?;
        site.batch = id;
        let entry = Entry {
            addr,
            old: site.current,
            new,
            insn,
            _owner: owner,
        };
        self.entries.push(entry, GFP_KERNEL)?;
        Ok(())
    }

    /// Applies every change with the guarded protocol; see the module documentation.
    pub(crate) fn commit(&mut self, engine: &Engine) -> Result {
        let id = self.id;
        if self.committed {
            pr_err!("batch {id}: refusing commit: already committed\n");
            return Err(errno::already());
        }
        if self.entries.is_empty() {
            pr_err!("batch {id}: refusing commit: no changes\n");
            return Err(errno::empty());
        }
        let start = clock::now();
        // The pending table and the trap handler's search need address order.
        self.entries.sort_unstable_by_key(|e| e.addr);
        if let Some(e) = self.entries.iter().find(|e| !holds(e.addr, &e.old)) {
            pr_err!(
                "batch {id}: site {:#x} changed behind textpoke's back\n",
                e.addr
            );
            return Err(errno::text_changed());
        }
        let mut pending = KVec::with_capacity(self.entries.len(), GFP_KERNEL)?;
        let mut changes = KVec::with_capacity(self.entries.len(), GFP_KERNEL)?;
        for e in self.entries.iter() {
            let len = u8::try_from(e.new.len()).map_err(|_| errno::wrong_size())?;
            pending.push(
                PendingInsn {
                    addr: e.addr,
                    len,
                    insn: e.insn,
                },
                GFP_KERNEL,
            )?;
            changes.push(
                Change {
                    old: e.old,
                    new: e.new,
                },
                GFP_KERNEL,
            )?;
        }

        let protocol = debug::protocol();
        if protocol != Protocol::Guarded {
            pr_warn!("batch {id}: DELIBERATELY BROKEN protocol {protocol:?} (debug_protocol)\n");
        }
        let _hotplug = HotplugGuard::new();
        let mut plan = Plan::with_protocol(arch::PLAN_ARCH, protocol, &changes);
        self.committed = true;
        let ran = match plan.next() {
            Some(Step::Publish) => engine
                .table
                .with_published(&pending, cpu::cond_resched, || self.run(engine, &mut plan))
                .unwrap_or_else(|e| Err(publish_error(id, e))),
            // Every change is a no-op: nothing to write, nothing to record.
            _ => Ok(()),
        };
        self.stats.nsecs = clock::now().saturating_sub(start);
        self.stats.sites = u32::try_from(self.entries.len()).unwrap_or(u32::MAX);

        let mut sites = engine.sites.lock();
        for e in self.entries.iter() {
            // After a failed batch a site holds its new instruction if its record went out
            // (see `recover`), its old one otherwise: keep the registry in step with the text.
            let new = ran.is_ok() || holds(e.addr, &e.new);
            if let Found::Site(i) = sites.find(e.addr) {
                if let Some(site) = sites.get_mut(i) {
                    if new {
                        site.current = e.new;
                    }
                    site.batch = 0;
                }
            }
        }
        drop(sites);
        let t = &engine.stats.totals;
        if ran.is_ok() {
            t.batches.fetch_add(1, Ordering::Relaxed);
            t.sites
                .fetch_add(u64::from(self.stats.sites), Ordering::Relaxed);
        } else {
            t.failed.fetch_add(1, Ordering::Relaxed);
        }
        t.syncs
            .fetch_add(u64::from(self.stats.syncs), Ordering::Relaxed);
        t.records
            .fetch_add(u64::from(self.stats.records), Ordering::Relaxed);
        ran
    }

    /// Runs the plan's steps between `Publish` and `Retire`, with the batch published.
    fn run(&mut self, engine: &Engine, plan: &mut Plan<'_>) -> Result {
        let mut recorded = KVec::from_elem(false, self.entries.len(), GFP_KERNEL)?;
        let mut held: Option<TextMutexGuard<'_>> = None;
        for step in plan.by_ref() {
            let done = match step {
                Step::Retire => return Ok(()),
                Step::Sync => {
                    // Never hold text_mutex across a sync: other batches and the kernel's own
                    // pokers get to write while this one waits for the IPI round.
                    held = None;
                    arch::sync_all();
                    self.stats.syncs = self.stats.syncs.saturating_add(1);
                    Ok(())
                }
                Step::Emit(i) => {
                    self.emit(engine, i);
                    if let Some(r) = recorded.get_mut(i) {
                        *r = true;
                    }
                    Ok(())
                }
                Step::WriteGuard(i) => self.write(engine, &mut held, i, 0, arch::GUARD),
                Step::WriteTail(i) => {
                    let tail = self.entries.get(i).map(|e| e.new);
                    let tail = tail.as_ref().map_or(&[][..], |n| n.tail());
                    self.write(engine, &mut held, i, 1, tail)
                }
                Step::WriteHead(i) => {
                    let new = self.entries.get(i).map(|e| e.new);
                    let head = new
                        .as_ref()
                        .and_then(|n| n.as_slice().get(..arch::HEAD_LEN));
                    self.write(engine, &mut held, i, 0, head.unwrap_or(&[]))
                }
                Step::WriteWhole(i) => {
                    let new = self.entries.get(i).map(|e| e.new);
                    self.write(
                        engine,
                        &mut held,
                        i,
                        0,
                        new.as_ref().map_or(&[][..], |n| n.as_slice()),
                    )
                }
                Step::Publish => Err(EINVAL),
            };
            if let Err(e) = done {
                drop(held);
                self.recover(engine, &recorded);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Writes `bytes` at offset `offset` of change `i`'s site, taking `text_mutex` if needed.
    fn write<'a>(
        &mut self,
        engine: &'a Engine,
        held: &mut Option<TextMutexGuard<'a>>,
        i: usize,
        offset: u64,
        bytes: &[u8],
    ) -> Result {
        let e = self.entries.get(i).ok_or(EINVAL)?;
        if bytes.is_empty() {
            return Err(EINVAL);
        }
        let lock = held.get_or_insert_with(|| engine.series.lock_text());
        arch::write(&engine.series, lock, e.addr.wrapping_add(offset), bytes)?;
        self.stats.writes = self.stats.writes.saturating_add(1);
        if self.stats.writes % 64 == 0 {
            // A big batch on a slow machine writes for a long time; let others run, as upstream
            // text_poke_bp_batch() does since a batch tripped the soft-lockup watchdog. Holding
            // text_mutex and the hotplug lock across it is fine: both are sleeping locks, and a
            // guard left in place meanwhile is what the trap handler is for.
            cpu::cond_resched();
        }
        Ok(())
    }

    /// Emits change `i`'s `PERF_RECORD_TEXT_POKE` and logs it.
    fn emit(&mut self, engine: &Engine, i: usize) {
        let Some(e) = self.entries.get(i) else {
            return;
        };
        let (old, new) = (e.old.as_slice(), e.new.as_slice());
        let (cpu, time) = {
            // perf delivers the record to the side-band events of the CPU it runs on; stay on
            // one CPU so the log names the right one.
            let _pinned = NoPreempt::new();
            // SAFETY: `old` and `new` are valid for their lengths; the function copies them into
            // the ring buffers of interested events and keeps no reference.
            unsafe {
                (engine.series.perf_event_text_poke)(
                    e.addr as usize as *const c_void,
                    old.as_ptr().cast::<c_void>(),
                    old.len(),
                    new.as_ptr().cast::<c_void>(),
                    new.len(),
                )
            };
            (cpu::current(), clock::now())
        };
        engine.log.append(e.addr, old, new, time, cpu);
        self.stats.records = self.stats.records.saturating_add(1);
    }

    /// Brings every site out of its guard after a failed write, so the batch can retire.
    ///
    /// A guarded site gets its new instruction if its record was emitted (the tail, on x86,
    /// is already new then) and its old one otherwise, so the text matches the record stream.
    /// Then one sync, so no CPU still executes a guard.
    fn recover(&mut self, engine: &Engine, recorded: &[bool]) {
        pr_err!("batch {}: write failed; restoring guarded sites\n", self.id);
        let mut held = None;
        for i in 0..self.entries.len() {
            let Some(e) = self.entries.get(i) else {
                break;
            };
            let mut now = [0u8; MAX_INSN_LEN];
            let Some(now) = now.get_mut(..e.old.len()) else {
                continue;
            };
            if kernel_text::read(e.addr, now).is_err() || !arch::is_guard(now) {
                continue;
            }
            let (addr, target) = (
                e.addr,
                if recorded.get(i).copied().unwrap_or(false) {
                    e.new
                } else {
                    e.old
                },
            );
            if self
                .write(engine, &mut held, i, 0, target.as_slice())
                .is_err()
            {
                pr_err!("site {:#x} is stuck on its guard\n", addr);
            }
        }
        drop(held);
        arch::sync_all();
        self.stats.syncs = self.stats.syncs.saturating_add(1);
    }
}

/// Whether the text at `addr` is `insn` now.
fn holds(addr: u64, insn: &InsnBytes) -> bool {
    let mut now = [0u8; MAX_INSN_LEN];
    now.get_mut(..insn.len())
        .is_some_and(|now| kernel_text::read(addr, now).is_ok() && *now == *insn.as_slice())
}

/// The errno and log line for a batch the pending table refused.
fn publish_error(id: u64, e: PublishError) -> Error {
    pr_err!("batch {id}: pending table refused it: {e:?}\n");
    match e {
        PublishError::Full => errno::too_many_batches(),
        PublishError::Conflict => errno::busy(),
        PublishError::Empty => errno::empty(),
        PublishError::Duplicate => errno::duplicate(),
        PublishError::Unsorted | PublishError::Overlap => errno::inside_site(),
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if self.committed || self.entries.is_empty() {
            return;
        }
        // Give back the sites this uncommitted batch claimed.
        let Some(engine) = crate::engine::get() else {
            return;
        };
        let mut sites = engine.sites.lock();
        for e in self.entries.iter() {
            if let Found::Site(i) = sites.find(e.addr) {
                if let Some(site) = sites.get_mut(i).filter(|s| s.batch == self.id) {
                    site.batch = 0;
                }
            }
        }
    }
}
