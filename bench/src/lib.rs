//! Plexus benchmarks: the data generators of the Capillaries bigtests (`gen`).
//!
//! This crate sits on top of the workspace and nothing depends on it. Generators must stay
//! deterministic for a seed and stream their output: never hold all rows in memory.

// `gen` is reserved in edition 2024, hence the raw identifier (the directory stays `gen/`).
pub mod r#gen;
pub mod run;
pub mod sim;
