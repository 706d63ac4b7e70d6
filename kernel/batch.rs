// SPDX-License-Identifier: GPL-2.0

//! A batch: sites to change together, then the plan run phase by phase.
//!
//! A batch owns its sites from [`Batch::add`] until it is committed or dropped (another batch
//! naming one of them gets `EBUSY`), and pins their modules and textpoke itself, so neither
//! can be unloaded while it exists. [`Batch::commit`] runs the planner's phases (`plan.rs`, the
//! canonical description of the protocol), each kind with a function of its own (`Run::phase`)
//! whose steps are primitives: text writes under `text_mutex`, a phase's handed to the arch
//! together (`Arch::write_many`), an all-CPU sync, `perf_event_text_poke()`, or a parked section
//! run with every other CPU stopped (`stop_machine_cpuslocked()`).
//!
//! Several batches may be committed concurrently from different threads: a guarded module
//! batch holds `text_mutex` while it writes, and across a sync only from its first record or a
//! failed step until it retires ([`AcrossSyncs`] says why), so their guard phases
//! interleave, and the pending table resolves any guard of any of them.

use crate::arch::{Arch, TextWrite};
use crate::clock;
use crate::cpu::{self, HotplugGuard, NoPreempt};
use crate::current_arch::CurrentArch;
use crate::debug::{self, Defect};
use crate::engine::Engine;
use crate::entry::{CommitState, Entry, MAX_SITES};
use crate::errno;
use crate::insn::{InsnBytes, MAX_INSN_LEN};
use crate::kernel_text;
use crate::module_text::{Module, ModuleRef};
use crate::patch_series::{Generic, HoldsText, KprobesGuard, TextHeld, TextLock};
use crate::pending::PublishError;
use crate::plan::{
    AcrossSyncs, Change, Changes, Phase, Plan, Protocol, Record, Recovery, Repair, Stranded,
    TextHolder, Write,
};
use crate::sites::Found;
use crate::stats::{add_part, Part, Parts};
use core::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use kernel::{
    ffi::{c_int, c_void},
    prelude::*,
};

/// Text writes between two `cond_resched()` calls of a commit: as often as upstream's
/// `text_poke_bp_batch()` yields, once per batch of at most 256 sites, each written up to three
/// times (`INT3`, tail, head). Under `PREEMPT_NONE` each yield that finds the task's slice used
/// up waits for whatever else runs on its CPU: on the benchmark's CPUs, each busy with an
/// executor, a vCPU's turn under TCG (the per-part breakdown of `make bench` shows it).
const WRITES_PER_RESCHED: u32 = 3 * 256;

/// Most writes made together (`Arch::write_many`). A phase of writes is one kind of write over
/// every change that needs it, in address order, so its writes come one after the other,
/// sorted: the arch shares a temporary mm (x86) or a page's mapping (arm64) between them.
const WRITE_RUN: usize = 64;

/// What a commit cost (`struct textpoke_batch_stats` in kernel/textpoke.h).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct BatchStats {
    /// Wall time of the commit, in nanoseconds.
    pub(crate) nsecs: u64,
    /// Sites changed.
    pub(crate) sites: u32,
    /// All-CPU syncs (machine-wide IPI rounds); a parked section counts as one.
    pub(crate) syncs: u32,
    /// Text writes.
    pub(crate) writes: u32,
    /// `PERF_RECORD_TEXT_POKE` records emitted.
    pub(crate) records: u32,
}

// The C header's `struct textpoke_batch_stats`, checked here as kernel/exports.c checks it
// against the header: the same layout on both sides.
static_assert!(core::mem::size_of::<BatchStats>() == 24);
static_assert!(core::mem::offset_of!(BatchStats, sites) == 8);
static_assert!(core::mem::offset_of!(BatchStats, syncs) == 12);
static_assert!(core::mem::offset_of!(BatchStats, writes) == 16);
static_assert!(core::mem::offset_of!(BatchStats, records) == 20);

/// A batch of site changes.
pub(crate) struct Batch {
    id: u64,
    /// The changes, one per site, each with everything the plan, the pending table and the
    /// record need; `kvmalloc`ed, since a kernel batch may hold
    /// [`crate::kernel_queue::KERNEL_MAX_SITES`].
    entries: KVVec<Entry>,
    /// Keeps the modules owning the sites loaded while the batch exists.
    owners: KVec<ModuleRef>,
    /// What the commit learns of each change's site, one per entry, allocated with the entries
    /// so that a commit allocates nothing: a kernel batch's changes are taken before it
    /// commits, and cannot be handed back then. See [`CommitState`].
    state: CommitState,
    committed: bool,
    stats: BatchStats,
    /// Whether the changes are the kernel's own (`patcher.rs`): they have no registered sites.
    kernel: bool,
    /// Keeps textpoke loaded while the batch exists.
    _engine: ModuleRef,
}

impl Batch {
    /// An empty batch.
    pub(crate) fn new(engine: &Engine) -> Result<Self> {
        Ok(Self {
            id: engine.next_batch_id(),
            entries: KVVec::new(),
            owners: KVec::new(),
            state: CommitState::new(),
            committed: false,
            stats: BatchStats::default(),
            kernel: false,
            _engine: engine.module.get()?,
        })
    }

    /// A batch of the kernel's own changes, `entries` (jump labels and ftrace, handed to
    /// textpoke by the patch series: `patcher.rs`), with `state` reserved for each. They name no
    /// registered site, since the kernel's own code chose them; everything else is as for any
    /// batch.
    pub(crate) fn kernel(
        engine: &Engine,
        entries: KVVec<Entry>,
        state: CommitState,
    ) -> Result<Self> {
        if state.len() != entries.len() {
            pr_err!(
                "a kernel batch of {} changes with state for {}\n",
                entries.len(),
                state.len()
            );
            return Err(EINVAL);
        }
        Ok(Self {
            id: engine.next_batch_id(),
            entries,
            owners: KVec::new(),
            state,
            committed: false,
            stats: BatchStats::default(),
            kernel: true,
            _engine: engine.module.get()?,
        })
    }

    /// A committed kernel batch's changes and state, for the kernel queue to reuse their
    /// memory (`kernel_queue::KERNEL_MIN_SITES` says why). `None` for any other batch: an
    /// uncommitted one still claims its changes.
    pub(crate) fn into_parts(mut self) -> Option<(KVVec<Entry>, CommitState)> {
        (self.committed && self.kernel).then(|| {
            (
                core::mem::replace(&mut self.entries, KVVec::new()),
                core::mem::replace(&mut self.state, CommitState::new()),
            )
        })
    }

    /// What the commit cost (zeroes before it).
    pub(crate) fn stats(&self) -> BatchStats {
        self.stats
    }

