// SPDX-License-Identifier: GPL-2.0

//! `/sys/kernel/debug/textpoke/`: the counters, and the engine's log of emitted records.
//!
//! - `stats`: `key value` lines (batches, sites, syncs, records, traps per kind and per CPU).
//! - `records`: every `PERF_RECORD_TEXT_POKE` the engine emitted, in wire format (see
//!   `poke_log.rs`); writing `clear` empties it.

use crate::debugfs::{self, Dir, Text};
use crate::engine;
use core::fmt::Write;
use kernel::{c_str, prelude::*, sync::Arc, ThisModule};

struct Stats;

impl debugfs::File for Stats {
    fn snapshot(&self) -> Result<KVVec<u8>> {
        engine::with(|engine| {
            let mut text = Text::new();
            engine.stats.write(&mut text).map_err(|_| ENOMEM)?;
            writeln!(text, "records_dropped {}", engine.log.dropped()).map_err(|_| ENOMEM)?;
            writeln!(text, "in_flight {}", engine.table.in_flight()).map_err(|_| ENOMEM)?;
            writeln!(text, "sites_registered {}", engine.sites.lock().count())
                .map_err(|_| ENOMEM)?;
            Ok(text.0)
        })
        .ok_or(ENODEV)?
    }
}

struct Records;

impl debugfs::File for Records {
    fn snapshot(&self) -> Result<KVVec<u8>> {
        engine::with(|engine| engine.log.snapshot()).ok_or(ENODEV)?
    }

    fn command(&self, data: &[u8]) -> Result {
        match debugfs::trim(data) {
            b"clear" => engine::with(|engine| engine.log.clear()).ok_or(ENODEV),
            _ => Err(EINVAL),
        }
    }
}

/// Creates the directory and its files.
pub(crate) fn create(module: &'static ThisModule) -> Result<Dir> {
    let mut dir = Dir::new(c_str!("textpoke"), module)?;
    dir.add(c_str!("stats"), 0o400, Arc::new(Stats, GFP_KERNEL)?)?;
    dir.add(c_str!("records"), 0o600, Arc::new(Records, GFP_KERNEL)?)?;
    Ok(dir)
}
