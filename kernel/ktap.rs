// SPDX-License-Identifier: GPL-2.0

//! A KTAP (Documentation/dev-tools/ktap.rst) document printed to the kernel log.

use crate::printk;

/// One top-level KTAP document with a plan known up front.
pub(crate) struct Ktap {
    planned: usize,
    reported: usize,
    failed: usize,
}

impl Ktap {
    /// Prints the header of a document named `name` with `planned` results.
    pub(crate) fn start(name: &str, planned: usize) -> Self {
        printk::line(format_args!("KTAP version 1"));
        printk::line(format_args!("1..{planned}"));
        printk::line(format_args!("# {name}"));
        Self {
            planned,
            reported: 0,
            failed: 0,
        }
    }

    /// Reports test `name`: `Ok` passes, `Err(why)` fails with a diagnostic.
    pub(crate) fn result(&mut self, name: &str, outcome: Result<(), &str>) {
        self.reported = self.reported.saturating_add(1);
        match outcome {
            Ok(()) => printk::line(format_args!("ok {} {name}", self.reported)),
            Err(why) => {
                self.failed = self.failed.saturating_add(1);
                printk::line(format_args!("# {name}: {why}"));
                printk::line(format_args!("not ok {} {name}", self.reported));
            }
        }
    }

    /// Ends the document; `true` if every planned test was reported and passed.
    pub(crate) fn finish(self) -> bool {
        printk::line(format_args!(
            "# totals: pass:{} fail:{} skip:0",
            self.reported.saturating_sub(self.failed),
            self.failed
        ));
        self.failed == 0 && self.reported == self.planned
    }
}
