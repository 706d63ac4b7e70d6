//! The SMP instruction-cache model: the engine's plan has no violations, and each broken
//! protocol (the negative controls) is caught; arm64 changes outside the concurrently modifiable
//! set are clean only when parked; and the BEFORE/AFTER pair leaves executions that a decoder
//! holding only the records cannot classify, where the guarded single record leaves none.

use textpoke_core::model::{
    arm64_concurrently_modifiable, change, exhaustive, parked, random_walks, until, Batch,
    Protocol, Recover, Report, Retirement, Violation,
};
use textpoke_core::plan::{self, Arch, Change};
use yaxpeax_arch::{Decoder, U8Reader};
use yaxpeax_arm::armv8::a64::{InstDecoder, Opcode, Operand};

const GUARDED: Protocol = Protocol::Plan(plan::Protocol::Guarded);
const QUIET: Protocol = Protocol::Plan(plan::Protocol::Quiet);
const BEFORE_AFTER: Protocol = Protocol::Plan(plan::Protocol::BeforeAfter);

const ARM_NOP: u32 = 0xd503_201f;
const ARM_B: u32 = 0x1400_0010;
const ARM_BL: u32 = 0x9400_0020;
const ARM_RET: u32 = 0xd65f_03c0;
const ARM_MOV_X9_X30: u32 = 0xaa1e_03e9;

const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
const NOP2: [u8; 2] = [0x66, 0x90];
const JMP8: [u8; 2] = [0xeb, 0x10];
const JMP32: [u8; 5] = [0xe9, 0x10, 0x00, 0x00, 0x00];
const CALL: [u8; 5] = [0xe8, 0x20, 0x00, 0x00, 0x00];

fn arm(word: u32) -> [u8; 4] {
    word.to_le_bytes()
}

fn x86_sites(n: usize) -> Vec<Change> {
    let kinds = [
        change(&NOP5, &JMP32),
        change(&NOP2, &JMP8),
        change(&NOP5, &CALL),
        change(&JMP32, &NOP5),
        change(&CALL, &NOP5),
    ];
    (0..n).map(|i| kinds[i % kinds.len()]).collect()
}

fn arm64_sites(n: usize) -> Vec<Change> {
    let nop = arm(0xd503_201f);
    let kinds = [
        change(&nop, &arm(0x1400_0010)), // NOP -> B
        change(&nop, &arm(0x9400_0020)), // NOP -> BL
        change(&arm(0x1400_0010), &nop), // B -> NOP
        change(&arm(0x9400_0020), &nop), // BL -> NOP
    ];
    (0..n).map(|i| kinds[i % kinds.len()]).collect()
}

/// arm64 changes to and from `RET` and `MOV X9, X30`, parked as the arch layer must mark them,
/// alternating with ordinary `NOP`/`B`/`BL` changes made under guards.
fn arm64_mixed_sites(n: usize) -> Vec<Change> {
    let a = arm;
    let kinds = [
        parked(&a(ARM_NOP), &a(ARM_RET)),
        change(&a(ARM_NOP), &a(ARM_B)),
        parked(&a(ARM_MOV_X9_X30), &a(ARM_NOP)),
        change(&a(ARM_B), &a(ARM_NOP)),
        parked(&a(ARM_RET), &a(ARM_NOP)),
        change(&a(ARM_NOP), &a(ARM_BL)),
        parked(&a(ARM_NOP), &a(ARM_MOV_X9_X30)),
        change(&a(ARM_BL), &a(ARM_NOP)),
    ];
    (0..n).map(|i| kinds[i % kinds.len()]).collect()
}

/// The same changes as the old plan made them: nothing parked.
fn unparked(changes: Vec<Change>) -> Vec<Change> {
    changes
        .into_iter()
        .map(|c| Change { parked: false, ..c })
        .collect()
}

fn show(name: &str, r: &Report) {
    println!(
        "{name}: {} states, {} executions (old {}, new {}, trapped {}), violations {:?}, \
         ambiguous {}",
        r.states, r.executions, r.old, r.new, r.trapped, r.violations, r.ambiguous
    );
}

