//! In-memory keyspaces and tables, laid out like Cassandra orders them: partitions by
//! (Murmur3 token, serialized key), rows inside a partition by clustering key.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::Instant;

use super::murmur3;
use super::types::CqlType;

/// Role of a column in the primary key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ColumnKind {
    /// Part of the partition key.
    PartitionKey,
    /// Clustering column.
    Clustering,
    /// Regular column.
    Regular,
}

impl ColumnKind {
    /// Name used in `system_schema.columns.kind`.
    pub(crate) fn schema_name(self) -> &'static str {
        match self {
            Self::PartitionKey => "partition_key",
            Self::Clustering => "clustering",
            Self::Regular => "regular",
        }
    }
}

/// A column definition.
#[derive(Debug, Clone)]
pub(crate) struct Column {
    /// Name.
    pub(crate) name: String,
    /// Type.
    pub(crate) ty: CqlType,
    /// Role in the key.
    pub(crate) kind: ColumnKind,
    /// Position within the partition or clustering key; -1 for regular columns.
    pub(crate) position: i32,
    /// Clustering order `DESC`.
    pub(crate) desc: bool,
}

/// Where a partition sits on the ring; ordering is Cassandra's partition order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct PartitionKey {
    /// Murmur3 token of `key`.
    pub(crate) token: i64,
    /// Serialized partition key.
    pub(crate) key: Vec<u8>,
}

impl PartitionKey {
    /// Builds the key from the serialized partition key components.
    pub(crate) fn from_components(parts: &[&[u8]]) -> Self {
        let key = murmur3::partition_key_bytes(parts);
        Self {
            token: murmur3::token(&key),
            key,
        }
    }
}

/// One stored row: every column's cell, key columns included.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// Cell values in the table's column order; key cells are always present.
    pub(crate) cells: Vec<Option<Vec<u8>>>,
    /// Per-cell expiry from `USING TTL`.
    pub(crate) cell_expiry: Vec<Option<Instant>>,
    /// Expiry of the row marker written by `INSERT`.
    pub(crate) marker_expiry: Option<Instant>,
}

/// A position in scan order: the last row a page returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Position {
    /// Partition.
    pub(crate) partition: PartitionKey,
    /// Order-preserving encoded clustering key.
    pub(crate) clustering: Vec<u8>,
}

/// Which partitions a scan visits.
#[derive(Debug, Clone)]
pub(crate) enum PartitionSel {
    /// Every partition whose token is within the bounds.
    Tokens(Bound<i64>, Bound<i64>),
    /// These partitions (sorted, deduplicated).
    Keys(Vec<PartitionKey>),
}

/// A table with its data.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    /// Keyspace name.
    pub(crate) keyspace: String,
    /// Table name.
    pub(crate) name: String,
    /// Table id (a UUID).
    pub(crate) id: [u8; 16],
    /// Columns: partition key, clustering columns, then regular columns by name (the order
    /// of `SELECT *` in Cassandra).
    pub(crate) columns: Vec<Column>,
    /// Number of partition key columns.
    pub(crate) n_pk: usize,
    /// Number of clustering columns.
    pub(crate) n_ck: usize,
    /// Data.
    pub(crate) partitions: BTreeMap<PartitionKey, BTreeMap<Vec<u8>, Row>>,
}

