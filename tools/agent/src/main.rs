//! Guest agent (work in progress: see tools/agent in the next commits).
fn main() {}