    /// Adds the change of `caller`'s registered site at `addr` to the instruction `bytes`.
    ///
    /// Everything about the change is checked here, so that a commit only fails if the text
    /// changed behind the engine's back or too many batches are committing at once; see
    /// [`crate::errno`] for the errno of each refusal. A refused change leaves the batch as it
    /// was.
    pub(crate) fn add(
        &mut self,
        engine: &Engine,
        caller: Module,
        addr: u64,
        bytes: &[u8],
    ) -> Result {
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
        let site = sites.get_mut(index)?;
        if site.owner != caller {
            return Err(refuse(
                "the site belongs to another module",
                errno::not_owner(),
            ));
        }
        if site.batch == id {
            return Err(refuse("site already in this batch", errno::duplicate()));
        }
        if site.batch != 0 {
            return Err(refuse(
                "site owned by another batch in flight",
                errno::busy(),
            ));
        }
        if CurrentArch::is_guard(bytes) {
            return Err(refuse(
                "new instruction is the guard itself",
                errno::guard_collision(),
            ));
        }
        let insn =
            CurrentArch::accept(addr, bytes).map_err(|e| refuse(e.as_str(), errno::insn(e)))?;
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
        self.owners.reserve(1, GFP_KERNEL)?;
        self.state.reserve(1)?;
        site.batch = id;
        let change = Change {
            old: site.current,
            new,
            parked: CurrentArch::must_park(&site.current, &new),
        };
        self.entries
            .push(Entry::new(addr, insn, change, false)?, GFP_KERNEL)?;
        self.owners.push(owner, GFP_KERNEL)?;
        self.state.push()?;
        Ok(())
    }

    /// Applies every change with the plan; see the module documentation.
    ///
    /// Refusals that write nothing leave the batch committable: `ENOSPC` when
    /// [`crate::pending::MAX_BATCHES`] batches are committing at this moment, which may be
    /// retried. Once writing started the batch is committed, whatever the outcome.
    pub(crate) fn commit(&mut self, engine: &Engine) -> Result {
        if self.kernel {
            pr_err!(
                "batch {}: a kernel batch committed as a module's\n",
                self.id
            );
            return Err(EINVAL);
        }
        let generic = &engine.exports.generic;
        let early = debug::decided_early(generic);
        // In the order the kernel's pokers take them (see `ModuleLocks`).
        let kprobes = generic.lock_kprobes();
        let hotplug = HotplugGuard::new();
        let text = generic.lock_text();
        // Whether anyone listens, decided under `text_mutex`: a listener that cannot receive
        // records yet starts to only under `text_mutex`, so it waits for this (patch 0011).
        let listening = early.unwrap_or_else(|| generic.listening(text.holds()));
        if listening {
            let locks = ModuleLocks {
                text: Some(text),
                across: AcrossSyncs::at_start(TextHolder::Commit, listening),
                hotplug,
                kprobes: Some(kprobes),
                generic,
            };
            self.commit_with(engine, locks, Protocol::Guarded)
        } else {
            let locks = QuietLocks {
                text,
                hotplug,
                kprobes,
            };
            self.commit_with(engine, locks, Protocol::Quiet)
        }
    }

    /// Commits a batch of the kernel's own changes ([`Batch::kernel`]) for a caller that holds
    /// `text_mutex` throughout (`held`), as the kernel's jump label and ftrace paths do: the plan
    /// runs under it, syncs included, as upstream's `text_poke_bp_batch()` does.
    pub(crate) fn commit_kernel(&mut self, engine: &Engine, held: &TextHeld<'_>) -> Result {
        if !self.kernel {
            pr_err!(
                "batch {}: a module's batch committed as a kernel one\n",
                self.id
            );
            return Err(EINVAL);
        }
        // The caller holds `text_mutex` throughout: an answer of "nobody" holds until it is done.
        let protocol = if engine.exports.generic.listening(held.holds()) {
            Protocol::Guarded
        } else {
            Protocol::Quiet
        };
        self.commit_with(engine, CallerHeld { held }, protocol)
    }

    /// Commits by `protocol` (guarded, or quiet when nobody listens), holding `text_mutex` as
    /// `text` says: released across syncs (a guarded module batch), or held throughout (a quiet
    /// module batch, or a kernel batch, whose caller holds it).
    ///
    /// The phases: refuse a batch that cannot commit; pick the seeded defect (debug builds);
    /// check the text, publish the batch and run the plan ([`Batch::run`]); release the sites;
    /// account ([`Batch::account`]).
    fn commit_with<A: TextAccess>(
        &mut self,
        engine: &Engine,
        text: A,
        protocol: Protocol,
    ) -> Result {
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
        let defect = self.seed_defect();
        let (published, mut parts, guards) = self.run(engine, text, defect, protocol);
        let ran = published.map_err(|e| publish_refused(id, e))?;
        self.committed = true;
        self.stats.nsecs = clock::now().saturating_sub(start);
        self.stats.sites = u32::try_from(self.entries.len()).unwrap_or(u32::MAX);
        let release_start = clock::now();
        if !self.kernel {
            self.release_sites(engine, ran.is_ok());
        }
        add_part(
            &mut parts,
            Part::Release,
            clock::now().saturating_sub(release_start),
        );
        add_part(&mut parts, Part::Total, clock::now().saturating_sub(start));
        self.account(engine, &parts, guards, protocol, ran.is_ok());
        ran
    }

    /// The seeded defect this commit has (debug builds; [`Defect::None`] in a production build),
    /// with each site's "other" instruction set for the defect that emulates it.
    ///
    /// The kernel's own changes get only the defects that touch records, never the text: the
    /// checks of the kernel's keys and ftrace must see them, and a broken write or emulation of
    /// kernel text would break the boot rather than a check.
    fn seed_defect(&mut self) -> Defect {
        let defect = match debug::defect() {
            d @ (Defect::DropRecord | Defect::WrongOldBytes) => d,
            _ if self.kernel => Defect::None,
            d => d,
        };
        if defect != Defect::None {
            pr_warn!(
                "batch {}: DELIBERATELY BROKEN: {defect:?} (debug_protocol)\n",
                self.id
            );
            #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
            {
                // Each site's "other" instruction: the next site's new one.
                let n = self.entries.len();
                for i in 0..n {
                    let next = self.entries.get((i + 1) % n).map(|e| e.insn);
                    if let (Some(e), Some(next)) = (self.entries.get_mut(i), next) {
                        e.wrong.other = next;
                    }
                }
            }
        }
        defect
    }

