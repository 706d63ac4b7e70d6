//! The groups of a test boot's document (`textpoke.mode=test`) that a boot may or may not run,
//! and which of its top-level cases each one is.
//!
//! One list for both sides: the agent plans a boot's cases from it and the command line's
//! `textpoke.groups=NAME,NAME,...`, and the runner (tools/runner/src/plan/manifest.rs, which
//! includes this file) decides which boot runs which group, puts the list on each boot's
//! command line and requires each group's cases in its document, so that a group the runner
//! planned cannot vanish from a boot, and every group is planned in some boot of each arch (a
//! runner test holds the plan to it). The cases every test boot runs (loading, listing the
//! sites, unloading, the stock path after it) are no group.

/// A group: its name on the command line, and the top-level cases of the document it adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Group {
    /// Its name in `textpoke.groups=`.
    pub name: &'static str,
    /// The top-level cases of `textpoke_agent` it adds, in document order.
    pub cases: &'static [&'static str],
}

/// Every group, in document order.
pub const GROUPS: &[Group] = &[
    Group {
        name: "scenario_one_poker",
        cases: &["scenario_one_poker"],
    },
    Group {
        name: "scenario_concurrent_pokers",
        cases: &["scenario_concurrent_pokers"],
    },
    Group {
        name: "scenario_observed",
        cases: &["scenario_observed"],
    },
    Group {
        name: "real_perf",
        cases: &[
            "real_perf_records_match_text",
            "real_perf_sees_kernel_ftrace_pokes",
            "real_perf_maps_new_module",
        ],
    },
    Group {
        name: "bad_input",
        cases: &["bad_input"],
    },
    Group {
        name: "outsider",
        cases: &["outsider"],
    },
    Group {
        name: "kernel_suites",
        cases: &["kernel_suites"],
    },
    Group {
        name: "kernel_patching",
        cases: &["kernel_patching"],
    },
    Group {
        name: "other_writers",
        cases: &["other_writers", "new_text"],
    },
    Group {
        name: "cpu_hotplug",
        cases: &["cpu_hotplug"],
    },
    Group {
        name: "listener",
        cases: &["listener"],
    },
    Group {
        name: "stock_recorder",
        cases: &["stock_recorder"],
    },
    Group {
        name: "negative_controls",
        cases: &["negative_controls"],
    },
];

/// The groups of a boot whose command line names none (a boot by hand): all but the kernel's
/// own suites, which take minutes.
pub const DEFAULT_OFF: &[&str] = &["kernel_suites"];

/// The group named `name`.
pub fn group(name: &str) -> Option<&'static Group> {
    GROUPS.iter().find(|g| g.name == name)
}

/// The groups `textpoke.groups=` asks for (`value`; `None` if the command line has no such
/// parameter: [`DEFAULT_OFF`] says which then), in document order. An unknown name, or an
/// empty list, is an error: a boot that asked for something else than it would run must fail.
pub fn asked(value: Option<&str>) -> Result<Vec<&'static Group>, String> {
    let Some(value) = value else {
        return Ok(GROUPS
            .iter()
            .filter(|g| !DEFAULT_OFF.contains(&g.name))
            .collect());
    };
    let names: Vec<&str> = value.split(',').filter(|n| !n.is_empty()).collect();
    if names.is_empty() {
        return Err("textpoke.groups= names no group".to_owned());
    }
    if let Some(unknown) = names.iter().find(|n| group(n).is_none()) {
        return Err(format!(
            "textpoke.groups= names `{unknown}`, which is no group (the groups: {})",
            GROUPS.iter().map(|g| g.name).collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(GROUPS.iter().filter(|g| names.contains(&g.name)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_asked_by_name_in_document_order() {
        let names =
            |v: Option<&str>| -> Vec<&str> { asked(v).unwrap().iter().map(|g| g.name).collect() };
        assert_eq!(names(Some("listener,bad_input")), ["bad_input", "listener"]);
        assert!(!names(None).contains(&"kernel_suites"));
        assert_eq!(names(None).len(), GROUPS.len() - DEFAULT_OFF.len());
        assert!(asked(Some("")).is_err());
        assert!(asked(Some("bad_input,nonsense")).is_err());
    }

    #[test]
    fn no_two_groups_share_a_name_or_a_case() {
        let mut names: Vec<&str> = GROUPS.iter().map(|g| g.name).collect();
        let mut cases: Vec<&str> = GROUPS
            .iter()
            .flat_map(|g| g.cases.iter().copied())
            .collect();
        let (n, c) = (names.len(), cases.len());
        names.sort_unstable();
        names.dedup();
        cases.sort_unstable();
        cases.dedup();
        assert_eq!((names.len(), cases.len()), (n, c));
    }
}
