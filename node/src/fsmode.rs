//! Private file modes (issue #23): data directories 0700, Raft log and state files, spill
//! files and token files 0600, so other local users read none of a peer's data.

use std::fs;
use std::io;
use std::path::Path;

/// Creates `dir` and its missing parents; `dir` itself ends up mode 0700 (also when it
/// already existed with a wider mode).
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    restrict_dir(dir)
}

/// Sets an existing directory to 0700.
pub fn restrict_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Sets an existing file to 0600.
pub fn restrict_file(file: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        fs::set_permissions(file, fs::Permissions::from_mode(0o600))?;
    }
    #[cfg(not(unix))]
    let _ = file;
    Ok(())
}

/// Writes `bytes` to a new file created with mode 0600 (never readable by others, not even
/// for a moment).
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write as _;
    let mut o = fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        o.mode(0o600);
    }
    let mut f = o.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Sets every directory below `dir` (and `dir`) to 0700 and every file to 0600: for files a
/// library created with the default mode (the Raft log's and the store's segments).
pub fn restrict_tree(dir: &Path) -> io::Result<()> {
    restrict_dir(dir)?;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let t = entry.file_type()?;
        if t.is_dir() {
            restrict_tree(&entry.path())?;
        } else if t.is_file() {
            restrict_file(&entry.path())?;
        }
    }
    Ok(())
}
