//! A perf.data (`PERFILE2`) writer: file header, attributes with their ids, a data section of
//! records, and feature sections.
//!
//! Layouts are those of linux 6.12: `tools/perf/util/header.h` (file header, features),
//! `tools/include/uapi/linux/perf_event.h` (kernel records, `perf_event_attr`),
//! `tools/lib/perf/include/perf/event.h` (perf's own records) and `tools/perf/util/cs-etm.h`
//! (the CoreSight metadata in AUXTRACE_INFO). Line numbers below are of those files.

// The record and sample constants the kernel module's record writer uses (kernel/record.rs):
// one copy of each in the project.
use textpoke_core::record::{self as krecord, SampleId, SampleIdLayout};
pub use textpoke_core::record::{
    PERF_RECORD_MISC_KERNEL, PERF_SAMPLE_CPU, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_TID,
    PERF_SAMPLE_TIME,
};
// Record types: perf_event.h:879-1218 (kernel), event.h:467-478 (perf's own).
/// `PERF_RECORD_MMAP`, perf_event.h:879.
pub const PERF_RECORD_MMAP: u32 = 1;
/// `PERF_RECORD_COMM`, perf_event.h:900.
pub const PERF_RECORD_COMM: u32 = 3;
/// `PERF_RECORD_EXIT`, perf_event.h:911.
pub const PERF_RECORD_EXIT: u32 = 4;
/// `PERF_RECORD_MMAP2`, perf_event.h:1065.
pub const PERF_RECORD_MMAP2: u32 = 10;
/// `PERF_RECORD_AUX`, perf_event.h:1079.
pub const PERF_RECORD_AUX: u32 = 11;
/// `PERF_RECORD_ITRACE_START`, perf_event.h:1091.
pub const PERF_RECORD_ITRACE_START: u32 = 12;
/// `PERF_RECORD_KSYMBOL`, perf_event.h:1165.
pub const PERF_RECORD_KSYMBOL: u32 = 17;
/// `PERF_RECORD_KSYMBOL_TYPE_OOL`, perf_event.h:1239: text perf has no copy of.
pub const PERF_RECORD_KSYMBOL_TYPE_OOL: u16 = 2;
/// `PERF_RECORD_FINISHED_ROUND`, event.h:467.
pub const PERF_RECORD_FINISHED_ROUND: u32 = 68;
/// `PERF_RECORD_AUXTRACE_INFO`, event.h:469.
pub const PERF_RECORD_AUXTRACE_INFO: u32 = 70;
/// `PERF_RECORD_AUXTRACE`, event.h:470.
pub const PERF_RECORD_AUXTRACE: u32 = 71;
/// `PERF_RECORD_TIME_CONV`, event.h:478.
pub const PERF_RECORD_TIME_CONV: u32 = 79;

/// `PERF_RECORD_MISC_USER`, perf_event.h:765.
pub const PERF_RECORD_MISC_USER: u16 = 2;
/// `PERF_RECORD_MISC_COMM_EXEC`, perf_event.h:784.
pub const PERF_RECORD_MISC_COMM_EXEC: u16 = 1 << 13;

/// `PERF_SAMPLE_IP`, perf_event.h:140.
pub const PERF_SAMPLE_IP: u64 = 1 << 0;
/// `PERF_SAMPLE_PERIOD`, perf_event.h:148.
pub const PERF_SAMPLE_PERIOD: u64 = 1 << 8;

/// `PERF_AUX_FLAG_CORESIGHT_FORMAT_RAW`, perf_event.h:1269: the AUX data is one source's
/// unformatted byte stream; without it, 16-byte formatter frames. perf picks the decoder's
/// input mode from it (cs-etm.c:3202).
pub const PERF_AUX_FLAG_CORESIGHT_FORMAT_RAW: u64 = 0x0100;

