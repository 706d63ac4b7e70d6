//! Foreign traps: what a kprobe hit costs with textpoke loaded and idle against without it, in
//! the same boot (samples/textpoke_trapcost.c). On x86 every kernel-mode `INT3` goes through
//! textpoke's trap handler before kprobes (patch 0007), so its lookups are paid on every hit of
//! every kprobe; on arm64 kprobes use their own `BRK` immediates, which never reach textpoke.
//!
//! The module, which does not depend on textpoke, keeps a kprobe on a function of its own;
//! `run N` calls that function N times and an unprobed twin N times, timing both loops, so that
//! the runner can subtract the calls themselves. Each round measures one run with textpoke
//! loaded (its default parameters, as the kernel's patcher) and one after `delete_module` took
//! it out, so the two states are interleaved (ABAB...) and share whatever the emulator and the
//! host were doing. Every run is one `textpoke-trapcost: {json}` line
//! (tools/runner/src/bench/trapcost.rs reads them). Nothing is asserted on timing: the KTAP case
//! checks only that every run happened and counted one hit per call.

use std::path::Path;

use textpoke_agent::platform::exerciser::{key_values, number};
use textpoke_agent::platform::guest;
use textpoke_agent::platform::sys;
use textpoke_agent::report::ktap::Case;

/// Prefix of a sample line.
pub const PREFIX: &str = "textpoke-trapcost: ";
/// Rounds: one run with textpoke and one without per round. With [`HITS`] the section takes
/// about a minute under TCG, each textpoke load (with its self-test) included.
const ROUNDS: u32 = 20;
/// Calls of the probed function (and of its twin) per run.
pub const HITS: u64 = 20_000;
const DIR: &str = "/sys/kernel/debug/textpoke_trapcost";
const MODULE: &str = "textpoke_trapcost";
/// The parameters textpoke is loaded with for the measurement: none, as it is normally loaded.
const LOADED_PARAMS: &str = "";

/// Whether textpoke is loaded during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Loaded and idle: its trap handler sees every kprobe hit on x86.
    Loaded,
    /// Unloaded: the kernel's own trap path only.
    Absent,
}

impl Mode {
    /// The name the runner reads.
    pub fn name(self) -> &'static str {
        match self {
            Self::Loaded => "textpoke_loaded",
            Self::Absent => "no_textpoke",
        }
    }
}

/// One run, as the module's `result` file reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Run {
    /// Calls of each function.
    pub n: u64,
    /// The probed function's loop, in nanoseconds.
    pub probed_ns: u64,
    /// The twin's loop, in nanoseconds.
    pub unprobed_ns: u64,
    /// Hits the pre-handler counted during the run.
    pub hits: u64,
    /// Hits the post-handler counted during the run.
    pub post_hits: u64,
}

impl Run {
    /// Whether the run measured what it claims: one hit per call of the probed function,
    /// through both handlers.
    pub fn valid(&self) -> bool {
        self.hits == self.n && self.post_hits == self.n
    }
}

/// Reads the `result` file: one `key value` line per field, every field required.
pub fn parse_result(text: &str) -> Result<Run, String> {
    let map = key_values(text);
    Ok(Run {
        n: number(&map, "n")?,
        probed_ns: number(&map, "probed_ns")?,
        unprobed_ns: number(&map, "unprobed_ns")?,
        hits: number(&map, "hits")?,
        post_hits: number(&map, "post_hits")?,
    })
}

/// Where a run came from.
pub struct Place<'a> {
    /// Guest arch, as the runner names it.
    pub arch: &'a str,
    /// Online CPUs.
    pub cpus: usize,
    /// Which round.
    pub round: u32,
    /// Rounds planned.
    pub rounds: u32,
}

/// A run as the JSON object the runner reads.
pub fn sample_json(p: &Place, mode: Mode, run: &Run) -> String {
    format!(
        "{{\"arch\":\"{}\",\"cpus\":{},\"round\":{},\"rounds\":{},\"mode\":\"{}\",\"n\":{},\
         \"probed_ns\":{},\"unprobed_ns\":{},\"hits\":{},\"post_hits\":{}}}",
        p.arch,
        p.cpus,
        p.round,
        p.rounds,
        mode.name(),
        run.n,
        run.probed_ns,
        run.unprobed_ns,
        run.hits,
        run.post_hits
    )
}

fn textpoke_loaded() -> bool {
    Path::new("/sys/module/textpoke").exists()
}

/// How textpoke is loaded now: `None` if it is not, else the parameters to load it the same way
/// again (only `kernel_patcher` is read back; the others are debug switches off by default).
fn textpoke_now() -> Option<String> {
    if !textpoke_loaded() {
        return None;
    }
    let patcher = sys::read_text("/sys/module/textpoke/parameters/kernel_patcher");
    Some(
        match patcher.as_deref().map(str::trim) {
            Ok("N") => "kernel_patcher=0",
            _ => "",
        }
        .to_owned(),
    )
}

