// SPDX-License-Identifier: GPL-2.0

//! Counters: traps per CPU and instruction kind (written from trap context, each CPU in its own
//! cache line), and batch totals.

use crate::arch::Arch;
use crate::current_arch::CurrentArch;
use core::fmt::Write;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::prelude::*;

/// Most instruction kinds an arch's codec has.
const KINDS: usize = 8;
static_assert!(<CurrentArch as Arch>::KIND_NAMES.len() <= KINDS);

/// One CPU's trap counters.
#[repr(align(64))]
struct CpuTraps {
    /// Every trap textpoke emulated on the CPU (`textpoke_cpu_traps()`).
    total: AtomicU64,
    /// Traps at the guards of modules' batches, by instruction kind.
    by_kind: [AtomicU64; KINDS],
    /// Traps on a guard that was no longer in memory (see `trap::Replaced`).
    vanished: AtomicU64,
    /// Traps on the guards of the kernel's own changes (`patcher.rs`).
    kernel: AtomicU64,
}

/// Where a commit's time goes: the parts [`BatchTotals::parts`] sums, for the benchmarks'
/// breakdown (`make bench`). Each plan step's time goes to its kind's part; the rest of a
/// commit is its own part, so that the parts add up to [`Part::Total`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Part {
    /// Sorting the changes and reading every site back before anything is written.
    Check,
    /// Inserting the batch into the pending table and retiring it (waiting for readers), which
    /// is the time of `with_published` outside the plan.
    Table,
    /// The guards' phase (`Phase::Writes` of `Write::Guard`).
    Guard,
    /// The first `Phase::Sync` of the batch (after the guards).
    Sync1,
    /// The second (x86: after the tails; arm64: after the heads).
    Sync2,
    /// The third and any later one (x86: after the heads).
    Sync3,
    /// The tails' phase (x86).
    Tail,
    /// The records' phases: `perf_event_text_poke()` and the engine's record log.
    Emit,
    /// The heads' phase.
    Head,
    /// Whole writes outside a parked section (a quiet arm64 batch's phase, and the unguarded
    /// protocols' phases, records included).
    Whole,
    /// A parked section, whole (`stop_machine()` and every step in it).
    Park,
    /// The plan's other phases (`Phase::Retire`'s bookkeeping).
    Other,
    /// Giving the sites back to the registry.
    Release,
    /// The commit, whole.
    Total,
}

impl Part {
    /// Every part, in declaration order, so that `part as usize` indexes this array.
    pub(crate) const ALL: [Part; 14] = [
        Part::Check,
        Part::Table,
        Part::Guard,
        Part::Sync1,
        Part::Sync2,
        Part::Sync3,
        Part::Tail,
        Part::Emit,
        Part::Head,
        Part::Whole,
        Part::Park,
        Part::Other,
        Part::Release,
        Part::Total,
    ];

    /// The part's name in the stats file (`ns.<name>`).
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Part::Check => "check",
            Part::Table => "table",
            Part::Guard => "guard",
            Part::Sync1 => "sync1",
            Part::Sync2 => "sync2",
            Part::Sync3 => "sync3",
            Part::Tail => "tail",
            Part::Emit => "emit",
            Part::Head => "head",
            Part::Whole => "whole",
            Part::Park => "park",
            Part::Other => "other",
            Part::Release => "release",
            Part::Total => "total",
        }
    }
}

// `Part::ALL` is in declaration order.
const _: () = {
    let mut i = 0;
    while i < Part::ALL.len() {
        assert!(Part::ALL[i] as usize == i);
        i += 1;
    }
};

/// A commit's time per [`Part`], in nanoseconds.
pub(crate) type Parts = [u64; Part::ALL.len()];

/// Adds `ns` to `part` of `parts`.
pub(crate) fn add_part(parts: &mut Parts, part: Part, ns: u64) {
    if let Some(p) = parts.get_mut(part as usize) {
        *p = p.saturating_add(ns);
    }
}

/// Totals over all batches.
#[derive(Default)]
pub(crate) struct BatchTotals {
    /// Batches committed successfully.
    pub(crate) batches: AtomicU64,
    /// Sites changed.
    pub(crate) sites: AtomicU64,
    /// All-CPU syncs.
    pub(crate) syncs: AtomicU64,
    /// `PERF_RECORD_TEXT_POKE` records emitted.
    pub(crate) records: AtomicU64,
    /// Batches that failed after starting to write.
    pub(crate) failed: AtomicU64,
    /// Batches committed with no tracer listening ([`crate::plan::Protocol::Quiet`]).
    pub(crate) quiet: AtomicU64,
    /// Guards written.
    pub(crate) guards: AtomicU64,
    /// Nanoseconds per [`Part`], over every commit that started writing.
    pub(crate) parts: [AtomicU64; Part::ALL.len()],
}

impl BatchTotals {
    /// Writes the counts as `PREFIXname value` lines.
    fn write(&self, out: &mut impl Write, prefix: &str) -> core::fmt::Result {
        for (name, v) in [
            ("batches", &self.batches),
            ("sites", &self.sites),
            ("syncs", &self.syncs),
            ("records", &self.records),
            ("failed", &self.failed),
            ("quiet", &self.quiet),
            ("guards", &self.guards),
        ] {
            writeln!(out, "{prefix}{name} {}", v.load(Ordering::Relaxed))?;
        }
        Ok(())
    }

    /// Adds one commit's `parts`.
    pub(crate) fn add_parts(&self, parts: &Parts) {
        for (total, ns) in self.parts.iter().zip(parts) {
            total.fetch_add(*ns, Ordering::Relaxed);
        }
    }
}

