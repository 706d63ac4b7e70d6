//! The run directory, below everything that writes or reads it: its layout, the one place that
//! names its files ([`layout`]), and the per-boot JSON report that boots and host checks leave
//! in it ([`boot_report`]), and the scripts' timed stages ([`stages`]). The plan, the boots and
//! the scripts write into it; the bench report and the reports read from it.

pub mod boot_report;
pub mod layout;
pub mod stages;
