//! `textpoke-mutants`: mutation testing of the kernel module's source: the pending-instruction
//! table (`kernel/pending.rs`), the step planner and its recovery (`kernel/plan.rs`), both
//! instruction codecs with their emulation and acceptance (`arch/*/insn.rs`) and the record
//! writer (`kernel/record.rs`), all shared with the host crate; and, listed but never built
//! here, mutants of the kernel-only files ([`mutants::KERNEL_ONLY`]), each allowed with the
//! guest check of `make test` that catches it.
//!
//! Copies the workspace into a fresh directory, runs the killing tests on the unmutated copy
//! (the baseline, which must pass), then applies each mutant of [`mutants::MUTANTS`] in turn to
//! the file it names, requires a test to fail, and restores that file before the next mutant.
//! The tests are `textpoke-core`'s, named `KIND:NAME`: loom (`tools/core/tests/pending_loom.rs`
//! under `--cfg loom`, kind `loom`), the table's unit and stress tests (`pending.rs`, `stress`),
//! and the host tests `x86_insn`, `arm64_insn`, `plan`, `model` and `record` (the file of each
//! name under `tools/core/tests/`); and the guest agent's unit tests (kind `agent`), which kill
//! the mutants of the harness's own judgements.
//!
//! ```text
//! textpoke-mutants [--full] [--only NAME]... [--list] [--root DIR] [--target-dir DIR]
//!                  [--offline] [--keep]
//! textpoke-mutants --apply NAME --root DIR
//! textpoke-mutants --guest RUNNER [--only NAME]... [--target-dir DIR]
//! ```
//!
//! - `--apply`: writes one mutant into a scratch checkout `DIR` and exits, so that a kernel-only
//!   mutant's claimed killer can be seen failing in a guest built from that checkout;
//! - default (`make test`): every mutant against its own listed killers, and a mutant of the
//!   table also against the cheap loom tests (all but [`EXPENSIVE`]), stopping at its first
//!   kill;
//! - `--full`: every mutant against every test of every kind, listing every killer;
//! - `--guest RUNNER` (`make mutants-guest`): each kernel-only mutant built into the guest and
//!   booted with `RUNNER` (`textpoke-runner`), required to fail on the check it names
//!   ([`guest`]).
//!
//! The copy is made afresh in `DIR/work` (`DIR` is `--target-dir`, by default
//! `$TEXTPOKE_CACHE/cargo-mutants`); the loom tests build into `DIR/loom`, the others (built
//! without `--cfg loom`) into `DIR/host`, so dependencies compile once and a mutant rebuilds
//! only the core (incrementally). Every build and test log stays in `DIR/logs`. Each test runs
//! alone, limited to [`LIMIT_FACTOR`] times its baseline duration (at least [`MIN_LIMIT`]); a
//! test that runs past its limit, or that loom stops as a livelock or deadlock, kills a mutant
//! only if a hang is that mutant's expected failure mode ([`mutants::Mutant::hang_kills`]), and
//! is otherwise inconclusive, which fails the run.
//!
//! Prints one line per mutant, the reasons of the allowed ones, a kill table (per file: its
//! mutants, killed, allowed survivors, kernel-only, failed) and ends with the summary
//! `N mutants: K killed, S survived (allowed: A)`, followed by `, G kernel-only (allowed, not
//! run)` when there are any. Exits 1 if a mutant survives that is not an allowed survivor (or
//! hangs a test when a hang is not its expected failure mode, or does not build), 2 if the
//! baseline fails or on any other error.

mod exec;
mod guest;
mod mutants;
mod workspace;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use exec::{Builder, Kind, Outcome};
use mutants::{Mutant, MUTANTS};

/// Loom tests too slow for the default mode unless a mutant lists them as its killer.
const EXPENSIVE: &[&str] = &[
    // 425713 interleavings, about a minute.
    "loom:slot_reuse_with_nested_readers_on_one_cpu",
    // A few seconds of 6 threads; on x86 it cannot see an ordering mutant anyway.
    "stress:stress_readers_and_concurrent_publishers",
];

