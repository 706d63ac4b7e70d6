//! Building the QEMU command line and running QEMU with a hard deadline while the console
//! streams into a log file, and how it ended ([`Outcome`]), which the log records for the judge.

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::MARKER;

/// Guest architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum Arch {
    /// x86_64 on a q35 machine.
    #[value(name = "x86_64")]
    #[serde(rename = "x86_64")]
    X86_64,
    /// arm64 on the `virt` machine.
    #[value(name = "arm64")]
    #[serde(rename = "arm64")]
    Arm64,
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::X86_64 => "x86_64",
            Self::Arm64 => "arm64",
        })
    }
}

/// Kernel arguments every boot gets.
///
/// A warning or oops panics, and a panic makes the guest reboot at once, which `-no-reboot`
/// turns into QEMU exiting: a broken kernel ends the boot quickly instead of running into the
/// timeout, and the splat is on the console for the verdict. `printk.devkmsg=on` keeps the
/// agent's `/dev/kmsg` lines from being rate-limited away.
pub const COMMON_APPEND: &str =
    "panic_on_warn=1 oops=panic panic=-1 printk.devkmsg=on rdinit=/init";

/// What to boot.
#[derive(Clone, Debug)]
pub struct Machine {
    /// Guest architecture.
    pub arch: Arch,
    /// Kernel image (bzImage or arm64 Image).
    pub kernel: PathBuf,
    /// Initramfs (cpio, optionally compressed).
    pub initrd: PathBuf,
    /// Guest CPUs.
    pub smp: u32,
    /// Guest memory in MiB.
    pub mem_mb: u32,
    /// Extra kernel arguments, after the standard ones (so they can override them).
    pub append: Option<String>,
    /// The emulator to run instead of the usual `qemu-system-*` from `PATH`.
    pub qemu: Option<String>,
    /// Run every vCPU in its own host thread (MTTCG) instead of round-robin in one.
    pub mttcg: bool,
}

/// The QEMU command line for a machine, program first.
pub fn command(m: &Machine) -> Vec<String> {
    let (program, machine, cpu, console) = match m.arch {
        // tsc=reliable: TCG's TSC follows the host's clock on every vCPU, but the clocksource
        // watchdog, timing TCG's slow reads, can mark it unstable (seen under the hotplug
        // group), and then local_clock(), perf's clock, stops being comparable across CPUs:
        // every ordering check compares it across CPUs. A clock marked unstable anyway is a
        // splat (splat::PATTERNS).
        Arch::X86_64 => (
            "qemu-system-x86_64",
            "q35",
            "max",
            "console=ttyS0 earlycon=uart8250,io,0x3f8 tsc=reliable",
        ),
        // pauth-impdef: TCG's architected pointer-auth algorithm (QARMA) is very slow to emulate.
        Arch::Arm64 => (
            "qemu-system-aarch64",
            "virt",
            "max,pauth-impdef=on",
            "console=ttyAMA0 earlycon",
        ),
    };
    let mut append = format!("{console} {COMMON_APPEND}");
    if let Some(extra) = m.append.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        append.push(' ');
        append.push_str(extra);
    }
    let program = m.qemu.clone().unwrap_or_else(|| program.to_owned());
    [
        program.as_str(),
        "-M",
        machine,
        "-cpu",
        cpu,
        // Single-threaded TCG by default: under MTTCG a vCPU was seen executing a stale
        // translation of an instruction another vCPU had replaced, after the guest's
        // synchronizing IPI (docs/results.md), which no real CPU does. Round-robin vCPUs also
        // interleave more often inside a patching window.
        "-accel",
        if m.mttcg {
            "tcg,thread=multi"
        } else {
            "tcg,thread=single"
        },
        "-smp",
        &m.smp.to_string(),
        "-m",
        &m.mem_mb.to_string(),
        // Only the devices asked for: one serial port, on stdio, and no monitor to multiplex.
        "-nodefaults",
        "-nographic",
        "-no-reboot",
        "-serial",
        "stdio",
        "-monitor",
        "none",
        "-kernel",
        &m.kernel.to_string_lossy(),
        "-initrd",
        &m.initrd.to_string_lossy(),
        "-append",
        &append,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A command line as a shell would need it typed, for the log header.
pub fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=,:+@%".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// How the QEMU process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It exited by itself with this status.
    Exited(i32),
    /// It died of this signal, not sent by the runner.
    Signalled(i32),
    /// The runner killed it after its console had been silent this many seconds.
    Silent(u64),
    /// The runner killed it after this many seconds, though its console was not silent.
    TimedOut(u64),
    /// It could not be started.
    SpawnFailed(String),
    /// Not recorded (a log saved some other way): judged on the console alone.
    Unknown,
}