    /// Checks the text, publishes the batch in the pending table and runs the plan while it is
    /// published. Returns what the table said (`Err`: refused, nothing written), with the plan's
    /// outcome inside, and the time per part and the guards written.
    fn run<A: TextAccess>(
        &mut self,
        engine: &Engine,
        text: A,
        defect: Defect,
        protocol: Protocol,
    ) -> (core::result::Result<Result, PublishError>, Parts, u32) {
        self.state.reset();
        let mut run = Run {
            engine,
            id: self.id,
            entries: &self.entries,
            stats: &mut self.stats,
            sites: self.state.sites.as_mut_slice(),
            conflict: self.state.conflict.as_mut_slice(),
            emitted: self.state.emitted.as_mut_slice(),
            text,
            fail_write: if self.kernel {
                None
            } else {
                debug::failing_write()
            },
            parts: [0; Part::ALL.len()],
            guards: 0,
            since_resched: 0,
            unsynced: false,
            recorded_unsynced: false,
            defect,
            conflict_write: if self.kernel {
                None
            } else {
                debug::conflict_write()
            },
        };
        let table_start = clock::now();
        // Every change is in the table, parked ones included (no trap ever looks those up,
        // but a racing batch with an overlapping site is refused before anything is written).
        // A kernel batch's caller holds `text_mutex`: it takes the slot kept for it
        // (`pending::ENGINE_SLOTS` says why).
        // Before the batch is published and before its first write, under `text_mutex`, which
        // the writes that follow keep: no site's text may have changed since the batch took it
        // (a kprobe armed, another patcher's write). A batch that finds one is never published
        // (a trap at a kprobe's breakpoint there would find the site in the table, and the
        // probe's handler would never run) and writes nothing.
        let published = match run.check_text() {
            Err(e) => Ok(Err(e)),
            Ok(()) => engine.table.with_published_in(
                self.kernel,
                &self.entries,
                cpu::cond_resched,
                || run.plan(protocol),
            ),
        };
        let table_ns = clock::now().saturating_sub(table_start);
        // So far only the plan's steps; the rest of the table's span is the table's own.
        let mut parts = run.parts;
        let plan_ns = parts.iter().fold(0u64, |sum, ns| sum.saturating_add(*ns));
        add_part(&mut parts, Part::Table, table_ns.saturating_sub(plan_ns));
        (published, parts, run.guards)
    }

    /// Adds a committed batch to the totals of its kind (the modules' or the kernel's).
    fn account(&self, engine: &Engine, parts: &Parts, guards: u32, protocol: Protocol, ok: bool) {
        let t = if self.kernel {
            &engine.stats.kernel
        } else {
            &engine.stats.totals
        };
        t.add_parts(parts);
        t.guards.fetch_add(u64::from(guards), Ordering::Relaxed);
        if protocol == Protocol::Quiet {
            t.quiet.fetch_add(1, Ordering::Relaxed);
        }
        if ok {
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
    }

    /// Gives the sites back to the registry, each with the instruction it holds now: the new
    /// one after a successful commit; after a failed one, the new one where its record went
    /// out (see `Run::recover`), the old one elsewhere.
    fn release_sites(&self, engine: &Engine, ok: bool) {
        let mut sites = engine.sites.lock();
        for e in self.entries.iter() {
            let new = ok || holds(e.addr, &e.change.new);
            let Found::Site(i) = sites.find(e.addr) else {
                // Batches pin their sites' modules, and unregistering refuses a site a batch
                // owns: the site must still be there.
                pr_err!(
                    "batch {}: site {:#x} vanished from the registry\n",
                    self.id,
                    e.addr
                );
                continue;
            };
            if let Ok(site) = sites.get_mut(i) {
                if new {
                    site.current = e.change.new;
                }
                site.batch = 0;
            }
        }
    }
}

/// How a commit holds `text_mutex`, and what else it holds.
trait TextAccess {
    /// Holds `text_mutex` from now until the next [`TextAccess::release`] or sync, and lends the
    /// proof that it does.
    fn hold(&mut self) -> &HoldsText;
    /// Lets go of `text_mutex` where this commit took it itself; where the caller holds it, it
    /// stays held.
    fn release(&mut self);
    /// Runs `f`, a sync, with `text_mutex` released where this commit took it (other batches
    /// and the kernel's own pokers write meanwhile) and held throughout where the caller holds
    /// it, as upstream's batches hold it across their syncs.
    fn sync(&mut self, f: impl FnOnce());
    /// A record is about to go out: holds `text_mutex` from now to the commit's end, syncs
    /// included ([`AcrossSyncs::recorded`] says why).
    fn recorded(&mut self);
    /// A step failed: holds `text_mutex` from now to the commit's end, recovery included
    /// ([`AcrossSyncs::failed`] says why).
    fn failed(&mut self);
    /// For a parked section: `text_mutex`, held from now as [`TextAccess::hold`] holds it, and
    /// the CPU-hotplug read lock `stop_machine_cpuslocked()` needs. Only a module's batch holds
    /// that one; a kernel batch cannot take it inside its caller's `text_mutex`, and has no
    /// parked changes (`patcher.rs` hands those back): `None`.
    fn park(&mut self) -> Option<(&HoldsText, &HotplugGuard)>;
    /// kprobes' lock, where this commit holds it: a module batch's, until its guards are
    /// written. A kernel batch's changes are jump labels and ftrace's, whose text kprobes
    /// itself refuses to probe or copy into an optimized probe: `None`.
    fn kprobes(&self) -> Option<&KprobesGuard<'_>>;
}

/// A module batch's locks, taken in the order the kernel's pokers take them and released in
/// the reverse one (fields drop in declaration order).
struct ModuleLocks<'a> {
    /// `text_mutex`, for each run of writes and records; across a sync as `across` says.
    text: Option<TextLock<'a>>,
    /// What a sync does with `text_mutex`: the rule the host model of the listener handshake
    /// runs too.
    across: AcrossSyncs,
    /// The CPU-hotplug read lock, for the whole commit: a stable CPU set for the syncs and
    /// the parked section.
    hotplug: HotplugGuard,
    /// kprobes' lock, from before the text check until the guards are written (the first
    /// sync): no probe is armed on a site between the check and its guard
    /// (`Generic::lock_kprobes`).
    kprobes: Option<KprobesGuard<'a>>,
    generic: &'a Generic,
}

impl TextAccess for ModuleLocks<'_> {
    fn hold(&mut self) -> &HoldsText {
        let generic = self.generic;
        self.text.get_or_insert_with(|| generic.lock_text()).holds()
    }

    fn release(&mut self) {
        self.text = None;
    }

    fn sync(&mut self, f: impl FnOnce()) {
        if self.across.releases() {
            self.text = None;
        }
        // Every guard is written by the first sync: kprobes sees them from here on, and
        // refuses these sites.
        self.kprobes = None;
        f();
    }

    fn recorded(&mut self) {
        self.hold();
        self.across.recorded();
    }

    fn failed(&mut self) {
        self.hold();
        self.across.failed();
    }

    fn park(&mut self) -> Option<(&HoldsText, &HotplugGuard)> {
        let generic = self.generic;
        let text = self.text.get_or_insert_with(|| generic.lock_text());
        Some((text.holds(), &self.hotplug))
    }
    fn kprobes(&self) -> Option<&KprobesGuard<'_>> {
        self.kprobes.as_ref()
    }
}

/// A quiet module batch's locks (no tracer listened when it took `text_mutex`): all held for the
/// whole commit (as [`AcrossSyncs::at_start`] has it), so that no listener starts to receive
/// records until its last write and sync (patch 0011), and released in the reverse order of
/// taking (fields drop in declaration order).
struct QuietLocks<'a> {
    text: TextLock<'a>,
    hotplug: HotplugGuard,
    kprobes: KprobesGuard<'a>,
}

