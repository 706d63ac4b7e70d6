//! Driving the real `perf` tool (Debian's `linux-perf` 6.12) in the guest.
//!
//! [`Perf::record`] runs `perf record --kcore -a -N -o DIR -- COMMAND...`: with `--kcore`, `-o`
//! names a directory that perf creates (renaming an existing non-empty one to `DIR.old`), holding
//! `data` (the perf.data file) and `kcore_dir/` (a copy of the kernel text from `/proc/kcore`,
//! plus `kallsyms` and `modules`); `--kcore` also turns on text-poke recording (a dummy event on
//! every CPU with `text_poke = 1`, `ksymbol = 1` and `sample_type` including `TIME`, see
//! `record__config_text_poke()` in `tools/perf/builtin-record.c`). `-N` keeps perf from writing a
//! build-id cache under `$HOME/.debug`.
//!
//! [`Perf::script_text_pokes`] runs `perf script -i DIR --show-text-poke-events --ns -F cpu,time`
//! and parses its text-poke events ([`parse_script_text_pokes`]). `-i` takes the directory, not
//! `DIR/data`: perf opens `DIR/data` itself when given a directory (`open_dir()` in
//! `tools/perf/util/data.c`), and only then finds `DIR/kcore_dir` for symbols.
//!
//! # Locating the binary
//!
//! [`Perf::locate`] tries, in order: `$TEXTPOKE_PERF`; then `/usr/bin/perf`, `/usr/sbin/perf`,
//! `/usr/local/bin/perf`, `/bin/perf` and the `perf` in each `$PATH` directory; and takes the
//! first that is an ELF executable. A candidate that is a script (`#!`) is Debian's old
//! `linux-base` wrapper, which execs `perf_MAJOR.MINOR` for the running kernel: the versioned
//! binaries beside it (`perf_6.12`, highest version first) are tried instead. Debian's
//! `linux-perf` 6.12 (bookworm-backports) installs the real binary directly as `/usr/bin/perf`
//! (it diverts the old wrapper to `/usr/bin/perf.wrapper`), and is dynamically linked against
//! about fifty libraries, which the initramfs must carry.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The marker `perf_event__fprintf()` prints before a text-poke event's fields.
const MARKER: &str = "PERF_RECORD_TEXT_POKE";

/// One text-poke event as `perf script --show-text-poke-events` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfScriptPoke {
    /// The address of the first changed byte.
    pub addr: u64,
    /// The symbol and offset perf resolved the address to (`ftrace_caller+0x0`), if any.
    pub sym: Option<String>,
    /// The bytes before the change.
    pub old: Vec<u8>,
    /// The bytes after the change.
    pub new: Vec<u8>,
    /// The event's timestamp in nanoseconds (microsecond precision unless printed with `--ns`),
    /// if the line had a time column.
    pub time_ns: Option<u64>,
    /// The CPU, if the line had a `[NNN]` column.
    pub cpu: Option<u32>,
}

/// A line of `perf script` output that does not read as expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "perf script output line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// A text-poke event being read: its header is parsed, its byte lines are coming.
struct Pending {
    poke: PerfScriptPoke,
    old_len: usize,
    new_len: usize,
    line: usize,
}

impl Pending {
    fn finish(self) -> Result<PerfScriptPoke, ParseError> {
        if self.poke.old.len() != self.old_len || self.poke.new.len() != self.new_len {
            return Err(ParseError {
                line: self.line,
                message: format!(
                    "text poke at {:#x} announces old len {} new len {} but lists {} and {} bytes",
                    self.poke.addr,
                    self.old_len,
                    self.new_len,
                    self.poke.old.len(),
                    self.poke.new.len()
                ),
            });
        }
        Ok(self.poke)
    }
}

