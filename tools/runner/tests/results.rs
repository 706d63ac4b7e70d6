//! End-to-end tests of `textpoke-runner report`: a fabricated run directory (its manifest, the
//! reports a run leaves, their file times), rendered as Markdown and put into documents between
//! their markers.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use common::{run, stdout, text, Scratch};

const BEGIN: &str = "<!-- textpoke-runner report: begin -->";
const END: &str = "<!-- textpoke-runner report: end -->";

fn set_time(path: &Path, t: SystemTime) {
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

fn boot(name: &str, arch: &str, smp: u32, expect: &str, kunit_check: bool) -> Value {
    json!({
        "name": name, "arch": arch, "variant": "patched", "smp": smp, "mem_mb": 1024,
        "silence": 600, "cap": 900, "append": "", "expect": expect, "expect_log": null, "require": [],
        "kunit_check": kunit_check,
    })
}

/// A report as `suite` or `record` writes it.
fn report(name: &str, verdict: &str, expected: &str, counts: [u64; 3], secs: f64) -> Value {
    json!({
        "name": name, "arch": "x86_64", "smp": 2, "mem_mb": 1024,
        "verdict": verdict, "expected": expected, "ok": verdict == expected,
        "reason": if name == "clippy" { "clippy -D warnings failed".to_owned() }
                  else { format!("{verdict} | as expected") },
        "counts": {"passed": counts[0], "failed": counts[1], "skipped": counts[2]},
        "log": format!("/runs/r/{name}.log"), "seconds": secs,
    })
}

/// A `make test` run of two arches that planned three boots (one with a kunit.py cross-check)
/// and two host checks: the arm64 boot never reported and clippy failed. The manifest was
/// written 36 min 45 s before the last report.
fn fabricate(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    let manifest = json!({
        "suite": "test",
        "arches": ["x86_64", "arm64"],
        "boots": [
            boot("x86_64-smp2", "x86_64", 2, "pass", true),
            boot("arm64-smp2", "arm64", 2, "pass", false),
            boot("harness-hang", "x86_64", 2, "timeout", false),
        ],
        "checks": ["host-tests", "clippy"],
    });
    fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    let reports = [
        report("x86_64-smp2", "pass", "pass", [10, 0, 2], 301.3),
        report("x86_64-smp2.kunit", "pass", "pass", [1, 0, 0], 0.0),
        report("harness-hang", "timeout", "timeout", [3, 0, 0], 900.0),
        report("host-tests", "pass", "pass", [1, 0, 0], 0.0),
        report("clippy", "not-ok", "pass", [0, 1, 0], 0.0),
    ];
    let start = SystemTime::now() - Duration::from_secs(3600);
    set_time(&dir.join("manifest.json"), start);
    for (i, r) in reports.iter().enumerate() {
        let path = dir.join(format!("{}.json", r["name"].as_str().unwrap()));
        fs::write(&path, r.to_string()).unwrap();
        set_time(&path, start + Duration::from_secs(2205 - 100 * i as u64));
    }
}

/// Runs `report` over the run `dir`, putting its block into `readme` and `results` if given.
fn report_into(dir: &Path, readme: Option<&Path>, results: Option<&Path>) -> Output {
    let mut args = vec!["report", dir.to_str().unwrap()];
    for (flag, doc) in [("--readme", readme), ("--results", results)] {
        if let Some(doc) = doc {
            args.extend([flag, doc.to_str().unwrap()]);
        }
    }
    run(&args)
}

#[test]
fn a_run_renders_as_a_table_with_the_summary_s_count() {
    let s = Scratch::new("table");
    let dir = s.0.join("20261125-135623");
    fabricate(&dir);
    let o = report_into(&dir, None, None);
    assert!(o.status.success(), "{}", text(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with("Results of `make test`, run `20261125-135623` (x86_64, arm64):\n"),
        "{out}"
    );
    for row in [
        "| boot | arch | smp | result | passed | failed | skipped | seconds |",
        "| x86_64-smp2 | x86_64 | 2 | ok | 10 | 0 | 2 | 301.3 |",
        "| arm64-smp2 | arm64 | 2 | FAILED (never reported) | | | | |",
        "| harness-hang | x86_64 | 2 | ok (timeout as expected) | 3 | 0 | 0 | 900.0 |",
        "| x86_64-smp2.kunit | ok | pass \\| as expected |",
        "| host-tests | ok | pass \\| as expected |",
        "| clippy | FAILED (not-ok) | clippy -D warnings failed |",
    ] {
        assert!(out.contains(&format!("\n{row}\n")), "no `{row}` in:\n{out}");
    }
    // The same count as the summary's: 10 + 1 + 1 + 1 passed; clippy and the missing arm64
    // boot failed.
    let summary = run(&["summary", dir.to_str().unwrap()]);
    let last = stdout(&summary).lines().last().unwrap().to_owned();
    assert_eq!(last, "13 passed, 2 failed");
    assert!(out.contains(&format!("\n\n{last}\n\n")), "{out}");
    assert!(
        out.contains("\n2 skipped; wall time 36 min 45 s (from the plan to the last report).\n"),
        "{out}"
    );
    assert!(!out.contains("bench report"), "{out}");
}

fn documents(s: &Scratch) -> (PathBuf, String, PathBuf, String) {
    let readme = s.0.join("README.md");
    let readme_text =
        format!("# textpoke\n\nIntro.\n\n{BEGIN}\nstale table\n{END}\n\n## Build\n\nmake\n");
    fs::write(&readme, &readme_text).unwrap();
    let results = s.0.join("results.md");
    let results_text = format!("# Results\n{BEGIN}\n{END}\nThe rest.\n");
    fs::write(&results, &results_text).unwrap();
    (readme, readme_text, results, results_text)
}

#[test]
fn the_block_between_the_markers_is_replaced_in_place() {
    let s = Scratch::new("in-place");
    let dir = s.0.join("run");
    fabricate(&dir);
    let block = stdout(&report_into(&dir, None, None));
    let (readme, _, results, _) = documents(&s);
    let o = report_into(&dir, Some(&readme), Some(&results));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "updated {}\nupdated {}\n",
            readme.display(),
            results.display()
        )
    );
    assert_eq!(
        fs::read_to_string(&readme).unwrap(),
        format!("# textpoke\n\nIntro.\n\n{BEGIN}\n{block}{END}\n\n## Build\n\nmake\n")
    );
    assert_eq!(
        fs::read_to_string(&results).unwrap(),
        format!("# Results\n{BEGIN}\n{block}{END}\nThe rest.\n")
    );
    // Once more: nothing changes.
    let o = report_into(&dir, Some(&readme), None);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        fs::read_to_string(&readme).unwrap(),
        format!("# textpoke\n\nIntro.\n\n{BEGIN}\n{block}{END}\n\n## Build\n\nmake\n")
    );
}

