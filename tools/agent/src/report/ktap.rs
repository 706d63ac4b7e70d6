//! A KTAP (version 1) writer, as `Documentation/dev-tools/ktap.rst` describes.
//!
//! Every line goes to the sink in one `write` call, so that `/dev/kmsg` (the sink in the guest)
//! turns each line into one printk record and never splits or merges lines; the kernel adds its
//! timestamp prefix, which the runner strips.
//!
//! Results are buffered: the agent collects [`Case`]s and prints the whole document at the end
//! with [`Ktap::print_suites`], which computes every plan from the cases it is given.
//!
//! A boot prints exactly one document, in one piece after every module load: its suites are
//! subtests, as KUnit prints them, and another document (a module's own KTAP output) would end
//! it for the kernel's parser, which stops at the end of the first document.
//!
//! ```text
//! KTAP version 1
//! 1..2
//!   KTAP version 1
//!   # Subtest: textpoke_selftest
//!   1..1
//!   ok 1 plan_cost_matches_protocol
//! ok 1 textpoke_selftest
//!   KTAP version 1
//!   # Subtest: textpoke_agent
//!   1..2
//!   ok 1 inner_pass
//!   # expected EBUSY, got 0
//!   not ok 2 inner_fail
//! not ok 2 textpoke_agent
//! # totals: pass:2 fail:1 skip:0
//! ```
//!
//! Failure diagnostics are printed as `# ` lines just before the `not ok` line (where KUnit puts
//! them and where the runner collects them as the test's log), not after a `#` on the result line,
//! where a diagnostic starting with a word like `skipped` would read as a directive.
//!
//! Write errors never interrupt a document: the first one is remembered and returned by
//! [`Ktap::print_suites`] once every line has been attempted.

use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, Write};

/// The longest line written, newline excluded.
///
/// `/dev/kmsg` refuses a write longer than a printk record (1024 bytes) with `EINVAL`; longer
/// diagnostics are split over several lines and longer names are cut.
pub const MAX_LINE: usize = 960;

/// Pass, fail and skip counts of leaf results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Passed tests.
    pub pass: usize,
    /// Failed tests.
    pub fail: usize,
    /// Skipped tests.
    pub skip: usize,
}

impl Totals {
    fn add(&mut self, other: Totals) {
        self.pass += other.pass;
        self.fail += other.fail;
        self.skip += other.skip;
    }
}

impl fmt::Display for Totals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pass:{} fail:{} skip:{}",
            self.pass, self.fail, self.skip
        )
    }
}

/// Why a document did not come out as it should.
#[derive(Debug)]
pub enum KtapError {
    /// Writing to the sink failed (the first error; later lines were still attempted).
    Io(io::Error),
}

impl fmt::Display for KtapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "writing KTAP output: {e}"),
        }
    }
}

impl std::error::Error for KtapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e),
        }
    }
}

impl From<io::Error> for KtapError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// One open document or subtest.
#[derive(Debug)]
struct Frame {
    name: String,
    emitted: usize,
    /// Whether a result at this level said `not ok`.
    failed: bool,
    /// Leaf results below this level.
    totals: Totals,
}

/// The KTAP writer: a sink plus the stack of open (sub)documents.
pub struct Ktap {
    sink: Box<dyn Write>,
    frames: Vec<Frame>,
    error: Option<io::Error>,
}

