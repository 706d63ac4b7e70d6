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
pub mod defects;
pub mod insn;
pub mod pending;
pub mod plan;
pub mod record;
pub mod refusal;

// The one switch: which architecture implements `arch::Arch`. Public like the pure files, whose
// codec it holds.
#[cfg(CONFIG_X86_64)]
#[path = "../arch/x86/mod.rs"]
pub mod arch_impl;
#[cfg(CONFIG_ARM64)]
#[path = "../arch/arm64/mod.rs"]
pub mod arch_impl;

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
#[path = "../rust/module_notifier.rs"]
mod module_notifier;
#[path = "../rust/module_text.rs"]
mod module_text;
#[path = "../rust/patch_series.rs"]
mod patch_series;
#[path = "../rust/pt_regs.rs"]
mod pt_regs;

mod api;
mod arch;
mod batch;
mod current_arch;
mod debug;
mod engine;
mod entry;
mod errno;
mod kernel_queue;
mod new_text;
mod patcher;
mod poke_log;
mod replaced;
mod selftest;
mod sites;
mod stats;
mod status_files;
mod trap;

/// The loaded module. Fields drop in order: the kernel patcher (which applies what it holds),
/// the debugfs files, the trap hook, the module notifier, then the engine, so nothing can reach
/// the engine once it is freed.
struct TextPoke {
    _patcher: Option<patcher::Registration>,
    _files: debugfs::Dir,
    _hook: patch_series::TrapHook,
    _modules: module_notifier::ModuleNotifier,
    _engine: engine::Published,
}

/// A module changed state: describe its text to tracers (`new_text.rs`) and, when it is going
/// away, forget the sites it left registered, so that none outlives it.
fn module_changed(module: module_text::Module, state: module_notifier::ModuleState) {
    engine::with(|engine| {
        new_text::module_changed(engine, module, state);
        if state != module_notifier::ModuleState::Going {
            return;
        }
        let forgotten = engine.sites.lock().forget_module(module);
        if forgotten > 0 {
            pr_warn!("a departing module left {forgotten} sites registered; they are forgotten\n");
        }
    });
}

impl kernel::Module for TextPoke {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let exports = engine::Exports::resolve()?;
        let engine = engine::Engine::new(exports, module_text::Module::of(module))?;
        let engine = engine::Published::new(KBox::pin_init(engine, GFP_KERNEL)?);
        let modules =
            module_notifier::ModuleNotifier::register(module_changed, new_text::PRIORITY)?;
        // The hook goes in after the engine is published and before any guard can exist.
        let hook = engine
            .engine()
            .exports
            .generic
            .register_trap(trap::textpoke_trap)?;
        if !selftest::run(engine.engine(), &hook) {
            pr_err!("self-test failed; refusing to load\n");
            return Err(EIO);
        }
        let files = status_files::create(module)?;
        // Last: from here on the kernel's own jump label and ftrace updates come through the
        // engine, which must be complete for them.
        let patcher = if patcher::wanted() {
            Some(patcher::Registration::new(
                &engine.engine().exports.generic,
                module,
            )?)
        } else {
            pr_info!("not the kernel's patcher (kernel_patcher=0)\n");
            None
        };
        pr_info!("ready on {} possible CPUs\n", cpu::possible());
        Ok(Self {
            _patcher: patcher,
            _files: files,
            _hook: hook,
            _modules: modules,
            _engine: engine,
        })
    }
}
