// SPDX-License-Identifier: GPL-2.0

//! The seeded defects of debug builds: what `textpoke.debug_protocol` selects, by the table in
//! `kernel/defects.rs`.
//!
//! They exist so that each of the guest's checks can be shown to catch the defect it claims to
//! cover, under the same load the correct engine passes. Only a module built with
//! `CONFIG_TEXTPOKE_DEBUG_PROTOCOL` (Kconfig, default `n`) has the parameter at all; a
//! production build always runs the guarded protocol. Setting it is root-only, refused under
//! lockdown and taints the kernel (kernel/exports.c); it is read once per batch, and every
//! batch that uses it logs so.

use crate::defects::{self, SeededDefect};
use crate::plan::Protocol;
use kernel::static_assert;

/// What each seeded defect of the table (`kernel/defects.rs`) does here.
const BEHAVIOUR: [(SeededDefect, Defect); 17] = [
    (
        defects::RECORD_BEFORE_GUARD_SYNC,
        Defect::Plan(Protocol::RecordBeforeGuardSync),
    ),
    (
        defects::HEAD_BEFORE_TAIL_SYNC,
        Defect::Plan(Protocol::HeadBeforeTailSync),
    ),
    (
        defects::UNGUARDED_NOSYNC,
        Defect::Plan(Protocol::UnguardedNosync),
    ),
    (defects::BEFORE_AFTER, Defect::Plan(Protocol::BeforeAfter)),
    (defects::EMULATE_OLD, Defect::EmulateOld),
    (defects::EMULATE_OTHER, Defect::EmulateOther),
    (defects::SKIP_FINAL_WRITE, Defect::SkipFinalWrite),
    (defects::DROP_RECORD, Defect::DropRecord),
    (defects::WRONG_OLD_BYTES, Defect::WrongOldBytes),
    (defects::SWALLOW_FOREIGN, Defect::SwallowForeign),
    (defects::IGNORE_OTHER_PATCHERS, Defect::IgnoreOtherPatchers),
    (
        defects::SKIP_LISTENER_HANDSHAKE,
        Defect::SkipListenerHandshake,
    ),
    (
        defects::RELEASE_TEXT_ON_FAILURE,
        Defect::ReleaseTextOnFailure,
    ),
    (defects::IGNORE_CONFLICTS, Defect::IgnoreConflicts),
    (defects::HAND_BACK_WHEN_FULL, Defect::HandBackWhenFull),
    (defects::NEW_TEXT_UNDESCRIBED, Defect::NewTextUndescribed),
    (
        defects::RELEASE_TEXT_AFTER_RECORD,
        Defect::ReleaseTextAfterRecord,
    ),
];
// Every defect of the table has its behaviour here, once.
static_assert!(BEHAVIOUR.len() == defects::ALL.len());

/// What a batch does differently from the guarded protocol.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Defect {
    /// None: the guarded protocol.
    None,
    /// A deliberately broken plan (`plan::Protocol`).
    Plan(Protocol),
    /// The trap handler emulates the site's old instruction instead of its new one.
    EmulateOld,
    /// The trap handler emulates another site's new instruction.
    EmulateOther,
    /// One site's final write is skipped, its record kept.
    SkipFinalWrite,
    /// One site's record is not emitted.
    DropRecord,
    /// One site's record carries wrong old bytes.
    WrongOldBytes,
    /// The trap handler claims every trap at its guard instruction, textpoke's or not, and
    /// resumes after it: someone else's trap is swallowed.
    SwallowForeign,
    /// Registration skips the check that no other in-kernel patcher owns the site's text, and a
    /// module batch the check that kprobes owns none of its sites' text.
    IgnoreOtherPatchers,
    /// A module batch decides whether anyone listens, then releases `text_mutex` for a moment
    /// before it writes ([`decided_early`]).
    SkipListenerHandshake,
    /// A module batch whose write failed lets go of `text_mutex` before its recovery, while it
    /// is still published ([`releases_text_on_failure`]).
    ReleaseTextOnFailure,
    /// A batch that finds another patcher's bytes at a guarded site leaves them, whether its
    /// guard stands in front of them or not, and corrects no record.
    IgnoreConflicts,
    /// A kernel change that finds the queue unable to grow is handed back to the kernel's
    /// stock path, instead of what the queue holds being committed first.
    HandBackWhenFull,
    /// A module's text that appears while a tracer listens is not described (`new_text.rs`).
    NewTextUndescribed,
    /// A guarded module batch does not hold `text_mutex` from its first record on
    /// ([`crate::plan::AcrossSyncs::recorded`] skipped), and pauses across each sync after a
    /// record while it is released ([`Defect::pause_across_sync`]): on x86 a second listener
    /// arrives between a site's record and its head.
    ReleaseTextAfterRecord,
}

