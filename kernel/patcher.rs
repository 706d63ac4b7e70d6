// SPDX-License-Identifier: GPL-2.0

//! textpoke as the kernel's patcher for its own static keys and ftrace sites (patch 0008).
//!
//! While textpoke is loaded, the kernel offers each instruction change of a jump label or of
//! ftrace to [`textpoke_patcher_queue`] and completes them with [`textpoke_patcher_apply`], both
//! with `text_mutex` held (x86 `text_poke_queue()`/`text_poke_finish()`, arm64
//! `arch_jump_label_transform_queue()`/`_apply()` and `arch_ftrace_update_code()`). A change
//! textpoke takes goes through the same plan, pending table, trap handler and records as a
//! module's batch ([`Batch::kernel`]); only the site registry is bypassed, since the kernel's
//! own code chose the site. Nothing new is exposed to userspace or to other modules: there is
//! no new way to name an address.
//!
//! A change is handed back to the kernel's stock path (its nosync write on arm64, its own
//! `INT3` batch on x86), counted in `kernel.declined` and logged once per apply, when textpoke
//! cannot take it safely:
//! - its old or new instruction is not a listed one, or the new one is the guard;
//! - it may not be made under execution ([`Arch::must_park`]: arm64 `MOV X9, X30`, which ftrace
//!   writes once when it initializes a module's sites, before they can run). A parked section
//!   needs the CPU-hotplug lock, which cannot be taken inside the caller's `text_mutex`;
//! - nothing changes (the old and new instruction are the same).
//!
//! Never for lack of memory: the queue keeps room for
//! [`KERNEL_MIN_SITES`](crate::kernel_queue::KERNEL_MIN_SITES) changes from load
//! on, and when growing past it fails, commits what it holds and takes the change into the
//! emptied queue. On arm64 the stock path writes with no guard and no record, which a
//! listening tracer would miss.
//!
//! Changes accumulate until the kernel applies them, or until [`KERNEL_MAX_SITES`] are queued
//! or a site comes again (or overlaps a queued one), which first commits what is queued: one
//! batch per 8192 changes, each with its plan's syncs (three on x86, two on arm64).

use crate::arch::Arch;
use crate::batch::Batch;
use crate::current_arch::CurrentArch;
use crate::engine::{self, Engine};
use crate::entry::{CommitState, Entry};
use crate::insn::{InsnBytes, MAX_INSN_LEN};
use crate::kernel_queue::{Declined, KERNEL_MAX_SITES};
use crate::kernel_text;
use crate::patch_series::{text_patcher_ops, Generic, PatcherRegistration, TextHeld};
use crate::plan::Change;
use core::sync::atomic::Ordering;
use kernel::{ffi::c_void, prelude::*};

/// The kernel's change of the instruction at `addr` to `new`, as a batch entry.
fn change(addr: u64, new: &[u8]) -> Result<Entry, Declined> {
    let mut buf = [0u8; MAX_INSN_LEN];
    let old = buf.get_mut(..new.len()).ok_or(Declined::Unreadable)?;
    kernel_text::read(addr, old).map_err(|_| Declined::Unreadable)?;
    if *old == *new {
        return Err(Declined::Unchanged);
    }
    if CurrentArch::is_guard(new) {
        return Err(Declined::NewNotListed);
    }
    let insn = CurrentArch::accept(addr, new).map_err(|_| Declined::NewNotListed)?;
    CurrentArch::accept(addr, old).map_err(|_| Declined::OldNotListed)?;
    let old = InsnBytes::new(old).map_err(|_| Declined::OldNotListed)?;
    let new = InsnBytes::new(new).map_err(|_| Declined::NewNotListed)?;
    if CurrentArch::must_park(&old, &new) {
        return Err(Declined::MustPark);
    }
    let change = Change {
        old,
        new,
        parked: false,
    };
    Entry::new(addr, insn, change, true).map_err(|_| Declined::OldNotListed)
}

