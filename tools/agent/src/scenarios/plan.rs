//! The plan of a boot: the top-level cases of its document, fixed from the mode and the command
//! line before anything runs, so that a case cannot vanish from the document. A planned case
//! that never ran is printed as failing, with a reason; a case that ran unplanned is printed
//! too, and fails the plan's own case.

use crate::scenarios::groups::Group;
use textpoke_agent::report::ktap::Case;

/// A top-level case of the `textpoke_agent` suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planned {
    /// textpoke loaded.
    LoadTextpoke,
    /// The exerciser loaded.
    LoadExerciser,
    /// Its sites were read.
    SitesListed,
    /// One of [`crate::scenarios::scenario::SCENARIOS`], by index.
    Scenario(usize),
    /// The scenario under the breakpoint observer (scenarios/observed.rs).
    ScenarioObserved,
    /// Debian's perf around a scenario.
    RealPerfRecordsMatchText,
    /// Debian's perf around the kernel's own ftrace patching.
    RealPerfSeesKernelFtracePokes,
    /// Debian's perf around a module loaded mid-trace (scenarios/new_text.rs).
    RealPerfMapsNewModule,
    /// scenarios/badinput.rs.
    BadInput,
    /// scenarios/outsider.rs.
    Outsider,
    /// scenarios/kselftest.rs, in a boot that runs the kernel's own suites.
    KernelSuites,
    /// scenarios/hotplug.rs.
    CpuHotplug,
    /// scenarios/listener.rs.
    Listener,
    /// scenarios/kernel_patching.rs.
    KernelPatching,
    /// scenarios/writers.rs.
    OtherWriters,
    /// scenarios/new_text.rs.
    NewText,
    /// stock_recorder::cases.
    StockRecorder,
    /// scenarios/controls.rs, in a boot that runs them.
    NegativeControls,
    /// kernel_patching::unload_refused_mid_update.
    UnloadRefusedMidUpdate,
    /// textpoke and the exerciser unloaded.
    Unload,
    /// kernel_patching::stock_cases.
    StockAfterUnload,
    /// `textpoke.mode=controls`: what the controls need, when it fails.
    ControlsSetup,
    /// `textpoke.mode=run`: the demo's scenario.
    DemoScenario,
}

impl Planned {
    /// The case's name in the document.
    pub fn name(self) -> &'static str {
        match self {
            Self::LoadTextpoke => "load_textpoke",
            Self::LoadExerciser => "load_exerciser",
            Self::SitesListed => "sites_listed",
            Self::Scenario(i) => crate::scenarios::scenario::SCENARIOS
                .get(i)
                .map_or("scenario_unknown", |s| s.0),
            Self::ScenarioObserved => "scenario_observed",
            Self::RealPerfRecordsMatchText => "real_perf_records_match_text",
            Self::RealPerfSeesKernelFtracePokes => "real_perf_sees_kernel_ftrace_pokes",
            Self::RealPerfMapsNewModule => "real_perf_maps_new_module",
            Self::BadInput => "bad_input",
            Self::Outsider => "outsider",
            Self::KernelSuites => "kernel_suites",
            Self::CpuHotplug => "cpu_hotplug",
            Self::Listener => "listener",
            Self::KernelPatching => "kernel_patching",
            Self::OtherWriters => "other_writers",
            Self::NewText => "new_text",
            Self::StockRecorder => "stock_recorder",
            Self::NegativeControls => "negative_controls",
            Self::UnloadRefusedMidUpdate => "unload_refused_mid_update",
            Self::Unload => "unload",
            Self::StockAfterUnload => "stock_after_unload",
            Self::ControlsSetup => "controls_setup",
            Self::DemoScenario => "demo_scenario",
        }
    }
}

