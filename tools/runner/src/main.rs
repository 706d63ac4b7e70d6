//! `textpoke-runner`: plans the boots of a make target (`plan`), runs them (`suite`), boots one
//! guest under QEMU and judges it (`boot`), summarises a run directory (`summary`), reports the
//! benchmarks of one (`bench-report`), renders a finished one's results for the docs
//! (`report`), or judges a saved console log (`parse`).
//!
//! Each subcommand is a few lines over the library, by its role folders: `plan`, `suite`,
//! `record` and `boot` over `plan/` (the manifest and running its boots), `summary` and
//! `report` over `report/`, `bench-report` over `bench/`, `parse` and `trap-path` over `judge/`,
//! and `etm-observed` over the textpoke-etm crate; QEMU itself is `platform/`'s.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use textpoke_runner::judge::ktap::Status;
use textpoke_runner::judge::verdict::{self, Judgement, Verdict};
use textpoke_runner::plan::manifest::{self, Manifest, PlannedBoot, Suite, Variant};
use textpoke_runner::plan::run::{self, Artifact, Artifacts, Echo, RunOptions};
use textpoke_runner::platform::qemu::{Arch, Outcome};
use textpoke_runner::report::summary;
use textpoke_runner::rundir::boot_report;

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
    /// Write DIR/manifest.json for a make target's boots; print the guests to build, one
    /// `ARCH VARIANT` per line.
    Plan {
        /// The make target.
        #[arg(value_enum)]
        suite: Suite,
        /// Arches to plan for (both by default).
        #[arg(long = "arch", value_enum)]
        arches: Vec<Arch>,
        /// The run directory.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Run the boots of DIR/manifest.json whose guests were built, a few at a time.
    Suite {
        /// The run directory holding the manifest.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// A built guest, ARCH:VARIANT:KERNEL:INITRD (repeat per guest).
        #[arg(long = "artifact", value_name = "ARCH:VARIANT:KERNEL:INITRD")]
        artifacts: Vec<Artifact>,
        /// Learn of the guests as they are built instead: FILE gets a line
        /// ARCH:VARIANT:KERNEL:INITRD per guest and the line `done` after the last, and each
        /// boot starts once its guest is there.
        #[arg(long, value_name = "FILE", conflicts_with = "artifacts")]
        artifacts_from: Option<PathBuf>,
        /// Boots at once.
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// Emulator to run instead of qemu-system-x86_64/qemu-system-aarch64.
        #[arg(long, value_name = "PROGRAM")]
        qemu: Option<String>,
        /// The guest kernel source's tools/testing/kunit/kunit.py, for the KTAP cross-check.
        #[arg(long, value_name = "PATH")]
        kunit: Option<PathBuf>,
        /// Echo KTAP results and splats while the guests run.
        #[arg(long, short)]
        verbose: bool,
    },
    /// Record the result of a host check (DIR/NAME.json) for the summary; NAME must be one of
    /// the checks of DIR/manifest.json.
    Record {
        /// The run directory.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// The check's name, as the manifest lists it.
        #[arg(long)]
        name: String,
        /// The check's exit status: 0 passed, anything else failed.
        #[arg(long)]
        status: i32,
        /// Why, for a person.
        #[arg(long, default_value = "")]
        reason: String,
        /// Its log.
        #[arg(long, default_value = "")]
        log: String,
    },
    /// Record a timed stage of a run (tools/lib.sh's `timed`): appends it to DIR/stages.jsonl,
    /// which the stage table of `report` reads.
    Stage {
        /// The run directory.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// The script's lane that ran it (`main`, `host`).
        #[arg(long)]
        lane: String,
        /// What ran.
        #[arg(long)]
        name: String,
        /// When it started, in seconds since the Unix epoch (`date +%s.%N`).
        #[arg(long)]
        started: f64,
        /// When it ended, likewise.
        #[arg(long)]
        ended: f64,
        /// The CPU time of the processes it ran: the second line of bash's `times` in a subshell
        /// that ran only it (`0m1.250s 0m0.500s`, user then system).
        #[arg(long, value_name = "TIMES")]
        cpu: Option<String>,
        /// Its exit status.
        #[arg(long)]
        status: i32,
    },
    /// Check that a built textpoke.ko's trap path calls nothing a kprobe could be placed on;
    /// print its functions, one per line.
    TrapPath {
        /// The module.
        ko: PathBuf,
    },
    /// Check that docs/writers.md names every use of a text-writing primitive in the kernel
    /// tree TREE, and nothing else (tools/runner/src/judge/writers.rs); with `--list`, print
    /// the uses found instead, one table row each.
    Writers {
        /// The patched kernel source.
        #[arg(long)]
        tree: PathBuf,
        /// The table.
        #[arg(long, default_value = "docs/writers.md")]
        table: PathBuf,
        /// Print the uses found as table rows, and judge nothing.
        #[arg(long)]
        list: bool,
    },
    /// Read the observed executions an arm64 boot printed (tools/etm/src/dataset.rs), trace
    /// them as an ETM would and have perf (`$TEXTPOKE_PERF`, else /usr/bin/perf) decode them
    /// in WORK against the boot's records, none, and BEFORE/AFTER pairs (the AFTER after the
    /// write): the first must give every execution its path, the two others wrong paths
    /// (tools/etm/src/observed.rs).
    EtmObserved {
        /// The boot's console log.
        #[arg(long)]
        log: PathBuf,
        /// Where to write the three traces.
        #[arg(long)]
        work: PathBuf,
    },
    /// Boot a guest, stream its console to DIR/NAME.log, judge it, write DIR/NAME.json.
    Boot(BootArgs),
    /// Summarise a run directory: every DIR/*.json, and every report DIR/manifest.json plans
    /// (boots, kunit.py cross-checks, host checks) that is missing, as a failure; the last line
    /// is `N passed, M failed`. A directory without a manifest fails.
    Summary {
        /// The run directory.
        dir: PathBuf,
    },
    /// Read the benchmark samples of a run directory's console logs (`make bench`) and print
    /// a table per arch; write it, the samples and a plot to DIR/bench/bench-ARCH.{md,json,svg}.
    BenchReport {
        /// The run directory.
        dir: PathBuf,
        /// Where to write instead of DIR/bench.
        #[arg(long, value_name = "DIR")]
        to: Option<PathBuf>,
    },
    /// Render a finished run directory's results as Markdown, for the README and docs.
    ///
    /// A row per boot and per check, `N passed, M failed`, the wall time, and the bench
    /// report's ratios if there is one; then where the time went: the scripts' stages and the
    /// boots on one time line, and the seconds of each group of the agent's document per boot.
    /// Prints it, or with --readme/--results puts it between the lines
    /// `<!-- textpoke-runner report: begin -->` and `<!-- textpoke-runner report: end -->` of
    /// those files instead (the README without the time tables); a file without them is an
    /// error, and then no file is changed.
    Report {
        /// The run directory (with its manifest.json).
        dir: PathBuf,
        /// The bench report: a directory with bench-ARCH.json, or whose bench/ has them (by
        /// default DIR/bench, if it has them).
        #[arg(long, value_name = "DIR")]
        bench: Option<PathBuf>,
        /// A README to update.
        #[arg(long, value_name = "FILE")]
        readme: Option<PathBuf>,
        /// A results document to update.
        #[arg(long, value_name = "FILE")]
        results: Option<PathBuf>,
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
    /// How long the console may stay silent before the boot counts as hung.
    #[arg(long, value_name = "SECS", default_value_t = 900)]
    silence: u64,
    /// Hard limit on QEMU's run time, from its start.
    #[arg(long, value_name = "SECS", default_value_t = 3600)]
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
    /// A KTAP document (named by a `# NAME` line after its plan) or suite (a top-level subtest
    /// of an unnamed document) that must be present.
    #[arg(long = "require", alias = "require-doc", value_name = "NAME", num_args = 1..)]
    require: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Plan { suite, arches, out } => plan(suite, arches, &out),
        Cmd::Suite {
            out,
            artifacts,
            artifacts_from,
            jobs,
            qemu,
            kunit,
            verbose,
        } => run_suite(
            &out,
            &match artifacts_from {
                Some(file) => Artifacts::From(file),
                None => Artifacts::Given(artifacts),
            },
            &RunOptions {
                jobs,
                qemu,
                echo: if verbose { Echo::Results } else { Echo::Quiet },
                kunit,
            },
        ),
        Cmd::Record {
            out,
            name,
            status,
            reason,
            log,
        } => run::record(&out, &name, status == 0, &reason, &log)
            .map(|r| {
                println!("{}", run::summary_line(&r));
                true
            })
            .map_err(Into::into),
        Cmd::Stage {
            out,
            lane,
            name,
            started,
            ended,
            cpu,
            status,
        } => record_stage(
            &out,
            textpoke_runner::rundir::stages::Stage {
                name,
                lane,
                started,
                seconds: ended - started,
                cpu: None,
                status,
            },
            cpu.as_deref(),
        ),
        Cmd::TrapPath { ko } => trap_path(&ko),
        Cmd::Writers { tree, table, list } => writers(&tree, &table, list),
        Cmd::EtmObserved { log, work } => etm_observed(&log, &work),
        Cmd::Boot(args) => boot(args),
        Cmd::Summary { dir } => summary(&dir),
        Cmd::BenchReport { dir, to } => bench_report(&dir, to.as_deref()).map(|()| true),
        Cmd::Report {
            dir,
            bench,
            readme,
            results,
        } => report_results(
            &dir,
            bench.as_deref(),
            readme.as_deref(),
            results.as_deref(),
        )
        .map(|()| true),
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

fn plan(suite: Suite, arches: Vec<Arch>, out: &std::path::Path) -> Result<bool> {
    let arches = if arches.is_empty() {
        vec![Arch::X86_64, Arch::Arm64]
    } else {
        arches
    };
    let manifest = manifest::plan(suite, &arches);
    manifest.write(out)?;
    for (arch, variant) in manifest.artifacts() {
        println!("{arch} {variant}");
    }
    Ok(true)
}

fn run_suite(out: &std::path::Path, artifacts: &Artifacts, opts: &RunOptions) -> Result<bool> {
    let manifest = Manifest::read(out)?.ok_or_else(|| {
        format!(
            "{} has no manifest: run `textpoke-runner plan` first",
            out.display()
        )
    })?;
    let results = run::run(&manifest, artifacts, out, opts);
    let mut ok = true;
    for (name, r) in &results {
        match r {
            Ok(report) => ok &= report.ok,
            Err(e) => {
                eprintln!("textpoke-runner: {name}: {e}");
                ok = false;
            }
        }
    }
    if manifest.suite == Suite::Run {
        // The demo narrates what it did in `textpoke-agent: demo ...` lines.
        for (_, report) in results
            .iter()
            .filter_map(|(n, r)| Some((n, r.as_ref().ok()?)))
        {
            let log = std::fs::read_to_string(&report.log).unwrap_or_default();
            println!("\n-- {}: what the demo did", report.arch);
            for line in log.lines() {
                let line = textpoke_runner::judge::ktap::strip_console_prefix(line);
                if let Some(rest) = line.strip_prefix("textpoke-agent: demo ") {
                    println!("   {rest}");
                }
            }
        }
    }
    if manifest.suite == Suite::Bench {
        // A boot that failed may still have measured something: report what there is.
        if let Err(e) = bench_report(out, None) {
            eprintln!("textpoke-runner: {e}");
            ok = false;
        }
    }
    Ok(ok)
}

/// Prints the bench tables of the run directory `dir` and writes them, the samples and the
/// plots to `to` (by default DIR/bench).
fn bench_report(dir: &std::path::Path, to: Option<&std::path::Path>) -> Result<()> {
    let reports = textpoke_runner::bench::report::read_dir(dir)?;
    let to = to.map_or_else(
        || textpoke_runner::rundir::layout::bench_dir(dir),
        Into::into,
    );
    let written = textpoke_runner::bench::report::write(&reports, &to)?;
    for r in &reports {
        println!("\n{}", textpoke_runner::bench::report::markdown(r));
        for s in &r.flips.sources {
            for p in &s.problems {
                eprintln!("textpoke-runner: {}: unreadable sample: {p}", s.log);
            }
        }
    }
    for path in written {
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Renders the results of the run directory `dir` (and of the bench report in `bench`); prints
/// them, or puts them into `readme` and `results`.
/// Appends `stage` to `out`'s stages, with the CPU time of a line of `times`, if given.
fn record_stage(
    out: &std::path::Path,
    mut stage: textpoke_runner::rundir::stages::Stage,
    cpu: Option<&str>,
) -> Result<bool> {
    use textpoke_runner::rundir::stages::{append, times_seconds};
    stage.cpu = cpu.map(times_seconds).transpose()?;
    append(out, &stage)?;
    Ok(true)
}

fn report_results(
    dir: &std::path::Path,
    bench: Option<&std::path::Path>,
    readme: Option<&std::path::Path>,
    results: Option<&std::path::Path>,
) -> Result<()> {
    use textpoke_runner::report::{results as block, times};
    let run = block::read(dir, bench)?;
    let summary = block::markdown(&run);
    // The README takes the results; the results document, and the printout, also where the
    // time went.
    let timed = times::markdown(&times::read(dir, &run.entries)?);
    let full = if timed.is_empty() {
        summary.clone()
    } else {
        format!("{summary}\n{timed}")
    };
    if readme.is_none() && results.is_none() {
        print!("{full}");
        return Ok(());
    }
    let files: Vec<(&std::path::Path, &str)> = [(readme, summary.as_str()), (results, &full)]
        .into_iter()
        .filter_map(|(f, text)| Some((f?, text)))
        .collect();
    block::update_files(&files)?;
    for (f, _) in files {
        println!("updated {}", f.display());
    }
    Ok(())
}

fn trap_path(ko: &std::path::Path) -> Result<bool> {
    let t = textpoke_runner::judge::trappath::read(ko)?;
    for f in t.reachable() {
        println!("{f}");
    }
    let escapes = t.escapes();
    if t.in_section.is_empty() {
        eprintln!("{}: no function in .kprobes.text", ko.display());
        return Ok(false);
    }
    for e in &escapes {
        eprintln!(
            "{}: the trap path calls {e}, which kprobes may probe",
            ko.display()
        );
    }
    Ok(escapes.is_empty())
}

fn writers(tree: &std::path::Path, table: &std::path::Path, list: bool) -> Result<bool> {
    use textpoke_runner::judge::writers;
    let found = writers::scan(tree)?;
    if list {
        for u in &found {
            println!("| `{}` | `{}()` | `{}` |", u.file, u.function, u.primitive);
        }
        return Ok(true);
    }
    let text = std::fs::read_to_string(table).map_err(|e| format!("{}: {e}", table.display()))?;
    let d = writers::compare(&found, &writers::table(&text)?);
    for u in &d.unnamed {
        eprintln!(
            "{}: the tree has a writer it does not name: {u}",
            table.display()
        );
    }
    for u in &d.stale {
        eprintln!(
            "{}: names a writer the tree does not have: {u}",
            table.display()
        );
    }
    println!(
        "{} uses of {} text-writing primitives in {}: {} not in {}, {} of its rows stale",
        found.len(),
        writers::PRIMITIVES.len(),
        tree.display(),
        d.unnamed.len(),
        table.display(),
        d.stale.len()
    );
    Ok(d.is_empty())
}

/// Executions the arm64 boot's trace must hold: as many as the observer must classify
/// (tools/agent/src/scenarios/observed.rs, `MIN_CLASSIFIED`).
const ETM_MIN_TRACED: usize = 1000;

fn etm_observed(log: &std::path::Path, work: &std::path::Path) -> Result<bool> {
    use textpoke_etm::dataset::Dataset;
    use textpoke_etm::observed::{self, Stream};
    let text = std::fs::read_to_string(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let d = Dataset::parse(&text).map_err(|e| format!("{}: {e}", log.display()))?;
    let (traced, sel) = observed::select(&d)?;
    println!(
        "{}: {} watched sites, {} records, {} executions: {} in the trace, {} left out as \
         trapped (the trace shows the BRK), {} as undecided",
        log.display(),
        d.sites.len(),
        d.pokes.len(),
        d.execs.len(),
        sel.traced,
        sel.trapped,
        sel.undecided
    );
    let mut outcomes = Vec::new();
    for stream in Stream::ALL {
        let dir = work.join(stream.name());
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let o = observed::decode_stream(&d, &traced, stream, &dir)?;
        println!(
            "{}: {} records, {} executions decoded, {} with the wrong path, {} decoder errors{}",
            stream.name(),
            o.records,
            o.decoded,
            o.wrong,
            o.errors.len(),
            o.examples
                .first()
                .map_or(String::new(), |x| format!("; first: {x}"))
        );
        outcomes.push(o);
    }
    match observed::verdict(&outcomes, &sel, ETM_MIN_TRACED) {
        Ok(()) => {
            println!(
                "every execution decoded to its path with the boot's records; without them and \
                 with BEFORE/AFTER pairs, wrong paths: caught"
            );
            Ok(true)
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(false)
        }
    }
}

fn boot(args: BootArgs) -> Result<bool> {
    let planned = PlannedBoot {
        name: args.name,
        arch: args.arch,
        variant: Variant::Patched,
        smp: args.smp,
        mem_mb: args.mem,
        silence: args.silence,
        cap: args.timeout,
        append: args.append.unwrap_or_default(),
        expect: args.expect.expect,
        expect_log: args.expect.expect_log,
        require: args.expect.require,
        kunit_check: false,
    };
    let artifact = Artifact {
        arch: args.arch,
        variant: Variant::Patched,
        kernel: args.kernel,
        initrd: args.initrd,
    };
    let echo = if args.echo {
        Echo::All
    } else if args.quiet {
        Echo::Quiet
    } else {
        Echo::Results
    };
    let report = run::boot(
        &planned,
        &artifact,
        &args.out,
        args.qemu.as_deref(),
        args.mttcg,
        echo,
    )?;
    println!("{}", run::summary_line(&report));
    Ok(report.ok)
}

fn summary(dir: &std::path::Path) -> Result<bool> {
    // Without the plan there is no telling which reports are missing, so nothing can pass.
    let manifest = Manifest::read(dir)?.ok_or_else(|| {
        format!(
            "{} has no {}: nothing was planned there, so nothing can be judged \
             (`textpoke-runner plan` writes it)",
            dir.display(),
            textpoke_runner::rundir::layout::MANIFEST
        )
    })?;
    let entries =
        boot_report::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let (text, ok) = summary::summary(&entries, &manifest.expected_reports());
    print!("{text}");
    Ok(ok)
}

fn parse(path: &std::path::Path, expect: &Expectation) -> Result<bool> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let log = String::from_utf8_lossy(&bytes);
    let outcome = Outcome::from_log(&log);
    let judgement = verdict::judge(&log, &outcome, &expect.require);
    print_judgement(&judgement, &outcome);
    let (ok, reason) = verdict::check(
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
