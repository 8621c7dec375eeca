//! An in-process CQL server ("wire double") speaking native protocol v4, faithful enough
//! for the unmodified scylla driver: connect, discover the single node, read schema
//! metadata, prepare/execute, page, batch, and see realistic errors on demand.
//!
//! Layout: `frame` (header and body primitives), `types` (CQL types and values),
//! `parser` (the statement subset), `store` (ring-ordered in-memory tables),
//! `system` (virtual system tables), `exec` (planning and execution), `faults`
//! (fault injection and counters), `server` (sockets and the [`CqlDouble`] handle);
//! [`adapter`] is not part of the double: it puts a real v3-only Cassandra (2.1) behind v4.

pub mod adapter;
mod exec;
mod faults;
mod frame;
pub mod murmur3;
mod parser;
mod server;
mod store;
mod system;
mod types;

pub use faults::{FaultKind, Faults, RequestKind, StatementKind, Stats, Target};
pub use frame::FrameError;
pub use server::{CqlDouble, CqlDoubleError};
pub use types::CqlType;
