//! What every HTTP listener checks before a request reaches the console or the probes
//! (issue #23, SECURITY.md): the `Host` header against an allow-list (against DNS
//! rebinding), the `Origin` and `Content-Type` of state changes (against cross-site
//! requests), the size and timing limits of a request, and which files a start request may
//! name ([`FileRoots`]).

use std::net::IpAddr;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// Largest request body read by default (a start request is a few hundred bytes).
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;
/// How long a client may take to send its request headers by default.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections one listener serves at once by default; more are closed at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// The request checks and limits of one HTTP listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpGuard {
    /// Host names served besides IP literals and `localhost` (`console.example.com`).
    pub allowed_hosts: Vec<String>,
    /// Origins allowed to send state changes and to read answers cross-origin
    /// (`https://ui.example.com`); the same list as Capillaries'
    /// `webapi.access_control_allow_origin`.
    pub access_control_allow_origin: Vec<String>,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Time allowed for the request headers.
    pub header_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for HttpGuard {
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            access_control_allow_origin: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Why the listener refused a request before looking at its path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GuardRefusal {
    /// The `Host` header is missing or names a host this listener does not serve (403).
    #[error(
        "host {host:?} is not served here: use an IP address or localhost, or add the name to the allowed hosts"
    )]
    Host {
        /// The header as sent (empty when missing).
        host: String,
    },
    /// A state change from a page of another origin (403).
    #[error(
        "origin {origin:?} may not change anything here: add it to access_control_allow_origin to allow it"
    )]
    Origin {
        /// The `Origin` header as sent.
        origin: String,
    },
    /// A state change whose body is not declared as JSON (415).
    #[error("state changes take Content-Type: application/json")]
    ContentType,
}

impl GuardRefusal {
    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        match self {
            Self::Host { .. } | Self::Origin { .. } => 403,
            Self::ContentType => 415,
        }
    }
}

/// Whether `method` changes state (everything but reads and CORS preflights).
pub fn is_state_change(method: &str) -> bool {
    !matches!(method, "GET" | "HEAD" | "OPTIONS")
}

/// The host part of a `Host` header value (`[::1]:80` → `::1`, `a.b:8080` → `a.b`), lower-cased.
fn host_name(host: &str) -> String {
    let h = host.trim();
    let name = if let Some(rest) = h.strip_prefix('[') {
        rest.split_once(']').map_or(rest, |(ip, _)| ip)
    } else {
        match h.rsplit_once(':') {
            Some((n, port)) if port.chars().all(|c| c.is_ascii_digit()) => n,
            _ => h,
        }
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Checks an `access_control_allow_origin` entry: a whole origin (`https://ui.example.com`,
/// `http://127.0.0.1:3000`); `*` is refused, since any page could then act with the cookie of a
/// signed-in browser.
pub fn check_origin_entry(origin: &str) -> Result<(), String> {
    let o = origin.trim();
    let ok = match o.split_once("://") {
        Some((scheme, host)) => {
            matches!(scheme, "http" | "https") && !host.is_empty() && !host.contains(['/', '*'])
        }
        None => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{origin:?} is not an origin like https://ui.example.com (no path, no *)"
        ))
    }
}

impl HttpGuard {
    /// Checks `Host`: IP literals (a rebinding page's requests carry its own host name, never
    /// an address), `localhost` and the configured names pass.
    pub fn check_host(&self, host: Option<&str>) -> Result<(), GuardRefusal> {
        let refuse = || GuardRefusal::Host {
            host: host.unwrap_or_default().to_owned(),
        };
        let name = host_name(host.ok_or_else(refuse)?);
        if name.is_empty() {
            return Err(refuse());
        }
        let ok = name.parse::<IpAddr>().is_ok()
            || name == "localhost"
            || self.allowed_hosts.iter().any(|a| host_name(a) == name);
        if ok { Ok(()) } else { Err(refuse()) }
    }

    /// Whether `origin` is on the cross-origin allow-list.
    pub fn origin_allowed(&self, origin: &str) -> bool {
        let o = origin.trim_end_matches('/');
        self.access_control_allow_origin
            .iter()
            .any(|a| a.trim_end_matches('/').eq_ignore_ascii_case(o))
    }

    /// Checks a state change: its body is declared JSON (a form or a "simple" cross-site
    /// request cannot declare it without a CORS preflight) and its `Origin`, when present, is
    /// this listener's own (`scheme://host` of the request) or allowed.
    pub fn check_state_change(
        &self,
        scheme: &str,
        host: Option<&str>,
        origin: Option<&str>,
        content_type: Option<&str>,
    ) -> Result<(), GuardRefusal> {
        if let Some(origin) = origin {
            let own = host
                .is_some_and(|h| origin.eq_ignore_ascii_case(&format!("{scheme}://{}", h.trim())));
            if !own && !self.origin_allowed(origin) {
                return Err(GuardRefusal::Origin {
                    origin: origin.to_owned(),
                });
            }
        }
        let json = content_type.is_some_and(|c| {
            c.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
        });
        if json {
            Ok(())
        } else {
            Err(GuardRefusal::ContentType)
        }
    }
}

/// Where the files a start request names (script, params, and the Python and tag-criteria
/// files its script names) may come from: local directories and URL prefixes the operator
/// configured. Nothing else is read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileRoots {
    /// Directories (absolute; a file below one is allowed).
    pub dirs: Vec<PathBuf>,
    /// URL prefixes (`https://files.example.com/cfg/`, `s3://bucket/cfg/`).
    pub url_prefixes: Vec<String>,
}