impl TextAccess for QuietLocks<'_> {
    fn hold(&mut self) -> &HoldsText {
        self.text.holds()
    }

    fn release(&mut self) {}

    fn sync(&mut self, f: impl FnOnce()) {
        f();
    }

    fn recorded(&mut self) {}

    fn failed(&mut self) {}

    fn park(&mut self) -> Option<(&HoldsText, &HotplugGuard)> {
        Some((self.text.holds(), &self.hotplug))
    }
    fn kprobes(&self) -> Option<&KprobesGuard<'_>> {
        Some(&self.kprobes)
    }
}

/// A kernel batch's: `text_mutex` held by the kernel's caller for the whole commit.
struct CallerHeld<'a> {
    held: &'a TextHeld<'a>,
}

impl TextAccess for CallerHeld<'_> {
    fn hold(&mut self) -> &HoldsText {
        self.held.holds()
    }

    fn release(&mut self) {}

    fn sync(&mut self, f: impl FnOnce()) {
        f();
    }

    // The caller holds `text_mutex` throughout already.
    fn recorded(&mut self) {}

    fn failed(&mut self) {}

    fn park(&mut self) -> Option<(&HoldsText, &HotplugGuard)> {
        None
    }
    fn kprobes(&self) -> Option<&KprobesGuard<'_>> {
        None
    }
}

/// One commit in progress: the batch's changes and what it has done so far.
struct Run<'a, A> {
    engine: &'a Engine,
    id: u64,
    entries: &'a [Entry],
    stats: &'a mut BatchStats,
    /// Per change, whether its record went out, and once a step failed, where its site stands
    /// (`Run::recover`).
    sites: &'a mut [Stranded],
    /// Per change, whether its site no longer held the guard when its head was due: another
    /// patcher wrote there, and the site is left as that patcher left it (`Run::check_guards`).
    conflict: &'a mut [bool],
    /// Per change, when and on which CPU a parked section emitted its record
    /// ([`CommitState`]).
    emitted: &'a mut [(u64, usize)],
    /// How `text_mutex` is held, and the commit's other locks.
    text: A,
    /// The write that fails on purpose (debug builds, [`debug::failing_write`]), counted from 1
    /// over the plan's writes; recovery's own writes never fail on purpose.
    fail_write: Option<u32>,
    /// Time per part of the plan so far (see [`Part`]).
    parts: Parts,
    /// Guards written so far.
    guards: u32,
    /// Writes made since the last `cond_resched()`.
    since_resched: u32,
    /// A write was made (or tried: a failed one may have made some bytes) since the last sync.
    unsynced: bool,
    /// A record went out since the last sync: the next sync is the one between a record and
    /// the writes that complete it (x86's tail sync), where seeded defect 17 pauses
    /// ([`Defect::pause_across_sync`]).
    recorded_unsynced: bool,
    /// The commit's seeded defect (debug builds; [`Defect::None`] otherwise).
    defect: Defect,
    /// What a module batch writes at its first guarded site playing another patcher (debug
    /// builds, [`debug::conflict_write`]); never a kernel batch.
    conflict_write: Option<debug::ConflictWrite>,
}

impl<'a, A: TextAccess> Run<'a, A> {
    /// Runs the plan phase by phase, with the batch published in the pending table.
    ///
    /// The commit's seeded defect (`Run::defect`, debug builds) may break the plan or skip one
    /// step of it on purpose.
    fn plan(&mut self, protocol: Protocol) -> Result {
        let entries = self.entries;
        let defect = self.defect;
        // A seeded plan defect replaces the guarded protocol only: the controls that look for it
        // record, so a listener is there.
        let protocol = match protocol {
            Protocol::Guarded => defect.protocol(),
            quiet => quiet,
        };
        let seeded = Seeded {
            defect,
            // The one change a step defect hits: the first guarded one.
            victim: entries.iter().position(|e| !e.change.parked),
        };
        for phase in Plan::with_protocol(CurrentArch::PLAN, protocol, entries) {
            self.phase(phase, seeded).or_else(|e| self.fail(e))?;
        }
        // `text_mutex` stays held until the batch has left the pending table (the run's locks
        // drop after it, in `commit_with`): a kprobe armed at a site whose head is written but
        // whose batch is still published would trap into a table that claims the site, and
        // its handler would never run. kprobes arms under `text_mutex`, as upstream's
        // `text_poke_bp()` makes it wait for the whole poke.
        if let Some(e) = entries
            .iter()
            .zip(self.conflict.iter())
            .find_map(|(e, c)| c.then_some(e))
        {
            pr_err!(
                "batch {}: site {:#x} changed while its guard stood; left as another patcher wrote it\n",
                self.id,
                e.addr
            );
            self.correct_conflicts();
            return Err(errno::text_changed());
        }
        Ok(())
    }

    /// After the batch's last sync: every site found overwritten by another patcher
    /// ([`Run::check_guards`]) whose record went out, and which no longer holds the new
    /// instruction that record announced, gets a record from it to what it holds now, so that a
    /// decoder's copy ends as the text does. The other patcher's write came earlier, at a time
    /// textpoke cannot know; this record is the first moment it can say so.
    fn correct_conflicts(&mut self) {
        if !self.defect.corrects_records() {
            return;
        }
        let entries = self.entries;
        for (i, e) in entries.iter().enumerate() {
            let recorded = self.sites.get(i).is_some_and(|s| s.recorded);
            if !self.conflicted(i) || !recorded {
                continue;
            }
            let mut now = [0u8; MAX_INSN_LEN];
            let Some(now) = now.get_mut(..e.change.new.len()) else {
                continue;
            };
            if kernel_text::read(e.addr, now).is_err() || *now == *e.change.new.as_slice() {
                continue;
            }
            pr_err!(
                "batch {}: recording what another patcher left at {:#x}\n",
                self.id,
                e.addr
            );
            self.text.recorded();
            let held = self.text.hold();
            let (cpu, time) = {
                let _pinned = NoPreempt::new();
                self.engine
                    .exports
                    .generic
                    .text_poke(held, e.addr, e.change.new.as_slice(), now);
                (cpu::current(), clock::now())
            };
            self.engine
                .log
                .append(e.addr, e.change.new.as_slice(), now, time, cpu);
            self.stats.records = self.stats.records.saturating_add(1);
        }
    }