impl fmt::Debug for Ktap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ktap")
            .field("frames", &self.frames)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl Ktap {
    /// A writer that writes each line to `sink` with one `write_all` call.
    ///
    /// The sink should be unbuffered (or flushed per line) when other writers share its
    /// destination; `/dev/kmsg` opened with [`Ktap::kmsg`] is.
    pub fn new(sink: Box<dyn Write>) -> Self {
        Self {
            sink,
            frames: Vec::new(),
            error: None,
        }
    }

    /// A writer to `/dev/kmsg`, the kernel log, one printk record per line.
    ///
    /// The lines get the default message loglevel (the guest's console must print it; boot
    /// with `printk.devkmsg=on` so that writes are not ratelimited).
    pub fn kmsg() -> io::Result<Self> {
        let file = OpenOptions::new().write(true).open("/dev/kmsg")?;
        Ok(Self::new(Box::new(file)))
    }

    /// Prints the one KTAP document of a boot: `KTAP version 1`, `1..N`, then each suite as a
    /// subtest (`# Subtest: NAME`), as KUnit prints its suites, then `# totals: ...`.
    ///
    /// Every boot prints exactly one document, so that the kernel's own parser
    /// (`tools/testing/kunit/kunit.py parse`), which stops at the end of the first one, reads
    /// every result. Each suite should be a [`CaseResult::Group`]; another case is printed as
    /// a top-level result.
    ///
    /// Fails when a write failed along the way (every line is still attempted).
    pub fn print_suites(&mut self, suites: &[Case]) -> Result<Totals, KtapError> {
        self.frames.push(Frame::new(String::new()));
        self.emit(0, "KTAP version 1");
        self.emit(0, &format!("1..{}", suites.len()));
        for suite in suites {
            self.case(suite);
        }
        let frame = self.frames.pop().expect("pushed above");
        self.emit(0, &format!("# totals: {}", frame.totals));
        match self.error.take() {
            Some(e) => Err(KtapError::Io(e)),
            None => Ok(frame.totals),
        }
    }

    /// Writes one line at `depth`, cut to [`MAX_LINE`] bytes, with one `write_all` call.
    fn emit(&mut self, depth: usize, text: &str) {
        let mut line = "  ".repeat(depth);
        line.push_str(text);
        truncate_at_char(&mut line, MAX_LINE);
        line.push('\n');
        let written = self
            .sink
            .write_all(line.as_bytes())
            .and_then(|()| self.sink.flush());
        if let Err(e) = written {
            self.error.get_or_insert(e);
        }
    }

    /// The depth of the innermost open frame's lines.
    fn depth(&self) -> usize {
        self.frames.len().saturating_sub(1)
    }

    fn top(&mut self) -> &mut Frame {
        self.frames
            .last_mut()
            .expect("print_suites keeps a frame open")
    }

    /// Prints diagnostic lines at the current depth, one per line of `text`, each cut into
    /// pieces that fit in [`MAX_LINE`].
    fn diag(&mut self, text: &str) {
        let depth = self.depth();
        let room = MAX_LINE.saturating_sub(2 * depth + 2).max(16);
        let text = text.trim_end_matches(['\n', '\r']);
        for line in text.split('\n') {
            let line = line.trim_end_matches('\r');
            if line.is_empty() {
                self.emit(depth, "#");
                continue;
            }
            let mut rest = line;
            while !rest.is_empty() {
                let mut cut = rest.len().min(room);
                while !rest.is_char_boundary(cut) {
                    cut -= 1;
                }
                let (piece, tail) = rest.split_at(cut);
                self.emit(depth, &format!("# {piece}"));
                rest = tail;
            }
        }
    }

    /// Prints a result line at the current depth and counts it.
    fn result(&mut self, ok: bool, name: &str, directive: Option<&str>) {
        let depth = self.depth();
        let frame = self.top();
        frame.emitted += 1;
        frame.failed |= !ok;
        let number = frame.emitted;
        let mut line = format!(
            "{} {number} {}",
            if ok { "ok" } else { "not ok" },
            sanitize_name(name)
        );
        if let Some(directive) = directive {
            line.push_str(" # ");
            line.push_str(&one_line(directive));
        }
        self.emit(depth, line.trim_end());
    }

    fn leaf(&mut self, outcome: Leaf, name: &str) {
        match outcome {
            Leaf::Pass => {
                self.result(true, name, None);
                self.top().totals.pass += 1;
            }
            Leaf::Fail(diagnostic) => {
                if !diagnostic.is_empty() {
                    self.diag(diagnostic);
                }
                self.result(false, name, None);
                self.top().totals.fail += 1;
            }
            Leaf::Skip(reason) => {
                let directive = if reason.trim().is_empty() {
                    "SKIP".to_owned()
                } else {
                    format!("SKIP {}", reason.trim())
                };
                self.result(true, name, Some(&directive));
                self.top().totals.skip += 1;
            }
        }
    }

    /// Opens a subtest one level below the current one.
    fn open_subtest(&mut self, name: &str, planned: usize) {
        let name = sanitize_name(name);
        let depth = self.frames.len();
        self.emit(depth, "KTAP version 1");
        self.emit(depth, &format!("# Subtest: {name}"));
        self.emit(depth, &format!("1..{planned}"));
        self.frames.push(Frame::new(name));
    }

    /// Closes the innermost subtest: prints its result line in the parent, `not ok` when one
    /// of its results failed.
    fn close_subtest(&mut self) {
        let frame = self.frames.pop().expect("open_subtest pushed it");
        self.result(!frame.failed, &frame.name, None);
        self.top().totals.add(frame.totals);
    }

    /// Prints a buffered case at the current level.
    fn case(&mut self, case: &Case) {
        for line in &case.log {
            self.diag(line);
        }
        match &case.result {
            CaseResult::Pass => self.leaf(Leaf::Pass, &case.name),
            CaseResult::Fail(d) => self.leaf(Leaf::Fail(d), &case.name),
            CaseResult::Skip(r) => self.leaf(Leaf::Skip(r), &case.name),
            CaseResult::Group(children) => {
                self.open_subtest(&case.name, children.len());
                for child in children {
                    self.case(child);
                }
                self.close_subtest();
            }
        }
    }
}

