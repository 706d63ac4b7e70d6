//! Host side of textpoke's guest tests: boots guest kernels under QEMU, parses the KTAP
//! results they print on the serial console, looks for kernel splats, and turns all that into
//! a verdict per boot and a summary over many.
//!
//! The modules are grouped by role, in layers that use those below them:
//!
//! - [`platform`]: driving QEMU (its command line, running a guest, how it ended).
//! - [`judge`]: the oracles (the KTAP parser, kernel splats, verdicts, a module's trap path).
//! - [`rundir`]: the run directory (the one place that names its files) and the per-boot report
//!   boots and host checks leave in it.
//! - [`plan`]: what runs (the boots of each make target, the manifest, running them).
//! - [`bench`](mod@bench): the bench report's sections, statistics and plot, composed per arch.
//! - [`report`]: a finished run read back (the summary against the manifest, the Markdown
//!   results block, where the time went).
//!
//! The binary `textpoke-runner` is a thin command-line layer over these modules.

pub mod bench;
pub mod judge;
pub mod plan;
pub mod platform;
pub mod report;
pub mod rundir;

/// Prefix of the lines the runner itself writes into a console log (the command line, QEMU's
/// stderr, how QEMU ended). Analysis skips them, so they can quote anything.
pub const MARKER: &str = "[textpoke-runner] ";