#[test]
fn guarded_x86_is_clean_exhaustively_3_cpus_3_sites() {
    let r = exhaustive(&Batch::new(Arch::X86, GUARDED, x86_sites(3)), 3);
    show("x86 guarded 3x3", &r);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(r.old > 0 && r.new > 0 && r.trapped > 0);
    assert_eq!(r.ambiguous, 0);
}

#[test]
fn guarded_arm64_is_clean_exhaustively_3_cpus_4_sites() {
    let r = exhaustive(&Batch::new(Arch::Arm64, GUARDED, arm64_sites(4)), 3);
    show("arm64 guarded 3x4", &r);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(r.old > 0 && r.new > 0 && r.trapped > 0);
    assert_eq!(r.ambiguous, 0);
}

#[test]
fn guarded_is_clean_on_random_walks_8_cpus_16_sites() {
    for (arch, sites) in [(Arch::X86, x86_sites(16)), (Arch::Arm64, arm64_sites(16))] {
        let r = random_walks(&Batch::new(arch, GUARDED, sites), 8, 100, 0x5eed);
        show(&format!("{arch:?} guarded random 8x16"), &r);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert!(r.trapped > 0);
        assert_eq!(r.ambiguous, 0);
    }
}

/// Retargeting: a jump or call to another target keeps its first byte (x86 opcode; arm64, here,
/// the low byte of the offset) and changes the rest, as static calls and ftrace retarget theirs.
/// Such a change is made like any other, and is clean.
#[test]
fn retargeted_branches_are_clean_exhaustively() {
    const JMP32_ELSEWHERE: [u8; 5] = [0xe9, 0x10, 0x01, 0x00, 0x00];
    const CALL_ELSEWHERE: [u8; 5] = [0xe8, 0x20, 0x02, 0x00, 0x00];
    for (arch, sites) in [
        (
            Arch::X86,
            vec![
                change(&JMP32, &JMP32_ELSEWHERE),
                change(&CALL, &CALL_ELSEWHERE),
            ],
        ),
        (
            Arch::Arm64,
            vec![
                change(&arm(ARM_B), &arm(ARM_B | 0x100)),
                change(&arm(ARM_BL), &arm(ARM_BL | 0x100)),
            ],
        ),
    ] {
        assert!(sites.iter().all(|c| c.old.head() == c.new.head()));
        let r = exhaustive(&Batch::new(arch, GUARDED, sites), 3);
        show(&format!("{arch:?} retargeted 3x2"), &r);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert!(r.old > 0 && r.new > 0 && r.trapped > 0);
    }
}

/// A write of the plan that fails, at every write of it, in every interleaving: the planner's
/// recovery leaves every site whole and as its record says, with no execution breaking the
/// invariant meanwhile.
#[test]
fn failed_writes_recover_cleanly_exhaustively() {
    for (arch, sites, cpus) in [
        (Arch::X86, x86_sites(3), 2),
        (Arch::X86, x86_sites(2), 3),
        (Arch::Arm64, arm64_sites(3), 3),
    ] {
        let n = sites.len();
        let r = exhaustive(
            &Batch::new(arch, GUARDED, sites).failing(Recover::Plan),
            cpus,
        );
        show(&format!("{arch:?} failing writes {cpus}x{n}"), &r);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert!(r.old > 0 && r.new > 0 && r.trapped > 0);
    }
}

/// A quiet arm64 batch (nobody listens: nosync writes, one sync) whose write fails: recovery
/// syncs what the plan wrote before the caller returns, and no execution is torn or traps.
/// Nobody listens, so the record violations do not apply: the model counts every new
/// execution as before a record that never comes, and a site left new without one as
/// unlike its record (the engine's registry takes the text as it is).
#[test]
fn failed_quiet_writes_are_synced_exhaustively() {
    let batch = Batch::new(Arch::Arm64, QUIET, arm64_sites(3)).failing(Recover::Plan);
    let r = exhaustive(&batch, 3);
    show("Arm64 quiet failing writes 3x3", &r);
    let unrecorded = [Violation::NewBeforeRecord, Violation::FinalText];
    let wrong: Vec<_> = r
        .violations
        .iter()
        .filter(|(v, _)| !unrecorded.contains(v))
        .collect();
    assert!(wrong.is_empty(), "{wrong:?}");
    // Executions of the new instructions (counted as unrecorded) and of the old ones.
    assert!(
        r.old > 0
            && r.violations
                .iter()
                .any(|(v, _)| *v == Violation::NewBeforeRecord)
    );
}

