//! plexus-node: the peer daemon library.
//!
//! It holds everything a Plexus peer runs: the storage backends ([`store`]), the file formats
//! ([`files`]), the py_calc Python worker pool ([`pycalc`]) and, as they arrive, the
//! processors, the scheduler and work stealing, the QUIC transport and telemetry (see
//! DESIGN.md).
//!
//! This crate is the only one that does I/O; it must never push I/O down into `plexus-core`.

pub mod files;
pub mod pycalc;
pub mod store;