#[test]
fn a_document_without_markers_fails_by_name_and_nothing_changes() {
    let s = Scratch::new("no-markers");
    let dir = s.0.join("run");
    fabricate(&dir);
    let (readme, readme_text, results, _) = documents(&s);
    fs::write(&results, "# Results\n\nNo block here.\n").unwrap();
    let o = report_into(&dir, Some(&readme), Some(&results));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!("{} has no `{BEGIN}` line", results.display())),
        "{stderr}"
    );
    assert!(o.stdout.is_empty(), "{}", text(&o));
    // The README had its markers, but it is not half done either.
    assert_eq!(fs::read_to_string(&readme).unwrap(), readme_text);
    assert_eq!(
        fs::read_to_string(&results).unwrap(),
        "# Results\n\nNo block here.\n"
    );
}

#[test]
fn a_directory_without_a_manifest_fails() {
    let s = Scratch::new("no-manifest");
    let (readme, readme_text, _, _) = documents(&s);
    let o = report_into(&s.0, Some(&readme), None);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!("{} has no manifest.json", s.0.display())),
        "{stderr}"
    );
    assert_eq!(fs::read_to_string(&readme).unwrap(), readme_text);
    let o = report_into(&s.0.join("nonexistent"), None, None);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn the_bench_report_adds_its_ratios() {
    let s = Scratch::new("bench");
    let dir = s.0.join("run");
    fabricate(&dir);
    // A flip of 16 sites takes textpoke 300 ns and the static key 100 ns, every round.
    let log: String = (0..3)
        .flat_map(|round| {
            [("textpoke", 300), ("static_key", 100)].map(|(mode, ns)| {
                format!(
                    "[ 1.0] textpoke-bench: {{\"arch\":\"x86_64\",\"cpus\":2,\"mode\":\"{mode}\",\
                     \"n\":16,\"round\":{round},\"ns\":{ns},\"syncs\":3,\"records\":16,\
                     \"call_ipis\":4,\"stall_ns\":1}}\n"
                )
            })
        })
        .collect();
    fs::write(dir.join("x86_64-bench.log"), log).unwrap();
    let o = run(&["bench-report", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));

    let row = "| x86_64 | flip time, textpoke, nobody listening ÷ upstream static key, N = 16 | \
               3.00 (3.00–3.00) |";
    // DIR/bench, found by itself.
    let o = report_into(&dir, None, None);
    assert!(o.status.success(), "{}", text(&o));
    let out = stdout(&o);
    assert!(
        out.contains("\nThe bench report (`bench/ of the run`): "),
        "{out}"
    );
    assert!(out.contains(&format!("\n{row}\n")), "{out}");
    // Given with --bench: a directory with the JSON, or whose bench/ has it.
    let elsewhere = s.0.join("cache-bench");
    fs::create_dir_all(&elsewhere).unwrap();
    fs::copy(
        dir.join("bench/bench-x86_64.json"),
        elsewhere.join("bench-x86_64.json"),
    )
    .unwrap();
    for b in [&elsewhere, &dir] {
        let o = run(&[
            "report",
            s.0.join("run").to_str().unwrap(),
            "--bench",
            b.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o));
        assert!(stdout(&o).contains(&format!("\n{row}\n")), "{}", text(&o));
    }
    // A --bench without any: an error, not a table without its bench.
    let o = run(&[
        "report",
        dir.to_str().unwrap(),
        "--bench",
        s.0.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("has no bench-ARCH.json"),
        "{}",
        text(&o)
    );
}