impl Table {
    /// Creates an empty table; `pk` and `ck` name key columns in key order.
    pub(crate) fn new(
        keyspace: &str,
        name: &str,
        id: [u8; 16],
        defs: &[(String, CqlType)],
        pk: &[String],
        ck: &[String],
        desc: &[String],
    ) -> Result<Self, String> {
        let find = |n: &String| {
            defs.iter()
                .find(|(c, _)| c == n)
                .ok_or_else(|| format!("Unknown definition {n} referenced in PRIMARY KEY"))
        };
        let mut columns = Vec::new();
        for (i, n) in pk.iter().enumerate() {
            let (_, ty) = find(n)?;
            columns.push(Column {
                name: n.clone(),
                ty: ty.clone(),
                kind: ColumnKind::PartitionKey,
                position: i as i32,
                desc: false,
            });
        }
        for (i, n) in ck.iter().enumerate() {
            let (_, ty) = find(n)?;
            if !ty.orderable() {
                return Err(format!(
                    "clustering column {n} of type {} is not supported by the CQL double",
                    ty.cql_name()
                ));
            }
            columns.push(Column {
                name: n.clone(),
                ty: ty.clone(),
                kind: ColumnKind::Clustering,
                position: i as i32,
                desc: desc.contains(n),
            });
        }
        if let Some(d) = desc.iter().find(|d| !ck.contains(d)) {
            return Err(format!(
                "Only clustering key columns can be defined in CLUSTERING ORDER directive: {d}"
            ));
        }
        let mut regular: Vec<_> = defs
            .iter()
            .filter(|(n, _)| !pk.contains(n) && !ck.contains(n))
            .collect();
        regular.sort_by(|a, b| a.0.cmp(&b.0));
        for (n, ty) in regular {
            columns.push(Column {
                name: n.clone(),
                ty: ty.clone(),
                kind: ColumnKind::Regular,
                position: -1,
                desc: false,
            });
        }
        let mut seen = std::collections::HashSet::new();
        for (n, _) in defs {
            if !seen.insert(n) {
                return Err(format!("Multiple definition of identifier {n}"));
            }
        }
        for k in pk.iter().chain(ck) {
            if pk.iter().chain(ck).filter(|x| *x == k).count() > 1 {
                return Err(format!("Multiple definition of identifier {k}"));
            }
        }
        Ok(Self {
            keyspace: keyspace.to_string(),
            name: name.to_string(),
            id,
            columns,
            n_pk: pk.len(),
            n_ck: ck.len(),
            partitions: BTreeMap::new(),
        })
    }

    /// Index of a column by name.
    pub(crate) fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// Number of key (partition and clustering) columns.
    pub(crate) fn n_key(&self) -> usize {
        self.n_pk + self.n_ck
    }

    /// Partition of a row given its cells (key cells must be present).
    pub(crate) fn partition_of(&self, cells: &[Option<Vec<u8>>]) -> PartitionKey {
        let parts: Vec<&[u8]> = cells[..self.n_pk]
            .iter()
            .map(|c| c.as_deref().unwrap_or(&[]))
            .collect();
        PartitionKey::from_components(&parts)
    }

