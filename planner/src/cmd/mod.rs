//! The `planner` binary's modules beside its thin `main.rs` (the clap command tree and the
//! dispatch stay there): shared arguments, the local run, and the reports several commands print.

pub(crate) mod args;
pub(crate) mod local_run;
pub(crate) mod report;

pub(crate) use args::*;
pub(crate) use local_run::*;
pub(crate) use report::*;
