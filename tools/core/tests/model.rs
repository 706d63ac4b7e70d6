//! The SMP instruction-cache model: the engine's plan has no violations, and each broken
//! protocol (the negative controls) is caught.

use textpoke_core::model::{
    change, exhaustive, random_walks, until, Batch, Protocol, Report, Violation,
};
use textpoke_core::plan::{self, Arch, Change};

const GUARDED: Protocol = Protocol::Plan(plan::Protocol::Guarded);

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

fn show(name: &str, r: &Report) {
    println!(
        "{name}: {} states, {} executions (old {}, new {}, trapped {}), violations {:?}",
        r.states, r.executions, r.old, r.new, r.trapped, r.violations
    );
}

#[test]
fn guarded_x86_is_clean_exhaustively_3_cpus_3_sites() {
    let r = exhaustive(&Batch::new(Arch::X86, GUARDED, x86_sites(3)), 3);
    show("x86 guarded 3x3", &r);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(r.old > 0 && r.new > 0 && r.trapped > 0);
}

#[test]
fn guarded_arm64_is_clean_exhaustively_3_cpus_4_sites() {
    let r = exhaustive(&Batch::new(Arch::Arm64, GUARDED, arm64_sites(4)), 3);
    show("arm64 guarded 3x4", &r);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert!(r.old > 0 && r.new > 0 && r.trapped > 0);
}

#[test]
fn guarded_is_clean_on_random_walks_8_cpus_16_sites() {
    for (arch, sites) in [(Arch::X86, x86_sites(16)), (Arch::Arm64, arm64_sites(16))] {
        let r = random_walks(&Batch::new(arch, GUARDED, sites), 8, 100, 0x5eed);
        show(&format!("{arch:?} guarded random 8x16"), &r);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert!(r.trapped > 0);
    }
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
