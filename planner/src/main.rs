//! The `planner` command-line tool.
fn main() {}
