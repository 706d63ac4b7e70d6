//! Reading kernel memory through `/proc/kcore`.
//!
//! `/proc/kcore` is an ELF64 core file whose `PT_LOAD` program headers map kernel virtual
//! addresses (kernel text, modules, vmalloc, the linear map) to file offsets. [`Kcore`] parses the
//! ELF header and the program headers once, then reads bytes at a kernel virtual address with
//! `pread` at the matching offset. Both guests (x86_64, arm64) are little-endian, and so is the
//! only ELF this accepts.
//!
//! Reading needs `CAP_SYS_RAWIO` (root in the guest). The kernel builds the headers when the
//! file is opened; hot-plugged memory after that is not seen until [`Kcore::open`] again.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// `PT_LOAD`: a segment of memory.
pub const PT_LOAD: u32 = 1;

/// Size of the ELF64 file header.
const EHDR_SIZE: usize = 64;

/// Size of an ELF64 program header.
const PHDR_SIZE: usize = 56;

/// `e_phnum` value meaning the real count is in section header 0's `sh_info`.
const PN_XNUM: u16 = 0xffff;

/// One `PT_LOAD` segment of the core file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The kernel virtual address of its first byte (`p_vaddr`).
    pub vaddr: u64,
    /// Where its bytes are in the file (`p_offset`).
    pub offset: u64,
    /// How many bytes the file holds (`p_filesz`).
    pub filesz: u64,
    /// How many bytes of memory it spans (`p_memsz`).
    pub memsz: u64,
}

impl Segment {
    /// Whether `addr` is within the bytes the file holds.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.vaddr && addr - self.vaddr < self.filesz
    }
}

/// An open `/proc/kcore` (or any little-endian ELF64 core file).
#[derive(Debug)]
pub struct Kcore {
    file: File,
    segments: Vec<Segment>,
}

impl Kcore {
    /// Opens `/proc/kcore` and parses its headers.
    pub fn open() -> io::Result<Self> {
        Self::open_path("/proc/kcore")
    }

    /// Opens the core file at `path` and parses its headers.
    pub fn open_path(path: impl AsRef<Path>) -> io::Result<Self> {
        Self::from_file(File::open(path)?)
    }

    /// Parses the headers of an open core file.
    pub fn from_file(file: File) -> io::Result<Self> {
        let mut ehdr = [0u8; EHDR_SIZE];
        file.read_exact_at(&mut ehdr, 0)?;
        let header = parse_ehdr(&ehdr).map_err(invalid)?;
        let mut phnum = u64::from(header.phnum);
        if header.phnum == PN_XNUM {
            // The count did not fit: it is in the first section header's `sh_info`.
            let mut shdr = [0u8; 64];
            file.read_exact_at(&mut shdr, header.shoff)?;
            phnum = u64::from(u32_at(&shdr, 44));
        }
        let table_len = phnum
            .checked_mul(u64::from(header.phentsize))
            .filter(|&len| len <= 64 << 20)
            .ok_or_else(|| invalid("program header table too large"))?;
        let mut table = vec![0u8; table_len as usize];
        file.read_exact_at(&mut table, header.phoff)?;
        let segments = parse_phdrs(&table, usize::from(header.phentsize));
        Ok(Self { file, segments })
    }

    /// The `PT_LOAD` segments, in file order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Reads `len` bytes of kernel memory at the virtual address `vaddr`.
    ///
    /// The range may span adjacent segments. A range not wholly covered is an error of kind
    /// [`io::ErrorKind::NotFound`] (nothing is read); a read error carries the errno.
    pub fn read(&self, vaddr: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        self.read_into(vaddr, &mut out)?;
        Ok(out)
    }

    /// Reads `out.len()` bytes of kernel memory at `vaddr` into `out`; see [`Kcore::read`].
    pub fn read_into(&self, vaddr: u64, out: &mut [u8]) -> io::Result<()> {
        let pieces = plan_reads(&self.segments, vaddr, out.len()).map_err(|addr| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "kernel address {addr:#x} (reading {} bytes at {vaddr:#x}) is not in /proc/kcore",
                    out.len()
                ),
            )
        })?;
        let mut done = 0;
        for (offset, len) in pieces {
            self.file
                .read_exact_at(&mut out[done..done + len], offset)?;
            done += len;
        }
        Ok(())
    }
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// The fields of the ELF header the reader needs.
#[derive(Debug, PartialEq, Eq)]
struct Ehdr {
    phoff: u64,
    shoff: u64,
    phentsize: u16,
    phnum: u16,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Checks `e_ident` (ELF magic, `ELFCLASS64`, `ELFDATA2LSB`) and takes the header fields.
fn parse_ehdr(b: &[u8; EHDR_SIZE]) -> Result<Ehdr, &'static str> {
    if b[..4] != *b"\x7fELF" {
        return Err("not an ELF file");
    }
    if b[4] != 2 {
        return Err("not an ELF64 file");
    }
    if b[5] != 1 {
        return Err("not a little-endian ELF file");
    }
    let header = Ehdr {
        phoff: u64_at(b, 32),
        shoff: u64_at(b, 40),
        phentsize: u16_at(b, 54),
        phnum: u16_at(b, 56),
    };
    if usize::from(header.phentsize) < PHDR_SIZE {
        return Err("ELF program headers too small");
    }
    Ok(header)
}

