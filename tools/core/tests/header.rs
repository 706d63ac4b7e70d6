//! kernel/textpoke.h against the code it documents: its errno list must be the canonical table
//! (kernel/refusal.rs) word for word, in the same order. (The types and constants it declares
//! are checked at compile time on both sides: kernel/exports.c, kernel/batch.rs,
//! samples/exerciser/engine_api.rs.)

use textpoke_core::refusal;

const HEADER: &str = include_str!("../../../kernel/textpoke.h");

/// The ` *   -ENAME   cause` lines of the header's errno list.
fn header_errnos() -> Vec<(String, String)> {
    HEADER
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("*   -"))
        .map(|l| {
            let (name, cause) = l.split_once(char::is_whitespace).expect("a cause");
            (name.to_owned(), cause.trim().to_owned())
        })
        .collect()
}

#[test]
fn header_lists_exactly_the_refusal_table() {
    let header = header_errnos();
    let table: Vec<(String, String)> = refusal::ALL
        .iter()
        .map(|r| (r.name.to_owned(), r.cause.to_owned()))
        .collect();
    assert_eq!(header, table);
}

#[test]
fn each_errno_is_distinct() {
    for (i, a) in refusal::ALL.iter().enumerate() {
        for b in &refusal::ALL[i + 1..] {
            assert_ne!(a.errno, b.errno, "{} and {}", a.name, b.name);
            assert_ne!(a.name, b.name);
        }
    }
    assert_eq!(refusal::by_name("EACCES"), Some(refusal::NOT_OWNER));
    assert_eq!(refusal::by_name("ENOSYS"), None);
}
