//! Fetching script, params, Python and tag-criteria files by URL (spec §3.1 step 1).
//!
//! Supported forms: a plain local path (no scheme), `file://` (the scheme is stripped — Capillaries
//! uses the whole string as a path so `file://` never works there; accepting it is a superset),
//! and the remote URLs of the file-access layer ([`plexus_node::remote`]): `http://`,
//! `https://` (with the configured `ca-path`), `s3://bucket/key` and `sftp://user@host/path`,
//! with the process-wide settings (`planner --files-config`, `PLEXUS_FILES__*`, AWS variables).

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use plexus_node::console::FileRoots;
use plexus_node::console::guard::OutsideRoots;
use plexus_node::remote::{FileAccess, RemoteError};

thread_local! {
    /// The file roots of the console request being compiled on this thread, if any.
    static ROOTS: RefCell<Option<FileRoots>> = const { RefCell::new(None) };
}

/// Runs `f` with every [`fetch`] on this thread limited to `roots`: a script's Python and
/// tag-criteria files are fetched deep in the loader, and the console's request must not reach
/// past its roots through them (a thread-local instead of a parameter through every loader).
pub fn with_file_roots<T>(roots: &FileRoots, f: impl FnOnce() -> T) -> T {
    struct Reset(Option<FileRoots>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let old = self.0.take();
            ROOTS.with(|r| *r.borrow_mut() = old);
        }
    }
    let old = ROOTS.with(|r| r.borrow_mut().replace(roots.clone()));
    let _reset = Reset(old);
    f()
}

/// Upper bound on a fetched remote file; scripts and criteria files are small, this only stops
/// a runaway server from exhausting memory.
const MAX_REMOTE_BODY: u64 = 256 * 1024 * 1024;

/// Failure to fetch the bytes behind a URL.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Reading a local file failed (missing, permission denied, a directory, …).
    #[error("cannot read {url}: {source}")]
    Io {
        /// The URL as written in the script or on the command line.
        url: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A remote fetch (http, https, s3, sftp) failed; the message names the URL and what
    /// went wrong (not found, access denied, timeout …).
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// The console request's file roots do not include the URL; nothing was read.
    #[error(transparent)]
    Outside(#[from] OutsideRoots),
}

impl SourceError {
    /// Whether fetching again may succeed (a timeout or a dropped connection).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Remote(e) if e.is_retryable())
    }
}

/// The scheme of `url` (text before `://`) if it has one, lower-cased.
fn scheme_of(url: &str) -> Option<String> {
    let (scheme, _) = url.split_once("://")?;
    let mut chars = scheme.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (first_ok && rest_ok).then(|| scheme.to_ascii_lowercase())
}

/// Fetches the bytes behind `url`; relative local paths are resolved against `base_dir` when
/// given, otherwise against the current directory (Capillaries semantics).
pub fn fetch(url: &str, base_dir: Option<&Path>) -> Result<Vec<u8>, SourceError> {
    ROOTS.with(|r| r.borrow().as_ref().map_or(Ok(()), |roots| roots.check(url)))?;
    match scheme_of(url).as_deref() {
        None => read_local(url, url, base_dir),
        Some("file") => read_local(url, url.get("file://".len()..).unwrap_or(""), base_dir),
        Some("http" | "https" | "s3" | "sftp") => {
            Ok(FileAccess::global().fetch(url, MAX_REMOTE_BODY)?)
        }
        // Capillaries reads any other string as a path.
        Some(_) => read_local(url, url, base_dir),
    }
}

/// Reads a local file; `url` is kept only for the error message.
fn read_local(url: &str, path: &str, base_dir: Option<&Path>) -> Result<Vec<u8>, SourceError> {
    let path = Path::new(path);
    let full: PathBuf = match base_dir {
        Some(base) if path.is_relative() => base.join(path),
        _ => path.to_path_buf(),
    };
    std::fs::read(&full).map_err(|source| SourceError::Io {
        url: url.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheme_detection() {
        assert_eq!(scheme_of("/tmp/x.json"), None);
        assert_eq!(scheme_of("rel/x.json"), None);
        assert_eq!(scheme_of("S3://b/k").as_deref(), Some("s3"));
        assert_eq!(scheme_of("file:///tmp/x").as_deref(), Some("file"));
        assert_eq!(scheme_of("/a/b://c"), None);
    }

    #[test]
    fn bad_remote_urls_are_clear_errors() {
        for (url, why) in [
            ("s3://bucket", "no object key"),
            ("sftp://h/p/x.json", "no user"),
        ] {
            let err = fetch(url, None).unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
            assert!(err.contains(url), "{err}");
        }
    }

    #[test]
    fn fetches_inside_a_console_request_stay_below_its_roots()
    -> Result<(), Box<dyn std::error::Error>> {
        let inside = tempfile::tempdir()?;
        let outside = tempfile::tempdir()?;
        let good = std::fs::canonicalize(inside.path())?.join("code.py");
        let bad = outside.path().join("secret.py");
        std::fs::write(&good, b"ok")?;
        std::fs::write(&bad, b"secret")?;
        let mut roots = FileRoots::default();
        roots.add(&inside.path().display().to_string())?;
        let (g, b) = (good.display().to_string(), bad.display().to_string());
        with_file_roots(&roots, || -> Result<(), Box<dyn std::error::Error>> {
            assert_eq!(fetch(&g, None)?, b"ok");
            let err = fetch(&b, None).expect_err("outside the roots");
            assert!(matches!(err, SourceError::Outside(_)), "{err}");
            assert!(!err.to_string().contains("secret\""), "{err}");
            assert!(fetch("http://127.0.0.1:9/x.py", None).is_err());
            Ok(())
        })?;
        // Outside a console request (planner run), nothing changes.
        assert_eq!(fetch(&b, None)?, b"secret");
        Ok(())
    }

    #[test]
    fn local_and_file_scheme() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("a.txt");
        std::fs::write(&path, b"hello")?;
        let p = path.to_string_lossy().to_string();
        assert_eq!(fetch(&p, None)?, b"hello");
        assert_eq!(fetch(&format!("file://{p}"), None)?, b"hello");
        assert_eq!(fetch("a.txt", Some(dir.path()))?, b"hello");
        let err = fetch("/nonexistent/dir/x.json", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/dir/x.json"), "{err}");
        assert!(err.contains("No such file"), "{err}");
        Ok(())
    }
}
