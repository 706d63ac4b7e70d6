// SPDX-License-Identifier: GPL-2.0

//! textpoke: breakpoint-guarded patching of module text with unambiguous
//! `PERF_RECORD_TEXT_POKE` records, on x86-64 and arm64.
//!
//! See kernel/textpoke.h for the C API and docs/protocol.md for the ordering argument.

use kernel::prelude::*;

module! {
    type: TextPoke,
    name: "textpoke",
    author: "textpoke developers",
    description: "Breakpoint-guarded text patching with unambiguous TEXT_POKE records",
    license: "GPL",
}

// The pure files, shared with the host crate textpoke-core.
pub mod atomic;
pub mod insn;
pub mod pending;
pub mod plan;
pub mod record;

/// This arch's guard, codec, text writes, syncs and trap hook.
#[cfg(CONFIG_X86_64)]
#[path = "../arch/x86/mod.rs"]
pub mod arch;
/// This arch's guard, codec, text writes, syncs and trap hook.
#[cfg(CONFIG_ARM64)]
#[path = "../arch/arm64/mod.rs"]
pub mod arch;

// Thin wrappers over C APIs the 6.12 kernel crate lacks. They are shared with the samples,
// which use parts this module does not.
#[path = "../rust/clock.rs"]
mod clock;
#[allow(dead_code, reason = "shared with the samples, which use the rest")]
#[path = "../rust/cpu.rs"]
mod cpu;
#[path = "../rust/debugfs.rs"]
mod debugfs;
#[path = "../rust/kernel_text.rs"]
mod kernel_text;
#[path = "../rust/module_text.rs"]
mod module_text;
#[path = "../rust/printk.rs"]
mod printk;
#[path = "../rust/pt_regs.rs"]
mod pt_regs;
#[path = "../rust/series.rs"]
mod series;

mod api;
mod batch;
mod debug;
mod engine;
mod errno;
mod ktap;
mod poke_log;
mod selftest;
mod sites;
mod stats;
mod status_files;
mod trap;

/// The loaded module. Fields drop in order: the debugfs files, then the trap hook, then the
/// engine, so nothing can reach the engine once it is freed.
struct TextPoke {
    _files: debugfs::Dir,
    _hook: arch::TrapHook,
    _engine: engine::Published,
}

impl kernel::Module for TextPoke {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let series = series::Series::resolve()?;
        let engine = engine::Engine::new(series, module_text::Module::of(module))?;
        let engine = engine::Published::new(KBox::new(engine, GFP_KERNEL)?);
        // The hook goes in after the engine is published and before any guard can exist.
        let hook = arch::TrapHook::register(&engine.engine().series)?;
        if !selftest::run(engine.engine()) {
            pr_err!("self-test failed; refusing to load\n");
            return Err(EIO);
        }
        let files = status_files::create(module)?;
        pr_info!("ready on {} possible CPUs\n", cpu::possible());
        Ok(Self {
            _files: files,
            _hook: hook,
            _engine: engine,
        })
    }
}
