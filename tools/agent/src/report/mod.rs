//! What is told: the KTAP writer ([`ktap`]) and the boot's one KTAP document ([`document`]):
//! textpoke's self-test suite, read from the log lines its load printed, then the mode's own.

pub mod document;
pub mod ktap;
