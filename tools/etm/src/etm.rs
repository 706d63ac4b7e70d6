//! ETMv4 instruction-trace packet encoder and CoreSight frame formatter.
//!
//! Packet layouts follow the trace packet descriptions of the ETMv4 architecture
//! specification (Arm IHI0064), and were checked against the packet processor perf's decoder
//! runs, OpenCSD's `decoder/source/etmv4/trc_pkt_proc_etmv4i.cpp` (the header byte table in
//! `BuildIPacketTable()`, addresses in `extract64BitLongAddr()`, context in
//! `extractAndSetContextInfo()`, timestamps in `extractTSField64()`). The formatter follows the
//! CoreSight Architecture Specification (Arm IHI0029), "Trace Formatter", as OpenCSD's
//! `decoder/source/trc_frame_deformatter.cpp` unpacks it.
//!
//! Only what the scenarios need is encoded: atom format 1, uncompressed 64-bit IS0 addresses,
//! no cycle counts, no return stack, no branch broadcast. That is a legal stream for
//! TRCCONFIGR = 0 (plus CID/TS), though not what hardware emits.

use crate::a64::{Kind, Step};

/// Encoder state: the bytes written so far and a log of the packets, for failure messages.
#[derive(Debug, Default)]
pub struct Encoder {
    /// The ETMv4 byte stream.
    pub out: Vec<u8>,
    /// Byte offset and name of each packet.
    pub log: Vec<(usize, String)>,
}

/// Timestamps while encoding: one after every `every` atoms, valued `base` plus
/// `per_insn` per instruction executed so far.
#[derive(Clone, Copy, Debug)]
pub struct Timestamps {
    /// Timestamp of the first instruction.
    pub base: u64,
    /// Timestamp increment per executed instruction.
    pub per_insn: u64,
    /// Atoms between timestamp packets.
    pub every: usize,
}

impl Encoder {
    /// An empty stream.
    pub fn new() -> Self {
        Self::default()
    }

    fn packet(&mut self, name: String, bytes: &[u8]) {
        self.log.push((self.out.len(), name));
        self.out.extend_from_slice(bytes);
    }

    /// A-Sync: eleven `0x00` then `0x80`. The decoder finds packet alignment here and
    /// discards everything before it.
    pub fn async_(&mut self) {
        let mut p = [0u8; 12];
        p[11] = 0x80;
        self.packet("A-Sync".into(), &p);
    }

    /// Trace Info, header `0x01`, with a PLCTL byte of 0: no INFO, KEY, SPEC or CYCT sections
    /// follow, so cycle counting and conditional tracing are off, P0 key and speculation
    /// depth 0. The decoder needs one after A-Sync before it decodes anything.
    pub fn trace_info(&mut self) {
        self.packet("Trace Info".into(), &[0x01, 0x00]);
    }

    /// Trace On, header `0x04`: a discontinuity; an address packet must follow.
    pub fn trace_on(&mut self) {
        self.packet("Trace On".into(), &[0x04]);
    }

    /// Timestamp without cycle count, header `0x02`: the value 7 bits per byte, least
    /// significant first, bit 7 set when another byte follows; a ninth byte carries 8 bits.
    pub fn timestamp(&mut self, ts: u64) {
        let mut p = vec![0x02];
        let mut v = ts;
        for i in 0..9 {
            if i == 8 {
                p.push(v as u8);
                break;
            }
            let low = (v & 0x7F) as u8;
            v >>= 7;
            if v == 0 {
                p.push(low);
                break;
            }
            p.push(low | 0x80);
        }
        self.packet(format!("Timestamp {ts:#x}"), &p);
    }

    /// The 8 address bytes of a 64-bit IS0 (A64) long address: A[8:2], A[15:9], then
    /// A[23:16] up to A[63:56].
    fn addr64_is0(a: u64) -> [u8; 8] {
        assert!(
            a.is_multiple_of(4),
            "A64 instruction address {a:#x} is not word aligned"
        );
        let mut p = [0u8; 8];
        p[0] = ((a >> 2) & 0x7F) as u8;
        p[1] = ((a >> 9) & 0x7F) as u8;
        for (i, byte) in p[2..].iter_mut().enumerate() {
            *byte = (a >> (16 + 8 * i)) as u8;
        }
        p
    }

    /// Long Address, 64-bit IS0, header `0x9D`: the target of a taken indirect branch.
    pub fn long_addr64(&mut self, a: u64) {
        let mut p = vec![0x9D];
        p.extend_from_slice(&Self::addr64_is0(a));
        self.packet(format!("Address L 64 IS0 {a:#x}"), &p);
    }