/// Parses the text-poke events out of `perf script --show-text-poke-events` output.
///
/// The format is `perf_event__fprintf_text_poke()`'s (`tools/perf/util/event.c`, 6.12):
///
/// ```text
/// <columns>PERF_RECORD_TEXT_POKE <addr, hex without 0x> [<sym>+0x<off>] old len <n> new len <m>
///             Old bytes: xx xx ...        (16 bytes a line, no line when n is 0)
///             New bytes: xx xx ...        (16 bytes a line, no line when m is 0)
/// ```
///
/// where `<columns>` is what `perf_sample__fprintf_start()` prints for the chosen fields, for
/// instance `[001]    12.345678901: ` for `-F cpu,time --ns`, or
/// `         swapper       0 [000]    12.345678: ` by default. The CPU is taken from a
/// `[NNN]` column and the time from a `SECONDS.FRACTION:` column; other lines (samples,
/// `PERF_RECORD_KSYMBOL`) are ignored.
pub fn parse_script_text_pokes(text: &str) -> Result<Vec<PerfScriptPoke>, ParseError> {
    let mut pokes = Vec::new();
    let mut pending: Option<Pending> = None;
    for (i, line) in text.lines().enumerate() {
        let no = i + 1;
        let trimmed = line.trim_start();
        let bytes_of = |rest: &str| {
            parse_hex_bytes(rest).ok_or_else(|| ParseError {
                line: no,
                message: format!("bad byte list {:?}", rest.trim()),
            })
        };
        if let Some(rest) = trimmed.strip_prefix("Old bytes:") {
            let p = pending.as_mut().ok_or_else(|| orphan(no))?;
            p.poke.old.extend(bytes_of(rest)?);
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix("New bytes:") {
            let p = pending.as_mut().ok_or_else(|| orphan(no))?;
            p.poke.new.extend(bytes_of(rest)?);
            continue;
        }
        if let Some(p) = pending.take() {
            pokes.push(p.finish()?);
        }
        if let Some(at) = line.find(MARKER) {
            let (prefix, rest) = (&line[..at], &line[at + MARKER.len()..]);
            pending = Some(parse_header(prefix, rest, no)?);
        }
    }
    if let Some(p) = pending.take() {
        pokes.push(p.finish()?);
    }
    Ok(pokes)
}

fn orphan(line: usize) -> ParseError {
    ParseError {
        line,
        message: "byte line outside a text-poke event".to_owned(),
    }
}

/// Parses `<prefix>` columns and ` <addr> [<sym>] old len <n> new len <m>`.
fn parse_header(prefix: &str, rest: &str, line: usize) -> Result<Pending, ParseError> {
    let err = |message: String| ParseError { line, message };
    let tokens: Vec<&str> = rest.split_whitespace().collect();
    let n = tokens.len();
    if n < 7 || tokens[n - 6..n - 4] != ["old", "len"] || tokens[n - 3..n - 1] != ["new", "len"] {
        return Err(err(format!(
            "unexpected text-poke header {:?}",
            rest.trim()
        )));
    }
    let addr_text = tokens[0];
    let addr = u64::from_str_radix(addr_text.trim_start_matches("0x"), 16)
        .map_err(|_| err(format!("bad address {addr_text:?}")))?;
    let old_len = tokens[n - 4]
        .parse()
        .map_err(|_| err(format!("bad old len {:?}", tokens[n - 4])))?;
    let new_len = tokens[n - 1]
        .parse()
        .map_err(|_| err(format!("bad new len {:?}", tokens[n - 1])))?;
    let sym = tokens[1..n - 6].join(" ");
    let (time_ns, cpu) = parse_columns(prefix);
    Ok(Pending {
        poke: PerfScriptPoke {
            addr,
            sym: (!sym.is_empty()).then_some(sym),
            old: Vec::with_capacity(old_len),
            new: Vec::with_capacity(new_len),
            time_ns,
            cpu,
        },
        old_len,
        new_len,
        line,
    })
}

/// The time (`SECONDS.FRACTION:`, the last such column) and CPU (`[NNN]`, the last such
/// column) in the columns before the event.
fn parse_columns(prefix: &str) -> (Option<u64>, Option<u32>) {
    let mut time = None;
    let mut cpu = None;
    for token in prefix.split_whitespace() {
        if let Some(inner) = token.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            if let Ok(c) = inner.parse() {
                cpu = Some(c);
            }
        } else if let Some(t) = token.strip_suffix(':').and_then(parse_seconds) {
            time = Some(t);
        }
    }
    (time, cpu)
}

/// `SECONDS.FRACTION` (up to 9 fraction digits) in nanoseconds.
fn parse_seconds(text: &str) -> Option<u64> {
    let (secs, frac) = text.split_once('.')?;
    if secs.is_empty()
        || frac.is_empty()
        || frac.len() > 9
        || !secs.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let scale = 10u64.pow(9 - frac.len() as u32);
    let secs: u64 = secs.parse().ok()?;
    let frac: u64 = frac.parse().ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(frac * scale)
}

