//! Thin system-call wrappers and `/proc`/`/sys` parsers for the guest.
//!
//! Every failing call returns the kernel's errno as an [`io::Error`] built with
//! [`io::Error::from_raw_os_error`] (or [`io::Error::last_os_error`]), so a test can assert the
//! exact errno with `err.raw_os_error() == Some(libc::EBUSY)`.
//!
//! The parsers ([`parse_cpu_list`], [`parse_interrupt_rows`], [`parse_cmdline_param`],
//! [`parse_kmsg_record`]) are pure and unit-tested on the host.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The errno of the last failed libc call, as an [`io::Error`].
fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// `s` as a C string; an interior NUL is `EINVAL`.
fn cstring(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Loads the kernel module at `path` with the parameter string `params` (`"a=1 b=x"`, or `""`).
///
/// Uses `finit_module(fd, params, 0)`, and falls back to `init_module` with the file's contents
/// when the kernel lacks `finit_module` (`ENOSYS`). On failure returns the kernel's errno: for
/// instance `EEXIST` when it is loaded already, `EINVAL`/`ENOEXEC` for a bad module, or whatever
/// the module's init function returned.
pub fn load_module(path: impl AsRef<Path>, params: &str) -> io::Result<()> {
    let file = File::open(path.as_ref())?;
    let params = cstring(params)?;
    // SAFETY: `finit_module(int fd, const char *params, int flags)`: `file` stays open and
    // `params` is a NUL-terminated string for the duration of the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_finit_module,
            file.as_raw_fd(),
            params.as_ptr(),
            0 as libc::c_int,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = last_error();
    if err.raw_os_error() != Some(libc::ENOSYS) {
        return Err(err);
    }
    let image = std::fs::read(path.as_ref())?;
    // SAFETY: `init_module(void *image, unsigned long len, const char *params)`: `image` is
    // `len` readable bytes and `params` a NUL-terminated string, both alive during the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_init_module,
            image.as_ptr(),
            image.len() as libc::c_ulong,
            params.as_ptr(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(last_error())
    }
}

/// Unloads the module `name` with `delete_module(name, O_NONBLOCK)`.
///
/// Returns the raw errno on failure: `EWOULDBLOCK` (= `EAGAIN`) while the module is in use,
/// `ENOENT` when it is not loaded, `EBUSY` when its exit is refused.
pub fn unload_module(name: &str) -> io::Result<()> {
    let name = cstring(name)?;
    // SAFETY: `delete_module(const char *name, unsigned int flags)`: `name` is a NUL-terminated
    // string alive during the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_delete_module,
            name.as_ptr(),
            libc::O_NONBLOCK as libc::c_uint,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(last_error())
    }
}

/// Syncs and reboots (`reboot(RB_AUTOBOOT)`); with QEMU's `-no-reboot` this ends QEMU.
///
/// Never returns: if the call fails (not PID 1's privileges), it sleeps forever.
pub fn reboot() -> ! {
    // SAFETY: `sync` and `reboot` take no pointers.
    unsafe {
        libc::sync();
        libc::reboot(libc::RB_AUTOBOOT);
    }
    loop {
        // SAFETY: `pause` takes no arguments; it only waits for a signal.
        unsafe {
            libc::pause();
        }
    }
}

/// The kernel command line (`/proc/cmdline`, trailing newline removed); empty if unreadable.
pub fn kernel_cmdline() -> String {
    std::fs::read_to_string("/proc/cmdline")
        .map(|s| s.trim_end().to_owned())
        .unwrap_or_default()
}

/// The value of the parameter `name` (like `textpoke.foo`) on the kernel command line.
///
/// See [`parse_cmdline_param`].
pub fn cmdline_param(name: &str) -> Option<String> {
    parse_cmdline_param(&kernel_cmdline(), name)
}

