//! The step planner: exact plans for both arches, the sync-skipping rules, parked sections and
//! the BEFORE/AFTER ablation.

use textpoke_core::insn::InsnBytes;
use textpoke_core::plan::{
    AcrossSyncs, Arch, Change, Cost, Phase, Plan, Protocol, Recovery, Repair, Step, Stranded,
    TextHolder,
};
use Step::*;

const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
const JMP32: [u8; 5] = [0xe9, 0x10, 0x00, 0x00, 0x00];
const CALL: [u8; 5] = [0xe8, 0x10, 0x00, 0x00, 0x00];
const ARM_NOP: [u8; 4] = 0xd503_201fu32.to_le_bytes();
const ARM_B: [u8; 4] = 0x1400_0004u32.to_le_bytes();
const ARM_RET: [u8; 4] = 0xd65f_03c0u32.to_le_bytes();
const ARM_MOV_X9_X30: [u8; 4] = 0xaa1e_03e9u32.to_le_bytes();

fn change(old: &[u8], new: &[u8]) -> Change {
    Change::new(InsnBytes::new(old).unwrap(), InsnBytes::new(new).unwrap())
}

fn parked(old: &[u8], new: &[u8]) -> Change {
    Change::parked(InsnBytes::new(old).unwrap(), InsnBytes::new(new).unwrap())
}

const PROTOCOLS: [Protocol; 5] = [
    Protocol::Guarded,
    Protocol::RecordBeforeGuardSync,
    Protocol::HeadBeforeTailSync,
    Protocol::UnguardedNosync,
    Protocol::BeforeAfter,
];

fn plan(arch: Arch, changes: &[Change]) -> Vec<Step> {
    Plan::new(arch, changes).steps().collect()
}

#[test]
fn x86_two_five_byte_sites_take_three_syncs() {
    let changes = [change(&NOP5, &JMP32), change(&JMP32, &NOP5)];
    assert_eq!(
        plan(Arch::X86, &changes),
        [
            Publish,
            WriteGuard(0),
            WriteGuard(1),
            Sync,
            WriteTail(0),
            WriteTail(1),
            Emit(0),
            Emit(1),
            Sync,
            WriteHead(0),
            WriteHead(1),
            Sync,
            Retire
        ]
    );
    let cost = Cost::of(Plan::new(Arch::X86, &changes));
    assert_eq!(
        (cost.syncs, cost.writes, cost.records, cost.parked),
        (3, 6, 2, 0)
    );
}

#[test]
fn arm64_batch_takes_two_syncs_and_no_tails() {
    let changes = [
        change(&ARM_NOP, &ARM_B),
        change(&ARM_B, &ARM_NOP),
        change(&ARM_NOP, &ARM_B),
    ];
    assert_eq!(
        plan(Arch::Arm64, &changes),
        [
            Publish,
            WriteGuard(0),
            WriteGuard(1),
            WriteGuard(2),
            Sync,
            Emit(0),
            Emit(1),
            Emit(2),
            WriteHead(0),
            WriteHead(1),
            WriteHead(2),
            Sync,
            Retire
        ]
    );
}

#[test]
fn x86_unchanged_tail_skips_the_middle_sync() {
    // JMP rel32 and CALL rel32 with the same displacement differ only in the first byte.
    let changes = [change(&JMP32, &CALL)];
    assert_eq!(
        plan(Arch::X86, &changes),
        [
            Publish,
            WriteGuard(0),
            Sync,
            Emit(0),
            WriteHead(0),
            Sync,
            Retire
        ]
    );
}

#[test]
fn x86_single_byte_change_to_int3_needs_one_sync() {
    // RET becoming INT3: the guard is the final instruction, so there is no tail and no head.
    let changes = [change(&[0xc3], &[0xcc])];
    assert_eq!(
        plan(Arch::X86, &changes),
        [Publish, WriteGuard(0), Sync, Emit(0), Retire]
    );
}

