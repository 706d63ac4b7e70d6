//! Every writer of kernel text in the patched tree is named in docs/writers.md.
//!
//! A decoder needs a record for every change to the text it decodes, so the project keeps a
//! table of everything in the kernel that changes kernel text after boot: each function that
//! uses one of the arches' text-writing primitives ([`PRIMITIVES`]), with whether it is
//! recorded and whether our kernels reach it. This module finds those uses in a kernel tree
//! (the C sources of the generic code, arch/x86 and arch/arm64) and compares them with the
//! table: a use the table does not name fails, and so does a row that names no use any more,
//! so the table cannot fall behind the tree, nor the tree behind the table.
//!
//! The search is textual: a primitive's name as a whole word in code (not in a comment, a
//! string, a line that defines or declares a function, or an `EXPORT_SYMBOL`/`NOKPROBE_SYMBOL`
//! line), inside the function whose definition began last at column 0, as the kernel's coding
//! style writes every definition. A use by pointer (a primitive passed as an argument) counts
//! as a use.

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

/// The functions that write kernel text: x86's `text_poke` family (arch/x86/kernel/alternative.c,
/// `text_poke_many` from patch 0009) and arm64's instruction writers (arch/arm64/kernel/patching.c,
/// `aarch64_insn_write_many` from patch 0010).
pub const PRIMITIVES: &[&str] = &[
    "__text_poke",
    "text_poke",
    "text_poke_bp",
    "text_poke_bp_batch",
    "text_poke_copy",
    "text_poke_copy_locked",
    "text_poke_early",
    "text_poke_finish",
    "text_poke_kgdb",
    "text_poke_many",
    "text_poke_queue",
    "text_poke_set",
    "__aarch64_insn_write",
    "aarch64_insn_copy",
    "aarch64_insn_patch_text",
    "aarch64_insn_patch_text_nosync",
    "aarch64_insn_set",
    "aarch64_insn_write",
    "aarch64_insn_write_literal_u64",
    "aarch64_insn_write_many",
];

/// Directories of the tree that hold no code of the two kernels we build, or no kernel code.
const SKIPPED: &[&str] = &["Documentation", "tools", "scripts", "samples", "usr"];

/// One use of a primitive: where, in which function.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Use {
    /// The file, relative to the tree.
    pub file: String,
    /// The function the use is in (`(file scope)` outside any).
    pub function: String,
    /// The primitive used.
    pub primitive: String,
}

impl fmt::Display for Use {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}() uses {}",
            self.file, self.function, self.primitive
        )
    }
}

/// The uses of [`PRIMITIVES`] in the C source `text` of `file`.
pub fn uses_in(file: &str, text: &str) -> BTreeSet<Use> {
    let mut out = BTreeSet::new();
    let mut function = "(file scope)".to_owned();
    let mut in_comment = false;
    for raw in text.lines() {
        let line = code_of(raw, &mut in_comment);
        if line.trim().is_empty() {
            continue;
        }
        let trimmed = line.trim_start();
        let at_column_0 = !line.starts_with([' ', '\t']);
        if at_column_0 && !trimmed.starts_with(['#', '}', '{']) {
            // A definition or declaration begins here (or a type, or a macro's use): the
            // function is its last identifier before `(`, if any.
            if let Some(name) = defined_name(trimmed) {
                function = name;
            }
            continue;
        }
        if trimmed.starts_with('#')
            || trimmed.starts_with("EXPORT_SYMBOL")
            || trimmed.starts_with("NOKPROBE_SYMBOL")
        {
            continue;
        }
        for word in used_words(&line) {
            if PRIMITIVES.contains(&word) {
                out.insert(Use {
                    file: file.to_owned(),
                    function: function.clone(),
                    primitive: word.to_owned(),
                });
            }
        }
    }
    out
}