    /// Address with Context, 64-bit IS0, header `0x85`: the address, then the context
    /// information byte (EL in bits 1:0, SF = AArch64 in bit 4, NS in bit 5, C in bit 7;
    /// V in bit 6 stays 0: no VMID), then, when C is set, CONTEXTIDR in TRCIDR2.CIDSIZE = 4
    /// little-endian bytes.
    pub fn addr_ctxt64(&mut self, a: u64, el: u8, contextidr: Option<u32>) {
        assert!(el < 4, "exception level {el} does not exist");
        let mut p = vec![0x85];
        p.extend_from_slice(&Self::addr64_is0(a));
        let info = el | 1 << 4 | 1 << 5;
        match contextidr {
            None => p.push(info),
            Some(c) => {
                p.push(info | 1 << 7);
                p.extend_from_slice(&c.to_le_bytes());
            }
        }
        self.packet(
            format!("Address+Context 64 IS0 {a:#x} EL{el} {contextidr:?}"),
            &p,
        );
    }

    /// Atom format 1 (`0b1111011x`): one P0 element, `0xF7` = E (taken), `0xF6` = N.
    pub fn atom(&mut self, taken: bool) {
        let (name, byte) = if taken { ("E", 0xF7) } else { ("N", 0xF6) };
        self.packet(format!("Atom F1 {name}"), &[byte]);
    }

    /// Exception, header `0x06`, with one information byte (E1 in bit 0, `TYPE[4:0]` in bits
    /// 5:1, E0 in bit 6, no second byte), then the preferred return address as a Long
    /// Address packet. Type 2 is "Call" (SVC, HVC, SMC).
    pub fn exception(&mut self, etype: u8, ret_addr: u64) {
        assert!(etype < 32, "exception type {etype:#x} does not fit 5 bits");
        self.packet(format!("Exception type {etype:#x}"), &[0x06, etype << 1]);
        self.long_addr64(ret_addr);
    }

    /// Encode an execution as an ETMv4 with TRCCONFIGR.BB = RS = CCI = 0 would: each
    /// branch is a P0 element and gets one atom (E taken, N not taken); a taken indirect
    /// branch is followed by its target address; an SVC is an Exception (Call) whose
    /// handler is not traced (the trace excludes EL1), so tracing restarts at the return
    /// address with Trace On and Address with Context at EL0. `flip_atom` inverts the atom
    /// with that index (to corrupt a stream on purpose).
    pub fn encode_steps(
        &mut self,
        steps: &[Step],
        flip_atom: Option<usize>,
        ts: Option<Timestamps>,
    ) {
        let mut atoms = 0usize;
        for (executed, s) in steps.iter().enumerate() {
            match s.kind {
                Kind::Plain => {}
                Kind::Svc => {
                    self.exception(0x2, s.next);
                    self.trace_on();
                    self.addr_ctxt64(s.next, 0, None);
                }
                Kind::Direct | Kind::Indirect => {
                    self.atom(s.taken != (flip_atom == Some(atoms)));
                    atoms += 1;
                    if s.kind == Kind::Indirect && s.taken {
                        self.long_addr64(s.next);
                    }
                    if let Some(t) = ts.filter(|t| atoms.is_multiple_of(t.every)) {
                        self.timestamp(t.base + (executed as u64 + 1) * t.per_insn);
                    }
                }
            }
        }
    }
}

/// The trace ID byte that ends a formatted stream: ID 0 is the null source, whose data the
/// deformatter discards (IHI0029, "Special trace source IDs").
const NULL_ID: u8 = 0x01;

