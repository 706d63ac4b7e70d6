//! The trap path cannot be probed: every call made from textpoke's `.kprobes.text` section (its
//! trap handler, which kprobes refuse, like `NOKPROBE_SYMBOL`s) must land in that section or
//! on a symbol of the module's `_kprobe_blacklist`. A kprobe anywhere the handler goes would
//! recurse into the handler.
//!
//! Read from the built module with `llvm-objdump -dr` (the relocations name every call's
//! target) and `llvm-objdump -t`; the guest agent then checks that `register_kprobe` refuses
//! each of these symbols on the running kernel.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// The entry point of the trap path: the engine's handler, which the kernel's early trap hook
/// (patch 0007) calls on both arches.
pub const ROOTS: &[&str] = &["textpoke_trap"];

/// What the module's trap path is made of.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrapPath {
    /// Functions in `.kprobes.text`.
    pub in_section: BTreeSet<String>,
    /// Functions named by the module's `_kprobe_blacklist`.
    pub blacklisted: BTreeSet<String>,
    /// For each function of `.kprobes.text`, the functions it calls.
    pub calls: BTreeMap<String, BTreeSet<String>>,
}

impl TrapPath {
    /// Every function reachable from [`ROOTS`] through calls inside `.kprobes.text`.
    pub fn reachable(&self) -> BTreeSet<String> {
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut todo: Vec<String> = ROOTS
            .iter()
            .filter(|r| self.in_section.contains(**r) || self.blacklisted.contains(**r))
            .map(|r| (*r).to_owned())
            .collect();
        while let Some(f) = todo.pop() {
            if !seen.insert(f.clone()) {
                continue;
            }
            if let Some(callees) = self.calls.get(&f) {
                todo.extend(callees.iter().cloned());
            }
        }
        seen
    }

    /// The functions reachable from the roots that kprobes would accept: in neither set.
    pub fn escapes(&self) -> Vec<String> {
        self.reachable()
            .into_iter()
            .filter(|c| !self.in_section.contains(c) && !self.blacklisted.contains(c))
            .collect()
    }
}

fn objdump(args: &[&str], ko: &Path) -> Result<String, String> {
    let out = Command::new("llvm-objdump")
        .args(args)
        .arg(ko)
        .output()
        .map_err(|e| format!("llvm-objdump: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "llvm-objdump {args:?} {}: {}",
            ko.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The target symbol of a relocation line (`OFFSET: R_X86_64_PLT32 sym-0x4`), without addend.
fn reloc_symbol(line: &str) -> Option<(&str, String)> {
    let mut w = line.split_whitespace();
    let _offset = w.next()?;
    let kind = w.next()?;
    let sym = w.next()?;
    let sym = sym
        .split_once(['+', '-'])
        .map_or(sym, |(s, _)| s)
        .to_owned();
    Some((kind, sym))
}

/// Parses `llvm-objdump -t` (symbols and sections: `NOKPROBE_SYMBOL(f)` leaves a
/// `_kbl_addr_f` in `_kprobe_blacklist`) and `-dr -j .kprobes.text` (calls).
pub fn parse(symbols: &str, code: &str) -> TrapPath {
    let mut t = TrapPath::default();
    for line in symbols.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        // addr flags [type] section size name
        let Some(name) = w.last() else {
            continue;
        };
        if w.len() >= 5 && w.contains(&".kprobes.text") && w.contains(&"F") {
            t.in_section.insert((*name).to_owned());
        }
        if let Some(f) = name.strip_prefix("_kbl_addr_") {
            t.blacklisted.insert(f.to_owned());
        }
    }
    let mut current = String::new();
    for line in code.lines() {
        let l = line.trim();
        // A function's start: `0000000000000000 <name>:`.
        if let Some(name) = l
            .strip_suffix(">:")
            .and_then(|l| l.split_once(" <"))
            .map(|(_, n)| n)
        {
            current = name.to_owned();
            continue;
        }
        if let Some((kind, sym)) = reloc_symbol(l) {
            // Calls and tail calls: PLT32 on x86, CALL26/JUMP26 on arm64.
            if matches!(
                kind,
                "R_X86_64_PLT32" | "R_AARCH64_CALL26" | "R_AARCH64_JUMP26"
            ) && !sym.starts_with('.')
            {
                t.calls.entry(current.clone()).or_default().insert(sym);
            }
        }
    }
    t
}

/// Reads the trap path of module `ko`.
pub fn read(ko: &Path) -> Result<TrapPath, String> {
    let symbols = objdump(&["-t"], ko)?;
    let code = objdump(&["-dr", "--no-show-raw-insn", "-j", ".kprobes.text"], ko)?;
    Ok(parse(&symbols, &code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_out_of_the_section_escapes() {
        let symbols = "\
0000000000000000 g     F .kprobes.text\t0000000000000010 textpoke_trap
0000000000000010 l     F .kprobes.text\t0000000000000010 lookup
0000000000000000 g     F .text\t0000000000000010 textpoke_helper_cpu
0000000000000040 l     F .text\t0000000000000010 leaky
0000000000000008 l     O _kprobe_blacklist\t0000000000000008 _kbl_addr_textpoke_helper_cpu
";
        let code = "\
0000000000000000 <textpoke_trap>:
       2a:      \tcallq\t0x2f <textpoke_trap+0x2f>
\t\t000000000000002b:  R_X86_64_PLT32\ttextpoke_helper_cpu-0x4
\t\t0000000000000044:  R_X86_64_PLT32\tlookup-0x4
\t\t0000000000000050:  R_X86_64_PC32\t.bss+0x1c
";
        let t = parse(symbols, code);
        assert!(t.escapes().is_empty(), "{t:?}");
        let leaky = format!("{code}\t\t0000000000000060:  R_X86_64_PLT32\tleaky-0x4\n");
        assert_eq!(parse(symbols, &leaky).escapes(), ["leaky"]);
        let arm =
            "0000000000000000 <textpoke_trap>:\n\t\t0000000000000008:  R_AARCH64_CALL26\tleaky\n";
        assert_eq!(parse(symbols, arm).escapes(), ["leaky"]);
        // A call out of the section from a function the roots never reach is no escape.
        let unreached =
            "0000000000000010 <lookup>:\n\t\t0000000000000018:  R_X86_64_PLT32\tleaky-0x4\n";
        assert!(parse(symbols, unreached).escapes().is_empty());
    }
}
