//! The little BPF the breakpoint observer needs, without libbpf: two maps, one hand-assembled
//! program, and the calls to load and attach them (`bpf(2)`, `PERF_EVENT_IOC_SET_BPF`).
//!
//! The program ([`site_word_program`]) runs on every hit of a hardware breakpoint, in the debug
//! exception, on the CPU that hit it. It looks the breakpoint's address (`ctx->addr`, the
//! event's `bp_addr`) up in a hash map of watched address to site address, reads the site's
//! first four bytes with `bpf_probe_read_kernel` (the text as it is at that moment), and sends
//! `{bp_addr, site, word}` to the CPU's `BPF_OUTPUT` event, whose sample adds the perf clock's
//! time and the CPU. It returns 0, which drops the breakpoint's own sample
//! (`__perf_event_overflow` in kernel/events/core.c): the output record is the hit.
//!
//! Layouts are the 6.12 uapi's (include/uapi/linux/bpf.h, bpf_perf_event.h); the program's
//! encoding has host tests.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `BPF_MAP_CREATE`.
const BPF_MAP_CREATE: libc::c_long = 0;
/// `BPF_MAP_UPDATE_ELEM`.
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
/// `BPF_PROG_LOAD`.
const BPF_PROG_LOAD: libc::c_long = 5;
/// `BPF_MAP_TYPE_HASH`.
pub const BPF_MAP_TYPE_HASH: u32 = 1;
/// `BPF_MAP_TYPE_PERF_EVENT_ARRAY`.
pub const BPF_MAP_TYPE_PERF_EVENT_ARRAY: u32 = 4;
/// `BPF_PROG_TYPE_PERF_EVENT`.
pub const BPF_PROG_TYPE_PERF_EVENT: u32 = 7;
/// `PERF_EVENT_IOC_SET_BPF`, `_IOW('$', 8, __u32)`.
pub const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = (1 << 30) | (4 << 16) | (0x24 << 8) | 8;
/// `PERF_COUNT_SW_BPF_OUTPUT`.
pub const PERF_COUNT_SW_BPF_OUTPUT: u64 = 10;

/// `offsetof(struct bpf_perf_event_data, addr)`: after `bpf_user_pt_regs_t regs` (x86-64:
/// `struct pt_regs`, 21 registers; arm64: `struct user_pt_regs`, 31 registers, sp, pc and
/// pstate) and `__u64 sample_period`.
pub const CTX_ADDR: i16 = if cfg!(target_arch = "aarch64") {
    34 * 8 + 8
} else {
    21 * 8 + 8
};

/// Offsets in `bpf_user_pt_regs_t` of the registers that make an execution's fingerprint:
/// every general-purpose register and the stack pointer (x86-64 `struct pt_regs`: r15 to di,
/// then sp; arm64 `struct user_pt_regs`: x0 to x30, sp). An interrupt returns to a breakpoint
/// with every register as it was, while two executions differ in some (a loop counter, a
/// timestamp, a pointer): callee-saved registers alone were not enough on a KASAN kernel, whose
/// code keeps more on the stack.
pub const FINGERPRINT_REGS: &[i16] = if cfg!(target_arch = "aarch64") {
    &[
        0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160,
        168, 176, 184, 192, 200, 208, 216, 224, 232, 240, 248,
    ]
} else {
    &[
        0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 152,
    ]
};

/// One BPF instruction, as `struct bpf_insn` lays it out on a little-endian machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    /// Opcode.
    pub code: u8,
    /// `dst_reg` in the low nibble, `src_reg` in the high one.
    pub regs: u8,
    /// Offset.
    pub off: i16,
    /// Immediate.
    pub imm: i32,
}

const _: () = assert!(std::mem::size_of::<Insn>() == 8);

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

/// `dst = src` (64-bit).
const fn mov_reg(dst: u8, src: u8) -> Insn {
    insn(0xbf, dst, src, 0, 0)
}
/// `dst = imm` (64-bit, sign-extended).
const fn mov_imm(dst: u8, imm: i32) -> Insn {
    insn(0xb7, dst, 0, 0, imm)
}
/// `dst ^= src` (64-bit).
const fn xor_reg(dst: u8, src: u8) -> Insn {
    insn(0xaf, dst, src, 0, 0)
}
/// `dst += imm` (64-bit).
const fn add_imm(dst: u8, imm: i32) -> Insn {
    insn(0x07, dst, 0, 0, imm)
}
/// `dst = *(u64 *)(src + off)`.
const fn load64(dst: u8, src: u8, off: i16) -> Insn {
    insn(0x79, dst, src, off, 0)
}
/// `*(u64 *)(dst + off) = src`.
const fn store64(dst: u8, off: i16, src: u8) -> Insn {
    insn(0x7b, dst, src, off, 0)
}
/// `call helper`.
const fn call(helper: i32) -> Insn {
    insn(0x85, 0, 0, 0, helper)
}
/// `if dst == imm goto +off`.
const fn jeq_imm(dst: u8, imm: i32, off: i16) -> Insn {
    insn(0x15, dst, 0, off, imm)
}
/// `exit`.
const fn exit() -> Insn {
    insn(0x95, 0, 0, 0, 0)
}
/// `dst = imm64` (two instructions); `src` 1 (`BPF_PSEUDO_MAP_FD`) makes `imm` a map's fd.
const fn ld_imm64(dst: u8, src: u8, imm: u64) -> [Insn; 2] {
    [
        insn(0x18, dst, src, 0, imm as u32 as i32),
        insn(0, 0, 0, 0, (imm >> 32) as u32 as i32),
    ]
}

