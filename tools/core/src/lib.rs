//! Host build of textpoke's pure logic.
//!
//! Every module below except [`model`], [`listener`] and [`replay`] is a file of the kernel
//! module, included here through `#[path]`, so `cargo test` exercises exactly the source the
//! kernel compiles. Those files use only `core`, never allocate and never panic. The host-only
//! models, [`model`] (instruction caches) and [`listener`] (the listener handshake), use `std`;
//! the host-only [`replay`] (the parser and replayer of the records [`record`] writes) keeps to
//! `core` like the kernel's files.

#[path = "../../../kernel/insn.rs"]
pub mod insn;

#[path = "../../../arch/x86/insn.rs"]
pub mod x86;

#[path = "../../../arch/arm64/insn.rs"]
pub mod arm64;

#[path = "../../../kernel/pending.rs"]
pub mod pending;

#[path = "../../../kernel/plan.rs"]
pub mod plan;

#[path = "../../../kernel/record.rs"]
pub mod record;

#[path = "../../../kernel/defects.rs"]
pub mod defects;
#[path = "../../../kernel/refusal.rs"]
pub mod refusal;

#[path = "../../../kernel/atomic.rs"]
pub mod atomic;

pub mod model;

pub mod listener;

pub mod replay;
