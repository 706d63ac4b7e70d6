//! `/proc/kallsyms`, read once per question: the one parser of it in the agent.
//!
//! A line is `ADDRESS KIND NAME` for the kernel image and `ADDRESS KIND NAME [MODULE]` for a
//! module. The agent runs as root, so the addresses are real (not zeroed by `kptr_restrict`);
//! a zero address is still treated as absent, since nothing lives there.

use std::fmt;

/// One symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Its address.
    pub addr: u64,
    /// `nm`'s type letter: `t`/`T` text, `d`/`D` data, and so on.
    pub kind: char,
    /// Its name.
    pub name: String,
    /// The module it belongs to, or `None` for the kernel image.
    pub module: Option<String>,
}

impl Symbol {
    /// Whether it is a function (text, local or global).
    pub fn is_text(&self) -> bool {
        matches!(self.kind, 't' | 'T')
    }
}

/// Where a symbol is looked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum In<'a> {
    /// The kernel image.
    Kernel,
    /// The module of that name.
    Module(&'a str),
}

impl In<'_> {
    fn holds(self, s: &Symbol) -> bool {
        match self {
            Self::Kernel => s.module.is_none(),
            Self::Module(m) => s.module.as_deref() == Some(m),
        }
    }
}

impl fmt::Display for In<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Kernel => f.write_str("the kernel image"),
            Self::Module(m) => write!(f, "[{m}]"),
        }
    }
}

/// The symbols of a `/proc/kallsyms` text with a nonzero address; lines that are not symbols
/// are left out.
pub fn parse(text: &str) -> Vec<Symbol> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16)
                .ok()
                .filter(|&a| a != 0)?;
            let mut kind = f.next()?.chars();
            let (Some(kind), None) = (kind.next(), kind.next()) else {
                return None;
            };
            let name = f.next()?.to_owned();
            let module = match f.next() {
                None => None,
                Some(m) => Some(m.strip_prefix('[')?.strip_suffix(']')?.to_owned()),
            };
            Some(Symbol {
                addr,
                kind,
                name,
                module,
            })
        })
        .collect()
}

/// Every symbol the kernel lists now.
pub fn read() -> Result<Vec<Symbol>, String> {
    crate::platform::sys::read_text("/proc/kallsyms")
        .map(|t| parse(&t))
        .map_err(|e| format!("/proc/kallsyms: {e}"))
}

/// The address of `name` in `place` among `symbols`.
pub fn lookup(symbols: &[Symbol], name: &str, place: In<'_>) -> Option<u64> {
    symbols
        .iter()
        .find(|s| s.name == name && place.holds(s))
        .map(|s| s.addr)
}

/// `(address, name)` of the functions of `module` among `symbols`, by address.
pub fn functions_of(symbols: &[Symbol], module: &str) -> Vec<(u64, String)> {
    let mut out: Vec<(u64, String)> = symbols
        .iter()
        .filter(|s| s.is_text() && In::Module(module).holds(s))
        .map(|s| (s.addr, s.name.clone()))
        .collect();
    out.sort();
    out
}

/// The address of `name` in `place` now, or `None` if it is not listed.
pub fn find(name: &str, place: In<'_>) -> Result<Option<u64>, String> {
    Ok(lookup(&read()?, name, place))
}

/// The address of `name` in `place`; an error names what is missing.
pub fn address(name: &str, place: In<'_>) -> Result<u64, String> {
    find(name, place)?.ok_or_else(|| format!("no {name} in {place} in /proc/kallsyms"))
}

/// The addresses of the first and the last function of `module`; an error if it has none.
pub fn function_span(module: &str) -> Result<(u64, u64), String> {
    let functions = module_functions(module)?;
    match (functions.first(), functions.last()) {
        (Some(&(first, _)), Some(&(last, _))) => Ok((first, last)),
        _ => Err(format!("no functions of [{module}] in /proc/kallsyms")),
    }
}

/// `(address, name)` of the functions of `module`, by address; an error if it has none.
pub fn module_functions(module: &str) -> Result<Vec<(u64, String)>, String> {
    let out = functions_of(&read()?, module);
    if out.is_empty() {
        return Err(format!("no functions of [{module}] in /proc/kallsyms"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
ffffffff81000000 T _stext
0000000000000000 A fixed_percpu_data
ffffffff82000000 D ftrace_list_ops
ffffffffc0002000 t textpoke_helper_cpu\t[textpoke]
ffffffffc0001000 T textpoke_batch_commit\t[textpoke]
ffffffffc0003000 d textpoke_state\t[textpoke]
ffffffffc0005000 t _stext\t[other]
not a line
ffffffffc0006000 tt two_letters
";

    #[test]
    fn lines_become_symbols() {
        let s = parse(TEXT);
        // The zero address, the junk line and the two-letter kind are left out.
        assert_eq!(s.len(), 6);
        assert_eq!(
            s[3],
            Symbol {
                addr: 0xffff_ffff_c000_1000,
                kind: 'T',
                name: "textpoke_batch_commit".into(),
                module: Some("textpoke".into()),
            }
        );
        assert!(s[3].is_text() && !s[4].is_text());
    }

    #[test]
    fn places_tell_the_kernel_from_modules() {
        let s = parse(TEXT);
        assert_eq!(
            lookup(&s, "_stext", In::Kernel),
            Some(0xffff_ffff_8100_0000)
        );
        assert_eq!(
            lookup(&s, "_stext", In::Module("other")),
            Some(0xffff_ffff_c000_5000)
        );
        assert_eq!(lookup(&s, "textpoke_helper_cpu", In::Kernel), None);
        assert_eq!(In::Module("textpoke").to_string(), "[textpoke]");
        // Functions only (not textpoke_state), by address.
        let f = functions_of(&s, "textpoke");
        assert_eq!(
            f,
            [
                (0xffff_ffff_c000_1000, "textpoke_batch_commit".to_owned()),
                (0xffff_ffff_c000_2000, "textpoke_helper_cpu".to_owned()),
            ]
        );
    }
}