    /// Debug builds (`textpoke.conflict_write`): plays another patcher that writes at the
    /// batch's first guarded site while its guard stands, just before the guards are checked:
    /// the old instruction's bytes behind the guard (x86), or the old instruction whole over
    /// it. Nothing in a production build.
    fn foreign_write(&mut self, seeded: Seeded) {
        let Some(kind) = self.conflict_write else {
            return;
        };
        let Some(e) = seeded.victim.and_then(|i| self.entries.get(i)) else {
            return;
        };
        let guard = <CurrentArch as Arch>::GUARD.len();
        let (at, bytes) = match kind {
            debug::ConflictWrite::BehindGuard => (
                e.addr.wrapping_add(guard as u64),
                e.change.old.as_slice().get(guard..).unwrap_or(&[]),
            ),
            debug::ConflictWrite::OverGuard => (e.addr, e.change.old.as_slice()),
        };
        if bytes.is_empty() {
            return;
        }
        pr_warn!(
            "batch {}: DELIBERATELY writing {kind:?} at {:#x} (conflict_write)\n",
            self.id,
            e.addr
        );
        let held = self.text.hold();
        if CurrentArch::write(&self.engine.exports.arch, held, at, bytes).is_err() {
            pr_err!("batch {}: conflict_write failed\n", self.id);
        }
    }

    /// A step failed with `e`: holds `text_mutex` until the batch has left the pending table
    /// ([`AcrossSyncs::failed`] says why), takes every guard out by the plan's rules
    /// ([`Run::recover`]), and returns `e`.
    fn fail<T>(&mut self, e: Error) -> Result<T> {
        if debug::releases_text_on_failure() {
            self.text.release();
        } else {
            self.text.failed();
        }
        self.recover();
        Err(e)
    }

    /// Runs one phase, each kind with its function, and counts its time to its part.
    fn phase(&mut self, phase: Phase<'a, Entry>, seeded: Seeded) -> Result {
        if let Phase::Writes(Write::Head, _) = phase {
            // Before the first head, every guard must still stand.
            self.foreign_write(seeded);
            self.check_guards()?;
        }
        let part = part_of(&phase, self.stats.syncs);
        let start = clock::now();
        let done = match phase {
            Phase::Parked { changes, records } => self.parked(changes, records),
            // The batch is published around the whole run (see `Batch::commit`).
            Phase::Publish => Ok(()),
            Phase::Writes(write, changes) => self.writes(write, changes, seeded),
            Phase::Records(record, changes) => self.records(record, changes, seeded),
            Phase::WriteThenRecord(changes) => self.write_then_record(changes, seeded),
            Phase::AnnounceThenWrite(changes) => self.announce_then_write(changes, seeded),
            Phase::Sync => {
                let defect = self.defect;
                let recorded = core::mem::take(&mut self.recorded_unsynced);
                self.text.sync(|| {
                    CurrentArch::sync_all();
                    defect.pause_across_sync(recorded);
                });
                self.stats.syncs = self.stats.syncs.saturating_add(1);
                self.unsynced = false;
                Ok(())
            }
            Phase::Retire => {
                self.retire();
                Ok(())
            }
        };
        add_part(&mut self.parts, part, clock::now().saturating_sub(start));
        done
    }

    /// Makes a phase's writes, `WRITE_RUN` at a time handed to the arch together
    /// (`Arch::write_many`): one after the other and in address order, they share a temporary
    /// mm (x86, 16 writes a session) or a page's mapping (arm64). A head is not written where
    /// its guard was found overwritten ([`Run::check_guards`]).
    fn writes(&mut self, write: Write, changes: Changes<'a, Entry>, seeded: Seeded) -> Result {
        if write == Write::Whole && seeded.pauses() {
            // A seeded defect's unguarded writes, one by one, each with its pause.
            for (_, e) in changes {
                self.write(e.addr, e.change.new.as_slice())?;
                seeded.defect.pause_after_unguarded_write();
            }
            return Ok(());
        }
        let mut run = [TextWrite {
            addr: 0,
            bytes: &[],
        }; WRITE_RUN];
        let mut n = 0;
        for (i, e) in changes {
            if seeded.skips_write(i) || (write == Write::Head && self.conflicted(i)) {
                continue;
            }
            let new = &e.change.new;
            let (addr, bytes) = match write {
                Write::Guard => (e.addr, <CurrentArch as Arch>::GUARD),
                // The bytes after the first, behind the guard.
                Write::Tail => (e.addr.wrapping_add(1), new.tail()),
                Write::Head => (
                    e.addr,
                    new.as_slice()
                        .get(..<CurrentArch as Arch>::HEAD_LEN)
                        .ok_or(EINVAL)?,
                ),
                Write::Whole => (e.addr, new.as_slice()),
            };
            if write == Write::Guard {
                self.guards = self.guards.saturating_add(1);
            }
            let Some(slot) = run.get_mut(n) else {
                return Err(EINVAL);
            };
            *slot = TextWrite { addr, bytes };
            n += 1;
            if n == WRITE_RUN {
                self.write_run(&run)?;
                n = 0;
            }
        }
        self.write_run(run.get(..n).ok_or(EINVAL)?)
    }

    /// Emits a phase's records.
    fn records(&mut self, record: Record, changes: Changes<'a, Entry>, seeded: Seeded) -> Result {
        for (i, e) in changes {
            match record {
                Record::Change => match seeded.record(i) {
                    Some(what) => self.emit(i, e, what),
                    None => continue,
                },
                Record::After => self.emit(i, e, Emit::Change),
            }
        }
        Ok(())
    }

    /// [`Protocol::UnguardedNosync`]'s phase: each change's whole new instruction, unguarded,
    /// then its record.
    fn write_then_record(&mut self, changes: Changes<'a, Entry>, seeded: Seeded) -> Result {
        for (i, e) in changes {
            self.write(e.addr, e.change.new.as_slice())?;
            seeded.defect.pause_after_unguarded_write();
            self.emit(i, e, Emit::Change);
        }
        Ok(())
    }

    /// [`Protocol::BeforeAfter`]'s phase: each change's BEFORE record, then its whole new
    /// instruction, unguarded.
    fn announce_then_write(&mut self, changes: Changes<'a, Entry>, seeded: Seeded) -> Result {
        for (i, e) in changes {
            self.emit(i, e, Emit::Before);
            self.write(e.addr, e.change.new.as_slice())?;
            seeded.defect.pause_after_unguarded_write();
        }
        Ok(())
    }

    /// The batch is about to leave the pending table: guards that stood at its sites are now
    /// replaced for good, and a stale one executed later (an emulator's stale translation) may be
    /// resumed. Where no guard stood (a quiet arm64 batch), no trap there is textpoke's.
    fn retire(&mut self) {
        if self.guards > 0 {
            let held = self.text.hold();
            let sites = self.entries.iter().filter(|e| !e.change.parked);
            self.engine
                .replaced
                .record_batch(held, sites.map(|e| e.addr));
        }
    }

    /// Whether change `i`'s guard was found overwritten by another patcher.
    fn conflicted(&self, i: usize) -> bool {
        self.conflict.get(i).copied().unwrap_or(false)
    }

