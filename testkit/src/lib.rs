//! Test-only helpers shared by Plexus crates; never a product feature, never a dependency
//! of a shipped binary (only `[dev-dependencies]`).
//!
//! [`cql`] is the CQL wire double: an in-process server speaking CQL native protocol v4
//! that the unmodified scylla driver connects to, so the CQL storage backend can be tested
//! without Cassandra (see DESIGN.md "Testing CQL without a real server").
//!
//! [`remote`] starts real file servers on loopback (moto's S3, OpenSSH's sftp, an HTTP(S)
//! file server with connection drops on demand) for the remote-file tests.
//!
//! [`otlp`] is an in-process OTLP/gRPC trace receiver (what Jaeger accepts) for span tests.
//!
//! [`seed`] gives randomised tests a printed, replayable seed.
//!
//! [`usage`] reads this process's CPU seconds and peak memory for benchmarks.
//!
//! [`conformance`] finds Capillaries' integration data (ours or a Capillaries checkout) for
//! every test that reads it, and reports the tests it skips when there is none.
//!
//! ```no_run
//! use plexus_testkit::cql::{CqlDouble, FaultKind, StatementKind};
//!
//! let double = CqlDouble::start().expect("double starts");
//! let contact_point = double.addr(); // give this to scylla's SessionBuilder
//! double.faults().fail_writes("ks.data_00001", 10); // every 10th write times out
//! double.faults().fail_next(1, FaultKind::Unavailable);
//! // … run the code under test …
//! assert_eq!(double.stats().statements(StatementKind::SelectIn), 0);
//! # let _ = contact_point;
//! ```
pub mod conformance;
pub mod cql;
pub mod otlp;
pub mod remote;
pub mod seed;
pub mod usage;
