//! A scenario watched by the breakpoint observer (textpoke_agent::oracle::observer), and its
//! verdicts as KTAP cases: the observer runs beside the ordering checker, and must on its own
//! classify thousands of executions with no violation under the guarded protocol, and find
//! violations under the unguarded "nosync" control (scenarios/controls.rs).

use std::collections::HashMap;
use std::time::Duration;
use textpoke_agent::oracle::checks;
use textpoke_agent::oracle::etm_dataset::{self, Dataset};
use textpoke_agent::oracle::observer::{self, Collected, Config, Verdicts, Watched};
use textpoke_agent::platform::exerciser::Site;
use textpoke_agent::platform::guest;
use textpoke_agent::platform::kcore::Kcore;
use textpoke_agent::report::ktap::Case;

use crate::scenarios::scenario::{self, region, Evidence};

/// The observed scenario: one key of eight branch sites, flipped often enough for the observer
/// to sweep its breakpoints over every site many times where the emulator lets it (see
/// [`steps_wanted`]).
pub const SPEC: &str = "keys=1 sites=8 flips=51 pokers=1";
/// The same, shorter, for the negative controls, which need only some executions in the
/// windows the defect opens (and each of whose runs under a broken protocol costs more).
pub const CONTROL_SPEC: &str = "keys=1 sites=8 flips=21 pokers=1";
/// Branch sites watched: the first of the pool, which the key of [`SPEC`] takes.
const WATCHED: usize = 8;
/// How long the breakpoints stay on one site.
pub const DWELL: Duration = Duration::from_millis(5);
/// Executions the observer must classify in a passing run.
pub const MIN_CLASSIFIED: u64 = 1000;

/// Sweep steps a passing run takes at `cpus` online CPUs: enough to have watched every site
/// (the breakpoints start on the first), except on arm64 at four CPUs or more. There the
/// kernel steps over each hit with single-step, CPUs that run the watched sites hit the
/// breakpoints constantly, and a retarget's IPI can reach them so late under TCG that a run
/// takes only a step or a few: there only the first sites are sure to be watched.
pub fn steps_wanted(x86: bool, cpus: usize) -> u64 {
    if x86 || cpus < 4 {
        WATCHED as u64 - 1
    } else {
        1
    }
}

/// Where a branch site's `on` instruction jumps: x86 `JMP rel32` (`e9`), arm64 `B`.
fn branch_target(site: &Site) -> Option<u64> {
    if guest::is_x86() {
        let [0xe9, a, b, c, d] = site.on.as_slice() else {
            return None;
        };
        let rel = i32::from_le_bytes([*a, *b, *c, *d]);
        Some(site.addr.wrapping_add(5).wrapping_add(rel as i64 as u64))
    } else {
        let insn = u32::from_le_bytes(site.on.as_slice().try_into().ok()?);
        if insn & 0xfc00_0000 != 0x1400_0000 {
            return None;
        }
        // imm26, sign-extended, in instructions.
        let rel = (((insn & 0x03ff_ffff) << 6) as i32 >> 6) as i64 * 4;
        Some(site.addr.wrapping_add(rel as u64))
    }
}

/// The first [`WATCHED`] branch sites, with where each path goes.
pub fn watched(sites: &[Site]) -> Result<Vec<Watched>, String> {
    let kind = if guest::is_x86() { "jmp32" } else { "b" };
    let out: Vec<Watched> = sites
        .iter()
        .filter(|s| s.kind == kind)
        .take(WATCHED)
        .map(|s| {
            Ok(Watched {
                index: s.index,
                addr: s.addr,
                on: s.on.clone(),
                off: s.off.clone(),
                taken: branch_target(s)
                    .ok_or_else(|| format!("site {:#x}: {:02x?} is not a branch", s.addr, s.on))?,
                fall: s.addr + s.len as u64,
            })
        })
        .collect::<Result<_, String>>()?;
    if out.len() < WATCHED {
        return Err(format!("only {} {kind} sites", out.len()));
    }
    Ok(out)
}

