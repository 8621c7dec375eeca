//! The Cassandra/ScyllaDB backend of [`Store`](crate::store::Store), through the `scylla` driver.
//!
//! Layout (Capillaries §9.1), one CQL keyspace per store keyspace:
//! - data tables `<table>_<run %05d>`: `rowid bigint PRIMARY KEY, batch_idx int` and one
//!   typed column per field, named as the field (quoted) and typed as in Capillaries §4.1
//!   (text, bigint, double, boolean, timestamp, decimal), with the writer's `table_options`.
//!   Rows still cross the trait encoded ([`plexus_core::row::encode_row`]): writes decode them
//!   and bind typed values, reads re-encode the typed columns, in the field order of the plan
//!   (sorted by name, which is how reads order the columns from the schema). Specs without
//!   fields (tools, the store suite) get a `row blob` column holding the bytes as they are.
//! - unique indexes `<index>_<run>`: `key blob PRIMARY KEY, rowid bigint`, claimed with
//!   `INSERT … IF NOT EXISTS` (a lightweight transaction).
//! - non-unique indexes `<index>_<run>`: `key blob, rowid bigint, PRIMARY KEY ((key), rowid)`.
//! - `wf_meta (part int, key blob, value blob, PRIMARY KEY ((part), key))`: workflow records
//!   in one partition (`part` = 0), keys prefixed with 0x01 (CQL refuses empty clustering
//!   keys in some versions, and callers may use the empty key) so prefix scans are ranges.
//! - `wf_run_ids (ks text, run_id int, claimer blob, PRIMARY KEY ((ks), run_id))`, newest
//!   first: run ids, each claimed with `INSERT … IF NOT EXISTS` after reading the highest,
//!   so allocation is atomic across processes (Capillaries' single-row `wf_run_counter`
//!   would need `UPDATE … IF`; one row per run keeps to the one LWT form the store uses).
//!
//! Every statement is prepared once per store and table and cached; a table's kind (data,
//! unique, non-unique) is read from `system_schema.columns` once, when its first statement is
//! prepared, with a data table's payload layout (its columns and their types). The trait is
//! synchronous: the store owns a tokio runtime and blocks on it per
//! call, and fans each call out into concurrent single-row statements bounded by the
//! configured concurrency (lookups are never `IN` queries). Transient failures (timeouts,
//! unavailable, overloaded) are retried with exponential backoff, see [`retry`].
//!
//! Table-reader batches are ranges of `token(rowid)`, split with the formula of
//! [`RowidRange::for_batch`](crate::store::RowidRange::for_batch) applied to Murmur3 tokens;
//! see [`CqlStore::scan_batch`].

mod catalog;
mod config;
#[cfg(test)]
mod double_tests;
mod meta;
mod read;
mod retry;
mod rows;
mod schema;
mod session;
mod stmt;
mod store_impl;
mod tls;
mod typed;
mod write;

pub use config::{CqlConfig, CqlConsistency, CqlTls, Replication};
#[cfg(test)]
use rows::decode;
pub use schema::{keyspace_cql, rowid_token, table_cql};
pub use session::CqlStore;
