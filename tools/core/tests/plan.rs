//! The step planner: exact plans for both arches and the sync-skipping rules.

use textpoke_core::insn::InsnBytes;
use textpoke_core::plan::{Arch, Change, Cost, Plan, Step};
use Step::*;

const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
const JMP32: [u8; 5] = [0xe9, 0x10, 0x00, 0x00, 0x00];
const CALL: [u8; 5] = [0xe8, 0x10, 0x00, 0x00, 0x00];
const ARM_NOP: [u8; 4] = 0xd503_201fu32.to_le_bytes();
const ARM_B: [u8; 4] = 0x1400_0004u32.to_le_bytes();

fn change(old: &[u8], new: &[u8]) -> Change {
    Change {
        old: InsnBytes::new(old).unwrap(),
        new: InsnBytes::new(new).unwrap(),
    }
}

fn plan(arch: Arch, changes: &[Change]) -> Vec<Step> {
    Plan::new(arch, changes).collect()
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
            Emit(0),
            WriteTail(1),
            Emit(1),
            Sync,
            WriteHead(0),
            WriteHead(1),
            Sync,
            Retire
        ]
    );
    let cost = Cost::of(Plan::new(Arch::X86, &changes));
    assert_eq!((cost.syncs, cost.writes, cost.records), (3, 6, 2));
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
    let p = |protocol| Plan::with_protocol(Arch::X86, protocol, &changes).collect::<Vec<_>>();
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
            Emit(0),
            WriteTail(1),
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