impl Frame {
    fn new(name: String) -> Self {
        Self {
            name,
            emitted: 0,
            failed: false,
            totals: Totals::default(),
        }
    }
}

enum Leaf<'a> {
    Pass,
    Fail(&'a str),
    Skip(&'a str),
}

/// A buffered test result, for [`Ktap::print_suites`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// The test's name (sanitized when printed).
    pub name: String,
    /// Its outcome, or its subtests.
    pub result: CaseResult,
    /// Diagnostic lines printed before its result line (before a group's subtest header).
    pub log: Vec<String>,
}

/// The outcome of a [`Case`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaseResult {
    /// Passed.
    Pass,
    /// Failed, with a diagnostic printed just before the result line.
    Fail(String),
    /// Skipped, with a reason.
    Skip(String),
    /// A subtest: passes when none of its cases failed.
    Group(Vec<Case>),
}

impl Case {
    /// A passing case.
    pub fn pass(name: impl Into<String>) -> Self {
        Self::new(name, CaseResult::Pass)
    }

    /// A failing case.
    pub fn fail(name: impl Into<String>, diagnostic: impl Into<String>) -> Self {
        Self::new(name, CaseResult::Fail(diagnostic.into()))
    }

    /// A skipped case.
    pub fn skip(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::new(name, CaseResult::Skip(reason.into()))
    }

    /// A passing case when `passed`, else a failing one with `diagnostic`.
    pub fn check(name: impl Into<String>, passed: bool, diagnostic: impl Into<String>) -> Self {
        if passed {
            Self::pass(name)
        } else {
            Self::fail(name, diagnostic)
        }
    }

    /// A subtest of `children`.
    pub fn group(name: impl Into<String>, children: Vec<Case>) -> Self {
        Self::new(name, CaseResult::Group(children))
    }

    /// Adds a diagnostic line printed before the result.
    pub fn with_log(mut self, line: impl Into<String>) -> Self {
        self.log.push(line.into());
        self
    }

    /// Whether this case (or, for a group, every case in it) did not fail.
    pub fn passed(&self) -> bool {
        match &self.result {
            CaseResult::Pass | CaseResult::Skip(_) => true,
            CaseResult::Fail(_) => false,
            CaseResult::Group(children) => children.iter().all(Case::passed),
        }
    }

    /// One group for `runs`, the same group run again and again until some goal was reached:
    /// the plan then does not depend on how many runs that took.
    ///
    /// Its first case, `every_run_judged`, fails for each run that ended before its cases (a
    /// run that is not a group). Then come the runs' cases once each, in the order the runs
    /// have them; each passes only if it passed in every run that is a group, and fails if one
    /// of them lacks it. A group among them is merged the same way. Diagnostics and log lines
    /// name their run (`NAME: ...`).
    pub fn merge_runs(name: impl Into<String>, runs: Vec<Case>) -> Self {
        let mut whole = Vec::new();
        let mut groups = Vec::new();
        for run in runs {
            match run.result {
                CaseResult::Group(children) => groups.push((run.name, run.log, children)),
                CaseResult::Fail(why) => whole.push(format!("{}: {why}", run.name)),
                CaseResult::Pass | CaseResult::Skip(_) => {
                    whole.push(format!("{}: no cases", run.name))
                }
            }
        }
        let judged = Case::check(
            "every_run_judged",
            whole.is_empty() && !groups.is_empty(),
            if groups.is_empty() && whole.is_empty() {
                "no run".to_owned()
            } else {
                whole.join("; ")
            },
        )
        .with_log(format!(
            "{} runs judged, {} ended before their cases",
            groups.len(),
            whole.len()
        ));
        let mut merged = Self::merge_children(&groups);
        merged.insert(0, judged);
        let mut case = Self::group(name, merged);
        for (run, log, _) in &groups {
            case.log.extend(log.iter().map(|l| format!("{run}: {l}")));
        }
        case
    }

