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

/// Creates (or truncates) `path` for writing with mode 0600: spill files hold table rows.
pub fn create_private_file(path: &Path) -> io::Result<fs::File> {
    let mut o = fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        o.mode(0o600);
    }
    o.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn modes() -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt as _;
        let t = tempfile::tempdir()?;
        let mode =
            |p: &Path| -> io::Result<u32> { Ok(fs::metadata(p)?.permissions().mode() & 0o777) };
        let d = t.path().join("a/b");
        create_private_dir(&d)?;
        assert_eq!(mode(&d)?, 0o700);
        let f = d.join("spill");
        drop(create_private_file(&f)?);
        assert_eq!(mode(&f)?, 0o600);
        write_private(&d.join("token"), b"x")?;
        assert_eq!(mode(&d.join("token"))?, 0o600);
        fs::write(d.join("wide"), b"x")?;
        fs::set_permissions(d.join("wide"), fs::Permissions::from_mode(0o644))?;
        restrict_tree(t.path())?;
        assert_eq!(mode(&d.join("wide"))?, 0o600);
        assert_eq!(mode(&t.path().join("a"))?, 0o700);
        Ok(())
    }
}