// perf_event_attr flag bits: the bitfield order of perf_event.h:414-458, from bit 0.
/// `disabled`, perf_event.h:414.
pub const ATTR_DISABLED: u64 = 1 << 0;
/// `exclude_kernel`, perf_event.h:419.
pub const ATTR_EXCLUDE_KERNEL: u64 = 1 << 5;
/// `exclude_hv`, perf_event.h:420.
pub const ATTR_EXCLUDE_HV: u64 = 1 << 6;
/// `mmap`, perf_event.h:422.
pub const ATTR_MMAP: u64 = 1 << 8;
/// `comm`, perf_event.h:423.
pub const ATTR_COMM: u64 = 1 << 9;
/// `enable_on_exec`, perf_event.h:426.
pub const ATTR_ENABLE_ON_EXEC: u64 = 1 << 12;
/// `task`, perf_event.h:427.
pub const ATTR_TASK: u64 = 1 << 13;
/// `sample_id_all`, perf_event.h:441.
pub const ATTR_SAMPLE_ID_ALL: u64 = 1 << 18;
/// `mmap2`, perf_event.h:448.
pub const ATTR_MMAP2: u64 = 1 << 23;
/// `comm_exec`, perf_event.h:449.
pub const ATTR_COMM_EXEC: u64 = 1 << 24;
/// `text_poke`, perf_event.h:458.
pub const ATTR_TEXT_POKE: u64 = 1 << 33;

/// `PERF_ATTR_SIZE_VER8`, perf_event.h:381: the attribute size written, up to `config3`.
pub const ATTR_SIZE: usize = 136;

// Feature bits: the enum at header.h:16-51.
/// `HEADER_HOSTNAME`, header.h:21.
pub const HEADER_HOSTNAME: u32 = 3;
/// `HEADER_OSRELEASE`, header.h:22.
pub const HEADER_OSRELEASE: u32 = 4;
/// `HEADER_VERSION`, header.h:23.
pub const HEADER_VERSION: u32 = 5;
/// `HEADER_ARCH`, header.h:24.
pub const HEADER_ARCH: u32 = 6;
/// `HEADER_NRCPUS`, header.h:25.
pub const HEADER_NRCPUS: u32 = 7;
/// `HEADER_EVENT_DESC`, header.h:30.
pub const HEADER_EVENT_DESC: u32 = 12;
/// `HEADER_PMU_MAPPINGS`, header.h:34.
pub const HEADER_PMU_MAPPINGS: u32 = 16;
/// `HEADER_AUXTRACE`, header.h:36: the index of AUXTRACE records. perf 6.12 needs it:
/// `cs_etm__queue_aux_records` (cs-etm.c:3285-3303) walks it to split the trace by AUX record
/// and learn each buffer's format, and without it `perf script` was seen to crash (SIGSEGV).
pub const HEADER_AUXTRACE: u32 = 18;

/// `PERF_AUXTRACE_CS_ETM`, auxtrace.h:48: AUXTRACE_INFO's `type` for CoreSight ETM.
pub const PERF_AUXTRACE_CS_ETM: u32 = 3;

/// Indices of AUXTRACE_INFO's `priv[]` for CoreSight (cs-etm.h:22-80): a global header, then
/// one block per CPU.
pub mod cs_etm {
    /// `CS_HEADER_VERSION`, cs-etm.h:23.
    pub const HEADER_VERSION: usize = 0;
    /// `CS_PMU_TYPE_CPUS`, cs-etm.h:25: PMU type << 32 | number of CPUs.
    pub const PMU_TYPE_CPUS: usize = 1;
    /// `CS_ETM_SNAPSHOT`, cs-etm.h:26.
    pub const SNAPSHOT: usize = 2;
    /// Words of the global header.
    pub const HEADER_WORDS: usize = 3;
    /// `CS_HEADER_CURRENT_VERSION`, cs-etm.h:43; cs-etm-base.c:181 rejects later versions.
    pub const CURRENT_VERSION: u64 = 2;
    /// `CS_ETM_MAGIC`, cs-etm.h:47 (per-CPU block).
    pub const MAGIC: usize = 0;
    /// `CS_ETM_CPU`, cs-etm.h:48.
    pub const CPU: usize = 1;
    /// `CS_ETM_NR_TRC_PARAMS`, cs-etm.h:50: the number of words after this one.
    pub const NR_TRC_PARAMS: usize = 2;
    /// `CS_ETMV4_TRCCONFIGR`, cs-etm.h:71.
    pub const TRCCONFIGR: usize = 3;
    /// `CS_ETMV4_TRCTRACEIDR`, cs-etm.h:72.
    pub const TRCTRACEIDR: usize = 4;
    /// `CS_ETMV4_TRCIDR0`, cs-etm.h:74.
    pub const TRCIDR0: usize = 5;
    /// `CS_ETMV4_TRCIDR1`, cs-etm.h:75.
    pub const TRCIDR1: usize = 6;
    /// `CS_ETMV4_TRCIDR2`, cs-etm.h:76.
    pub const TRCIDR2: usize = 7;
    /// `CS_ETMV4_TRCIDR8`, cs-etm.h:77.
    pub const TRCIDR8: usize = 8;
    /// `CS_ETMV4_TRCAUTHSTATUS`, cs-etm.h:78.
    pub const TRCAUTHSTATUS: usize = 9;
    /// `CS_ETMV4_TS_SOURCE`, cs-etm.h:79.
    pub const TS_SOURCE: usize = 10;
    /// `CS_ETMV4_PRIV_MAX`, cs-etm.h:80: words of an ETMv4 per-CPU block.
    pub const ETMV4_WORDS: usize = 11;
    /// `__perf_cs_etmv4_magic`, cs-etm.h:224.
    pub const ETMV4_MAGIC: u64 = 0x4040_4040_4040_4040;
}

