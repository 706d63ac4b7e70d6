// SPDX-License-Identifier: GPL-2.0

//! The seeded defects of the debug build, and the check that must catch each: the one table.
//!
//! A debug build (`CONFIG_TEXTPOKE_DEBUG_PROTOCOL`) selects one defect per value of its
//! `debug_protocol` parameter (`kernel/debug.rs` maps the values to behaviour); each exists to
//! show that the check claiming to cover it fails on it, under the load the correct engine
//! passes. The guest agent takes the values it sets from here, and docs/architecture.md
//! summarizes this table.
//!
//! Like every pure file of the engine it is compiled into the kernel module and into the host
//! crates, so it uses only `core`.

/// Where a defect is caught.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaughtIn {
    /// In a guest boot of `make test`.
    Guest,
    /// Only by the host model: QEMU's coherent TCG cannot show it.
    Host,
    /// Both.
    GuestAndHost,
}

/// One seeded defect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeededDefect {
    /// The `debug_protocol` value that selects it.
    pub mode: i32,
    /// Its name.
    pub name: &'static str,
    /// What it does.
    pub what: &'static str,
    /// The check (test or case name) that must catch it.
    pub caught_by: &'static str,
    /// Where.
    pub caught_in: CaughtIn,
}

macro_rules! defects {
    ($($id:ident = $mode:literal $name:literal $caught_in:ident $caught_by:literal $what:literal;)*) => {
        $(
            #[doc = $what]
            pub const $id: SeededDefect = SeededDefect {
                mode: $mode,
                name: $name,
                what: $what,
                caught_by: $caught_by,
                caught_in: CaughtIn::$caught_in,
            };
        )*
        /// Every seeded defect, by mode.
        pub const ALL: &[SeededDefect] = &[$($id),*];
    };
}

defects! {
    RECORD_BEFORE_GUARD_SYNC = 1 "record_before_guard_sync" Host
        "control_record_before_guard_sync_is_caught"
        "the record emitted before the guards' sync";
    HEAD_BEFORE_TAIL_SYNC = 2 "head_before_tail_sync" Host
        "control_head_before_tail_sync_is_caught"
        "x86: heads written before the tails' sync";
    UNGUARDED_NOSYNC = 3 "unguarded_nosync" GuestAndHost
        "control_unguarded_nosync_caught"
        "unguarded whole writes, each record after its write, one sync";
    BEFORE_AFTER = 4 "before_after" GuestAndHost
        "before_after_leaves_executions_undecided"
        "the BEFORE/AFTER pair of records around an unguarded write";
    EMULATE_OLD = 5 "emulate_old" Guest
        "control_emulate_old_caught"
        "the trap handler emulates the site's old instruction";
    EMULATE_OTHER = 6 "emulate_other" Guest
        "control_emulate_other_site_caught"
        "the trap handler emulates another site's new instruction";
    SKIP_FINAL_WRITE = 7 "skip_final_write" Guest
        "control_skipped_write_caught"
        "one site's writes skipped, its record kept";
    DROP_RECORD = 8 "drop_record" Guest
        "control_dropped_record_caught"
        "one record per batch not emitted (module and kernel batches)";
    WRONG_OLD_BYTES = 9 "wrong_old_bytes" Guest
        "control_wrong_old_bytes_caught"
        "one record per batch with wrong old bytes (module and kernel batches)";
    SWALLOW_FOREIGN = 10 "swallow_foreign" Guest
        "control_swallowed_foreign_int3_caught"
        "the trap handler claims every trap at its guard instruction, someone else's too";
    IGNORE_OTHER_PATCHERS = 11 "ignore_other_patchers" Guest
        "control_other_patchers_ignored_caught"
        "registration and module batches skip the check that no other in-kernel patcher owns the text";
    SKIP_LISTENER_HANDSHAKE = 12 "skip_listener_handshake" Guest
        "control_listener_handshake_skipped_caught"
        "a module batch finds no listener, then lets go of text_mutex for a second before its writes";
    RELEASE_TEXT_ON_FAILURE = 13 "release_text_on_failure" Guest
        "control_text_released_on_failure_caught"
        "a module batch whose write failed lets go of text_mutex while it recovers, still published";
    IGNORE_CONFLICTS = 14 "ignore_conflicts" Guest
        "control_conflicts_ignored_caught"
        "a batch leaves another patcher's bytes behind its own guard, and corrects no record it made untrue";
    HAND_BACK_WHEN_FULL = 15 "hand_back_when_full" Guest
        "control_kernel_queue_full_hand_back_caught"
        "a kernel change that finds the queue unable to grow is handed back to the stock path";
    NEW_TEXT_UNDESCRIBED = 16 "new_text_undescribed" Guest
        "control_new_text_undescribed_caught"
        "a module that loads while a tracer listens is not described: no register, no bytes";
    RELEASE_TEXT_AFTER_RECORD = 17 "release_text_after_record" GuestAndHost
        "control_text_released_after_record_caught"
        "a guarded module batch lets go of text_mutex across its syncs after its records too, pausing there";
}

/// The defect selected by `mode`, if any.
pub fn by_mode(mode: i32) -> Option<SeededDefect> {
    ALL.iter().copied().find(|d| d.mode == mode)
}