    /// Reads back every site, under `text_mutex` (taken here, kept for the writes that follow):
    /// each must still hold the instruction the batch took it with. `EIO` with a log line if one
    /// does not: another patcher changed it (a kprobe armed there, for one), and the batch
    /// leaves it to them.
    ///
    /// Then, where the commit holds kprobes' lock (a module batch's), `ETXTBSY` with a log line
    /// if kprobes owns a site's text without having changed it: a probe registered there
    /// disabled, or an optimized probe beside it whose jump would cover it
    /// ([`KprobesGuard::owns`] says why either would run a stale copy of the site).
    fn check_text(&mut self) -> Result {
        let start = clock::now();
        self.text.hold();
        let changed = self.entries.iter().find(|e| !holds(e.addr, &e.change.old));
        let probed = match (changed, self.text.kprobes()) {
            (None, Some(kprobes)) if self.defect != Defect::IgnoreOtherPatchers => self
                .entries
                .iter()
                .find(|e| kprobes.owns(e.addr, e.addr.saturating_add(e.change.old.len() as u64))),
            _ => None,
        };
        add_part(
            &mut self.parts,
            Part::Check,
            clock::now().saturating_sub(start),
        );
        let refused = match (changed, probed) {
            (Some(e), _) => Some((e, "changed behind textpoke's back", errno::text_changed())),
            (None, Some(e)) => Some((e, "is in text a kprobe owns", errno::other_patcher())),
            (None, None) => None,
        };
        match refused {
            Some((e, why, err)) => {
                pr_err!("batch {}: site {:#x} {why}\n", self.id, e.addr);
                Err(err)
            }
            None => Ok(()),
        }
    }

    /// Reads back every site whose head is due, under `text_mutex` (taken here, kept for the
    /// head writes): each must still hold the guard, and on x86 the new tail behind it.
    /// Nothing in the kernel writes over a guard today (kprobes refuses a breakpoint;
    /// `text_mutex` serializes the rest), so this only defends against what would.
    ///
    /// A site whose guard is gone was written by another patcher while the guard stood: its
    /// head is not written, so that patcher's bytes stay, the commit fails with `EIO` once the
    /// other sites are complete, and its record is corrected ([`Run::correct_conflicts`]).
    /// A site that still holds the guard with other bytes behind it (x86) holds no instruction
    /// anyone wrote whole: the guard is textpoke's, its record went out, so the step fails with
    /// `EIO` and the recovery writes the new tail again, syncs, and writes the head. Left
    /// alone, the guard would outlive the batch, and the next execution there would oops.
    fn check_guards(&mut self) -> Result {
        let start = clock::now();
        self.text.hold();
        let mut behind = None;
        for (e, c) in self.entries.iter().zip(self.conflict.iter_mut()) {
            if e.change.parked || e.change.is_noop() || holds_guarded(e.addr, &e.change.new) {
                continue;
            }
            if holds_guard(e.addr) && self.defect != Defect::IgnoreConflicts {
                behind.get_or_insert(e.addr);
            } else {
                *c = true;
            }
        }
        add_part(
            &mut self.parts,
            Part::Check,
            clock::now().saturating_sub(start),
        );
        match behind {
            Some(addr) => {
                pr_err!(
                    "batch {}: site {addr:#x} changed behind its guard; writing it again\n",
                    self.id
                );
                Err(errno::text_changed())
            }
            None => Ok(()),
        }
    }

