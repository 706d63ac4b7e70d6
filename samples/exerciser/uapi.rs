// SPDX-License-Identifier: GPL-2.0

//! What the exerciser shows userspace, shared with the guest agent (`tools/agent`).
//!
//! The exerciser's debugfs directory is `/sys/kernel/debug/textpoke_exerciser/`:
//!
//! - `sites` (text): one line per site, `index kind addr len off on`, with `addr` in hex and
//!   `off`/`on` the two instructions as hex bytes. `off` is what the site holds at load; path 0
//!   of an execution means the `off` instruction ran, path 1 the `on` one.
//! - `control` (write): one command per write; the write fails with the command's errno.
//!   - `run keys=K sites=S ftrace=F flips=N pokers=P` runs a scenario and returns when done;
//!   - `bad <case>` performs one bad-input case (samples/exerciser/badinput.rs) and fails with
//!     the engine's errno (success would mean the engine accepted bad input);
//!   - `hold <index>` keeps a batch owning site `index` in flight, `release` ends it;
//!   - `flip <index>...` flips the sites to their other instruction in one batch that the
//!     writing task begins, fills, commits and ends itself (what fault injection, which fails
//!     that task's allocations, needs), and fails with the first call's errno;
//!   - `executors start` / `executors stop` run the executors without a scenario.
//! - `result` (text): `key value` lines about the last scenario.
//! - `batches` (text): one line per batch of the last scenario: `poker group sites nsecs syncs
//!   writes records start end errno site:to...`, where `group` is a key's index or -1 for the
//!   ftrace group, `start`/`end` bound its commit on perf's clock, and each `site:to` names a
//!   site it changed and the instruction it changed it to (0 `off`, 1 `on`).
//! - `executions` (binary): the executions logged during the last scenario, as
//!   [`ExecRecord`]s, CPU by CPU. Executions are logged only while a batch is in flight.
//!
//! Only `core` here: the agent includes this file too.

/// One logged execution of a site.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecRecord {
    /// `local_clock()` just before the call: perf's clock.
    pub start: u64,
    /// `local_clock()` just after it returned.
    pub end: u64,
    /// Index of the site (as in `sites`).
    pub site: u32,
    /// CPU that executed it.
    pub cpu: u16,
    /// 0: the `off` instruction's behaviour; 1: the `on` one; 2: neither (another site's).
    pub path: u8,
    /// How the execution was seen to trap: [`TRAP_SEEN`] and [`TRAP_COUNTED`] bits.
    pub trap: u8,
}

/// [`ExecRecord::trap`] bit: the CPU itself says an exception interrupted the call. The executor
/// leaves a mark below its stack pointer before the call, where only the state an exception
/// entry saves can overwrite it; interrupts are off, so nothing but a trap can.
pub const TRAP_SEEN: u8 = 1;
/// [`ExecRecord::trap`] bit: textpoke's count of this CPU's guard traps
/// (`textpoke_cpu_traps()`) moved across the call.
pub const TRAP_COUNTED: u8 = 2;

/// Size of an [`ExecRecord`] in `executions`.
pub const EXEC_RECORD_SIZE: usize = core::mem::size_of::<ExecRecord>();

impl ExecRecord {
    /// Decodes one record from its native-endian bytes.
    pub fn from_bytes(b: &[u8; EXEC_RECORD_SIZE]) -> Self {
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(b.get(i..i + 8).unwrap_or(&[0; 8]));
            u64::from_ne_bytes(w)
        };
        let mut site = [0u8; 4];
        site.copy_from_slice(b.get(16..20).unwrap_or(&[0; 4]));
        let mut cpu = [0u8; 2];
        cpu.copy_from_slice(b.get(20..22).unwrap_or(&[0; 2]));
        Self {
            start: u64_at(0),
            end: u64_at(8),
            site: u32::from_ne_bytes(site),
            cpu: u16::from_ne_bytes(cpu),
            path: b.get(22).copied().unwrap_or(0),
            trap: b.get(23).copied().unwrap_or(0),
        }
    }

    /// Whether the CPU saw this execution trap ([`TRAP_SEEN`]).
    pub fn cpu_trapped(&self) -> bool {
        self.trap & TRAP_SEEN != 0
    }

    /// Whether textpoke counted a trap of this CPU during it ([`TRAP_COUNTED`]).
    pub fn counted(&self) -> bool {
        self.trap & TRAP_COUNTED != 0
    }
}
