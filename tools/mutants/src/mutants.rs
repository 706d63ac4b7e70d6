//! The mutants, each a weakening of one file of the kernel module's source, and how one is
//! applied to that file's text.
//!
//! Each mutant names the file it edits ([`Mutant::file`], relative to the repository root) and
//! lists exact text replacements in its current source. A replacement whose text does not occur
//! exactly once (at the moment it is applied) is an error naming the mutant and its file: a later
//! edit of that file must update the table, never silently turn a mutant into a no-op.
//!
//! Most files are shared with the host crate `textpoke-core`, and their mutants name host tests
//! that kill them. The guest agent's files (`AGENT_*`) hold judgements of the harness, whose
//! unit tests (kind `agent`) kill their mutants. The files of [`KERNEL_ONLY`] only the kernel module compiles: their mutants
//! are allowed, each with the check of `make test`'s guests that catches it (or, where none
//! does, what would), and are applied to the source only to keep their text current.

/// The pending-instruction table.
pub const PENDING: &str = "kernel/pending.rs";
/// The x86-64 instruction codec, its emulation and its listing policy.
pub const X86_INSN: &str = "arch/x86/insn.rs";
/// The arm64 instruction codec and its emulation.
pub const ARM64_INSN: &str = "arch/arm64/insn.rs";
/// The step planner and the recovery of a failed commit.
pub const PLAN: &str = "kernel/plan.rs";
/// The `PERF_RECORD_TEXT_POKE` writer.
pub const RECORD: &str = "kernel/record.rs";
/// A batch's executor: the plan's steps run with real primitives (kernel-only).
pub const BATCH: &str = "kernel/batch.rs";
/// The trap handler (kernel-only).
pub const TRAP: &str = "kernel/trap.rs";
/// textpoke as the kernel's own patcher (kernel-only).
pub const PATCHER: &str = "kernel/patcher.rs";
/// The registry of sites (kernel-only).
pub const SITES: &str = "kernel/sites.rs";
/// Modules' text described to tracers (kernel-only).
pub const NEW_TEXT: &str = "kernel/new_text.rs";
/// x86's text writes and syncs (kernel-only).
pub const X86_TEXT: &str = "arch/x86/text.rs";
/// arm64's text writes and syncs (kernel-only).
pub const ARM64_TEXT: &str = "arch/arm64/text.rs";
/// x86's trap path beyond the codec: the interrupted stack (kernel-only).
pub const X86_TRAP: &str = "arch/x86/trap.rs";

/// The fault-injection cases of the guest agent: how a kernel transition's text is compared with
/// the stock path's, and when a case's failure path counts as run (harness).
pub const AGENT_FAULTS: &str = "tools/agent/src/scenarios/faults.rs";
/// The kernel's own suites in the guest: ftracetest's results, keyed by case file (harness).
pub const AGENT_KSELFTEST: &str = "tools/agent/src/scenarios/kselftest.rs";
/// The decoder of text that appears mid-trace, in the agent.
pub const AGENT_NEW_TEXT: &str = "tools/agent/src/scenarios/new_text.rs";

/// The files of mutants that only the kernel module compiles (they use the `kernel` crate): no
/// host test can run them, so their mutants are never built here.
pub const KERNEL_ONLY: &[&str] = &[
    BATCH, TRAP, PATCHER, SITES, NEW_TEXT, X86_TEXT, ARM64_TEXT, X86_TRAP,
];

/// Whether `file` is compiled into the kernel module only.
pub fn kernel_only(file: &str) -> bool {
    KERNEL_ONLY.contains(&file)
}

/// What fails in a guest boot that catches a kernel-only mutant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fails {
    /// The KTAP case of this name (the last part of its path) fails.
    Case(&'static str),
    /// A kernel splat (oops, BUG, WARN) fails the boot.
    Splat,
}

/// The boot of `make test` whose check catches a kernel-only mutant (`make mutants-guest` boots
/// it, `guest.rs`).
#[derive(Clone, Copy, Debug)]
pub struct GuestKiller {
    /// `x86_64` or `arm64`.
    pub arch: &'static str,
    /// Its CPUs.
    pub smp: u32,
    /// The agent's groups to run (`textpoke.groups=`).
    pub groups: &'static str,
    /// What fails.
    pub fails: Fails,
}

/// One deliberate weakening of the source.
pub struct Mutant {
    /// Short name, unique, as printed and as given to `--only`.
    pub name: &'static str,
    /// The file it edits, relative to the repository root.
    pub file: &'static str,
    /// What it changes, in a few words.
    pub what: &'static str,
    /// Replacements `(find, replace)` in [`Mutant::file`], applied in order; each `find` must
    /// occur exactly once in the text as it is when that replacement is applied.
    pub edits: &'static [(&'static str, &'static str)],
    /// For a mutant of a [`KERNEL_ONLY`] file, the guest boot whose check catches it, as its
    /// `allowed` reason says; `None` where no check of `make test` can (the reason says why).
    pub guest: Option<GuestKiller>,
    /// Tests expected to kill it (`kind:test`, the kinds of `exec::Kind`), tried first; the
    /// reduced mode stops at the first kill.
    pub killers: &'static [&'static str],
    /// Whether a test that hangs (times out, or loom reports a livelock or deadlock) is the
    /// expected failure mode, and so counts as a kill. Otherwise a hang is inconclusive and
    /// fails the run.
    pub hang_kills: bool,
    /// For a mutant allowed to survive: why it is harmless, or, for a mutant of a
    /// [`KERNEL_ONLY`] file, which check of `make test` catches it (or what would).
    pub allowed: Option<&'static str>,
}

// The snippets of `kernel/pending.rs` below are copied from it, indentation included.

const LOOKUP_FENCE: &str = "            count.fetch_add(1, Ordering::Relaxed);
            // Pairs with the fence in `retire` (see the ordering argument in the module doc).
            fence(Ordering::SeqCst);
";
const LOOKUP_INC: &str = "            count.fetch_add(1, Ordering::Relaxed);\n";
const LOOKUP_DEC: &str = "            count.fetch_sub(1, Ordering::Release);\n";
const LOOKUP_FIRST_LOAD: &str = "if slot.state.load(Ordering::Acquire) != LIVE ||";
const LOOKUP_RECHECK: &str = "let found = if slot.state.load(Ordering::Acquire) == LIVE {";
const CLAIM: &str = "        let (index, slot) = self.claim(reserved)?;\n";
const CLAIM_FILTER: &str = "            .filter(|(i, _)| (*i >= shared) == reserved)\n";
const STORE_CHECKING: &str = "        slot.state.store(CHECKING, Ordering::Release);\n";
const PUBLISH_FENCE: &str = "        slot.state.store(CHECKING, Ordering::Release);
        // Pairs with the fence of any other publisher in `conflicts`: of two racing publishers,
        // at least one sees the other's `CHECKING`.
        fence(Ordering::SeqCst);
";
const STORE_LIVE: &str = "slot.state.store(LIVE, Ordering::Release);";
const SET_LIVE_BIT: &str = "        self.live.fetch_or(live_bit(index), Ordering::Relaxed);\n";
const CONFLICTS_FENCE: &str = "            other.checkers.fetch_add(1, Ordering::Relaxed);
            // Pairs with the fence in `retire`, as for readers.
            fence(Ordering::SeqCst);
