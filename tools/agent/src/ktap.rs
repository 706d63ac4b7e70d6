//! A KTAP (version 1) writer, as `Documentation/dev-tools/ktap.rst` describes.
//!
//! Every line goes to the sink in one `write` call, so that `/dev/kmsg` (the sink in the guest)
//! turns each line into one printk record and never splits or merges lines; the kernel adds its
//! timestamp prefix, which the runner strips.
//!
//! Two ways to print a document:
//!
//! * streaming: [`Ktap::document`] prints the header at once, then each result as it is reported
//!   ([`Document::ok`], [`Document::not_ok`], [`Document::skip`], [`Document::subtest`]), and
//!   [`Document::finish`] prints the totals;
//! * buffered: collect [`Case`]s and print the whole document at the end with
//!   [`Ktap::print_document`], so that kernel KTAP output (KUnit, the module's selftest) printed
//!   in the meantime cannot land in the middle of it;
//! * deferred: the streaming API on a writer made with [`Ktap::deferred`] (or
//!   [`Ktap::kmsg_deferred`]), which holds a document's lines until it finishes.
//!
//! Loading `textpoke.ko` prints its selftest document (`KTAP version 1` at indentation 0): in a
//! streamed agent document that line ends the agent's document for the runner, which then
//! counts the agent's remaining results as the selftest's surplus. Load modules outside a
//! streamed document, or use the buffered or deferred form.
//!
//! ```text
//! KTAP version 1
//! 1..3
//! # textpoke_agent
//! ok 1 first
//!   KTAP version 1
//!   # Subtest: group
//!   1..2
//!   ok 1 inner_pass
//!   # expected EBUSY, got 0
//!   not ok 2 inner_fail
//! not ok 2 group
//! ok 3 later # SKIP no perf binary
//! # totals: pass:2 fail:1 skip:1
//! ```
//!
//! Failure diagnostics are printed as `# ` lines just before the `not ok` line (where KUnit puts
//! them and where the runner collects them as the test's log), not after a `#` on the result line,
//! where a diagnostic starting with a word like `skipped` would read as a directive.
//!
//! Write errors never interrupt a test run: the first one is remembered and returned by
//! [`Document::finish`] (or [`Ktap::take_error`]).

use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, Write};

/// The longest line written, newline excluded.
///
/// `/dev/kmsg` refuses a write longer than a printk record (1024 bytes) with `EINVAL`; longer
/// diagnostics are split over several lines and longer names are cut.
pub const MAX_LINE: usize = 960;

/// Pass, fail and skip counts of leaf results.
///
/// A subtest whose result line says `not ok` although none of its children failed (its plan was
/// not met) counts as one failure, as the runner counts it.
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
    /// The document got a different number of top-level results than its plan announced.
    Plan {
        /// The document's name.
        name: String,
        /// The number in the `1..N` plan line.
        planned: usize,
        /// The number of result lines printed.
        emitted: usize,
    },
}

impl fmt::Display for KtapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "writing KTAP output: {e}"),
            Self::Plan {
                name,
                planned,
                emitted,
            } => write!(
                f,
                "KTAP document {name}: planned {planned} results, emitted {emitted}"
            ),
        }
    }
}

impl std::error::Error for KtapError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e),
            Self::Plan { .. } => None,
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
    planned: usize,
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
    /// Whether lines are held until their document finishes.
    deferred: bool,
    /// The held lines, newline included.
    held: Vec<String>,
}