/// The value of the parameter `name` in the command line `cmdline`.
///
/// Tokens are separated by whitespace, except inside double quotes, which are removed
/// (`a="x y"` gives `x y`, as the kernel's own parser does). A bare `name` gives `Some("")`;
/// when the parameter appears several times the last one wins. As for the kernel's module
/// parameters, `-` and `_` are the same in names. Tokens after `--` (which the kernel passes to
/// init) are searched too.
pub fn parse_cmdline_param(cmdline: &str, name: &str) -> Option<String> {
    let want = normalize_param(name);
    let mut found = None;
    for token in cmdline_tokens(cmdline) {
        let (key, value) = match token.split_once('=') {
            Some((k, v)) => (k, v),
            None => (token.as_str(), ""),
        };
        if normalize_param(&key.replace('"', "")) == want {
            found = Some(value.replace('"', ""));
        }
    }
    found
}

fn normalize_param(name: &str) -> String {
    name.replace('-', "_")
}

/// Splits a command line at whitespace outside double quotes (the quotes are kept).
fn cmdline_tokens(cmdline: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in cmdline.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                if !current.is_empty() {
                    tokens.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

/// The online CPUs (`/sys/devices/system/cpu/online`), in increasing order.
pub fn online_cpus() -> io::Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    parse_cpu_list(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("cannot parse CPU list {:?}", text.trim()),
        )
    })
}

/// Restricts the calling thread, and the threads it starts from now on, to `cpus`
/// (`sched_setaffinity`).
pub fn set_affinity(cpus: &[u32]) -> io::Result<()> {
    // SAFETY: An all-zero `cpu_set_t` is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // Numbers past the set's size cannot be in it (CPU_SET would index out of bounds).
    for c in cpus
        .iter()
        .map(|&c| c as usize)
        .filter(|&c| c < libc::CPU_SETSIZE as usize)
    {
        // SAFETY: `set` is a valid `cpu_set_t` and `c` is below its size.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is valid for reads of its size; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Parses a kernel CPU list such as `0-3,5` (`cpulist_parse` format, including the `0-7:2`
/// stride form) into sorted, deduplicated CPU numbers. An empty list gives an empty vector.
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    let text = text.trim();
    if text.is_empty() {
        return Some(cpus);
    }
    for part in text.split(',') {
        let part = part.trim();
        let (range, stride) = match part.split_once(':') {
            Some((r, s)) => (r, s.trim().parse::<u32>().ok().filter(|&s| s > 0)?),
            None => (part, 1),
        };
        let (lo, hi) = match range.split_once('-') {
            Some((lo, hi)) => (
                lo.trim().parse::<u32>().ok()?,
                hi.trim().parse::<u32>().ok()?,
            ),
            None => {
                let cpu = range.parse::<u32>().ok()?;
                (cpu, cpu)
            }
        };
        if lo > hi {
            return None;
        }
        cpus.extend((lo..=hi).step_by(stride as usize));
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// Runs `f` in a forked child whose user and group ids are `uid` (and no supplementary groups),
/// and returns its exit code: `f`'s return value (0..=255), 101 if `f` panicked, or 128 plus
/// the signal number if the child was killed by a signal.
///
/// Dropping root this way drops every capability too, so `f` sees what an unprivileged user
/// sees. A failure to fork or to switch ids is returned as the errno. Call it while the agent
/// is single-threaded: only the calling thread exists in the child.
pub fn run_as_user<F: FnOnce() -> i32>(uid: u32, f: F) -> io::Result<i32> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a two-element array for `pipe2` to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(last_error());
    }
    let (read_fd, write_fd) = (fds[0], fds[1]);
    // SAFETY: `fork` has no preconditions here; the child only calls async-signal-safe
    // functions before `f` (the agent is single-threaded, so `f` may allocate).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let err = last_error();
        // SAFETY: closing the two descriptors `pipe2` returned, once each.
        unsafe {
            libc::close(read_fd);
            libc::close(write_fd);
        }
        return Err(err);
    }
    if pid == 0 {
        // The child: report a failure to drop privileges through the pipe, else run `f`.
        // SAFETY: `setgroups(0, NULL)` clears the supplementary groups; `setgid`/`setuid` take
        // plain integers; `write` writes the 4 bytes of `errno` from a live local; `_exit`
        // ends the child without running the parent's atexit handlers or destructors.
        unsafe {
            libc::close(read_fd);
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(uid) != 0
                || libc::setuid(uid) != 0
            {
                let errno = last_error().raw_os_error().unwrap_or(libc::EPERM);
                libc::write(write_fd, (&errno as *const i32).cast(), 4);
                libc::_exit(127);
            }
            libc::close(write_fd);
        }
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(101);
        // SAFETY: `_exit` takes a plain integer and never returns.
        unsafe { libc::_exit(code) }
    }
    // SAFETY: the parent's copy of the write end is closed once, so the read below sees EOF
    // when the child execs or exits.
    unsafe {
        libc::close(write_fd);
    }
    let mut errno_bytes = [0u8; 4];
    let mut got = 0;
    loop {
        // SAFETY: reading at most the remaining bytes of the local array.
        let n = unsafe {
            libc::read(
                read_fd,
                errno_bytes[got..].as_mut_ptr().cast(),
                errno_bytes.len() - got,
            )
        };
        if n > 0 {
            got += n as usize;
            if got == errno_bytes.len() {
                break;
            }
        } else if n == 0 || last_error().kind() != io::ErrorKind::Interrupted {
            break;
        }
    }
    // SAFETY: closing the read end once.
    unsafe {
        libc::close(read_fd);
    }
    let status = wait_child(pid)?;
    if got == errno_bytes.len() {
        return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(
            errno_bytes,
        )));
    }
    Ok(status)
}