    /// The cases of `runs` (each a run's name, log and cases) merged by name, as
    /// [`Case::merge_runs`] says.
    fn merge_children(runs: &[(String, Vec<String>, Vec<Case>)]) -> Vec<Case> {
        let mut names: Vec<&str> = Vec::new();
        for (_, _, children) in runs {
            for c in children {
                if !names.contains(&c.name.as_str()) {
                    names.push(&c.name);
                }
            }
        }
        names
            .into_iter()
            .map(|name| {
                let mut fails = Vec::new();
                let mut skips = Vec::new();
                let mut log = Vec::new();
                let mut sub = Vec::new();
                for (run, _, children) in runs {
                    let Some(c) = children.iter().find(|c| c.name == name) else {
                        fails.push(format!("{run}: missing"));
                        continue;
                    };
                    log.extend(c.log.iter().map(|l| format!("{run}: {l}")));
                    match &c.result {
                        CaseResult::Pass => {}
                        CaseResult::Fail(why) => fails.push(format!("{run}: {why}")),
                        CaseResult::Skip(why) => skips.push(format!("{run}: {why}")),
                        CaseResult::Group(grand) => {
                            sub.push((run.clone(), Vec::new(), grand.clone()))
                        }
                    }
                }
                let result = if !sub.is_empty() && fails.is_empty() && skips.is_empty() {
                    CaseResult::Group(Self::merge_children(&sub))
                } else if !fails.is_empty() {
                    CaseResult::Fail(fails.join("; "))
                } else if skips.len() == runs.len() {
                    CaseResult::Skip(skips.join("; "))
                } else if !skips.is_empty() {
                    CaseResult::Fail(format!("skipped in some runs only: {}", skips.join("; ")))
                } else {
                    CaseResult::Pass
                };
                Case {
                    name: name.to_owned(),
                    result,
                    log,
                }
            })
            .collect()
    }

    fn new(name: impl Into<String>, result: CaseResult) -> Self {
        Self {
            name: name.into(),
            result,
            log: Vec::new(),
        }
    }
}

/// The `textpoke_selftest` suite, from the kernel log lines textpoke's load-time self-test
/// prints (`textpoke: selftest: 1..N`, `... ok I NAME`, `... not ok I NAME: WHY`; see
/// kernel/selftest.rs), given every log line since just before the module was loaded.
///
/// A missing plan (the module never ran its self-test: it refused to load earlier, or was not
/// loaded) and a result count that differs from the plan each fail the suite.
pub fn selftest_suite(lines: &[String]) -> Case {
    const NAME: &str = "textpoke_selftest";
    let mut planned = None;
    let mut children = Vec::new();
    for line in lines {
        let Some(rest) = line
            .split_once("textpoke: selftest: ")
            .map(|(_, r)| r.trim_end())
        else {
            continue;
        };
        if let Some(n) = rest.strip_prefix("1..") {
            planned = n.trim().parse::<usize>().ok();
        } else if let Some(r) = rest.strip_prefix("ok ") {
            let name = r.split_once(' ').map_or(r, |(_, name)| name);
            children.push(Case::pass(name));
        } else if let Some(r) = rest.strip_prefix("not ok ") {
            let r = r.split_once(' ').map_or(r, |(_, r)| r);
            let (name, why) = r.split_once(": ").unwrap_or((r, "failed"));
            children.push(Case::fail(name, why));
        }
    }
    match planned {
        None => Case::group(
            NAME,
            vec![Case::fail(
                "selftest_ran",
                "no `textpoke: selftest: 1..N` line: textpoke never ran its self-test",
            )],
        ),
        Some(n) if n != children.len() => {
            let got = children.len();
            children.push(Case::fail(
                "selftest_complete",
                format!("planned {n} results, the log has {got}"),
            ));
            Case::group(NAME, children)
        }
        Some(_) => Case::group(NAME, children),
    }
}

/// A test name as printed: `#` (which starts a directive) becomes `_`, line breaks and other
/// control characters become spaces, surrounding whitespace is trimmed.
pub fn sanitize_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| match c {
            '#' => '_',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect::<String>()
        .trim()
        .to_owned();
    truncate_at_char(&mut out, MAX_LINE / 2);
    out
}

fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_owned()
}