impl Outcome {
    /// The line the runner appends to a log to record this outcome; [`Outcome::from_log`] reads
    /// it back so a saved log is judged as it was at boot time.
    pub fn marker(&self) -> String {
        match self {
            Self::Exited(code) => format!("{MARKER}qemu exited with status {code}"),
            Self::Signalled(sig) => format!("{MARKER}qemu killed by signal {sig}"),
            Self::Silent(secs) => {
                format!("{MARKER}timeout: killed qemu after {secs} s without console output")
            }
            Self::TimedOut(secs) => format!("{MARKER}timeout: killed qemu after {secs} s"),
            Self::SpawnFailed(err) => format!("{MARKER}could not start qemu: {err}"),
            Self::Unknown => format!("{MARKER}qemu outcome unknown"),
        }
    }

    /// The outcome recorded by the last outcome marker in a log, or `Unknown`.
    pub fn from_log(log: &str) -> Self {
        log.lines()
            .rev()
            .filter_map(|l| l.trim_end().strip_prefix(MARKER))
            .find_map(|m| {
                fn number<T: std::str::FromStr>(s: &str) -> Option<T> {
                    s.split_whitespace().next()?.parse().ok()
                }
                if let Some(rest) = m.strip_prefix("qemu exited with status ") {
                    number(rest).map(Self::Exited)
                } else if let Some(rest) = m.strip_prefix("qemu killed by signal ") {
                    number(rest).map(Self::Signalled)
                } else if let Some(rest) = m.strip_prefix("timeout: killed qemu after ") {
                    if rest.ends_with(" without console output") {
                        number(rest).map(Self::Silent)
                    } else {
                        number(rest).map(Self::TimedOut)
                    }
                } else {
                    m.strip_prefix("could not start qemu: ")
                        .map(|e| Self::SpawnFailed(e.to_owned()))
                }
            })
            .unwrap_or(Self::Unknown)
    }

    /// Why the runner killed QEMU, if it did.
    pub fn timeout(&self) -> Option<String> {
        match self {
            Self::TimedOut(secs) => Some(format!("timeout: qemu killed after {secs} s")),
            Self::Silent(secs) => Some(format!(
                "timeout: qemu killed after {secs} s without console output"
            )),
            _ => None,
        }
    }

    /// The exit status, if QEMU exited by itself.
    pub fn exit_status(&self) -> Option<i32> {
        match self {
            Self::Exited(code) => Some(*code),
            _ => None,
        }
    }
}

/// The result of running QEMU.
#[derive(Clone, Debug)]
pub struct Run {
    /// How QEMU ended.
    pub outcome: Outcome,
    /// The whole log as written to the file (lossily decoded).
    pub log: String,
    /// Wall time from spawn to exit, in seconds.
    pub seconds: f64,
    /// The longest the console stayed silent while QEMU ran (from its start to its first line,
    /// between two lines, or from the last line to its end), in seconds: what
    /// [`Limits::silence`] must exceed with room to spare.
    pub longest_silence: f64,
}

/// When the runner gives up on a QEMU run.
///
/// A hang is a console that stops: the guest prints a KTAP line per case and the kernel its
/// reports, so silence is what tells a hang from a slow guest. The run time alone cannot: on
/// two host cores shared with kernel builds, a TCG guest runs several times slower than alone,
/// and a limit on it would be a timed assertion on the host's load. The cap only ends a guest
/// that never stops printing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest the console may stay silent.
    pub silence: Duration,
    /// The longest the run may take at all.
    pub cap: Duration,
}

