// SPDX-License-Identifier: GPL-2.0

//! Text that appears while a tracer listens: modules' text, described to tracers.
//!
//! A decoder copies the kernel's text when it starts (`perf record --kcore`) and follows the
//! records of every change made to it since. A module loaded later is in no copy, and once it
//! unloads another module's text may reuse its addresses. perf's mechanism for text it has no
//! copy of, which x86 uses for its ftrace trampolines and kprobe slots, covers this: a
//! `PERF_RECORD_KSYMBOL` of type `OOL` makes a map of the range
//! (`machine__process_ksymbol_register()`, tools/perf/util/machine.c), text-poke records with no
//! old bytes fill it, and a `KSYMBOL` unregister removes it.
//!
//! While textpoke is loaded and a text-poke listener exists, every module's executable text is
//! described so, from a module notifier that runs after every other ([`PRIORITY`]):
//! - at `MODULE_STATE_COMING`: a register of its core text and of its init text, each followed
//!   by its bytes in records of at most [`CHUNK`] bytes, from one CPU (preemption off: a
//!   decoder orders records by the emitting CPU's clock). By then the loader has made the text
//!   read-only and executable and made its own changes (alternatives, relocations, ftrace's
//!   call sites and `ftrace_module_enable()`), and every other notifier its own (jump labels,
//!   static calls). Nothing of the module has run: its init function, the first of its code to
//!   run, is called after the chain. So the bytes are the text as it first runs; a change made
//!   before is in them, and every change made later has its own record, after these: each writer
//!   records under `text_mutex` (textpoke's batches, x86's `text_poke_bp()`, arm64's kprobes
//!   with patch 0013), which this holds throughout.
//! - at `MODULE_STATE_LIVE`: an unregister of its init text, which the loader frees next;
//! - at `MODULE_STATE_GOING` (after its exit function, or after its init or loading failed):
//!   an unregister of its core text, and of its init text if it never went live, before the
//!   loader frees either.
//!
//! Whether anyone listens is decided under `text_mutex`. A listener that arrives later starts
//! to receive under `text_mutex`, after this (patch 0011), and copies the module with the rest
//! of the text, since the module is listed in `/proc/modules` from before `COMING` to after
//! `GOING`: either its copy or its records hold the module, never neither.
//!
//! A change made to the module's text before its register (a jump label a notifier of higher
//! priority enabled) has its own record, which perf drops for want of a map ("Failed to find
//! kernel text poke address map"); its result is in the bytes that follow the register.

use crate::cpu::NoPreempt;
use crate::engine::Engine;
use crate::module_notifier::ModuleState;
use crate::module_text::Module;
use crate::patch_series::HoldsText;
use core::sync::atomic::Ordering;
use kernel::prelude::*;

/// The notifier's priority: the lowest, so that at `COMING` every other notifier has made its
/// changes to the module's text, and at `GOING` every other has stopped changing it.
pub(crate) const PRIORITY: i32 = i32::MIN;

/// The most new bytes one record carries: a page. A record must fit a listener's ring buffer
/// whole or is lost, and perf's side-band buffers can be a few pages; the record format itself
/// would allow nearly 64 KiB (its size is a `u16`).
pub(crate) const CHUNK: usize = 4096;

/// Room for a [`Part::name`]: `[`, a module's name (`MODULE_NAME_LEN` is 56 with its NUL),
/// `].init` and a NUL.
const NAME_LEN: usize = 64;

/// Which of a module's texts.
#[derive(Clone, Copy)]
enum Part {
    Core,
    Init,
}

impl Part {
    fn range(self, module: &Module) -> (u64, u64) {
        match self {
            Self::Core => module.text(),
            Self::Init => module.init_text(),
        }
    }

