//! The bench report of a `make bench` run: each section reads its own lines of every console
//! log (the flips, [`flips`], with the breakdown of textpoke's commits, [`breakdown`], and the
//! executors' trap work, [`gaps`]; the retarget benchmark, [`retarget`]; the kernel's own
//! patching, [`kbench`]; the foreign traps, [`trapcost`]) through what they share
//! ([`section`]), with the statistics of [`stats`] and the plot of [`svg`]; [`report`] composes
//! them into one report per arch, as Markdown, JSON and SVG. Reads boots' reports and the run
//! directory's layout, and the KTAP parser's console-prefix stripping.

pub mod breakdown;
pub mod flips;
pub mod gaps;
pub mod kbench;
pub mod report;
pub mod retarget;
pub mod section;
pub mod stats;
pub mod svg;
pub mod trapcost;
