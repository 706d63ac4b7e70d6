//! What runs: the boots and host checks each make target plans, written as a manifest before
//! anything is built ([`manifest`]), and running those boots a few at a time, each judged into
//! its report, with the kunit.py cross-check of their counts ([`run`]). Uses the judge and the
//! platform below it, and the per-boot report and run directory layout it writes.

pub mod manifest;
pub mod run;