    /// Makes `writes` (`Arch::write_many`), taking `text_mutex` if needed.
    fn write_run(&mut self, writes: &[TextWrite<'_>]) -> Result {
        if writes.is_empty() {
            return Ok(());
        }
        self.yield_if_due();
        let n = u32::try_from(writes.len()).map_err(|_| EINVAL)?;
        let exports = &self.engine.exports;
        self.unsynced = true;
        let held = self.text.hold();
        // A write failing on purpose (debug builds): the ones before it are made, as when the
        // arch's write fails part way.
        let failing = self.fail_write.and_then(|k| {
            let i = usize::try_from(k.checked_sub(self.stats.writes)?.checked_sub(1)?).ok()?;
            (i < writes.len()).then_some(i)
        });
        match failing {
            Some(i) => CurrentArch::write_many(&exports.arch, held, writes.get(..i).unwrap_or(&[]))
                .and(Err(EIO)),
            None => CurrentArch::write_many(&exports.arch, held, writes),
        }?;
        self.stats.writes = self.stats.writes.saturating_add(n);
        self.since_resched = self.since_resched.saturating_add(n);
        Ok(())
    }

    /// Writes `bytes` at `addr`, a site of the batch or behind its first byte, taking
    /// `text_mutex` if needed.
    fn write(&mut self, addr: u64, bytes: &[u8]) -> Result {
        if bytes.is_empty() {
            pr_err!("batch {}: empty write planned at {addr:#x}\n", self.id);
            return Err(EINVAL);
        }
        self.yield_if_due();
        if self.fail_write == Some(self.stats.writes.saturating_add(1)) {
            return Err(EIO);
        }
        let exports = &self.engine.exports;
        self.unsynced = true;
        let held = self.text.hold();
        CurrentArch::write(&exports.arch, held, addr, bytes)?;
        self.stats.writes = self.stats.writes.saturating_add(1);
        self.since_resched = self.since_resched.saturating_add(1);
        Ok(())
    }

    /// Yields the CPU if [`WRITES_PER_RESCHED`] writes were made since the last yield: called
    /// before writes (one, or a run of them), never after the last ones, where there is nothing
    /// left to make others wait for.
    ///
    /// A big batch on a slow machine writes for a long time; let others run, as upstream
    /// text_poke_bp_batch() does since a batch tripped the soft-lockup watchdog. Holding
    /// text_mutex and the hotplug lock across it is fine: both are sleeping locks, and a guard
    /// left in place meanwhile is what the trap handler is for.
    fn yield_if_due(&mut self) {
        if self.since_resched >= WRITES_PER_RESCHED {
            cpu::cond_resched();
            self.since_resched = 0;
        }
    }

    /// Emits change `i`'s (`e`'s) `PERF_RECORD_TEXT_POKE` and logs it, under `text_mutex` as
    /// upstream emits its own, so that the record stream is serialized with the kernel's own
    /// pokers.
    fn emit(&mut self, i: usize, e: &Entry, what: Emit) {
        // The seeded defect keeps releasing `text_mutex` across syncs (see `seed_defect`'s log).
        if self.defect != Defect::ReleaseTextAfterRecord {
            self.text.recorded();
        }
        let held = self.text.hold();
        let (cpu, time) = {
            // perf delivers the record to the side-band events of the CPU it runs on; stay on
            // one CPU so the log names the right one.
            let _pinned = NoPreempt::new();
            text_poke_record(self.engine, held, e, what);
            (cpu::current(), clock::now())
        };
        self.logged(i, e, what, time, cpu);
    }

    /// Appends a record of change `i` (`e`) that went out to the engine's log, counts it, and
    /// notes whether the site now goes on to its new instruction, and that a record went out
    /// since the last sync.
    fn logged(&mut self, i: usize, e: &Entry, what: Emit, time: u64, cpu: usize) {
        let (old, new) = what.bytes(e);
        self.engine.log.append(e.addr, old, new, time, cpu);
        self.stats.records = self.stats.records.saturating_add(1);
        if let Some(s) = self.sites.get_mut(i) {
            s.recorded = what != Emit::Before;
        }
        self.recorded_unsynced = true;
    }

    /// Runs the parked section: `changes`' whole writes, each followed by its record if
    /// `records`, with every other online CPU stopped (see `plan.rs`).
    fn parked(&mut self, changes: Changes<'a, Entry>, records: bool) -> Result {
        let exports = &self.engine.exports;
        let Some((held, _hotplug)) = self.text.park() else {
            pr_err!(
                "batch {}: a kernel batch planned a parked section\n",
                self.id
            );
            return Err(EINVAL);
        };
        let (ret, done, error) = {
            let section = Parked {
                engine: self.engine,
                changes,
                records,
                held,
                emitted: self.emitted.as_mut_ptr(),
                emitted_len: self.emitted.len(),
                cpus: cpu::online().count(),
                // Online and staying so (the hotplug lock is held), whether or not the
                // committing task runs there still when the stoppers do.
                master: cpu::current(),
                arrived: AtomicUsize::new(0),
                done: AtomicUsize::new(0),
                error: AtomicI32::new(0),
            };
            // SAFETY: `parked_section` matches `cpu_stop_fn_t` and upholds its contract for the
            // `Parked` it is given, whose `emitted` is `self.emitted`, valid for its length;
            // `section` and `self.emitted` outlive the call, which returns only once every CPU
            // has left the callback; the commit holds the CPU-hotplug read lock (`_hotplug`), as
            // the function requires.
            let ret = unsafe {
                (exports.generic.stop_machine_cpuslocked)(
                    parked_section,
                    (&raw const section).cast_mut().cast::<c_void>(),
                    &raw const kernel::bindings::__cpu_online_mask,
                )
            };
            (
                ret,
                section.done.load(Ordering::Acquire),
                section.error.load(Ordering::Relaxed),
            )
        };
        self.stats.syncs = self.stats.syncs.saturating_add(1);
        // What the master CPU did, step by step in the section's order, as the log and the
        // counters must show it.
        let mut left = done;
        for (i, e) in changes {
            if left == 0 {
                break;
            }
            left -= 1;
            self.stats.writes = self.stats.writes.saturating_add(1);
            if records && left > 0 {
                left -= 1;
                let (time, cpu) = self.emitted.get(i).copied().unwrap_or((0, 0));
                self.logged(i, e, Emit::Change, time, cpu);
            }
        }
        if error != 0 || ret != 0 {
            pr_err!(
                "batch {}: parked section failed ({error}, {ret})\n",
                self.id
            );
            return Err(Error::from_errno(if error != 0 { error } else { ret }));
        }
        Ok(())
    }
    /// Takes every guard out after a failed step, by the planner's recovery
    /// ([`Recovery`], in plan.rs, which says why its order), so that the batch can retire and
    /// the text agrees with the records that went out. Every site that held a guard is then
    /// recorded as replaced, before the batch retires.
    ///
    /// Recovery's own writes never fail on purpose; one that fails is logged and leaves its
    /// guard, which the handler no longer resolves once the batch retires (a failed
    /// `text_poke()` BUG()s upstream).
    fn recover(&mut self) {
        pr_err!(
            "batch {}: write failed; taking the guards out by the plan's rules\n",
            self.id
        );
        debug::pause_in_recovery();
        self.fail_write = None;
        let guard = <CurrentArch as Arch>::GUARD;
        for (e, s) in self.entries.iter().zip(self.sites.iter_mut()) {
            let target = s.target(&e.change);
            let mut now = [0u8; MAX_INSN_LEN];
            let Some(now) = now.get_mut(..target.len()) else {
                continue;
            };
            let read = kernel_text::read(e.addr, now).is_ok();
            let tail = now.get(guard.len()..);
            s.guarded = read && now.starts_with(guard);
            s.tail_done = read && tail == target.as_slice().get(guard.len()..);
            s.tail_written = read && tail != e.change.old.as_slice().get(guard.len()..);
        }
        let entries = self.entries;
        let sites = core::mem::take(&mut self.sites);
        for repair in Recovery::new(CurrentArch::PLAN, entries, sites, self.unsynced) {
            let done = match repair {
                Repair::Sync => {
                    self.text.sync(CurrentArch::sync_all);
                    self.stats.syncs = self.stats.syncs.saturating_add(1);
                    Ok(())
                }
                Repair::Tail(i) | Repair::Head(i) => {
                    let (Some(e), Some(s)) = (entries.get(i), sites.get(i)) else {
                        continue;
                    };
                    let target = s.target(&e.change);
                    let (offset, bytes) = match repair {
                        Repair::Tail(_) => (guard.len(), target.as_slice().get(guard.len()..)),
                        _ => (0, target.as_slice().get(..guard.len())),
                    };
                    self.write(e.addr.wrapping_add(offset as u64), bytes.unwrap_or(&[]))
                }
            };
            if done.is_err() {
                pr_crit!(
                    "batch {}: {repair:?} failed: a guard may be left behind\n",
                    self.id
                );
            }
        }
        let guarded = entries.iter().zip(sites.iter()).filter(|(_, s)| s.guarded);
        self.engine
            .replaced
            .record_batch(self.text.hold(), guarded.map(|(e, _)| e.addr));
        self.sites = sites;
        self.correct_conflicts();
    }
}

/// The seeded step defect of a commit (debug builds): what it makes of the one change it hits,
/// the first guarded one.
#[derive(Clone, Copy)]
struct Seeded {
    defect: Defect,
    victim: Option<usize>,
}

impl Seeded {
    /// Whether change `i`'s guard, tail and head writes are skipped, its record kept.
    fn skips_write(self, i: usize) -> bool {
        self.defect == Defect::SkipFinalWrite && Some(i) == self.victim
    }

    /// Which record change `i` gets in a phase of [`Record::Change`] records: none, or one
    /// with wrong old bytes, for the victim of those defects.
    fn record(self, i: usize) -> Option<Emit> {
        match self.defect {
            Defect::DropRecord if Some(i) == self.victim => None,
            Defect::WrongOldBytes if Some(i) == self.victim => Some(Emit::WrongOld),
            _ => Some(Emit::Change),
        }
    }

