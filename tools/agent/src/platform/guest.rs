//! What every mode of the agent shares about the guest: where the initramfs keeps the modules,
//! progress lines in the kernel log, the arch, and loading a module.

use crate::platform::sys;

/// Where the initramfs keeps the modules (tools/initramfs.sh).
pub const MODULES: &str = "/lib/textpoke";

/// Writes a progress line to the kernel log.
pub fn log(msg: &str) {
    let line = format!("textpoke-agent: {msg}\n");
    // The kernel log serializes our lines with the kernel's; stdout would interleave mid-line.
    if sys::write_file("/dev/kmsg", line.as_bytes()).is_err() {
        print!("{line}");
    }
}

/// Whether the guest is x86-64.
pub fn is_x86() -> bool {
    cfg!(target_arch = "x86_64")
}

/// Loads `MODULES/<name>.ko` (`name` may be a path below `MODULES`).
pub fn load(name: &str, params: &str) -> Result<(), String> {
    let path = format!("{MODULES}/{name}.ko");
    sys::load_module(&path, params).map_err(|e| format!("loading {path}: {e}"))
}

/// Runs `f`, one top-level group of a boot's document, and logs its wall time as
/// `textpoke-agent: elapsed GROUP SECONDS s`: the line the runner's stage table reads for the
/// seconds each group costs in each boot (`textpoke-runner report`).
pub fn timed<T>(group: &str, f: impl FnOnce() -> T) -> T {
    let start = std::time::Instant::now();
    let out = f();
    log(&format!(
        "elapsed {group} {:.1} s",
        start.elapsed().as_secs_f64()
    ));
    out
}
