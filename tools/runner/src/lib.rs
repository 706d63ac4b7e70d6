//! Host side of textpoke's guest tests: boots guest kernels under QEMU, parses the KTAP
//! results they print on the serial console, looks for kernel splats, and turns all that into
//! a verdict per boot and a summary over many.
//!
//! The binary `textpoke-runner` is a thin command-line layer over these modules.

pub mod bench;
pub mod breakdown;
pub mod flips;
pub mod gaps;
pub mod judge;
pub mod kbench;
pub mod ktap;
pub mod qemu;
pub mod report;
pub mod results;
pub mod retarget;
pub mod rundir;
pub mod section;
pub mod splat;
pub mod stats;
pub mod suite;
pub mod summary;
pub mod svg;
pub mod trapcost;
pub mod trappath;

/// Prefix of the lines the runner itself writes into a console log (the command line, QEMU's
/// stderr, how QEMU ended). Analysis skips them, so they can quote anything.
pub const MARKER: &str = "[textpoke-runner] ";