    /// Whether unguarded whole writes are made one by one, each followed by the defect's pause
    /// ([`Defect::pause_after_unguarded_write`]): under any seeded defect.
    fn pauses(self) -> bool {
        self.defect != Defect::None
    }
}

/// The errno of a commit the pending table refused (nothing was written), with its log line.
fn publish_refused(id: u64, e: PublishError) -> Error {
    if e == PublishError::Full {
        pr_err!(
            "batch {id}: refusing commit for now: {} batches are committing; retry\n",
            crate::pending::MAX_BATCHES
        );
        return errno::too_many_batches();
    }
    pr_err!("batch {id}: pending table refused it: {e:?}\n");
    match e {
        PublishError::Conflict => errno::busy(),
        PublishError::Duplicate => errno::duplicate(),
        _ => errno::inside_site(),
    }
}

/// The part of a commit's time (`Part`) that `phase` counts to, `syncs` syncs into the batch.
fn part_of<C>(phase: &Phase<'_, C>, syncs: u32) -> Part {
    match phase {
        Phase::Sync => match syncs {
            0 => Part::Sync1,
            1 => Part::Sync2,
            _ => Part::Sync3,
        },
        Phase::Writes(Write::Guard, _) => Part::Guard,
        Phase::Writes(Write::Tail, _) => Part::Tail,
        Phase::Writes(Write::Head, _) => Part::Head,
        // The unguarded protocols' phases count as their writes.
        Phase::Writes(Write::Whole, _)
        | Phase::WriteThenRecord(_)
        | Phase::AnnounceThenWrite(_) => Part::Whole,
        Phase::Records(..) => Part::Emit,
        Phase::Parked { .. } => Part::Park,
        Phase::Publish | Phase::Retire => Part::Other,
    }
}

/// Which record an emit sends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Emit {
    /// The change itself: old and new instruction.
    Change,
    /// `Protocol::BeforeAfter`'s announcement: the old instruction as both.
    Before,
    /// [`Defect::WrongOldBytes`]: the new instruction as both, so the old bytes are wrong.
    WrongOld,
}

impl Emit {
    fn bytes(self, e: &Entry) -> (&[u8], &[u8]) {
        match self {
            Self::Change => (e.change.old.as_slice(), e.change.new.as_slice()),
            Self::Before => (e.change.old.as_slice(), e.change.old.as_slice()),
            Self::WrongOld => (e.change.new.as_slice(), e.change.new.as_slice()),
        }
    }
}

/// Emits `e`'s `PERF_RECORD_TEXT_POKE` as `what` says, under `text_mutex` (`held`).
fn text_poke_record(engine: &Engine, held: &HoldsText, e: &Entry, what: Emit) {
    let (old, new) = what.bytes(e);
    engine.exports.generic.text_poke(held, e.addr, old, new);
}

/// What the CPUs of a parked section share.
struct Parked<'a> {
    engine: &'a Engine,
    /// The section's changes: the master writes each, then emits its record if `records`.
    changes: Changes<'a, Entry>,
    records: bool,
    /// `text_mutex`, held by the committing task, which waits in `stop_machine` meanwhile.
    held: &'a HoldsText,
    /// Per change of the batch, when and where the master emitted its record.
    emitted: *mut (u64, usize),
    /// How many slots `emitted` has.
    emitted_len: usize,
    /// Online CPUs (stable: the hotplug lock is held).
    cpus: usize,
    /// The CPU that runs the steps: the one the commit called `stop_machine` from, so that
    /// the section's records reach the side-band events of the committing task's CPU, as its
    /// other records do, rather than those of whichever CPU arrived last (perf's per-CPU
    /// events of a CPU that went offline once are gone for good).
    master: usize,
    /// CPUs that entered the callback, plus one once the master is done.
    arrived: AtomicUsize,
    /// Steps the master completed, in the section's order (a write, then its record).
    done: AtomicUsize,
    /// The master's errno, or 0.
    error: AtomicI32,
}

/// The `stop_machine` callback, run on every online CPU with interrupts off: the master CPU,
/// once every other one has arrived, runs the section's steps while the others spin; then each
/// of the others refetches
/// (`Arch::sync_local`), as upstream `aarch64_insn_patch_text_cb()` does, before it resumes.
///
/// # Safety
///
/// `data` must point to a live [`Parked`] whose `emitted` is valid for `emitted_len` elements.
unsafe extern "C" fn parked_section(data: *mut c_void) -> c_int {
    // SAFETY: Guaranteed by the caller.
    let p = unsafe { &*data.cast::<Parked<'_>>() };
    p.arrived.fetch_add(1, Ordering::SeqCst);
    if cpu::current() != p.master {
        while p.arrived.load(Ordering::Acquire) <= p.cpus {
            cpu::relax();
        }
        CurrentArch::sync_local();
        return 0;
    }
    // Every other CPU parked before the first step.
    while p.arrived.load(Ordering::Acquire) < p.cpus {
        cpu::relax();
    }
    let mut done = 0usize;
    for (i, e) in p.changes {
        if let Err(err) = CurrentArch::write(
            &p.engine.exports.arch,
            p.held,
            e.addr,
            e.change.new.as_slice(),
        ) {
            p.error.store(err.to_errno(), Ordering::Relaxed);
            break;
        }
        done = done.wrapping_add(1);
        p.done.store(done, Ordering::Release);
        if p.records {
            if i >= p.emitted_len {
                p.error
                    .store(-(kernel::bindings::EINVAL as i32), Ordering::Relaxed);
                break;
            }
            text_poke_record(p.engine, p.held, e, Emit::Change);
            // SAFETY: `i` is below `emitted_len`, for which `emitted` is valid (caller), and
            // only this CPU writes it while the others spin.
            unsafe { p.emitted.add(i).write((clock::now(), cpu::current())) };
            done = done.wrapping_add(1);
            p.done.store(done, Ordering::Release);
        }
    }
    CurrentArch::sync_local();
    // Releases the other CPUs.
    p.arrived.fetch_add(1, Ordering::Release);
    0
}

/// Whether the text at `addr` is `insn` now.
fn holds(addr: u64, insn: &InsnBytes) -> bool {
    let mut now = [0u8; MAX_INSN_LEN];
    now.get_mut(..insn.len())
        .is_some_and(|now| kernel_text::read(addr, now).is_ok() && *now == *insn.as_slice())
}

/// Whether the site at `addr` begins with the guard.
fn holds_guard(addr: u64) -> bool {
    let guard = <CurrentArch as Arch>::GUARD;
    let mut now = [0u8; MAX_INSN_LEN];
    now.get_mut(..guard.len())
        .is_some_and(|now| kernel_text::read(addr, now).is_ok() && *now == *guard)
}

/// Whether the site at `addr`, on its way to `new`, holds the guard and behind it `new`'s
/// tail: what the plan leaves there before the head write.
fn holds_guarded(addr: u64, new: &InsnBytes) -> bool {
    let guard = <CurrentArch as Arch>::GUARD;
    let mut now = [0u8; MAX_INSN_LEN];
    let Some(now) = now.get_mut(..new.len()) else {
        return false;
    };
    if kernel_text::read(addr, now).is_err() {
        return false;
    }
    let (head, tail) = now.split_at(guard.len().min(new.len()));
    head == guard && new.as_slice().get(guard.len()..).is_some_and(|t| t == tail)
}

impl Drop for Batch {
    fn drop(&mut self) {
        if self.committed || self.entries.is_empty() {
            return;
        }
        // Give back the sites this uncommitted batch claimed.
        crate::engine::with(|engine| {
            let mut sites = engine.sites.lock();
            for e in self.entries.iter() {
                if let Found::Site(i) = sites.find(e.addr) {
                    if let Ok(site) = sites.get_mut(i) {
                        if site.batch == self.id {
                            site.batch = 0;
                        }
                    }
                }
            }
        });
    }
}