/// Negative control: the same recovery told that the plan wrote nothing since its last sync
/// returns with a CPU that may still fetch the old instruction.
#[test]
fn control_recovery_forgetting_writes_is_caught() {
    let batch =
        Batch::new(Arch::Arm64, QUIET, arm64_sites(3)).failing(Recover::PlanForgettingWrites);
    let r = until(&batch, 2, Violation::StaleAtReturn);
    show(
        "Arm64 quiet recovery forgetting writes until StaleAtReturn",
        &r,
    );
    assert!(r.found(Violation::StaleAtReturn), "{:?}", r.violations);
}

/// Negative control: recovering by writing each guarded site whole, then one sync (x86), lets a
/// CPU that refetches the first byte see it with a stale tail.
#[test]
fn control_whole_write_recovery_is_caught() {
    let batch = Batch::new(Arch::X86, GUARDED, x86_sites(2)).failing(Recover::WholeOverGuard);
    let r = until(&batch, 2, Violation::Torn);
    show("x86 whole-write recovery until Torn", &r);
    assert!(r.found(Violation::Torn), "{:?}", r.violations);
}

/// Each negative control must be caught, with the violation that explains it.
fn caught(arch: Arch, protocol: Protocol, sites: Vec<Change>, want: Violation) {
    let r = until(&Batch::new(arch, protocol, sites), 3, want);
    show(&format!("{arch:?} {protocol:?} until {want:?}"), &r);
    assert!(
        r.found(want),
        "{protocol:?} on {arch:?} not caught as {want:?}: {:?}",
        r.violations
    );
}

#[test]
fn control_unguarded_nosync_is_caught() {
    caught(
        Arch::Arm64,
        Protocol::Plan(plan::Protocol::UnguardedNosync),
        arm64_sites(3),
        Violation::NewBeforeRecord,
    );
    caught(
        Arch::Arm64,
        Protocol::Plan(plan::Protocol::UnguardedNosync),
        arm64_sites(3),
        Violation::OldAfterRecord,
    );
    caught(
        Arch::X86,
        Protocol::Plan(plan::Protocol::UnguardedNosync),
        x86_sites(2),
        Violation::Torn,
    );
}

#[test]
fn control_record_before_guard_sync_is_caught() {
    caught(
        Arch::X86,
        Protocol::Plan(plan::Protocol::RecordBeforeGuardSync),
        x86_sites(3),
        Violation::OldAfterRecord,
    );
    caught(
        Arch::Arm64,
        Protocol::Plan(plan::Protocol::RecordBeforeGuardSync),
        arm64_sites(3),
        Violation::OldAfterRecord,
    );
}

#[test]
fn control_head_before_tail_sync_is_caught() {
    caught(
        Arch::X86,
        Protocol::Plan(plan::Protocol::HeadBeforeTailSync),
        x86_sites(3),
        Violation::Torn,
    );
}

#[test]
fn control_single_global_slot_is_caught() {
    caught(
        Arch::Arm64,
        Protocol::SingleSlotTable,
        arm64_sites(3),
        Violation::UnhandledTrap,
    );
    caught(
        Arch::X86,
        Protocol::SingleSlotTable,
        x86_sites(3),
        Violation::UnhandledTrap,
    );
}

