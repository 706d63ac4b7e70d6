//! `textpoke-runner`: boots a guest under QEMU and judges it (`boot`), summarises a directory
//! of boot reports (`summary`), or judges a saved console log (`parse`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use textpoke_runner::judge::{self, Judgement, Outcome, Verdict};
use textpoke_runner::ktap::Status;
use textpoke_runner::qemu::{self, Arch, Machine};
use textpoke_runner::report::{self, BootInfo, BootReport};
use textpoke_runner::splat;

#[derive(Parser)]
#[command(
    version,
    about = "Boots textpoke guests under QEMU and judges their KTAP output"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Boot a guest, stream its console to DIR/NAME.log, judge it, write DIR/NAME.json.
    Boot(BootArgs),
    /// Summarise every DIR/*.json; the last line is `N passed, M failed`.
    Summary {
        /// Directory of boot reports.
        dir: PathBuf,
    },
    /// Judge a saved console log as `boot` would, without booting.
    Parse {
        /// The log file.
        log: PathBuf,
        #[command(flatten)]
        expect: Expectation,
    },
}

#[derive(Args)]
struct BootArgs {
    /// Name of this boot: names the log and report files.
    #[arg(long)]
    name: String,
    /// Guest architecture.
    #[arg(long, value_enum)]
    arch: Arch,
    /// Kernel image.
    #[arg(long, value_name = "IMG")]
    kernel: PathBuf,
    /// Initramfs.
    #[arg(long, value_name = "CPIO")]
    initrd: PathBuf,
    /// Output directory (created if needed).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Guest CPUs.
    #[arg(long, default_value_t = 2)]
    smp: u32,
    /// Guest memory in MiB.
    #[arg(long, value_name = "MB", default_value_t = 1024)]
    mem: u32,
    /// Hard limit on QEMU's run time, from its start.
    #[arg(long, value_name = "SECS", default_value_t = 900)]
    timeout: u64,
    /// Extra kernel arguments.
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    append: Option<String>,
    /// Emulator binary to run instead of qemu-system-x86_64/qemu-system-aarch64.
    #[arg(long, value_name = "PROGRAM")]
    qemu: Option<String>,
    /// Multi-threaded TCG (one host thread per vCPU) instead of single-threaded.
    #[arg(long)]
    mttcg: bool,
    /// Do not echo KTAP results and splats while the guest runs.
    #[arg(long, short)]
    quiet: bool,
    /// Echo every console line while the guest runs.
    #[arg(long, conflicts_with = "quiet")]
    echo: bool,
    #[command(flatten)]
    expect: Expectation,
}

#[derive(Args)]
struct Expectation {
    /// Verdict the boot must reach to count as ok; anything but `pass` checks the harness.
    #[arg(long, value_enum, default_value_t = Verdict::Pass)]
    expect: Verdict,
    /// Text some console line must contain for the boot to count as ok.
    #[arg(long, value_name = "SUBSTRING")]
    expect_log: Option<String>,
    /// A KTAP document (named by a `# NAME` line after its plan) that must be present.
    #[arg(long = "require-doc", value_name = "NAME", num_args = 1..)]
    require_doc: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Boot(args) => boot(args),
        Cmd::Summary { dir } => summary(&dir),
        Cmd::Parse { log, expect } => parse(&log, &expect),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("textpoke-runner: {e}");
            ExitCode::from(2)
        }
    }
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn boot(args: BootArgs) -> Result<bool> {
    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    let log_path = args.out.join(format!("{}.log", args.name));
    let json_path = args.out.join(format!("{}.json", args.name));
    let machine = Machine {
        arch: args.arch,
        kernel: args.kernel,
        initrd: args.initrd,
        smp: args.smp,
        mem_mb: args.mem,
        append: args.append,
        qemu: args.qemu,
        mttcg: args.mttcg,
    };
    let cmd = qemu::command(&machine);
    let name = args.name.clone();
    if !args.quiet {
        println!("[{name}] {}", qemu::shell_words(&cmd));
    }

    let mut splat_seen = false;
    let mut progress = |line: &str| {
        if args.echo {
            println!("[{name}] {line}");
        } else if !args.quiet {
            if textpoke_runner::ktap::is_result_line(line) {
                println!(
                    "[{name}] {}",
                    textpoke_runner::ktap::strip_console_prefix(line)
                );
            } else if !splat_seen {
                if let Some(s) = splat::find(line) {
                    splat_seen = true;
                    println!("[{name}] splat: {}", s.text);
                }
            }
        }
    };
    let run = qemu::run(
        &cmd,
        &log_path,
        Duration::from_secs(args.timeout),
        &mut progress,
    )
    .map_err(|e| format!("running {}: {e}", cmd[0]))?;

    let judgement = judge::judge(&run.log, &run.outcome, &args.expect.require_doc);
    let (ok, reason) = judge::check(
        &judgement,
        &run.log,
        args.expect.expect,
        args.expect.expect_log.as_deref(),
    );
    let report = BootReport::new(
        BootInfo {
            name: args.name,
            arch: machine.arch,
            smp: machine.smp,
            mem_mb: machine.mem_mb,
            expected: args.expect.expect,
            expect_log: args.expect.expect_log,
            log: log_path.display().to_string(),
            seconds: (run.seconds * 10.0).round() / 10.0,
            qemu_status: run.outcome.exit_status(),
            command: cmd,
        },
        &judgement,
        ok,
        reason,
    );
    let json = serde_json::to_string_pretty(&report)?;
    std::fs::write(&json_path, json + "\n")
        .map_err(|e| format!("cannot write {}: {e}", json_path.display()))?;
    println!("{}", summary_line(&report));
    Ok(ok)
}

