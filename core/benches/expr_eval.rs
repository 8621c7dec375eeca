//! Expression evaluation benchmark (filled in with the evaluator).
fn main() {}
