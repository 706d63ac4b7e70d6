//! Driving the platform: building QEMU's command line, running a guest under it with a hard
//! deadline while its console streams into a log, and how QEMU ended. The bottom layer: it
//! knows nothing of KTAP, verdicts, plans or reports, and everything above may use it.

pub mod qemu;
