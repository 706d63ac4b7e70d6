//! What a finished run amounts to, read back from its run directory ([`crate::rundir`]): the
//! summary against the plan in its manifest ([`summary`]), the results as a Markdown block for
//! the docs with the bench report's ratios ([`results`]), and where its time went ([`times`]).

pub mod results;
pub mod summary;
pub mod times;