/// An observed run: the scenario's evidence, the sites the observer watched, what it saw and
/// its verdicts on that.
pub struct Observed {
    /// The scenario's evidence.
    pub ev: Evidence,
    /// The watched sites.
    pub watched: Vec<Watched>,
    /// The observer's hits.
    pub collected: Collected,
    /// Its verdicts.
    pub verdicts: Verdicts,
}

/// Runs `spec` (one key of branch sites) with the observer and judges what the observer saw.
pub fn run(spec: &str, sites: &[Site], kcore: &Kcore) -> Result<Observed, String> {
    let watched = watched(sites)?;
    let config = Config {
        sites: watched.clone(),
        dwell: DWELL,
        clock: observer::Clock::Perf,
    };
    let (ev, collected) = scenario::run_observed(spec, sites, kcore, Some(config))?;
    let collected = collected.ok_or("the observer did not run")?;
    let verdicts = judge(&ev, sites, &watched, &collected)?;
    Ok(Observed {
        ev,
        watched,
        collected,
        verdicts,
    })
}

/// The observer's verdicts on `collected`: against the records perf delivered, each site's path
/// before them read from the kcore snapshot.
fn judge(
    ev: &Evidence,
    sites: &[Site],
    watched: &[Watched],
    collected: &Collected,
) -> Result<Verdicts, String> {
    let timelines = checks::timelines(sites, &ev.site_pokes(sites))?;
    Ok(observer::judge(
        watched,
        &timelines,
        &initial_paths(ev, sites, watched)?,
        &collected.hits,
        observer::HITS_REPEAT,
    ))
}

/// Each watched site's path before the run, by index, from the kcore snapshot.
fn initial_paths(
    ev: &Evidence,
    sites: &[Site],
    watched: &[Watched],
) -> Result<HashMap<usize, u8>, String> {
    paths_in(region(sites).0, &ev.before, watched)
}

/// Each of `watched`'s paths, by index, in `text`: a copy of the text from `base`.
pub fn paths_in(base: u64, text: &[u8], watched: &[Watched]) -> Result<HashMap<usize, u8>, String> {
    let mut paths = HashMap::new();
    for w in watched {
        let at = w
            .addr
            .checked_sub(base)
            .and_then(|a| usize::try_from(a).ok())
            .and_then(|a| text.get(a..a.checked_add(w.on.len())?))
            .ok_or_else(|| format!("site {:#x} outside the copy", w.addr))?;
        let path = if at == w.on.as_slice() {
            1
        } else if at == w.off.as_slice() {
            0
        } else {
            return Err(format!("site {:#x} holds {at:02x?} in the copy", w.addr));
        };
        paths.insert(w.index, path);
    }
    Ok(paths)
}

/// What the observer saw, as the lines the host turns into a CoreSight trace
/// (tools/etm/src/dataset.rs): the watched sites with their paths before the run, their
/// records, and every execution its breakpoints saw.
fn dataset(
    ev: &Evidence,
    sites: &[Site],
    watched: &[Watched],
    collected: &Collected,
) -> Result<Dataset, String> {
    let initial = initial_paths(ev, sites, watched)?;
    let addrs: Vec<u64> = watched.iter().map(|w| w.addr).collect();
    let (execs, _) = observer::executions(watched, &collected.hits, observer::HITS_REPEAT);
    Ok(Dataset {
        sites: watched
            .iter()
            .map(|w| {
                Ok(etm_dataset::Site {
                    watched: w.clone(),
                    initial: *initial
                        .get(&w.index)
                        .ok_or_else(|| format!("site {:#x}: no path before the run", w.addr))?,
                })
            })
            .collect::<Result<_, String>>()?,
        pokes: ev
            .site_pokes(sites)
            .into_iter()
            .filter(|p| addrs.contains(&p.addr))
            .map(|p| etm_dataset::Poke {
                time: p.time,
                addr: p.addr,
                old: p.old,
                new: p.new,
            })
            .collect(),
        execs: execs
            .iter()
            .map(|e| etm_dataset::Exec {
                time: e.time,
                cpu: e.cpu,
                site: e.site,
                path: e.path,
                guard: e.guard,
            })
            .collect(),
    })
}

