//! xtask: filled in by the next commits.
fn main() {}
