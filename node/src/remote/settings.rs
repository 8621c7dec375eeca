//! Settings of the file-access layer: the `[files]` section of node.toml, the file given to
//! `planner --files-config`, and `PLEXUS_FILES__*` environment overrides.
//!
//! ```toml
//! s3-endpoint = "http://127.0.0.1:9000"  # MinIO, Ceph, moto …; default: AWS_ENDPOINT_URL, then AWS
//! s3-region = "us-east-1"                 # default: AWS_REGION / AWS_DEFAULT_REGION, then us-east-1
//! s3-profile = "prod"                     # profile of ~/.aws/credentials (default: AWS_PROFILE)
//! s3-virtual-host-style = false           # bucket.host/key instead of host/bucket/key
//! ca-path = "/etc/plexus/ca.pem"          # extra trusted CA (PEM file, or a directory of them)
//! known-hosts = "/etc/plexus/known_hosts" # sftp host keys (default: accept any host key)
//! retries = 3                             # transient failures retried per request
//! timeout-secs = 60                       # one request (or one silence mid-stream)
//! multipart-chunk-mib = 16                # S3 upload part size (a file this big goes multipart)
//! [private-keys]                          # sftp keys: "user@host", "host" or "user" (Capillaries)
//! "capi@files.example.com" = "/etc/plexus/sftp_key"
//! ```
//!
//! Credentials are never part of these settings: S3 keys come from the standard AWS variables
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`) or profile files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::RemoteError;

/// How remote data files are reached (see the module docs for the TOML form).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct FileSettings {
    /// S3 endpoint for S3-compatible stores; `None`: `AWS_ENDPOINT_URL`, then AWS itself.
    pub s3_endpoint: Option<String>,
    /// S3 region; `None`: `AWS_REGION` / `AWS_DEFAULT_REGION`, then `us-east-1`.
    pub s3_region: Option<String>,
    /// AWS profile of the shared config/credentials files; `None`: `AWS_PROFILE`, `default`.
    pub s3_profile: Option<String>,
    /// Virtual-host-style S3 requests (`bucket.endpoint/key`); default path style.
    pub s3_virtual_host_style: bool,
    /// Extra trusted CA certificates for https and S3 over TLS (Capillaries' `ca_path`): a PEM
    /// file or a directory of `.pem`/`.crt` files. The public web roots stay trusted.
    pub ca_path: Option<PathBuf>,
    /// SFTP private keys (Capillaries' `private_keys`) keyed by `user@host:port`,
    /// `user@host`, `host` or `user`, tried in that order.
    pub private_keys: BTreeMap<String, PathBuf>,
    /// OpenSSH known_hosts file checked for sftp host keys; `None` accepts any host key (as
    /// Capillaries does) and logs a warning once per host.
    pub known_hosts: Option<PathBuf>,
    /// Retries of a failed request that may succeed later (timeouts, resets, 5xx).
    pub retries: usize,
    /// Timeout of one request, and of one silence while streaming.
    pub timeout_secs: u64,
    /// Part size of S3 multipart uploads in MiB (S3 needs at least 5).
    pub multipart_chunk_mib: usize,
    /// S3 keys handed over in code (embedding, tests); never read from a settings file, never
    /// shown. `None`: the AWS variables and profile files.
    #[serde(skip)]
    pub s3_credentials: Option<S3Credentials>,
}

/// An S3 access key given in code; its `Debug` form hides both parts.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    /// Access key id.
    pub key_id: String,
    /// Secret access key.
    pub secret: String,
}

impl std::fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("S3Credentials(***)")
    }
}

impl Default for FileSettings {
    fn default() -> Self {
        Self {
            s3_endpoint: None,
            s3_region: None,
            s3_profile: None,
            s3_virtual_host_style: false,
            ca_path: None,
            private_keys: BTreeMap::new(),
            known_hosts: None,
            retries: 3,
            timeout_secs: 60,
            multipart_chunk_mib: 16,
            s3_credentials: None,
        }
    }
}

/// The `PLEXUS_FILES__*` variables and the setting each one overrides.
pub const ENV_OVERRIDES: [(&str, &str); 8] = [
    ("PLEXUS_FILES__S3_ENDPOINT", "s3-endpoint"),
    ("PLEXUS_FILES__S3_REGION", "s3-region"),
    ("PLEXUS_FILES__S3_PROFILE", "s3-profile"),
    ("PLEXUS_FILES__CA_PATH", "ca-path"),
    ("PLEXUS_FILES__KNOWN_HOSTS", "known-hosts"),
    ("PLEXUS_FILES__RETRIES", "retries"),
    ("PLEXUS_FILES__TIMEOUT_SECS", "timeout-secs"),
    ("PLEXUS_FILES__PRIVATE_KEYS", "private-keys"),
];

impl FileSettings {
    /// One request's timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs.max(1))
    }

    /// S3 part size in bytes (at least S3's 5 MiB minimum).
    pub fn multipart_chunk(&self) -> usize {
        self.multipart_chunk_mib.max(5) * 1024 * 1024
    }

    /// Reads a TOML settings file (the keys of the module docs).
    pub fn load(path: &Path) -> Result<Self, RemoteError> {
        let text = std::fs::read_to_string(path).map_err(|e| RemoteError::Settings {
            detail: format!("cannot read {}: {e}", path.display()),
        })?;
        toml::from_str(&text).map_err(|e| RemoteError::Settings {
            detail: format!("{}: {e}", path.display()),
        })
    }

    /// Applies the `PLEXUS_FILES__*` overrides given by `var` (the process environment in
    /// production, a map in tests). `PLEXUS_FILES__PRIVATE_KEYS` is a comma-separated list of
    /// `name=path` entries added to the key map.
    pub fn with_env(mut self, var: impl Fn(&str) -> Option<String>) -> Result<Self, RemoteError> {
        let bad = |name: &str, v: &str| RemoteError::Settings {
            detail: format!("{name}={v:?} is not a number"),
        };
        if let Some(v) = var("PLEXUS_FILES__S3_ENDPOINT") {
            self.s3_endpoint = Some(v);
        }
        if let Some(v) = var("PLEXUS_FILES__S3_REGION") {
            self.s3_region = Some(v);
        }
        if let Some(v) = var("PLEXUS_FILES__S3_PROFILE") {
            self.s3_profile = Some(v);
        }
        if let Some(v) = var("PLEXUS_FILES__CA_PATH") {
            self.ca_path = Some(PathBuf::from(v));
        }
        if let Some(v) = var("PLEXUS_FILES__KNOWN_HOSTS") {
            self.known_hosts = Some(PathBuf::from(v));
        }
        if let Some(v) = var("PLEXUS_FILES__RETRIES") {
            self.retries = v
                .trim()
                .parse()
                .map_err(|_| bad("PLEXUS_FILES__RETRIES", &v))?;
        }
        if let Some(v) = var("PLEXUS_FILES__TIMEOUT_SECS") {
            self.timeout_secs = v
                .trim()
                .parse()
                .map_err(|_| bad("PLEXUS_FILES__TIMEOUT_SECS", &v))?;
        }
        if let Some(v) = var("PLEXUS_FILES__PRIVATE_KEYS") {
            for entry in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                let (name, path) = entry.split_once('=').ok_or_else(|| RemoteError::Settings {
                    detail: format!("PLEXUS_FILES__PRIVATE_KEYS entry {entry:?} is not name=path"),
                })?;
                self.private_keys
                    .insert(name.trim().to_owned(), PathBuf::from(path.trim()));
            }
        }
        Ok(self)
    }

    /// The private key for `user` at `host:port`, by the lookup order of `private_keys`.
    pub fn private_key_for(&self, user: &str, host: &str, port: u16) -> Option<&Path> {
        [
            format!("{user}@{host}:{port}"),
            format!("{user}@{host}"),
            host.to_owned(),
            user.to_owned(),
        ]
        .iter()
        .find_map(|k| self.private_keys.get(k))
        .map(PathBuf::as_path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_env_and_key_lookup() -> Result<(), Box<dyn std::error::Error>> {
        let s: FileSettings = toml::from_str(
            "s3-endpoint = \"http://127.0.0.1:9\"\nretries = 1\n[private-keys]\n\"u@h\" = \"/k1\"\nu = \"/k2\"\n",
        )?;
        assert_eq!(s.s3_endpoint.as_deref(), Some("http://127.0.0.1:9"));
        assert_eq!(s.private_key_for("u", "h", 22), Some(Path::new("/k1")));
        assert_eq!(s.private_key_for("u", "other", 22), Some(Path::new("/k2")));
        assert_eq!(s.private_key_for("x", "other", 22), None);
        let env = |k: &str| match k {
            "PLEXUS_FILES__RETRIES" => Some("5".to_owned()),
            "PLEXUS_FILES__PRIVATE_KEYS" => Some("h:2222=/k3, z=/k4".to_owned()),
            _ => None,
        };
        let s = s.with_env(env)?;
        assert_eq!(s.retries, 5);
        assert_eq!(
            s.private_keys.get("z").map(PathBuf::as_path),
            Some(Path::new("/k4"))
        );
        let err = toml::from_str::<FileSettings>("bucket = 1").err();
        assert!(err.is_some_and(|e| e.to_string().contains("unknown field")));
        Ok(())
    }
}
