// SPDX-License-Identifier: GPL-2.0

//! Bad input: each case hands the engine one kind of invalid request through its public API
//! and returns what the engine answered. The control file turns that into `write()`'s errno;
//! `Ok` means the engine accepted bad input, which the guest agent reports as a failure. The
//! agent (tools/agent/src/scenarios/badinput.rs) knows each case's errno, log line and targets, and
//! checks that the text is as it was (through `/proc/kcore`).

use super::engine_api::{self, Batch, Op, MAX_BATCH};
use super::pool::{PoolKind, Site};
use super::Shared;
use kernel::prelude::*;

extern "C" {
    /// Any function in textpoke's own text will do: it is the trap path.
    fn textpoke_cpu_traps(cpu: u32) -> u64;
    fn textpoke_encode(
        op: kernel::ffi::c_int,
        site: *const kernel::ffi::c_void,
        target: *const kernel::ffi::c_void,
        len: usize,
        out: *mut u8,
    ) -> kernel::ffi::c_int;
}

fn first(shared: &Shared, kind: PoolKind) -> Result<&Site> {
    shared.sites.iter().find(|s| s.kind == kind).ok_or(EINVAL)
}

/// Bytes no codec supports, `len` long.
fn unsupported(len: usize) -> &'static [u8] {
    if cfg!(CONFIG_X86_64) {
        // `UD2` followed by one-byte NOPs.
        [0x0f, 0x0b, 0x90, 0x90, 0x90].get(..len).unwrap_or(&[])
    } else {
        // `YIELD`: a hint, but not the `NOP` hint.
        &[0x3f, 0x20, 0x03, 0xd5]
    }
}

/// The guard itself as a new instruction, `len` long.
fn guard(len: usize) -> &'static [u8] {
    if cfg!(CONFIG_X86_64) {
        [0xcc, 0xcc, 0xcc, 0xcc, 0xcc].get(..len).unwrap_or(&[])
    } else {
        // `BRK #0x008`.
        &[0x00, 0x01, 0x20, 0xd4]
    }
}

/// Runs bad-input case `name` against the engine; the agent's table of them (errno, log line,
/// targets) is `expected()` in tools/agent/src/scenarios/badinput.rs.
pub(crate) fn run(shared: &Shared, module: &'static ThisModule, name: &[u8]) -> Result {
    let site = first(shared, PoolKind::Branch)?;
    let other = shared
        .sites
        .iter()
        .filter(|s| s.kind == PoolKind::Branch)
        .nth(1)
        .ok_or(EINVAL)?;
    if let Some(addr) = name.strip_prefix(b"foreign_add 0x") {
        // A change at an address that is not (or no longer) a site of this module's: the
        // engine must refuse it whatever is there.
        let addr = core::str::from_utf8(addr)
            .ok()
            .and_then(|a| u64::from_str_radix(a.trim(), 16).ok())
            .ok_or(EINVAL)?;
        return Batch::begin()?.add(addr, site.off());
    }
    match name {
        b"unregistered" => {
            // In the taken path of a branch function, 16 bytes after its site (the agent
            // computes the same address from the site's): text of ours, but no site.
            let mut b = Batch::begin()?;
            b.add(site.addr.wrapping_add(16), site.on())
        }
        b"inside_site" => Batch::begin()?.add(site.addr.wrapping_add(1), site.on()),
        b"engine_text" => {
            let addr = (textpoke_cpu_traps as unsafe extern "C" fn(u32) -> u64) as usize as u64;
            engine_api::register_site(module, addr, site.len)
        }
        // This module's own first branch site, registered again.
        b"register_over" => engine_api::register_site(module, site.addr, site.len),
        b"unsupported" => Batch::begin()?.add(site.addr, unsupported(site.len)),
        b"wrong_size" => {
            // A two-byte instruction for a longer site (x86: NOP2 for a NOP5 site; arm64: half
            // an instruction).
            Batch::begin()?.add(site.addr, [0x66, 0x90].as_slice())
        }
        b"out_of_range" => {
            // Beyond a rel32 (x86, 2 GiB) or imm26 (arm64, 128 MiB) branch.
            let far = site.addr.wrapping_add(if cfg!(CONFIG_X86_64) {
                3 << 30
            } else {
                256 << 20
            });
            let mut out = [0u8; 5];
            engine_api::encode(
                Op::Jmp,
                site.addr,
                far,
                out.get_mut(..site.len).ok_or(EINVAL)?,
            )
        }
        b"guard_collision" => Batch::begin()?.add(site.addr, guard(site.len)),
        b"ret_with_return_thunks" => {
            // x86 with return thunks (`CONFIG_MITIGATION_RETHUNK`): a bare `RET`, padded with
            // `INT3`, which would return around the thunk. Elsewhere `RET` is no bad input.
            if !(cfg!(CONFIG_X86_64) && cfg!(CONFIG_MITIGATION_RETHUNK)) {
                return Err(EINVAL);
            }
            let ret = first(shared, PoolKind::Ret)?;
            let insn = [0xc3, 0xcc, 0xcc, 0xcc, 0xcc];
            Batch::begin()?.add(ret.addr, insn.get(..ret.len).ok_or(EINVAL)?)
        }
        b"misaligned" => {
            if cfg!(CONFIG_X86_64) {
                // x86 instructions have no alignment: nothing to refuse.
                return Err(EINVAL);
            }
            engine_api::register_site(module, site.addr.wrapping_add(2), site.len)
        }
        b"duplicate" => {
            let mut b = Batch::begin()?;
            b.add(site.addr, site.on())?;
            b.add(site.addr, site.on())
        }
        b"concurrent" => {
            let mut first = Batch::begin()?;
            first.add(site.addr, site.on())?;
            let mut second = Batch::begin()?;
            second.add(other.addr, other.on())?;
            second.add(site.addr, site.on())
        }
        b"empty" => Batch::begin()?.commit(),
        b"unknown_operation" => {
            let mut out = [0u8; 5];
            // SAFETY: `out` is valid for writes of `site.len` (at most 5) bytes.
            kernel::error::to_result(unsafe {
                textpoke_encode(
                    99,
                    site.addr as usize as *const kernel::ffi::c_void,
                    core::ptr::null(),
                    site.len,
                    out.as_mut_ptr(),
                )
            })
        }
        b"too_big" => {
            let mut b = Batch::begin()?;
            let mut sites = shared.sites.iter().filter(|s| s.kind == PoolKind::Branch);
            for s in sites.by_ref().take(MAX_BATCH) {
                b.add(s.addr, s.on())?;
            }
            let extra = sites.next().ok_or(EINVAL)?;
            b.add(extra.addr, extra.on())
        }
        b"commit_twice" => {
            // Whichever of its instructions the site holds now, change it to the other.
            let mut now = [0u8; 5];
            let now = now.get_mut(..site.len).ok_or(EINVAL)?;
            crate::kernel_text::read(site.addr, now)?;
            let (there, other) = if *now == *site.on() {
                (site.on(), site.off())
            } else {
                (site.off(), site.on())
            };
            let mut b = Batch::begin()?;
            b.add(site.addr, other)?;
            b.commit()?;
            let second = b.commit();
            // Put the site back the way it was.
            let mut undo = Batch::begin()?;
            undo.add(site.addr, there)?;
            undo.commit()?;
            second
        }
        _ => Err(EINVAL),
    }
}