/// A test's time limit: this many times its baseline duration, and at least [`MIN_LIMIT`].
const LIMIT_FACTOR: u32 = 5;
/// The shortest time limit of a test.
const MIN_LIMIT: Duration = Duration::from_secs(30);

struct Options {
    full: bool,
    only: Vec<String>,
    list: bool,
    root: PathBuf,
    target_base: PathBuf,
    offline: bool,
    keep: bool,
    apply: Option<String>,
    /// `--guest`: boot the kernel-only mutants (guest.rs) with this runner.
    guest: Option<PathBuf>,
}

const USAGE: &str = "usage: textpoke-mutants [--full] [--only NAME]... [--list] [--root DIR] \
                     [--target-dir DIR] [--offline] [--keep]\n       \
                     textpoke-mutants --apply NAME --root DIR\n       \
                     textpoke-mutants --guest RUNNER [--only NAME]... [--target-dir DIR]";

fn parse_args() -> Result<Options, String> {
    let cache = std::env::var_os("TEXTPOKE_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/textpoke")))
        .unwrap_or_else(std::env::temp_dir);
    let mut o = Options {
        full: false,
        only: Vec::new(),
        list: false,
        root: Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
        target_base: cache.join("cargo-mutants"),
        offline: false,
        keep: false,
        apply: None,
        guest: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--full" => o.full = true,
            "--list" => o.list = true,
            "--offline" => o.offline = true,
            "--keep" => o.keep = true,
            "--apply" => o.apply = Some(value()?),
            "--guest" => o.guest = Some(PathBuf::from(value()?)),
            "--only" => o.only.push(value()?),
            "--root" => o.root = PathBuf::from(value()?),
            "--target-dir" => o.target_base = PathBuf::from(value()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {arg}\n{USAGE}")),
        }
    }
    o.root = o
        .root
        .canonicalize()
        .map_err(|e| format!("{}: {e}", o.root.display()))?;
    Ok(o)
}

/// `kind:test`, split.
fn split_test(test: &str) -> Result<(Kind, &str), String> {
    let (kind, name) = test
        .split_once(':')
        .ok_or(format!("test {test} is not KIND:NAME"))?;
    Ok((
        Kind::from_name(kind).ok_or(format!("test {test}: unknown kind {kind}"))?,
        name,
    ))
}

/// Whether the reduced mode runs test `id` (`kind:name`) against every mutant of the pending
/// table: the loom tests but [`EXPENSIVE`]. Any other test runs only against the mutants that
/// list it as a killer (the loom tests exercise nothing but the table).
fn runs_against_all(kind: Kind, id: &str) -> bool {
    kind == Kind::Loom && !EXPENSIVE.contains(&id)
}

/// Whether the reduced mode runs the tests of [`runs_against_all`] against `m`.
fn gets_the_common_tests(m: &Mutant) -> bool {
    m.file == mutants::PENDING
}

/// What the run does to each mutant.
struct Plan<'a> {
    mutants: Vec<&'a Mutant>,
    /// The tests of each kind the run uses, in order (`kind:name`).
    tests: BTreeMap<Kind, Vec<String>>,
    full: bool,
}

impl Plan<'_> {
    /// The tests to run against `m`: grouped by kind (one build each), the kind of its first
    /// listed killer first, and within a kind its listed killers first; then, in the reduced
    /// mode, only the tests run against every mutant of the pending table (if `m` is one), in
    /// the full mode all the run's tests.
    fn tests_for(&self, m: &Mutant) -> Vec<(Kind, String)> {
        let killers: Vec<(Kind, &str)> = m
            .killers
            .iter()
            .filter_map(|k| split_test(k).ok())
            .collect();
        let mut kinds: Vec<Kind> = killers.iter().map(|(k, _)| *k).collect();
        kinds.extend(Kind::ALL);
        let mut out: Vec<(Kind, String)> = Vec::new();
        let mut seen_kinds = Vec::new();
        for kind in kinds {
            if seen_kinds.contains(&kind) {
                continue;
            }
            seen_kinds.push(kind);
            let Some(all) = self.tests.get(&kind) else {
                continue;
            };
            let names = killers
                .iter()
                .filter(|(k, _)| *k == kind)
                .map(|(_, n)| *n)
                .chain(
                    all.iter()
                        .filter(|id| {
                            self.full || (gets_the_common_tests(m) && runs_against_all(kind, id))
                        })
                        .filter_map(|id| split_test(id).ok().map(|(_, n)| n)),
                );
            for name in names {
                if !out.iter().any(|(k, n)| *k == kind && n == name) {
                    out.push((kind, name.to_owned()));
                }
            }
        }
        out
    }
}

