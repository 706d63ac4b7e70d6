// SPDX-License-Identifier: GPL-2.0

//! What the test files of `arch/x86/insn.rs` share: fakes of the trapped CPU's registers and
//! stack for its `INT3` emulation, and the independent decoder's view of bytes.
//!
//! Each test file is its own crate and includes this module with `mod common;`; a file that does
//! not use an item would otherwise warn.
#![allow(dead_code)]

use std::cell::Cell;
use std::collections::BTreeMap;

use iced_x86::{Decoder, DecoderOptions};
use textpoke_core::x86::{Regs, Stack};

/// The registers the emulation reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FakeRegs {
    pub ip: u64,
    pub sp: u64,
}

impl Regs for FakeRegs {
    fn ip(&self) -> u64 {
        self.ip
    }
    fn set_ip(&mut self, ip: u64) {
        self.ip = ip;
    }
    fn sp(&self) -> u64 {
        self.sp
    }
    fn set_sp(&mut self, sp: u64) {
        self.sp = sp;
    }
}

/// What an unwritten stack word reads as.
pub const UNWRITTEN: u64 = 0x5a5a_5a5a_5a5a_5a5a;

/// A sparse stack that logs every access; unwritten words read as [`UNWRITTEN`].
#[derive(Default, Debug, PartialEq, Eq)]
pub struct FakeStack {
    pub words: BTreeMap<u64, u64>,
    pub reads: Cell<usize>,
    pub writes: Vec<(u64, u64)>,
}

impl Stack for FakeStack {
    fn read_u64(&self, addr: u64) -> u64 {
        self.reads.set(self.reads.get() + 1);
        self.words.get(&addr).copied().unwrap_or(UNWRITTEN)
    }
    fn write_u64(&mut self, addr: u64, value: u64) {
        self.writes.push((addr, value));
        self.words.insert(addr, value);
    }
}

/// Decodes `bytes` at `site` into iced instructions, stopping at the first invalid one.
pub fn iced_decode_all(site: u64, bytes: &[u8]) -> Vec<iced_x86::Instruction> {
    let mut decoder = Decoder::with_ip(64, bytes, site, DecoderOptions::NONE);
    let mut out = Vec::new();
    while decoder.can_decode() {
        let insn = decoder.decode();
        if insn.is_invalid() {
            break;
        }
        out.push(insn);
    }
    out
}