/// Space-separated two-digit hex bytes.
fn parse_hex_bytes(text: &str) -> Option<Vec<u8>> {
    text.split_whitespace()
        .map(|b| {
            if b.len() == 2 {
                u8::from_str_radix(b, 16).ok()
            } else {
                None
            }
        })
        .collect()
}

/// A located `perf` binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Perf {
    path: PathBuf,
}

/// The output of a successful `perf` run.
#[derive(Clone, Debug)]
pub struct PerfRun {
    /// The full command line, for logs.
    pub command: String,
    /// What perf printed on standard output.
    pub stdout: String,
    /// What perf printed on standard error (`[ perf record: Captured and wrote ... ]`).
    pub stderr: String,
}

impl Perf {
    /// Uses the binary at `path` as is.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Finds the real perf binary; see the module documentation. `NotFound` if there is none.
    pub fn locate() -> io::Result<Self> {
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(p) = std::env::var_os("TEXTPOKE_PERF") {
            candidates.push(p.into());
        }
        for p in [
            "/usr/bin/perf",
            "/usr/sbin/perf",
            "/usr/local/bin/perf",
            "/bin/perf",
        ] {
            candidates.push(p.into());
        }
        if let Some(path) = std::env::var_os("PATH") {
            candidates.extend(std::env::split_paths(&path).map(|d| d.join("perf")));
        }
        for candidate in candidates {
            match file_kind(&candidate) {
                Some(Kind::Elf) => return Ok(Self::at(candidate)),
                Some(Kind::Script) => {
                    let dir = candidate.parent().unwrap_or(Path::new("/"));
                    if let Some(versioned) = versioned_binaries(dir).into_iter().next() {
                        return Ok(Self::at(versioned));
                    }
                }
                None => {}
            }
        }
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no perf binary (tried $TEXTPOKE_PERF, /usr/bin/perf, $PATH and perf_X.Y beside a wrapper)",
        ))
    }

    /// Runs perf with `args`; a non-zero exit is an error carrying its stderr.
    pub fn run<I, S>(&self, args: I) -> io::Result<PerfRun>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let args: Vec<std::ffi::OsString> =
            args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        let command = std::iter::once(self.path.as_os_str())
            .chain(args.iter().map(|a| a.as_os_str()))
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        let output: Output = Command::new(&self.path)
            .args(&args)
            .stdin(Stdio::null())
            // perf reads `~/.perfconfig` and may page its output; neither is wanted.
            .env("PAGER", "cat")
            .env("PERF_PAGER", "cat")
            .output()?;
        let run = PerfRun {
            command,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        };
        if output.status.success() {
            Ok(run)
        } else {
            Err(io::Error::other(format!(
                "`{}` failed ({}): {}",
                run.command,
                output.status,
                tail(&run.stderr, 2000)
            )))
        }
    }

    /// Records system-wide with `--kcore` into the directory `out_dir` while `command` runs
    /// (`["sleep", "2"]`, or the agent itself with a subcommand): `perf record --kcore -a -N
    /// -o OUT_DIR EXTRA... -- COMMAND...`. `extra` goes before the `--` (e.g. `["-e",
    /// "dummy"]`, which records side-band events only).
    pub fn record(&self, out_dir: &Path, command: &[&str], extra: &[&str]) -> io::Result<PerfRun> {
        if command.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "perf record needs a command",
            ));
        }
        let mut args: Vec<&OsStr> = vec![
            "record".as_ref(),
            "--kcore".as_ref(),
            "-a".as_ref(),
            "-N".as_ref(),
            "-o".as_ref(),
            out_dir.as_os_str(),
        ];
        args.extend(extra.iter().map(|a| OsStr::new(*a)));
        args.push("--".as_ref());
        args.extend(command.iter().map(|a| OsStr::new(*a)));
        self.run(args)
    }

    /// The text-poke events of the recording in `dir` (made by [`Perf::record`]).
    ///
    /// Runs `perf script -i DIR --show-text-poke-events --ns -F cpu,time`, or, if perf refuses
    /// those fields, the same without `-F` (then the default columns are parsed).
    ///
    /// A recording that lost records is an error that says so: perf script warns
    /// `Processed N events and lost M chunks!` when the kernel wrote `PERF_RECORD_LOST`, and
    /// then the records that are there cannot be complete.
    pub fn script_text_pokes(&self, dir: &Path) -> io::Result<Vec<PerfScriptPoke>> {
        let base: [&OsStr; 5] = [
            "script".as_ref(),
            "-i".as_ref(),
            dir.as_os_str(),
            "--show-text-poke-events".as_ref(),
            "--ns".as_ref(),
        ];
        let with_fields = base
            .iter()
            .copied()
            .chain(["-F".as_ref(), "cpu,time".as_ref()]);
        let run = match self.run(with_fields) {
            Ok(run) => run,
            Err(_) => self.run(base)?,
        };
        if let Some(warning) = lost_chunks(&run.stderr) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, warning));
        }
        parse_script_text_pokes(&run.stdout)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

