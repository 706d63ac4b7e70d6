// SPDX-License-Identifier: GPL-2.0

//! The contract between the arch-neutral engine and an architecture.
//!
//! Each `arch/<arch>/mod.rs` implements [`Arch`] for its zero-sized `CurrentArch`; the one switch
//! in `kernel/textpoke.rs` picks which, and the rest of the engine names the arch only through
//! `kernel/current_arch.rs`. The compiler checks that an arch provides every item with the right
//! signature. `arch/` itself uses only what lies below the engine: the pure files
//! (`insn`, `plan`, `pending`), this contract and the `rust/` shims; never `api`, `batch`,
//! `engine` or `selftest`.
//!
//! See docs/extending.md for what adding an arch involves beyond this trait.

use crate::insn::{InsnBytes, InsnError, Op};
use crate::patch_series::{HoldsText, SymbolResolver};
use crate::plan;
use crate::pt_regs::PtRegs;
use kernel::prelude::*;

/// A site of textpoke's own text the load-time self-test guards and runs on one CPU, to prove
/// the trap path end to end (`kernel/selftest.rs`).
pub(crate) struct TrapSite {
    /// The self-test case's name.
    pub(crate) name: &'static str,
    /// The site's address.
    pub(crate) addr: fn() -> u64,
    /// Runs the site's function: 0 if the site executed its own instruction, 1 if it behaved as
    /// the one the trap handler is made to emulate.
    pub(crate) call: fn() -> u32,
    /// The instruction the site holds and the one the trap handler emulates, encoded at it.
    pub(crate) change: fn() -> Result<(InsnBytes, InsnBytes), InsnError>,
}

/// A self-test case only one arch has, run against its series.
pub(crate) struct ArchCase<S: 'static> {
    /// The case's name.
    pub(crate) name: &'static str,
    /// The case.
    pub(crate) run: fn(&S) -> Result<(), &'static str>,
}

/// What an architecture provides.
pub(crate) trait Arch {
    /// The planner's name for the arch.
    const PLAN: plan::Arch;
    /// The guard, as written over a site (x86 `INT3` over its first byte, arm64 `BRK #0x008`).
    const GUARD: &'static [u8];
    /// How much of a new instruction [`plan::Step::WriteHead`] writes.
    const HEAD_LEN: usize;
    /// The names of the instruction kinds, indexed by [`Arch::kind`], for the trap counters.
    const KIND_NAMES: &'static [&'static str];

    /// An instruction of `textpoke.h`'s list, accepted at its site: what the pending table holds
    /// and the trap handler emulates. It can only come from [`Arch::accept`], so a guard whose
    /// pending instruction cannot be emulated does not exist.
    type Insn: Copy + Send + Sync;
    /// The arch's part of the patch series' exports.
    type Exports: Send + Sync;

    /// Accepts `bytes` at `site` if, and only if, it is an instruction `textpoke.h` lists.
    fn accept(site: u64, bytes: &[u8]) -> Result<Self::Insn, InsnError>;
    /// The kind of an accepted instruction, an index into [`Arch::KIND_NAMES`].
    fn kind(insn: &Self::Insn) -> usize;
    /// Builds `op` at `site` (to `target`), `len` bytes long (`textpoke_encode()`).
    fn encode(op: Op, site: u64, target: u64, len: usize) -> Result<InsnBytes, InsnError>;
    /// Whether `bytes`, as a new instruction, would be indistinguishable from a guard.
    fn is_guard(bytes: &[u8]) -> bool;
    /// Whether changing `old` into `new` may not happen while another CPU may execute the
    /// site, so that the batch does it with every other CPU parked ([`plan::Change::parked`]).
    fn must_park(old: &InsnBytes, new: &InsnBytes) -> bool;

    /// Resolves the arch's exports; `None` (with the names recorded in `r`) if any is missing.
    fn resolve(r: &mut SymbolResolver) -> Option<Self::Exports>;
    /// Writes `bytes` at `addr`, with whatever cache maintenance makes a later fetch see them.
    fn write(exports: &Self::Exports, held: &HoldsText, addr: u64, bytes: &[u8]) -> Result;
    /// Makes `writes` in order, each as [`Arch::write`] would, sharing between them what the
    /// arch lets them share (x86: the temporary mm, patch 0009; arm64: a page's mapping, patch
    /// 0010). On an error, some of them may have been made.
    fn write_many(exports: &Self::Exports, held: &HoldsText, writes: &[TextWrite<'_>]) -> Result;
    /// Makes every online CPU execute a context-synchronizing event, and waits for all of them.
    fn sync_all();
    /// Makes the calling CPU refetch every instruction after this point (x86 `sync_core()`,
    /// arm64 `ISB`): what each parked CPU runs before it resumes after a parked section.
    fn sync_local();

    /// The address of the site a trap was taken at, from its saved registers.
    fn trap_site(regs: &PtRegs) -> u64;
    /// Makes the trapped CPU behave as if it had executed `insn` at its site.
    fn emulate(insn: &Self::Insn, regs: &mut PtRegs);
    /// For a trap at `site` whose guard is known to have been replaced by `now` (the bytes there
    /// now): makes the CPU execute what is there; `false` if that cannot be done.
    fn resume_replaced(site: u64, now: &[u8], regs: &mut PtRegs) -> bool;
    /// Resumes the trapped CPU after the trapping instruction, as if it were a `NOP`: only the
    /// seeded defect that swallows foreign traps does this (debug builds, `debug.rs`).
    #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
    fn skip_trap(regs: &mut PtRegs);

    /// The self-test's private trap sites.
    fn selftest_sites() -> &'static [TrapSite];
    /// The self-test's arch-only cases.
    fn selftest_cases() -> &'static [ArchCase<Self::Exports>];
}

/// One write of [`Arch::write_many`].
#[derive(Clone, Copy)]
pub(crate) struct TextWrite<'a> {
    /// Where.
    pub(crate) addr: u64,
    /// What: a guard, or an instruction or part of one.
    pub(crate) bytes: &'a [u8],
}
