//! What the agent runs in the guest and judges, one group of KTAP cases per file: a scenario
//! with its evidence and judgement ([`scenario`]), the groups of the test suite built on it
//! (the observed scenario, bad input, the outsider, the kernel's own suites and patching,
//! the kernel's other writers, text that appears mid-trace, hotplug, the listener, the negative controls), the unload-stress mode ([`stress`], with the
//! injected faults of [`faults`]), the groups a test boot may run ([`groups`], which the runner
//! shares) and the boot's plan of top-level cases ([`plan`]). They
//! stand on the library (`textpoke_agent`) and on one another, never on the binary's root.

pub mod badinput;
pub mod controls;
pub mod faults;
pub mod groups;
pub mod hotplug;
pub mod kernel_patching;
pub mod kselftest;
pub mod listener;
pub mod new_text;
pub mod observed;
pub mod outsider;
pub mod plan;
pub mod scenario;
pub mod stock_recorder;
pub mod stress;
pub mod writers;
