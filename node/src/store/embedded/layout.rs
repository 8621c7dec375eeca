//! How the embedded store names its fjall keyspaces and encodes its keys (rowids, hashed
//! index keys, segment manifest entries), and the `StoreError`s those encodings produce: the
//! vocabulary the store and its segment tables share (a file of its own so `embedded.rs`
//! holds the `Store` impl only).

use super::segment::SegmentError;
use crate::store::{IndexKind, Rowid, Share, StoreError, TableRef};

/// What a fjall keyspace holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Data,
    Unique,
    NonUnique,
}

impl Kind {
    pub(super) const ALL: [Self; 3] = [Self::Data, Self::Unique, Self::NonUnique];

    pub(super) fn tag(self) -> char {
        match self {
            Self::Data => 'd',
            Self::Unique => 'u',
            Self::NonUnique => 'n',
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            Self::Data => "data table",
            Self::Unique => "unique index",
            Self::NonUnique => "non-unique index",
        }
    }

    pub(super) fn of_index(kind: IndexKind) -> Self {
        match kind {
            IndexKind::Unique => Self::Unique,
            IndexKind::NonUnique => Self::NonUnique,
        }
    }
}

pub(super) fn meta_name(keyspace: &str) -> String {
    format!("{keyspace}#m")
}

pub(super) fn table_name(keyspace: &str, kind: Kind, table: &TableRef) -> String {
    format!("{keyspace}#{}#{table}", kind.tag())
}

/// Rowid as 8 bytes whose byte order is the numeric order.
pub(super) fn encode_rowid(rowid: Rowid) -> [u8; 8] {
    (rowid.cast_unsigned() ^ (1 << 63)).to_be_bytes()
}

pub(super) fn decode_rowid(bytes: &[u8]) -> Option<Rowid> {
    let arr: [u8; 8] = bytes.try_into().ok()?;
    Some((u64::from_be_bytes(arr) ^ (1 << 63)).cast_signed())
}

pub(super) fn fjall_err(op: &'static str, err: fjall::Error) -> StoreError {
    match err {
        fjall::Error::Io(source) | fjall::Error::Storage(fjall::LsmError::Io(source)) => {
            StoreError::Io { op, source }
        }
        other => StoreError::Backend {
            op,
            detail: format!("{other:?}"),
        },
    }
}

pub(super) fn corrupt(keyspace: &str, table: &TableRef, detail: &str) -> StoreError {
    StoreError::Corrupt {
        keyspace: keyspace.to_owned(),
        table: table.storage_name(),
        detail: detail.to_owned(),
    }
}

pub(super) fn invalid(detail: String) -> StoreError {
    StoreError::InvalidArgument { detail }
}

pub(super) fn segment_err<'a>(
    keyspace: &'a str,
    table: &'a TableRef,
    op: &'static str,
) -> impl Fn(SegmentError) -> StoreError + 'a {
    move |e| match e {
        SegmentError::Io(source) => StoreError::Io { op, source },
        SegmentError::Corrupt(detail) => corrupt(keyspace, table, &detail),
    }
}

/// A segment's (or index run's) place in its table: the write call that wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct SegmentKey {
    /// The batch its rows belong to.
    pub(super) batch: u32,
    /// The share of the batch whose execution wrote it.
    pub(super) share: Share,
    /// The rowid of the call's first row of the batch, in input order.
    pub(super) first: Rowid,
}

/// Bytes of a manifest entry's key.
const MANIFEST_KEY_LEN: usize = 20;

/// The manifest entry key of a segment or index run: batch, share and first rowid, each in
/// an encoding whose byte order is the numeric order.
pub(super) fn manifest_key(key: SegmentKey) -> [u8; MANIFEST_KEY_LEN] {
    let mut k = [0; MANIFEST_KEY_LEN];
    k[..4].copy_from_slice(&key.batch.to_be_bytes());
    k[4..8].copy_from_slice(&key.share.first.to_be_bytes());
    k[8..12].copy_from_slice(&key.share.end.to_be_bytes());
    k[12..].copy_from_slice(&encode_rowid(key.first));
    k
}

/// A manifest entry: the segment's (or run's) key and generation.
pub(super) fn decode_manifest(key: &[u8], value: &[u8]) -> Option<(SegmentKey, u64)> {
    if key.len() != MANIFEST_KEY_LEN {
        return None;
    }
    let word = |at: usize| Some(u32::from_be_bytes(key.get(at..at + 4)?.try_into().ok()?));
    let key = SegmentKey {
        batch: word(0)?,
        share: Share {
            first: word(4)?,
            end: word(8)?,
        },
        first: decode_rowid(key.get(12..)?)?,
    };
    let generation = u64::from_be_bytes(value.try_into().ok()?);
    Some((key, generation))
}