";
const RETIRE_FENCE: &str = "        slot.state.store(RETIRING, Ordering::Relaxed);
        // Pairs with the fences in `lookup` and `conflicts`.
        fence(Ordering::SeqCst);
";
const READER_WAIT: &str = "                while count.load(Ordering::Acquire) != 0 {
                    spin_loop();
                }
";
const CHECKER_WAIT: &str = "        while slot.checkers.load(Ordering::Acquire) != 0 {
            relax();
        }
";
const CLEAR: &str = "        slot.entries.store(core::ptr::null_mut(), Ordering::Relaxed);
        slot.len.store(0, Ordering::Relaxed);
";
const CLEAR_AND_FREE: &str = "        slot.entries.store(core::ptr::null_mut(), Ordering::Relaxed);
        slot.len.store(0, Ordering::Relaxed);
        slot.state.store(FREE, Ordering::Release);
";

/// `RETIRE_FENCE` followed by `CLEAR`.
const RETIRE_FENCE_THEN_CLEAR: &str = "        slot.state.store(RETIRING, Ordering::Relaxed);
        // Pairs with the fences in `lookup` and `conflicts`.
        fence(Ordering::SeqCst);
        slot.entries.store(core::ptr::null_mut(), Ordering::Relaxed);
        slot.len.store(0, Ordering::Relaxed);
";
/// `RETIRE_FENCE` followed by `CLEAR_AND_FREE`.
const RETIRE_FENCE_THEN_FREE: &str = "        slot.state.store(RETIRING, Ordering::Relaxed);
        // Pairs with the fences in `lookup` and `conflicts`.
        fence(Ordering::SeqCst);
        slot.entries.store(core::ptr::null_mut(), Ordering::Relaxed);
        slot.len.store(0, Ordering::Relaxed);
        slot.state.store(FREE, Ordering::Release);
";

// The snippet of `arch/x86/insn.rs`: the body of `Kind::listed_with`, the return-thunk policy.
// Without it a bare `RET` would be written on a kernel built with `CONFIG_MITIGATION_RETHUNK`.
const LISTED_WITH: &str = "!(return_thunks && matches!(self, Kind::Ret))";

// The snippets of `kernel/plan.rs`.

/// The guard sync: after every guard, before any tail or record.
const PLAN_GUARD_SYNC: &str = "section(Some(Phase::Sync)),";
/// The tail sync (x86): after the tails, before any head.
const PLAN_TAIL_SYNC: &str = "tails.is_some() && protocol != Protocol::HeadBeforeTailSync;";
/// The head sync: after the heads, before the batch retires.
const PLAN_HEAD_SYNC: &str = "section(heads.map(|_| Phase::Sync)),";
/// What makes a change no change.
const PLAN_IS_NOOP: &str = "        self.old == self.new\n";
/// Whether a change is parked, as the phases that cover a set of changes see it.
const PLAN_SECTION: &str = "let parked = change.parked;";
/// Whether the batch opens a parked section.
const PLAN_PARK: &str = "parked.any().then_some(Phase::Parked {";
/// The broken protocol's records before the guard sync, and the guarded protocol's after it.
const PLAN_RECORDS_EARLY: &str = "let early = (protocol == Protocol::RecordBeforeGuardSync)";
const PLAN_RECORDS_SKIPPED: &str = "Protocol::Guarded | Protocol::HeadBeforeTailSync => {";
/// Whether a parked section emits a record after each write.
const PLAN_PARKED_RECORDS: &str = "records: protocol != Protocol::Quiet,";
/// A phase of two steps per change: its second step.
const PLAN_SECOND_STEP: &str = "self.at = At::Second(second);";
const PLAN_ACROSS_RECORDED: &str = "    pub fn recorded(&mut self) {
        *self = Self::Held;
";
const PLAN_ACROSS_FAILED: &str = "    pub fn failed(&mut self) {
        *self = Self::Held;
";
const PLAN_RECORDS_NONE: &str =
    "Protocol::RecordBeforeGuardSync | Protocol::UnguardedNosync | Protocol::Quiet => None,";
/// A stranded site's target.
const RECOVERY_TARGET: &str = "        if self.recorded {\n";
/// Recovery's sync between the tails and the heads.
const RECOVERY_TAIL_SYNC: &str = "if core::mem::take(&mut self.wrote) || stale {";
/// Recovery's order of phases: tails, their sync, heads, their sync.
const RECOVERY_FIRST: &str = "phase: RecoveryPhase::Tails,";
const RECOVERY_AFTER_TAILS: &str = "self.enter(RecoveryPhase::Heads);";
const RECOVERY_AFTER_HEADS: &str = "self.enter(RecoveryPhase::Done);";

// The snippets of `arch/x86/insn.rs`: emulation and decoding.

const X86_CALL_PUSH: &str = "stack.write_u64(sp, end_of(site, REL32_LEN));";
const X86_CALL_JUMP: &str = "regs.set_ip(target);";
const X86_REL8_SIGN: &str = "branch_target(site, REL8_LEN, i64::from(rel))";
const X86_REL32_SIGN: &str = "i64::from(i32::from_le_bytes(rel))";
const X86_RET_PADDING: &str = "rest.iter().any(|&b| b != GUARD)";
const X86_NOP2: &str = "if matches_fixed(bytes, &NOP2_BYTES)? {";

// The snippets of `arch/arm64/insn.rs`.

const ARM64_BL_LINK: &str = "                regs.set_x(LR, next);\n";
const ARM64_MOV: &str = "regs.set_x(X9, regs.x(LR));";
const ARM64_IMM26: &str = "let offset = (((word & IMM26_MASK) << 6) as i32) >> 4;";
const ARM64_RET: &str = "RET => Ok(Insn::Ret),";
const ARM64_BRK_UNLISTED: &str = "Insn::Brk { .. } => None,";

// The snippets of `kernel/record.rs`.

const RECORD_BYTES: &str = "        w.put(old)?;\n        w.put(new)?;\n";
const RECORD_PADDED: &str = "let padded = tot.checked_add(7)? & !7;";
const RECORD_PAD: &str = "        w.zeros(pad)?;\n";

// More snippets of `kernel/pending.rs`: the search of a slot and the overlap of two batches.

const FIND_EXACT: &str = "let i = entries.binary_search_by(|e| e.addr().cmp(&addr)).ok()?;";
const OVERLAP: &str = "if x.addr() < y_end && y.addr() < x_end {";

// The snippets of the kernel-only files, for the allowed mutants below.

const BATCH_SYNC: &str =
    "                    CurrentArch::sync_all();\n                    defect.pause_across_sync(recorded);\n";
const BATCH_RECORD_HOLD: &str = "        if self.defect != Defect::ReleaseTextAfterRecord {
            self.text.recorded();
        }
";
const BATCH_TEXT_CHECK: &str = "        let published = match run.check_text() {\n";
const BATCH_RECOVERY_REPLACED: &str =
    "        let guarded = entries.iter().zip(sites.iter()).filter(|(_, s)| s.guarded);
        self.engine
            .replaced
            .record_batch(self.text.hold(), guarded.map(|(e, _)| e.addr));