#[test]
fn control_single_slot_is_harmless_for_one_site() {
    // The 2019 design is fine for one address: it is multi-site keys that break it.
    let r = exhaustive(
        &Batch::new(Arch::Arm64, Protocol::SingleSlotTable, arm64_sites(1)),
        3,
    );
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

// ---------------------------------------------------------------------------------------------
// arm64 instructions that may not be modified under execution: parked sections.

#[test]
fn concurrently_modifiable_set_matches_the_arm_arm() {
    for word in [
        ARM_NOP,
        ARM_B,
        ARM_BL,
        0x17ff_ffff, // B .-4
        0xd420_0100, // BRK #0x008, the guard
        0xd400_0001, // SVC #0
        0xd400_0002, // HVC #0
        0xd400_0003, // SMC #0
        0xd41f_ffe1, // SVC #0xffff
        0xd503_3fdf, // ISB (SY)
    ] {
        assert!(arm64_concurrently_modifiable(word), "{word:#010x}");
    }
    for word in [
        ARM_RET,
        ARM_MOV_X9_X30,
        0xd63f_0200, // BLR X16
        0x5400_0040, // B.EQ
        0xd503_203f, // YIELD
        0xd503_233f, // PACIASP
        0xd503_281f, // HINT #64
        0xd503_3f9f, // DSB SY
        0xd440_0000, // HLT #0
        0xd420_0101, // BRK with LL = 01: unallocated
        0x0000_0000, // UDF #0
    ] {
        assert!(!arm64_concurrently_modifiable(word), "{word:#010x}");
    }
}

/// yaxpeax-arm's reading of `word`, in the Arm ARM's list: B, BL, BRK, NOP (`HINT #0` only:
/// yaxpeax prints more hints as "nop"), SVC, HVC, SMC, ISB.
fn modifiable_by_yaxpeax(word: u32) -> bool {
    let bytes = word.to_le_bytes();
    let Ok(insn) = InstDecoder::default().decode(&mut U8Reader::new(&bytes)) else {
        return false;
    };
    match insn.opcode {
        Opcode::B
        | Opcode::BL
        | Opcode::BRK
        | Opcode::SVC
        | Opcode::HVC
        | Opcode::SMC
        | Opcode::ISB => true,
        Opcode::HINT => matches!(
            insn.operands[..2],
            [Operand::ControlReg(0), Operand::Immediate(0)]
        ),
        _ => false,
    }
}

#[test]
fn concurrently_modifiable_set_agrees_with_yaxpeax() {
    let mut checked = 0usize;
    let mut check = |word: u32| {
        assert_eq!(
            arm64_concurrently_modifiable(word),
            modifiable_by_yaxpeax(word),
            "{word:#010x}"
        );
        checked += 1;
    };
    // Every hint, barrier and system word with op1 = 3, every exception-generating form, then
    // random words, in every family and in the families of the set.
    (0xd503_0000..=0xd503_ffffu32).for_each(&mut check);
    for opc_op2_ll in 0..256u32 {
        let fields = (opc_op2_ll >> 5) << 21 | (opc_op2_ll & 0x1f);
        for imm in [0u32, 1, 8, 0x8000, 0xffff] {
            check(0xd400_0000 | fields | imm << 5);
        }
    }
    let mut rng = 0x5eed_u64;
    for _ in 0..500_000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let w = rng as u32;
        check(w);
        check(0xd400_0000 | (w & 0x00ff_ffff));
        check(0xd500_0000 | (w & 0x00ff_ffff));
        check(0x1400_0000 | (w & 0x83ff_ffff));
        check((w & 0xfc00_0000) | 0x0000_0010);
    }
    println!("concurrently modifiable set: {checked} words agree with yaxpeax-arm");
}

#[test]
fn parked_arm64_is_clean_exhaustively_3_cpus_4_sites() {
    // NOP -> RET and MOV X9, X30 -> NOP parked, NOP -> B and B -> NOP guarded.
    let r = exhaustive(&Batch::new(Arch::Arm64, GUARDED, arm64_mixed_sites(4)), 3);
    show("arm64 parked+guarded 3x4", &r);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(r.old > 0 && r.new > 0 && r.trapped > 0);
    assert_eq!(r.ambiguous, 0);
}

#[test]
fn parked_arm64_is_clean_exhaustively_3_cpus_8_sites() {
    // Both directions of both unsafe instructions parked, four guarded NOP/B/BL changes.
    let r = exhaustive(&Batch::new(Arch::Arm64, GUARDED, arm64_mixed_sites(8)), 3);
    show("arm64 parked+guarded 3x8", &r);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(r.old > 0 && r.new > 0 && r.trapped > 0);
    assert_eq!(r.ambiguous, 0);
}