impl Planned {
    /// The cases a group may add, each once, in document order.
    const IN_GROUPS: [Self; 16] = [
        Self::Scenario(0),
        Self::Scenario(1),
        Self::ScenarioObserved,
        Self::RealPerfRecordsMatchText,
        Self::RealPerfSeesKernelFtracePokes,
        Self::RealPerfMapsNewModule,
        Self::BadInput,
        Self::Outsider,
        Self::KernelSuites,
        Self::KernelPatching,
        Self::OtherWriters,
        Self::NewText,
        Self::CpuHotplug,
        Self::Listener,
        Self::StockRecorder,
        Self::NegativeControls,
    ];
}

/// The cases a boot plans, in document order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The planned cases.
    pub cases: Vec<Planned>,
    /// Cases a planned one may stand in for when it fails early (a setup case that failed
    /// before the case it guards could be named); they are not "unplanned".
    pub optional: Vec<&'static str>,
}

impl Plan {
    /// `textpoke.mode=test` with `groups` (see [`crate::scenarios::groups`]): the setup cases,
    /// each group's cases in document order, then the unloading and the stock path after it.
    /// [`Planned::IN_GROUPS`] and the group list must agree (a unit test holds them to it): a
    /// group's case that is none of those would be left out of the plan.
    pub fn test(groups: &[&Group]) -> Self {
        let mut cases = vec![
            Planned::LoadTextpoke,
            Planned::LoadExerciser,
            Planned::SitesListed,
        ];
        cases.extend(
            Planned::IN_GROUPS
                .into_iter()
                .filter(|p| groups.iter().any(|g| g.cases.contains(&p.name()))),
        );
        cases.extend([
            Planned::UnloadRefusedMidUpdate,
            Planned::Unload,
            Planned::StockAfterUnload,
        ]);
        Self {
            cases,
            optional: Vec::new(),
        }
    }

    /// `textpoke.mode=controls`.
    pub fn controls_only() -> Self {
        Self {
            cases: vec![Planned::NegativeControls],
            optional: vec![Planned::ControlsSetup.name()],
        }
    }

    /// `textpoke.mode=run`.
    pub fn demo() -> Self {
        Self {
            cases: vec![Planned::DemoScenario],
            optional: vec!["demo_setup"],
        }
    }