fn p16(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_le_bytes())
}
/// Append `x` little-endian.
pub fn p32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes())
}
fn p64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes())
}

/// `struct perf_event_header`, perf_event.h:815.
#[repr(C)]
struct EventHeader {
    type_: u32,
    misc: u16,
    size: u16,
}
const _: () = assert!(std::mem::size_of::<EventHeader>() == 8);

/// `struct perf_file_section`, header.h:59.
#[repr(C)]
struct FileSection {
    offset: u64,
    size: u64,
}

/// `struct perf_file_header`, header.h:67: 256 feature bits (`HEADER_FEAT_BITS`, header.h:51).
#[repr(C)]
struct FileHeader {
    magic: [u8; 8],
    size: u64,
    attr_size: u64,
    attrs: FileSection,
    data: FileSection,
    event_types: FileSection,
    adds_features: [u64; 4],
}
const _: () = assert!(std::mem::size_of::<FileHeader>() == 104);

/// `struct perf_record_auxtrace`, event.h:339, header included: the record's `header.size`,
/// which the AUXTRACE index must repeat (cs-etm.c:3137). The trace bytes follow it.
#[repr(C)]
struct AuxtraceRecord {
    header: EventHeader,
    size: u64,
    offset: u64,
    reference: u64,
    idx: u32,
    tid: u32,
    cpu: u32,
    reserved: u32,
}
const AUXTRACE_RECORD_SIZE: usize = std::mem::size_of::<AuxtraceRecord>();
const _: () = assert!(AUXTRACE_RECORD_SIZE == 48);

/// `struct perf_record_time_conv`, event.h:438, header included.
#[repr(C)]
struct TimeConvRecord {
    header: EventHeader,
    time_shift: u64,
    time_mult: u64,
    time_zero: u64,
    time_cycles: u64,
    time_mask: u64,
    cap_user_time_zero: u8,
    cap_user_time_short: u8,
    reserved: [u8; 6],
}
const _: () = assert!(std::mem::size_of::<TimeConvRecord>() == 56);

/// The fields of a `perf_event_attr` that the scenarios set; the rest are written as 0.
#[derive(Clone, Debug)]
pub struct Attr {
    /// `type`: the PMU type (for the ETM, the number AUXTRACE_INFO names).
    pub type_: u32,
    /// `config`.
    pub config: u64,
    /// `sample_period`.
    pub sample_period: u64,
    /// `sample_type`.
    pub sample_type: u64,
    /// The flag bitfield word (`ATTR_*`).
    pub flags: u64,
    /// The event's id; cs-etm.c:1758 derives its sample ids from `evsel->core.id[0]`.
    pub id: u64,
    /// The event name HEADER_EVENT_DESC gives it.
    pub name: String,
}

impl Attr {
    /// The `perf_event_attr` (perf_event.h:389) bytes, [`ATTR_SIZE`] long.
    pub fn bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(ATTR_SIZE);
        p32(&mut v, self.type_);
        p32(&mut v, ATTR_SIZE as u32);
        p64(&mut v, self.config);
        p64(&mut v, self.sample_period);
        p64(&mut v, self.sample_type);
        p64(&mut v, 0); // read_format
        p64(&mut v, self.flags);
        v.resize(ATTR_SIZE, 0);
        v
    }
}

