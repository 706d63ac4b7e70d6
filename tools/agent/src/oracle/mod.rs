//! What judges: the verifications over a scenario's evidence ([`checks`]: the ordering
//! invariant, record matching and kcore replay) and the breakpoint observer ([`observer`]),
//! which judges executions seen on the CPU's debug unit against the records, with the lines
//! that carry its executions to the host ([`etm_dataset`]). Built on [`crate::platform`].

pub mod checks;
pub mod observer;

/// The lines that carry the observer's executions to the host, shared with tools/etm.
#[path = "../../../etm/src/dataset.rs"]
pub mod etm_dataset;
