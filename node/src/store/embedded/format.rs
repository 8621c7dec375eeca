//! The format version of an embedded store directory: recorded when the directory is created,
//! checked on every open, so a directory of another layout is refused and never misread.

use std::io::Write;
use std::path::Path;

use super::super::StoreError;

/// The file that records the version, at the top of the store directory.
pub(super) const FORMAT_FILE: &str = "PLEXUS-STORE-FORMAT";

/// The layout this build reads and writes: version 5 stores index run keys without their
/// trailing spaces (version 4 stored them whole); version 4 delta-codes each segment's offset
/// index (version 3 stored it whole); since version 3 each segment and index run is named by its
/// batch, the share of the batch that wrote it and its write call's first rowid (version 2
/// by the batch and rowid only; version 1 kept indexes in fjall, `segments/` held the rows
/// only). fjall holds the manifests and the workflow records.
pub(crate) const FORMAT_VERSION: u32 = 5;

/// What the version file says before the number.
const PREFIX: &str = "plexus-store-format ";

/// Files fjall puts at the top of its database directory: their presence without a version
/// file marks the layout from before version 1 (one fjall database holding the rows too).
const UNVERSIONED_MARKERS: [&str; 2] = ["version", "keyspaces"];

fn io(op: &'static str) -> impl FnOnce(std::io::Error) -> StoreError {
    move |source| StoreError::Io { op, source }
}

/// Checks the version of the store in `dir`, or records the current one if `dir` holds no
/// store yet (missing or empty, apart from a version file left half-written by a crash).
pub(super) fn check_or_init(dir: &Path) -> Result<(), StoreError> {
    std::fs::create_dir_all(dir).map_err(io("open"))?;
    let file = dir.join(FORMAT_FILE);
    match std::fs::read(&file) {
        Ok(bytes) => {
            let found = std::str::from_utf8(&bytes)
                .ok()
                .and_then(|t| t.trim_end().strip_prefix(PREFIX))
                .and_then(|v| v.parse::<u32>().ok())
                .ok_or_else(|| StoreError::Corrupt {
                    keyspace: String::new(),
                    table: file.display().to_string(),
                    detail: format!(
                        "not a store format file (expected \"{PREFIX}<number>\"): {:?}",
                        String::from_utf8_lossy(&bytes[..bytes.len().min(64)])
                    ),
                })?;
            if found == FORMAT_VERSION {
                return Ok(());
            }
            return Err(StoreError::UnsupportedFormat {
                dir: dir.to_path_buf(),
                found: Some(found),
                expected: FORMAT_VERSION,
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("open")(e)),
    }
    if UNVERSIONED_MARKERS
        .iter()
        .any(|m| dir.join(m).symlink_metadata().is_ok())
    {
        return Err(StoreError::UnsupportedFormat {
            dir: dir.to_path_buf(),
            found: None,
            expected: FORMAT_VERSION,
        });
    }
    // A new store: the version file appears whole or not at all (temp file, fsync, rename).
    let tmp = dir.join(format!("{FORMAT_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(io("open"))?;
    writeln!(f, "{PREFIX}{FORMAT_VERSION}").map_err(io("open"))?;
    f.sync_all().map_err(io("open"))?;
    drop(f);
    std::fs::rename(&tmp, &file).map_err(io("open"))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("open"))
}

/// True if `dir` holds a store of any format version (a version file or the markers of the
/// unversioned layout).
pub(super) fn holds_store(dir: &Path) -> bool {
    std::iter::once(FORMAT_FILE)
        .chain(UNVERSIONED_MARKERS)
        .any(|m| dir.join(m).symlink_metadata().is_ok())
}

/// Describes a format version for [`StoreError::UnsupportedFormat`].
pub(crate) fn describe(found: Option<u32>) -> String {
    match found {
        Some(1) => "format version 1 (rows in segments, indexes in fjall)".to_owned(),
        Some(2) => "format version 2 (segments named without the share of their batch)".to_owned(),
        Some(3) => "format version 3 (segments' offset indexes stored whole)".to_owned(),
        Some(4) => "format version 4 (index run keys stored with their padding)".to_owned(),
        Some(v) => format!("format version {v}"),
        None => "no format version (the fjall-only layout that kept rows in fjall, before \
                 version 1)"
            .to_owned(),
    }
}
