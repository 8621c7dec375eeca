//! Every statement the store prepares, with its CQL text and how it may be retried.

use super::retry::Idempotence;
use super::schema::qualified;
use super::typed::Layout;

/// Every statement the store prepares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Stmt {
    InsertRow,
    GetRow,
    ScanFrom,
    ScanAfter,
    CountRows,
    ClaimUnique,
    InsertNonUnique,
    LookupIndex,
    MetaPut,
    MetaGet,
    MetaScan,
    RunMax,
    RunClaim,
    SysKeyspace,
    SysKeyspaces,
    SysColumns,
}

impl Stmt {
    /// The statement text; data-row statements name the payload columns of `layout`.
    pub(super) fn cql(self, keyspace: &str, table: &str, layout: Option<&Layout>) -> String {
        let t = qualified(keyspace, table);
        let payload = layout.unwrap_or(&Layout::Blob).columns();
        let select = std::iter::once("rowid".to_owned())
            .chain(payload.iter().cloned())
            .collect::<Vec<_>>()
            .join(", ");
        match self {
            Self::InsertRow => {
                let marks = vec!["?"; payload.len() + 2].join(", ");
                let cols = ["rowid".to_owned(), "batch_idx".to_owned()]
                    .into_iter()
                    .chain(payload)
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("INSERT INTO {t} ({cols}) VALUES ({marks})")
            }
            Self::GetRow => format!("SELECT {select} FROM {t} WHERE rowid = ?"),
            Self::ScanFrom => {
                format!("SELECT {select} FROM {t} WHERE token(rowid) >= ? AND token(rowid) <= ?")
            }
            Self::ScanAfter => {
                format!("SELECT {select} FROM {t} WHERE token(rowid) > ? AND token(rowid) <= ?")
            }
            Self::CountRows => format!("SELECT rowid FROM {t}"),
            Self::ClaimUnique => {
                format!("INSERT INTO {t} (key, rowid) VALUES (?, ?) IF NOT EXISTS")
            }
            Self::InsertNonUnique => format!("INSERT INTO {t} (key, rowid) VALUES (?, ?)"),
            Self::LookupIndex => format!("SELECT rowid FROM {t} WHERE key = ?"),
            Self::MetaPut => format!("INSERT INTO {t} (part, key, value) VALUES (?, ?, ?)"),
            Self::MetaGet => format!("SELECT value FROM {t} WHERE part = ? AND key = ?"),
            Self::MetaScan => {
                format!("SELECT key, value FROM {t} WHERE part = ? AND key >= ? AND key < ?")
            }
            Self::RunMax => format!("SELECT run_id FROM {t} WHERE ks = ? LIMIT 1"),
            Self::RunClaim => {
                format!("INSERT INTO {t} (ks, run_id, claimer) VALUES (?, ?, ?) IF NOT EXISTS")
            }
            Self::SysKeyspace => {
                "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?"
                    .to_owned()
            }
            Self::SysKeyspaces => "SELECT keyspace_name FROM system_schema.keyspaces".to_owned(),
            Self::SysColumns => "SELECT column_name, kind, type FROM system_schema.columns \
                                 WHERE keyspace_name = ? AND table_name = ?"
                .to_owned(),
        }
    }

    pub(super) fn is_write(self) -> bool {
        matches!(
            self,
            Self::InsertRow
                | Self::ClaimUnique
                | Self::InsertNonUnique
                | Self::MetaPut
                | Self::RunClaim
        )
    }

    pub(super) fn is_lwt(self) -> bool {
        matches!(self, Self::ClaimUnique | Self::RunClaim)
    }

    pub(super) fn is_system(self) -> bool {
        matches!(
            self,
            Self::SysKeyspace | Self::SysKeyspaces | Self::SysColumns
        )
    }

    pub(super) fn idempotence(self) -> Idempotence {
        if self.is_lwt() {
            Idempotence::SafeLwt
        } else {
            Idempotence::Idempotent
        }
    }
}

/// Cache key of a prepared statement: keyspace, physical table, statement.
pub(super) type StmtKey = (String, String, Stmt);