#[test]
fn all_parked_arm64_is_clean_exhaustively() {
    let sites: Vec<Change> = arm64_mixed_sites(8)
        .into_iter()
        .filter(|c| c.parked)
        .collect();
    let r = exhaustive(&Batch::new(Arch::Arm64, GUARDED, sites), 3);
    show("arm64 all parked 3x4", &r);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(r.old > 0 && r.new > 0);
    assert_eq!((r.trapped, r.ambiguous), (0, 0));
}

#[test]
fn parked_x86_is_clean_exhaustively_3_cpus_3_sites() {
    // x86 parks nothing today, but the plan and the model support it on every arch.
    let mut sites = x86_sites(2);
    sites.insert(1, parked(&[0xc3], &NOP5[..1]));
    let r = exhaustive(&Batch::new(Arch::X86, GUARDED, sites), 3);
    show("x86 parked+guarded 3x3", &r);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.ambiguous, 0);
}

#[test]
fn parked_arm64_is_clean_on_random_walks_8_cpus_16_sites() {
    let r = random_walks(
        &Batch::new(Arch::Arm64, GUARDED, arm64_mixed_sites(16)),
        8,
        100,
        0x5eed,
    );
    show("arm64 parked+guarded random 8x16", &r);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(r.trapped > 0);
    assert_eq!(r.ambiguous, 0);
}

#[test]
fn control_unparked_ret_and_mov_x9_x30_are_caught() {
    // The old plan: the same changes, all under guards, so BRK is written over RET (or MOV X9,
    // X30) and RET over BRK while other CPUs run.
    caught(
        Arch::Arm64,
        GUARDED,
        unparked(arm64_mixed_sites(4)),
        Violation::UnsafeConcurrentModification,
    );
    let a = arm;
    caught(
        Arch::Arm64,
        GUARDED,
        vec![
            change(&a(ARM_NOP), &a(ARM_B)),
            change(&a(ARM_RET), &a(ARM_NOP)),
        ],
        Violation::UnsafeConcurrentModification,
    );
    caught(
        Arch::Arm64,
        GUARDED,
        vec![
            change(&a(ARM_NOP), &a(ARM_B)),
            change(&a(ARM_NOP), &a(ARM_MOV_X9_X30)),
        ],
        Violation::UnsafeConcurrentModification,
    );
    // Upstream's nosync write of a RET, unguarded, breaks the same rule.
    caught(
        Arch::Arm64,
        Protocol::Plan(plan::Protocol::UnguardedNosync),
        vec![change(&a(ARM_NOP), &a(ARM_RET))],
        Violation::UnsafeConcurrentModification,
    );
}

#[test]
fn control_unparked_ret_fails_only_the_new_rule() {
    // Without the rule the guarded plan would pass these changes: the ordering invariant alone
    // cannot see the problem, which is why the rule is its own violation.
    let r = exhaustive(
        &Batch::new(Arch::Arm64, GUARDED, unparked(arm64_mixed_sites(4))),
        3,
    );
    show("arm64 unparked 3x4", &r);
    assert_eq!(
        r.violations.iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        [Violation::UnsafeConcurrentModification]
    );
}

// ---------------------------------------------------------------------------------------------
// The BEFORE/AFTER pair, as an ablation: executions a decoder holding only the records cannot
// classify.

#[test]
fn before_after_arm64_leaves_ambiguous_executions_3_cpus_4_sites() {
    let r = exhaustive(&Batch::new(Arch::Arm64, BEFORE_AFTER, arm64_sites(4)), 3);
    show("arm64 before/after 3x4", &r);
    // Its records never lie about order (no new before BEFORE, no old after AFTER)...
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    // ...but they leave many executions undecided; the guarded plan at this size leaves none.
    assert!(r.ambiguous > 0);
    println!(
        "arm64 before/after 3x4: {} of {} executions ambiguous",
        r.ambiguous, r.executions
    );
}