    /// Encoded clustering key of a row, or of a clustering prefix.
    pub(crate) fn clustering_of(&self, ck_cells: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, v) in ck_cells.iter().enumerate() {
            let col = &self.columns[self.n_pk + i];
            col.ty.encode_ordered(v, col.desc, &mut out);
        }
        out
    }

    /// Returns the live cells of a row (expired cells as null), or `None` if the row is dead.
    pub(crate) fn live_cells(&self, row: &Row, now: Instant) -> Option<Vec<Option<Vec<u8>>>> {
        let alive = |e: &Option<Instant>| e.is_none_or(|e| e > now);
        let mut any_live_regular = false;
        let cells: Vec<_> = row
            .cells
            .iter()
            .zip(&row.cell_expiry)
            .enumerate()
            .map(|(i, (c, e))| {
                if i < self.n_key() {
                    c.clone()
                } else if c.is_some() && alive(e) {
                    any_live_regular = true;
                    c.clone()
                } else {
                    None
                }
            })
            .collect();
        // A row exists while its INSERT marker or any regular cell is live (Cassandra's
        // liveness rule).
        let marker_live = row.marker_expiry.is_none_or(|e| e > now);
        (marker_live || any_live_regular).then_some(cells)
    }

    /// Reads one live row.
    pub(crate) fn get(
        &self,
        pk: &PartitionKey,
        ck: &[u8],
        now: Instant,
    ) -> Option<Vec<Option<Vec<u8>>>> {
        let row = self.partitions.get(pk)?.get(ck)?;
        self.live_cells(row, now)
    }

    /// Writes the given cells (by column index) into a row, creating it (INSERT semantics:
    /// the row marker is refreshed, unlisted columns keep their values).
    pub(crate) fn upsert(&mut self, cells: Vec<(usize, Option<Vec<u8>>)>, expiry: Option<Instant>) {
        let n = self.columns.len();
        let mut full: Vec<Option<Vec<u8>>> = vec![None; n];
        for (i, v) in &cells {
            full[*i] = v.clone();
        }
        let pk = self.partition_of(&full);
        let ck_cells: Vec<&[u8]> = full[self.n_pk..self.n_key()]
            .iter()
            .map(|c| c.as_deref().unwrap_or(&[]))
            .collect();
        let ck = self.clustering_of(&ck_cells);
        let n_key = self.n_key();
        let partition = self.partitions.entry(pk).or_default();
        // Cells of an expired row read as null already, so merging into it is safe.
        let row = partition.entry(ck).or_insert_with(|| Row {
            cells: vec![None; n],
            cell_expiry: vec![None; n],
            marker_expiry: None,
        });
        for (i, v) in cells {
            if i < n_key {
                row.cells[i] = v;
                continue;
            }
            row.cells[i] = v;
            row.cell_expiry[i] = expiry;
        }
        row.marker_expiry = expiry;
    }

    /// Deletes rows of a partition whose clustering key starts with `ck_prefix` (the whole
    /// partition for an empty prefix).
    pub(crate) fn delete(&mut self, pk: &PartitionKey, ck_prefix: &[u8]) {
        let Some(part) = self.partitions.get_mut(pk) else {
            return;
        };
        part.retain(|ck, _| !ck.starts_with(ck_prefix));
        if part.is_empty() {
            self.partitions.remove(pk);
        }
    }

    /// Visits live rows in scan order after `after`, until `visit` returns false.
    pub(crate) fn scan(
        &self,
        sel: &PartitionSel,
        after: Option<&Position>,
        now: Instant,
        mut visit: impl FnMut(Position, Vec<Option<Vec<u8>>>) -> bool,
    ) {
        let mut visit_partition = |pk: &PartitionKey, rows: &BTreeMap<Vec<u8>, Row>| -> bool {
            let start = match after {
                Some(p) if p.partition == *pk => Bound::Excluded(p.clustering.clone()),
                _ => Bound::Unbounded,
            };
            for (ck, row) in rows.range((start, Bound::Unbounded)) {
                if let Some(cells) = self.live_cells(row, now) {
                    let pos = Position {
                        partition: pk.clone(),
                        clustering: ck.clone(),
                    };
                    if !visit(pos, cells) {
                        return false;
                    }
                }
            }
            true
        };
        match sel {
            PartitionSel::Tokens(lo, hi) => {
                let start = match (after, lo) {
                    (Some(p), _) => Bound::Included(p.partition.clone()),
                    (None, Bound::Included(t)) => Bound::Included(PartitionKey {
                        token: *t,
                        key: Vec::new(),
                    }),
                    (None, Bound::Excluded(t)) => match t.checked_add(1) {
                        Some(t) => Bound::Included(PartitionKey {
                            token: t,
                            key: Vec::new(),
                        }),
                        None => return,
                    },
                    (None, Bound::Unbounded) => Bound::Unbounded,
                };
                for (pk, rows) in self.partitions.range((start, Bound::Unbounded)) {
                    let below_lo = match lo {
                        Bound::Included(t) => pk.token < *t,
                        Bound::Excluded(t) => pk.token <= *t,
                        Bound::Unbounded => false,
                    };
                    if below_lo {
                        continue;
                    }
                    let past_hi = match hi {
                        Bound::Included(t) => pk.token > *t,
                        Bound::Excluded(t) => pk.token >= *t,
                        Bound::Unbounded => false,
                    };
                    if past_hi {
                        return;
                    }
                    if !visit_partition(pk, rows) {
                        return;
                    }
                }
            }
            PartitionSel::Keys(keys) => {
                for pk in keys {
                    if after.is_some_and(|p| *pk < p.partition) {
                        continue;
                    }
                    if let Some(rows) = self.partitions.get(pk)
                        && !visit_partition(pk, rows)
                    {
                        return;
                    }
                }
            }
        }
    }
}