/// Takes the change at `addr` to `new` into the queue, committing what is queued first if
/// the queue is full or already touches the site.
///
/// The change's old instruction is read after that commit: a change queued earlier at the
/// same site is in the text by then, and the new entry must start from it. Read before, the
/// entry would carry the instruction the earlier change replaced, and its batch would find
/// the text changed behind its back.
fn queue(engine: &Engine, held: &TextHeld<'_>, addr: u64, new: &[u8]) -> bool {
    let end = addr.saturating_add(new.len() as u64);
    let flush = engine.queue.with(held, |q| {
        q.entries.len() >= KERNEL_MAX_SITES
            || (addr < q.top.saturating_add(MAX_INSN_LEN as u64)
                && q.entries.iter().any(|e| {
                    e.addr < end && addr < e.addr.saturating_add(e.change.new.len() as u64)
                }))
    });
    if flush {
        commit(engine, held);
    }
    let entry = match change(addr, new) {
        Ok(entry) => entry,
        Err(why) => {
            engine.stats.declined.fetch_add(1, Ordering::Relaxed);
            engine.queue.with(held, |q| {
                q.declined = q.declined.saturating_add(1);
                q.first_declined.get_or_insert((addr, why));
            });
            return false;
        }
    };
    // Room for both first, so that neither push fails after the other was made. Growing past
    // the room kept may fail for lack of memory: then what is queued goes first (none of it
    // touches this site, or it would have gone above), and the change into the emptied queue,
    // which keeps its room (`KERNEL_MIN_SITES`).
    if !engine.queue.with(held, |q| q.room_for_one())
        && crate::debug::defect() != crate::debug::Defect::HandBackWhenFull
    {
        commit(engine, held);
    }
    engine.queue.with(held, |q| {
        let pushed =
            q.room_for_one() && q.state.push().is_ok() && q.entries.push(entry, GFP_KERNEL).is_ok();
        if !pushed {
            pr_err!("no room for a kernel change at {addr:#x} in the emptied queue: handed back\n");
            q.state.truncate(q.entries.len());
            q.declined = q.declined.saturating_add(1);
            q.first_declined.get_or_insert((addr, Declined::NoRoom));
            engine.stats.declined.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        q.top = q.top.max(addr);
        engine.stats.queued.fetch_add(1, Ordering::Relaxed);
        true
    })
}

/// Commits what is queued as one batch.
fn commit(engine: &Engine, held: &TextHeld<'_>) {
    let (entries, state, declined, first) = engine.queue.with(held, |q| {
        q.top = 0;
        engine.stats.queued.store(0, Ordering::Relaxed);
        let declined = core::mem::take(&mut q.declined);
        (
            core::mem::replace(&mut q.entries, KVVec::new()),
            core::mem::replace(&mut q.state, CommitState::new()),
            declined,
            q.first_declined.take(),
        )
    });
    if let Some((addr, why)) = first {
        pr_info!(
            "handed {declined} kernel changes back to the stock path (the first at {addr:#x}: {why:?})\n"
        );
    }
    if entries.is_empty() {
        return;
    }
    let n = entries.len();
    let mut batch = match Batch::kernel(engine, entries, state) {
        Ok(batch) => batch,
        Err(e) => {
            // `queue` grows the state with the entries: cannot happen.
            pr_err!("lost a kernel batch of {n} changes: {e:?}\n");
            return;
        }
    };
    if let Err(e) = batch.commit_kernel(engine, held) {
        // Under `text_mutex` the text cannot change behind the batch's back, and the kernel's
        // batches have a pending-table slot of their own: an impossible state, said loudly.
        pr_err!("a kernel batch of {n} changes failed: {e:?}\n");
    }
    match batch.into_parts() {
        Some((entries, state)) => engine.queue.with(held, |q| q.reuse(entries, state)),
        None => pr_err!("a kernel batch of {n} changes kept its memory from the queue\n"),
    }
}

/// `text_patcher_ops.queue` (patch 0008): takes the change of the instruction at `addr` into
/// the `len` bytes at `insn`, or hands it back (`false`).
///
/// # Safety
///
/// Called by the kernel with `text_mutex` held, and `insn` valid for reads of `len` bytes.
unsafe extern "C" fn textpoke_patcher_queue(
    addr: *mut c_void,
    insn: *const c_void,
    len: usize,
) -> bool {
    if insn.is_null() || len == 0 || len > MAX_INSN_LEN {
        return false;
    }
    // SAFETY: The kernel passes `len` readable bytes at `insn`.
    let new = unsafe { core::slice::from_raw_parts(insn.cast::<u8>(), len) };
    engine::with(|engine| {
        // SAFETY: The kernel calls with `text_mutex` held for the whole call.
        let held = unsafe { engine.exports.generic.text_held_by_caller() };
        queue(engine, &held, addr as usize as u64, new)
    })
    .unwrap_or(false)
}

/// `text_patcher_ops.apply` (patch 0008): commits every change taken since the last apply.
///
/// # Safety
///
/// Called by the kernel with `text_mutex` held.
unsafe extern "C" fn textpoke_patcher_apply() {
    engine::with(|engine| {
        // SAFETY: The kernel calls with `text_mutex` held for the whole call.
        let held = unsafe { engine.exports.generic.text_held_by_caller() };
        commit(engine, &held);
    });
}

extern "C" {
    /// The `kernel_patcher` module parameter (kernel/exports.c), set before `init` runs.
    static textpoke_kernel_patcher: bool;
}

/// Whether textpoke is to be the kernel's patcher (`kernel_patcher`, default yes).
pub(crate) fn wanted() -> bool {
    // SAFETY: The module loader sets parameters before `init`, and nothing writes it after
    // (it is read-only in sysfs).
    unsafe { textpoke_kernel_patcher }
}

/// textpoke's patcher.
static OPS: text_patcher_ops = text_patcher_ops {
    queue: textpoke_patcher_queue,
    apply: textpoke_patcher_apply,
};

/// textpoke registered as the kernel's patcher; dropping it gives the kernel its stock paths
/// back, after applying what textpoke still holds.
pub(crate) struct Registration {
    _registration: PatcherRegistration,
}

impl Registration {
    /// Registers textpoke (`module`) as the kernel's patcher. Registration is refused while the
    /// kernel is in the middle of an update on its own path (`EBUSY`): retried for a second.
    pub(crate) fn new(generic: &Generic, module: &'static ThisModule) -> Result<Self> {
        let mut tries = 0;
        loop {
            // SAFETY: `OPS` and its functions are this module's, which cannot go away before the
            // registration is dropped (in the module's exit, which drops it first).
            match unsafe { generic.register_patcher(&OPS, module.as_ptr()) } {
                Ok(registration) => {
                    return Ok(Self {
                        _registration: registration,
                    })
                }
                Err(e) if e == EBUSY && tries < 100 => {
                    tries += 1;
                    // SAFETY: Process context (module init).
                    unsafe { kernel::bindings::msleep(10) };
                }
                Err(e) => {
                    pr_err!("cannot become the kernel's jump label and ftrace patcher: {e:?}\n");
                    return Err(e);
                }
            }
        }
    }
}