fn summary_line(r: &BootReport) -> String {
    format!(
        "{} {} [{} smp={}]: verdict {}, expected {} ({} passed, {} failed, {} skipped, {:.1} s): {}{}",
        if r.ok { "OK" } else { "FAILED" },
        r.name,
        r.arch,
        r.smp,
        r.verdict,
        r.expected,
        r.counts.passed,
        r.counts.failed,
        r.counts.skipped,
        r.seconds,
        r.reason,
        if r.ok {
            String::new()
        } else {
            format!(" (log: {})", r.log)
        }
    )
}

fn summary(dir: &std::path::Path) -> Result<bool> {
    let entries =
        report::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let (text, ok) = report::summary(&entries);
    print!("{text}");
    Ok(ok)
}

fn parse(path: &std::path::Path, expect: &Expectation) -> Result<bool> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let log = String::from_utf8_lossy(&bytes);
    let outcome = Outcome::from_log(&log);
    let judgement = judge::judge(&log, &outcome, &expect.require_doc);
    print_judgement(&judgement, &outcome);
    let (ok, reason) = judge::check(
        &judgement,
        &log,
        expect.expect,
        expect.expect_log.as_deref(),
    );
    println!(
        "{}: verdict {}, expected {}: {reason}",
        if ok { "OK" } else { "FAILED" },
        judgement.verdict,
        expect.expect
    );
    let c = judgement.counts;
    println!(
        "{} passed, {} failed, {} skipped",
        c.passed, c.failed, c.skipped
    );
    Ok(ok)
}

fn print_judgement(j: &Judgement, outcome: &Outcome) {
    if *outcome != Outcome::Unknown {
        println!(
            "qemu: {}",
            outcome.marker().trim_start_matches(textpoke_runner::MARKER)
        );
    }
    if j.documents.is_empty() {
        println!("no KTAP document");
    }
    for doc in &j.documents {
        println!(
            "document {} (line {}): {} passed, {} failed, {} skipped{}",
            doc.label(),
            doc.line,
            doc.passed(),
            doc.failed(),
            doc.skipped(),
            doc.plan.map_or(String::new(), |n| format!(", plan 1..{n}"))
        );
        for t in doc.tests.iter().filter(|t| t.status != Status::Pass) {
            let directive = match (t.directive, t.diagnostic.is_empty()) {
                (Some(d), true) => format!(" # {d}"),
                (Some(d), false) => format!(" # {d} {}", t.diagnostic),
                (None, false) => format!(" # {}", t.diagnostic),
                (None, true) => String::new(),
            };
            let tag = match t.status {
                Status::Skip => "SKIP",
                _ => "FAIL",
            };
            println!("  {tag} {} (line {}){directive}", t.path, t.line);
            if t.status == Status::Fail {
                for l in &t.log {
                    println!("       # {l}");
                }
            }
        }
        for p in &doc.problems {
            println!("  problem: {p}");
        }
    }
    if let Some(s) = &j.splat {
        println!("splat at line {}: {}", s.line, s.text);
    }
}
