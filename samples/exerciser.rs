// SPDX-License-Identifier: GPL-2.0

//! textpoke_exerciser: static-key-like and ftrace-like sites patched through textpoke's public
//! API while kthreads on every CPU execute them, with logs for an ordering checker.
//!
//! The sites live in this module's own text (see `exerciser/pool_*.rs`), are registered with
//! textpoke at load and unregistered at unload. The guest agent drives everything through
//! debugfs (`exerciser/uapi.rs`).

use core::sync::atomic::{AtomicU32, AtomicU8};
use kernel::{prelude::*, sync::Arc};

module! {
    type: Exerciser,
    name: "textpoke_exerciser",
    author: "textpoke developers",
    description: "Exercises textpoke with static-key and ftrace style sites under load",
    license: "GPL",
}

#[path = "exerciser/badinput.rs"]
mod badinput;
#[path = "exerciser/control.rs"]
mod control;
#[path = "exerciser/engine_api.rs"]
mod engine_api;
#[path = "exerciser/executor.rs"]
mod executor;
#[path = "exerciser/pool.rs"]
mod pool;
#[cfg(CONFIG_ARM64)]
#[path = "exerciser/pool_arm64.rs"]
mod pool_arm64;
#[cfg(CONFIG_X86_64)]
#[path = "exerciser/pool_x86.rs"]
mod pool_x86;
#[path = "exerciser/scenario.rs"]
mod scenario;
/// What userspace sees (shared with the guest agent).
#[path = "exerciser/uapi.rs"]
pub mod uapi;

#[path = "../rust/clock.rs"]
mod clock;
#[path = "../rust/cpu.rs"]
#[allow(dead_code, reason = "shared with textpoke, which uses the rest")]
mod cpu;
#[path = "../rust/debugfs.rs"]
mod debugfs;
#[path = "../rust/kernel_text.rs"]
mod kernel_text;
#[path = "../rust/kthread.rs"]
mod kthread;
#[path = "../rust/module_text.rs"]
#[allow(dead_code, reason = "shared with textpoke, which uses the rest")]
mod module_text;

/// The sites, and what executors and pokers share about them.
pub(crate) struct Shared {
    /// Every site, indexed as userspace sees them.
    sites: KVVec<pool::Site>,
    /// Committed instruction of each site: 0 `off`, 1 `on`.
    state: KVVec<AtomicU8>,
    /// Per site, a sequence count: odd while a batch changing the site is in flight, bumped
    /// when it starts and when it ends. Executors log the executions it says overlap a batch.
    epoch: KVVec<AtomicU32>,
    /// Functions in the call pool (size of each executor's trampoline-hit array).
    call_functions: usize,
}

struct Exerciser {
    _files: debugfs::Dir,
    shared: Arc<Shared>,
}

extern "C" {
    /// The `pool_sites` parameter (samples/helpers.c): sites registered per pool, 0 for all.
    static textpoke_ex_pool_sites: core::ffi::c_uint;
}

impl kernel::Module for Exerciser {
    fn init(module: &'static ThisModule) -> Result<Self> {
        // SAFETY: A module parameter, written only by the module loader before `init` runs.
        let limit = match unsafe { textpoke_ex_pool_sites } {
            0 => usize::MAX,
            n => n as usize,
        };
        let mut sites = KVVec::new();
        let mut call_functions = 0;
        for p in pool::pools() {
            if p.kind == pool::PoolKind::Call {
                // The trampoline counts calls from every function of the pool, registered or not.
                call_functions = p.count;
            }
            for i in 0..p.count.min(limit) {
                sites.push(p.site(i)?, GFP_KERNEL)?;
            }
        }
        let mut state = KVVec::new();
        let mut epoch = KVVec::new();
        for (i, s) in sites.iter().enumerate() {
            if let Err(e) = engine_api::register_site(module, s.addr, s.len) {
                for done in sites.iter().take(i) {
                    let _ = engine_api::unregister_site(module, done.addr);
                }
                return Err(e);
            }
            state.push(AtomicU8::new(0), GFP_KERNEL)?;
            epoch.push(AtomicU32::new(0), GFP_KERNEL)?;
        }
        let shared = Arc::new(
            Shared {
                sites,
                state,
                epoch,
                call_functions,
            },
            GFP_KERNEL,
        )?;
        let files = install_prologues(&shared)
            .and_then(|()| control::create(control::Control::new(shared.clone(), module)?, module));
        // `Drop` only runs for a module that loaded: unregister here on every later failure.
        let files = files.inspect_err(|_| unregister_all(&shared, module))?;
        pr_info!("{} sites registered\n", shared.sites.len());
        Ok(Self {
            _files: files,
            shared,
        })
    }
}

/// arm64: turns every call function's first `NOP` into ftrace's `MOV X9, X30` prologue, once,
/// before anything executes them (`MOV` may not be changed while other CPUs run it).
fn install_prologues(shared: &Shared) -> Result {
    let mut prologues = shared
        .sites
        .iter()
        .enumerate()
        .filter(|(_, s)| s.kind == pool::PoolKind::Prologue)
        .peekable();
    if prologues.peek().is_none() {
        return Ok(());
    }
    let mut batch = engine_api::Batch::begin()?;
    for (i, s) in prologues {
        batch.add(s.addr, s.on())?;
        if let Some(st) = shared.state.get(i) {
            st.store(1, core::sync::atomic::Ordering::Relaxed);
        }
    }
    batch.commit()
}

fn unregister_all(shared: &Shared, module: &'static ThisModule) {
    for s in shared.sites.iter() {
        // Nothing can own a site now (batches pin this module), so this cannot fail.
        let _ = engine_api::unregister_site(module, s.addr);
    }
}

impl Drop for Exerciser {
    fn drop(&mut self) {
        unregister_all(&self.shared, &THIS_MODULE);
    }
}
