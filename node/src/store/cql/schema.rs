//! The CQL layout of a store keyspace: quoted names, the kinds of tables the store makes and
//! how to tell them apart from the schema, and the DDL that creates them.

use scylla::routing::partitioner::{Murmur3Partitioner, Partitioner};

use super::rows::invalid;
use super::typed::Layout;
use crate::store::{IndexKind, Rowid, StoreError, TableSpec};

/// Workflow records table.
pub(super) const META_TABLE: &str = "wf_meta";
/// Run id table.
pub(super) const COUNTER_TABLE: &str = "wf_run_ids";

/// The Murmur3 token Cassandra and ScyllaDB give the row with this rowid (a `bigint`
/// partition key); table-reader batches are ranges of these tokens.
pub fn rowid_token(rowid: Rowid) -> i64 {
    Murmur3Partitioner.hash_one(&rowid.to_be_bytes()).value()
}

/// A double-quoted CQL identifier; names are validated `[A-Za-z0-9_]`, so quoting keeps their
/// case (as the embedded store does) and can never be escaped out of.
pub(super) fn quoted(name: &str) -> String {
    format!("\"{name}\"")
}

pub(super) fn qualified(keyspace: &str, table: &str) -> String {
    format!("{}.{}", quoted(keyspace), quoted(table))
}

/// What a CQL table is, judged by its columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Data,
    Unique,
    NonUnique,
    /// A table with another layout (not made by this store).
    Foreign,
}

impl Kind {
    pub(super) fn describe(self) -> &'static str {
        match self {
            Self::Data => "data table",
            Self::Unique => "unique index",
            Self::NonUnique => "non-unique index",
            Self::Foreign => "table of another layout",
        }
    }

    pub(super) fn of_index(kind: IndexKind) -> Self {
        match kind {
            IndexKind::Unique => Self::Unique,
            IndexKind::NonUnique => Self::NonUnique,
        }
    }

    /// Classifies `(column name, kind, type)` rows of `system_schema.columns`.
    pub(super) fn classify(columns: &[(String, String, String)]) -> Option<Self> {
        if columns.is_empty() {
            return None;
        }
        let has = |name: &str, kind: &str| columns.iter().any(|(n, k, _)| n == name && k == kind);
        // Typed data tables have batch_idx and field columns; opaque ones a row blob.
        Some(
            if has("rowid", "partition_key")
                && (has("batch_idx", "regular") || has("row", "regular"))
            {
                Self::Data
            } else if has("key", "partition_key") && has("rowid", "regular") {
                Self::Unique
            } else if has("key", "partition_key") && has("rowid", "clustering") {
                Self::NonUnique
            } else {
                Self::Foreign
            },
        )
    }

    /// The DDL of an index table.
    pub(super) fn index_cql(kind: IndexKind, keyspace: &str, table: &str) -> String {
        let t = qualified(keyspace, table);
        match kind {
            IndexKind::Unique => {
                format!("CREATE TABLE IF NOT EXISTS {t} (key blob PRIMARY KEY, rowid bigint)")
            }
            IndexKind::NonUnique => format!(
                "CREATE TABLE IF NOT EXISTS {t} (key blob, rowid bigint, PRIMARY KEY ((key), rowid))"
            ),
        }
    }
}

/// The DDL of a spec's data table: `rowid`, `batch_idx` and one typed column per field (a
/// `row blob` for opaque rows), with the writer's table options.
pub(super) fn data_cql(keyspace: &str, spec: &TableSpec) -> String {
    let layout = Layout::of_fields(spec.fields.as_deref());
    let mut cql = format!(
        "CREATE TABLE IF NOT EXISTS {} (rowid bigint PRIMARY KEY, batch_idx int",
        qualified(keyspace, &spec.data.storage_name())
    );
    for def in layout.column_defs() {
        cql.push_str(", ");
        cql.push_str(&def);
    }
    cql.push(')');
    let options = spec.table_options.trim();
    if !options.is_empty() {
        cql.push_str(" WITH ");
        cql.push_str(options);
    }
    cql
}

/// Checks that a spec's fields can be typed columns: valid names, none named like a key
/// column, strictly ascending by name (the order reads rebuild rows in).
pub(super) fn validate_fields(spec: &TableSpec) -> Result<(), StoreError> {
    let Some(fields) = &spec.fields else {
        return Ok(());
    };
    for f in fields {
        let ok = !f.name.is_empty()
            && f.name.len() <= crate::store::MAX_TABLE_NAME_LEN
            && f.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok || f.name == "rowid" || f.name == "batch_idx" {
            return Err(invalid(format!(
                "table {}: field name {:?} cannot be a CQL column",
                spec.data, f.name
            )));
        }
    }
    if let Some(w) = fields.windows(2).find(|w| w[0].name >= w[1].name) {
        return Err(invalid(format!(
            "table {}: fields must be sorted by name and distinct ({} before {})",
            spec.data, w[0].name, w[1].name
        )));
    }
    Ok(())
}

/// The CQL that creates a keyspace with its workflow tables (`planner get-table-cql`, and what
/// [`CqlStore`](super::CqlStore) runs), for the given replication map text.
pub fn keyspace_cql(keyspace: &str, replication: &str) -> Vec<String> {
    vec![
        format!(
            "CREATE KEYSPACE IF NOT EXISTS {} WITH replication = {replication}",
            quoted(keyspace)
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (part int, key blob, value blob, PRIMARY KEY ((part), key))",
            qualified(keyspace, META_TABLE)
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (ks text, run_id int, claimer blob, \
             PRIMARY KEY ((ks), run_id)) WITH CLUSTERING ORDER BY (run_id DESC)",
            qualified(keyspace, COUNTER_TABLE)
        ),
    ]
}

/// The CQL that creates a node's data table and index tables for one run.
pub fn table_cql(keyspace: &str, spec: &TableSpec) -> Vec<String> {
    std::iter::once(data_cql(keyspace, spec))
        .chain(
            spec.indexes
                .iter()
                .map(|i| Kind::index_cql(i.kind, keyspace, &i.table.storage_name())),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_schema_columns() {
        let cols = |c: &[(&str, &str)]| -> Vec<(String, String, String)> {
            c.iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned(), "blob".to_owned()))
                .collect()
        };
        assert_eq!(Kind::classify(&[]), None);
        assert_eq!(
            Kind::classify(&cols(&[
                ("rowid", "partition_key"),
                ("batch_idx", "regular"),
                ("row", "regular")
            ])),
            Some(Kind::Data)
        );
        assert_eq!(
            Kind::classify(&cols(&[("key", "partition_key"), ("rowid", "regular")])),
            Some(Kind::Unique)
        );
        assert_eq!(
            Kind::classify(&cols(&[("key", "partition_key"), ("rowid", "clustering")])),
            Some(Kind::NonUnique)
        );
        assert_eq!(
            Kind::classify(&cols(&[("a", "partition_key")])),
            Some(Kind::Foreign)
        );
    }

    #[test]
    fn tokens_are_murmur3_and_never_min() {
        // Different rowids spread over the ring (a sanity check, not a known-answer test:
        // the driver's partitioner is what the cluster uses for routing).
        let tokens: Vec<i64> = (0..1000).map(rowid_token).collect();
        assert!(tokens.iter().any(|t| *t < 0) && tokens.iter().any(|t| *t > 0));
        assert!(tokens.iter().all(|t| *t != i64::MIN));
        assert_eq!(rowid_token(42), rowid_token(42));
    }
}