    /// The symbol perf gets, written into `buf`: the module's name in brackets, as perf names
    /// a module's map, and `.init` after it for the init text.
    fn name<'a>(self, module: &Module, buf: &'a mut [u8; NAME_LEN]) -> &'a CStr {
        let suffix: &[u8] = match self {
            Self::Core => b"]",
            Self::Init => b"].init",
        };
        let name = module.name().as_bytes();
        // A module name has at most 55 bytes, so nothing is cut; the bound only keeps the
        // copy inside `buf` whatever it holds.
        let name = &name[..name.len().min(NAME_LEN - 2 - suffix.len())];
        let mut n = 0;
        for part in [b"[".as_slice(), name, suffix] {
            buf[n..n + part.len()].copy_from_slice(part);
            n += part.len();
        }
        buf[n] = 0;
        // SAFETY: `buf[..=n]` ends with the NUL just written and holds no other: the module's
        // name is a C string's bytes without its NUL, and the brackets and suffix hold none.
        unsafe { CStr::from_bytes_with_nul_unchecked(&buf[..=n]) }
    }
}

/// Called for every module state change while textpoke is loaded (the module notifier).
pub(crate) fn module_changed(engine: &Engine, module: Module, state: ModuleState) {
    let generic = &engine.exports.generic;
    let text = generic.lock_text();
    if !generic.listening(text.holds()) {
        return;
    }
    if crate::debug::defect() == crate::debug::Defect::NewTextUndescribed {
        if state == ModuleState::Coming {
            pr_warn!(
                "DELIBERATELY BROKEN: {} not described to tracers (debug_protocol)\n",
                module.name()
            );
        }
        return;
    }
    match state {
        ModuleState::Coming => {
            for part in [Part::Core, Part::Init] {
                describe(engine, text.holds(), &module, part);
            }
        }
        ModuleState::Live => unregister(engine, text.holds(), &module, Part::Init),
        ModuleState::Going => {
            for part in [Part::Core, Part::Init] {
                unregister(engine, text.holds(), &module, part);
            }
        }
    }
}

/// A register of `part` of `module` and its bytes.
fn describe(engine: &Engine, held: &HoldsText, module: &Module, part: Part) {
    let (start, end) = part.range(module);
    let Some(len) = range_len(start, end) else {
        return;
    };
    let mut buf = [0; NAME_LEN];
    let generic = &engine.exports.generic;
    // One CPU for the register and its bytes: perf stamps each record with that CPU's clock,
    // and a decoder orders them by it, so none of the bytes may seem to come before the map.
    let _pinned = NoPreempt::new();
    generic.ksymbol(held, start, len, false, part.name(module, &mut buf));
    let mut addr = start;
    let mut records = 0u64;
    while addr < end {
        let n = CHUNK.min((end - addr) as usize);
        // SAFETY: `[addr, addr + n)` lies in the module's text, which is mapped, readable, and
        // not freed while its notifiers run; `text_mutex` (held) keeps every writer out of it
        // while the slice lives (to the end of this iteration).
        let bytes = unsafe { core::slice::from_raw_parts(addr as usize as *const u8, n) };
        generic.text_poke(held, addr, &[], bytes);
        records += 1;
        addr += n as u64;
    }
    let counts = &engine.stats.new_text;
    counts.registered.fetch_add(1, Ordering::Relaxed);
    counts.records.fetch_add(records, Ordering::Relaxed);
}

/// An unregister of `part` of `module`, if it has any text left.
fn unregister(engine: &Engine, held: &HoldsText, module: &Module, part: Part) {
    let (start, end) = part.range(module);
    let Some(len) = range_len(start, end) else {
        return;
    };
    let mut buf = [0; NAME_LEN];
    engine
        .exports
        .generic
        .ksymbol(held, start, len, true, part.name(module, &mut buf));
    engine
        .stats
        .new_text
        .unregistered
        .fetch_add(1, Ordering::Relaxed);
}

/// The length of `[start, end)` as a `KSYMBOL` carries it, or `None` for no text (a module
/// without init text, or whose init text is freed). A module's text is far below 4 GiB.
fn range_len(start: u64, end: u64) -> Option<u32> {
    if start == 0 || end <= start {
        return None;
    }
    u32::try_from(end - start).ok()
}