/// A mutant's fate.
enum Fate {
    /// Killed by these tests (`kind:name`, why).
    Killed(Vec<(String, String)>),
    Survived,
    /// A test hung although a hang is not the mutant's expected failure mode.
    Inconclusive(String),
    /// The mutant did not apply or build.
    Error(String),
    /// Not run: its file is compiled into the kernel module only (an allowed mutant).
    KernelOnly,
}

/// A file of the copy that holds a mutant's text until [`Mutated::restore`] writes its original
/// text back. Made before the mutant is written, so a failed or partial write is undone too; if
/// it is dropped unrestored (a `?` or a panic unwinding through the run), `Drop` restores the
/// file as a last resort.
struct Mutated {
    path: PathBuf,
    original: String,
    restored: bool,
}

impl Mutated {
    fn new(path: PathBuf, original: String) -> Self {
        Mutated {
            path,
            original,
            restored: false,
        }
    }

    /// Writes the original text back.
    fn restore(mut self) -> Result<(), String> {
        let written = fs::write(&self.path, &self.original);
        self.restored = written.is_ok();
        written.map_err(|e| format!("restore {}: {e}", self.path.display()))
    }
}

impl Drop for Mutated {
    fn drop(&mut self) {
        if !self.restored {
            let _ = fs::write(&self.path, &self.original);
        }
    }
}

struct Run {
    builder: Builder,
    logs: PathBuf,
    /// The copy of the workspace.
    work: PathBuf,
    /// The original text of each file a selected mutant edits (relative path, text).
    originals: BTreeMap<&'static str, String>,
    limits: BTreeMap<String, Duration>,
}

impl Run {
    fn build(&mut self, kind: Kind, label: &str, must_compile: bool) -> Result<PathBuf, String> {
        let log = self.logs.join(format!("{label}-build-{}.log", kind.name()));
        let built = self.builder.build(kind, &log)?;
        if must_compile && built.fresh {
            return Err(format!(
                "cargo did not recompile the {} tests for {label}: the mutation was not built",
                kind.name()
            ));
        }
        Ok(built.exe)
    }

    fn run(&self, exe: &Path, kind: Kind, name: &str, label: &str) -> Result<Outcome, String> {
        let id = format!("{}:{name}", kind.name());
        let limit = self.limits.get(&id).copied().unwrap_or(MIN_LIMIT * 10);
        let log = self
            .logs
            .join(format!("{label}-{}-{name}.log", kind.name()));
        exec::run_test(exe, name, limit, &log)
    }

    /// Applies `m` to its file, runs its tests and restores the file, whatever the fate. An
    /// error only if the file could not be restored: every later mutant would be built on top
    /// of this one.
    fn mutant(&mut self, plan: &Plan, m: &Mutant) -> Result<Fate, String> {
        let Some(original) = self.originals.get(m.file) else {
            return Ok(Fate::Error(format!(
                "{} was not read before the run",
                m.file
            )));
        };
        let text = match mutants::apply(m, original) {
            Ok(t) => t,
            Err(e) => return Ok(Fate::Error(e)),
        };
        let mutated = Mutated::new(self.work.join(m.file), original.clone());
        let fate = match fs::write(&mutated.path, text) {
            Ok(()) => self.test_mutant(plan, m),
            Err(e) => Fate::Error(format!("write {}: {e}", mutated.path.display())),
        };
        mutated
            .restore()
            .map_err(|e| format!("after mutant {}: {e}", m.name))?;
        Ok(fate)
    }