/// The `sample_id` of a record of event `id`, written by process `pid` at `time` on CPU 0.
pub fn sample_id(pid: u32, time: u64, id: u64) -> SampleId {
    cpu_sample_id(0, pid, time, id)
}

/// The `sample_id` of a record of event `id`, written by process `pid` at `time` on `cpu`.
/// In a CPU-wide trace the CPU of an AUX record says which AUXTRACE buffer it describes
/// (cs-etm.c:3152).
pub fn cpu_sample_id(cpu: u32, pid: u32, time: u64, id: u64) -> SampleId {
    SampleId {
        pid: Some(pid),
        tid: Some(pid),
        time: Some(time),
        cpu: Some(cpu),
        identifier: Some(id),
        ..SampleId::default()
    }
}

/// The `sample_id_all` trailer of a non-sample record, written by the module's own trailer
/// writer (`textpoke_core::record::write_sample_id`).
pub fn id_trailer(sample_type: u64, sample: &SampleId) -> Vec<u8> {
    let layout = SampleIdLayout::new(sample_type);
    let mut v = vec![0; layout.size()];
    let written = krecord::write_sample_id(&mut v, sample, layout);
    assert_eq!(written, Ok(v.len()), "the buffer is the layout's size");
    v
}

fn pad8(v: &mut Vec<u8>) {
    v.resize(v.len().next_multiple_of(8), 0);
}

/// A NUL-terminated string padded to 8 bytes (COMM and MMAP file names).
fn cstr8(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    pad8(&mut v);
    v
}

/// A feature string as `do_write_string` (header.c:182) writes it: u32 length including the
/// NUL, rounded up to 64, then the bytes.
pub fn feat_string(s: &str) -> Vec<u8> {
    let len = (s.len() + 1).next_multiple_of(64);
    let mut v = Vec::new();
    p32(&mut v, len as u32);
    let mut b = s.as_bytes().to_vec();
    b.resize(len, 0);
    v.extend_from_slice(&b);
    v
}

/// `HEADER_EVENT_DESC` as `write_event_desc` (header.c:500) writes it: u32 count, u32 attr
/// size, then per event the attr, u32 number of ids, the name, the ids.
pub fn feat_event_desc(attrs: &[Attr]) -> Vec<u8> {
    let mut v = Vec::new();
    p32(&mut v, attrs.len() as u32);
    p32(&mut v, ATTR_SIZE as u32);
    for a in attrs {
        v.extend_from_slice(&a.bytes());
        p32(&mut v, 1);
        v.extend_from_slice(&feat_string(&a.name));
        p64(&mut v, a.id);
    }
    v
}

/// `HEADER_PMU_MAPPINGS` as `write_pmu_mappings` (header.c:740) writes it: u32 count, then
/// per PMU its u32 type and name.
pub fn feat_pmu_mappings(pmus: &[(u32, &str)]) -> Vec<u8> {
    let mut v = Vec::new();
    p32(&mut v, pmus.len() as u32);
    for (t, n) in pmus {
        p32(&mut v, *t);
        v.extend_from_slice(&feat_string(n));
    }
    v
}

/// A perf.data file being assembled: records are appended in file order.
#[derive(Debug)]
pub struct PerfFile {
    attrs: Vec<Attr>,
    data: Vec<u8>,
    /// Offset in the data section of each AUXTRACE record, for the HEADER_AUXTRACE index.
    auxtrace_offsets: Vec<u64>,
    /// Feature bit and contents of each optional feature.
    pub features: Vec<(u32, Vec<u8>)>,
}

impl PerfFile {
    /// A file with these events.
    pub fn new(attrs: Vec<Attr>) -> Self {
        PerfFile {
            attrs,
            data: Vec::new(),
            auxtrace_offsets: Vec::new(),
            features: Vec::new(),
        }
    }

