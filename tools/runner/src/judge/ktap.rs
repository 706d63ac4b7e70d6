//! KTAP parser for guest serial-console logs.
//!
//! A guest's console mixes KTAP documents (the kernel's KUnit output, the textpoke agent's output
//! written through `/dev/kmsg`) with every other kernel message. The parser therefore classifies
//! each line first and drops everything that is not KTAP before looking at structure, so
//! unrelated messages may appear anywhere, with any indentation, without disturbing it.
//!
//! Structure follows `Documentation/dev-tools/ktap.rst` (KTAP version 1), with what KUnit and
//! TAP 13/14 producers do in practice:
//!
//! * A document starts at `KTAP version N`, `TAP version 13` or `TAP version 14` at indentation 0
//!   and ends once it has as many top-level results as its plan announced, at the next version
//!   line at indentation 0, at a trailing plan, or at the end of the log.
//! * A subtest is any run of KTAP lines indented deeper than its parent. It usually opens with a
//!   version line and/or `# Subtest: NAME`, then a plan, and ends at the first KTAP line indented
//!   less than it, which should be the parent's result line for it. Any deeper indentation counts
//!   as one level (KUnit uses 4 spaces, the spec 2; old KUnit used tabs).
//! * A nested subtest may lack a plan (KUnit's parameterised tests print none); a document may
//!   not.
//!
//! # Document names
//!
//! A document is named by the first diagnostic line of the form `# NAME` (one word of letters,
//! digits, `_`, `-`, `.` or `/`) that follows its version or plan line and precedes its first
//! result or subtest, so a document that opens `KTAP version 1`, `1..4`, `# textpoke_selftest`
//! is called `textpoke_selftest`. A top-level `# Subtest: NAME` before the plan names it too.
//! The runner's `--require-doc` matches these names; unnamed documents (KUnit's) contribute no
//! prefix to their tests' paths.

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// Width a tab advances indentation to (a multiple of), as on a terminal.
const TAB: usize = 8;

// printk's `[    1.234567] ` timestamp, plus the `[    T1]` caller id CONFIG_PRINTK_CALLER adds.
static PRINTK_PREFIX: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\[\s*\d+\.\d+\](?:\[\s*[TC]\d+\])?\s?").unwrap());
static VERSION: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(?:KTAP version \d+|TAP version 1[34])$").unwrap());
static PLAN: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^1\.\.(\d+)(?:\s+#.*)?$").unwrap());
static RESULT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(not ok|ok)\s+(\d+)(?:\s+(.*))?$").unwrap());
static SUBTEST: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^#\s*Subtest:\s*(.*)$").unwrap());
static DOC_NAME: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[A-Za-z0-9_./-]+$").unwrap());

/// Strips what the console adds around a kernel log line: carriage returns and the printk
/// timestamp (with optional caller id).
pub fn strip_console_prefix(line: &str) -> &str {
    let line = line.trim_end_matches(['\r', '\n']).trim_start_matches('\r');
    match PRINTK_PREFIX.find(line) {
        Some(m) => &line[m.end()..],
        None => line,
    }
}

/// Whether a console line (prefix stripped or not) is a KTAP result line at any indentation.
/// Meant for progress output while a guest runs; the parser is the authority.
pub fn is_result_line(line: &str) -> bool {
    RESULT.is_match(strip_console_prefix(line).trim())
}

/// A KTAP directive, the word after `#` on a result line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Directive {
    /// Not run; neither a pass nor a failure, whether the line says `ok` or `not ok`.
    Skip,
    /// Known to be unfinished; the line's own `ok`/`not ok` decides.
    Todo,
    /// Expected to fail, and did: a pass.
    Xfail,
    /// Did not finish in time: a failure.
    Timeout,
    /// Could not run because of an error: a failure.
    Error,
}

impl Directive {
    fn parse(word: &str) -> Option<Self> {
        let word = word.to_ascii_uppercase();
        // TAP lets producers write `# Skipped: why`, so SKIP is matched as a prefix.
        if word.starts_with("SKIP") {
            Some(Self::Skip)
        } else {
            match word.as_str() {
                "TODO" => Some(Self::Todo),
                "XFAIL" => Some(Self::Xfail),
                "TIMEOUT" => Some(Self::Timeout),
                "ERROR" => Some(Self::Error),
                _ => None,
            }
        }
    }
}

impl fmt::Display for Directive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Skip => "SKIP",
            Self::Todo => "TODO",
            Self::Xfail => "XFAIL",
            Self::Timeout => "TIMEOUT",
            Self::Error => "ERROR",
        })
    }
}

/// Outcome of one test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Passed (including an expected failure).
    Pass,
    /// Failed, timed out or errored.
    Fail,
    /// Skipped.
    Skip,
}