/// The kernel command-line switch that makes the observed scenario print its dataset (the
/// runner sets it on the boot whose executions the host decodes).
pub const DATASET_PARAM: &str = "textpoke.etm_dataset";

/// One line of what the observer saw.
pub fn summary(c: &Collected, v: &Verdicts) -> String {
    format!(
        "{} hits in {} sweep steps: {}, lost {}, unparsable {}",
        c.hits.len(),
        c.steps,
        v.counts(),
        c.lost,
        c.bad
    )
}

/// The observed scenario as a KTAP group: the scenario's own checks, then the observer's.
pub fn case(sites: &[Site], kcore: &Kcore) -> Case {
    const NAME: &str = "scenario_observed";
    let Observed {
        ev,
        watched,
        collected: c,
        verdicts: v,
    } = match run(SPEC, sites, kcore) {
        Ok(r) => r,
        Err(e) => return Case::fail(NAME, e),
    };
    let line = summary(&c, &v);
    guest::log(&format!("observer: {line}"));
    let mut printed = None;
    if textpoke_agent::platform::sys::cmdline_param(DATASET_PARAM).as_deref() == Some("1") {
        printed = Some(dataset(&ev, sites, &watched, &c).map(|d| {
            for l in d.lines() {
                guest::log(&l);
            }
            (d.sites.len(), d.pokes.len(), d.execs.len())
        }));
    }
    let cpus = textpoke_agent::platform::sys::online_cpus().map_or(0, |c| c.len());
    let steps = steps_wanted(guest::is_x86(), cpus);
    let shape = match scenario::Shape::parse(SPEC) {
        Ok(shape) => shape,
        Err(e) => return Case::fail(NAME, e),
    };
    let traps = scenario::TrapsWanted::for_spec(1, &shape, cpus);
    let scenario = scenario::judge("scenario", SPEC, &shape, traps, &ev, sites);
    let mut children = vec![
        scenario,
        Case::check(
            "observer_complete",
            c.error.is_none() && c.lost == 0 && c.bad == 0 && c.steps >= steps,
            format!(
                "error {:?}, {} lost records, {} unparsable, {} sweep steps of the {steps} \
                 wanted at {cpus} CPUs",
                c.error, c.lost, c.bad, c.steps
            ),
        )
        .with_log(format!(
            "{} sweep steps, {steps} wanted at {cpus} CPUs",
            c.steps
        )),
        Case::check(
            "observer_classified_thousands",
            v.classified() >= MIN_CLASSIFIED,
            format!(
                "{} executions classified, fewer than {MIN_CLASSIFIED}",
                v.classified()
            ),
        ),
        Case::check(
            "observer_saw_guards",
            v.met_guard > 0,
            "no execution found the guard at its site: the observer's reading of the text is \
             broken, or no execution of a watched site met a batch",
        ),
        Case::check(
            "observer_no_violations",
            v.violations == 0,
            format!("{} violations: {:?}", v.violations, v.examples),
        ),
    ];
    if let Some(printed) = printed {
        children.push(match printed {
            Ok((s, p, e)) => Case::pass("observer_dataset_printed").with_log(format!(
                "{s} sites, {p} records, {e} executions printed for the host's CoreSight decode"
            )),
            Err(e) => Case::fail("observer_dataset_printed", e),
        });
    }
    Case::group(NAME, children)
        .with_log(format!("spec {SPEC}"))
        .with_log(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_site_is_swept_but_on_arm64_at_four_cpus() {
        // The breakpoints start on the first site: a step per further site watches them all.
        let all = WATCHED as u64 - 1;
        for cpus in [2, 4, 8] {
            assert_eq!(steps_wanted(true, cpus), all, "x86 at {cpus} CPUs");
        }
        assert_eq!(steps_wanted(false, 2), all);
        assert_eq!(steps_wanted(false, 3), all);
        assert_eq!(steps_wanted(false, 4), 1);
        assert!(all > 1, "a sweep watches more than one site");
    }
}
