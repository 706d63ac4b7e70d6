//! A minimal ELF64 little-endian AArch64 ET_EXEC writer: one PT_LOAD (R+X) covering `.text`
//! at file offset [`TEXT_OFF`], and `.symtab`, `.strtab`, `.shstrtab`.
//!
//! perf reads the instruction bytes OpenCSD asks for from the file an MMAP2 record names (or
//! from `--vmlinux` for kernel addresses), so this file is what the decoder walks; the symbols
//! only name the functions in perf's output. Layouts from the ELF-64 specification as in
//! `/usr/include/elf.h` (Elf64_Ehdr, Elf64_Phdr, Elf64_Shdr, Elf64_Sym).

/// File offset of `.text`, page aligned as a loader expects.
pub const TEXT_OFF: u64 = 0x1000;

/// A function symbol.
#[derive(Clone, Debug)]
pub struct Sym {
    /// Its name.
    pub name: String,
    /// Its address.
    pub addr: u64,
    /// Its size in bytes.
    pub size: u64,
}

impl Sym {
    /// A symbol named `name` of `size` bytes at `addr`.
    pub fn new(name: &str, addr: u64, size: u64) -> Self {
        Sym {
            name: name.into(),
            addr,
            size,
        }
    }
}

fn p16(v: &mut Vec<u8>, x: u16) {
    v.extend_from_slice(&x.to_le_bytes())
}
fn p32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes())
}
fn p64(v: &mut Vec<u8>, x: u64) {
    v.extend_from_slice(&x.to_le_bytes())
}

/// Append `name` and its NUL to a string table; its offset there.
fn add_str(table: &mut Vec<u8>, name: &str) -> u32 {
    let off = u32::try_from(table.len()).expect("a string table of this writer stays small");
    table.extend_from_slice(name.as_bytes());
    table.push(0);
    off
}

/// An ELF executable whose `.text` holds `text`, loaded at `text_addr`, with `syms`.
pub fn write_elf(text_addr: u64, text: &[u8], syms: &[Sym]) -> Vec<u8> {
    let mut strtab = vec![0u8];
    let mut symtab = vec![0u8; 24]; // the null symbol
    for s in syms {
        p32(&mut symtab, add_str(&mut strtab, &s.name));
        symtab.push(0x12); // st_info: STB_GLOBAL << 4 | STT_FUNC
        symtab.push(0); // st_other
        p16(&mut symtab, 1); // st_shndx: .text
        p64(&mut symtab, s.addr);
        p64(&mut symtab, s.size);
    }
    let mut shstrtab = vec![0u8];
    let names = [".text", ".symtab", ".strtab", ".shstrtab"].map(|n| add_str(&mut shstrtab, n));

    let text_len = text.len() as u64;
    let symtab_off = (TEXT_OFF + text_len + 7) & !7;
    let strtab_off = symtab_off + symtab.len() as u64;
    let shstrtab_off = strtab_off + strtab.len() as u64;
    let shoff = (shstrtab_off + shstrtab.len() as u64 + 7) & !7;

    let mut f = Vec::new();
    // Elf64_Ehdr: ELFCLASS64, ELFDATA2LSB, EV_CURRENT.
    f.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    p16(&mut f, 2); // e_type: ET_EXEC
    p16(&mut f, 183); // e_machine: EM_AARCH64
    p32(&mut f, 1); // e_version
    p64(&mut f, text_addr); // e_entry
    p64(&mut f, 64); // e_phoff
    p64(&mut f, shoff);
    p32(&mut f, 0); // e_flags
    p16(&mut f, 64); // e_ehsize
    p16(&mut f, 56); // e_phentsize
    p16(&mut f, 1); // e_phnum
    p16(&mut f, 64); // e_shentsize
    p16(&mut f, 5); // e_shnum
    p16(&mut f, 4); // e_shstrndx
                    // Elf64_Phdr: PT_LOAD, PF_R | PF_X.
    p32(&mut f, 1);
    p32(&mut f, 5);
    p64(&mut f, TEXT_OFF);
    p64(&mut f, text_addr); // p_vaddr
    p64(&mut f, text_addr); // p_paddr
    p64(&mut f, text_len); // p_filesz
    p64(&mut f, text_len); // p_memsz
    p64(&mut f, 0x1000); // p_align
    f.resize(TEXT_OFF as usize, 0);
    f.extend_from_slice(text);
    f.resize(symtab_off as usize, 0);
    f.extend_from_slice(&symtab);
    f.extend_from_slice(&strtab);
    f.extend_from_slice(&shstrtab);
    f.resize(shoff as usize, 0);
    // Elf64_Shdr: name, type, flags, addr, offset, size, link, info, addralign, entsize.
    // SHT_PROGBITS = 1, SHT_SYMTAB = 2 (link: .strtab, info: first global = 1),
    // SHT_STRTAB = 3; SHF_ALLOC | SHF_EXECINSTR = 6.
    let sections = [
        (0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        (names[0], 1, 6, text_addr, TEXT_OFF, text_len, 0, 0, 4, 0),
        (
            names[1],
            2,
            0,
            0,
            symtab_off,
            symtab.len() as u64,
            3,
            1,
            8,
            24,
        ),
        (
            names[2],
            3,
            0,
            0,
            strtab_off,
            strtab.len() as u64,
            0,
            0,
            1,
            0,
        ),
        (
            names[3],
            3,
            0,
            0,
            shstrtab_off,
            shstrtab.len() as u64,
            0,
            0,
            1,
            0,
        ),
    ];
    for (name, ty, flags, addr, off, size, link, info, align, entsize) in sections {
        p32(&mut f, name);
        p32(&mut f, ty);
        p64(&mut f, flags);
        p64(&mut f, addr);
        p64(&mut f, off);
        p64(&mut f, size);
        p32(&mut f, link);
        p32(&mut f, info);
        p64(&mut f, align);
        p64(&mut f, entsize);
    }
    f
}