    /// Append a record whose body (trailer included) is `body`; its offset in the data.
    fn record(&mut self, type_: u32, misc: u16, body: &[u8]) -> usize {
        let off = self.data.len();
        let size = std::mem::size_of::<EventHeader>() + body.len();
        assert!(
            size.is_multiple_of(8),
            "record type {type_} is {size} bytes, not a multiple of 8"
        );
        let size = u16::try_from(size).expect("the records written here are small");
        let h = EventHeader { type_, misc, size };
        p32(&mut self.data, h.type_);
        p16(&mut self.data, h.misc);
        p16(&mut self.data, h.size);
        self.data.extend_from_slice(body);
        off
    }

    /// `PERF_RECORD_COMM` (perf_event.h:900); `exec` marks it as due to exec.
    pub fn comm(&mut self, pid: u32, comm: &str, exec: bool, trailer: &[u8]) {
        let mut b = Vec::new();
        p32(&mut b, pid);
        p32(&mut b, pid);
        b.extend_from_slice(&cstr8(comm));
        b.extend_from_slice(trailer);
        let misc = if exec { PERF_RECORD_MISC_COMM_EXEC } else { 0 };
        self.record(PERF_RECORD_COMM, misc, &b);
    }

    /// `PERF_RECORD_MMAP2` (perf_event.h:1065) of a private read+exec file mapping of `len`
    /// bytes at `start`, from the file offset [`crate::elf::TEXT_OFF`], no inode data.
    pub fn mmap2(&mut self, pid: u32, start: u64, len: u64, path: &str, tr: &[u8]) {
        let pgoff = crate::elf::TEXT_OFF;
        let mut b = Vec::new();
        p32(&mut b, pid);
        p32(&mut b, pid);
        p64(&mut b, start);
        p64(&mut b, len);
        p64(&mut b, pgoff);
        b.extend_from_slice(&[0; 24]); // maj, min, ino, ino_generation
        p32(&mut b, 5); // prot: PROT_READ | PROT_EXEC
        p32(&mut b, 2); // flags: MAP_PRIVATE
        b.extend_from_slice(&cstr8(path));
        b.extend_from_slice(tr);
        self.record(PERF_RECORD_MMAP2, PERF_RECORD_MISC_USER, &b);
    }

    /// `PERF_RECORD_MMAP` (perf_event.h:879) of the kernel text as
    /// `__perf_event__synthesize_kernel_mmap` (synthetic-events.c:1114-1174) writes it: pid -1,
    /// misc KERNEL, `pgoff` = `start` = the address of `_text`, name `[kernel.kallsyms]_text`.
    pub fn mmap_kernel(&mut self, start: u64, len: u64, trailer: &[u8]) {
        let mut b = Vec::new();
        p32(&mut b, u32::MAX);
        p32(&mut b, 0);
        p64(&mut b, start);
        p64(&mut b, len);
        p64(&mut b, start);
        b.extend_from_slice(&cstr8("[kernel.kallsyms]_text"));
        b.extend_from_slice(trailer);
        self.record(PERF_RECORD_MMAP, PERF_RECORD_MISC_KERNEL, &b);
    }

    /// `PERF_RECORD_ITRACE_START` (perf_event.h:1091).
    pub fn itrace_start(&mut self, pid: u32, trailer: &[u8]) {
        let mut b = Vec::new();
        p32(&mut b, pid);
        p32(&mut b, pid);
        b.extend_from_slice(trailer);
        self.record(PERF_RECORD_ITRACE_START, 0, &b);
    }

    /// `PERF_RECORD_EXIT` (perf_event.h:911) of a process whose parent has the same pid.
    pub fn exit(&mut self, pid: u32, trailer: &[u8]) {
        let mut b = Vec::new();
        for _ in 0..4 {
            p32(&mut b, pid); // pid, ppid, tid, ptid
        }
        p64(&mut b, 0); // time
        b.extend_from_slice(trailer);
        self.record(PERF_RECORD_EXIT, 0, &b);
    }

    /// `PERF_RECORD_AUX` (perf_event.h:1079): `size` bytes at `offset` of the AUX area.
    pub fn aux(&mut self, offset: u64, size: u64, flags: u64, trailer: &[u8]) {
        let mut b = Vec::new();
        p64(&mut b, offset);
        p64(&mut b, size);
        p64(&mut b, flags);
        b.extend_from_slice(trailer);
        self.record(PERF_RECORD_AUX, 0, &b);
    }

