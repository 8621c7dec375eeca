//! [`CqlConfig`]: how the CQL store reaches and uses a Cassandra/ScyllaDB cluster.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use scylla::statement::Consistency;
use serde::{Deserialize, Serialize};

use crate::store::StoreError;

/// Connection, consistency, concurrency and retry settings of a [`super::CqlStore`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct CqlConfig {
    /// Initial nodes to contact, `host:port` or `host` (port 9042); the rest is discovered.
    pub contact_points: Vec<String>,
    /// Datacenter whose nodes are preferred as coordinators; `None` treats all nodes alike.
    pub local_datacenter: Option<String>,
    /// Consistency of reads (lookups, row fetches, scans, meta reads).
    pub read_consistency: CqlConsistency,
    /// Consistency of writes (rows, index entries, meta records, commit phase of LWTs).
    /// With replication factor > 1, a dependent node only reads what its parents wrote if
    /// read + write replicas exceed the factor (e.g. LOCAL_QUORUM for both).
    pub write_consistency: CqlConsistency,
    /// User name for password authentication; `None` connects without authentication.
    pub username: Option<String>,
    /// Password for `username`; never printed by `Debug`.
    pub password: Option<String>,
    /// Replication of keyspaces the store creates.
    pub replication: Replication,
    /// Client-side timeout of one request attempt, in milliseconds.
    pub request_timeout_ms: u64,
    /// Concurrent insert statements in flight per `write_rows` call.
    pub writer_concurrency: usize,
    /// Concurrent index SELECTs in flight per lookup call.
    pub lookup_key_concurrency: usize,
    /// Concurrent SELECTs by rowid in flight per `get_rows` call.
    pub lookup_rowid_concurrency: usize,
    /// Retries of one statement after a timeout, unavailable or overloaded answer.
    pub max_retries: u32,
    /// Backoff before the first retry, in milliseconds; doubled per retry (capped at 10 s).
    pub retry_base_backoff_ms: u64,
    /// Worker threads of the store's own tokio runtime (driver I/O and request fan-out).
    pub runtime_threads: usize,
    /// Connections the driver keeps to each node; `None`: one per shard (ScyllaDB) or one
    /// per node (Cassandra), the driver's default. Capillaries' `cassandra.num_conns`.
    pub connections_per_host: Option<usize>,
    /// How long opening one connection may take, in milliseconds. Capillaries'
    /// `cassandra.connect_timeout`.
    pub connect_timeout_ms: u64,
    /// TLS to every node; `None` connects in plain text.
    pub tls: Option<CqlTls>,
    /// Whether the driver reads the cluster's schema (`system_schema.*`) at connect and on
    /// schema changes. The store never needs it (it reads the columns of its own tables);
    /// turn it off for clusters with huge schemas, or without `system_schema` (Cassandra 2.x).
    pub fetch_schema_metadata: bool,
}

/// TLS settings of the CQL store (rustls on the `ring` provider).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CqlTls {
    /// PEM file with the CA certificate(s) that node certificates must chain to.
    pub ca_file: PathBuf,
    /// PEM client certificate chain, for clusters that require client authentication.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert-file`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Name that node certificates are checked against; defaults to the host of the first
    /// contact point, or, when that is an IP address, to each node's own IP address.
    #[serde(default)]
    pub server_name: Option<String>,
}

impl Default for CqlConfig {
    fn default() -> Self {
        Self {
            contact_points: vec!["127.0.0.1:9042".to_owned()],
            local_datacenter: None,
            read_consistency: CqlConsistency::LocalQuorum,
            write_consistency: CqlConsistency::One,
            username: None,
            password: None,
            replication: Replication::default(),
            request_timeout_ms: 12_000,
            writer_concurrency: 64,
            lookup_key_concurrency: 64,
            lookup_rowid_concurrency: 64,
            max_retries: 5,
            retry_base_backoff_ms: 50,
            runtime_threads: 2,
            connections_per_host: None,
            connect_timeout_ms: 5_000,
            tls: None,
            fetch_schema_metadata: true,
        }
    }
}