impl Status {
    fn of(ok: bool, directive: Option<Directive>) -> Self {
        match directive {
            Some(Directive::Skip) => Self::Skip,
            Some(Directive::Xfail) => Self::Pass,
            Some(Directive::Timeout | Directive::Error) => Self::Fail,
            Some(Directive::Todo) | None if ok => Self::Pass,
            Some(Directive::Todo) | None => Self::Fail,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Pass => "pass",
            Self::Fail => "fail",
            Self::Skip => "skip",
        })
    }
}

/// One counted test: a leaf, or a parent that failed although none of its subtests did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestResult {
    /// Names from the document down to the test, joined with `/`.
    pub path: String,
    /// What the result counts as.
    pub status: Status,
    /// Whether the line said `ok` (rather than `not ok`).
    pub ok: bool,
    /// The result line's directive, if any.
    pub directive: Option<Directive>,
    /// Text after the directive, or the whole comment when there is no directive.
    pub diagnostic: String,
    /// 1-based line number of the result line in the log.
    pub line: usize,
    /// False for the extra failure a `not ok` parent with only passing subtests counts as.
    pub leaf: bool,
    /// Diagnostic lines (`#`, without it) printed at the test's level since the previous result,
    /// where KUnit puts its failure details.
    pub log: Vec<String>,
}

/// Something structurally wrong with a document; any problem fails it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line number in the log where it was noticed.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// One KTAP document found in a log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    /// Its name (see the module documentation), if it has one.
    pub name: Option<String>,
    /// 1-based line number of its version line.
    pub line: usize,
    /// The planned number of top-level results, if a plan was seen.
    pub plan: Option<usize>,
    /// Leaf results, plus failing parents whose subtests all passed, in log order.
    pub tests: Vec<TestResult>,
    /// Structural problems.
    pub problems: Vec<Problem>,
}

impl Document {
    fn count(&self, status: Status) -> usize {
        self.tests.iter().filter(|t| t.status == status).count()
    }

    /// Number of passing tests.
    pub fn passed(&self) -> usize {
        self.count(Status::Pass)
    }

    /// Number of failing tests.
    pub fn failed(&self) -> usize {
        self.count(Status::Fail)
    }

    /// Number of skipped tests.
    pub fn skipped(&self) -> usize {
        self.count(Status::Skip)
    }

    /// Whether nothing failed and the structure is sound.
    pub fn is_ok(&self) -> bool {
        self.failed() == 0 && self.problems.is_empty()
    }

    /// A name to show for it: its own, or its position in the log.
    pub fn label(&self) -> String {
        match &self.name {
            Some(name) => name.clone(),
            None => format!("unnamed document at line {}", self.line),
        }
    }
}

/// Finds and parses every KTAP document in a console log.
pub fn parse(log: &str) -> Vec<Document> {
    let mut parser = Parser {
        lines: classify(log),
        pos: 0,
        problems: Vec::new(),
    };
    let mut docs: Vec<Document> = Vec::new();
    // Top-level results after a document reached its plan, before the next document, are its
    // surplus: the only way "more results than planned" shows at the top level.
    let mut surplus_goes_to_last = false;
    while let Some(line) = parser.lines.get(parser.pos) {
        let (no, indent) = (line.no, line.indent);
        match &line.kind {
            Kind::Version if indent == 0 => {
                parser.pos += 1;
                let block = parser.block(0, true, no);
                surplus_goes_to_last = block.end == End::Complete;
                docs.push(parser.document(no, block));
                continue;
            }
            Kind::Result(r) if indent == 0 && surplus_goes_to_last => {
                let doc = docs.last_mut().expect("a document precedes its surplus");
                doc.problems.push(Problem {
                    line: no,
                    message: format!(
                        "more results than planned ({} planned): `{}`",
                        doc.plan.unwrap_or(0),
                        r.text()
                    ),
                });
                let path = join(doc.name.as_deref().unwrap_or(""), &r.name());
                doc.tests.push(r.leaf(path, no, Vec::new()));
            }
            _ => {}
        }
        parser.pos += 1;
    }
    docs
}

/// A KTAP line, with its position and indentation.
#[derive(Debug)]
struct Line {
    no: usize,
    indent: usize,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Version,
    Plan(usize),
    Result(ResultLine),
    Subtest(String),
    Diag(String),
}

#[derive(Clone, Debug)]
struct ResultLine {
    ok: bool,
    number: u64,
    description: String,
    directive: Option<Directive>,
    diagnostic: String,
}

