//! The seeded-defect table (kernel/defects.rs) against what it names: every check it says
//! catches a defect exists where it says, and docs/architecture.md's summary lists each.

use textpoke_core::defects::{self, CaughtIn};

const ARCHITECTURE: &str = include_str!("../../../docs/architecture.md");
const MODEL_TESTS: &str = include_str!("model.rs");
const PLAN_TESTS: &str = include_str!("plan.rs");
const CONTROLS: &str = include_str!("../../agent/src/scenarios/controls.rs");
const MAIN: &str = include_str!("../../agent/src/main.rs");

#[test]
fn modes_are_one_to_n_and_names_distinct() {
    for (i, d) in defects::ALL.iter().enumerate() {
        assert_eq!(d.mode, i as i32 + 1, "{}", d.name);
        assert_eq!(defects::by_mode(d.mode), Some(*d));
        for e in &defects::ALL[i + 1..] {
            assert_ne!(d.name, e.name);
            assert_ne!(d.caught_by, e.caught_by);
        }
    }
    assert_eq!(defects::by_mode(0), None);
}

#[test]
fn each_check_exists_where_the_table_says() {
    for d in defects::ALL {
        let host = MODEL_TESTS.contains(&format!("fn {}(", d.caught_by))
            || PLAN_TESTS.contains(&format!("fn {}(", d.caught_by));
        // The agent names its controls through the table, by the defect's constant.
        let constant = format!("defects::{}", d.name.to_uppercase());
        let guest = CONTROLS.contains(&constant) || MAIN.contains(&constant);
        match d.caught_in {
            CaughtIn::Host => assert!(host, "{}: no host test {}", d.name, d.caught_by),
            CaughtIn::Guest => assert!(guest, "{}: no guest control uses {constant}", d.name),
            CaughtIn::GuestAndHost => {
                assert!(guest, "{}: no guest control uses {constant}", d.name)
            }
        }
    }
}

#[test]
fn the_architecture_summary_lists_every_defect() {
    for d in defects::ALL {
        let row = format!("| {} |", d.mode);
        let line = ARCHITECTURE
            .lines()
            .find(|l| l.starts_with(&row))
            .unwrap_or_else(|| panic!("docs/architecture.md has no row for mode {}", d.mode));
        assert!(
            line.contains(d.caught_by),
            "docs/architecture.md's row for mode {} does not name {}",
            d.mode,
            d.caught_by
        );
    }
}
