// SPDX-License-Identifier: GPL-2.0

//! The errno of each kind of refusal: the one table.
//!
//! Every refusal gets its own errno, so a caller (and a test) can tell them apart, and logs a
//! line saying why, and changes nothing. This table is canonical: `kernel/errno.rs` builds the
//! kernel's errors from it (and checks each number against the kernel's own constant at compile
//! time), the guest agent takes the numbers its checks expect from it, and a host test checks
//! that `kernel/textpoke.h`'s list says the same, word for word. The README and docs/ link here.
//!
//! The numbers are the kernel's generic ones (`include/uapi/asm-generic/errno*.h`), which both
//! x86-64 and arm64 use.
//!
//! Like every pure file of the engine it is compiled into the kernel module and into the host
//! crates, so it uses only `core`.

/// One kind of refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The errno's C name.
    pub name: &'static str,
    /// Its number (the functions return its negation).
    pub errno: i32,
    /// When it is returned, as `textpoke.h` says it.
    pub cause: &'static str,
}

macro_rules! refusals {
    ($($id:ident = $name:literal $errno:literal $cause:literal;)*) => {
        $(
            #[doc = $cause]
            pub const $id: Refusal = Refusal { name: $name, errno: $errno, cause: $cause };
        )*
        /// Every refusal, in the order `textpoke.h` lists them.
        pub const ALL: &[Refusal] = &[$($id),*];
    };
}

refusals! {
    NOT_REGISTERED = "ENOENT" 2 "address is not a registered site";
    INSIDE_SITE = "EADDRINUSE" 98 "address is inside, or overlaps, a registered site";
    ENGINE_TEXT = "EPERM" 1 "site in textpoke's own text (the trap path)";
    OUTSIDE_TEXT = "EFAULT" 14 "site outside its module's text, or misaligned";
    NOT_OWNER = "EACCES" 13 "site registered by another module";
    UNSUPPORTED = "EOPNOTSUPP" 95 "instruction not listed below";
    WRONG_SIZE = "EMSGSIZE" 90 "instruction of the wrong size for the site";
    OUT_OF_RANGE = "ERANGE" 34 "branch target out of range (textpoke_encode())";
    GUARD_COLLISION = "EILSEQ" 84 "new instruction is the guard itself";
    DUPLICATE = "EEXIST" 17 "site twice in one batch";
    BUSY = "EBUSY" 16 "site owned by another batch in flight";
    OTHER_PATCHER = "ETXTBSY" 26 "site in text a jump label, static call, ftrace or kprobe owns";
    EMPTY = "ENODATA" 61 "commit of an empty batch";
    TOO_BIG = "E2BIG" 7 "more than TEXTPOKE_MAX_BATCH sites in a batch";
    ALREADY = "EALREADY" 114 "batch already committed";
    TOO_MANY_BATCHES = "ENOSPC" 28 "16 batches committing at this moment; retry the commit";
    TEXT_CHANGED = "EIO" 5 "site text changed behind textpoke's back";
    MODULE_GONE = "ENODEV" 19 "the site's module is going away, or textpoke is";
    BAD_CALL = "EINVAL" 22 "a null pointer or an unknown operation";
}

/// The refusal named `name` (`"ENOENT"`, ...), if there is one.
pub fn by_name(name: &str) -> Option<Refusal> {
    ALL.iter()
        .copied()
        .find(|r| r.name.as_bytes() == name.as_bytes())
}