/// perf's warning that the recording lost records (`Processed N events and lost M chunks!`),
/// if `stderr` has it.
fn lost_chunks(stderr: &str) -> Option<&str> {
    stderr
        .lines()
        .find(|l| l.contains("events and lost") && l.contains("chunks"))
        .map(str::trim)
}

#[derive(Debug, PartialEq, Eq)]
enum Kind {
    Elf,
    Script,
}

/// Whether `path` is an executable regular file, and which kind.
fn file_kind(path: &Path) -> Option<Kind> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let meta = fs::metadata(path).ok()?;
    if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
        return None;
    }
    let mut magic = [0u8; 4];
    fs::File::open(path).ok()?.read_exact(&mut magic).ok()?;
    match &magic {
        b"\x7fELF" => Some(Kind::Elf),
        [b'#', b'!', ..] => Some(Kind::Script),
        _ => None,
    }
}

/// The `perf_X.Y` ELF binaries in `dir`, highest version first.
fn versioned_binaries(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<(Vec<u32>, PathBuf)> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version = parse_version(name.strip_prefix("perf_")?)?;
            let path = entry.path();
            (file_kind(&path) == Some(Kind::Elf)).then_some((version, path))
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0));
    found.into_iter().map(|(_, p)| p).collect()
}

/// `6.12` as `[6, 12]`.
fn parse_version(text: &str) -> Option<Vec<u32>> {
    text.split('.').map(|p| p.parse().ok()).collect()
}