/// The one answer for a file outside the roots: it does not say whether the file exists.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{url:?} is outside the directories and URL prefixes this server may read scripts from (its file roots)"
)]
pub struct OutsideRoots {
    /// The URL or path as named.
    pub url: String,
}

/// `path` with `.` and `..` resolved without touching the file system; `None` when `..`
/// climbs above the root.
fn lexical(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    Some(out)
}

impl FileRoots {
    /// Parses one `--file-root` / `file-roots` entry: a URL prefix (`scheme://…`) or a
    /// directory (made absolute and resolved, so symlinks in it are compared as their target).
    pub fn add(&mut self, entry: &str) -> std::io::Result<()> {
        let e = entry.trim();
        if e.contains("://") && !e.to_ascii_lowercase().starts_with("file://") {
            self.url_prefixes.push(e.to_owned());
        } else {
            let p = e.strip_prefix("file://").unwrap_or(e);
            self.dirs.push(std::fs::canonicalize(p)?);
        }
        Ok(())
    }

    /// Whether no root is configured (every file is refused).
    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty() && self.url_prefixes.is_empty()
    }

    /// Allows `url` or refuses it with [`OutsideRoots`]. Paths are compared after resolving
    /// `.` and `..` (and, for a file that exists below a root, its symlinks); a file outside
    /// every root is never looked at, so the answer cannot tell whether it exists.
    pub fn check(&self, url: &str) -> Result<(), OutsideRoots> {
        let refuse = || OutsideRoots {
            url: url.to_owned(),
        };
        let u = url.trim();
        let lower = u.to_ascii_lowercase();
        let local = if lower.starts_with("file://") {
            Some(&u["file://".len()..])
        } else if u.contains("://") {
            None
        } else {
            Some(u)
        };
        match local {
            Some(p) => {
                // A relative path is read from the current directory: checked as that file.
                let p = match Path::new(p) {
                    p if p.is_absolute() => p.to_path_buf(),
                    p => std::env::current_dir().map_err(|_| refuse())?.join(p),
                };
                let p = lexical(&p).ok_or_else(refuse)?;
                if !self.dirs.iter().any(|d| p.starts_with(d)) {
                    return Err(refuse());
                }
                // A symlink below a root may point outside it: follow it, when it exists.
                match std::fs::canonicalize(&p) {
                    Ok(real) if !self.dirs.iter().any(|d| real.starts_with(d)) => Err(refuse()),
                    _ => Ok(()),
                }
            }
            None => {
                // No dot segments (raw or percent-encoded): a prefix match must mean "below".
                let path_part = u.split_once("://").map_or(u, |(_, r)| r);
                let dotty = path_part.split(['/', '?', '#']).any(|s| {
                    let s = s.to_ascii_lowercase().replace("%2e", ".");
                    s == "." || s == ".."
                }) || lower.contains("%2f")
                    || lower.contains("%5c")
                    || u.contains('\\');
                let ok = !dotty
                    && self.url_prefixes.iter().any(|p| {
                        lower.starts_with(&p.to_ascii_lowercase())
                            && (p.ends_with('/')
                                || u.len() == p.len()
                                || u[p.len()..].starts_with('/'))
                    });
                if ok { Ok(()) } else { Err(refuse()) }
            }
        }
    }
}