/// `BPF_FUNC_map_lookup_elem`.
const MAP_LOOKUP_ELEM: i32 = 1;
/// `BPF_FUNC_perf_event_output`.
const PERF_EVENT_OUTPUT: i32 = 25;
/// `BPF_FUNC_probe_read_kernel`.
const PROBE_READ_KERNEL: i32 = 113;
/// `BPF_F_CURRENT_CPU`.
const F_CURRENT_CPU: u64 = 0xffff_ffff;
/// `BPF_PSEUDO_MAP_FD`.
const PSEUDO_MAP_FD: u8 = 1;
/// The frame pointer.
const R10: u8 = 10;

/// What the program sends per hit: the `PERF_SAMPLE_RAW` data of the output sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SiteWord {
    /// The breakpoint's address.
    pub bp_addr: u64,
    /// The site it belongs to (0 if the map has none).
    pub site: u64,
    /// The site's first four bytes at the hit, little-endian (0 if unread).
    pub word: u32,
    /// The XOR of the interrupted registers ([`FINGERPRINT_REGS`]): the same execution hit
    /// twice has the same one.
    pub fingerprint: u64,
}

/// The size of [`SiteWord`] on the wire: four u64 (the word's upper half is zero).
pub const SITE_WORD_SIZE: usize = 32;

impl SiteWord {
    /// Decodes the program's output.
    pub fn parse(raw: &[u8]) -> Option<Self> {
        use crate::platform::breakpoint::u64_at;
        Some(Self {
            bp_addr: u64_at(raw, 0)?,
            site: u64_at(raw, 8)?,
            word: u64_at(raw, 16)? as u32,
            fingerprint: u64_at(raw, 24)?,
        })
    }
}

/// The program, for the hash map `sites` (u64 watched address to u64 site) and the
/// `PERF_EVENT_ARRAY` `out` (CPU to its `BPF_OUTPUT` event).
///
/// Stack: `[r10 - 8]` the lookup key; `[r10 - 40, r10 - 8)` the [`SiteWord`] sent.
pub fn site_word_program(sites_fd: i32, out_fd: i32) -> Vec<Insn> {
    let mut p = vec![
        mov_reg(6, 1),
        load64(1, 6, CTX_ADDR),
        store64(R10, -8, 1),
        store64(R10, -40, 1),
        mov_imm(7, 0),
        store64(R10, -32, 7),
        store64(R10, -24, 7),
    ];
    for &off in FINGERPRINT_REGS {
        p.extend([load64(2, 6, off), xor_reg(7, 2)]);
    }
    p.push(store64(R10, -16, 7));
    p.extend(ld_imm64(1, PSEUDO_MAP_FD, sites_fd as u32 as u64));
    p.extend([
        mov_reg(2, R10),
        add_imm(2, -8),
        call(MAP_LOOKUP_ELEM),
        // No site for this address: send it with site 0.
        jeq_imm(0, 0, 6),
        load64(3, 0, 0),
        store64(R10, -32, 3),
        mov_reg(1, R10),
        add_imm(1, -24),
        mov_imm(2, 4),
        call(PROBE_READ_KERNEL),
        mov_reg(1, 6),
    ]);
    p.extend(ld_imm64(2, PSEUDO_MAP_FD, out_fd as u32 as u64));
    p.extend(ld_imm64(3, 0, F_CURRENT_CPU));
    p.extend([
        mov_reg(4, R10),
        add_imm(4, -40),
        mov_imm(5, SITE_WORD_SIZE as i32),
        call(PERF_EVENT_OUTPUT),
        mov_imm(0, 0),
        exit(),
    ]);
    p
}

fn bpf(cmd: libc::c_long, attr: &mut [u64]) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a zero-padded `union bpf_attr` prefix of the size passed, which the
    // kernel reads (and for some commands writes) within that size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr) as libc::c_uint,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn fd_of(rc: libc::c_long) -> OwnedFd {
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(rc as i32) }
}

/// A BPF map.
#[derive(Debug)]
pub struct Map {
    fd: OwnedFd,
}