fn truncate_at_char(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_runs_has_the_same_plan_however_many_runs() {
        let run = |k: usize, ok: bool| {
            Case::group(
                format!("run_{k}"),
                vec![
                    Case::pass("a"),
                    Case::check("b", ok, format!("b failed in {k}")).with_log(format!("b {k}")),
                ],
            )
        };
        let two = Case::merge_runs("r", vec![run(0, true), run(1, true)]);
        let five = Case::merge_runs("r", (0..5).map(|k| run(k, true)).collect());
        let names = |c: &Case| match &c.result {
            CaseResult::Group(children) => children.iter().map(|c| c.name.clone()).collect(),
            _ => Vec::new(),
        };
        assert_eq!(names(&two), ["every_run_judged", "a", "b"]);
        assert_eq!(names(&two), names(&five));
        assert!(two.passed() && five.passed());
        let CaseResult::Group(children) = &five.result else {
            unreachable!()
        };
        assert_eq!(
            children[2].log,
            [
                "run_0: b 0",
                "run_1: b 1",
                "run_2: b 2",
                "run_3: b 3",
                "run_4: b 4"
            ]
        );

        // One failing run fails the merged case, naming it.
        let failed = Case::merge_runs("r", vec![run(0, true), run(1, false), run(2, true)]);
        assert!(!failed.passed());
        let CaseResult::Group(children) = &failed.result else {
            unreachable!()
        };
        assert_eq!(
            children[2].result,
            CaseResult::Fail("run_1: b failed in 1".into())
        );
        assert_eq!(children[1].result, CaseResult::Pass);
    }

    #[test]
    fn merge_runs_fails_a_run_cut_short_and_a_case_one_run_lacks() {
        let full = Case::group("run_0", vec![Case::pass("a"), Case::pass("b")]);
        let short = Case::group("run_1", vec![Case::pass("a")]);
        let died = Case::fail("run_2", "the scenario did not start");
        let m = Case::merge_runs("r", vec![full, short, died]);
        let CaseResult::Group(children) = &m.result else {
            unreachable!()
        };
        assert_eq!(
            children[0].result,
            CaseResult::Fail("run_2: the scenario did not start".into())
        );
        assert_eq!(children[1].result, CaseResult::Pass);
        assert_eq!(
            children[2].result,
            CaseResult::Fail("run_1: missing".into())
        );
        // No run at all is a failure too, not an empty pass.
        assert!(!Case::merge_runs("r", Vec::new()).passed());
    }

    #[test]
    fn selftest_suite_from_log_lines() {
        let lines: Vec<String> = [
            "textpoke: selftest: 1..3",
            "something else",
            "textpoke: selftest: ok 1 plan_cost_matches_protocol",
            "textpoke: selftest: not ok 2 trap_emulates_b: trap did not emulate: the new instruction",
            "textpoke: selftest: ok 3 trap_hook_claimed_once",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let suite = selftest_suite(&lines);
        assert_eq!(
            suite,
            Case::group(
                "textpoke_selftest",
                vec![
                    Case::pass("plan_cost_matches_protocol"),
                    Case::fail(
                        "trap_emulates_b",
                        "trap did not emulate: the new instruction"
                    ),
                    Case::pass("trap_hook_claimed_once"),
                ]
            )
        );
        assert!(!selftest_suite(&lines[..3]).passed(), "incomplete");
        let none = selftest_suite(&[]);
        assert!(!none.passed());
        assert_eq!(none.name, "textpoke_selftest");
    }

    #[test]
    fn one_document_of_suites() {
        let (mut k, cap) = ktap();
        let totals = k
            .print_suites(&[
                Case::group("textpoke_selftest", vec![Case::pass("a")]),
                Case::group(
                    "textpoke_agent",
                    vec![Case::pass("b"), Case::fail("c", "why")],
                ),
            ])
            .unwrap();
        assert_eq!(
            totals,
            Totals {
                pass: 2,
                fail: 1,
                skip: 0
            }
        );
        assert_eq!(
            cap.text(),
            "KTAP version 1\n1..2\n  KTAP version 1\n  # Subtest: textpoke_selftest\n  1..1\n  \
             ok 1 a\nok 1 textpoke_selftest\n  KTAP version 1\n  # Subtest: textpoke_agent\n  \
             1..2\n  ok 1 b\n  # why\n  not ok 2 c\nnot ok 2 textpoke_agent\n\
             # totals: pass:2 fail:1 skip:0\n"
        );
    }

    use std::cell::RefCell;
    use std::rc::Rc;

    /// A sink that keeps every `write` call separately, to check one call per line.
    #[derive(Clone, Default)]
    struct Capture(Rc<RefCell<Vec<Vec<u8>>>>);

    impl Write for Capture {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Capture {
        fn text(&self) -> String {
            String::from_utf8(self.0.borrow().concat()).unwrap()
        }
    }

    fn ktap() -> (Ktap, Capture) {
        let cap = Capture::default();
        (Ktap::new(Box::new(cap.clone())), cap)
    }

    const EXPECTED: &str = "\
KTAP version 1
1..4
ok 1 first
  KTAP version 1
  # Subtest: group
  1..3
  ok 1 inner_pass
  # expected EBUSY
  # got 0
  not ok 2 inner_fail
  ok 3 inner_skip # SKIP not on arm64
not ok 2 group
  KTAP version 1
  # Subtest: good_group
  1..1
  # note
  ok 1 a
ok 3 good_group
ok 4 case_3 # SKIP no perf
# totals: pass:3 fail:1 skip:2
";

    #[test]
    fn buffered_document_with_nested_subtest() {
        let (mut k, cap) = ktap();
        let cases = vec![
            Case::pass("first"),
            Case::group(
                "group",
                vec![
                    Case::pass("inner_pass"),
                    Case::fail("inner_fail", "expected EBUSY\ngot 0\n"),
                    Case::skip("inner_skip", "not on arm64"),
                ],
            ),
            Case::group("good_group", vec![Case::pass("a").with_log("note")]),
            Case::skip("case#3", "no perf"),
        ];
        assert!(!cases[1].passed());
        assert!(cases[2].passed());
        let totals = k.print_suites(&cases).unwrap();
        assert_eq!(
            totals,
            Totals {
                pass: 3,
                fail: 1,
                skip: 2
            }
        );
        assert_eq!(cap.text(), EXPECTED);
        // One write per line, each ending in its newline.
        let writes = cap.0.borrow();
        assert_eq!(writes.len(), EXPECTED.lines().count());
        assert!(writes
            .iter()
            .all(|w| w.ends_with(b"\n") && w.iter().filter(|&&b| b == b'\n').count() == 1));
    }

    #[test]
    fn deeper_nesting_and_failure_propagation() {
        let (mut k, cap) = ktap();
        let cases = [Case::group(
            "a",
            vec![Case::group("b", vec![Case::fail("c", "")])],
        )];
        assert!(!cases[0].passed());
        let totals = k.print_suites(&cases).unwrap();
        assert_eq!(totals.fail, 1);
        assert_eq!(
            cap.text(),
            "\
KTAP version 1
1..1
  KTAP version 1
  # Subtest: a
  1..1
    KTAP version 1
    # Subtest: b
    1..1
    not ok 1 c
  not ok 1 b
not ok 1 a
# totals: pass:0 fail:1 skip:0
"
        );
    }

    #[test]
    fn names_and_long_lines_are_sanitized() {
        assert_eq!(sanitize_name(" a#b\nc "), "a_b c");
        let (mut k, cap) = ktap();
        let cases = [Case::pass("x").with_log("é".repeat(MAX_LINE))];
        k.print_suites(&cases).unwrap();
        for line in cap.text().lines() {
            assert!(line.len() <= MAX_LINE, "{} bytes", line.len());
        }
        assert_eq!(
            cap.text().lines().filter(|l| l.starts_with("# é")).count(),
            3
        );
    }

    #[test]
    fn write_errors_are_returned_at_finish() {
        struct Broken;
        impl Write for Broken {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::from_raw_os_error(libc::EINVAL))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut k = Ktap::new(Box::new(Broken));
        match k.print_suites(&[Case::pass("a")]) {
            Err(KtapError::Io(e)) => assert_eq!(e.raw_os_error(), Some(libc::EINVAL)),
            other => panic!("{other:?}"),
        }

        // The error is returned once: a later document on the same writer starts clean.
        struct FailsOnce(bool);
        impl Write for FailsOnce {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                if std::mem::replace(&mut self.0, true) {
                    Ok(buf.len())
                } else {
                    Err(io::Error::from_raw_os_error(libc::EINVAL))
                }
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut k = Ktap::new(Box::new(FailsOnce(false)));
        assert!(k.print_suites(&[Case::pass("a")]).is_err());
        assert!(k.print_suites(&[Case::pass("b")]).is_ok());
    }
}