impl ResultLine {
    fn parse(ok: bool, number: u64, rest: &str) -> Self {
        let rest = rest.trim();
        let rest = rest
            .strip_prefix("- ")
            .or_else(|| rest.strip_prefix('-').filter(|r| r.is_empty()))
            .unwrap_or(rest);
        // The comment starts at the first `#` that begins a word, so names like `case#2` survive.
        let hash = rest
            .char_indices()
            .find(|&(i, c)| c == '#' && (i == 0 || rest[..i].ends_with(char::is_whitespace)))
            .map(|(i, _)| i);
        let (description, comment) = match hash {
            Some(i) => (rest[..i].trim(), Some(rest[i + 1..].trim())),
            None => (rest, None),
        };
        let (directive, diagnostic) = match comment {
            None => (None, ""),
            Some(comment) => {
                let (word, after) = comment
                    .split_once(char::is_whitespace)
                    .unwrap_or((comment, ""));
                match Directive::parse(word) {
                    Some(d) => (Some(d), after.trim()),
                    None => (None, comment),
                }
            }
        };
        Self {
            ok,
            number,
            description: description.to_owned(),
            directive,
            diagnostic: diagnostic.to_owned(),
        }
    }

    fn name(&self) -> String {
        if self.description.is_empty() {
            format!("#{}", self.number)
        } else {
            self.description.clone()
        }
    }

    fn text(&self) -> String {
        let mut s = format!("{} {}", if self.ok { "ok" } else { "not ok" }, self.number);
        if !self.description.is_empty() {
            s.push(' ');
            s.push_str(&self.description);
        }
        if let Some(d) = self.directive {
            s.push_str(&format!(" # {d}"));
        }
        s
    }

    fn status(&self) -> Status {
        Status::of(self.ok, self.directive)
    }

    fn leaf(&self, path: String, line: usize, log: Vec<String>) -> TestResult {
        TestResult {
            path,
            status: self.status(),
            ok: self.ok,
            directive: self.directive,
            diagnostic: self.diagnostic.clone(),
            line,
            leaf: true,
            log,
        }
    }
}

fn classify(log: &str) -> Vec<Line> {
    log.lines()
        .enumerate()
        .filter_map(|(i, raw)| {
            let line = strip_console_prefix(raw);
            let body = line.trim_start_matches([' ', '\t']);
            let indent = line[..line.len() - body.len()].chars().fold(0, |col, c| {
                if c == '\t' {
                    (col / TAB + 1) * TAB
                } else {
                    col + 1
                }
            });
            let body = body.trim_end();
            let kind = if VERSION.is_match(body) {
                Kind::Version
            } else if let Some(c) = PLAN.captures(body) {
                Kind::Plan(c[1].parse().ok()?)
            } else if let Some(c) = RESULT.captures(body) {
                let number = c[2].parse().ok()?;
                let rest = c.get(3).map_or("", |m| m.as_str());
                Kind::Result(ResultLine::parse(&c[1] == "ok", number, rest))
            } else if let Some(c) = SUBTEST.captures(body) {
                Kind::Subtest(c[1].trim().to_owned())
            } else if let Some(text) = body.strip_prefix('#') {
                Kind::Diag(text.trim().to_owned())
            } else {
                return None;
            };
            Some(Line {
                no: i + 1,
                indent,
                kind,
            })
        })
        .collect()
}

/// Why a block stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// A document got all the results its plan announced.
    Complete,
    /// A document's plan came after its results.
    TrailingPlan,
    /// A line indented less than the block (for a subtest: normally its parent's result).
    Dedent,
    /// A version line where a new document or sibling subtest starts.
    Header,
    /// End of the log.
    Eof,
}

/// A parsed document or subtest, before flattening.
#[derive(Debug)]
struct Block {
    name: Option<String>,
    line: usize,
    plan: Option<usize>,
    nodes: Vec<Node>,
    end: End,
}

impl Block {
    fn label(&self) -> String {
        match &self.name {
            Some(name) => format!("subtest `{name}`"),
            None => format!("subtest at line {}", self.line),
        }
    }
}

#[derive(Debug)]
struct Node {
    /// None for a subtest whose parent never printed a result for it.
    result: Option<ResultLine>,
    line: usize,
    children: Option<Block>,
    log: Vec<String>,
}

struct Parser {
    lines: Vec<Line>,
    pos: usize,
    problems: Vec<Problem>,
}

impl Parser {
    fn problem(&mut self, line: usize, message: String) {
        self.problems.push(Problem { line, message });
    }