impl Map {
    /// `BPF_MAP_CREATE` of `map_type` with `key_size`/`value_size` bytes and room for
    /// `max_entries`.
    pub fn create(
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
    ) -> io::Result<Self> {
        let mut attr = [0u64; 16];
        attr[0] = u64::from(map_type) | (u64::from(key_size) << 32);
        attr[1] = u64::from(value_size) | (u64::from(max_entries) << 32);
        Ok(Self {
            fd: fd_of(bpf(BPF_MAP_CREATE, &mut attr)?),
        })
    }

    /// `BPF_MAP_UPDATE_ELEM` with `BPF_ANY`; `key` and `value` must have the map's sizes.
    pub fn update(&self, key: &[u8], value: &[u8]) -> io::Result<()> {
        let mut attr = [0u64; 4];
        attr[0] = self.fd.as_raw_fd() as u32 as u64;
        attr[1] = key.as_ptr() as u64;
        attr[2] = value.as_ptr() as u64;
        bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
    }

    /// The map's descriptor, for a program's `ld_imm64`.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

/// A loaded program.
#[derive(Debug)]
pub struct Prog {
    fd: OwnedFd,
}

impl Prog {
    /// `BPF_PROG_LOAD` of a `BPF_PROG_TYPE_PERF_EVENT` program under the GPL (its helpers are
    /// GPL-only). A refusal carries the verifier's log.
    pub fn load_perf_event(insns: &[Insn]) -> Result<Self, String> {
        let license = c"GPL";
        let mut log = vec![0u8; 64 * 1024];
        let mut attr = [0u64; 16];
        attr[0] = u64::from(BPF_PROG_TYPE_PERF_EVENT) | ((insns.len() as u64) << 32);
        attr[1] = insns.as_ptr() as u64;
        attr[2] = license.as_ptr() as u64;
        attr[3] = 1 | ((log.len() as u64) << 32);
        attr[4] = log.as_mut_ptr() as u64;
        match bpf(BPF_PROG_LOAD, &mut attr) {
            Ok(rc) => Ok(Self { fd: fd_of(rc) }),
            Err(e) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                Err(format!(
                    "BPF_PROG_LOAD: {e}; verifier: {}",
                    String::from_utf8_lossy(&log[..end]).trim()
                ))
            }
        }
    }

    /// Attaches the program to the perf event `event` (`PERF_EVENT_IOC_SET_BPF`).
    pub fn attach(&self, event: &impl AsRawFd) -> io::Result<()> {
        // SAFETY: the ioctl takes the program's descriptor as an integer argument, on a perf
        // event descriptor the caller owns.
        let rc = unsafe {
            libc::ioctl(
                event.as_raw_fd(),
                PERF_EVENT_IOC_SET_BPF as _,
                self.fd.as_raw_fd(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(p: &[Insn]) -> Vec<u8> {
        p.iter()
            .flat_map(|i| {
                let mut b = vec![i.code, i.regs];
                b.extend(i.off.to_le_bytes());
                b.extend(i.imm.to_le_bytes());
                b
            })
            .collect()
    }

    #[test]
    fn encodings_match_the_kernels_macros() {
        // BPF_MOV64_REG(BPF_REG_6, BPF_REG_1), BPF_LDX_MEM(BPF_DW, 1, 6, 176),
        // BPF_STX_MEM(BPF_DW, BPF_REG_10, BPF_REG_1, -8), as bytes (as bpftool prints them).
        assert_eq!(bytes(&[mov_reg(6, 1)]), [0xbf, 0x16, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            bytes(&[load64(1, 6, 176)]),
            [0x79, 0x61, 0xb0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(&[store64(R10, -8, 1)]),
            [0x7b, 0x1a, 0xf8, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(
            bytes(&ld_imm64(1, PSEUDO_MAP_FD, 5)),
            [0x18, 0x11, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(bytes(&[call(113)]), [0x85, 0, 0, 0, 113, 0, 0, 0]);
        assert_eq!(bytes(&[exit()]), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(PERF_EVENT_IOC_SET_BPF, 0x4004_2408);
    }

    #[test]
    fn the_miss_branch_lands_on_the_output() {
        let p = site_word_program(3, 4);
        let j = p.iter().position(|i| i.code == 0x15).unwrap();
        let target = j + 1 + p[j].off as usize;
        assert_eq!(p[target], mov_reg(1, 6), "the jump skips to `r1 = ctx`");
        assert_eq!(p.last(), Some(&exit()));
        assert_eq!(p.len(), 31 + 2 * FINGERPRINT_REGS.len());
    }

    #[test]
    fn site_word_round_trip() {
        let mut raw = 0x1000u64.to_ne_bytes().to_vec();
        raw.extend(0x2000u64.to_ne_bytes());
        raw.extend(0xd420_0100u64.to_ne_bytes());
        raw.extend(0x77u64.to_ne_bytes());
        raw.extend([0; 4]);
        assert_eq!(
            SiteWord::parse(&raw),
            Some(SiteWord {
                bp_addr: 0x1000,
                site: 0x2000,
                word: 0xd420_0100,
                fingerprint: 0x77
            })
        );
        assert_eq!(SiteWord::parse(&raw[..28]), None);
    }
}