#[test]
fn noop_changes_get_nothing() {
    let changes = [
        change(&NOP5, &NOP5),
        change(&NOP5, &JMP32),
        change(&NOP5, &NOP5),
    ];
    let steps = plan(Arch::X86, &changes);
    assert!(steps.iter().all(|s| !matches!(
        s,
        WriteGuard(0) | WriteGuard(2) | Emit(0) | Emit(2) | WriteTail(0) | WriteHead(2)
    )));
    assert!(steps.contains(&Emit(1)));
    assert!(plan(Arch::X86, &[change(&NOP5, &NOP5)]).is_empty());
    assert!(plan(Arch::Arm64, &[]).is_empty());
}

#[test]
fn every_site_gets_exactly_one_record_between_guard_sync_and_head() {
    // Mixed batch sizes and kinds: the structural invariants the kernel relies on.
    for n in 1..40usize {
        let changes: Vec<Change> = (0..n)
            .map(|i| match i % 3 {
                0 => change(&NOP5, &JMP32),
                1 => change(&JMP32, &CALL),
                _ => change(&CALL, &NOP5),
            })
            .collect();
        for arch in [Arch::X86, Arch::Arm64] {
            let changes: Vec<Change> = match arch {
                Arch::X86 => changes.clone(),
                Arch::Arm64 => (0..n)
                    .map(|i| {
                        if i % 2 == 0 {
                            change(&ARM_NOP, &ARM_B)
                        } else {
                            change(&ARM_B, &ARM_NOP)
                        }
                    })
                    .collect(),
            };
            let steps = plan(arch, &changes);
            assert_eq!(steps.first(), Some(&Publish));
            assert_eq!(steps.last(), Some(&Retire));
            let first_sync = steps.iter().position(|s| *s == Sync).unwrap();
            for i in 0..n {
                let at = |want: Step| steps.iter().position(|s| *s == want);
                let records = steps.iter().filter(|s| **s == Emit(i)).count();
                assert_eq!(records, 1, "site {i} on {arch:?}");
                assert!(at(WriteGuard(i)).unwrap() < first_sync);
                let emit = at(Emit(i)).unwrap();
                assert!(emit > first_sync);
                let head = at(WriteHead(i)).unwrap();
                assert!(head > emit);
                // A sync separates every tail from every head, and the last head from Retire.
                if let Some(tail) = at(WriteTail(i)) {
                    assert!(steps[tail..]
                        .iter()
                        .take_while(|s| !matches!(s, WriteHead(_)))
                        .any(|s| *s == Sync));
                }
                assert!(steps[head..].contains(&Sync));
            }
        }
    }
}

#[test]
fn broken_protocols_have_the_documented_shape() {
    use textpoke_core::plan::Protocol;
    let changes = [change(&NOP5, &JMP32), change(&JMP32, &NOP5)];
    let p = |protocol| {
        Plan::with_protocol(Arch::X86, protocol, &changes)
            .steps()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        p(Protocol::RecordBeforeGuardSync),
        [
            Publish,
            WriteGuard(0),
            WriteGuard(1),
            Emit(0),
            Emit(1),
            Sync,
            WriteTail(0),
            WriteTail(1),
            Sync,
            WriteHead(0),
            WriteHead(1),
            Sync,
            Retire
        ]
    );
    assert_eq!(
        p(Protocol::HeadBeforeTailSync),
        [
            Publish,
            WriteGuard(0),
            WriteGuard(1),
            Sync,
            WriteTail(0),
            WriteTail(1),
            Emit(0),
            Emit(1),
            WriteHead(0),
            WriteHead(1),
            Sync,
            Retire
        ]
    );
    assert_eq!(
        p(Protocol::UnguardedNosync),
        [
            Publish,
            WriteWhole(0),
            Emit(0),
            WriteWhole(1),
            Emit(1),
            Sync,
            Retire
        ]
    );
}