impl crate::script_files::UrlLimit for FileRoots {
    fn allow(&self, url: &str) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.check(url).map_err(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let g = HttpGuard {
            allowed_hosts: vec!["console.example.com".into()],
            ..HttpGuard::default()
        };
        for ok in [
            "127.0.0.1:8080",
            "[::1]:80",
            "10.1.2.3",
            "localhost:9",
            "LOCALHOST",
            "console.example.com:443",
        ] {
            assert!(g.check_host(Some(ok)).is_ok(), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "",
        ] {
            assert!(g.check_host(Some(bad)).is_err(), "{bad}");
        }
        assert!(g.check_host(None).is_err());
    }

    #[test]
    fn state_changes() {
        let g = HttpGuard {
            access_control_allow_origin: vec!["http://ui.example:3000".into()],
            ..HttpGuard::default()
        };
        let h = Some("127.0.0.1:8080");
        let json = Some("application/json; charset=utf-8");
        assert!(g.check_state_change("http", h, None, json).is_ok());
        assert!(
            g.check_state_change("http", h, Some("http://127.0.0.1:8080"), json)
                .is_ok()
        );
        assert!(
            g.check_state_change("http", h, Some("http://ui.example:3000"), json)
                .is_ok()
        );
        assert_eq!(
            g.check_state_change("http", h, Some("http://evil.example"), json),
            Err(GuardRefusal::Origin {
                origin: "http://evil.example".into()
            })
        );
        assert!(
            g.check_state_change("https", h, Some("http://127.0.0.1:8080"), json)
                .is_err()
        );
        assert!(g.check_state_change("http", h, Some("null"), json).is_err());
        assert_eq!(
            g.check_state_change("http", h, None, Some("text/plain")),
            Err(GuardRefusal::ContentType)
        );
        assert!(g.check_state_change("http", h, None, None).is_err());
    }

    #[test]
    fn origin_entries() {
        assert!(check_origin_entry("https://ui.example.com").is_ok());
        assert!(check_origin_entry("http://127.0.0.1:3000").is_ok());
        for bad in [
            "*",
            "ui.example.com",
            "https://ui.example.com/app",
            "",
            "http://*",
            "http://é/",
        ] {
            assert!(check_origin_entry(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn roots() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let inside = dir.path().join("cfg");
        std::fs::create_dir(&inside)?;
        let mut r = FileRoots::default();
        r.add(&inside.display().to_string())?;
        r.add("https://files.example/cfg/")?;
        let root = std::fs::canonicalize(&inside)?;
        assert!(r.check(&root.join("s.json").display().to_string()).is_ok());
        assert!(
            r.check(&format!("file://{}", root.join("a/p.json").display()))
                .is_ok()
        );
        assert!(
            r.check(&root.join("../x.json").display().to_string())
                .is_err()
        );
        assert!(r.check("/etc/passwd").is_err());
        assert!(r.check("relative/s.json").is_err());
        assert!(r.check("https://files.example/cfg/s.json").is_ok());
        assert!(r.check("https://files.example/cfg/../secret.json").is_err());
        assert!(
            r.check("https://files.example/cfg/%2e%2e/secret.json")
                .is_err()
        );
        assert!(r.check("https://files.example/cfgx/s.json").is_err());
        assert!(r.check("http://files.example/cfg/s.json").is_err());
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc", root.join("etc"))?;
            assert!(
                r.check(&root.join("etc/hostname").display().to_string())
                    .is_err()
            );
        }
        Ok(())
    }
}