/// Wrap one source's bytes (trace ID `id`) in 16-byte CoreSight frames.
///
/// In a frame, bytes 0, 2, ..., 14 are "even" bytes: bit 0 set means an ID change to
/// `byte >> 1`, and its flag bit in byte 15 (bit `pos / 2`) says whether the change applies
/// to the next byte (0) or only after it (1, a delayed change); bit 0 clear means a data
/// byte whose bit 0 lives in that flag bit. Odd bytes 1..13 are always data.
///
/// Every frame starts with an ID change, so each is self-describing. The last frame is
/// padded with the null ID; if its last data byte would fall on an even byte, that byte
/// moves to the odd slot after a delayed null-ID change. One more frame of only the null ID
/// follows: perf 6.12 loses the rest of a frame when a timestamp in it makes its decode
/// callback return OCSD_RESP_WAIT and the buffer then ends (cs-etm-decoder.c:772 sends the
/// pending flush only while `processed < len`; cs-etm.c:2087-2117 then moves on), so the
/// stream's real last frame must not be the buffer's last.
pub fn format_frames(data: &[u8], id: u8) -> Vec<u8> {
    assert!(id > 0 && id < 0x70, "trace ID {id:#x} is reserved");
    let mut out = Vec::new();
    for chunk in data.chunks(14) {
        let mut f = [0u8; 16];
        let mut flags = 0u8;
        f[0] = id << 1 | 1;
        let mut pos = 1;
        for &d in chunk {
            if pos % 2 == 0 {
                f[pos] = d & 0xFE;
                flags |= (d & 1) << (pos / 2);
            } else {
                f[pos] = d;
            }
            pos += 1;
        }
        if pos < 15 && pos % 2 == 0 {
            f[pos] = NULL_ID;
        } else if pos < 15 {
            let last = pos - 1;
            f[pos] = chunk[chunk.len() - 1];
            f[last] = NULL_ID;
            flags = (flags & !(1 << (last / 2))) | 1 << (last / 2);
        }
        f[15] = flags;
        out.extend_from_slice(&f);
    }
    let mut null_frame = [0u8; 16];
    null_frame[0] = NULL_ID;
    out.extend_from_slice(&null_frame);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_info_on_atoms_and_long_address() {
        let mut e = Encoder::new();
        e.async_();
        e.trace_info();
        e.trace_on();
        e.atom(true);
        e.atom(false);
        // 0x401008 = 0b0100_0000_0001_0000_0000_1000: A[8:2] = 0x02, A[15:9] = 0x08,
        // A[23:16] = 0x40, higher bytes 0.
        e.long_addr64(0x40_1008);
        let mut want = vec![0; 11];
        want.extend_from_slice(&[0x80, 0x01, 0x00, 0x04, 0xF7, 0xF6]);
        want.extend_from_slice(&[0x9D, 0x02, 0x08, 0x40, 0, 0, 0, 0, 0]);
        assert_eq!(e.out, want);
        assert_eq!(e.log.len(), 6);
    }

    #[test]
    fn address_with_context_timestamp_and_exception() {
        let mut e = Encoder::new();
        // 0xffff_8000_8001_0000: A[8:2] = 0, A[15:9] = 0, then bytes 01 80 00 80 ff ff.
        // Info: EL1 (1) | SF (0x10) | NS (0x20) | C (0x80) = 0xB1; CONTEXTIDR 4242 = 0x1092.
        e.addr_ctxt64(0xffff_8000_8001_0000, 1, Some(4242));
        assert_eq!(
            e.out,
            [0x85, 0, 0, 0x01, 0x80, 0, 0x80, 0xff, 0xff, 0xB1, 0x92, 0x10, 0, 0]
        );

        // 1_000_000 = 61 * 2^14 + 4 * 2^7 + 64: groups 64, 4, 61 -> C0 84 3D.
        let mut e = Encoder::new();
        e.timestamp(1_000_000);
        assert_eq!(e.out, [0x02, 0xC0, 0x84, 0x3D]);

        // Type Call (2) in bits 5:1 -> 0x04; return address 0x401024: A[8:2] = 0x09.
        let mut e = Encoder::new();
        e.exception(2, 0x40_1024);
        assert_eq!(e.out, [0x06, 0x04, 0x9D, 0x09, 0x08, 0x40, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn frames() {
        // ID 0x10 -> 0x21; 3 data bytes at 1 (odd), 2 (even: bit 0 of 0xF6 is 0, flag 0),
        // 3 (odd); the null ID at even byte 4, immediate.
        let f = format_frames(&[0xF7, 0xF6, 0x03], 0x10);
        assert_eq!(f.len(), 32);
        assert_eq!(&f[..5], &[0x21, 0xF7, 0xF6, 0x03, 0x01]);
        assert_eq!(f[15], 0);
        assert_eq!(f[16..], [0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);

        // 2 data bytes: the second would be at even byte 2; it moves to byte 3 behind a
        // delayed null-ID change at 2 (flag bit 1 set).
        let g = format_frames(&[0xF7, 0x03], 0x10);
        assert_eq!(&g[..4], &[0x21, 0xF7, 0x01, 0x03]);
        assert_eq!(g[15], 0x02);

        // An odd data byte on an even slot keeps its bit 0 in the flag byte: 0xF7 at
        // byte 2 is stored as 0xF6 with flag bit 1.
        let h = format_frames(&[0xF6, 0xF7, 0xF6], 0x10);
        assert_eq!(&h[..5], &[0x21, 0xF6, 0xF6, 0xF6, 0x01]);
        assert_eq!(h[15], 0x02);
    }
}