    /// Runs the tests of `plan` against `m`, already written to its file.
    fn test_mutant(&mut self, plan: &Plan, m: &Mutant) -> Fate {
        let mut killed = Vec::new();
        let mut hung = None;
        let mut built: Option<Kind> = None;
        let mut exe = PathBuf::new();
        for (kind, name) in plan.tests_for(m) {
            if built != Some(kind) {
                match self.build(kind, m.name, true) {
                    Ok(e) => exe = e,
                    Err(e) => return Fate::Error(e),
                }
                built = Some(kind);
            }
            let id = format!("{}:{name}", kind.name());
            match self.run(&exe, kind, &name, m.name) {
                Err(e) => return Fate::Error(e),
                Ok(Outcome::Pass) => {}
                Ok(Outcome::Fail(why)) => killed.push((id, why)),
                Ok(Outcome::Hang(why)) if m.hang_kills => {
                    killed.push((id, format!("hang, as expected: {why}")))
                }
                Ok(Outcome::Hang(why)) => {
                    hung.get_or_insert(format!("{id} hung ({why})"));
                }
            }
            if !plan.full && !killed.is_empty() {
                break;
            }
        }
        if !killed.is_empty() {
            Fate::Killed(killed)
        } else if let Some(h) = hung {
            Fate::Inconclusive(h)
        } else {
            Fate::Survived
        }
    }
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(n.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `--apply NAME`: writes mutant `NAME` into its file under `root`, a scratch checkout, for a
/// guest run of a kernel-only mutant (`make test` builds the module from that checkout). The
/// source tree itself is refused: a mutant must never be committed by accident.
fn apply_in_place(root: &Path, name: &str) -> Result<ExitCode, String> {
    let own = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .map_err(|e| format!("the source tree: {e}"))?;
    if root == own {
        return Err(format!(
            "--apply writes into {}, the tree this tool was built from: give --root a scratch \
             clone",
            root.display()
        ));
    }
    let m = MUTANTS
        .iter()
        .find(|m| m.name == name)
        .ok_or(format!("no mutant named {name} (--list lists them)"))?;
    let path = root.join(m.file);
    let source = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mutated = mutants::apply(m, &source)?;
    fs::write(&path, mutated).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("applied {name} to {}: {}", path.display(), m.what);
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("textpoke-mutants: {e}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> Result<ExitCode, String> {
    let o = parse_args()?;
    if let Some(name) = &o.apply {
        return apply_in_place(&o.root, name);
    }
    if o.list {
        for m in MUTANTS {
            let fate = match m.allowed {
                Some(_) if mutants::kernel_only(m.file) => {
                    "kernel-only: allowed, not run".to_owned()
                }
                Some(_) => "allowed to survive".to_owned(),
                None => format!("killers: {}", m.killers.join(", ")),
            };
            println!("{:<26} {:<18} {:<62} {fate}", m.name, m.file, m.what);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let selected: Vec<&Mutant> = if o.only.is_empty() {
        MUTANTS.iter().collect()
    } else {
        let mut v = Vec::new();
        for name in &o.only {
            v.push(
                MUTANTS
                    .iter()
                    .find(|m| m.name == name)
                    .ok_or(format!("no mutant named {name} (see --list)"))?,
            );
        }
        v
    };
    if let Some(runner) = &o.guest {
        return guest::run(&o.root, &o.target_base, runner, &selected);
    }
    let started = Instant::now();
    // The mutants of files the host crate does not compile cannot be built here: each must
    // still apply to the repository's source, and be allowed, with the guest check that
    // catches it as its reason.
    let (host, kernel): (Vec<&Mutant>, Vec<&Mutant>) = selected
        .iter()
        .copied()
        .partition(|m| !mutants::kernel_only(m.file));
    for m in &kernel {
        if m.allowed.is_none() || !m.killers.is_empty() {
            return Err(format!(
                "mutant {} of {}, which only the kernel module compiles, must be allowed (with \
                 what catches it in the guest) and name no host killer",
                m.name, m.file
            ));
        }
        let path = o.root.join(m.file);
        let text =
            fs::read_to_string(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
        mutants::apply(m, &text)?;
    }

    // One run at a time per target directory: the copy and the logs live beside the builds.
    fs::create_dir_all(&o.target_base)
        .map_err(|e| format!("create {}: {e}", o.target_base.display()))?;
    let lock = File::create(o.target_base.join("lock")).map_err(|e| format!("lock: {e}"))?;
    lock.lock().map_err(|e| format!("lock: {e}"))?;
    let work = o.target_base.join("work");
    let logs = o.target_base.join("logs");
    for dir in [&work, &logs] {
        if dir.exists() {
            fs::remove_dir_all(dir).map_err(|e| format!("remove {}: {e}", dir.display()))?;
        }
    }
    fs::create_dir_all(&logs).map_err(|e| format!("create {}: {e}", logs.display()))?;
    let copied = workspace::copy(&o.root, &work)?;
    for file in mutants::files(kernel.iter().copied()) {
        if copied.contains(Path::new(file)) {
            return Err(format!(
                "{file} is listed as kernel-only, but the host crate compiles it now: give its \
                 mutants host killers (tools/mutants/src/mutants.rs)"
            ));
        }
    }
    let files = mutants::files(host.iter().copied());
    let mut originals = BTreeMap::new();
    for file in &files {
        if !copied.contains(Path::new(file)) {
            return Err(format!("the copy of the workspace has no {file}"));
        }
        let text = fs::read_to_string(work.join(file)).map_err(|e| format!("read {file}: {e}"))?;
        originals.insert(*file, text);
    }
    // Every selected mutant must apply before anything is built.
    for m in &host {
        let original = originals
            .get(m.file)
            .ok_or(format!("mutant {}: {} was not read", m.name, m.file))?;
        mutants::apply(m, original)?;
    }
    println!(
        "textpoke-mutants: {} mode, {} mutants of {}; copy in {}, builds in {}",
        if o.full { "full" } else { "reduced" },
        selected.len(),
        mutants::files(selected.iter().copied()).join(", "),
        work.display(),
        o.target_base.display()
    );

    let mut run = Run {
        builder: Builder {
            work: work.clone(),
            target_base: o.target_base.clone(),
            offline: o.offline,
        },
        logs: logs.clone(),
        work: work.clone(),
        originals,
        limits: BTreeMap::new(),
    };

    // Baseline: build each kind the run needs, list its tests, run them unmutated.
    let mut kinds: Vec<Kind> = if o.full {
        Kind::ALL.to_vec()
    } else if host.iter().any(|m| gets_the_common_tests(m)) {
        vec![Kind::Loom]
    } else {
        Vec::new()
    };
    for m in &host {
        for k in m.killers {
            let (kind, _) = split_test(k)?;
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
    }
    let mut plan = Plan {
        mutants: host,
        tests: BTreeMap::new(),
        full: o.full,
    };
    let mut baseline_ok = true;
    for kind in kinds {
        let t = Instant::now();
        let exe = run.build(kind, "baseline", false)?;
        let built_in = t.elapsed();
        let listed = exec::list_tests(&exe)?;
        let ids: Vec<String> = listed
            .iter()
            .map(|n| format!("{}:{n}", kind.name()))
            .collect();
        for m in &plan.mutants {
            for k in m.killers {
                if k.starts_with(&format!("{}:", kind.name())) && !ids.iter().any(|i| i == k) {
                    return Err(format!(
                        "mutant {} names killer {k}, which does not exist",
                        m.name
                    ));
                }
            }
        }
        let chosen: Vec<String> = ids
            .into_iter()
            .filter(|id| {
                o.full
                    || runs_against_all(kind, id)
                    || plan
                        .mutants
                        .iter()
                        .any(|m| m.killers.contains(&id.as_str()))
            })
            .collect();
        let t = Instant::now();
        let mut passed = 0;
        for id in &chosen {
            let (_, name) = split_test(id)?;
            let test_start = Instant::now();
            let outcome = run.run(&exe, kind, name, "baseline")?;
            let took = test_start.elapsed();
            if outcome == Outcome::Pass {
                passed += 1;
            } else {
                eprintln!("baseline: {id} fails on the unmutated copy: {outcome:?}");
                baseline_ok = false;
            }
            run.limits
                .insert(id.clone(), (took * LIMIT_FACTOR).max(MIN_LIMIT));
        }
        println!(
            "baseline {:<10} {passed} of {} tests pass unmutated (build {:.1} s, tests {:.1} s)",
            kind.name(),
            chosen.len(),
            built_in.as_secs_f64(),
            t.elapsed().as_secs_f64()
        );
        plan.tests.insert(kind, chosen);
    }
    if !baseline_ok {
        return Err(format!(
            "the unmutated copy fails its tests (logs in {}): no mutant run",
            logs.display()
        ));
    }

    println!("{:<26} {:<62} {:>7}  fate", "mutant", "change", "time");
    let mut tally = Tally::new(&selected);
    let mut notes = Vec::new();
    for m in plan.mutants.clone() {
        let t = Instant::now();
        let fate = run.mutant(&plan, m)?;
        let took = t.elapsed().as_secs_f64();
        tally.count(m, &fate);
        let line = match &fate {
            Fate::Killed(by) => {
                if let Some(why) = m.allowed {
                    notes.push(format!(
                        "note: {} is on the allow-list ({why}) but was killed: revisit it",
                        m.name
                    ));
                }
                let names: Vec<&str> = by.iter().map(|(t, _)| t.as_str()).collect();
                let first = by.first().map(|(_, w)| w.as_str()).unwrap_or("");
                format!("killed by {} ({})", names.join(", "), shorten(first, 60))
            }
            Fate::Survived if m.allowed.is_some() => "SURVIVED (allowed)".to_owned(),
            Fate::Survived => "SURVIVED".to_owned(),
            Fate::Inconclusive(why) => format!("INCONCLUSIVE: {why}"),
            Fate::Error(e) => {
                notes.push(format!("{}: {e}", m.name));
                "ERROR (see below)".to_owned()
            }
            Fate::KernelOnly => "kernel-only: not run (allowed)".to_owned(),
        };
        println!("{:<26} {:<62} {took:>6.1}s  {line}", m.name, m.what);
    }
    for m in &kernel {
        tally.count(m, &Fate::KernelOnly);
        println!(
            "{:<26} {:<62} {:>7}  kernel-only: not run (allowed)",
            m.name, m.what, "-"
        );
    }
    // Each mutant restored its file: check that the copy ends as it began.
    for (file, original) in &run.originals {
        let now = fs::read_to_string(work.join(file)).map_err(|e| format!("read {file}: {e}"))?;
        if now != *original {
            return Err(format!(
                "{file} of the copy was not restored to its original text"
            ));
        }
    }

    for m in &selected {
        match m.allowed {
            Some(why) if mutants::kernel_only(m.file) => {
                println!("kernel-only {}: {why}", m.name)
            }
            Some(why) => println!("allowed survivor {}: {why}", m.name),
            None => {}
        }
    }
    for n in &notes {
        println!("{n}");
    }
    if !o.keep {
        let _ = fs::remove_dir_all(&work);
    }
    println!(
        "logs in {}; {:.0} s in all",
        logs.display(),
        started.elapsed().as_secs_f64()
    );
    // The table, then the summary, last (tools/test.sh prints the log's last line).
    for line in tally.table() {
        println!("{line}");
    }
    println!("{}", tally.summary());
    Ok(if tally.failures() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The fates of one file's mutants.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
struct Counts {
    mutants: usize,
    killed: usize,
    /// Ran, and survived as allowed.
    allowed: usize,
    /// Not run: the file is the kernel module's only; allowed with the guest check that
    /// catches it.
    kernel_only: usize,
    /// Survived without being allowed, hung where a hang is not the expected failure mode, or
    /// did not apply or build.
    failed: usize,
}

/// The fates of the run's mutants, per file, in the order the files first come.
struct Tally {
    files: Vec<(&'static str, Counts)>,
}

impl Tally {
    fn new(mutants: &[&Mutant]) -> Self {
        Tally {
            files: mutants::files(mutants.iter().copied())
                .into_iter()
                .map(|f| (f, Counts::default()))
                .collect(),
        }
    }

    fn count(&mut self, m: &Mutant, fate: &Fate) {
        let Some((_, c)) = self.files.iter_mut().find(|(f, _)| *f == m.file) else {
            return;
        };
        c.mutants += 1;
        match fate {
            Fate::Killed(_) => c.killed += 1,
            Fate::Survived if m.allowed.is_some() => c.allowed += 1,
            Fate::KernelOnly => c.kernel_only += 1,
            Fate::Survived | Fate::Inconclusive(_) | Fate::Error(_) => c.failed += 1,
        }
    }

    fn total(&self) -> Counts {
        self.files
            .iter()
            .fold(Counts::default(), |t, (_, c)| Counts {
                mutants: t.mutants + c.mutants,
                killed: t.killed + c.killed,
                allowed: t.allowed + c.allowed,
                kernel_only: t.kernel_only + c.kernel_only,
                failed: t.failed + c.failed,
            })
    }

    fn failures(&self) -> usize {
        self.total().failed
    }

    /// The per-file kill table, a line per file and one for the total.
    fn table(&self) -> Vec<String> {
        let row = |file: &str, c: &Counts| {
            let rate = if c.kernel_only == c.mutants && c.mutants > 0 {
                "kernel-only, not run".to_owned()
            } else {
                let ran = c.mutants - c.kernel_only;
                format!(
                    "{:.0}% of {ran} run",
                    100.0 * c.killed as f64 / ran.max(1) as f64
                )
            };
            format!(
                "{file:<20} {:>7} {:>7} {:>8} {:>12} {:>7}  {rate}",
                c.mutants, c.killed, c.allowed, c.kernel_only, c.failed
            )
        };
        let mut out = vec![format!(
            "{:<20} {:>7} {:>7} {:>8} {:>12} {:>7}  kill rate",
            "file", "mutants", "killed", "allowed", "kernel-only", "failed"
        )];
        out.extend(self.files.iter().map(|(f, c)| row(f, c)));
        out.push(row("all", &self.total()));
        out
    }

    /// The run's last line: `N mutants: K killed, S survived (allowed: A)`, then, if any, the
    /// kernel-only mutants, allowed and not run.
    fn summary(&self) -> String {
        let t = self.total();
        let ran = t.mutants - t.kernel_only;
        let mut line = format!(
            "{} mutants: {} killed, {} survived (allowed: {})",
            t.mutants,
            t.killed,
            ran - t.killed,
            t.allowed
        );
        if t.kernel_only > 0 {
            line.push_str(&format!(
                ", {} kernel-only (allowed, not run)",
                t.kernel_only
            ));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_only_mutant_names_its_guest_boot_or_says_none_can() {
        for m in MUTANTS {
            let reason = m.allowed.unwrap_or_default();
            match (mutants::kernel_only(m.file), &m.guest) {
                (true, None) => assert!(reason.starts_with("nothing in make test"), "{}", m.name),
                (true, Some(_)) => assert!(reason.starts_with("caught in make test"), "{}", m.name),
                (false, g) => assert!(g.is_none(), "{} is no kernel-only mutant", m.name),
            }
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "textpoke-mutants-test-{}-{name}",
            std::process::id()
        ));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_mutated_file_is_restored_by_restore_or_on_drop() {
        let dir = scratch("restore");
        let path = dir.join("f.rs");
        fs::write(&path, "original").unwrap();

        let mutated = Mutated::new(path.clone(), "original".into());
        fs::write(&path, "mutant").unwrap();
        mutated.restore().unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "original");

        // A panic while the mutant is in place (the test runner catches it).
        let p = path.clone();
        let unwound = std::panic::catch_unwind(move || {
            let _mutated = Mutated::new(p.clone(), "original".into());
            fs::write(&p, "mutant").unwrap();
            panic!("during the mutant");
        });
        assert!(unwound.is_err());
        assert_eq!(fs::read_to_string(&path).unwrap(), "original");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_killer_names_a_known_kind() {
        for m in MUTANTS {
            for k in m.killers {
                let (kind, name) = split_test(k).unwrap_or_else(|e| panic!("{}: {e}", m.name));
                assert_eq!(format!("{}:{name}", kind.name()), *k);
            }
        }
        for kind in Kind::ALL {
            assert_eq!(Kind::from_name(kind.name()), Some(kind));
        }
    }

    #[test]
    fn reduced_mode_runs_other_mutants_killers_only_against_them() {
        let pending = MUTANTS.iter().find(|m| m.name == "find-by-range").unwrap();
        let insn = MUTANTS
            .iter()
            .find(|m| m.file == mutants::X86_INSN)
            .unwrap();
        let mut tests = BTreeMap::new();
        tests.insert(
            Kind::Loom,
            vec![
                "loom:lookup_never_reads_retired_storage".to_owned(),
                EXPENSIVE[0].to_owned(),
            ],
        );
        tests.insert(
            Kind::Stress,
            vec!["stress:finds_exactly_the_published_sites_while_in_flight".to_owned()],
        );
        tests.insert(
            Kind::X86Insn,
            vec!["x86_insn:return_thunks_take_ret_off_the_list".to_owned()],
        );
        let mut plan = Plan {
            mutants: vec![pending, insn],
            tests,
            full: false,
        };
        let ids = |plan: &Plan, m: &Mutant| -> Vec<String> {
            plan.tests_for(m)
                .into_iter()
                .map(|(k, n)| format!("{}:{n}", k.name()))
                .collect()
        };
        // The loom tests only see the table: they run against its mutants alone.
        assert_eq!(
            ids(&plan, insn),
            ["x86_insn:return_thunks_take_ret_off_the_list"]
        );
        // A mutant of the table: its killers, then the cheap loom tests.
        assert_eq!(
            ids(&plan, pending),
            [
                "stress:finds_exactly_the_published_sites_while_in_flight",
                "loom:lookup_never_reads_retired_storage"
            ]
        );
        plan.full = true;
        assert_eq!(ids(&plan, pending).len(), 4);
        assert_eq!(ids(&plan, insn).len(), 4);
    }

    #[test]
    fn the_table_counts_each_files_fates_and_the_summary_ends_the_run() {
        let pending: Vec<&Mutant> = MUTANTS
            .iter()
            .filter(|m| m.file == mutants::PENDING)
            .take(2)
            .collect();
        let kernel = MUTANTS
            .iter()
            .find(|m| mutants::kernel_only(m.file))
            .unwrap();
        let mut all = pending.clone();
        all.push(kernel);
        let mut tally = Tally::new(&all);
        tally.count(pending[0], &Fate::Killed(vec![]));
        tally.count(pending[1], &Fate::Survived);
        tally.count(kernel, &Fate::KernelOnly);
        assert_eq!(
            tally.files,
            [
                (
                    mutants::PENDING,
                    Counts {
                        mutants: 2,
                        killed: 1,
                        failed: 1,
                        ..Counts::default()
                    }
                ),
                (
                    kernel.file,
                    Counts {
                        mutants: 1,
                        kernel_only: 1,
                        ..Counts::default()
                    }
                )
            ]
        );
        assert_eq!(tally.failures(), 1);
        let table = tally.table();
        assert_eq!(table.len(), 4);
        assert!(table[1].starts_with("kernel/pending.rs") && table[1].ends_with("50% of 2 run"));
        assert!(table[2].ends_with("kernel-only, not run"), "{}", table[2]);
        assert_eq!(
            tally.summary(),
            "3 mutants: 1 killed, 1 survived (allowed: 0), 1 kernel-only (allowed, not run)"
        );
    }
}
