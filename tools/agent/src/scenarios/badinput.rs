//! Bad input: each case hands the engine one kind of invalid request through the exerciser
//! (`bad <case>`, samples/exerciser/badinput.rs) and checks what the engine claims for it: its
//! exact errno (from the canonical table, kernel/refusal.rs), its own log line, naming the
//! address it refused, and the text at every address it targeted unchanged, read through
//! `/proc/kcore`.

use textpoke_agent::platform::exerciser::{self, Site};
use textpoke_agent::platform::kallsyms::{self, In};
use textpoke_agent::platform::kcore::Kcore;
use textpoke_agent::platform::sys;
use textpoke_agent::report::ktap::Case;
use textpoke_core::refusal::{self, Refusal};

use crate::scenarios::scenario::region;

/// One bad-input case, as the agent expects the engine to refuse it.
struct Expected {
    name: &'static str,
    refusal: Refusal,
    /// The line the engine must log (a substring of it).
    needle: String,
    /// Addresses (and lengths) the request targeted, besides the sites' region.
    targets: Vec<(u64, usize)>,
}

/// The address of a `[textpoke]` symbol in `/proc/kallsyms`.
pub fn kallsyms(name: &str) -> Result<u64, String> {
    kallsyms::address(name, In::Module("textpoke"))
}

/// The cases, with the addresses they target.
fn expected(sites: &[Site]) -> Result<Vec<Expected>, String> {
    let x86 = cfg!(target_arch = "x86_64");
    let branch = if x86 { "jmp32" } else { "b" };
    let mut branches = sites.iter().filter(|s| s.kind == branch);
    let site = branches.next().ok_or("no branch site")?;
    let extra = sites
        .iter()
        .filter(|s| s.kind == branch)
        .nth(4096)
        .ok_or("fewer than 4097 branch sites")?;
    let engine_text = kallsyms("textpoke_cpu_traps")?;
    let (a, len) = (site.addr, site.len);
    let far = a.wrapping_add(if x86 { 3 << 30 } else { 256 << 20 });
    let at = |addr: u64, why: &str| format!("refusing change at {addr:#x}: {why}");
    let mut cases = vec![
        Expected {
            name: "unregistered",
            refusal: refusal::NOT_REGISTERED,
            // 16 bytes after the first branch site, in its function's taken path: text of the
            // exerciser's, no site.
            needle: at(a + 16, "not a registered site"),
            targets: vec![(a + 16, len)],
        },
        Expected {
            name: "inside_site",
            refusal: refusal::INSIDE_SITE,
            needle: at(a + 1, "inside another site"),
            targets: vec![],
        },
        Expected {
            name: "register_over",
            refusal: refusal::INSIDE_SITE,
            needle: format!("refusing site {a:#x}: it overlaps a registered site"),
            targets: vec![],
        },
        Expected {
            name: "engine_text",
            refusal: refusal::ENGINE_TEXT,
            needle: format!("refusing site {engine_text:#x}: it is in textpoke's own text"),
            targets: vec![(engine_text, 16)],
        },
        Expected {
            name: "unsupported",
            refusal: refusal::UNSUPPORTED,
            needle: at(a, "unsupported instruction"),
            targets: vec![],
        },
        Expected {
            name: "wrong_size",
            refusal: refusal::WRONG_SIZE,
            // x86: a NOP2 for a NOP5 site; arm64: half an instruction.
            needle: at(
                a,
                if x86 {
                    "instruction size differs from the site's"
                } else {
                    "truncated instruction"
                },
            ),
            targets: vec![],
        },
        Expected {
            name: "out_of_range",
            refusal: refusal::OUT_OF_RANGE,
            needle: format!("encode Jmp at {a:#x} to {far:#x}: branch target out of range"),
            targets: vec![],
        },
        Expected {
            name: "guard_collision",
            refusal: refusal::GUARD_COLLISION,
            needle: at(a, "new instruction is the guard itself"),
            targets: vec![],
        },
        Expected {
            name: "duplicate",
            refusal: refusal::DUPLICATE,
            needle: at(a, "site already in this batch"),
            targets: vec![],
        },
        Expected {
            name: "concurrent",
            refusal: refusal::BUSY,
            needle: at(a, "site owned by another batch in flight"),
            targets: vec![],
        },
        Expected {
            name: "empty",
            refusal: refusal::EMPTY,
            needle: "refusing commit: no changes".into(),
            targets: vec![],
        },
        Expected {
            name: "too_big",
            refusal: refusal::TOO_BIG,
            needle: at(extra.addr, "batch is full"),
            targets: vec![],
        },
        Expected {
            name: "commit_twice",
            refusal: refusal::ALREADY,
            needle: "refusing commit: already committed".into(),
            targets: vec![],
        },
        Expected {
            name: "unknown_operation",
            refusal: refusal::BAD_CALL,
            needle: "encode: unknown operation 99".into(),
            targets: vec![],
        },
    ];
    // In a kernel with return thunks textpoke must refuse a bare `RET` (`arch/x86/mod.rs`,
    // `RETURN_THUNKS`). The runner says which boots have such a kernel
    // (`textpoke.return_thunks=1`); the exerciser's `ret` sites agree, switching to a `JMP`
    // there (`encode_ret` in samples/exerciser/pool_x86.rs).
    let thunks = sys::cmdline_param("textpoke.return_thunks").as_deref() == Some("1");
    let ret = sites
        .iter()
        .find(|s| s.kind == "ret")
        .ok_or("no ret site")?;
    if x86 && thunks != (ret.on.first() == Some(&0xe9)) {
        return Err(format!(
            "textpoke.return_thunks={} but the exerciser's ret sites switch to {:02x?}",
            u8::from(thunks),
            ret.on
        ));
    }
    if x86 && thunks {
        cases.push(Expected {
            name: "ret_with_return_thunks",
            refusal: refusal::UNSUPPORTED,
            needle: at(ret.addr, "unsupported instruction"),
            targets: vec![],
        });
    }
    if !x86 {
        // x86 instructions have no alignment: the case does not exist there.
        cases.push(Expected {
            name: "misaligned",
            refusal: refusal::OUTSIDE_TEXT,
            needle: format!("refusing site {:#x}: its instruction: misaligned", a + 2),
            targets: vec![],
        });
    }
    Ok(cases)
}

