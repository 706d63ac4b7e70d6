// SPDX-License-Identifier: GPL-2.0

//! The debugfs interface (`/sys/kernel/debug/textpoke_exerciser/`, see [`super::uapi`]).
//!
//! Userspace names sites only by index into `sites`: there is no way to make the exerciser,
//! or the engine through it, write anywhere else.

use super::badinput;
use super::engine_api::Batch;
use super::executor::{Executors, KINDS};
use super::scenario::{self, Outcome, Spec};
use super::Shared;
use crate::debugfs::{self, Dir, Text};
use crate::module_text::{Module, ModuleRef};
use core::fmt::Write;
use core::sync::atomic::Ordering;
use kernel::{c_str, new_mutex, prelude::*, sync::Arc, sync::Mutex};

/// State changed by commands, one command at a time.
struct Commands {
    last: Option<Outcome>,
    held: Option<Batch>,
    /// Executors started by `executors start`, and the reference pinning this module meanwhile.
    standalone: Option<(Executors, ModuleRef)>,
}

/// The exerciser as the control files see it.
#[pin_data]
pub(crate) struct Control {
    shared: Arc<Shared>,
    module: &'static ThisModule,
    #[pin]
    commands: Mutex<Commands>,
}

fn parse_index(word: &[u8]) -> Result<usize> {
    core::str::from_utf8(word)
        .ok()
        .and_then(|w| w.trim().parse().ok())
        .ok_or(EINVAL)
}

impl Control {
    pub(crate) fn new(shared: Arc<Shared>, module: &'static ThisModule) -> Result<Arc<Self>> {
        let commands = Commands {
            last: None,
            held: None,
            standalone: None,
        };
        Arc::pin_init(
            try_pin_init!(Self {
                shared,
                module,
                commands <- new_mutex!(commands),
            }),
            GFP_KERNEL,
        )
    }

    fn command(&self, line: &[u8]) -> Result {
        let line = debugfs::trim(line);
        let (verb, rest) = match line.iter().position(|b| *b == b' ') {
            Some(i) => (
                line.get(..i).unwrap_or(&[]),
                debugfs::trim(line.get(i.saturating_add(1)..).unwrap_or(&[])),
            ),
            None => (line, &[][..]),
        };
        let mut c = self.commands.lock();
        match verb {
            b"run" => {
                let spec = Spec::parse(rest)?;
                let outcome = scenario::run(&self.shared, spec)?;
                let errno = outcome.errno;
                c.last = Some(outcome);
                if errno != 0 {
                    return Err(Error::from_errno(-errno));
                }
                Ok(())
            }
            b"bad" => badinput::run(&self.shared, self.module, rest),
            b"hold" => {
                let site = self.shared.sites.get(parse_index(rest)?).ok_or(EINVAL)?;
                let mut batch = Batch::begin()?;
                batch.add(site.addr, site.on())?;
                c.held = Some(batch);
                pr_info!("holding an uncommitted batch on site {:#x}: this module and textpoke stay pinned until release\n", site.addr);
                Ok(())
            }
            b"release" => c.held.take().map(drop).ok_or(EINVAL),
            b"flip" => {
                let mut indices = KVec::new();
                for word in rest.split(|b| *b == b' ').filter(|w| !w.is_empty()) {
                    indices.push(parse_index(word)?, GFP_KERNEL)?;
                }
                if indices.is_empty() {
                    return Err(EINVAL);
                }
                scenario::flip_here(&self.shared, &indices)
            }
            b"executors" if rest == b"start" => {
                if c.standalone.is_some() {
                    return Err(EBUSY);
                }
                let pin = Module::of(self.module).get()?;
                let mut active = KVec::new();
                for (i, _) in self.shared.sites.iter().enumerate().take(64) {
                    active.push(i, GFP_KERNEL)?;
                }
                let ex = Executors::start(&self.shared, Arc::new(active, GFP_KERNEL)?)?;
                c.standalone = Some((ex, pin));
                pr_info!("executors running: this module is pinned until they stop\n");
                Ok(())
            }
            b"executors" if rest == b"stop" => {
                let (ex, _pin) = c.standalone.take().ok_or(EINVAL)?;
                drop(ex.stop());
                Ok(())
            }
            _ => Err(EINVAL),
        }
    }
}