/// When the console last printed, and its longest silence before that.
struct Heard {
    last: Instant,
    longest: Duration,
}

impl Heard {
    /// The console printed just now.
    fn now(&mut self) {
        let now = Instant::now();
        self.longest = self.longest.max(now - self.last);
        self.last = now;
    }
}

/// How long QEMU gets to exit after SIGTERM before it is killed.
const TERM_GRACE: Duration = Duration::from_secs(3);
/// How long to keep collecting output after QEMU is gone, for pipes a stray child still holds.
const DRAIN: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stream {
    Out,
    Err,
}

enum Msg {
    Data(Stream, Vec<u8>),
    Eof(Stream),
}

/// The log file and its in-memory copy, written a whole line at a time so that interleaved
/// stdout and stderr stay readable and a crash of the runner leaves only complete lines.
struct Sink {
    file: File,
    text: String,
    partial: [Vec<u8>; 2],
}

impl Sink {
    fn raw_line(&mut self, line: &[u8]) -> io::Result<()> {
        self.file.write_all(line)?;
        self.text.push_str(&String::from_utf8_lossy(line));
        if !line.ends_with(b"\n") {
            self.file.write_all(b"\n")?;
            self.text.push('\n');
        }
        Ok(())
    }

    fn note(&mut self, note: &str) -> io::Result<()> {
        self.raw_line(format!("{note}\n").as_bytes())
    }

    /// Writes the complete lines of a stream, or everything left of it when `eof`.
    fn feed(
        &mut self,
        stream: Stream,
        data: &[u8],
        eof: bool,
        on_console_line: &mut dyn FnMut(&str),
    ) -> io::Result<()> {
        let idx = stream as usize;
        self.partial[idx].extend_from_slice(data);
        let buf = std::mem::take(&mut self.partial[idx]);
        let mut rest = &buf[..];
        loop {
            let line = match rest.iter().position(|&b| b == b'\n') {
                Some(nl) => {
                    let line = &rest[..=nl];
                    rest = &rest[nl + 1..];
                    line
                }
                None if eof && !rest.is_empty() => std::mem::take(&mut rest),
                None => break,
            };
            match stream {
                Stream::Out => {
                    self.raw_line(line)?;
                    on_console_line(String::from_utf8_lossy(line).trim_end());
                }
                // QEMU's own complaints, marked so they are not taken for guest output.
                Stream::Err => {
                    let text = String::from_utf8_lossy(line);
                    self.note(&format!("{MARKER}qemu: {}", text.trim_end()))?;
                }
            }
        }
        self.partial[idx] = rest.to_vec();
        Ok(())
    }
}

fn reader(mut pipe: impl Read, stream: Stream, tx: mpsc::Sender<Msg>) {
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if tx.send(Msg::Data(stream, buf[..n].to_vec())).is_err() {
                    return;
                }
            }
        }
    }
    let _ = tx.send(Msg::Eof(stream));
}

/// Waits for the child until `deadline`; `None` if it is still running then.
fn wait_until(child: &mut Child, deadline: Instant) -> io::Result<Option<ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// SIGTERM first so QEMU can flush and say why it stops, then SIGKILL.
fn terminate(child: &mut Child) -> io::Result<()> {
    // std has no SIGTERM and this crate has no `unsafe`, so the kill(1) utility sends it.
    let termed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if termed && wait_until(child, Instant::now() + TERM_GRACE)?.is_some() {
        return Ok(());
    }
    child.kill()?;
    child.wait()?;
    Ok(())
}