    /// Parses the lines at `indent` (and everything nested deeper) from the current position.
    /// For a document (`top`) the version line has already been consumed.
    fn block(&mut self, indent: usize, top: bool, first_line: usize) -> Block {
        let mut block = Block {
            name: None,
            line: first_line,
            plan: None,
            nodes: Vec::new(),
            end: End::Eof,
        };
        let mut results = 0usize;
        let mut seen_version = top;
        // Past the header: a version line at this level now starts something else.
        let mut started = false;
        let mut trailing_plan = false;
        // Where a document's `# NAME` line may appear.
        let mut name_window = top;
        // A finished subtest waiting for this level's result line for it.
        let mut pending: Option<Block> = None;
        // Old KUnit printed `# Subtest: NAME` at the parent's level, before the nested lines.
        let mut pending_name: Option<String> = None;
        let mut log = Vec::new();

        while let Some(line) = self.lines.get(self.pos) {
            let (no, line_indent) = (line.no, line.indent);
            if line_indent < indent {
                block.end = End::Dedent;
                break;
            }
            if line_indent > indent {
                if matches!(line.kind, Kind::Diag(_)) {
                    // Deeper chatter that opens nothing.
                    self.pos += 1;
                    continue;
                }
                started = true;
                name_window = false;
                if let Some(orphan) = pending.take() {
                    self.orphan(&mut block, orphan);
                }
                let mut child = self.block(line_indent, false, no);
                if child.name.is_none() {
                    child.name = pending_name.take();
                }
                pending = Some(child);
                continue;
            }
            match &line.kind {
                Kind::Version => {
                    if seen_version || started {
                        block.end = End::Header;
                        break;
                    }
                    seen_version = true;
                    self.pos += 1;
                }
                Kind::Subtest(name) => {
                    let name = name.clone();
                    self.pos += 1;
                    if !started && block.name.is_none() {
                        block.name = Some(name);
                        name_window = false;
                    } else {
                        pending_name = Some(name);
                    }
                }
                Kind::Plan(n) => {
                    let n = *n;
                    self.pos += 1;
                    if block.plan.is_some() {
                        self.problem(no, format!("second plan line `1..{n}`"));
                        continue;
                    }
                    block.plan = Some(n);
                    if results == 0 && pending.is_none() {
                        started = true;
                        if top && n == 0 {
                            block.end = End::Complete;
                            break;
                        }
                    } else {
                        trailing_plan = true;
                        if top {
                            block.end = End::TrailingPlan;
                            break;
                        }
                    }
                }
                Kind::Diag(text) => {
                    let text = text.clone();
                    self.pos += 1;
                    if name_window && DOC_NAME.is_match(&text) {
                        block.name = Some(text);
                        name_window = false;
                    } else {
                        log.push(text);
                    }
                }
                Kind::Result(r) => {
                    let r = r.clone();
                    self.pos += 1;
                    started = true;
                    name_window = false;
                    results += 1;
                    if r.number != results as u64 {
                        let at = if top {
                            String::new()
                        } else {
                            format!(" in {}", block.label())
                        };
                        self.problem(
                            no,
                            format!(
                                "result out of sequence{at}: expected number {results}, got `{}`",
                                r.text()
                            ),
                        );
                    }
                    pending_name = None;
                    block.nodes.push(Node {
                        result: Some(r),
                        line: no,
                        children: pending.take(),
                        log: std::mem::take(&mut log),
                    });
                    if top && !trailing_plan && block.plan == Some(results) {
                        block.end = End::Complete;
                        break;
                    }
                }
            }
        }
        if let Some(orphan) = pending.take() {
            self.orphan(&mut block, orphan);
        }
        self.check_plan(&block, results, top);
        block
    }

    /// Records a subtest that its parent never printed a result line for.
    fn orphan(&mut self, parent: &mut Block, child: Block) {
        self.problem(
            child.line,
            format!("{} has no result line (output truncated?)", child.label()),
        );
        parent.nodes.push(Node {
            result: None,
            line: child.line,
            children: Some(child),
            log: Vec::new(),
        });
    }

    fn check_plan(&mut self, block: &Block, results: usize, top: bool) {
        let line = block.nodes.last().map_or(block.line, |n| n.line);
        let what = if top {
            "document".to_owned()
        } else {
            block.label()
        };
        match block.plan {
            // KUnit's parameterised tests print no plan, so only a document must have one.
            None if top => self.problem(block.line, "missing plan line `1..N`".to_owned()),
            None => {}
            Some(n) if results < n => self.problem(
                line,
                format!(
                    "{what} planned {n} results but only {results} appeared (output truncated: \
                     guest crashed or hung?)"
                ),
            ),
            Some(n) if results > n => self.problem(
                line,
                format!("{what} has more results than planned ({n} planned, {results} seen)"),
            ),
            Some(_) => {}
        }
    }

    fn document(&mut self, line: usize, block: Block) -> Document {
        let mut problems = std::mem::take(&mut self.problems);
        let mut tests = Vec::new();
        let prefix = block.name.clone().unwrap_or_default();
        flatten(&block, &prefix, &mut tests, &mut problems);
        problems.sort_by_key(|p| p.line);
        Document {
            name: block.name,
            line,
            plan: block.plan,
            tests,
            problems,
        }
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}/{name}")
    }
}