#[test]
fn constructors_set_parked() {
    let (old, new) = (
        InsnBytes::new(&ARM_NOP).unwrap(),
        InsnBytes::new(&ARM_RET).unwrap(),
    );
    assert_eq!(
        Change::new(old, new),
        Change {
            old,
            new,
            parked: false
        }
    );
    assert_eq!(
        Change::parked(old, new),
        Change {
            old,
            new,
            parked: true
        }
    );
}

#[test]
fn arm64_mixed_batch_parks_first_then_guards_the_rest() {
    let changes = [
        change(&ARM_NOP, &ARM_B),
        parked(&ARM_NOP, &ARM_RET),
        change(&ARM_B, &ARM_NOP),
        parked(&ARM_MOV_X9_X30, &ARM_NOP),
    ];
    assert_eq!(
        plan(Arch::Arm64, &changes),
        [
            Park,
            WriteWhole(1),
            Emit(1),
            WriteWhole(3),
            Emit(3),
            Unpark,
            Publish,
            WriteGuard(0),
            WriteGuard(2),
            Sync,
            Emit(0),
            Emit(2),
            WriteHead(0),
            WriteHead(2),
            Sync,
            Retire
        ]
    );
    let cost = Cost::of(Plan::new(Arch::Arm64, &changes));
    assert_eq!(
        (cost.syncs, cost.writes, cost.records, cost.parked),
        (2, 6, 4, 1)
    );
}

#[test]
fn all_parked_batch_has_no_guarded_section() {
    let changes = [
        parked(&ARM_RET, &ARM_NOP),
        parked(&ARM_NOP, &ARM_MOV_X9_X30),
    ];
    assert_eq!(
        plan(Arch::Arm64, &changes),
        [Park, WriteWhole(0), Emit(0), WriteWhole(1), Emit(1), Unpark]
    );
    let cost = Cost::of(Plan::new(Arch::Arm64, &changes));
    assert_eq!(
        (cost.syncs, cost.writes, cost.records, cost.parked),
        (0, 2, 2, 1)
    );
}

#[test]
fn parked_noops_open_no_section() {
    // A parked no-op is no change: no parked section, and the rest plans as without it.
    let changes = [parked(&ARM_RET, &ARM_RET), change(&ARM_NOP, &ARM_B)];
    assert_eq!(
        plan(Arch::Arm64, &changes),
        plan(
            Arch::Arm64,
            &[change(&ARM_RET, &ARM_RET), change(&ARM_NOP, &ARM_B)]
        )
    );
    assert_eq!(plan(Arch::Arm64, &changes).first(), Some(&Publish));
    assert!(plan(Arch::Arm64, &[parked(&ARM_RET, &ARM_RET)]).is_empty());
    let changes = [parked(&ARM_NOP, &ARM_RET), parked(&ARM_B, &ARM_B)];
    assert_eq!(
        plan(Arch::Arm64, &changes),
        [Park, WriteWhole(0), Emit(0), Unpark]
    );
}