/// Waits for the child `pid`; returns its exit code, or 128 + the signal that killed it.
fn wait_child(pid: libc::pid_t) -> io::Result<i32> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a live local for `waitpid` to fill.
        let rc = unsafe { libc::waitpid(pid, &mut status, 0) };
        if rc == pid {
            break;
        }
        let err = last_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Ok(128 + libc::WTERMSIG(status))
    } else {
        Ok(status)
    }
}

/// Writes `data` to the existing file `path` with exactly one `write` call, and returns what
/// that call returned.
///
/// Opens without creating or truncating, as for sysfs, procfs and debugfs files, so that a
/// command file's handler sees one write. Errors carry the raw errno (a refused debugfs
/// command gives, say, `EBUSY`).
pub fn write_file(path: impl AsRef<Path>, data: &[u8]) -> io::Result<usize> {
    let mut file = OpenOptions::new().write(true).open(path)?;
    file.write(data)
}

/// Reads the whole file `path`; errors carry the raw errno.
pub fn read_file(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    let mut file = File::open(path)?;
    let mut out = Vec::new();
    file.read_to_end(&mut out)?;
    Ok(out)
}

/// Reads the whole file `path` as text (lossily decoded).
pub fn read_text(path: impl AsRef<Path>) -> io::Result<String> {
    read_file(path).map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}

/// Sets a module parameter: writes `value` to `/sys/module/<module>/parameters/<param>`.
///
/// A short write is `EIO`.
pub fn set_module_param(module: &str, param: &str, value: &str) -> io::Result<()> {
    let path = format!("/sys/module/{module}/parameters/{param}");
    let n = write_file(path, value.as_bytes())?;
    if n == value.len() {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(libc::EIO))
    }
}

/// One row of `/proc/interrupts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IrqRow {
    /// The row label without its colon, as printed: `"0"`, `"LOC"`, `"CAL"`, `"IPI0"`, `"Err"`.
    pub label: String,
    /// The per-CPU counts (one value for the rows like `ERR` that have a single total).
    pub counts: Vec<u64>,
    /// The rest of the line: chip, hwirq, trigger and name, or the description
    /// (`"Function call interrupts"`), whitespace-collapsed.
    pub description: String,
}