impl fmt::Debug for CqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CqlConfig")
            .field("contact_points", &self.contact_points)
            .field("local_datacenter", &self.local_datacenter)
            .field("read_consistency", &self.read_consistency)
            .field("write_consistency", &self.write_consistency)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("replication", &self.replication)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("writer_concurrency", &self.writer_concurrency)
            .field("lookup_key_concurrency", &self.lookup_key_concurrency)
            .field("lookup_rowid_concurrency", &self.lookup_rowid_concurrency)
            .field("max_retries", &self.max_retries)
            .field("retry_base_backoff_ms", &self.retry_base_backoff_ms)
            .field("runtime_threads", &self.runtime_threads)
            .field("connections_per_host", &self.connections_per_host)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("tls", &self.tls)
            .field("fetch_schema_metadata", &self.fetch_schema_metadata)
            .finish()
    }
}

impl CqlConfig {
    /// A default config whose contact points are the given comma-separated `host:port` list.
    pub fn with_contact_points(list: &str) -> Self {
        Self {
            contact_points: list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            ..Self::default()
        }
    }

    /// Checks the values once at start-up: contact points given, counts and timeouts positive,
    /// password only with a user name, replication options well formed.
    pub fn validate(&self) -> Result<(), StoreError> {
        let bad = |detail: String| Err(StoreError::InvalidArgument { detail });
        if self.contact_points.is_empty() {
            return bad("cql: contact-points is empty".to_owned());
        }
        for (name, v) in [
            ("writer-concurrency", self.writer_concurrency),
            ("lookup-key-concurrency", self.lookup_key_concurrency),
            ("lookup-rowid-concurrency", self.lookup_rowid_concurrency),
            ("runtime-threads", self.runtime_threads),
        ] {
            if v == 0 {
                return bad(format!("cql: {name} must be at least 1"));
            }
        }
        if self.request_timeout_ms == 0 {
            return bad("cql: request-timeout-ms must be at least 1".to_owned());
        }
        if self.password.is_some() && self.username.is_none() {
            return bad("cql: password given without username".to_owned());
        }
        if let Some(tls) = &self.tls
            && tls.cert_file.is_some() != tls.key_file.is_some()
        {
            return bad("cql: tls cert-file and key-file must be given together".to_owned());
        }
        self.replication.validate()
    }

    /// The client-side timeout of one request attempt.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
}

/// A CQL consistency level, spelled as in CQL (`LOCAL_QUORUM`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CqlConsistency {
    /// One replica.
    One,
    /// Two replicas.
    Two,
    /// Three replicas.
    Three,
    /// A majority of all replicas.
    Quorum,
    /// Every replica.
    All,
    /// A majority of the replicas in the local datacenter.
    LocalQuorum,
    /// A majority of the replicas in every datacenter.
    EachQuorum,
    /// One replica in the local datacenter.
    LocalOne,
}

impl CqlConsistency {
    /// The driver's consistency value.
    pub fn to_driver(self) -> Consistency {
        match self {
            Self::One => Consistency::One,
            Self::Two => Consistency::Two,
            Self::Three => Consistency::Three,
            Self::Quorum => Consistency::Quorum,
            Self::All => Consistency::All,
            Self::LocalQuorum => Consistency::LocalQuorum,
            Self::EachQuorum => Consistency::EachQuorum,
            Self::LocalOne => Consistency::LocalOne,
        }
    }
}

/// Replication of created keyspaces (`CREATE KEYSPACE … WITH replication = {…}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "class", deny_unknown_fields)]
pub enum Replication {
    /// The same number of replicas on the ring, datacenters ignored.
    SimpleStrategy {
        /// Replicas per row.
        #[serde(rename = "replication-factor")]
        replication_factor: u32,
    },
    /// Replicas per datacenter.
    NetworkTopologyStrategy {
        /// Datacenter name → replicas per row there.
        datacenters: BTreeMap<String, u32>,
    },
}

impl Default for Replication {
    fn default() -> Self {
        Self::SimpleStrategy {
            replication_factor: 1,
        }
    }
}