/// Reads every target; `Err` if one cannot be read.
fn snapshot(kcore: &Kcore, targets: &[(u64, usize)]) -> Result<Vec<Vec<u8>>, String> {
    targets
        .iter()
        .map(|&(addr, len)| {
            kcore
                .read(addr, len)
                .map_err(|e| format!("kcore {addr:#x}: {e}"))
        })
        .collect()
}

/// Runs `action` and checks that it fails with exactly `errno`, that the kernel log gained a
/// line containing `needle`, and that the text at every target is unchanged.
pub fn refused(
    name: &str,
    kcore: &Kcore,
    targets: &[(u64, usize)],
    errno: i32,
    needle: &str,
    action: impl FnOnce() -> Result<(), i32>,
) -> Case {
    let before = snapshot(kcore, targets);
    let cursor = match sys::dmesg_cursor() {
        Ok(c) => c,
        Err(e) => return Case::fail(name, format!("kernel log: {e}")),
    };
    let got = action();
    let lines = sys::dmesg_since(cursor).map(|(l, _)| l).unwrap_or_default();
    let after = snapshot(kcore, targets);
    let logged = lines.iter().any(|l| l.contains(needle));
    let unchanged = match (&before, &after) {
        (Ok(b), Ok(a)) => a == b,
        _ => false,
    };
    Case::check(
        name,
        got == Err(errno) && logged && unchanged,
        format!(
            "expected errno {errno}, got {got:?}; a log line containing {needle:?}: {logged}; \
             text unchanged: {unchanged} ({:?})",
            before.as_ref().err().or(after.as_ref().err())
        ),
    )
}

/// Every bad-input case, the non-root check and the unload refusals.
pub fn cases(sites: &[Site], kcore: &Kcore) -> Case {
    let mut children = Vec::new();
    let (base, len) = region(sites);
    match expected(sites) {
        Ok(cases) => {
            for c in cases {
                let mut targets = c.targets.clone();
                targets.push((base, len));
                children.push(refused(
                    c.name,
                    kcore,
                    &targets,
                    c.refusal.errno,
                    &c.needle,
                    || exerciser::command(&format!("bad {}", c.name)),
                ));
            }
        }
        Err(e) => children.push(Case::fail("bad_input_setup", e)),
    }
    // Userspace needs root for everything: debugfs is mounted 0700, and the files want
    // CAP_SYS_ADMIN besides.
    let nonroot = sys::run_as_user(65534, || {
        match std::fs::OpenOptions::new()
            .write(true)
            .open("/sys/kernel/debug/textpoke_exerciser/control")
        {
            Ok(_) => 0,
            Err(e) => e.raw_os_error().unwrap_or(255),
        }
    });
    children.push(Case::check(
        "non_root_access",
        matches!(nonroot, Ok(code) if code == libc::EACCES),
        format!("unprivileged open of the control file gave {nonroot:?}, not EACCES"),
    ));
    let region = [(base, len)];
    // A batch in flight pins the module owning its sites, and textpoke itself.
    children.push(refused(
        "unload_with_batch_in_flight",
        kcore,
        &region,
        libc::EAGAIN,
        "holding an uncommitted batch",
        || {
            exerciser::command("hold 0")?;
            let r = sys::unload_module("textpoke_exerciser")
                .map_err(|e| e.raw_os_error().unwrap_or(-1));
            let r2 = sys::unload_module("textpoke").map_err(|e| e.raw_os_error().unwrap_or(-1));
            exerciser::command("release")?;
            if r2 != Err(libc::EAGAIN) {
                return Err(-2);
            }
            r
        },
    ));
    children.push(refused(
        "unload_with_executors_running",
        kcore,
        &region,
        libc::EAGAIN,
        "executors running",
        || {
            exerciser::command("executors start")?;
            let r = sys::unload_module("textpoke_exerciser")
                .map_err(|e| e.raw_os_error().unwrap_or(-1));
            exerciser::command("executors stop")?;
            r
        },
    ));
    Case::group("bad_input", children)
}