struct ControlFile(Arc<Control>);

impl debugfs::File for ControlFile {
    fn command(&self, data: &[u8]) -> Result {
        self.0.command(data)
    }
}

struct SitesFile(Arc<Control>);

impl debugfs::File for SitesFile {
    fn snapshot(&self) -> Result<KVVec<u8>> {
        let mut t = Text::new();
        for (i, s) in self.0.shared.sites.iter().enumerate() {
            write!(t, "{i} {} {:#x} {} ", s.kind.name(), s.addr, s.len).map_err(|_| ENOMEM)?;
            for b in s.off() {
                write!(t, "{b:02x}").map_err(|_| ENOMEM)?;
            }
            t.write_char(' ').map_err(|_| ENOMEM)?;
            for b in s.on() {
                write!(t, "{b:02x}").map_err(|_| ENOMEM)?;
            }
            t.write_char('\n').map_err(|_| ENOMEM)?;
        }
        Ok(t.0)
    }
}

struct ResultFile(Arc<Control>);

impl debugfs::File for ResultFile {
    fn snapshot(&self) -> Result<KVVec<u8>> {
        let c = self.0.commands.lock();
        let mut t = Text::new();
        let Some(o) = c.last.as_ref() else {
            return Ok(t.0);
        };
        let s = o.spec;
        let committed = o.batches.iter().filter(|b| b.errno == 0).count();
        let sum = |f: fn(&scenario::BatchRecord) -> u64| o.batches.iter().map(f).sum::<u64>();
        (|| -> core::fmt::Result {
            writeln!(
                t,
                "spec keys={} sites={} ftrace={} flips={} pokers={}",
                s.keys, s.sites, s.ftrace, s.flips, s.pokers
            )?;
            writeln!(t, "errno {}", o.errno)?;
            writeln!(t, "nsecs {}", o.nsecs)?;
            writeln!(t, "batches {}", o.batches.len())?;
            writeln!(t, "batches_committed {committed}")?;
            writeln!(t, "sites_changed {}", sum(|b| u64::from(b.stats.sites)))?;
            writeln!(t, "syncs {}", sum(|b| u64::from(b.stats.syncs)))?;
            writeln!(t, "records {}", sum(|b| u64::from(b.stats.records)))?;
            writeln!(t, "cpus {}", o.executors.len())?;
            for (k, kind) in KINDS.iter().enumerate() {
                let get = |f: fn(&super::executor::KindCounters) -> u64| {
                    o.executors
                        .iter()
                        .filter_map(|e| e.counters.get(k))
                        .map(f)
                        .sum::<u64>()
                };
                let name = kind.name();
                writeln!(
                    t,
                    "executions.{name} {}",
                    get(|c| c.executions.load(Ordering::Relaxed))
                )?;
                writeln!(
                    t,
                    "windowed.{name} {}",
                    get(|c| c.windowed.load(Ordering::Relaxed))
                )?;
                writeln!(
                    t,
                    "trapped.{name} {}",
                    get(|c| c.trapped.load(Ordering::Relaxed))
                )?;
                writeln!(
                    t,
                    "trapped_counted.{name} {}",
                    get(|c| c.trapped_counted.load(Ordering::Relaxed))
                )?;
                writeln!(
                    t,
                    "seen_only.{name} {}",
                    get(|c| c.seen_only.load(Ordering::Relaxed))
                )?;
                writeln!(
                    t,
                    "counted_only.{name} {}",
                    get(|c| c.counted_only.load(Ordering::Relaxed))
                )?;
                writeln!(t, "on.{name} {}", get(|c| c.on.load(Ordering::Relaxed)))?;
            }
            let logged: usize = o.executors.iter().map(|e| e.log.lock().len()).sum();
            let dropped: u64 = o
                .executors
                .iter()
                .map(|e| e.dropped.load(Ordering::Relaxed))
                .sum();
            let stable: u64 = o
                .executors
                .iter()
                .map(|e| e.stable_violations.load(Ordering::Relaxed))
                .sum();
            let calls: u64 = o
                .executors
                .iter()
                .map(|e| e.hits.lock().last().copied().unwrap_or(0))
                .sum();
            writeln!(t, "logged {logged}")?;
            writeln!(t, "log_dropped {dropped}")?;
            let late: u64 = o
                .executors
                .iter()
                .map(|e| e.late_traps.load(Ordering::Relaxed))
                .sum();
            let per_executor = |f: fn(&super::executor::Executor) -> u64| {
                o.executors.iter().map(|e| f(e)).sum::<u64>()
            };
            writeln!(t, "stable_violations {stable}")?;
            writeln!(t, "late_traps {late}")?;
            writeln!(
                t,
                "late_traps_counted {}",
                per_executor(|e| e.late_traps_counted.load(Ordering::Relaxed))
            )?;
            writeln!(
                t,
                "mark_misplaced {}",
                per_executor(|e| e.mark_misplaced.load(Ordering::Relaxed))
            )?;
            writeln!(t, "trampoline_calls {calls}")
        })()
        .map_err(|_| ENOMEM)?;
        Ok(t.0)
    }
}