/// The modules that hold textpoke, for an unload that was refused.
fn holders() -> Vec<String> {
    std::fs::read_dir("/sys/module/textpoke/holders")
        .map(|d| {
            d.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// Loads textpoke with `params` if it is not loaded, or unloads it if `params` is `None`.
fn set_textpoke(params: Option<&str>) -> Result<(), String> {
    match (params, textpoke_loaded()) {
        (Some(params), false) => guest::load("textpoke", params),
        (None, true) => sys::unload_module("textpoke")
            .map_err(|e| format!("unloading textpoke: {e} (holders: {:?})", holders())),
        _ => Ok(()),
    }
}

/// One run of `n` calls.
fn measure(n: u64) -> Result<Run, String> {
    sys::write_file(format!("{DIR}/control"), format!("run {n}").as_bytes())
        .map_err(|e| format!("`run {n}`: {e}"))?;
    let text = sys::read_text(format!("{DIR}/result")).map_err(|e| format!("result: {e}"))?;
    let run = parse_result(&text).map_err(|e| format!("result {text:?}: {e}"))?;
    if run.n != n {
        return Err(format!("asked for {n} calls, the result is of {}", run.n));
    }
    Ok(run)
}

/// Runs the rounds (`textpoke.bench_reps=` overrides how many), logging each run with `log`;
/// returns the KTAP case. textpoke must have no dependents: each round unloads it. It is left
/// as it was found, loaded with the same `kernel_patcher` or not loaded.
pub fn run(arch: &str, cpus: usize, log: fn(&str)) -> Vec<Case> {
    let rounds = sys::cmdline_param("textpoke.bench_reps")
        .and_then(|v| v.parse().ok())
        .unwrap_or(ROUNDS)
        .max(1);
    let before = textpoke_now();
    guest::log(&format!(
        "bench: foreign traps: {rounds} rounds of {HITS} kprobe hits, with textpoke loaded and \
         unloaded in turn"
    ));
    let mut problems = Vec::new();
    let mut samples = 0u32;
    let mut invalid = 0u32;
    // Unloaded first, so that every run with textpoke, the first one too, has it loaded the
    // same way: by this section, with LOADED_PARAMS.
    let ready = set_textpoke(None).and_then(|()| guest::load(MODULE, ""));
    match ready {
        Err(e) => problems.push(e),
        Ok(()) => {
            'rounds: for round in 0..rounds {
                for mode in [Mode::Loaded, Mode::Absent] {
                    let params = (mode == Mode::Loaded).then_some(LOADED_PARAMS);
                    // Without the state it claims the run measures nothing: stop, and say why.
                    if let Err(e) = set_textpoke(params) {
                        problems.push(format!("round {round}, {}: {e}", mode.name()));
                        break 'rounds;
                    }
                    match measure(HITS) {
                        Ok(r) => {
                            let place = Place {
                                arch,
                                cpus,
                                round,
                                rounds,
                            };
                            log(&format!("{PREFIX}{}", sample_json(&place, mode, &r)));
                            samples += 1;
                            if !r.valid() {
                                invalid += 1;
                                problems.push(format!(
                                    "round {round}, {}: {} hits and {} post-handler hits of {} \
                                     calls",
                                    mode.name(),
                                    r.hits,
                                    r.post_hits,
                                    r.n
                                ));
                            }
                        }
                        Err(e) => {
                            problems.push(format!("round {round}, {}: {e}", mode.name()));
                            break 'rounds;
                        }
                    }
                }
            }
            if let Err(e) = sys::unload_module(MODULE) {
                problems.push(format!("unloading {MODULE}: {e}"));
            }
        }
    }
    if let Err(e) = set_textpoke(before.as_deref()) {
        problems.push(format!("putting textpoke back as it was: {e}"));
    }
    let expected = 2 * rounds;
    vec![Case::check(
        "foreign_traps",
        problems.is_empty() && samples == expected,
        format!("{samples} runs of {expected}, {invalid} invalid; {problems:?}"),
    )
    .with_log(format!("{samples} runs of {HITS} kprobe hits"))]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_file() {
        let r = parse_result(
            "n 20000\nprobed_ns 412345678\nunprobed_ns 345678\nhits 20000\npost_hits 20000\n",
        )
        .unwrap();
        assert_eq!(
            r,
            Run {
                n: 20000,
                probed_ns: 412_345_678,
                unprobed_ns: 345_678,
                hits: 20000,
                post_hits: 20000,
            }
        );
        assert!(r.valid());
        assert!(!Run {
            hits: 19999,
            ..r.clone()
        }
        .valid());
        assert!(!Run { post_hits: 0, ..r }.valid());
        // Every field is required, and each must be a count.
        let err = parse_result("n 1\nprobed_ns 2\nunprobed_ns 3\nhits 1\n").unwrap_err();
        assert!(err.contains("post_hits"), "{err}");
        let err =
            parse_result("n 1\nprobed_ns 2\nunprobed_ns 3\nhits -1\npost_hits 1\n").unwrap_err();
        assert!(err.contains("hits"), "{err}");
        assert!(parse_result("").is_err());
    }

    #[test]
    fn sample_line_is_json_the_runner_reads() {
        let run = Run {
            n: 20000,
            probed_ns: 9,
            unprobed_ns: 3,
            hits: 20000,
            post_hits: 19999,
        };
        let place = Place {
            arch: "arm64",
            cpus: 4,
            round: 7,
            rounds: 20,
        };
        assert_eq!(
            sample_json(&place, Mode::Absent, &run),
            "{\"arch\":\"arm64\",\"cpus\":4,\"round\":7,\"rounds\":20,\"mode\":\"no_textpoke\",\
             \"n\":20000,\"probed_ns\":9,\"unprobed_ns\":3,\"hits\":20000,\"post_hits\":19999}"
        );
        assert!(sample_json(&place, Mode::Loaded, &run).contains("\"mode\":\"textpoke_loaded\""));
        // The console takes lines of at most 1024 bytes.
        let big = Run {
            n: u64::MAX,
            probed_ns: u64::MAX,
            unprobed_ns: u64::MAX,
            hits: u64::MAX,
            post_hits: u64::MAX,
        };
        let place = Place {
            arch: "x86_64",
            cpus: usize::MAX,
            round: u32::MAX,
            rounds: u32::MAX,
        };
        assert!(PREFIX.len() + sample_json(&place, Mode::Loaded, &big).len() < 1024);
    }
}