/// The `PT_LOAD` entries of a program header table.
fn parse_phdrs(table: &[u8], entsize: usize) -> Vec<Segment> {
    table
        .chunks_exact(entsize)
        .filter(|p| u32_at(p, 0) == PT_LOAD)
        .map(|p| Segment {
            offset: u64_at(p, 8),
            vaddr: u64_at(p, 16),
            filesz: u64_at(p, 32),
            memsz: u64_at(p, 40),
        })
        .collect()
}

/// The `(file offset, length)` pieces that make up `vaddr..vaddr + len`, or the first address
/// no segment covers.
fn plan_reads(segments: &[Segment], vaddr: u64, len: usize) -> Result<Vec<(u64, usize)>, u64> {
    let mut pieces = Vec::new();
    let mut addr = vaddr;
    let mut left = len as u64;
    while left > 0 {
        let seg = segments.iter().find(|s| s.contains(addr)).ok_or(addr)?;
        let in_seg = seg.filesz - (addr - seg.vaddr);
        let take = left.min(in_seg);
        let offset = seg.offset.checked_add(addr - seg.vaddr).ok_or(addr)?;
        pieces.push((offset, take as usize));
        left -= take;
        addr = addr.checked_add(take).ok_or(addr)?;
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Builds a little core file: the ELF header, a `PT_NOTE` and two `PT_LOAD`s, one of them
    /// right after the other in the address space but elsewhere in the file.
    fn synthetic_core() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let text: Vec<u8> = (0..64u8).collect();
        let more: Vec<u8> = (100..132u8).collect();
        let phoff = 64u64;
        let phnum = 3u16;
        let data_at = phoff + u64::from(phnum) * 56;
        let mut f = vec![0u8; 64];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2; // ELFCLASS64
        f[5] = 1; // ELFDATA2LSB
        f[6] = 1; // EV_CURRENT
        f[16..18].copy_from_slice(&4u16.to_le_bytes()); // ET_CORE
        f[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
        f[32..40].copy_from_slice(&phoff.to_le_bytes());
        f[52..54].copy_from_slice(&64u16.to_le_bytes());
        f[54..56].copy_from_slice(&56u16.to_le_bytes());
        f[56..58].copy_from_slice(&phnum.to_le_bytes());
        let phdr = |ty: u32, offset: u64, vaddr: u64, size: u64| {
            let mut p = vec![0u8; 56];
            p[0..4].copy_from_slice(&ty.to_le_bytes());
            p[4..8].copy_from_slice(&7u32.to_le_bytes());
            p[8..16].copy_from_slice(&offset.to_le_bytes());
            p[16..24].copy_from_slice(&vaddr.to_le_bytes());
            p[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
            p[32..40].copy_from_slice(&size.to_le_bytes());
            p[40..48].copy_from_slice(&size.to_le_bytes());
            p
        };
        f.extend(phdr(4, data_at, 0, 8)); // PT_NOTE
                                          // `more` comes first in the file, `text` after it.
        f.extend(phdr(PT_LOAD, data_at + 8 + 32, 0xffff_ffff_8100_0000, 64));
        f.extend(phdr(PT_LOAD, data_at + 8, 0xffff_ffff_8100_0040, 32));
        f.extend([0xeeu8; 8]);
        f.extend(&more);
        f.extend(&text);
        (f, text, more)
    }

    fn write_temp(bytes: &[u8]) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!(
            "textpoke-agent-kcore-{}-{:p}",
            std::process::id(),
            bytes.as_ptr()
        ));
        File::create(&path).unwrap().write_all(bytes).unwrap();
        path
    }

    #[test]
    fn reads_through_segments() {
        let (core, text, more) = synthetic_core();
        let path = write_temp(&core);
        let kcore = Kcore::open_path(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(kcore.segments().len(), 2);
        let base = 0xffff_ffff_8100_0000u64;
        assert_eq!(kcore.read(base, 64).unwrap(), text);
        assert_eq!(kcore.read(base + 10, 5).unwrap(), &text[10..15]);
        assert_eq!(kcore.read(base + 0x40, 32).unwrap(), more);
        // Across the two segments.
        let mut both = text[60..].to_vec();
        both.extend(&more[..4]);
        assert_eq!(kcore.read(base + 60, 8).unwrap(), both);
        assert!(kcore.read(base, 0).unwrap().is_empty());
        // Not covered: before, after, and partly after.
        for (addr, len) in [(base - 1, 1), (base + 96, 1), (base + 90, 10), (0, 4)] {
            let err = kcore.read(addr, len).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::NotFound, "{addr:#x}+{len}");
        }
        // Everything the two segments cover, from its second byte.
        let mut all = text.clone();
        all.extend(&more);
        assert_eq!(kcore.read(base + 1, 95).unwrap(), &all[1..]);
    }

    #[test]
    fn rejects_other_elves() {
        let (mut core, _, _) = synthetic_core();
        core[5] = 2; // big-endian
        let path = write_temp(&core);
        let err = Kcore::open_path(&path).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        let (mut core, _, _) = synthetic_core();
        core[4] = 1; // ELF32
        let hdr: [u8; 64] = core[..64].try_into().unwrap();
        assert!(parse_ehdr(&hdr).is_err());
        core[4] = 2;
        core[0] = 0;
        let hdr: [u8; 64] = core[..64].try_into().unwrap();
        assert_eq!(parse_ehdr(&hdr), Err("not an ELF file"));
    }
}