/// Every protocol, every arch: a batch with parked changes plans as its parked section followed
/// by exactly the plan of its other changes alone.
#[test]
fn parked_section_precedes_the_plan_of_the_other_changes() {
    let x86 = [
        change(&NOP5, &JMP32),
        parked(&[0xc3], &[0x90]),
        change(&JMP32, &CALL),
        parked(&NOP5, &CALL),
        change(&CALL, &NOP5),
    ];
    let arm64 = [
        parked(&ARM_NOP, &ARM_RET),
        change(&ARM_NOP, &ARM_B),
        parked(&ARM_MOV_X9_X30, &ARM_NOP),
        change(&ARM_B, &ARM_NOP),
        parked(&ARM_NOP, &ARM_NOP),
    ];
    for (arch, changes) in [(Arch::X86, &x86[..]), (Arch::Arm64, &arm64[..])] {
        for protocol in PROTOCOLS {
            let steps: Vec<Step> = Plan::with_protocol(arch, protocol, changes)
                .steps()
                .collect();
            let mut want = vec![Park];
            for (i, c) in changes.iter().enumerate() {
                if c.parked && c.old != c.new {
                    want.extend([WriteWhole(i), Emit(i)]);
                }
            }
            want.push(Unpark);
            // The other changes alone, renumbered back to their index in the batch.
            let others: Vec<usize> = (0..changes.len()).filter(|&i| !changes[i].parked).collect();
            let alone: Vec<Change> = others.iter().map(|&i| changes[i]).collect();
            let renumber = |s: Step| match s {
                WriteGuard(i) => WriteGuard(others[i]),
                WriteTail(i) => WriteTail(others[i]),
                WriteHead(i) => WriteHead(others[i]),
                WriteWhole(i) => WriteWhole(others[i]),
                Emit(i) => Emit(others[i]),
                EmitBefore(i) => EmitBefore(others[i]),
                EmitAfter(i) => EmitAfter(others[i]),
                s => s,
            };
            want.extend(
                Plan::with_protocol(arch, protocol, &alone)
                    .steps()
                    .map(renumber),
            );
            assert_eq!(steps, want, "{arch:?} {protocol:?}");
            assert!(!Plan::with_protocol(arch, protocol, &alone)
                .steps()
                .any(|s| s == Park));
        }
    }
}

#[test]
fn before_after_has_the_documented_shape() {
    let changes = [
        change(&NOP5, &JMP32),
        change(&NOP5, &NOP5),
        change(&JMP32, &NOP5),
    ];
    let steps: Vec<Step> = Plan::with_protocol(Arch::X86, Protocol::BeforeAfter, &changes)
        .steps()
        .collect();
    assert_eq!(
        steps,
        [
            Publish,
            EmitBefore(0),
            WriteWhole(0),
            EmitBefore(2),
            WriteWhole(2),
            Sync,
            EmitAfter(0),
            EmitAfter(2),
            Retire
        ]
    );
    let cost = Cost::of(Plan::with_protocol(
        Arch::X86,
        Protocol::BeforeAfter,
        &changes,
    ));
    assert_eq!(
        (cost.syncs, cost.writes, cost.records, cost.parked),
        (1, 2, 4, 0)
    );
    let arm64 = [change(&ARM_NOP, &ARM_B)];
    assert_eq!(
        Plan::with_protocol(Arch::Arm64, Protocol::BeforeAfter, &arm64)
            .steps()
            .collect::<Vec<_>>(),
        [
            Publish,
            EmitBefore(0),
            WriteWhole(0),
            Sync,
            EmitAfter(0),
            Retire
        ]
    );
}