/// All counters.
pub(crate) struct Stats {
    cpus: KVec<CpuTraps>,
    /// Batch totals of the modules' batches.
    pub(crate) totals: BatchTotals,
    /// Batch totals of the kernel's own batches (`patcher.rs`).
    pub(crate) kernel: BatchTotals,
    /// Changes the kernel offered that `patcher.rs` handed back to its stock path.
    pub(crate) declined: AtomicU64,
    /// Changes the kernel handed over that are queued, not yet committed (`patcher.rs`): while
    /// there are any, the kernel is in the middle of an update and pins textpoke.
    pub(crate) queued: AtomicU64,
    /// Modules' texts described to tracers (`new_text.rs`).
    pub(crate) new_text: NewText,
}

/// What `new_text.rs` told tracers.
#[derive(Default)]
pub(crate) struct NewText {
    /// Texts registered (`PERF_RECORD_KSYMBOL`), each followed by its bytes.
    pub(crate) registered: AtomicU64,
    /// Texts unregistered.
    pub(crate) unregistered: AtomicU64,
    /// `PERF_RECORD_TEXT_POKE` records carrying registered texts' bytes.
    pub(crate) records: AtomicU64,
}

impl Stats {
    /// Zeroed counters for `cpus` possible CPUs.
    pub(crate) fn new(cpus: usize) -> Result<Self> {
        let mut v = KVec::with_capacity(cpus, GFP_KERNEL)?;
        for _ in 0..cpus {
            v.push(
                CpuTraps {
                    total: AtomicU64::new(0),
                    by_kind: core::array::from_fn(|_| AtomicU64::new(0)),
                    vanished: AtomicU64::new(0),
                    kernel: AtomicU64::new(0),
                },
                GFP_KERNEL,
            )?;
        }
        Ok(Self {
            cpus: v,
            totals: BatchTotals::default(),
            kernel: BatchTotals::default(),
            declined: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            new_text: NewText::default(),
        })
    }

    /// Counts a trap on `cpu` (the caller's CPU, in trap context) of kind index `kind`, at a
    /// guard of the kernel's own changes if `kernel`.
    #[inline(always)]
    pub(crate) fn count_trap(&self, cpu: usize, kind: usize, kernel: bool) {
        if let Some(c) = self.cpus.get(cpu) {
            // Only this CPU writes its line; readers tolerate a count that is a moment old.
            c.total.fetch_add(1, Ordering::Relaxed);
            let by = if kernel {
                Some(&c.kernel)
            } else {
                c.by_kind.get(kind)
            };
            if let Some(by) = by {
                by.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts a trap on `cpu` at a guard that had already been replaced.
    #[inline(always)]
    pub(crate) fn count_vanished(&self, cpu: usize) {
        if let Some(c) = self.cpus.get(cpu) {
            // It is a trap all the same: executors mark the execution as trapped.
            c.total.fetch_add(1, Ordering::Relaxed);
            c.vanished.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Guard traps emulated on `cpu` so far (0 for an unknown CPU): at the guards of every
    /// batch, the modules' and the kernel's own, and at guards replaced just before the trap.
    ///
    /// A thread that reads this before and after executing a site on `cpu` with interrupts
    /// disabled learns whether that execution trapped: the trap's increment happens on the same
    /// CPU, before the trap returns, and only an NMI could trap in between.
    pub(crate) fn cpu_traps(&self, cpu: usize) -> u64 {
        self.cpus
            .get(cpu)
            .map_or(0, |c| c.total.load(Ordering::Relaxed))
    }

    /// The sum over CPUs of the counter `counter` picks (none: 0).
    fn sum(&self, counter: impl Fn(&CpuTraps) -> Option<&AtomicU64>) -> u64 {
        self.cpus
            .iter()
            .filter_map(counter)
            .map(|v| v.load(Ordering::Relaxed))
            .sum()
    }

    /// Writes the counters as `key value` lines.
    pub(crate) fn write(&self, out: &mut impl Write) -> core::fmt::Result {
        self.totals.write(out, "")?;
        for (part, v) in Part::ALL.iter().zip(&self.totals.parts) {
            writeln!(out, "ns.{} {}", part.name(), v.load(Ordering::Relaxed))?;
        }
        self.kernel.write(out, "kernel.")?;
        writeln!(
            out,
            "kernel.declined {}",
            self.declined.load(Ordering::Relaxed)
        )?;
        writeln!(out, "kernel.queued {}", self.queued.load(Ordering::Relaxed))?;
        for (name, v) in [
            ("registered", &self.new_text.registered),
            ("unregistered", &self.new_text.unregistered),
            ("records", &self.new_text.records),
        ] {
            writeln!(out, "new_text.{name} {}", v.load(Ordering::Relaxed))?;
        }
        writeln!(out, "kernel.traps {}", self.sum(|c| Some(&c.kernel)))?;
        for (kind, name) in <CurrentArch as Arch>::KIND_NAMES.iter().enumerate() {
            writeln!(out, "traps.{name} {}", self.sum(|c| c.by_kind.get(kind)))?;
        }
        writeln!(
            out,
            "traps.vanished_guard {}",
            self.sum(|c| Some(&c.vanished))
        )?;
        for (cpu, c) in self.cpus.iter().enumerate() {
            writeln!(out, "traps.cpu{cpu} {}", c.total.load(Ordering::Relaxed))?;
        }
        Ok(())
    }
}