impl fmt::Debug for Ktap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ktap")
            .field("frames", &self.frames)
            .field("error", &self.error)
            .field("deferred", &self.deferred)
            .field("held", &self.held.len())
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
            deferred: false,
            held: Vec::new(),
        }
    }

    /// A writer that holds every line of a document in memory and writes them all (still one
    /// `write` per line) when the document finishes, so that other KTAP output printed in the
    /// meantime (the module's selftest document when it is loaded, KUnit) cannot land inside
    /// it and cut it short.
    ///
    /// The streaming API stays the same; the price is that nothing of a document shows before
    /// it finishes (a guest that hangs mid-document shows none of it). Lines printed outside a
    /// document are written at once.
    pub fn deferred(sink: Box<dyn Write>) -> Self {
        Self {
            deferred: true,
            ..Self::new(sink)
        }
    }

    /// A deferred writer to `/dev/kmsg`; see [`Ktap::deferred`] and [`Ktap::kmsg`].
    pub fn kmsg_deferred() -> io::Result<Self> {
        let file = OpenOptions::new().write(true).open("/dev/kmsg")?;
        Ok(Self::deferred(Box::new(file)))
    }

    /// Writes the held lines of a deferred writer now (also done when a document finishes).
    pub fn flush_held(&mut self) {
        for line in std::mem::take(&mut self.held) {
            self.write_line(&line);
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

    /// Starts a top-level document: prints `KTAP version 1`, `1..planned` and `# name`.
    ///
    /// `name` is made one word of letters, digits, `_`, `.`, `/` and `-` (the runner's document
    /// names), other characters becoming `_`.
    pub fn document(&mut self, name: &str, planned: usize) -> Document<'_> {
        let name = sanitize_doc_name(name);
        self.frames.push(Frame::new(name.clone(), planned));
        self.emit(0, "KTAP version 1");
        self.emit(0, &format!("1..{planned}"));
        self.emit(0, &format!("# {name}"));
        Document {
            ktap: self,
            done: false,
        }
    }

    /// Prints a whole document of buffered results at once.
    ///
    /// Its plan is `cases.len()`, and each [`CaseResult::Group`] becomes a subtest whose plan is
    /// its number of children.
    pub fn print_document(&mut self, name: &str, cases: &[Case]) -> Result<Totals, KtapError> {
        let mut doc = self.document(name, cases.len());
        for case in cases {
            doc.case(case);
        }
        doc.finish()
    }

    /// Takes the first write error since the last call, if any.
    pub fn take_error(&mut self) -> Option<io::Error> {
        self.error.take()
    }

    /// Writes one line at `depth`, cut to [`MAX_LINE`] bytes.
    fn emit(&mut self, depth: usize, text: &str) {
        let mut line = "  ".repeat(depth);
        line.push_str(text);
        truncate_at_char(&mut line, MAX_LINE);
        line.push('\n');
        if self.deferred && !self.frames.is_empty() {
            self.held.push(line);
        } else {
            self.write_line(&line);
        }
    }

    /// Writes one line (newline included) with one `write_all` call.
    fn write_line(&mut self, line: &str) {
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
            .expect("a Document or Subdoc keeps its frame open")
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
    fn result(&mut self, ok: bool, name: &str, directive: Option<&str>) -> usize {
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
        number
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
        self.frames.push(Frame::new(name, planned));
    }

    /// Closes the innermost subtest: checks its plan and prints its result line in the parent.
    fn close_subtest(&mut self) -> bool {
        let mut frame = self.frames.pop().expect("a Subdoc keeps its frame open");
        if frame.emitted != frame.planned {
            // Printed inside the subtest, where the runner keeps it as the subtest's log.
            self.frames.push(frame);
            let (planned, emitted) = (self.top().planned, self.top().emitted);
            self.diag(&format!(
                "plan mismatch: planned {planned} results, emitted {emitted}"
            ));
            frame = self.frames.pop().expect("pushed just above");
            frame.failed = true;
        }
        let ok = !frame.failed;
        let mut totals = frame.totals;
        if !ok && totals.fail == 0 {
            totals.fail = 1;
        }
        self.result(ok, &frame.name, None);
        self.top().totals.add(totals);
        ok
    }

    /// Closes the document: prints the totals, checks the plan.
    fn close_document(&mut self) -> Result<Totals, KtapError> {
        let frame = self.frames.pop().expect("a Document keeps its frame open");
        // With no frame open the lines below are written directly, after the held ones.
        self.flush_held();
        let plan_ok = frame.emitted == frame.planned;
        if !plan_ok {
            self.emit(
                0,
                &format!(
                    "# plan mismatch: planned {} results, emitted {}",
                    frame.planned, frame.emitted
                ),
            );
        }
        self.emit(0, &format!("# totals: {}", frame.totals));
        if let Some(e) = self.error.take() {
            return Err(KtapError::Io(e));
        }
        if !plan_ok {
            return Err(KtapError::Plan {
                name: frame.name,
                planned: frame.planned,
                emitted: frame.emitted,
            });
        }
        Ok(frame.totals)
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
    fn new(name: String, planned: usize) -> Self {
        Self {
            name,
            planned,
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

/// The methods shared by [`Document`] and [`Subdoc`].
macro_rules! results {
    () => {
        /// Reports a passing test.
        pub fn ok(&mut self, name: &str) {
            self.ktap.leaf(Leaf::Pass, name);
        }

        /// Reports a failing test; `diagnostic` (any number of lines, may be empty) is printed
        /// as `# ` lines just before the result line.
        pub fn not_ok(&mut self, name: &str, diagnostic: &str) {
            self.ktap.leaf(Leaf::Fail(diagnostic), name);
        }

        /// Reports a pass or a failure: [`Self::ok`] when `passed`, else [`Self::not_ok`].
        pub fn result(&mut self, name: &str, passed: bool, diagnostic: &str) {
            if passed {
                self.ok(name);
            } else {
                self.not_ok(name, diagnostic);
            }
        }

        /// Reports a skipped test: `ok N name # SKIP reason`.
        pub fn skip(&mut self, name: &str, reason: &str) {
            self.ktap.leaf(Leaf::Skip(reason), name);
        }

        /// Prints diagnostic lines at this level, one `# ` line per line of `text`.
        pub fn diag(&mut self, text: &str) {
            self.ktap.diag(text);
        }

        /// Prints a buffered [`Case`] (a group becomes a subtest) as the next result.
        pub fn case(&mut self, case: &Case) {
            self.ktap.case(case);
        }

        /// Opens a nested subtest as the next result, printing its indented header.
        ///
        /// [`Subdoc::finish`] (or dropping it) prints this level's result line for it: `not ok`
        /// when one of its results failed or its plan was not met, `ok` otherwise.
        pub fn subtest(&mut self, name: &str, planned: usize) -> Subdoc<'_> {
            self.ktap.open_subtest(name, planned);
            Subdoc {
                ktap: &mut *self.ktap,
                done: false,
            }
        }

        /// The number of results printed at this level so far.
        pub fn emitted(&self) -> usize {
            self.ktap.frames.last().map_or(0, |f| f.emitted)
        }

        /// Whether a result at this level failed so far.
        pub fn failed(&self) -> bool {
            self.ktap.frames.last().is_some_and(|f| f.failed)
        }
    };
}

/// An open top-level document; see [`Ktap::document`].
///
/// Dropping it without [`Document::finish`] finishes it and discards the outcome.
#[derive(Debug)]
pub struct Document<'k> {
    ktap: &'k mut Ktap,
    done: bool,
}

impl Document<'_> {
    results!();

    /// Prints `# totals: pass:P fail:F skip:S` and returns the totals.
    ///
    /// Fails when a write failed along the way, or when the number of results differs from
    /// the plan (after printing a `# plan mismatch` diagnostic).
    pub fn finish(mut self) -> Result<Totals, KtapError> {
        self.done = true;
        self.ktap.close_document()
    }
}

impl Drop for Document<'_> {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.ktap.close_document();
        }
    }
}