impl IrqRow {
    /// The sum over CPUs.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// The rows of `/proc/interrupts`.
pub fn interrupt_rows() -> io::Result<Vec<IrqRow>> {
    Ok(parse_interrupt_rows(&read_text("/proc/interrupts")?))
}

/// Function-call IPIs taken so far, summed over CPUs (x86 `CAL`, arm64 `IPI1`): the kernel's
/// own count of the interrupts an all-CPU sync (`on_each_cpu()`, `kick_all_cpus_sync()`) sends.
/// An error if `/proc/interrupts` cannot be read or has no such row.
pub fn call_ipis() -> Result<u64, String> {
    let rows = interrupt_rows().map_err(|e| format!("/proc/interrupts: {e}"))?;
    call_ipis_of(&rows).ok_or_else(|| "/proc/interrupts has no row of function-call IPIs".into())
}

/// The function-call IPIs of `rows`, summed; `None` if no row counts them.
pub fn call_ipis_of(rows: &[IrqRow]) -> Option<u64> {
    let mut found = rows
        .iter()
        .filter(|r| r.description.contains("Function call"))
        .peekable();
    found.peek()?;
    Some(found.map(IrqRow::total).sum())
}

/// Parses `/proc/interrupts` text into rows.
///
/// The header line (`CPU0 CPU1 ...`) gives the number of per-CPU columns; each row takes at most
/// that many numbers after its label, so numbers in the description (a GIC hwirq) are not
/// counted.
pub fn parse_interrupt_rows(text: &str) -> Vec<IrqRow> {
    let mut lines = text.lines();
    let ncpus = lines.next().map_or(0, |header| {
        header
            .split_whitespace()
            .filter(|t| t.starts_with("CPU"))
            .count()
    });
    let mut rows = Vec::new();
    for line in lines {
        let mut tokens = line.split_whitespace().peekable();
        let Some(label) = tokens.next().and_then(|t| t.strip_suffix(':')) else {
            continue;
        };
        let mut counts = Vec::new();
        while counts.len() < ncpus.max(1) {
            match tokens.peek().and_then(|t| t.parse::<u64>().ok()) {
                Some(n) => {
                    counts.push(n);
                    tokens.next();
                }
                None => break,
            }
        }
        let description = tokens.collect::<Vec<_>>().join(" ");
        rows.push(IrqRow {
            label: label.to_owned(),
            counts,
            description,
        });
    }
    rows
}

/// A position in the kernel log: the sequence number of the next record to return.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogCursor(pub u64);

impl LogCursor {
    /// The start of the log: [`dmesg_since`] from here returns every record still buffered.
    pub const START: Self = Self(0);
}

/// One record of the kernel log as `/dev/kmsg` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KmsgRecord {
    /// Its sequence number.
    pub seq: u64,
    /// Its text, with `/dev/kmsg`'s `\xNN` escapes decoded (lossily as UTF-8).
    pub text: String,
}

/// Parses one `/dev/kmsg` record: `prio,seq,time_us,flags[,...];text\n` plus optional
/// continuation lines (` KEY=value`, ignored). Only the sequence number and the text are kept,
/// but a record whose priority or timestamp is not a number is rejected.
pub fn parse_kmsg_record(record: &str) -> Option<KmsgRecord> {
    let (header, rest) = record.split_once(';')?;
    let mut fields = header.split(',');
    let _prio: u32 = fields.next()?.trim().parse().ok()?;
    let seq: u64 = fields.next()?.trim().parse().ok()?;
    let _time_us: u64 = fields.next()?.trim().parse().ok()?;
    let text = rest.split('\n').next().unwrap_or("");
    Some(KmsgRecord {
        seq,
        text: unescape_kmsg(text),
    })
}