/// `raw` with comments and string literals blanked; `in_comment` carries a `/* */` comment
/// from one line to the next.
fn code_of(raw: &str, in_comment: &mut bool) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if *in_comment {
            if c == '*' && chars.peek() == Some(&'/') {
                chars.next();
                *in_comment = false;
            }
            out.push(' ');
        } else if in_string {
            if c == '\\' {
                chars.next();
            } else if c == '"' {
                in_string = false;
            }
            out.push(' ');
        } else if c == '/' && chars.peek() == Some(&'*') {
            chars.next();
            *in_comment = true;
            out.push(' ');
        } else if c == '/' && chars.peek() == Some(&'/') {
            break;
        } else if c == '"' {
            in_string = true;
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// The identifiers of `line`.
fn words(line: &str) -> impl Iterator<Item = &str> {
    line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
}

/// The identifiers of `line` that are not a member's name (after `.` or `->`): a struct field
/// may share a primitive's name (`attr.text_poke`).
fn used_words(line: &str) -> impl Iterator<Item = &str> {
    let base = line.as_ptr() as usize;
    words(line).filter(move |w| {
        let start = w.as_ptr() as usize - base;
        let before = line[..start].trim_end();
        let after = line[start + w.len()..].trim_start();
        // A bitfield's declaration (`text_poke : 1`) is no use either.
        !(before.ends_with('.')
            || before.ends_with("->")
            || (after.starts_with(':') && !after.starts_with("::")))
    })
}

/// The name a column-0 line defines: the identifier right before its first `(`.
fn defined_name(line: &str) -> Option<String> {
    let head = &line[..line.find('(')?];
    words(head).last().map(str::to_owned)
}

/// Whether `rel` (a path relative to the tree) is searched.
fn searched(rel: &Path) -> bool {
    let mut parts = rel.components().map(|c| c.as_os_str().to_string_lossy());
    match parts.next().as_deref() {
        Some(top) if SKIPPED.contains(&top) => false,
        Some("arch") => matches!(parts.next().as_deref(), None | Some("x86" | "arm64")),
        _ => true,
    }
}

/// Every use of [`PRIMITIVES`] in the C sources of the kernel tree `tree`.
pub fn scan(tree: &Path) -> Result<BTreeSet<Use>, String> {
    let mut out = BTreeSet::new();
    let mut todo: Vec<PathBuf> = vec![tree.to_owned()];
    while let Some(dir) = todo.pop() {
        let entries = fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
            let path = entry.path();
            let rel = path.strip_prefix(tree).unwrap_or(&path);
            let kind = entry
                .file_type()
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if kind.is_dir() {
                // Object trees (`build-*`) and hidden directories hold no source.
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if searched(rel) && !name.starts_with('.') && !name.starts_with("build-") {
                    todo.push(path);
                }
            } else if kind.is_file()
                && matches!(path.extension().and_then(|e| e.to_str()), Some("c" | "h"))
                && searched(rel)
            {
                let bytes = fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                let text = String::from_utf8_lossy(&bytes);
                if PRIMITIVES.iter().any(|p| text.contains(p)) {
                    out.extend(uses_in(&rel.to_string_lossy(), &text));
                }
            }
        }
    }
    Ok(out)
}

/// The uses docs/writers.md names: in its table rows, the first three cells `file`,
/// `function()` and `primitive`, each in backquotes. The last two may list several, separated
/// by commas: each function then uses each primitive.
pub fn table(markdown: &str) -> Result<BTreeSet<Use>, String> {
    let mut out = BTreeSet::new();
    for (i, line) in markdown.lines().enumerate() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // `| a | b | c | ... |` splits into "", a, b, c, ..., "".
        let (Some(file), Some(function), Some(primitives)) =
            (cells.get(1), cells.get(2), cells.get(3))
        else {
            continue;
        };
        let Some(file) = quoted(file) else {
            continue;
        };
        let mut functions = Vec::new();
        for f in function.split(',') {
            let f = quoted(f.trim())
                .and_then(|f| f.strip_suffix("()"))
                .ok_or_else(|| format!("docs/writers.md:{}: a function not as `name()`", i + 1))?;
            functions.push(f);
        }
        for p in primitives.split(',') {
            let p = quoted(p.trim()).ok_or_else(|| {
                format!("docs/writers.md:{}: a primitive not in backquotes", i + 1)
            })?;
            if !PRIMITIVES.contains(&p) {
                return Err(format!(
                    "docs/writers.md:{}: `{p}` is no primitive this check searches for",
                    i + 1
                ));
            }
            // Each function of the row uses each of its primitives.
            for f in &functions {
                out.insert(Use {
                    file: file.to_owned(),
                    function: (*f).to_owned(),
                    primitive: p.to_owned(),
                });
            }
        }
    }
    Ok(out)
}