    /// The document's cases: every planned case in the plan's order, as it ran or failing with
    /// the reason it never did (the first case before it that failed, if any), then the cases
    /// that ran unplanned, and if there were any, or a planned case ran twice, a failing
    /// `plan_kept`.
    pub fn reconcile(&self, mut ran: Vec<Case>) -> Vec<Case> {
        let mut out = Vec::new();
        // A setup case that failed explains whatever never ran.
        let mut first_failed: Option<String> = ran
            .iter()
            .find(|c| self.optional.contains(&c.name.as_str()) && !c.passed())
            .map(|c| c.name.clone());
        let mut twice = Vec::new();
        for p in &self.cases {
            let name = p.name();
            let mut mine: Vec<Case> = Vec::new();
            let mut i = 0;
            while i < ran.len() {
                if ran.get(i).is_some_and(|c| c.name == name) {
                    mine.push(ran.remove(i));
                } else {
                    i += 1;
                }
            }
            if mine.len() > 1 {
                twice.push(name);
            }
            if mine.is_empty() {
                let why = match &first_failed {
                    Some(f) => format!("planned for this boot, never ran: {f} failed before it"),
                    None => "planned for this boot, never ran".to_owned(),
                };
                out.push(Case::fail(name, why));
            }
            for c in mine {
                if !c.passed() && first_failed.is_none() {
                    first_failed = Some(c.name.clone());
                }
                out.push(c);
            }
        }
        let unplanned: Vec<String> = ran
            .iter()
            .filter(|c| !self.optional.contains(&c.name.as_str()))
            .map(|c| c.name.clone())
            .collect();
        out.extend(ran);
        if !unplanned.is_empty() || !twice.is_empty() {
            out.push(Case::fail(
                "plan_kept",
                format!("cases that ran unplanned: {unplanned:?}; planned cases that ran twice: {twice:?}"),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(cases: &[Case]) -> Vec<&str> {
        cases.iter().map(|c| c.name.as_str()).collect()
    }

    #[test]
    fn the_test_plan_is_the_groups_asked_for_between_setup_and_unload() {
        use crate::scenarios::groups::{self, GROUPS};
        let all: Vec<&groups::Group> = GROUPS.iter().collect();
        let full = Plan::test(&all);
        // Every case of every group is planned, once, and nothing else between the setup and
        // the unloading: the group list and the agent's cases agree.
        let middle: Vec<&str> = full.cases[3..full.cases.len() - 3]
            .iter()
            .map(|p| p.name())
            .collect();
        let listed: Vec<&str> = GROUPS
            .iter()
            .flat_map(|g| g.cases.iter().copied())
            .collect();
        assert_eq!(middle, listed);
        assert_eq!(full.cases.first().map(|c| c.name()), Some("load_textpoke"));
        assert_eq!(
            full.cases.last().map(|c| c.name()),
            Some("stock_after_unload")
        );
        // One group: its cases alone between the setup and the unloading.
        let real_perf = groups::asked(Some("real_perf")).unwrap();
        let one = Plan::test(&real_perf);
        assert_eq!(one.cases.len(), 6 + 3);
        assert!(one.cases.contains(&Planned::RealPerfSeesKernelFtracePokes));
        for (i, s) in crate::scenarios::scenario::SCENARIOS.iter().enumerate() {
            assert_eq!(Planned::Scenario(i).name(), s.0);
            assert!(groups::group(s.0).is_some(), "{} is no group", s.0);
        }
    }

    #[test]
    fn a_planned_case_that_never_ran_fails_with_a_reason() {
        let plan = Plan {
            cases: vec![Planned::LoadTextpoke, Planned::SitesListed, Planned::Unload],
            optional: Vec::new(),
        };
        let doc = plan.reconcile(vec![
            Case::pass("load_textpoke"),
            Case::fail("sites_listed", "no sites"),
        ]);
        assert_eq!(names(&doc), ["load_textpoke", "sites_listed", "unload"]);
        let unload = doc.last().unwrap();
        assert!(!unload.passed());
        assert_eq!(
            crate::scenarios::kernel_patching::diagnostic(unload),
            "planned for this boot, never ran: sites_listed failed before it"
        );
        // Every case ran and passed: the document is the cases, in the plan's order.
        let doc = plan.reconcile(vec![
            Case::pass("unload"),
            Case::pass("load_textpoke"),
            Case::pass("sites_listed"),
        ]);
        assert_eq!(names(&doc), ["load_textpoke", "sites_listed", "unload"]);
        assert!(doc.iter().all(Case::passed));
        // Nothing ran: every planned case fails.
        let doc = plan.reconcile(Vec::new());
        assert_eq!(doc.len(), 3);
        assert!(doc.iter().all(|c| !c.passed()));
    }

    #[test]
    fn an_unplanned_or_repeated_case_fails_the_plan() {
        let plan = Plan {
            cases: vec![Planned::Unload],
            optional: vec!["setup"],
        };
        let doc = plan.reconcile(vec![Case::pass("unload"), Case::pass("surprise")]);
        assert_eq!(names(&doc), ["unload", "surprise", "plan_kept"]);
        assert!(!doc[2].passed());
        let doc = plan.reconcile(vec![Case::pass("unload"), Case::pass("unload")]);
        assert_eq!(names(&doc), ["unload", "unload", "plan_kept"]);
        // An optional setup case is no surprise, and says why the rest never ran.
        let doc = plan.reconcile(vec![Case::fail("setup", "no module")]);
        assert_eq!(names(&doc), ["unload", "setup"]);
        assert_eq!(
            crate::scenarios::kernel_patching::diagnostic(&doc[0]),
            "planned for this boot, never ran: setup failed before it"
        );
    }
}
