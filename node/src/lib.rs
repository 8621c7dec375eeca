//! plexus-node: the peer daemon library.
//!
//! It holds everything a Plexus peer runs: the storage backends ([`store`]: the
//! [`store::Store`] trait, its embedded fjall backend and the backend-independent conformance
//! suite), the file formats ([`files`]: CSV and Parquet sources and sinks), the py_calc Python
//! worker pool ([`pycalc`]), batch execution ([`exec`]: one batch of one script node) and the
//! in-process [`local_run`] that drives the ledger with executor threads, and the QUIC
//! [`transport`] (mutual TLS under the cluster CA, framing, certificate generation). The
//! scheduler and work stealing and telemetry come next (see DESIGN.md).
//!
//! This crate is the only one that does I/O; it must never push I/O down into `plexus-core`.

pub mod clock;
pub mod cluster;
pub mod config;
pub mod console;
pub mod daemon;
pub mod exec;
pub mod files;
pub mod fsmode;
pub mod ledger_client;
pub mod local_run;
pub mod metrics;
pub mod pycalc;
pub mod remote;
pub mod run_progress;
pub mod schedule;
pub mod script_files;
pub mod seal;
pub mod start_run;
pub mod store;
pub mod tables;
pub mod telemetry;
pub mod transport;
pub mod worker;

/// mimalloc instead of glibc's malloc, for every binary that runs the engine (the peer, the
/// planner, the toolbelt, the benchmark harness and the tests, which all link this crate, so
/// it is declared once here): executor threads allocate and free row buffers, pages and
/// arenas at a high rate, and the 10 M-row lookup benchmark spends 6 % less CPU under it
/// (bench/RESULTS.md, thirteenth session).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