struct BatchesFile(Arc<Control>);

impl debugfs::File for BatchesFile {
    fn snapshot(&self) -> Result<KVVec<u8>> {
        let c = self.0.commands.lock();
        let mut t = Text::new();
        for b in c.last.iter().flat_map(|o| o.batches.iter()) {
            let group = if b.group == usize::MAX {
                -1
            } else {
                b.group as i64
            };
            write!(
                t,
                "{} {} {} {} {} {} {} {} {} {}",
                b.poker,
                group,
                b.stats.sites,
                b.stats.nsecs,
                b.stats.syncs,
                b.stats.writes,
                b.stats.records,
                b.start,
                b.end,
                b.errno
            )
            .map_err(|_| ENOMEM)?;
            for (site, on) in b.changes.iter() {
                write!(t, " {site}:{}", u8::from(*on)).map_err(|_| ENOMEM)?;
            }
            t.write_char('\n').map_err(|_| ENOMEM)?;
        }
        Ok(t.0)
    }
}

struct ExecutionsFile(Arc<Control>);

impl debugfs::File for ExecutionsFile {
    fn snapshot(&self) -> Result<KVVec<u8>> {
        let c = self.0.commands.lock();
        let mut out = KVVec::new();
        for e in c.last.iter().flat_map(|o| o.executors.iter()) {
            for r in e.log.lock().iter() {
                // SAFETY: `ExecRecord` is `repr(C)` plain old data without padding, so its bytes
                // are fully initialized.
                let bytes = unsafe {
                    core::slice::from_raw_parts(
                        (r as *const super::uapi::ExecRecord).cast::<u8>(),
                        super::uapi::EXEC_RECORD_SIZE,
                    )
                };
                out.extend_from_slice(bytes, GFP_KERNEL)?;
            }
        }
        Ok(out)
    }
}

/// Creates `/sys/kernel/debug/textpoke_exerciser/` and its files.
pub(crate) fn create(control: Arc<Control>, module: &'static ThisModule) -> Result<Dir> {
    let mut dir = Dir::new(c_str!("textpoke_exerciser"), module)?;
    dir.add(
        c_str!("control"),
        0o200,
        Arc::new(ControlFile(control.clone()), GFP_KERNEL)?,
    )?;
    dir.add(
        c_str!("sites"),
        0o400,
        Arc::new(SitesFile(control.clone()), GFP_KERNEL)?,
    )?;
    dir.add(
        c_str!("result"),
        0o400,
        Arc::new(ResultFile(control.clone()), GFP_KERNEL)?,
    )?;
    dir.add(
        c_str!("batches"),
        0o400,
        Arc::new(BatchesFile(control.clone()), GFP_KERNEL)?,
    )?;
    dir.add(
        c_str!("executions"),
        0o400,
        Arc::new(ExecutionsFile(control), GFP_KERNEL)?,
    )?;
    Ok(dir)
}