/// A keyspace and its tables.
#[derive(Debug, Clone)]
pub(crate) struct Keyspace {
    /// Name.
    pub(crate) name: String,
    /// `replication` map as stored by Cassandra (class fully qualified).
    pub(crate) replication: Vec<(String, String)>,
    /// `durable_writes`.
    pub(crate) durable_writes: bool,
    /// Tables by name.
    pub(crate) tables: BTreeMap<String, Table>,
}

/// All user keyspaces plus the schema version.
#[derive(Debug)]
pub(crate) struct Store {
    /// Keyspaces by name.
    pub(crate) keyspaces: BTreeMap<String, Keyspace>,
    /// Current schema version (a UUID changed by every DDL).
    pub(crate) schema_version: [u8; 16],
    /// Source of fresh UUIDs.
    uuid_counter: u64,
    /// Per-instance salt so two doubles do not hand out the same ids.
    salt: u64,
}

impl Store {
    /// An empty store.
    pub(crate) fn new(salt: u64) -> Self {
        let mut s = Self {
            keyspaces: BTreeMap::new(),
            schema_version: [0; 16],
            uuid_counter: 0,
            salt,
        };
        s.schema_version = s.fresh_uuid();
        s
    }

    /// A new random-looking version-4 UUID.
    pub(crate) fn fresh_uuid(&mut self) -> [u8; 16] {
        self.uuid_counter += 1;
        let mut seed = self.salt.to_be_bytes().to_vec();
        seed.extend_from_slice(&self.uuid_counter.to_be_bytes());
        let (a, b) = murmur3::hash3_x64_128(&seed);
        let mut u = [0u8; 16];
        u[..8].copy_from_slice(&a.to_be_bytes());
        u[8..].copy_from_slice(&b.to_be_bytes());
        u[6] = (u[6] & 0x0F) | 0x40;
        u[8] = (u[8] & 0x3F) | 0x80;
        u
    }

    /// Records a schema change.
    pub(crate) fn bump_schema(&mut self) {
        self.schema_version = self.fresh_uuid();
    }

    /// Looks up a table.
    pub(crate) fn table(&self, ks: &str, name: &str) -> Option<&Table> {
        self.keyspaces.get(ks)?.tables.get(name)
    }

    /// Looks up a table mutably.
    pub(crate) fn table_mut(&mut self, ks: &str, name: &str) -> Option<&mut Table> {
        self.keyspaces.get_mut(ks)?.tables.get_mut(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        Table::new(
            "ks",
            "t",
            [0; 16],
            &[
                ("v".into(), CqlType::Text),
                ("k".into(), CqlType::Bigint),
                ("c".into(), CqlType::Int),
            ],
            &["k".into()],
            &["c".into()],
            &[],
        )
        .unwrap()
    }

    #[test]
    fn canonical_column_order() {
        let t = table();
        let names: Vec<_> = t.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["k", "c", "v"]);
    }

    #[test]
    fn scan_in_token_then_clustering_order() {
        let mut t = table();
        let now = Instant::now();
        for k in 0..5i64 {
            for c in [3i32, -1, 2] {
                t.upsert(
                    vec![
                        (0, Some(k.to_be_bytes().to_vec())),
                        (1, Some(c.to_be_bytes().to_vec())),
                        (2, Some(b"x".to_vec())),
                    ],
                    None,
                );
            }
        }
        let mut seen = Vec::new();
        t.scan(
            &PartitionSel::Tokens(Bound::Unbounded, Bound::Unbounded),
            None,
            now,
            |p, _| {
                seen.push(p);
                true
            },
        );
        assert_eq!(seen.len(), 15);
        assert!(
            seen.windows(2)
                .all(|w| (&w[0].partition, &w[0].clustering) < (&w[1].partition, &w[1].clustering))
        );
        // Resuming after the 7th row yields exactly the rest.
        let mut rest = 0;
        t.scan(
            &PartitionSel::Tokens(Bound::Unbounded, Bound::Unbounded),
            Some(&seen[6]),
            now,
            |_, _| {
                rest += 1;
                true
            },
        );
        assert_eq!(rest, 8);
    }
}
