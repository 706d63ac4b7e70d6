//! The oracles: reading a console log (the KTAP parser, [`ktap`]; kernel splats, [`splat`])
//! and, with the way QEMU ended, turning it into a boot's verdict and whether that met the
//! boot's expectation ([`verdict`]); and checking a built module's trap path against what
//! kprobes may probe ([`trappath`]); and checking the table of the kernel's text writers
//! against the kernel tree ([`writers`]). Uses only the platform below it.

pub mod ktap;
pub mod splat;
pub mod trappath;
pub mod verdict;
pub mod writers;