/// Appends the block's counted tests to `out`; returns whether any test inside failed.
fn flatten(
    block: &Block,
    prefix: &str,
    out: &mut Vec<TestResult>,
    problems: &mut Vec<Problem>,
) -> bool {
    let mut failed = false;
    for node in &block.nodes {
        let name = match (&node.result, &node.children) {
            (Some(r), _) => r.name(),
            (None, Some(child)) => child
                .name
                .clone()
                .unwrap_or_else(|| format!("line {}", child.line)),
            (None, None) => continue,
        };
        let path = join(prefix, &name);
        let children = node.children.as_ref().filter(|c| !c.nodes.is_empty());
        match (&node.result, children) {
            (Some(r), None) => {
                let t = r.leaf(path, node.line, node.log.clone());
                failed |= t.status == Status::Fail;
                out.push(t);
            }
            (result, Some(child)) => {
                let child_failed = flatten(child, &path, out, problems);
                failed |= child_failed;
                let Some(r) = result else { continue };
                if r.status() == Status::Fail {
                    failed = true;
                    if !child_failed {
                        problems.push(Problem {
                            line: node.line,
                            message: format!(
                                "`{path}` is marked `not ok` but none of its subtests failed"
                            ),
                        });
                        let mut t = r.leaf(path, node.line, node.log.clone());
                        t.leaf = false;
                        out.push(t);
                    }
                }
            }
            (None, None) => {}
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(log: &str) -> Document {
        let docs = parse(log);
        assert_eq!(docs.len(), 1, "{docs:#?}");
        docs.into_iter().next().unwrap()
    }

    fn paths(doc: &Document, status: Status) -> Vec<&str> {
        doc.tests
            .iter()
            .filter(|t| t.status == status)
            .map(|t| t.path.as_str())
            .collect()
    }

    #[test]
    fn simple_passing_document() {
        let doc = one("KTAP version 1\n1..3\n# textpoke_selftest\nok 1 a\nok 2 - b\nok 3 c\n");
        assert_eq!(doc.name.as_deref(), Some("textpoke_selftest"));
        assert_eq!(doc.plan, Some(3));
        assert_eq!((doc.passed(), doc.failed(), doc.skipped()), (3, 0, 0));
        assert!(doc.problems.is_empty(), "{:?}", doc.problems);
        assert!(doc.is_ok());
        assert_eq!(
            paths(&doc, Status::Pass),
            [
                "textpoke_selftest/a",
                "textpoke_selftest/b",
                "textpoke_selftest/c"
            ]
        );
        assert_eq!(doc.tests[1].line, 5);
    }

    #[test]
    fn nested_failure_propagates_to_parents() {
        let log = "\
KTAP version 1
1..2
# textpoke_selftest
  KTAP version 1
  # Subtest: pending_table
  1..2
    KTAP version 1
    # Subtest: lookup
    1..2
    ok 1 hit
    not ok 2 miss
    # miss: expected None, got Some(3)
  not ok 1 lookup
  ok 2 insert
not ok 1 pending_table
  KTAP version 1
  # Subtest: engine
  1..1
  ok 1 poke
ok 2 engine
";
        let doc = one(log);
        assert_eq!(doc.name.as_deref(), Some("textpoke_selftest"));
        assert_eq!(
            paths(&doc, Status::Pass),
            [
                "textpoke_selftest/pending_table/lookup/hit",
                "textpoke_selftest/pending_table/insert",
                "textpoke_selftest/engine/poke"
            ]
        );
        assert_eq!(
            paths(&doc, Status::Fail),
            ["textpoke_selftest/pending_table/lookup/miss"]
        );
        // The parents failed because a child did: no extra failure, no problem.
        assert_eq!((doc.passed(), doc.failed(), doc.skipped()), (3, 1, 0));
        assert!(doc.problems.is_empty(), "{:?}", doc.problems);
        assert!(!doc.is_ok());
    }

    #[test]
    fn failing_child_fails_document_even_if_parent_says_ok() {
        let log = "\
KTAP version 1
1..1
    KTAP version 1
    # Subtest: suite
    1..2
    ok 1 a
    not ok 2 b
ok 1 suite
";
        let doc = one(log);
        assert_eq!(paths(&doc, Status::Fail), ["suite/b"]);
        assert!(!doc.is_ok());
    }

    #[test]
    fn parent_not_ok_with_passing_children_counts_once() {
        let log = "\
KTAP version 1
1..1
  # Subtest: suite
  1..2
  ok 1 a
  ok 2 b
not ok 1 suite
";
        let doc = one(log);
        assert_eq!((doc.passed(), doc.failed()), (2, 1));
        assert_eq!(paths(&doc, Status::Fail), ["suite"]);
        assert!(!doc.tests.iter().find(|t| t.path == "suite").unwrap().leaf);
        assert_eq!(doc.problems.len(), 1);
        assert!(doc.problems[0].message.contains("marked `not ok`"));
        assert_eq!(doc.problems[0].line, 7);
    }

    #[test]
    fn skip_with_ok_and_not_ok() {
        let log = "\
KTAP version 1
1..4
ok 1 runs
ok 2 needs_arm64 # SKIP not on x86_64
not ok 3 needs_kprobes # SKIP CONFIG_KPROBES=n
ok 4 # skip
";
        let doc = one(log);
        assert_eq!((doc.passed(), doc.failed(), doc.skipped()), (1, 0, 3));
        assert!(doc.is_ok());
        let t = &doc.tests[1];
        assert_eq!(t.path, "needs_arm64");
        assert_eq!(t.directive, Some(Directive::Skip));
        assert_eq!(t.diagnostic, "not on x86_64");
        assert!(!doc.tests[2].ok);
        assert_eq!(doc.tests[2].status, Status::Skip);
        assert_eq!(doc.tests[3].path, "#4");
    }

    #[test]
    fn other_directives() {
        let log = "\
KTAP version 1
1..6
not ok 1 known_bad # XFAIL bug 12
not ok 2 slow # TIMEOUT after 30s
not ok 3 broken # ERROR no memory
not ok 4 wip # TODO later
ok 5 wip2 # TODO later
ok 6 case#2 # not a directive
";
        let doc = one(log);
        let statuses: Vec<Status> = doc.tests.iter().map(|t| t.status).collect();
        use Status::*;
        assert_eq!(statuses, [Pass, Fail, Fail, Fail, Pass, Pass]);
        assert_eq!(doc.tests[1].directive, Some(Directive::Timeout));
        assert_eq!(doc.tests[1].diagnostic, "after 30s");
        assert_eq!(doc.tests[5].path, "case#2");
        assert_eq!(doc.tests[5].directive, None);
        assert_eq!(doc.tests[5].diagnostic, "not a directive");
    }

    #[test]
    fn unrelated_kernel_lines_are_ignored() {
        let log = "\
[    0.000000] Linux version 6.12.0 (root@host) #1 SMP PREEMPT_DYNAMIC
KTAP version 1
1..3
random: crng init done
ok 1 first
    okay, indented noise
okay 2 this is not a result
  not okay 2 nor is this
ok2 glued
    okay 7 deeper almost-result
      not ok-ish 8
        audit: type=2000 audit(0.5:1): state=initialized
ok 2 second
 tsc: Refined TSC clocksource calibration
not ok 3 third
  ok this has no number
";
        let doc = one(log);
        assert_eq!(paths(&doc, Status::Pass), ["first", "second"]);
        assert_eq!(paths(&doc, Status::Fail), ["third"]);
        assert!(doc.problems.is_empty(), "{:?}", doc.problems);
    }

    #[test]
    fn garbage_between_results_does_not_break_counting() {
        let log = "\
KTAP version 1
1..3
ok 1 a
okay
not okay
	random tab-indented line
NOT OK 2 shouting is not KTAP
  # Not a Subtest
ok 2 b
Okay, that's it
ok 3 c
ok 4 after the end is surplus
";
        let doc = one(log);
        assert_eq!(
            paths(&doc, Status::Pass),
            ["a", "b", "c", "after the end is surplus"]
        );
        assert_eq!(doc.problems.len(), 1);
        assert!(doc.problems[0]
            .message
            .contains("more results than planned"));
        assert_eq!(doc.problems[0].line, 12);
    }

    #[test]
    fn printk_timestamps_and_carriage_returns() {
        let log = "\
[    0.512000] Run /init as init process\r
[    1.000001] KTAP version 1\r
[    1.000002] 1..2\r
[    1.000003] # textpoke_agent\r
[    1.100000]     KTAP version 1\r
[    1.100001]     # Subtest: poke\r
[    1.100002]     1..1\r
[    1.100003]     ok 1 x86_int3\r
[    1.200000] ok 1 poke\r
[   12.345678][    T1] not ok 2 stress # TIMEOUT\r
";
        let doc = one(log);
        assert_eq!(doc.name.as_deref(), Some("textpoke_agent"));
        assert_eq!(paths(&doc, Status::Pass), ["textpoke_agent/poke/x86_int3"]);
        assert_eq!(paths(&doc, Status::Fail), ["textpoke_agent/stress"]);
        assert!(doc.problems.is_empty(), "{:?}", doc.problems);
        assert_eq!(strip_console_prefix("[    1.000002] 1..2\r"), "1..2");
        assert_eq!(strip_console_prefix("[1.5]ok 1 x"), "ok 1 x");
        assert_eq!(strip_console_prefix("[    1.5]   ok 1 x"), "  ok 1 x");
    }

    #[test]
    fn truncated_output_is_a_problem() {
        let log = "\
KTAP version 1
1..5
# textpoke_selftest
ok 1 a
ok 2 b
  KTAP version 1
  # Subtest: stress
  1..4
  ok 1 s1
[    9.000000] BUG: kernel NULL pointer dereference, address: 0000000000000000
";
        let doc = one(log);
        assert_eq!((doc.passed(), doc.failed()), (3, 0));
        assert!(!doc.is_ok());
        let messages: Vec<&str> = doc.problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert!(messages
            .iter()
            .any(|m| m.contains("`stress` planned 4 results but only 1")));
        assert!(messages
            .iter()
            .any(|m| m.contains("`stress` has no result line")));
        assert!(messages
            .iter()
            .any(|m| m.contains("document planned 5 results but only 2")));
        assert_eq!(
            paths(&doc, Status::Pass),
            [
                "textpoke_selftest/a",
                "textpoke_selftest/b",
                "textpoke_selftest/stress/s1"
            ]
        );
    }

    #[test]
    fn truncated_plain_document() {
        let doc = one("KTAP version 1\n1..5\nok 1 a\nok 2 b\nok 3 c\n");
        assert_eq!(doc.passed(), 3);
        assert_eq!(doc.problems.len(), 1);
        assert!(doc.problems[0]
            .message
            .contains("planned 5 results but only 3"));
        assert!(!doc.is_ok());
    }

    #[test]
    fn missing_plan() {
        let doc = one("KTAP version 1\n# textpoke_selftest\nok 1 a\nok 2 b\n");
        assert_eq!(doc.plan, None);
        assert_eq!(doc.passed(), 2);
        assert_eq!(doc.problems.len(), 1);
        assert!(doc.problems[0].message.contains("missing plan"));
        assert_eq!(doc.problems[0].line, 1);
        assert!(!doc.is_ok());
    }

    #[test]
    fn trailing_plan_is_accepted_and_checked() {
        let doc = one("TAP version 13\nok 1 a\nok 2 b\n1..2\nok 3 later noise\n");
        assert!(doc.is_ok(), "{:?}", doc.problems);
        assert_eq!(doc.passed(), 2);

        let doc = one("TAP version 14\nok 1 a\n1..2\n");
        assert_eq!(doc.problems.len(), 1);
        assert!(doc.problems[0]
            .message
            .contains("planned 2 results but only 1"));
    }

    #[test]
    fn two_documents_kernel_and_agent() {
        let log = "\
[    0.900000] KTAP version 1
[    0.900001] 1..1
[    0.900002]     KTAP version 1
[    0.900003]     # Subtest: static_keys
[    0.900004]     # module: test_static_keys
[    0.900005]     1..2
[    0.900006]     ok 1 toggle
[    0.900007]     ok 2 nested
[    0.900008] # static_keys: pass:2 fail:0 skip:0 total:2
[    0.900009] # Totals: pass:2 fail:0 skip:0 total:2
[    0.900010] ok 1 static_keys
[    1.000000] Freeing unused kernel image (initmem) memory: 2000K
[    1.500000] KTAP version 1
[    1.500001] 1..2
[    1.500002] # textpoke_agent
[    1.500003] ok 1 load_module
[    1.500004] not ok 2 poke_under_load
";
        let docs = parse(log);
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].name, None);
        assert_eq!(docs[0].line, 1);
        assert_eq!(
            paths(&docs[0], Status::Pass),
            ["static_keys/toggle", "static_keys/nested"]
        );
        assert!(docs[0].is_ok(), "{:?}", docs[0].problems);
        assert_eq!(docs[1].name.as_deref(), Some("textpoke_agent"));
        assert_eq!(docs[1].line, 13);
        assert_eq!(
            paths(&docs[1], Status::Fail),
            ["textpoke_agent/poke_under_load"]
        );
    }

    #[test]
    fn new_document_ends_an_unfinished_one() {
        let log = "KTAP version 1\n1..3\nok 1 a\nKTAP version 1\n1..1\nok 1 b\n";
        let docs = parse(log);
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].passed(), 1);
        assert!(!docs[0].is_ok());
        assert!(docs[0].problems[0].message.contains("only 1"));
        assert!(docs[1].is_ok());
    }

    #[test]
    fn duplicate_and_out_of_order_numbers() {
        // The third result is numbered 3 again, so only the duplicate is out of sequence.
        let doc = one("KTAP version 1\n1..3\nok 1 a\nok 1 a_again\nok 3 c\n");
        assert_eq!(doc.problems.len(), 1, "{:?}", doc.problems);
        assert!(doc.problems[0]
            .message
            .contains("out of sequence: expected number 2, got `ok 1 a_again`"));
        assert_eq!(doc.problems[0].line, 4);
        assert_eq!(doc.passed(), 3);
        assert!(!doc.is_ok());

        let doc = one("KTAP version 1\n1..3\nok 1 a\nok 2 b\nok 2 b_again\n");
        assert_eq!(doc.problems.len(), 1, "{:?}", doc.problems);
        assert!(doc.problems[0].message.contains("expected number 3"));

        let doc = one("KTAP version 1\n1..2\nok 2 b\nok 1 a\n");
        assert_eq!(doc.problems.len(), 2, "{:?}", doc.problems);

        let log = "\
KTAP version 1
1..1
  # Subtest: s
  1..2
  ok 2 x
  ok 1 y
ok 1 s
";
        let doc = one(log);
        assert_eq!(doc.problems.len(), 2, "{:?}", doc.problems);
        assert!(doc.problems[0].message.contains("in subtest `s`"));
    }

    #[test]
    fn nested_plan_mismatch() {
        let log = "\
KTAP version 1
1..2
  # Subtest: short
  1..3
  ok 1 a
ok 1 short
  # Subtest: long
  1..1
  ok 1 b
  ok 2 c
ok 2 long
";
        let doc = one(log);
        assert_eq!(doc.passed(), 3);
        let messages: Vec<&str> = doc.problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "subtest `short` planned 3 results but only 1 appeared (output truncated: \
                 guest crashed or hung?)",
                "subtest `long` has more results than planned (1 planned, 2 seen)"
            ]
        );
        assert_eq!((doc.problems[0].line, doc.problems[1].line), (5, 10));
    }

    #[test]
    fn no_ktap_at_all() {
        let log = "\
[    0.000000] Linux version 6.12.0
[    0.100000] Command line: console=ttyS0
[    0.200000] ok, booting the kernel.
[    0.300000] # not a document either
[    0.400000]   ok 1 indented result without a document
[    0.500000] ok 1 result without a document
";
        assert!(parse(log).is_empty());
        assert!(parse("").is_empty());
    }

    #[test]
    fn indented_version_line_does_not_start_a_document() {
        assert!(parse("  KTAP version 1\n  1..1\n  ok 1 a\n").is_empty());
    }

    #[test]
    fn kunit_parameterised_tests_without_plan() {
        let log = "\
KTAP version 1
1..1
    KTAP version 1
    # Subtest: example
    1..2
    ok 1 example_simple_test
        KTAP version 1
        # Subtest: example_params_test
        ok 1 example value 3 # SKIP unsupported
        ok 2 example value 2
    # example_params_test: pass:1 fail:0 skip:1 total:2
    ok 2 example_params_test
ok 1 example
";
        let doc = one(log);
        assert!(doc.is_ok(), "{:?}", doc.problems);
        assert_eq!((doc.passed(), doc.skipped()), (2, 1));
        assert_eq!(
            paths(&doc, Status::Skip),
            ["example/example_params_test/example value 3"]
        );
    }

    #[test]
    fn old_kunit_subtest_header_at_parent_level() {
        let log = "\
TAP version 14
1..1
\t# Subtest: suite
\t1..1
\t# Subtest: params
\t\tok 1 - p1
\t\tnot ok 2 - p2
\tnot ok 1 - params
not ok 1 - suite
";
        let doc = one(log);
        assert_eq!(paths(&doc, Status::Fail), ["suite/params/p2"]);
        assert!(doc.problems.is_empty(), "{:?}", doc.problems);
    }

    #[test]
    fn failure_details_are_kept() {
        let log = "\
KTAP version 1
1..2
ok 1 a
# b: EXPECTATION FAILED at tools/core/src/lib.rs:10
# b: left 1, right 2
not ok 2 b
";
        let doc = one(log);
        let b = &doc.tests[1];
        assert_eq!(b.status, Status::Fail);
        assert_eq!(
            b.log,
            [
                "b: EXPECTATION FAILED at tools/core/src/lib.rs:10",
                "b: left 1, right 2"
            ]
        );
    }

    #[test]
    fn empty_plan_document() {
        let doc = one("KTAP version 1\n1..0 # SKIP nothing to do\n");
        assert!(doc.is_ok());
        assert!(doc.tests.is_empty());
    }

    #[test]
    fn progress_helper() {
        assert!(is_result_line("[    1.0] ok 1 a\r"));
        assert!(is_result_line("    not ok 12 deep"));
        assert!(!is_result_line("okay 1"));
        assert!(!is_result_line("KTAP version 1"));
    }
}