    /// `PERF_RECORD_TEXT_POKE` (perf_event.h:1203) of the kernel: `old` replaced by `new` at
    /// `addr`, written by the module's own record writer
    /// (`textpoke_core::record::write_text_poke`).
    pub fn text_poke(
        &mut self,
        addr: u64,
        old: &[u8],
        new: &[u8],
        sample_type: u64,
        id: &SampleId,
    ) {
        let layout = SampleIdLayout::new(sample_type);
        let size = krecord::text_poke_size(old.len(), new.len(), layout);
        let mut rec = vec![0; size.expect("a poke's bytes are few")];
        let misc = PERF_RECORD_MISC_KERNEL;
        let written = krecord::write_text_poke(&mut rec, misc, addr, old, new, id, layout);
        assert_eq!(written, Ok(rec.len()), "the buffer is the record's size");
        self.data.extend_from_slice(&rec);
    }

    /// `PERF_RECORD_KSYMBOL`, perf_event.h:1165. `[addr, addr + len)` registered (or with
    /// `unregister`, removed) as text of type `ksym_type` named `name`, its name NUL-padded to
    /// 8 bytes as `perf_event_ksymbol()` pads it, then the `sample_id` trailer.
    pub fn ksymbol(
        &mut self,
        addr: u64,
        len: u32,
        ksym_type: u16,
        unregister: bool,
        name: &str,
        trailer: &[u8],
    ) {
        let mut b = Vec::new();
        p64(&mut b, addr);
        p32(&mut b, len);
        p16(&mut b, ksym_type);
        p16(&mut b, u16::from(unregister));
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        while !b.len().is_multiple_of(8) {
            b.push(0);
        }
        b.extend_from_slice(trailer);
        self.record(PERF_RECORD_KSYMBOL, 0, &b);
    }

    /// `PERF_RECORD_TIME_CONV` (event.h:438) with `cap_user_time_zero`: perf time =
    /// ((ts * mult) >> shift) + zero. A perf-synthesized record: no `sample_id_all` trailer.
    pub fn time_conv(&mut self, shift: u64, mult: u64, zero: u64) {
        let r = TimeConvRecord {
            header: EventHeader {
                type_: PERF_RECORD_TIME_CONV,
                misc: 0,
                size: 0,
            },
            time_shift: shift,
            time_mult: mult,
            time_zero: zero,
            time_cycles: 0,
            time_mask: u64::MAX,
            cap_user_time_zero: 1,
            cap_user_time_short: 0,
            reserved: [0; 6],
        };
        let mut b = Vec::new();
        for w in [
            r.time_shift,
            r.time_mult,
            r.time_zero,
            r.time_cycles,
            r.time_mask,
        ] {
            p64(&mut b, w);
        }
        b.extend_from_slice(&[r.cap_user_time_zero, r.cap_user_time_short]);
        b.extend_from_slice(&r.reserved);
        self.record(r.header.type_, r.header.misc, &b);
    }

    /// `PERF_RECORD_FINISHED_ROUND` (event.h:467).
    pub fn finished_round(&mut self) {
        self.record(PERF_RECORD_FINISHED_ROUND, 0, &[]);
    }

    /// `PERF_RECORD_AUXTRACE_INFO` (event.h:332): u32 type, u32 reserved, u64 `priv[]`.
    pub fn auxtrace_info(&mut self, auxtrace_type: u32, priv_: &[u64]) {
        let mut b = Vec::new();
        p32(&mut b, auxtrace_type);
        p32(&mut b, 0);
        for &x in priv_ {
            p64(&mut b, x);
        }
        self.record(PERF_RECORD_AUXTRACE_INFO, 0, &b);
    }

