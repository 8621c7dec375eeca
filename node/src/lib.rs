//! plexus-node: the peer daemon library.
//!
//! It will hold everything a Plexus peer runs: the storage backends, the processors
//! (executors), the scheduler and work stealing, the QUIC transport and telemetry (see
//! DESIGN.md). So far: [`store`] (the [`store::Store`] trait with its embedded fjall backend
//! and the backend-independent conformance suite), [`files`] (CSV and Parquet sources and
//! sinks), [`pycalc`] (the py_calc Python worker pool) and [`exec`] (executing one batch of a
//! script node).
//!
//! This crate is the only one that does I/O; it must never push I/O down into `plexus-core`.

pub mod exec;
pub mod files;
pub mod pycalc;
pub mod store;