impl Replication {
    fn validate(&self) -> Result<(), StoreError> {
        let bad = |detail: String| Err(StoreError::InvalidArgument { detail });
        match self {
            Self::SimpleStrategy { replication_factor } if *replication_factor == 0 => {
                bad("cql: replication-factor must be at least 1".to_owned())
            }
            Self::NetworkTopologyStrategy { datacenters } if datacenters.is_empty() => {
                bad("cql: NetworkTopologyStrategy needs at least one datacenter".to_owned())
            }
            Self::NetworkTopologyStrategy { datacenters } => {
                // Datacenter names go into a CQL string literal; keep them to a safe alphabet.
                match datacenters.keys().find(|dc| {
                    dc.is_empty()
                        || !dc
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
                }) {
                    Some(dc) => bad(format!("cql: invalid datacenter name {dc:?}")),
                    None => Ok(()),
                }
            }
            Self::SimpleStrategy { .. } => Ok(()),
        }
    }

    /// The CQL map literal, e.g. `{'class': 'SimpleStrategy', 'replication_factor': 1}`.
    pub fn to_cql(&self) -> String {
        match self {
            Self::SimpleStrategy { replication_factor } => {
                format!("{{'class': 'SimpleStrategy', 'replication_factor': {replication_factor}}}")
            }
            Self::NetworkTopologyStrategy { datacenters } => {
                let mut s = "{'class': 'NetworkTopologyStrategy'".to_owned();
                for (dc, n) in datacenters {
                    s.push_str(&format!(", '{dc}': {n}"));
                }
                s.push('}');
                s
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kebab_case_keys_and_defaults() {
        let cfg: CqlConfig = serde_json::from_str(
            r#"{"contact-points": ["db1:9042", "db2"], "read-consistency": "QUORUM",
                "password": "secret", "username": "u",
                "replication": {"class": "NetworkTopologyStrategy", "datacenters": {"dc1": 3}}}"#,
        )
        .expect("parse");
        assert_eq!(cfg.contact_points, vec!["db1:9042", "db2"]);
        assert_eq!(cfg.read_consistency, CqlConsistency::Quorum);
        assert_eq!(cfg.write_consistency, CqlConsistency::One);
        assert_eq!(
            cfg.replication.to_cql(),
            "{'class': 'NetworkTopologyStrategy', 'dc1': 3}"
        );
        cfg.validate().expect("valid");
        let debug = format!("{cfg:?}");
        assert!(!debug.contains("secret"), "{debug}");
        assert!(
            serde_json::from_str::<CqlConfig>(r#"{"contact_point": []}"#).is_err(),
            "unknown keys are rejected"
        );
        assert_eq!(
            CqlConfig::default().replication.to_cql(),
            "{'class': 'SimpleStrategy', 'replication_factor': 1}"
        );
        assert_eq!(
            CqlConfig::with_contact_points("a:1, b:2,").contact_points,
            vec!["a:1", "b:2"]
        );
        let bad = CqlConfig {
            writer_concurrency: 0,
            ..CqlConfig::default()
        };
        assert!(bad.validate().is_err());
        assert!(CqlConfig::default().fetch_schema_metadata);
        let off: CqlConfig =
            serde_json::from_str(r#"{"fetch-schema-metadata": false}"#).expect("parse");
        assert!(!off.fetch_schema_metadata);
    }

    #[test]
    fn tls_section() {
        let cfg: CqlConfig = serde_json::from_str(
            r#"{"tls": {"ca-file": "/etc/ca.pem", "server-name": "db.example"}}"#,
        )
        .expect("parse");
        let tls = cfg.tls.as_ref().expect("tls");
        assert_eq!(tls.ca_file, PathBuf::from("/etc/ca.pem"));
        assert_eq!(tls.server_name.as_deref(), Some("db.example"));
        cfg.validate().expect("valid");
        assert!(
            serde_json::from_str::<CqlConfig>(r#"{"tls": {"server-name": "x"}}"#).is_err(),
            "ca-file is required"
        );
        assert!(
            serde_json::from_str::<CqlConfig>(r#"{"tls": {"ca-file": "a", "ca": "b"}}"#).is_err(),
            "unknown tls keys are rejected"
        );
        let half: CqlConfig =
            serde_json::from_str(r#"{"tls": {"ca-file": "a", "cert-file": "c"}}"#).expect("parse");
        assert!(half.validate().is_err(), "cert-file without key-file");
    }
}