";
const TRAP_FOREIGN: &str = "        return false;\n    }\n    claim(engine, site, regs)";
const TRAP_COUNT: &str =
    "        engine\n            .stats\n            .count_trap(cpu, CurrentArch::kind(&insn), kernel);\n";
const PATCHER_APPLY: &str = "        commit(engine, &held);\n";
const PATCHER_PUSH: &str = "&& q.entries.push(entry, GFP_KERNEL).is_ok();";
const PATCHER_FLUSH_WHEN_FULL: &str = "HandBackWhenFull\n    {\n        commit(engine, held);\n";
const PATCHER_MUST_PARK: &str = "    if CurrentArch::must_park(&old, &new) {
        return Err(Declined::MustPark);
    }
";
const PATCHER_UNCHANGED: &str = "    if *old == *new {\n        return Err(Declined::Unchanged);";
const SITES_OVERLAP: &str = "if overlaps_prev || overlaps_next {";
const SITES_INSIDE: &str = "            Some((_, s)) if addr < s.end() => Found::Inside,\n";
const SITES_OTHER_PATCHERS: &str =
    "if crate::debug::defect() == crate::debug::Defect::IgnoreOtherPatchers {";

/// Every mutant, in the order they run.
pub const MUTANTS: &[Mutant] = &[
    Mutant {
        name: "fence-lookup",
        file: PENDING,
        what: "lookup: no SeqCst fence after the reader increment",
        edits: &[(LOOKUP_FENCE, LOOKUP_INC)],
        killers: &["loom:lookup_never_reads_retired_storage"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "fence-publish",
        file: PENDING,
        what: "publish: no SeqCst fence after storing CHECKING",
        edits: &[(PUBLISH_FENCE, STORE_CHECKING)],
        killers: &["loom:overlapping_publishers_exclude_each_other"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "fence-conflicts",
        file: PENDING,
        what: "conflicts: no SeqCst fence after the checker increment",
        edits: &[(
            CONFLICTS_FENCE,
            "            other.checkers.fetch_add(1, Ordering::Relaxed);\n",
        )],
        killers: &["loom:checker_never_reads_retired_storage"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "fence-retire",
        file: PENDING,
        what: "retire: no SeqCst fence after storing RETIRING",
        edits: &[(
            RETIRE_FENCE,
            "        slot.state.store(RETIRING, Ordering::Relaxed);\n",
        )],
        killers: &["loom:lookup_never_reads_retired_storage"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "lookup-no-count",
        file: PENDING,
        what: "lookup: no reader increment/decrement around the search",
        edits: &[(LOOKUP_INC, ""), (LOOKUP_DEC, "")],
        killers: &["loom:lookup_never_reads_retired_storage"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "lookup-no-recheck",
        file: PENDING,
        what: "lookup: reads the entries without loading the state again",
        edits: &[(LOOKUP_RECHECK, "let found = if true {")],
        killers: &["loom:lookup_never_reads_retired_storage"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "lookup-relaxed-loads",
        file: PENDING,
        what: "lookup: both state loads Acquire -> Relaxed",
        edits: &[
            (
                LOOKUP_FIRST_LOAD,
                "if slot.state.load(Ordering::Relaxed) != LIVE ||",
            ),
            (
                LOOKUP_RECHECK,
                "let found = if slot.state.load(Ordering::Relaxed) == LIVE {",
            ),
        ],
        killers: &["loom:slot_is_reused_only_after_its_readers_leave"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "lookup-relaxed-recheck",
        file: PENDING,
        what: "lookup: the second state load Acquire -> Relaxed",
        edits: &[(
            LOOKUP_RECHECK,
            "let found = if slot.state.load(Ordering::Relaxed) == LIVE {",
        )],
        killers: &["loom:slot_is_reused_only_after_its_readers_leave"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "claim-reserved-open-to-all",
        file: PENDING,
        what: "claim: a module's batch may take the kernel's reserved slot",
        edits: &[(CLAIM_FILTER, "            .filter(|_| true)\n")],
        killers: &["stress:reserved_slot_is_the_kernels_alone"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "claim-reserved-lost",
        file: PENDING,
        what: "claim: the kernel's batch never gets the reserved slot",
        edits: &[(CLAIM_FILTER, "            .filter(|(i, _)| *i < shared)\n")],
        killers: &["stress:reserved_slot_is_the_kernels_alone"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "lookup-relaxed-first-load",
        file: PENDING,
        what: "lookup: the first state load Acquire -> Relaxed",
        edits: &[(
            LOOKUP_FIRST_LOAD,
            "if slot.state.load(Ordering::Relaxed) != LIVE ||",
        )],
        killers: &[],
        guest: None,
        hang_kills: false,
        allowed: Some(
            "the SeqCst fence after the increment is also an acquire fence: a Relaxed load \
             that reads a Release store of LIVE, followed by that fence, synchronizes with the \
             store as an Acquire load would (atomic-to-fence synchronization, C++ \
             [atomics.fences]/3), and the search comes after the fence. The re-check must stay \
             Acquire: it may read the LIVE of a later batch, stored after the fence \
             (lookup-relaxed-recheck)",
        ),
    },
    Mutant {
        name: "publish-live-relaxed",
        file: PENDING,
        what: "publish: the LIVE store Release -> Relaxed",
        edits: &[(STORE_LIVE, "slot.state.store(LIVE, Ordering::Relaxed);")],
        killers: &[],
        guest: None,
        hang_kills: false,
        allowed: Some(
            "the publish SeqCst fence after the CHECKING store is also a release fence, and \
             the LIVE store comes after it: a reader's Acquire load that reads LIVE \
             synchronizes with that fence (fence-to-atomic synchronization, C++ \
             [atomics.fences]/2), and the entries, length and range were stored before it",
        ),
    },
    Mutant {
        name: "publish-checking-early",
        file: PENDING,
        what: "publish: CHECKING stored before entries/len/range",
        edits: &[
            (STORE_CHECKING, ""),
            (
                CLAIM,
                "        let (index, slot) = self.claim(reserved)?;
        slot.state.store(CHECKING, Ordering::Release);
",
            ),
        ],
        killers: &[],
        guest: None,
        hang_kills: false,
        allowed: Some(
            "publishers exclude each other by the store-buffering shape, which only needs the \
             state, entries and length stored before the publish fence, in any order: a checker \
             that sees CHECKING but not yet the pointer or length reads null or 0 (stored by \
             the previous retire, ordered before by FREE -> claim -> CHECKING) and finds an \
             empty slice, no conflict; but having missed a store made before the other \
             publisher's fence, its own fence came first, so the other publisher's scan sees its \
             CHECKING and entries and refuses. Readers never look at CHECKING slots",
        ),
    },
    Mutant {
        name: "publish-live-early",
        file: PENDING,
        what: "publish: LIVE and the live bit stored before entries/len/range (no CHECKING)",
        edits: &[
            (STORE_CHECKING, ""),
            (
                CLAIM,
                "        let (index, slot) = self.claim(reserved)?;
        self.live.fetch_or(live_bit(index), Ordering::Relaxed);
        slot.state.store(LIVE, Ordering::Release);
",
            ),
        ],
        killers: &["loom:refused_batch_is_never_found"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "retire-no-reader-wait",
        file: PENDING,
        what: "retire: does not wait for the per-CPU reader counts",
        edits: &[(READER_WAIT, "")],
        killers: &["loom:lookup_never_reads_retired_storage"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "retire-no-checker-wait",
        file: PENDING,
        what: "retire: does not wait for the checkers count",
        edits: &[(CHECKER_WAIT, "")],
        killers: &["loom:checker_never_reads_retired_storage"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "retire-free-before-wait",
        file: PENDING,
        what: "retire: clears the slot and stores FREE before the waits",
        edits: &[(CLEAR_AND_FREE, ""), (RETIRE_FENCE, RETIRE_FENCE_THEN_FREE)],
        killers: &["loom:slot_is_reused_only_after_its_readers_leave"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "retire-clear-before-wait",
        file: PENDING,
        what: "retire: clears entries/len before the waits (FREE after)",
        edits: &[(CLEAR, ""), (RETIRE_FENCE, RETIRE_FENCE_THEN_CLEAR)],
        killers: &[],
        guest: None,
        hang_kills: false,
        allowed: Some(
            "the storage stays valid until the waits end and the slot cannot be reclaimed before \
             FREE, so a registered reader or checker that loads the cleared pointer or length \
             gets an empty slice: it misses a batch that is already RETIRING, which its state \
             re-check may report anyway, and which no trap can still need (the engine retires a \
             batch only after its last all-CPU sync)",
        ),
    },
    Mutant {
        name: "x86-ret-with-thunks",
        file: X86_INSN,
        what: "x86 listed_with: RET listed even with return thunks",
        edits: &[(LISTED_WITH, "true")],
        killers: &["x86_insn:return_thunks_take_ret_off_the_list"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    // kernel/pending.rs, continued.
    Mutant {
        name: "live-bit-unset",
        file: PENDING,
        what: "publish: the slot's bit in the live mask is never set, so lookups skip it",
        edits: &[(SET_LIVE_BIT, "")],
        killers: &["loom:lookup_finds_live_entries"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "find-by-range",
        file: PENDING,
        what: "find: a site's inner address finds the site (range, not exact)",
        edits: &[(
            FIND_EXACT,
            "let i = entries
            .binary_search_by(|e| e.addr().cmp(&addr))
            .unwrap_or_else(|i| i.saturating_sub(1));",
        )],
        killers: &["stress:finds_exactly_the_published_sites_while_in_flight"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "conflict-same-start-only",
        file: PENDING,
        what: "conflicts: two batches overlap only where a site starts at once",
        edits: &[(OVERLAP, "if x.addr() == y.addr() {")],
        killers: &["stress:batches_nest_and_conflicts_are_refused"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    // arch/x86/insn.rs, continued: emulation and acceptance.
    Mutant {
        name: "x86-call-pushes-site",
        file: X86_INSN,
        what: "x86 CALL emulation pushes the call's own address",
        edits: &[(X86_CALL_PUSH, "stack.write_u64(sp, site);")],
        killers: &["x86_insn:emulate_call_pushes_exactly_the_return_address"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "x86-call-falls-through",
        file: X86_INSN,
        what: "x86 CALL emulation resumes after the call, not at its target",
        edits: &[(X86_CALL_JUMP, "regs.set_ip(end_of(site, REL32_LEN));")],
        killers: &["x86_insn:emulate_call_pushes_exactly_the_return_address"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "x86-rel8-unsigned",
        file: X86_INSN,
        what: "x86 decode: JMP rel8's displacement zero-extended",
        edits: &[(
            X86_REL8_SIGN,
            "branch_target(site, REL8_LEN, i64::from(rel as u8))",
        )],
        killers: &["x86_insn:exact_bytes_and_round_trip"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "x86-rel32-unsigned",
        file: X86_INSN,
        what: "x86 decode: rel32 displacements zero-extended",
        edits: &[(X86_REL32_SIGN, "i64::from(u32::from_le_bytes(rel))")],
        killers: &["x86_insn:exact_bytes_and_round_trip"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "x86-ret-any-padding",
        file: X86_INSN,
        what: "x86 accept: RET followed by anything (an unlisted string)",
        edits: &[(X86_RET_PADDING, "false")],
        killers: &["x86_insn:accept_errors"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "x86-nop2-refused",
        file: X86_INSN,
        what: "x86 accept: the listed NOP2 refused",
        edits: &[(X86_NOP2, "if matches_fixed(bytes, &NOP2_BYTES)? && false {")],
        killers: &["x86_insn:accept_exact_cases"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    // arch/arm64/insn.rs.
    Mutant {
        name: "arm64-bl-no-link",
        file: ARM64_INSN,
        what: "arm64 BL emulation leaves X30 alone",
        edits: &[(ARM64_BL_LINK, "")],
        killers: &["arm64_insn:emulate_bl_links_site_plus_4"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "arm64-bl-links-itself",
        file: ARM64_INSN,
        what: "arm64 BL emulation links the BL's own address",
        edits: &[(ARM64_BL_LINK, "                regs.set_x(LR, site);\n")],
        killers: &["arm64_insn:emulate_bl_links_site_plus_4"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "arm64-imm26-unsigned",
        file: ARM64_INSN,
        what: "arm64 decode: B/BL imm26 not sign-extended",
        edits: &[(
            ARM64_IMM26,
            "let offset = ((word & IMM26_MASK) << 2) as i32;",
        )],
        killers: &["arm64_insn:exact_words_and_round_trip"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "arm64-mov-backwards",
        file: ARM64_INSN,
        what: "arm64 MOV X9, X30 emulation copies X9 into X30",
        edits: &[(ARM64_MOV, "regs.set_x(LR, regs.x(X9));")],
        killers: &["arm64_insn:emulate_mov_x9_x30_copies_the_link_register"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "arm64-ret-refused",
        file: ARM64_INSN,
        what: "arm64 decode: the listed RET refused",
        edits: &[(ARM64_RET, "RET => Err(InsnError::Unsupported),")],
        killers: &["arm64_insn:accept_exact_cases"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "arm64-brk-listed",
        file: ARM64_INSN,
        what: "arm64 accept: every BRK (the guard too) accepted, as a NOP",
        edits: &[(
            ARM64_BRK_UNLISTED,
            "Insn::Brk { .. } => Some(ListedInsn::Nop),",
        )],
        killers: &["arm64_insn:accept_exact_cases"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    // kernel/plan.rs: the guarded section's syncs and the decisions before it.
    Mutant {
        name: "plan-no-guard-sync",
        file: PLAN,
        what: "plan: no sync after the guards",
        edits: &[(PLAN_GUARD_SYNC, "section(None),")],
        killers: &[
            "plan:x86_two_five_byte_sites_take_three_syncs",
            "model:guarded_x86_is_clean_exhaustively_3_cpus_3_sites",
        ],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "plan-no-tail-sync",
        file: PLAN,
        what: "plan: no sync between the tails and the heads (x86)",
        edits: &[(PLAN_TAIL_SYNC, "false;")],
        killers: &[
            "plan:x86_two_five_byte_sites_take_three_syncs",
            "plan:each_kind_of_write_is_one_phase_over_every_change_that_needs_it",
            "model:guarded_x86_is_clean_exhaustively_3_cpus_3_sites",
        ],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "plan-no-head-sync",
        file: PLAN,
        what: "plan: no sync after the heads, before the batch retires",
        edits: &[(PLAN_HEAD_SYNC, "section(None),")],
        killers: &[
            "plan:arm64_batch_takes_two_syncs_and_no_tails",
            "model:guarded_arm64_is_clean_exhaustively_3_cpus_4_sites",
        ],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "plan-noop-by-head",
        file: PLAN,
        what: "plan: a change with the same first byte is no change",
        edits: &[(PLAN_IS_NOOP, "        self.old.head() == self.new.head()\n")],
        killers: &[
            "plan:a_retargeted_jump_is_planned_although_only_its_tail_changes",
            "model:retargeted_branches_are_clean_exhaustively",
        ],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "plan-noop-never",
        file: PLAN,
        what: "plan: an unchanged site is planned as a change",
        edits: &[(PLAN_IS_NOOP, "        false\n")],
        killers: &["plan:noop_changes_get_nothing"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "plan-parked-guarded",
        file: PLAN,
        what: "plan: the parked flag ignored, every change guarded",
        edits: &[(PLAN_SECTION, "let parked = false;")],
        killers: &[
            "plan:arm64_mixed_batch_parks_first_then_guards_the_rest",
            "model:parked_arm64_is_clean_exhaustively_3_cpus_4_sites",
        ],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "plan-never-parks",
        file: PLAN,
        what: "plan: no parked section, so parked changes are never made",
        edits: &[(PLAN_PARK, "false.then_some(Phase::Parked {")],
        killers: &[
            "plan:all_parked_batch_has_no_guarded_section",
            "model:all_parked_arm64_is_clean_exhaustively",
        ],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "plan-records-early",
        file: PLAN,
        what: "plan: the guarded protocol's records before the guard sync",
        edits: &[
            (
                PLAN_RECORDS_EARLY,
                "let early = matches!(protocol, Protocol::Guarded | Protocol::RecordBeforeGuardSync)",
            ),
            (PLAN_RECORDS_SKIPPED, "Protocol::HeadBeforeTailSync => {"),
            (
                PLAN_RECORDS_NONE,
                "Protocol::Guarded
            | Protocol::RecordBeforeGuardSync
            | Protocol::UnguardedNosync
            | Protocol::Quiet => None,",
            ),
        ],
        killers: &[
            "plan:x86_two_five_byte_sites_take_three_syncs",
            "model:guarded_x86_is_clean_exhaustively_3_cpus_3_sites",
        ],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "plan-parked-unrecorded",
        file: PLAN,
        what: "plan: the parked section writes without records",
        edits: &[(PLAN_PARKED_RECORDS, "records: false,")],
        killers: &[
            "plan:arm64_mixed_batch_parks_first_then_guards_the_rest",
            "plan:quiet_and_parked_phases",
            "model:parked_arm64_is_clean_exhaustively_3_cpus_4_sites",
        ],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "plan-second-step-lost",
        file: PLAN,
        what: "plan: a phase of two steps per change yields only the first (parked records, the unguarded protocols' records and writes)",
        edits: &[(PLAN_SECOND_STEP, "let _ = second;")],
        killers: &[
            "plan:arm64_mixed_batch_parks_first_then_guards_the_rest",
            "model:parked_arm64_is_clean_exhaustively_3_cpus_4_sites",
        ],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    // kernel/plan.rs: when a commit lets go of `text_mutex`.
    Mutant {
        name: "plan-record-keeps-releasing",
        file: PLAN,
        what: "text_mutex: a guarded module batch still lets go of it across its syncs after a record",
        edits: &[(PLAN_ACROSS_RECORDED, "    pub fn recorded(&mut self) {\n")],
        killers: &[
            "listener_model:a_listener_counted_between_an_x86_record_and_its_head_misses_it",
            "listener_model:handshake_module_batches_never_disagree",
        ],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "plan-failure-keeps-releasing",
        file: PLAN,
        what: "text_mutex: a module batch whose step failed still lets go of it across its syncs",
        edits: &[(PLAN_ACROSS_FAILED, "    pub fn failed(&mut self) {\n")],
        killers: &["plan:a_module_batch_releases_text_mutex_only_before_its_first_record_or_failure"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    // kernel/plan.rs: recovery of a failed commit.
    Mutant {
        name: "recovery-swapped",
        file: PLAN,
        what: "recovery: a recorded site back to old, an unrecorded one to new",
        edits: &[(RECOVERY_TARGET, "        if !self.recorded {\n")],
        killers: &[
            "plan:recovery_targets_what_the_record_says",
            "model:failed_writes_recover_cleanly_exhaustively",
        ],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "recovery-no-tail-sync",
        file: PLAN,
        what: "recovery: no sync between its tails and its heads",
        edits: &[(RECOVERY_TAIL_SYNC, "if false {")],
        killers: &[
            "plan:recovery_writes_tails_then_syncs_then_heads",
            "model:failed_writes_recover_cleanly_exhaustively",
        ],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "recovery-no-stale-sync",
        file: PLAN,
        what: "recovery: no sync before heads behind tails the plan wrote",
        edits: &[(RECOVERY_TAIL_SYNC, "if core::mem::take(&mut self.wrote) {")],
        killers: &["plan:recovery_syncs_before_heads_behind_tails_the_plan_wrote"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "recovery-heads-first",
        file: PLAN,
        what: "recovery: heads, a sync, then tails, a sync",
        edits: &[
            (RECOVERY_AFTER_HEADS, "self.enter(RecoveryPhase::Tails);"),
            (RECOVERY_AFTER_TAILS, "self.enter(RecoveryPhase::Done);"),
            (RECOVERY_FIRST, "phase: RecoveryPhase::Heads,"),
        ],
        killers: &[
            "plan:recovery_writes_tails_then_syncs_then_heads",
            "model:failed_writes_recover_cleanly_exhaustively",
        ],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    // kernel/record.rs.
    Mutant {
        name: "record-swapped",
        file: RECORD,
        what: "record: the new bytes before the old ones",
        edits: &[(RECORD_BYTES, "        w.put(new)?;\n        w.put(old)?;\n")],
        killers: &["record:golden_x86_jmp_poke"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "record-unpadded-size",
        file: RECORD,
        what: "record: size not rounded up to 8 bytes (no padding)",
        edits: &[(RECORD_PADDED, "let padded = tot;")],
        killers: &["record:golden_x86_jmp_poke"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "record-pad-skipped",
        file: RECORD,
        what: "record: padding counted in the size but not written",
        edits: &[(RECORD_PAD, "")],
        killers: &["record:golden_x86_jmp_poke"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    // kernel/batch.rs (kernel-only): the executor.
    Mutant {
        name: "batch-sync-skipped",
        file: BATCH,
        what: "executor: a plan's Sync step counted but not made",
        edits: &[(
            BATCH_SYNC,
            "                    defect.pause_across_sync(recorded);\n",
        )],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "arm64",
            smp: 2,
            groups: "scenario_one_poker",
            fails: Fails::Case("syncs_reach_every_cpu"),
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test by syncs_reach_every_cpu (scenario_one_poker; arm64, and x86 at 4 CPUs): the \
             kernel's count of function-call IPIs must grow by one per sync at least, \
             over the run, and a sync not made sends none. QEMU's TCG keeps every vCPU's instruction \
             stream coherent with memory, so the text itself never shows a missing sync (why \
             seeded defects 1 and 2 are host-only, docs/architecture.md)",
        ),
    },
    Mutant {
        name: "batch-record-hold-dropped",
        file: BATCH,
        what: "executor: a guarded module batch does not hold text_mutex from its first record on",
        edits: &[(BATCH_RECORD_HOLD, "")],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "x86_64",
            smp: 2,
            groups: "listener",
            fails: Fails::Case("two_listeners_mid_storm"),
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test on x86 by two_listeners_mid_storm (listener group): the second \
             listener arrives across a batch's tail sync and copies INT3 and the new tail of a \
             site whose record went out before it arrived (booted on x86_64-smp2 and -smp4: \
             failed at the first and the second start). The rule itself lives in plan.rs \
             (AcrossSyncs), whose mutants the listener model kills; arm64 has no sync between a \
             record and its write, and no check there can fail",
        ),
    },
    Mutant {
        name: "batch-text-unchecked",
        file: BATCH,
        what: "executor: no check of the text before the batch is published",
        edits: &[(
            BATCH_TEXT_CHECK,
            "        let published = match kernel::error::Result::<()>::Ok(()) {\n",
        )],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "x86_64",
            smp: 2,
            groups: "outsider",
            fails: Fails::Splat,
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test by a splat in the outsider group (booted on x86_64-smp2): with \
             no check of the text, a batch writes over an optimized kprobe's jump, and the \
             outsider's optprobe runner (outsider_optrun) oopses fetching from the garbage \
             address; the outsider's verdict change_under_kprobe (a change at a site under an \
             armed kprobe must fail with EIO and write nothing) would follow",
        ),
    },
    Mutant {
        name: "batch-recovery-unrecorded",
        file: BATCH,
        what: "recovery: the guards it took out not recorded as replaced",
        edits: &[(BATCH_RECOVERY_REPLACED, "")],
        killers: &[],
        guest: None,
        hang_kills: false,
        allowed: Some(
            "nothing in make test catches it: only a vCPU running a stale translation of a \
             guard after its batch retired needs the record, which single-threaded TCG, the \
             harness's, never did (0 vanished-guard traps, docs/results.md). An MTTCG boot \
             (textpoke-runner boot --mttcg, 298 vanished-guard traps in one run) running \
             write_failure_recovered_at_every_write would oops on such a guard",
        ),
    },
    // arch/*/text.rs (kernel-only): each arch's all-CPU sync.
    Mutant {
        name: "x86-sync-all-local",
        file: X86_TEXT,
        what: "x86: the all-CPU sync interrupts no other CPU",
        edits: &[(
            "    unsafe { cpu::on_each_cpu(do_sync_core, core::ptr::null_mut()) };\n",
            "    let _ = do_sync_core;\n",
        )],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "x86_64",
            smp: 4,
            groups: "scenario_one_poker",
            fails: Fails::Case("syncs_reach_every_cpu"),
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test by syncs_reach_every_cpu (scenario_one_poker, x86_64-smp4): the \
             kernel's count of function-call IPIs must grow by one per sync at least, \
             over the run; the text itself, on a coherent TCG, never shows it",
        ),
    },
    Mutant {
        name: "arm64-sync-all-local",
        file: ARM64_TEXT,
        what: "arm64: the all-CPU sync interrupts no other CPU",
        edits: &[("    unsafe { bindings::kick_all_cpus_sync() };\n", "")],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "arm64",
            smp: 2,
            groups: "scenario_one_poker",
            fails: Fails::Case("syncs_reach_every_cpu"),
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test by syncs_reach_every_cpu (scenario_one_poker, arm64): the \
             kernel's count of function-call IPIs must grow by one per sync at least, \
             over the run; the text itself, on a coherent TCG, never shows it",
        ),
    },
    // arch/x86/trap.rs (kernel-only): the stack a trapped CALL or RET is emulated on.
    Mutant {
        name: "x86-call-return-address-dropped",
        file: X86_TRAP,
        what: "x86 trap: an emulated CALL's return address never written to the stack",
        edits: &[(
            "        unsafe { core::ptr::write(addr as usize as *mut u64, value) };\n",
            "        let _ = value;\n",
        )],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "x86_64",
            smp: 2,
            groups: "scenario_one_poker",
            fails: Fails::Splat,
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test by a splat in scenario_one_poker (x86_64): a trapped execution \
             of a call site, emulated, enters the callee with no return address pushed, and its \
             RET leaves for whatever the stack held",
        ),
    },
    Mutant {
        name: "x86-ret-reads-zero",
        file: X86_TRAP,
        what: "x86 trap: an emulated RET reads 0 as its return address",
        edits: &[(
            "        unsafe { core::ptr::read(addr as usize as *const u64) }\n",
            "        0\n",
        )],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "x86_64",
            smp: 2,
            groups: "scenario_one_poker",
            fails: Fails::Splat,
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test by a splat in scenario_one_poker (x86_64): a trapped execution \
             of a ret site, emulated, returns to address 0",
        ),
    },
    // kernel/trap.rs (kernel-only): the trap handler.
    Mutant {
        name: "trap-claims-foreign",
        file: TRAP,
        what: "trap: claims a trap at no site of its own",
        edits: &[(
            TRAP_FOREIGN,
            "        return true;\n    }\n    claim(engine, site, regs)",
        )],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "x86_64",
            smp: 2,
            groups: "outsider",
            fails: Fails::Splat,
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test before the check seeded defect 10 (the swallowed foreign trap) \
             meets: booted on x86_64-smp2, the kernel oopses (invalid opcode) once the outsider's \
             change_under_kprobe has run, a splat that fails the boot; the checks of defect 10 \
             would follow: on x86 the outsider's foreign_int3_reaches_its_owner (its die \
             notifier, below textpoke's hook, misses its INT3s), on arm64 the harness boot \
             harness-foreign-brk, which wants the Oops - BRK of a BRK #0x008 that is not \
             textpoke's (claimed without a skip, it traps again for ever: no Oops)",
        ),
    },
    Mutant {
        name: "trap-uncounted",
        file: TRAP,
        what: "trap: emulated but not counted (textpoke_cpu_traps)",
        edits: &[(TRAP_COUNT, "")],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "x86_64",
            smp: 2,
            groups: "bad_input",
            fails: Fails::Case("trap_emulates_jmp_rel32"),
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test when textpoke loads: its own selftest trap_emulates_jmp_rel32 \
             (textpoke_selftest) finds the new path taken without a counted trap and the module \
             refuses to load (booted on x86_64-smp2: 18 failures, the agent's groups with it); \
             with the selftest passing, every scenario's trap_bits_agree would follow: the \
             executors see trapped executions (the CPU's word) that textpoke_cpu_traps() did \
             not count",
        ),
    },
    // kernel/patcher.rs (kernel-only): the kernel's own changes.
    Mutant {
        name: "patcher-apply-nothing",
        file: PATCHER,
        what: "patcher: apply commits nothing it took",
        edits: &[(PATCHER_APPLY, "        let _ = held;\n")],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "arm64",
            smp: 2,
            groups: "kernel_patching",
            fails: Fails::Splat,
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test by the kernel itself on arm64: ftrace checks each change it \
             hands over and calls ftrace_bug (WARN, \"ftrace failed to modify\"), a splat that \
             fails the boot (booted on arm64-smp2: at 43 s); on x86 kernel_patching's first \
             transition, sched_schedstats_on (the text did not change although the kernel \
             handed its jump labels to textpoke), module_keys_read_right and \
             kernel_static_keys_selftest",
        ),
    },
    Mutant {
        name: "patcher-hands-back-when-full",
        what: "patcher: a queue that cannot grow hands the change back instead of committing \
               what it holds first",
        file: PATCHER,
        edits: &[(
            PATCHER_FLUSH_WHEN_FULL,
            "HandBackWhenFull\n    {\n",
        )],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "x86_64",
            smp: 2,
            groups: "negative_controls",
            fails: Fails::Case("kernel_queue_full_commits_and_goes_on"),
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test by kernel_queue_full_commits_and_goes_on (negative_controls, \
             the debug build's refuse_growth with a listener open, the function tracer on the \
             syscall wrappers): the changes past the queue's room are handed back, which it \
             refuses on x86, and on arm64 the stock path writes them with no record, so the \
             records no longer replay onto the kernel text. The stress boot's fault injection \
             does not reach the path: one failure does not stop a KVVec's growth (krealloc, \
             then kvmalloc)",
        ),
    },
    Mutant {
        name: "patcher-drops-a-change",
        file: PATCHER,
        what: "patcher: a change it takes is never queued",
        edits: &[(
            PATCHER_PUSH,
            "&& (true || q.entries.push(entry, GFP_KERNEL).is_ok());",
        )],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "arm64",
            smp: 2,
            groups: "kernel_patching",
            fails: Fails::Splat,
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test by the kernel itself on arm64: ftrace's check of the change it \
             handed over fails and calls ftrace_bug (WARN, \"ftrace failed to modify\"), a splat \
             that fails the boot (booted on arm64-smp2: at 11 s); on x86 module_keys_read_right \
             (the keys module sees its branches disagree with its keys), \
             kernel_static_keys_selftest (test_static_keys fails) and every kernel_patching \
             transition (the text did not change)",
        ),
    },
    Mutant {
        name: "patcher-declines-every-change",
        file: PATCHER,
        what: "patcher: every change that changes the text handed back as unchanged",
        edits: &[(
            PATCHER_UNCHANGED,
            "    if *old != *new {\n        return Err(Declined::Unchanged);",
        )],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "x86_64",
            smp: 2,
            groups: "kernel_patching",
            fails: Fails::Case("sched_schedstats_on"),
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test by every kernel_patching transition (sched_schedstats_on \
             first): the text changed, by the kernel's own path, and textpoke's kernel.sites \
             did not move (\"textpoke made none of the changes\"); booted on x86_64-smp2, 29 \
             failures, the listener's and hotplug's kernel checks among them. Every one rests on \
             textpoke's counters: the kernel's own path makes each change correctly, and on x86 \
             records each; on arm64, whose stock path records nothing, perf would see no \
             TEXT_POKE record for the changes",
        ),
    },
    Mutant {
        name: "patcher-takes-unsafe",
        file: PATCHER,
        what: "patcher: a change that must be parked taken under a guard",
        edits: &[(PATCHER_MUST_PARK, "")],
        killers: &[],
        guest: None,
        hang_kills: false,
        allowed: Some(
            "nothing in make test catches it: the only such change, arm64 ftrace's NOP -> MOV \
             X9, X30 at a module's load, is written before the site can run, and TCG executes a \
             BRK written over it like any other. The model catches the rule broken only for the \
             changes it is given (control_unparked_ret_and_mov_x9_x30_are_caught); a guest \
             check that the arm64 module loaded while tracing (module_loaded_while_tracing_\
             recorded) hands its MOV X9, X30 changes back (kernel.declined, no record at them) \
             would kill it",
        ),
    },
    // kernel/sites.rs (kernel-only): the registry.
    Mutant {
        name: "sites-register-over",
        file: SITES,
        what: "register: a site over a registered one accepted",
        edits: &[(SITES_OVERLAP, "if false {")],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "x86_64",
            smp: 2,
            groups: "bad_input",
            fails: Fails::Case("register_over"),
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test by the bad-input case register_over: the exerciser registers \
             its own first branch site again, which must be refused with refusal::INSIDE_SITE \
             and the log line \"it overlaps a registered site\"",
        ),
    },
    Mutant {
        name: "sites-inside-is-nowhere",
        file: SITES,
        what: "find: an address inside a site taken for no site",
        edits: &[(SITES_INSIDE, "")],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "x86_64",
            smp: 2,
            groups: "bad_input",
            fails: Fails::Case("inside_site"),
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test by the bad-input case inside_site: a change one byte into a \
             site must be refused with refusal::INSIDE_SITE and \"inside another site\", not \
             as unregistered",
        ),
    },
    Mutant {
        name: "sites-other-patchers",
        file: SITES,
        what: "register: no check for text other patchers own",
        edits: &[(SITES_OTHER_PATCHERS, "if true {")],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "x86_64",
            smp: 2,
            groups: "outsider",
            fails: Fails::Case("outsider_register_jump_label_site"),
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test as seeded defect 11 is (control_other_patchers_ignored_caught): \
             the outsider's verdicts register_jump_label_site, register_ftrace_site and \
             register_kprobed_site (KTAP outsider_register_*) want ETXTBSY",
        ),
    },
    Mutant {
        name: "new-text-init-undescribed",
        file: NEW_TEXT,
        what: "module_changed: at COMING only the core text described, not the init text",
        edits: &[(
            "        ModuleState::Coming => {\n            for part in [Part::Core, Part::Init] {",
            "        ModuleState::Coming => {\n            for part in [Part::Core] {",
        )],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "x86_64",
            smp: 2,
            groups: "other_writers",
            fails: Fails::Case("loaded"),
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test by the guest case new_text/loaded (other_writers group): the \
             decoder meets the init text's unregister at LIVE with no map to remove",
        ),
    },
    Mutant {
        name: "new-text-left-registered",
        file: NEW_TEXT,
        what: "module_changed: a going module's core text never unregistered",
        edits: &[(
            "            for part in [Part::Core, Part::Init] {\n                unregister(",
            "            for part in [Part::Init] {\n                unregister(",
        )],
        killers: &[],
        guest: Some(GuestKiller {
            arch: "x86_64",
            smp: 2,
            groups: "other_writers",
            fails: Fails::Case("unloaded"),
        }),
        hang_kills: false,
        allowed: Some(
            "caught in make test by the guest case new_text/unloaded: the decoder still holds a \
             map of the module once it unloaded",
        ),
    },
    Mutant {
        name: "faults-call-one-byte-back",
        file: AGENT_FAULTS,
        what: "changed_ranges: a call found only right before the first changed byte",
        edits: &[(
            "let call = (i.saturating_sub(4)..i)",
            "let call = (i.saturating_sub(1)..i)",
        )],
        killers: &[
            "agent:scenarios::faults::tests::a_call_whose_target_changed_is_one_range_from_its_opcode",
        ],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "faults-enomem-not-required",
        file: AGENT_FAULTS,
        what: "no_enomem: a case whose runs all survived counts as having run its failure path",
        edits: &[(
            "(self.outcomes.get(\"ENOMEM\").copied().unwrap_or(0) == 0)",
            "(self.outcomes.get(\"ENOMEM\").copied().unwrap_or(0) == usize::MAX)",
        )],
        killers: &["agent:scenarios::faults::tests::a_failure_path_is_judged_only_if_a_run_failed"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "kselftest-keyed-by-description",
        file: AGENT_KSELFTEST,
        what: "key_by_file: results keyed by their description, which two files share",
        edits: &[("        out.push((key, outcome));", "        out.push((name, outcome));")],
        killers: &["agent:scenarios::kselftest::tests::ftracetest_results_are_keyed_by_file"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "kselftest-description-unchecked",
        file: AGENT_KSELFTEST,
        what: "key_by_file: a result taken for the next file whatever its description",
        edits: &[("        if name != description {", "        if false && name != description {")],
        killers: &["agent:scenarios::kselftest::tests::ftracetest_results_are_keyed_by_file"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "new-text-register-unordered",
        file: AGENT_NEW_TEXT,
        what: "Event::key: a register no longer sorts before the records of its own time",
        edits: &[(
            "            Self::Ksymbol(k) if !k.unregister => (k.time, 0),",
            "            Self::Ksymbol(k) if !k.unregister => (k.time, 1),",
        )],
        killers: &["agent:scenarios::new_text::tests::a_register_is_filled_then_changed_then_removed"],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
    Mutant {
        name: "new-text-old-bytes-unchecked",
        file: AGENT_NEW_TEXT,
        what: "replay: a change record applied whatever the map holds at its address",
        edits: &[(
            "                    if held != now.as_slice() {",
            "                    if false && held != now.as_slice() {",
        )],
        killers: &[
            "agent:scenarios::new_text::tests::holes_wrong_old_bytes_and_unmatched_ksymbols_are_errors",
        ],
        guest: None,
        hang_kills: false,
        allowed: None,
    },
];

/// Applies `mutant` to `source`, the text of its [`Mutant::file`].
pub fn apply(mutant: &Mutant, source: &str) -> Result<String, String> {
    let file = mutant.file;
    let mut text = source.to_owned();
    for (i, (find, replace)) in mutant.edits.iter().enumerate() {
        let count = text.matches(find).count();
        if count != 1 {
            return Err(format!(
                "mutant {} of {file}: replacement {} of {} expects its text exactly once in \
                 {file}, found it {count} times (was {file} edited? update \
                 tools/mutants/src/mutants.rs):\n{find}",
                mutant.name,
                i + 1,
                mutant.edits.len(),
            ));
        }
        text = text.replacen(find, replace, 1);
    }
    if text == source {
        return Err(format!("mutant {} of {file}: changes nothing", mutant.name));
    }
    Ok(text)
}

/// The files the mutants `mutants` edit, each once, in order of first use.
pub fn files<'a>(mutants: impl IntoIterator<Item = &'a Mutant>) -> Vec<&'static str> {
    let mut out = Vec::new();
    for m in mutants {
        if !out.contains(&m.file) {
            out.push(m.file);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// The current text of `file` (relative to the repository root) in this tree.
    fn source(file: &str) -> String {
        let path = format!("{}/../../{file}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {file}: {e}"))
    }

    /// Every mutant applies to the current source of its file: run by `cargo test --workspace`,
    /// so a change to a mutated file breaks the build before it can weaken the mutation run.
    #[test]
    fn every_mutant_applies_to_the_current_source() {
        for m in MUTANTS {
            if let Err(e) = apply(m, &source(m.file)) {
                panic!("{e}");
            }
        }
    }

    /// Every replacement's text occurs exactly once in its mutant's file as it is in this tree
    /// (not only after the mutant's earlier replacements): no snippet is ambiguous or stale.
    #[test]
    fn every_find_text_occurs_exactly_once_in_its_file() {
        for m in MUTANTS {
            let source = source(m.file);
            for (i, (find, _)) in m.edits.iter().enumerate() {
                let count = source.matches(find).count();
                assert_eq!(
                    count,
                    1,
                    "mutant {}: the text of replacement {} occurs {count} times in {}:\n{find}",
                    m.name,
                    i + 1,
                    m.file
                );
            }
        }
    }

    #[test]
    fn names_are_unique_and_mutants_distinct() {
        let mut names = HashSet::new();
        let mut texts = HashSet::new();
        for m in MUTANTS {
            assert!(names.insert(m.name), "duplicate mutant name {}", m.name);
            let text = apply(m, &source(m.file)).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                texts.insert((m.file, text)),
                "mutant {} duplicates another",
                m.name
            );
            assert!(
                m.killers.is_empty() || m.allowed.is_none(),
                "{}: an allowed survivor names no killer",
                m.name
            );
            assert!(
                !m.killers.is_empty() || m.allowed.is_some(),
                "{}: a mutant names a killer or why it may survive",
                m.name
            );
        }
    }

    #[test]
    fn a_missing_or_repeated_snippet_is_an_error_naming_the_mutant_and_its_file() {
        for m in [&MUTANTS[0], MUTANTS.last().unwrap()] {
            let err = apply(m, "no such text").unwrap_err();
            assert!(
                err.contains(m.name) && err.contains(m.file) && err.contains("found it 0 times"),
                "{err}"
            );
            let twice = format!("{}{}", m.edits[0].0, m.edits[0].0);
            let err = apply(m, &twice).unwrap_err();
            assert!(
                err.contains(m.name) && err.contains(m.file) && err.contains("found it 2 times"),
                "{err}"
            );
        }
    }

    #[test]
    fn the_files_are_listed_once_each_in_order() {
        assert_eq!(
            files(MUTANTS),
            [
                PENDING,
                X86_INSN,
                ARM64_INSN,
                PLAN,
                RECORD,
                BATCH,
                X86_TEXT,
                ARM64_TEXT,
                X86_TRAP,
                TRAP,
                PATCHER,
                SITES,
                NEW_TEXT,
                AGENT_FAULTS,
                AGENT_KSELFTEST,
                AGENT_NEW_TEXT
            ]
        );
    }

    /// The kernel-only files are exactly the mutated files neither `textpoke-core` includes
    /// (tools/core/src/lib.rs) nor the harness holds, and their mutants are allowed, naming no
    /// host killer.
    #[test]
    fn kernel_only_files_are_those_the_host_crate_lacks() {
        let lib = source("tools/core/src/lib.rs");
        let host: Vec<String> = crate::workspace::path_attributes(&lib)
            .iter()
            .map(|p| p.trim_start_matches("../").to_owned())
            .collect();
        assert!(host.iter().any(|f| f == PLAN), "{host:?}");
        for file in files(MUTANTS) {
            assert_eq!(
                kernel_only(file),
                !host.iter().any(|f| f == file)
                    && ![AGENT_FAULTS, AGENT_KSELFTEST, AGENT_NEW_TEXT].contains(&file),
                "{file}: kernel-only, or included by textpoke-core, or the harness's"
            );
        }
        for m in MUTANTS.iter().filter(|m| kernel_only(m.file)) {
            assert!(
                m.killers.is_empty() && m.allowed.is_some(),
                "{}: a kernel-only mutant is allowed, with what catches it",
                m.name
            );
        }
    }
}