/// Decodes the `\xNN` escapes `/dev/kmsg` uses for unprintable bytes (and for `\` itself).
fn unescape_kmsg(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && bytes.get(i + 1) == Some(&b'x') {
            if let Some(v) = bytes
                .get(i + 2..i + 4)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The kernel-log records from `cursor` on, and the cursor just past the last one.
///
/// Reads `/dev/kmsg` without blocking, one record per `read`, from the oldest record still
/// buffered; records overwritten before they could be read (`EPIPE`) are skipped. The lines the
/// agent itself wrote to `/dev/kmsg` are included.
pub fn kmsg_since(cursor: LogCursor) -> io::Result<(Vec<KmsgRecord>, LogCursor)> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")?;
    let mut buf = vec![0u8; 16 * 1024];
    let mut records = Vec::new();
    let mut next = cursor;
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let text = String::from_utf8_lossy(&buf[..n]);
                if let Some(record) = parse_kmsg_record(&text) {
                    if record.seq >= cursor.0 {
                        next = LogCursor(record.seq + 1);
                        records.push(record);
                    }
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok((records, next))
}

/// The texts of the kernel-log lines from `cursor` on, and the cursor past them.
///
/// Take a cursor before an action with `dmesg_since(LogCursor::START)` (or keep the last one),
/// then call again after it to get exactly the lines it logged.
pub fn dmesg_since(cursor: LogCursor) -> io::Result<(Vec<String>, LogCursor)> {
    let (records, next) = kmsg_since(cursor)?;
    Ok((records.into_iter().map(|r| r.text).collect(), next))
}

/// The cursor past the current end of the kernel log.
pub fn dmesg_cursor() -> io::Result<LogCursor> {
    kmsg_since(LogCursor::START).map(|(_, next)| next)
}

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0\n"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-3,5"), Some(vec![0, 1, 2, 3, 5]));
        assert_eq!(parse_cpu_list("0-1,3-4\n"), Some(vec![0, 1, 3, 4]));
        assert_eq!(parse_cpu_list("0-7:2"), Some(vec![0, 2, 4, 6]));
        assert_eq!(parse_cpu_list("5,0-1,1"), Some(vec![0, 1, 5]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
        assert_eq!(parse_cpu_list("0-"), None);
    }

    const X86_INTERRUPTS: &str = "\
           CPU0       CPU1       
  0:         44          0   IO-APIC   2-edge      timer
  1:          9          0   IO-APIC   1-edge      i8042
  4:          0        712   IO-APIC   4-edge      ttyS0
 24:          1          2  PCI-MSIX-0000:00:02.0   0-edge      virtio0-config
NMI:          0          0   Non-maskable interrupts
LOC:      12345      23456   Local timer interrupts
SPU:          0          0   Spurious interrupts
RES:        100        200   Rescheduling interrupts
CAL:       1000         24   Function call interrupts
TLB:          5          7   TLB shootdowns
ERR:          0
MIS:          3
PIN:          0          0   Posted-interrupt notification event
";

    const ARM64_INTERRUPTS: &str = "\
           CPU0       CPU1       CPU2       CPU3       
 11:       4310       4077       3917       4201     GICv3  27 Level     arch_timer
 13:          3          0          0          0     GICv3  33 Level     uart-pl011
IPI0:        55         66         77         88       Rescheduling interrupts
IPI1:        10         20         30         40       Function call interrupts
IPI2:         0          0          0          0       CPU stop interrupts
IPI3:         0          0          0          0       CPU stop NMIs
IPI4:         0          0          0          0       Timer broadcast interrupts
IPI5:         1          2          3          4       IRQ work interrupts
IPI6:         0          0          0          0       CPU backtrace interrupts
Err:          0
";

    /// The rows' sums over CPUs, by label.
    fn totals(text: &str) -> std::collections::BTreeMap<String, u64> {
        parse_interrupt_rows(text)
            .into_iter()
            .map(|row| (row.label.clone(), row.total()))
            .collect()
    }

    #[test]
    fn x86_interrupts() {
        let counts = totals(X86_INTERRUPTS);
        assert_eq!(counts["CAL"], 1024);
        assert_eq!(counts["TLB"], 12);
        assert_eq!(counts["LOC"], 35801);
        assert_eq!(counts["0"], 44);
        assert_eq!(counts["24"], 3);
        assert_eq!(counts["ERR"], 0);
        assert_eq!(counts["MIS"], 3);
        let rows = parse_interrupt_rows(X86_INTERRUPTS);
        let cal = rows.iter().find(|r| r.label == "CAL").unwrap();
        assert_eq!(cal.counts, vec![1000, 24]);
        assert_eq!(cal.description, "Function call interrupts");
        assert_eq!(rows[0].description, "IO-APIC 2-edge timer");
    }

    #[test]
    fn arm64_interrupts() {
        let counts = totals(ARM64_INTERRUPTS);
        assert_eq!(counts["IPI0"], 286);
        assert_eq!(counts["IPI1"], 100);
        assert_eq!(counts["IPI5"], 10);
        assert_eq!(counts["Err"], 0);
        // The GIC hwirq (27) is not a fifth CPU column.
        assert_eq!(counts["11"], 4310 + 4077 + 3917 + 4201);
        let rows = parse_interrupt_rows(ARM64_INTERRUPTS);
        assert_eq!(rows[0].description, "GICv3 27 Level arch_timer");
        assert_eq!(rows.len(), 10);
    }

    #[test]
    fn cmdline_params() {
        let cmdline = "console=ttyS0 panic=-1 textpoke.mode=fast textpoke.flag \
                       textpoke.msg=\"a b\" textpoke.dash-name=1 textpoke.mode=slow rdinit=/init";
        assert_eq!(
            parse_cmdline_param(cmdline, "textpoke.mode").as_deref(),
            Some("slow")
        );
        assert_eq!(
            parse_cmdline_param(cmdline, "textpoke.flag").as_deref(),
            Some("")
        );
        assert_eq!(
            parse_cmdline_param(cmdline, "textpoke.msg").as_deref(),
            Some("a b")
        );
        assert_eq!(
            parse_cmdline_param(cmdline, "textpoke.dash_name").as_deref(),
            Some("1")
        );
        assert_eq!(
            parse_cmdline_param(cmdline, "rdinit").as_deref(),
            Some("/init")
        );
        assert_eq!(parse_cmdline_param(cmdline, "panic").as_deref(), Some("-1"));
        assert_eq!(parse_cmdline_param(cmdline, "textpoke"), None);
        assert_eq!(parse_cmdline_param(cmdline, "textpoke.missing"), None);
        assert_eq!(parse_cmdline_param("", "x"), None);
    }

    #[test]
    fn kmsg_records() {
        let r = parse_kmsg_record("6,1234,5678901,-;textpoke: refused\\x0a\\x5c x\n SUBSYSTEM=x\n")
            .unwrap();
        assert_eq!(r.seq, 1234);
        assert_eq!(r.text, "textpoke: refused\n\\ x");
        let r = parse_kmsg_record("12,7,0,c,more;ok 1 x\n").unwrap();
        assert_eq!(r.seq, 7);
        assert_eq!(r.text, "ok 1 x");
        assert!(parse_kmsg_record("garbage").is_none());
        assert!(parse_kmsg_record("x,7,0,-;bad priority").is_none());
        assert!(parse_kmsg_record("6,7,x,-;bad timestamp").is_none());
    }

    #[test]
    fn run_as_user_drops_privileges() {
        // SAFETY: `geteuid` takes no arguments.
        if unsafe { libc::geteuid() } != 0 {
            // Not root: switching ids must fail with the kernel's errno.
            let err = run_as_user(65534, || 0).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EPERM));
            return;
        }
        // SAFETY: `geteuid`/`getegid` take no arguments.
        let code = run_as_user(65534, || unsafe {
            i32::from(libc::geteuid() == 65534 && libc::getegid() == 65534)
        })
        .unwrap();
        assert_eq!(code, 1);
        assert_eq!(run_as_user(65534, || 42).unwrap(), 42);
        assert_eq!(
            run_as_user(65534, || std::process::abort()).unwrap(),
            128 + libc::SIGABRT
        );
        // Root-only files are refused in the child.
        let dir = std::env::temp_dir().join(format!("textpoke-agent-uid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("secret");
        std::fs::write(&secret, b"x").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let code = run_as_user(65534, || match read_file(&secret) {
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => 0,
            _ => 1,
        })
        .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(code, 0);
    }

    #[test]
    fn file_helpers_surface_errno() {
        let dir = std::env::temp_dir().join(format!("textpoke-agent-sys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        // write_file does not create.
        let err = write_file(&path, b"x").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
        std::fs::write(&path, b"old contents").unwrap();
        assert_eq!(write_file(&path, b"new").unwrap(), 3);
        assert_eq!(read_file(&path).unwrap(), b"new contents");
        let err = read_file(dir.join("missing")).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