impl Defect {
    /// The protocol the plan follows.
    pub(crate) fn protocol(self) -> Protocol {
        match self {
            Self::Plan(p) => p,
            _ => Protocol::Guarded,
        }
    }

    /// Whether a batch corrects the record of a site it finds changed behind its back
    /// (`Run::correct_conflicts` in batch.rs): not under the defects whose point is a record
    /// left untrue, one that ignores such changes and one that skips a site's writes and keeps
    /// its record (the engine's read-back would otherwise take the skipped site for another
    /// patcher's, and correct the record the defect exists to leave wrong).
    pub(crate) fn corrects_records(self) -> bool {
        !matches!(self, Self::IgnoreConflicts | Self::SkipFinalWrite)
    }

    /// Called inside each sync of a commit, after the sync, with `recorded` saying whether a
    /// record of the batch went out since the sync before. Under
    /// [`Defect::ReleaseTextAfterRecord`] (debug builds) such a sync (x86's between the records
    /// and the heads) sleeps 200 ms with `text_mutex` released: longer than a recorder takes to
    /// open its events, map their buffers and copy the exerciser's text, and most of a batch's
    /// time, so a listener that starts among such batches lands there. Nothing otherwise, and
    /// nothing ever in a production build.
    #[inline(always)]
    pub(crate) fn pause_across_sync(self, recorded: bool) {
        #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
        if self == Self::ReleaseTextAfterRecord && recorded {
            // SAFETY: Called in process context (a commit's sync, `text_mutex` released by the
            // defect), with no spinlock held and not in an atomic section.
            unsafe { kernel::bindings::msleep(200) };
        }
        #[cfg(not(CONFIG_TEXTPOKE_DEBUG_PROTOCOL))]
        let _ = (self, recorded);
    }

    /// Called after each unguarded whole write. Under a seeded defect (debug builds) it sleeps
    /// a millisecond: an unguarded write is caught when another CPU runs the new instruction
    /// before its record, and the pause gives the other CPUs the time to. Nothing otherwise,
    /// and nothing ever in a production build.
    #[inline(always)]
    pub(crate) fn pause_after_unguarded_write(self) {
        #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
        if self != Self::None {
            // SAFETY: Called in process context (a commit's plan), with no spinlock held and
            // not in an atomic section.
            unsafe { kernel::bindings::msleep(1) };
        }
        #[cfg(not(CONFIG_TEXTPOKE_DEBUG_PROTOCOL))]
        let _ = self;
    }
}

#[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
extern "C" {
    /// Defined and registered as a module parameter in kernel/exports.c (debug builds only).
    static textpoke_debug_protocol: kernel::ffi::c_int;
    /// Likewise: which write of a module's batch fails on purpose (0: none).
    static textpoke_fail_write: kernel::ffi::c_int;
    /// Likewise: how long recovery from such a failure waits before its first repair.
    static textpoke_fail_pause_ms: kernel::ffi::c_int;
    /// Likewise: what the next module batches write at their first guarded site, playing
    /// another patcher, before their guards are checked (0: nothing).
    static textpoke_conflict_write: kernel::ffi::c_int;
    /// Likewise: whether the kernel queue refuses to grow past the room it has (0: no).
    static textpoke_refuse_growth: kernel::ffi::c_int;
}

/// The write of the next module batch that fails on purpose, counted from 1 over the writes its
/// plan makes (guards, tails, heads, whole instructions), as an arch write failing part way
/// would: the writes before it are made, it and the rest of its step's are not. Always `None`
/// in a production build. Recovery (`Run::recover`) must then take every guard out by the
/// plan's rules, which the guest checks for every `k` of a small batch.
pub(crate) fn failing_write() -> Option<u32> {
    #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
    {
        // SAFETY: An `int` module parameter; read once per batch, as `defect` reads its own.
        let k = unsafe { core::ptr::read_volatile(&raw const textpoke_fail_write) };
        u32::try_from(k).ok().filter(|&k| k > 0)
    }
    #[cfg(not(CONFIG_TEXTPOKE_DEBUG_PROTOCOL))]
    None
}