    /// `PERF_RECORD_AUXTRACE` (event.h:339) followed by `trace` padded to 8 bytes (the
    /// padding counts in `size`, not in `header.size`). `cpu` = `u32::MAX` (-1) makes perf
    /// decode per thread and match the AUX record by `tid` (cs-etm.c:3148); a CPU
    /// makes it decode per CPU and match the AUX record by the CPU of its `sample_id`
    /// (cs-etm.c:3152). `idx` is the queue perf puts the buffer in (cs-etm.c:3184): the
    /// index of the AUX area, which `perf record` maps once per CPU, so the CPU's index in
    /// a CPU-wide trace (`auxtrace_mmap_params__set_idx`, auxtrace.c:173-197).
    pub fn auxtrace(&mut self, trace: &[u8], reference: u64, idx: u32, tid: u32, cpu: u32) {
        let mut padded = trace.to_vec();
        pad8(&mut padded);
        let r = AuxtraceRecord {
            header: EventHeader {
                type_: PERF_RECORD_AUXTRACE,
                misc: 0,
                size: 0,
            },
            size: padded.len() as u64,
            offset: 0,
            reference,
            idx,
            tid,
            cpu,
            reserved: 0,
        };
        let mut b = Vec::new();
        for w in [r.size, r.offset, r.reference] {
            p64(&mut b, w);
        }
        for w in [r.idx, r.tid, r.cpu, r.reserved] {
            p32(&mut b, w);
        }
        let off = self.record(r.header.type_, r.header.misc, &b);
        assert_eq!(
            self.data.len() - off,
            AUXTRACE_RECORD_SIZE,
            "AUXTRACE header layout"
        );
        self.auxtrace_offsets.push(off as u64);
        self.data.extend_from_slice(&padded);
    }

    /// The file's bytes: header, attribute ids, attributes, data, then the feature section
    /// table (one `perf_file_section` per set feature bit, in bit order) and the features.
    /// HEADER_AUXTRACE holds the index as `auxtrace_index__do_write` (auxtrace.c:908) writes
    /// it: u64 count, then per record its file offset and header size.
    pub fn finish(&self) -> Vec<u8> {
        let n = self.attrs.len() as u64;
        let header_size = std::mem::size_of::<FileHeader>() as u64;
        let ids_off = header_size;
        let attrs_off = ids_off + 8 * n;
        // A file attr is the attr then a perf_file_section of its ids.
        let file_attr_size = (ATTR_SIZE + std::mem::size_of::<FileSection>()) as u64;
        let data_off = attrs_off + n * file_attr_size;

        let mut features = self.features.clone();
        let mut index = Vec::new();
        p64(&mut index, self.auxtrace_offsets.len() as u64);
        for &off in &self.auxtrace_offsets {
            p64(&mut index, data_off + off);
            p64(&mut index, AUXTRACE_RECORD_SIZE as u64);
        }
        features.push((HEADER_AUXTRACE, index));
        features.sort_by_key(|f| f.0);
        let mut adds_features = [0u64; 4];
        for (bit, _) in &features {
            adds_features[*bit as usize / 64] |= 1 << (bit % 64);
        }
        let h = FileHeader {
            magic: *b"PERFILE2",
            size: header_size,
            attr_size: file_attr_size,
            attrs: FileSection {
                offset: attrs_off,
                size: n * file_attr_size,
            },
            data: FileSection {
                offset: data_off,
                size: self.data.len() as u64,
            },
            event_types: FileSection { offset: 0, size: 0 },
            adds_features,
        };

        let mut out = h.magic.to_vec();
        for w in [
            h.size,
            h.attr_size,
            h.attrs.offset,
            h.attrs.size,
            h.data.offset,
            h.data.size,
        ] {
            p64(&mut out, w);
        }
        for w in [h.event_types.offset, h.event_types.size] {
            p64(&mut out, w);
        }
        for w in h.adds_features {
            p64(&mut out, w);
        }
        assert_eq!(out.len() as u64, header_size, "perf_file_header layout");
        for a in &self.attrs {
            p64(&mut out, a.id);
        }
        for (i, a) in self.attrs.iter().enumerate() {
            out.extend_from_slice(&a.bytes());
            p64(&mut out, ids_off + 8 * i as u64);
            p64(&mut out, 8);
        }
        assert_eq!(out.len() as u64, data_off, "attribute section layout");
        out.extend_from_slice(&self.data);
        let mut content_off = out.len() + 16 * features.len();
        for (_, c) in &features {
            p64(&mut out, content_off as u64);
            p64(&mut out, c.len() as u64);
            content_off += c.len();
        }
        for (_, c) in &features {
            out.extend_from_slice(c);
        }
        out
    }
}
