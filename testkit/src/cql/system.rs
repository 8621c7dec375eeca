//! Virtual system tables (`system.local`, `system.peers*`, `system_schema.*`), materialized
//! from the store on every read so they always reflect the current schema.

use std::net::IpAddr;

use super::store::{ColumnKind, Store, Table};
use super::types::{CqlType, inet_bytes, text_collection, text_map};

/// Cluster name reported in `system.local`.
pub(crate) const CLUSTER_NAME: &str = "plexus-cql-double";
/// The single token the node owns; one token means it owns the whole ring.
pub(crate) const NODE_TOKEN: &str = "0";

/// Facts about the node that system tables report.
pub(crate) struct NodeInfo {
    /// Host id (a UUID).
    pub(crate) host_id: [u8; 16],
    /// Address the client connected to; reported as rpc/broadcast/listen address so the
    /// driver maps the node to the contact point.
    pub(crate) local_ip: IpAddr,
    /// Port the double listens on.
    pub(crate) port: u16,
}

/// Whether `ks` is one of the system keyspaces the double owns.
pub(crate) fn is_system_keyspace(ks: &str) -> bool {
    matches!(
        ks,
        "system" | "system_schema" | "system_auth" | "system_distributed" | "system_traces"
    )
}

fn t(s: &str) -> CqlType {
    match s {
        "text" => CqlType::Text,
        "int" => CqlType::Int,
        "uuid" => CqlType::Uuid,
        "inet" => CqlType::Inet,
        "boolean" => CqlType::Boolean,
        "double" => CqlType::Double,
        "blob" => CqlType::Blob,
        "timestamp" => CqlType::Timestamp,
        "set<text>" => CqlType::Set(Box::new(CqlType::Text)),
        "list<text>" => CqlType::List(Box::new(CqlType::Text)),
        _ => CqlType::Map(Box::new(CqlType::Text), Box::new(CqlType::Text)),
    }
}

fn make(ks: &str, name: &str, cols: &[(&str, &str)], pk: &[&str], ck: &[&str]) -> Table {
    let defs: Vec<(String, CqlType)> = cols.iter().map(|(n, ty)| (n.to_string(), t(ty))).collect();
    let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // The definitions above are static and consistent, so construction cannot fail; an
    // empty fallback keeps this path free of panics anyway.
    Table::new(ks, name, [0; 16], &defs, &own(pk), &own(ck), &[]).unwrap_or_else(|_| Table {
        keyspace: ks.into(),
        name: name.into(),
        id: [0; 16],
        columns: Vec::new(),
        n_pk: 0,
        n_ck: 0,
        partitions: Default::default(),
    })
}

fn put(table: &mut Table, cells: &[(&str, Option<Vec<u8>>)]) {
    let cells = cells
        .iter()
        .filter_map(|(n, v)| table.column_index(n).map(|i| (i, v.clone())))
        .collect();
    table.upsert(cells, None);
}

fn s(v: &str) -> Option<Vec<u8>> {
    Some(v.as_bytes().to_vec())
}