/// `` `x` `` as `x`.
fn quoted(cell: &str) -> Option<&str> {
    cell.strip_prefix('`')?.strip_suffix('`')
}

/// What the tree and the table disagree on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Disagreement {
    /// Uses in the tree the table does not name.
    pub unnamed: Vec<Use>,
    /// Rows of the table that name no use in the tree.
    pub stale: Vec<Use>,
}

impl Disagreement {
    /// Whether they agree.
    pub fn is_empty(&self) -> bool {
        self.unnamed.is_empty() && self.stale.is_empty()
    }
}

/// Compares the uses found with those the table names.
pub fn compare(found: &BTreeSet<Use>, named: &BTreeSet<Use>) -> Disagreement {
    Disagreement {
        unnamed: found.difference(named).cloned().collect(),
        stale: named.difference(found).cloned().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = r#"
// SPDX-License-Identifier: GPL-2.0
#include <asm/text-patching.h>

/* text_poke() in a comment is no use */
static void __init_or_module arch_arm(struct kprobe *p)
{
	u8 int3 = INT3_INSN_OPCODE;

	text_poke(p->addr, &int3, 1);
	pr_info("text_poke_bp is in a string\n");
	/*
	 * text_poke_copy() in a block comment
	 */
}

void *text_poke_copy(void *addr, const void *opcode, size_t len);

int apply(void)
{
	return write_relocate_add(text_poke_early); // a pointer
}

struct perf_event_attr {
	__u64	text_poke : 1;
};

static bool is_sb(struct perf_event *event)
{
	return event->attr.text_poke || attr . text_poke;
}
EXPORT_SYMBOL_GPL(text_poke);
"#;

    fn u(function: &str, primitive: &str) -> Use {
        Use {
            file: "arch/x86/f.c".into(),
            function: function.into(),
            primitive: primitive.into(),
        }
    }

    #[test]
    fn uses_are_found_in_their_functions_and_nowhere_else() {
        let found = uses_in("arch/x86/f.c", SOURCE);
        let want: BTreeSet<Use> = [u("arch_arm", "text_poke"), u("apply", "text_poke_early")]
            .into_iter()
            .collect();
        assert_eq!(found, want);
    }

    #[test]
    fn a_use_the_table_does_not_name_fails_and_so_does_a_stale_row() {
        let found = uses_in("arch/x86/f.c", SOURCE);
        let doc = "| file | function | primitives | recorded |\n|---|---|---|---|\n\
                   | `arch/x86/f.c` | `arch_arm()` | `text_poke` | yes |\n";
        let named = table(doc).unwrap();
        let d = compare(&found, &named);
        assert_eq!(d.unnamed, [u("apply", "text_poke_early")]);
        assert!(d.stale.is_empty());
        let doc = format!(
            "{doc}| `arch/x86/f.c` | `apply()` | `text_poke_early`, `text_poke_set` | no |\n"
        );
        let d = compare(&found, &table(&doc).unwrap());
        assert!(d.unnamed.is_empty());
        assert_eq!(d.stale, [u("apply", "text_poke_set")]);
    }

    #[test]
    fn a_row_naming_no_known_primitive_is_an_error() {
        assert!(table("| `a.c` | `f()` | `memcpy` | no |\n").is_err());
        assert!(table("| `a.c` | f | `text_poke` | no |\n").is_err());
        assert!(table("| `a.c` | `f` | `text_poke` | no |\n").is_err());
        let two = table("| `a.c` | `f()`, `g()` | `text_poke`, `text_poke_bp` | no |\n").unwrap();
        assert_eq!(two.len(), 4);
    }

    #[test]
    fn only_the_two_arches_and_the_generic_code_are_searched() {
        assert!(searched(Path::new("arch")));
        assert!(searched(Path::new("arch/x86/kernel/alternative.c")));
        assert!(searched(Path::new("arch/arm64/kernel/patching.c")));
        assert!(searched(Path::new("kernel/bpf/trampoline.c")));
        assert!(!searched(Path::new("arch/powerpc/lib/code-patching.c")));
        assert!(!searched(Path::new("tools/perf/util/machine.c")));
    }
}
