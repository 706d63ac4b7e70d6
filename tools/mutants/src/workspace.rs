//! The stand-alone copy of the workspace the mutants are built in.
//!
//! The copy keeps every path relative to the repository root, so the `#[path]` attributes of
//! `tools/core/src/lib.rs` (which include `kernel/*.rs` and `arch/*/insn.rs`) still resolve. Its
//! `Cargo.toml` is the root manifest and its `Cargo.lock` the root lock file, and it holds every
//! workspace member, so `cargo --locked` resolves exactly the dependency versions of the real
//! build.

use std::collections::{BTreeSet, VecDeque};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The members listed in the `[workspace]` table of a `Cargo.toml`.
pub fn members(manifest: &str) -> Result<Vec<String>, String> {
    let start = manifest
        .lines()
        .position(|l| l.trim() == "[workspace]")
        .ok_or("the root Cargo.toml has no [workspace] table")?;
    let mut text = String::new();
    let mut found = false;
    for line in manifest.lines().skip(start.saturating_add(1)) {
        let line = line.split('#').next().unwrap_or("");
        if !found {
            if line.trim_start().starts_with('[') {
                break;
            }
            match line.split_once('=') {
                Some((key, value)) if key.trim() == "members" => {
                    found = true;
                    text.push_str(value);
                }
                _ => continue,
            }
        } else {
            text.push_str(line);
        }
        if text.contains(']') {
            break;
        }
    }
    if !found {
        return Err("the root Cargo.toml's [workspace] has no members".into());
    }
    let list = text
        .trim()
        .strip_prefix('[')
        .and_then(|t| t.split(']').next())
        .ok_or("cannot read the workspace members list")?;
    let members: Vec<String> = list
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty())
        .collect();
    if let Some(glob) = members.iter().find(|m| m.contains('*')) {
        return Err(format!("workspace member globs are not supported: {glob}"));
    }
    Ok(members)
}

/// The files a Rust source includes with `#[path = "..."]`, as written.
pub fn path_attributes(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("#[path") {
        rest = rest.get(at.saturating_add(6)..).unwrap_or("");
        let after = rest.trim_start();
        let Some(after) = after.strip_prefix('=') else {
            continue;
        };
        let Some(after) = after.trim_start().strip_prefix('"') else {
            continue;
        };
        if let Some((path, _)) = after.split_once('"') {
            out.push(path.to_owned());
        }
    }
    out
}

/// `path` with `.` and `..` components resolved lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn copy_file(root: &Path, dest: &Path, rel: &Path) -> Result<(), String> {
    let to = dest.join(rel);
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("create {}: {e}", parent.display()))?;
    }
    fs::copy(root.join(rel), &to).map_err(|e| format!("copy {}: {e}", rel.display()))?;
    Ok(())
}

/// Copies the tree `rel` (relative to `root`) into `dest`, skipping build output and hidden
/// entries; returns the relative paths of the files copied.
fn copy_tree(root: &Path, dest: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let dir = root.join(rel);
    let entries = fs::read_dir(&dir).map_err(|e| format!("read {}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("read {}: {e}", dir.display()))?;
        let name = entry.file_name();
        let name_str = name.to_string_lossy();
        if name_str.starts_with('.') || name_str == "target" {
            continue;
        }
        let child = rel.join(&name);
        let kind = entry
            .file_type()
            .map_err(|e| format!("stat {}: {e}", child.display()))?;
        if kind.is_dir() {
            copy_tree(root, dest, &child, out)?;
        } else if kind.is_file() {
            copy_file(root, dest, &child)?;
            out.push(child);
        }
    }
    Ok(())
}

/// Copies into the empty directory `dest` what building any workspace member needs: the root
/// manifest and lock file, every member's tree, and every file a copied Rust source includes
/// through `#[path]` (transitively). Returns the relative paths of the files copied.
pub fn copy(root: &Path, dest: &Path) -> Result<BTreeSet<PathBuf>, String> {
    let manifest = fs::read_to_string(root.join("Cargo.toml"))
        .map_err(|e| format!("read {}/Cargo.toml: {e}", root.display()))?;
    fs::create_dir_all(dest).map_err(|e| format!("create {}: {e}", dest.display()))?;
    fs::write(
        dest.join("Cargo.toml"),
        format!(
            "# Generated by textpoke-mutants: the repository's root manifest, copied.\n{manifest}"
        ),
    )
    .map_err(|e| format!("write the workspace manifest: {e}"))?;
    copy_file(root, dest, Path::new("Cargo.lock"))?;

    let mut copied = Vec::new();
    for member in members(&manifest)? {
        copy_tree(root, dest, Path::new(&member), &mut copied)?;
    }
    let mut done: BTreeSet<PathBuf> = copied.iter().cloned().collect();
    let mut queue: VecDeque<PathBuf> = copied
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    while let Some(file) = queue.pop_front() {
        let text = fs::read_to_string(dest.join(&file))
            .map_err(|e| format!("read {}: {e}", file.display()))?;
        let dir = file.parent().unwrap_or(Path::new(""));
        for include in path_attributes(&text) {
            let rel = normalize(&dir.join(&include));
            if rel.starts_with("..") || done.contains(&rel) || !root.join(&rel).is_file() {
                continue;
            }
            copy_file(root, dest, &rel)?;
            done.insert(rel.clone());
            queue.push_back(rel);
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_members_list() {
        let toml = r#"[workspace]
resolver = "2"
members = ["tools/core", # the core
  "tools/runner"]
exclude = ["x"]
"#;
        assert_eq!(members(toml).unwrap(), ["tools/core", "tools/runner"]);
        assert!(members("[package]\nname = \"x\"\n").is_err());
        assert!(members("[workspace]\nmembers = [\"tools/*\"]\n").is_err());
    }

    #[test]
    fn finds_path_attributes() {
        let src = r##"#[path = "../../../kernel/insn.rs"]
pub mod insn;
#[path="a.rs"] mod a;
// #[pathological]
"##;
        assert_eq!(path_attributes(src), ["../../../kernel/insn.rs", "a.rs"]);
    }

    #[test]
    fn normalizes_relative_paths() {
        assert_eq!(
            normalize(Path::new("tools/core/src/../../../kernel/pending.rs")),
            PathBuf::from("kernel/pending.rs")
        );
    }
}