/// Builds a system table, or `None` if the double does not know it.
pub(crate) fn system_table(store: &Store, node: &NodeInfo, ks: &str, name: &str) -> Option<Table> {
    let ip = Some(inet_bytes(node.local_ip));
    let port = Some(i32::from(node.port).to_be_bytes().to_vec());
    let version = Some(store.schema_version.to_vec());
    let host_id = Some(node.host_id.to_vec());
    let table = match (ks, name) {
        ("system", "local") => {
            let mut tb = make(
                ks,
                name,
                &[
                    ("key", "text"),
                    ("bootstrapped", "text"),
                    ("broadcast_address", "inet"),
                    ("broadcast_port", "int"),
                    ("cluster_name", "text"),
                    ("cql_version", "text"),
                    ("data_center", "text"),
                    ("host_id", "uuid"),
                    ("listen_address", "inet"),
                    ("listen_port", "int"),
                    ("native_protocol_version", "text"),
                    ("partitioner", "text"),
                    ("rack", "text"),
                    ("release_version", "text"),
                    ("rpc_address", "inet"),
                    ("rpc_port", "int"),
                    ("schema_version", "uuid"),
                    ("tokens", "set<text>"),
                ],
                &["key"],
                &[],
            );
            put(
                &mut tb,
                &[
                    ("key", s("local")),
                    ("bootstrapped", s("COMPLETED")),
                    ("broadcast_address", ip.clone()),
                    ("broadcast_port", port.clone()),
                    ("cluster_name", s(CLUSTER_NAME)),
                    ("cql_version", s("3.4.5")),
                    ("data_center", s("datacenter1")),
                    ("host_id", host_id),
                    ("listen_address", ip.clone()),
                    ("listen_port", port.clone()),
                    ("native_protocol_version", s("4")),
                    (
                        "partitioner",
                        s("org.apache.cassandra.dht.Murmur3Partitioner"),
                    ),
                    ("rack", s("rack1")),
                    ("release_version", s("4.0.0")),
                    ("rpc_address", ip),
                    ("rpc_port", port),
                    ("schema_version", version),
                    ("tokens", Some(text_collection(&[NODE_TOKEN]))),
                ],
            );
            tb
        }
        ("system", "peers") => make(
            ks,
            name,
            &[
                ("peer", "inet"),
                ("data_center", "text"),
                ("host_id", "uuid"),
                ("preferred_ip", "inet"),
                ("rack", "text"),
                ("release_version", "text"),
                ("rpc_address", "inet"),
                ("schema_version", "uuid"),
                ("tokens", "set<text>"),
            ],
            &["peer"],
            &[],
        ),
        ("system", "peers_v2") => make(
            ks,
            name,
            &[
                ("peer", "inet"),
                ("peer_port", "int"),
                ("data_center", "text"),
                ("host_id", "uuid"),
                ("native_address", "inet"),
                ("native_port", "int"),
                ("preferred_ip", "inet"),
                ("preferred_port", "int"),
                ("rack", "text"),
                ("release_version", "text"),
                ("schema_version", "uuid"),
                ("tokens", "set<text>"),
            ],
            &["peer", "peer_port"],
            &[],
        ),
        ("system_schema", "keyspaces") => {
            let mut tb = make(
                ks,
                name,
                &[
                    ("keyspace_name", "text"),
                    ("durable_writes", "boolean"),
                    ("replication", "map"),
                ],
                &["keyspace_name"],
                &[],
            );
            for k in store.keyspaces.values() {
                put(
                    &mut tb,
                    &[
                        ("keyspace_name", s(&k.name)),
                        ("durable_writes", Some(vec![u8::from(k.durable_writes)])),
                        ("replication", Some(text_map(&k.replication))),
                    ],
                );
            }
            tb
        }
        ("system_schema", "tables") => {
            let mut tb = make(
                ks,
                name,
                &[
                    ("keyspace_name", "text"),
                    ("table_name", "text"),
                    ("comment", "text"),
                    ("default_time_to_live", "int"),
                    ("gc_grace_seconds", "int"),
                    ("id", "uuid"),
                ],
                &["keyspace_name"],
                &["table_name"],
            );
            for k in store.keyspaces.values() {
                for table in k.tables.values() {
                    put(
                        &mut tb,
                        &[
                            ("keyspace_name", s(&k.name)),
                            ("table_name", s(&table.name)),
                            ("comment", s("")),
                            ("default_time_to_live", Some(0i32.to_be_bytes().to_vec())),
                            ("gc_grace_seconds", Some(864000i32.to_be_bytes().to_vec())),
                            ("id", Some(table.id.to_vec())),
                        ],
                    );
                }
            }
            tb
        }
        ("system_schema", "columns") => {
            let mut tb = make(
                ks,
                name,
                &[
                    ("keyspace_name", "text"),
                    ("table_name", "text"),
                    ("column_name", "text"),
                    ("clustering_order", "text"),
                    ("column_name_bytes", "blob"),
                    ("kind", "text"),
                    ("position", "int"),
                    ("type", "text"),
                ],
                &["keyspace_name"],
                &["table_name", "column_name"],
            );
            for k in store.keyspaces.values() {
                for table in k.tables.values() {
                    for c in &table.columns {
                        let order = match (c.kind, c.desc) {
                            (ColumnKind::Clustering, true) => "desc",
                            (ColumnKind::Clustering, false) => "asc",
                            _ => "none",
                        };
                        put(
                            &mut tb,
                            &[
                                ("keyspace_name", s(&k.name)),
                                ("table_name", s(&table.name)),
                                ("column_name", s(&c.name)),
                                ("clustering_order", s(order)),
                                ("column_name_bytes", s(&c.name)),
                                ("kind", s(c.kind.schema_name())),
                                ("position", Some(c.position.to_be_bytes().to_vec())),
                                ("type", s(&c.ty.cql_name())),
                            ],
                        );
                    }
                }
            }
            tb
        }
        ("system_schema", "types") => make(
            ks,
            name,
            &[
                ("keyspace_name", "text"),
                ("type_name", "text"),
                ("field_names", "list<text>"),
                ("field_types", "list<text>"),
            ],
            &["keyspace_name"],
            &["type_name"],
        ),
        ("system_schema", "functions") => make(
            ks,
            name,
            &[
                ("keyspace_name", "text"),
                ("function_name", "text"),
                ("argument_names", "list<text>"),
                ("argument_types", "list<text>"),
                ("body", "text"),
                ("called_on_null_input", "boolean"),
                ("language", "text"),
                ("return_type", "text"),
            ],
            &["keyspace_name"],
            &["function_name"],
        ),
        ("system_schema", "aggregates") => make(
            ks,
            name,
            &[
                ("keyspace_name", "text"),
                ("aggregate_name", "text"),
                ("argument_types", "list<text>"),
                ("final_func", "text"),
                ("initcond", "text"),
                ("return_type", "text"),
                ("state_func", "text"),
                ("state_type", "text"),
            ],
            &["keyspace_name"],
            &["aggregate_name"],
        ),
        ("system_schema", "views") => make(
            ks,
            name,
            &[
                ("keyspace_name", "text"),
                ("view_name", "text"),
                ("base_table_id", "uuid"),
                ("base_table_name", "text"),
                ("include_all_columns", "boolean"),
                ("where_clause", "text"),
            ],
            &["keyspace_name"],
            &["view_name"],
        ),
        ("system_schema", "indexes") => make(
            ks,
            name,
            &[
                ("keyspace_name", "text"),
                ("table_name", "text"),
                ("index_name", "text"),
                ("kind", "text"),
                ("options", "map"),
            ],
            &["keyspace_name"],
            &["table_name", "index_name"],
        ),
        ("system_schema", "triggers") => make(
            ks,
            name,
            &[
                ("keyspace_name", "text"),
                ("table_name", "text"),
                ("trigger_name", "text"),
                ("options", "map"),
            ],
            &["keyspace_name"],
            &["table_name", "trigger_name"],
        ),
        ("system_schema", "dropped_columns") => make(
            ks,
            name,
            &[
                ("keyspace_name", "text"),
                ("table_name", "text"),
                ("column_name", "text"),
                ("dropped_time", "timestamp"),
                ("kind", "text"),
                ("type", "text"),
            ],
            &["keyspace_name"],
            &["table_name", "column_name"],
        ),
        _ => return None,
    };
    Some(table)
}