/// Whether a failed batch lets go of `text_mutex` before its recovery: only under
/// [`Defect::ReleaseTextOnFailure`] (debug builds); never in a production build.
pub(crate) fn releases_text_on_failure() -> bool {
    #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
    {
        defect() == Defect::ReleaseTextOnFailure
    }
    #[cfg(not(CONFIG_TEXTPOKE_DEBUG_PROTOCOL))]
    false
}

/// Whether the kernel queue refuses to grow past the room it has (`refuse_growth`, debug
/// builds), as if memory had run out, so that a guest check can run what the queue does then.
/// Always `false` in a production build.
pub(crate) fn refuses_queue_growth() -> bool {
    #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
    {
        // SAFETY: An `int` module parameter, read once per queued change.
        unsafe { core::ptr::read_volatile(&raw const textpoke_refuse_growth) != 0 }
    }
    #[cfg(not(CONFIG_TEXTPOKE_DEBUG_PROTOCOL))]
    false
}

/// What [`conflict_write`] plays another patcher writing at a guarded site.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[cfg_attr(not(CONFIG_TEXTPOKE_DEBUG_PROTOCOL), allow(dead_code))]
pub(crate) enum ConflictWrite {
    /// x86: the old instruction's bytes after the first, behind the guard (`conflict_write=1`).
    BehindGuard,
    /// The old instruction whole, over the guard (`conflict_write=2`).
    OverGuard,
}

/// What the next module batch writes at its first guarded site before its guards are checked
/// (`conflict_write`, debug builds), so that a guest check can show what a batch does when
/// another patcher wrote there. Always `None` in a production build.
pub(crate) fn conflict_write() -> Option<ConflictWrite> {
    #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
    {
        // SAFETY: An `int` module parameter, read once per batch.
        match unsafe { core::ptr::read_volatile(&raw const textpoke_conflict_write) } {
            1 => Some(ConflictWrite::BehindGuard),
            2 => Some(ConflictWrite::OverGuard),
            _ => None,
        }
    }
    #[cfg(not(CONFIG_TEXTPOKE_DEBUG_PROTOCOL))]
    None
}

/// Called once a step of a commit failed, before its recovery: sleeps `fail_pause_ms` (debug
/// builds; at most two seconds), so that a guest check can start a listener while a failed
/// batch is still published with its guards out. Nothing otherwise, and nothing ever in a
/// production build.
pub(crate) fn pause_in_recovery() {
    #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
    {
        // SAFETY: An `int` module parameter, read once per failure.
        let ms = unsafe { core::ptr::read_volatile(&raw const textpoke_fail_pause_ms) };
        if let Ok(ms @ 1..=2000) = u32::try_from(ms) {
            // SAFETY: Process context (a commit's recovery), no spinlock held, not atomic.
            unsafe { kernel::bindings::msleep(ms) };
        }
    }
}

/// Under [`Defect::SkipListenerHandshake`] (debug builds): whether anyone listened, decided
/// under `text_mutex` and then, wrongly, not kept: the mutex is released for a second,
/// longer than a recorder takes to open its per-CPU events and map their buffers, in which a
/// listener arrives and copies the text, before the batch takes its locks and writes by the
/// stale answer. `None` otherwise, and always in a production build.
pub(crate) fn decided_early(generic: &crate::patch_series::Generic) -> Option<bool> {
    #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
    if defect() == Defect::SkipListenerHandshake {
        let listening = {
            let text = generic.lock_text();
            generic.listening(text.holds())
        };
        kernel::pr_warn!("DELIBERATELY BROKEN: the listener handshake skipped (debug_protocol)\n");
        // SAFETY: Process context (a commit), no lock held.
        unsafe { kernel::bindings::msleep(1000) };
        return Some(listening);
    }
    #[cfg(not(CONFIG_TEXTPOKE_DEBUG_PROTOCOL))]
    let _ = generic;
    None
}

/// The defect the next batch (or trap) has: always [`Defect::None`] in a production build.
#[inline(always)]
pub(crate) fn defect() -> Defect {
    #[cfg(CONFIG_TEXTPOKE_DEBUG_PROTOCOL)]
    {
        // SAFETY: An `int` module parameter; sysfs may write it at any time, so read it once
        // and without assuming it stays the same.
        let value = unsafe { core::ptr::read_volatile(&raw const textpoke_debug_protocol) };
        BEHAVIOUR
            .iter()
            .find(|(d, _)| d.mode == value)
            .map_or(Defect::None, |(_, b)| *b)
    }
    #[cfg(not(CONFIG_TEXTPOKE_DEBUG_PROTOCOL))]
    Defect::None
}