/// A change whose old and new instruction share their first byte is a change all the same:
/// retargeting a jump (what static calls and ftrace do) rewrites only its displacement, behind a
/// guard like any other, with its record.
#[test]
fn a_retargeted_jump_is_planned_although_only_its_tail_changes() {
    const JMP32_ELSEWHERE: [u8; 5] = [0xe9, 0x40, 0x00, 0x00, 0x00];
    assert_eq!(
        plan(Arch::X86, &[change(&JMP32, &JMP32_ELSEWHERE)]),
        [
            Publish,
            WriteGuard(0),
            Sync,
            WriteTail(0),
            Emit(0),
            Sync,
            WriteHead(0),
            Sync,
            Retire
        ]
    );
    // arm64: `B` to another target, whose first byte in memory may well be the same.
    let b_elsewhere = 0x1400_0104u32.to_le_bytes();
    assert_eq!(ARM_B[0], b_elsewhere[0]);
    assert_eq!(
        plan(Arch::Arm64, &[change(&ARM_B, &b_elsewhere)]),
        [
            Publish,
            WriteGuard(0),
            Sync,
            Emit(0),
            WriteHead(0),
            Sync,
            Retire
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Recovery of a commit whose write failed: exact repairs for stranded sites, so that each of
// its rules (the target, tails before heads, the syncs) has a test of its own; the model
// (`failed_writes_recover_cleanly_exhaustively`) checks the executions meanwhile.

fn repairs(arch: Arch, changes: &[Change], sites: &[Stranded]) -> Vec<Repair> {
    Recovery::new(arch, changes, sites, false).collect()
}

/// A plan that wrote since its last sync and then failed leaves no guard (a quiet arm64 batch's
/// nosync writes, the second failing): recovery has nothing to repair, but it syncs, as the
/// plan would have, before the caller returns. Nothing written since: nothing to do.
#[test]
fn recovery_syncs_the_plans_unsynced_writes() {
    let arm64 = [change(&ARM_NOP, &ARM_B), change(&ARM_B, &ARM_NOP)];
    let whole = [Stranded::default(), Stranded::default()];
    assert_eq!(
        Recovery::new(Arch::Arm64, &arm64, &whole, true).collect::<Vec<_>>(),
        [Repair::Sync]
    );
    assert_eq!(repairs(Arch::Arm64, &arm64, &whole), []);
    // With guards to take out, the one sync after the heads covers the plan's writes too.
    let guarded = Stranded {
        guarded: true,
        ..Stranded::default()
    };
    assert_eq!(
        Recovery::new(Arch::Arm64, &arm64, &[guarded, whole[1]], true).collect::<Vec<_>>(),
        [Repair::Head(0), Repair::Sync]
    );
    // x86: a sync before the heads syncs the plan's writes as well; none is added after them.
    let x86 = [change(&NOP5, &JMP32)];
    let behind = Stranded {
        guarded: true,
        recorded: true,
        tail_done: true,
        tail_written: true,
    };
    assert_eq!(
        Recovery::new(Arch::X86, &x86, &[behind], true).collect::<Vec<_>>(),
        [Repair::Sync, Repair::Head(0), Repair::Sync]
    );
}

/// A site goes to its new instruction if its record went out, to its old one otherwise.
#[test]
fn recovery_targets_what_the_record_says() {
    let c = change(&NOP5, &JMP32);
    let recorded = Stranded {
        guarded: true,
        recorded: true,
        ..Stranded::default()
    };
    let unrecorded = Stranded {
        recorded: false,
        ..recorded
    };
    assert_eq!(recorded.target(&c), c.new);
    assert_eq!(unrecorded.target(&c), c.old);
}

/// x86, the write of site 1's new tail failed: site 0 holds the guard and the new tail, site 1
/// the guard and its old tail, neither recorded. Both go back to their old instruction: site
/// 0's old tail first, while every guard stands, then a sync, then the heads, then a sync.
#[test]
fn recovery_writes_tails_then_syncs_then_heads() {
    let changes = [change(&NOP5, &JMP32), change(&JMP32, &NOP5)];
    let sites = [
        Stranded {
            guarded: true,
            recorded: false,
            tail_done: false,
            tail_written: true,
        },
        Stranded {
            guarded: true,
            recorded: false,
            tail_done: true,
            tail_written: false,
        },
    ];
    assert_eq!(
        repairs(Arch::X86, &changes, &sites),
        [
            Repair::Tail(0),
            Repair::Sync,
            Repair::Head(0),
            Repair::Head(1),
            Repair::Sync
        ]
    );
    // A site without the guard is whole already.
    let whole = [Stranded::default(), sites[1]];
    assert_eq!(
        repairs(Arch::X86, &changes, &whole),
        [Repair::Head(1), Repair::Sync]
    );
    // arm64 has no tails: the guard is the whole instruction, and nothing is behind it.
    let arm64 = [change(&ARM_NOP, &ARM_B), change(&ARM_B, &ARM_NOP)];
    let guarded = Stranded {
        guarded: true,
        tail_done: true,
        ..Stranded::default()
    };
    assert_eq!(
        repairs(Arch::Arm64, &arm64, &[guarded, guarded]),
        [Repair::Head(0), Repair::Head(1), Repair::Sync]
    );
    assert_eq!(repairs(Arch::X86, &changes, &[]), []);
}

/// x86: a site behind whose guard the plan wrote the new tail, recorded, so that no tail is
/// left to write. Recovery cannot tell from the text whether the plan's own sync after the
/// tails ran before the failure, so it syncs before the head all the same: a CPU that still
/// holds the old tail must not see it behind the new first byte. (Under the guarded plan that
/// sync did run whenever a site is stranded so, which is why the model cannot see this rule
/// broken; without that sync, as in `Protocol::HeadBeforeTailSync`, it is the only one.)
#[test]
fn recovery_syncs_before_heads_behind_tails_the_plan_wrote() {
    let changes = [change(&NOP5, &JMP32), change(&JMP32, &NOP5)];
    let sites = [
        Stranded::default(),
        Stranded {
            guarded: true,
            recorded: true,
            tail_done: true,
            tail_written: true,
        },
    ];
    assert_eq!(
        repairs(Arch::X86, &changes, &sites),
        [Repair::Sync, Repair::Head(1), Repair::Sync]
    );
    // Nothing written behind any guard: no sync before the heads.
    let untouched = [
        Stranded::default(),
        Stranded {
            tail_written: false,
            ..sites[1]
        },
    ];
    assert_eq!(
        repairs(Arch::X86, &changes, &untouched),
        [Repair::Head(1), Repair::Sync]
    );
}

#[test]
fn quiet_plans_emit_nothing_and_guard_only_on_x86() {
    let arm = [change(&ARM_NOP, &ARM_B), change(&ARM_B, &ARM_NOP)];
    // arm64: upstream's nosync writes, one sync, no guard, no record.
    assert_eq!(
        Plan::with_protocol(Arch::Arm64, Protocol::Quiet, &arm)
            .steps()
            .collect::<Vec<_>>(),
        [Publish, WriteWhole(0), WriteWhole(1), Sync, Retire]
    );
    let cost = Cost::of(Plan::with_protocol(Arch::Arm64, Protocol::Quiet, &arm));
    assert_eq!((cost.syncs, cost.writes, cost.records), (1, 2, 0));
    // x86: the guarded plan without its records.
    let x86 = [change(&NOP5, &JMP32), change(&JMP32, &NOP5)];
    let guarded: Vec<Step> = plan(Arch::X86, &x86)
        .into_iter()
        .filter(|s| !matches!(s, Emit(_)))
        .collect();
    assert_eq!(
        Plan::with_protocol(Arch::X86, Protocol::Quiet, &x86)
            .steps()
            .collect::<Vec<_>>(),
        guarded
    );
    // A parked change: the same section, without its record.
    let mixed = [change(&ARM_NOP, &ARM_B), parked(&ARM_RET, &ARM_MOV_X9_X30)];
    assert_eq!(
        Plan::with_protocol(Arch::Arm64, Protocol::Quiet, &mixed)
            .steps()
            .collect::<Vec<_>>(),
        [
            Park,
            WriteWhole(1),
            Unpark,
            Publish,
            WriteWhole(0),
            Sync,
            Retire
        ]
    );
}

/// A phase as the tests compare it: its kind and the changes it covers.
fn phases(arch: Arch, protocol: Protocol, changes: &[Change]) -> Vec<(String, Vec<usize>)> {
    let indices = |c: textpoke_core::plan::Changes<'_, Change>| c.map(|(i, _)| i).collect();
    Plan::with_protocol(arch, protocol, changes)
        .map(|phase| match phase {
            Phase::Parked { changes, records } => {
                (format!("parked records={records}"), indices(changes))
            }
            Phase::Publish => ("publish".into(), vec![]),
            Phase::Writes(write, changes) => (format!("{write:?} writes"), indices(changes)),
            Phase::Records(record, changes) => (format!("{record:?} records"), indices(changes)),
            Phase::WriteThenRecord(changes) => ("write then record".into(), indices(changes)),
            Phase::AnnounceThenWrite(changes) => ("announce then write".into(), indices(changes)),
            Phase::Sync => ("sync".into(), vec![]),
            Phase::Retire => ("retire".into(), vec![]),
        })
        .collect()
}

/// A phase as [`phases`] describes it.
fn s(kind: &str, changes: &[usize]) -> (String, Vec<usize>) {
    (kind.to_string(), changes.to_vec())
}

#[test]
fn each_kind_of_write_is_one_phase_over_every_change_that_needs_it() {
    // 40 x86 sites: the tails of all of them are one phase, which the engine hands to the arch
    // together (16 to a temporary-mm session), not one session per tail. Site 1's tail does
    // not change, and site 2 becomes INT3 itself: no tail, no head.
    let mut changes: Vec<Change> = (0..40).map(|_| change(&NOP5, &JMP32)).collect();
    changes[1] = change(&JMP32, &CALL);
    changes[2] = change(&[0xc3], &[0xcc]);
    let all: Vec<usize> = (0..40).collect();
    let tails: Vec<usize> = all.iter().copied().filter(|&i| i != 1 && i != 2).collect();
    let heads: Vec<usize> = all.iter().copied().filter(|&i| i != 2).collect();
    assert_eq!(
        phases(Arch::X86, Protocol::Guarded, &changes),
        [
            s("publish", &[]),
            s("Guard writes", &all),
            s("sync", &[]),
            s("Tail writes", &tails),
            s("Change records", &all),
            s("sync", &[]),
            s("Head writes", &heads),
            s("sync", &[]),
            s("retire", &[]),
        ]
    );
    // The steps are the phases' steps, in order.
    let flat: Vec<Step> = Plan::new(Arch::X86, &changes)
        .flat_map(Phase::steps)
        .collect();
    assert_eq!(flat, plan(Arch::X86, &changes));
    assert_eq!(
        flat.iter().filter(|s| matches!(s, WriteTail(_))).count(),
        38
    );
}

#[test]
fn quiet_and_parked_phases() {
    let arm = [
        change(&ARM_NOP, &ARM_B),
        parked(&ARM_RET, &ARM_MOV_X9_X30),
        change(&ARM_B, &ARM_NOP),
    ];
    assert_eq!(
        phases(Arch::Arm64, Protocol::Quiet, &arm),
        [
            s("parked records=false", &[1]),
            s("publish", &[]),
            s("Whole writes", &[0, 2]),
            s("sync", &[]),
            s("retire", &[]),
        ]
    );
    assert_eq!(
        phases(Arch::Arm64, Protocol::Guarded, &arm),
        [
            s("parked records=true", &[1]),
            s("publish", &[]),
            s("Guard writes", &[0, 2]),
            s("sync", &[]),
            s("Change records", &[0, 2]),
            s("Head writes", &[0, 2]),
            s("sync", &[]),
            s("retire", &[]),
        ]
    );
}

/// When a commit lets go of `text_mutex` across a sync: a guarded module batch until its first
/// record or a failed step, nobody else ever. The model of the listener handshake
/// (tests/listener_model.rs) shows why for records; a failed step's recovery is not in that
/// model, so its half of the rule is pinned here.
#[test]
fn a_module_batch_releases_text_mutex_only_before_its_first_record_or_failure() {
    let guarded = AcrossSyncs::at_start(TextHolder::Commit, true);
    assert!(guarded.releases());
    for holder in [TextHolder::Commit, TextHolder::Caller] {
        assert!(
            !AcrossSyncs::at_start(holder, false).releases(),
            "{holder:?} quiet"
        );
    }
    assert!(!AcrossSyncs::at_start(TextHolder::Caller, true).releases());
    let mut recorded = guarded;
    recorded.recorded();
    assert!(!recorded.releases(), "held after a record");
    let mut failed = guarded;
    failed.failed();
    assert!(!failed.releases(), "held after a failed step");
    // Neither lets go again.
    failed.recorded();
    recorded.failed();
    assert_eq!((failed, recorded), (AcrossSyncs::Held, AcrossSyncs::Held));
}