/// An open subtest; see [`Document::subtest`].
///
/// Dropping it without [`Subdoc::finish`] finishes it.
#[derive(Debug)]
pub struct Subdoc<'k> {
    ktap: &'k mut Ktap,
    done: bool,
}

impl Subdoc<'_> {
    results!();

    /// Prints the parent's result line for this subtest and returns whether it passed.
    ///
    /// A plan mismatch prints a diagnostic in the subtest and makes it fail.
    pub fn finish(mut self) -> bool {
        self.done = true;
        self.ktap.close_subtest()
    }
}

impl Drop for Subdoc<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.ktap.close_subtest();
        }
    }
}

/// A buffered test result, for [`Ktap::print_document`].
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

    fn new(name: impl Into<String>, result: CaseResult) -> Self {
        Self {
            name: name.into(),
            result,
            log: Vec::new(),
        }
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

/// A document name as printed: one word of ASCII letters, digits, `_`, `.`, `/` and `-`.
pub fn sanitize_doc_name(name: &str) -> String {
    let out: String = name
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        "unnamed".to_owned()
    } else {
        out
    }
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
# textpoke_agent
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
    fn streaming_document_with_nested_subtest() {
        let (mut k, cap) = ktap();
        let mut doc = k.document("textpoke_agent", 4);
        doc.ok("first");
        {
            let mut sub = doc.subtest("group", 3);
            sub.ok("inner_pass");
            sub.not_ok("inner_fail", "expected EBUSY\ngot 0\n");
            sub.skip("inner_skip", "not on arm64");
            assert!(sub.failed());
            assert!(!sub.finish());
        }
        let mut sub = doc.subtest("good_group", 1);
        sub.diag("note");
        sub.ok("a");
        drop(sub);
        assert_eq!(doc.emitted(), 3);
        doc.skip("case#3", "no perf");
        let totals = doc.finish().unwrap();
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
    fn buffered_document_prints_the_same() {
        let (mut k, cap) = ktap();
        let cases = vec![
            Case::pass("first"),
            Case::group(
                "group",
                vec![
                    Case::pass("inner_pass"),
                    Case::fail("inner_fail", "expected EBUSY\ngot 0"),
                    Case::skip("inner_skip", "not on arm64"),
                ],
            ),
            Case::group("good_group", vec![Case::pass("a").with_log("note")]),
            Case::skip("case#3", "no perf"),
        ];
        assert!(!cases[1].passed());
        assert!(cases[2].passed());
        let totals = k.print_document("textpoke_agent", &cases).unwrap();
        assert_eq!(totals.fail, 1);
        assert_eq!(cap.text(), EXPECTED);
    }

    #[test]
    fn plan_mismatch_is_reported() {
        let (mut k, cap) = ktap();
        let mut doc = k.document("short", 2);
        {
            let mut sub = doc.subtest("sub", 2);
            sub.ok("only_one");
        }
        let err = doc.finish().unwrap_err();
        assert!(matches!(
            err,
            KtapError::Plan {
                planned: 2,
                emitted: 1,
                ..
            }
        ));
        assert_eq!(
            cap.text(),
            "\
KTAP version 1
1..2
# short
  KTAP version 1
  # Subtest: sub
  1..2
  ok 1 only_one
  # plan mismatch: planned 2 results, emitted 1
not ok 1 sub
# plan mismatch: planned 2 results, emitted 1
# totals: pass:1 fail:1 skip:0
"
        );
        // A later document on the same writer starts clean.
        let mut doc = k.document("next", 1);
        doc.result("x", true, "");
        assert!(doc.finish().is_ok());
    }

    #[test]
    fn deeper_nesting_and_failure_propagation() {
        let (mut k, cap) = ktap();
        let mut doc = k.document("deep", 1);
        {
            let mut a = doc.subtest("a", 1);
            let mut b = a.subtest("b", 1);
            b.not_ok("c", "");
            b.finish();
            a.finish();
        }
        let totals = doc.finish().unwrap();
        assert_eq!(totals.fail, 1);
        assert_eq!(
            cap.text(),
            "\
KTAP version 1
1..1
# deep
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
    fn deferred_documents_come_out_whole() {
        let cap = Capture::default();
        let mut k = Ktap::deferred(Box::new(cap.clone()));
        let mut doc = k.document("textpoke_agent", 4);
        doc.ok("first");
        {
            let mut sub = doc.subtest("group", 3);
            sub.ok("inner_pass");
            sub.not_ok("inner_fail", "expected EBUSY\ngot 0\n");
            sub.skip("inner_skip", "not on arm64");
        }
        // Nothing is written until the document finishes, though other output may be.
        assert!(cap.0.borrow().is_empty());
        let mut sub = doc.subtest("good_group", 1);
        sub.diag("note");
        sub.ok("a");
        drop(sub);
        doc.skip("case#3", "no perf");
        assert!(cap.0.borrow().is_empty());
        doc.finish().unwrap();
        assert_eq!(cap.text(), EXPECTED);
        assert_eq!(cap.0.borrow().len(), EXPECTED.lines().count());
        // Dropping an unfinished document flushes it too.
        cap.0.borrow_mut().clear();
        drop(k.document("dropped", 0));
        assert_eq!(
            cap.text(),
            "KTAP version 1\n1..0\n# dropped\n# totals: pass:0 fail:0 skip:0\n"
        );
    }

    #[test]
    fn names_and_long_lines_are_sanitized() {
        assert_eq!(sanitize_name(" a#b\nc "), "a_b c");
        assert_eq!(sanitize_doc_name("textpoke agent#1"), "textpoke_agent_1");
        assert_eq!(sanitize_doc_name(""), "unnamed");
        let (mut k, cap) = ktap();
        let mut doc = k.document("long", 1);
        doc.diag(&"é".repeat(MAX_LINE));
        doc.ok("x");
        doc.finish().unwrap();
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
        let mut doc = k.document("x", 1);
        doc.ok("a");
        match doc.finish() {
            Err(KtapError::Io(e)) => assert_eq!(e.raw_os_error(), Some(libc::EINVAL)),
            other => panic!("{other:?}"),
        }
    }
}