#[test]
fn before_after_x86_leaves_ambiguous_executions_3_cpus_3_sites() {
    let r = exhaustive(&Batch::new(Arch::X86, BEFORE_AFTER, x86_sites(3)), 3);
    show("x86 before/after 3x3", &r);
    // Unguarded x86 writes can be seen torn, which no record helps with; the records themselves
    // never lie about order.
    assert!(!r.found(Violation::OldAfterRecord), "{:?}", r.violations);
    assert!(!r.found(Violation::NewBeforeRecord), "{:?}", r.violations);
    assert!(r.ambiguous > 0);
    println!(
        "x86 before/after 3x3: {} of {} executions ambiguous",
        r.ambiguous, r.executions
    );
}

/// Two guarded batches on `sites`, the first `split` of them then the rest, the first one's
/// entries retired as `retirement` says.
fn stream(arch: Arch, sites: Vec<Change>, split: usize, retirement: Retirement) -> Batch {
    let (a, b) = sites.split_at(split);
    Batch::stream(
        arch,
        plan::Protocol::Guarded,
        a.to_vec(),
        b.to_vec(),
        retirement,
    )
}

/// Retiring a batch's entries at the next batch's first sync instead of its own last one: every
/// execution in between that still meets a guard finds its entry, each batch's changes are in
/// effect when it returns (fetched, or trapped and emulated as the new instruction), and the
/// records keep their order, on both arches.
#[test]
fn retirement_at_the_next_sync_is_clean_exhaustively() {
    for (arch, sites, split) in [
        (Arch::X86, x86_sites(3), 2),
        (Arch::Arm64, arm64_sites(4), 2),
        (Arch::Arm64, arm64_mixed_sites(4), 2),
    ] {
        let r = exhaustive(&stream(arch, sites, split, Retirement::AtNextSync), 3);
        show(&format!("{arch:?} retired at the next sync, 3 CPUs"), &r);
        assert!(r.violations.is_empty(), "{arch:?}: {:?}", r.violations);
        assert!(r.old > 0 && r.new > 0 && r.trapped > 0);
        assert_eq!(r.ambiguous, 0);
    }
}

#[test]
fn retirement_at_the_next_sync_is_clean_on_random_walks_8_cpus_16_sites() {
    for (arch, sites) in [(Arch::X86, x86_sites(16)), (Arch::Arm64, arm64_sites(16))] {
        let batch = stream(arch, sites, 8, Retirement::AtNextSync);
        let r = random_walks(&batch, 8, 100, 0x5eed);
        show(
            &format!("{arch:?} retired at the next sync, random 8x16"),
            &r,
        );
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert!(r.trapped > 0);
    }
}

/// The saving: one sync per batch of a stream, the last batch's kept.
#[test]
fn retirement_at_the_next_sync_saves_a_sync_per_batch() {
    for (arch, sites) in [(Arch::X86, x86_sites(4)), (Arch::Arm64, arm64_sites(4))] {
        let by_plan = stream(arch, sites.clone(), 2, Retirement::Plan);
        let deferred = stream(arch, sites, 2, Retirement::AtNextSync);
        let per_batch = match arch {
            Arch::X86 => 3,
            Arch::Arm64 => 2,
        };
        assert_eq!(by_plan.syncs(), 2 * per_batch, "{arch:?}");
        assert_eq!(deferred.syncs(), 2 * per_batch - 1, "{arch:?}");
        let r = exhaustive(&by_plan, 2);
        assert!(
            r.violations.is_empty(),
            "{arch:?} by the plan: {:?}",
            r.violations
        );
    }
}

/// Negative control: a batch that drops its last sync and retires at once leaves CPUs that
/// still see a guard with no entry for it (an oops in the kernel), and returns with its changes
/// not in effect for them.
#[test]
fn control_retirement_without_a_sync_is_caught() {
    for (arch, sites, split) in [
        (Arch::X86, x86_sites(3), 2),
        (Arch::Arm64, arm64_sites(4), 2),
    ] {
        let batch = stream(arch, sites, split, Retirement::WithoutSync);
        let r = until(&batch, 3, Violation::UnhandledTrap);
        show(&format!("{arch:?} retired without a sync"), &r);
        assert!(
            r.found(Violation::UnhandledTrap),
            "{arch:?}: {:?}",
            r.violations
        );
        let r = until(&batch, 2, Violation::StaleAtReturn);
        assert!(
            r.found(Violation::StaleAtReturn),
            "{arch:?}: {:?}",
            r.violations
        );
    }
}