/// Runs `cmd`, streaming its stdout (the serial console) to `log_path` line by line and its
/// stderr as marked notes, and kills it when it passes one of `limits`. `on_console_line`
/// sees each console line as it arrives.
///
/// The log starts with the command line and ends with a line recording the outcome (see
/// [`Outcome::marker`]).
pub fn run(
    cmd: &[String],
    log_path: &Path,
    limits: Limits,
    on_console_line: &mut dyn FnMut(&str),
) -> io::Result<Run> {
    let mut sink = Sink {
        file: File::create(log_path)?,
        text: String::new(),
        partial: [Vec::new(), Vec::new()],
    };
    sink.note(&format!("{MARKER}command: {}", shell_words(cmd)))?;
    sink.note(&format!(
        "{MARKER}timeout: {} s without console output, {} s in all",
        limits.silence.as_secs(),
        limits.cap.as_secs()
    ))?;

    let start = Instant::now();
    let deadline = start + limits.cap;
    let spawned = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let outcome = Outcome::SpawnFailed(format!("{}: {e}", cmd[0]));
            sink.note(&outcome.marker())?;
            return Ok(Run {
                outcome,
                log: sink.text,
                seconds: start.elapsed().as_secs_f64(),
                longest_silence: 0.0,
            });
        }
    };

    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("stdout is piped");
    let stderr = child.stderr.take().expect("stderr is piped");
    // Detached on purpose: if a stray grandchild keeps a pipe open, joining would hang past
    // the deadline, and the threads end with the process anyway.
    let tx_err = tx.clone();
    thread::spawn(move || reader(stdout, Stream::Out, tx));
    thread::spawn(move || reader(stderr, Stream::Err, tx_err));

    let mut open = 2;
    let mut heard = Heard {
        last: start,
        longest: Duration::ZERO,
    };
    // Takes QEMU's output until both pipes close (true) or `until`, given when the console
    // last spoke, says stop (false).
    let mut receive = |sink: &mut Sink,
                       until: &dyn Fn(Instant) -> Instant,
                       open: &mut usize,
                       heard: &mut Heard|
     -> io::Result<bool> {
        while *open > 0 {
            let now = Instant::now();
            let end = until(heard.last);
            if now >= end {
                return Ok(false);
            }
            match rx.recv_timeout(end - now) {
                Ok(Msg::Data(s, data)) => {
                    if s == Stream::Out {
                        heard.now();
                    }
                    sink.feed(s, &data, false, on_console_line)?;
                }
                Ok(Msg::Eof(s)) => {
                    sink.feed(s, &[], true, on_console_line)?;
                    *open -= 1;
                }
                Err(RecvTimeoutError::Timeout) => return Ok(false),
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        Ok(true)
    };

    let limit = |last: Instant| deadline.min(last + limits.silence);
    let status = if receive(&mut sink, &limit, &mut open, &mut heard)? {
        wait_until(&mut child, limit(heard.last))?
    } else {
        None
    };
    let outcome = match status {
        Some(status) => exit_outcome(status),
        None => {
            let now = Instant::now();
            terminate(&mut child)?;
            if now >= deadline {
                Outcome::TimedOut(limits.cap.as_secs())
            } else {
                Outcome::Silent(limits.silence.as_secs())
            }
        }
    };
    let longest_silence = heard.longest.max(heard.last.elapsed().min(limits.silence));
    let seconds = start.elapsed().as_secs_f64();
    let drained = Instant::now() + DRAIN;
    receive(&mut sink, &|_| drained, &mut open, &mut heard)?;
    for s in [Stream::Out, Stream::Err] {
        sink.feed(s, &[], true, on_console_line)?;
    }
    sink.note(&outcome.marker())?;
    Ok(Run {
        outcome,
        log: sink.text,
        seconds,
        longest_silence: longest_silence.as_secs_f64(),
    })
}

fn exit_outcome(status: ExitStatus) -> Outcome {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Outcome::Exited(code),
        (None, Some(sig)) => Outcome::Signalled(sig),
        (None, None) => Outcome::Exited(-1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(arch: Arch) -> Machine {
        Machine {
            arch,
            kernel: "/k/bzImage".into(),
            initrd: "/tmp/init.cpio".into(),
            smp: 4,
            mem_mb: 2048,
            append: Some("  textpoke.debug=1 ".into()),
            qemu: None,
            mttcg: false,
        }
    }

    #[test]
    fn x86_64_command() {
        let cmd = command(&machine(Arch::X86_64));
        assert_eq!(
            shell_words(&cmd),
            "qemu-system-x86_64 -M q35 -cpu max -accel tcg,thread=single -smp 4 -m 2048 \
             -nodefaults -nographic -no-reboot -serial stdio -monitor none \
             -kernel /k/bzImage -initrd /tmp/init.cpio -append 'console=ttyS0 \
             earlycon=uart8250,io,0x3f8 tsc=reliable panic_on_warn=1 oops=panic panic=-1 \
             printk.devkmsg=on rdinit=/init textpoke.debug=1'"
        );
    }

    #[test]
    fn arm64_command() {
        let mut m = machine(Arch::Arm64);
        m.append = None;
        m.qemu = Some("/opt/qemu/bin/qemu-system-aarch64".into());
        let cmd = command(&m);
        assert_eq!(cmd[0], "/opt/qemu/bin/qemu-system-aarch64");
        assert_eq!(cmd[1..5], ["-M", "virt", "-cpu", "max,pauth-impdef=on"]);
        assert_eq!(
            cmd.last().unwrap(),
            "console=ttyAMA0 earlycon panic_on_warn=1 oops=panic panic=-1 printk.devkmsg=on \
             rdinit=/init"
        );
    }

    #[test]
    fn shell_words_quotes_what_needs_it() {
        let args = ["a".to_string(), "b c".into(), "it's".into(), String::new()];
        assert_eq!(shell_words(&args), r"a 'b c' 'it'\''s' ''");
    }

    #[test]
    fn outcome_markers_round_trip() {
        for o in [
            Outcome::Exited(0),
            Outcome::Exited(3),
            Outcome::Signalled(9),
            Outcome::TimedOut(900),
            Outcome::Silent(600),
            Outcome::SpawnFailed("No such file or directory (os error 2)".into()),
        ] {
            let log = format!("{MARKER}command: qemu\nboot\n{}\n", o.marker());
            assert_eq!(Outcome::from_log(&log), o);
        }
        assert_eq!(Outcome::from_log("plain serial log\n"), Outcome::Unknown);
    }

    fn run_sh(script: &str, silence: u64, cap: u64) -> Run {
        let dir = std::env::temp_dir().join(format!("qemu-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(format!("{silence}-{cap}.log"));
        let cmd = ["sh".to_string(), "-c".into(), script.into()];
        let limits = Limits {
            silence: Duration::from_secs(silence),
            cap: Duration::from_secs(cap),
        };
        run(&cmd, &log, limits, &mut |_| {}).unwrap()
    }

    #[test]
    fn a_console_that_keeps_talking_outlives_the_silence_limit() {
        // Three seconds of lines a quarter second apart, under a two-second silence limit.
        let r = run_sh(
            "i=0; while [ $i -lt 12 ]; do echo $i; sleep 0.25; i=$((i+1)); done",
            2,
            60,
        );
        assert_eq!(r.outcome, Outcome::Exited(0));
        assert!(r.seconds >= 2.5, "{}", r.seconds);
        assert!(r.longest_silence < 2.0, "{}", r.longest_silence);
    }

    #[test]
    fn a_silent_console_is_a_hang() {
        let r = run_sh("echo started; sleep 60", 1, 60);
        assert_eq!(r.outcome, Outcome::Silent(1));
        assert!(r.seconds < 30.0, "{}", r.seconds);
        assert!(r.log.contains("without console output"));
        assert_eq!(Outcome::from_log(&r.log), Outcome::Silent(1));
    }

    #[test]
    fn a_console_that_never_stops_meets_the_cap() {
        let r = run_sh("while true; do echo tick; sleep 0.1; done", 5, 1);
        assert_eq!(r.outcome, Outcome::TimedOut(1));
        assert!(r.longest_silence < 5.0, "{}", r.longest_silence);
    }
}