/// The last `max` bytes of `text` (on a character boundary).
fn tail(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `-F cpu,time --ns`: `[%03d] ` then `%5lu.%09llu: `, then `perf_event__fprintf()`.
    const WITH_FIELDS: &str = "\
[000]     1.234567890: PERF_RECORD_TEXT_POKE ffffffff8104a1c0 arch_jump_label_transform_queue+0x10 old len 5 new len 5
            Old bytes: 0f 1f 44 00 00
            New bytes: e9 4b 01 00 00
[001]     2.000000001: PERF_RECORD_KSYMBOL addr ffffffffc0000000 len 4096 type 2 flags 0x0 name bpf_trampoline_6442
[001]     2.000000002: PERF_RECORD_TEXT_POKE ffffffffc0000000  old len 0 new len 20
            New bytes: 55 48 89 e5 48 83 ec 10 48 89 7d f8 48 89 75 f0
            New bytes: 0f 0b c9 c3
[003]    10.000000000: PERF_RECORD_TEXT_POKE ffffffffc0001000 some_func+0x0 old len 1 new len 0
            Old bytes: cc
";

    /// Default columns: `%16s ` comm, `%7d ` tid, `[%03d] `, `%12s: ` time in microseconds.
    const DEFAULT_COLUMNS: &str = "\
         swapper       0 [002]     5.123456: PERF_RECORD_TEXT_POKE ffffffff81001000 ftrace_caller+0x0 old len 5 new len 5
            Old bytes: 0f 1f 44 00 00
            New bytes: e8 fb 0f 00 00
            perf   123 [000]     5.200000:     250000 cpu-clock:  ffffffff81002000 default_idle+0x10 ([kernel.kallsyms])
";

    #[test]
    fn parses_pokes_with_explicit_fields() {
        let pokes = parse_script_text_pokes(WITH_FIELDS).unwrap();
        assert_eq!(pokes.len(), 3);
        assert_eq!(
            pokes[0],
            PerfScriptPoke {
                addr: 0xffff_ffff_8104_a1c0,
                sym: Some("arch_jump_label_transform_queue+0x10".to_owned()),
                old: vec![0x0f, 0x1f, 0x44, 0x00, 0x00],
                new: vec![0xe9, 0x4b, 0x01, 0x00, 0x00],
                time_ns: Some(1_234_567_890),
                cpu: Some(0),
            }
        );
        assert_eq!(pokes[1].sym, None);
        assert!(pokes[1].old.is_empty());
        assert_eq!(pokes[1].new.len(), 20);
        assert_eq!(pokes[1].new[16..], [0x0f, 0x0b, 0xc9, 0xc3]);
        assert_eq!(pokes[1].time_ns, Some(2_000_000_002));
        assert_eq!(
            (pokes[2].cpu, pokes[2].old.as_slice()),
            (Some(3), &[0xcc][..])
        );
        assert!(pokes[2].new.is_empty());
    }

    #[test]
    fn parses_pokes_with_default_columns() {
        let pokes = parse_script_text_pokes(DEFAULT_COLUMNS).unwrap();
        assert_eq!(pokes.len(), 1);
        assert_eq!(pokes[0].addr, 0xffff_ffff_8100_1000);
        assert_eq!(pokes[0].cpu, Some(2));
        assert_eq!(pokes[0].time_ns, Some(5_123_456_000));
        assert_eq!(pokes[0].new, [0xe8, 0xfb, 0x0f, 0x00, 0x00]);
    }

    #[test]
    fn no_columns_and_errors() {
        let pokes = parse_script_text_pokes(
            "PERF_RECORD_TEXT_POKE ffffffff81000000  old len 2 new len 2\n Old bytes: 90 90\n New bytes: eb 00\n",
        )
        .unwrap();
        assert_eq!((pokes[0].time_ns, pokes[0].cpu), (None, None));
        // Fewer bytes than announced.
        let err = parse_script_text_pokes(
            "PERF_RECORD_TEXT_POKE ffffffff81000000  old len 5 new len 5\n Old bytes: 90 90\n",
        )
        .unwrap_err();
        assert_eq!(err.line, 1);
        // Byte lines without a header, bad bytes, bad header.
        assert!(parse_script_text_pokes("  Old bytes: 90\n").is_err());
        assert!(parse_script_text_pokes(
            "PERF_RECORD_TEXT_POKE ffffffff81000000  old len 1 new len 0\n Old bytes: 9\n"
        )
        .is_err());
        assert!(parse_script_text_pokes("PERF_RECORD_TEXT_POKE zz old len 1 new len 0\n").is_err());
        assert!(parse_script_text_pokes("PERF_RECORD_TEXT_POKE ffff\n").is_err());
        assert_eq!(parse_script_text_pokes("").unwrap(), vec![]);
    }

    #[test]
    fn lost_chunks_are_found() {
        let warned =
            "\n\nWarning:\nProcessed 31337 events and lost 2 chunks!\n\nCheck IO/CPU overload!\n";
        assert_eq!(
            lost_chunks(warned),
            Some("Processed 31337 events and lost 2 chunks!")
        );
        assert_eq!(lost_chunks("[ perf record: Woken up 1 times ]\n"), None);
        assert_eq!(lost_chunks(""), None);
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("1.5"), Some(1_500_000_000));
        assert_eq!(parse_seconds("12.000001"), Some(12_000_001_000));
        assert_eq!(parse_seconds("0.000000001"), Some(1));
        assert_eq!(parse_seconds("1.0000000001"), None);
        assert_eq!(parse_seconds("1."), None);
        assert_eq!(parse_seconds("a.1"), None);
    }

    #[test]
    fn locates_versioned_binaries_beside_a_wrapper() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("textpoke-agent-perf-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let exe = |name: &str, contents: &[u8]| {
            let p = dir.join(name);
            fs::write(&p, contents).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        let wrapper = exe("perf", b"#!/bin/sh\nexec perf_$version \"$@\"\n");
        exe("perf_5.10", b"\x7fELF....");
        let newest = exe("perf_6.12", b"\x7fELF....");
        exe("perf_6.2", b"\x7fELF....");
        exe("perf_7.0", b"#!/bin/sh\n");
        assert_eq!(file_kind(&wrapper), Some(Kind::Script));
        assert_eq!(versioned_binaries(&dir).first(), Some(&newest));
        fs::remove_dir_all(&dir).unwrap();
    }
}
