//! The web console and its JSON API (issue #16), served by the HTTP listener of every peer
//! ([`crate::metrics::HttpServer`]) and by `planner serve`.
//!
//! One router for both: [`Console::handle`] maps a request to the API or to the static pages
//! (embedded in the binary, no build step) and asks a [`ConsoleBackend`] for what it needs —
//! the embedded store and engine of `planner serve`, or a peer's replicated ledger. Views are
//! computed here from the backend's [`Ledger`], so both show the same JSON.
//!
//! Routes (see README "The web console"):
//! `GET /api/info`, `GET /api/keyspaces`, `GET|POST /api/keyspaces/<ks>/runs`,
//! `DELETE /api/keyspaces/<ks>`, `GET /api/keyspaces/<ks>/runs/<run>`,
//! `GET /api/keyspaces/<ks>/runs/<run>/nodes`,
//! `GET /api/keyspaces/<ks>/runs/<run>/nodes/<node>/batches`,
//! `GET /api/keyspaces/<ks>/runs/<run>/dag.svg`, `POST /api/keyspaces/<ks>/runs/<run>/stop`;
//! the pages at `/` and `/assets/*` (the page routes by `#/ks/<ks>…` fragments); Capillaries'
//! webapi at `/ks…` ([`webapi`]).

pub mod dag;
pub mod guard;
mod webapi;

use std::fmt;
use std::sync::Arc;

use plexus_core::plan::Plan;
use subtle::ConstantTimeEq as _;

pub use guard::{FileRoots, HttpGuard};

use plexus_raft::{Ledger, NodeBatchStatus, Run, RunStatus};
use serde::Deserialize;
use serde_json::{Value, json};

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// Largest request body the console reads by default (a start request is a few hundred bytes).
pub const MAX_BODY_BYTES: usize = guard::DEFAULT_MAX_BODY_BYTES;

/// Why a console request failed; each maps to an HTTP status and a JSON body
/// `{"error": message, "errors": [..]}` a person can act on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConsoleError {
    /// No such keyspace, run, node or page (404).
    #[error("{0}")]
    NotFound(String),
    /// The request itself is malformed: bad JSON, a bad run id (400).
    #[error("{0}")]
    BadRequest(String),
    /// The script, params or start nodes do not validate; every problem is listed (422).
    #[error("{message}")]
    Invalid {
        /// One line saying what was refused.
        message: String,
        /// Every validation error, one per line.
        errors: Vec<String>,
    },
    /// A state change without the right token (401).
    #[error("{0}")]
    Unauthorized(String),
    /// A file outside the configured file roots (403); the message never says whether it
    /// exists.
    #[error("{0}")]
    Forbidden(String),
    /// The ledger refused the change (a stopped run, a keyspace in use) (409).
    #[error("{0}")]
    Conflict(String),
    /// This server cannot do that at all (a peer started without a script compiler) (501).
    #[error("{0}")]
    Unsupported(String),
    /// No leader or no store right now; trying again may work (503).
    #[error("{0}")]
    Unavailable(String),
    /// Anything else (500).
    #[error("{0}")]
    Internal(String),
}

impl ConsoleError {
    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        match self {
            Self::NotFound(_) => 404,
            Self::BadRequest(_) => 400,
            Self::Invalid { .. } => 422,
            Self::Unauthorized(_) => 401,
            Self::Forbidden(_) => 403,
            Self::Conflict(_) => 409,
            Self::Unsupported(_) => 501,
            Self::Unavailable(_) => 503,
            Self::Internal(_) => 500,
        }
    }

    fn body(&self) -> Value {
        let errors = match self {
            Self::Invalid { errors, .. } => errors.clone(),
            _ => Vec::new(),
        };
        json!({ "error": self.to_string(), "errors": errors })
    }
}

/// A start request as the API receives it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StartRequest {
    /// Script file or URL.
    pub script_url: String,
    /// Params file or URL.
    #[serde(default)]
    pub params_url: Option<String>,
    /// Start nodes: a list or a comma-separated string (empty: every file reader).
    #[serde(default)]
    pub start_nodes: StartNodes,
    /// Free text recorded with the run.
    #[serde(default)]
    pub description: String,
    /// Where the files the request and its script name may be read from; set by the console
    /// from its settings, never from the request.
    #[serde(skip)]
    pub file_roots: FileRoots,
}

/// Start nodes as a JSON list or as Capillaries' comma-separated string.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum StartNodes {
    /// `["a", "b"]`.
    List(Vec<String>),
    /// `"a,b"`.
    Text(String),
}

impl Default for StartNodes {
    fn default() -> Self {
        Self::List(Vec::new())
    }
}

impl StartNodes {
    /// The entries as typed (the caller trims and checks them like `planner run` does).
    pub fn entries(&self) -> Vec<String> {
        match self {
            Self::List(v) => v.clone(),
            Self::Text(s) if s.trim().is_empty() => Vec::new(),
            Self::Text(s) => s.split(',').map(str::to_owned).collect(),
        }
    }
}

impl StartRequest {
    /// The description recorded with the run: the one given, else where the script came from.
    pub fn run_description(&self) -> String {
        if !self.description.trim().is_empty() {
            return self.description.clone();
        }
        match self.params_url.as_deref().filter(|p| !p.trim().is_empty()) {
            Some(p) => format!("console: {} --params {p}", self.script_url),
            None => format!("console: {}", self.script_url),
        }
    }
}

/// A start request loaded, validated and compiled: what a backend submits.
#[derive(Clone, Debug)]
pub struct CompiledStart {
    /// The compiled plan.
    pub plan: Plan,
    /// The start nodes, checked and cleaned (every file reader when none was given).
    pub start_nodes: Vec<String>,
    /// Start-node warnings (dropped empty entries), for the operator.
    pub warnings: Vec<String>,
}

/// Turns a start request's script and params into a plan, as `planner run` does. The planner
/// implements it (scripts are its business; it sits above this crate) and the `plexus-node`
/// binary hands it to each peer, so a peer's console can start runs.
pub trait PlanCompiler: Send + Sync {
    /// The plan and start nodes, or every validation error as [`ConsoleError::Invalid`].
    fn compile(&self, req: &StartRequest) -> Result<CompiledStart, ConsoleError>;
}

/// A started run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    /// Its id.
    pub run_id: u32,
    /// Start-node warnings (dropped empty entries), for the operator.
    pub warnings: Vec<String>,
}

/// What a console's backend can do, shown by the pages (buttons appear only when allowed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendInfo {
    /// `embedded` or `cluster`.
    pub kind: &'static str,
    /// The data directory, or the peer's name.
    pub name: String,
    /// Whether runs can be started here.
    pub can_start: bool,
    /// Whether keyspaces can be dropped here.
    pub can_drop: bool,
}

/// The store and ledger behind a console: the embedded store of `planner serve`, or a peer.
/// Calls block; the listener makes them on a plain thread.
pub trait ConsoleBackend: Send + Sync + 'static {
    /// What this backend is and can do.
    fn info(&self) -> BackendInfo;
    /// Names of the keyspaces with a ledger, sorted.
    fn keyspaces(&self) -> Result<Vec<String>, ConsoleError>;
    /// The ledger of one keyspace (its runs and their plans); `None` for an unknown keyspace.
    fn ledger(&self, keyspace: &str) -> Result<Option<Ledger>, ConsoleError>;
    /// Validates the script like `planner run` does and starts a run of it.
    fn start_run(&self, keyspace: &str, req: &StartRequest) -> Result<Started, ConsoleError>;
    /// Stops a run (`StopRun`): running batches finish, the others are marked stopreceived.
    fn stop_run(&self, keyspace: &str, run_id: u32, comment: &str) -> Result<(), ConsoleError>;
    /// Drops a keyspace with its tables and history.
    fn drop_keyspace(&self, keyspace: &str) -> Result<(), ConsoleError>;
    /// The store the tables are in, for the table pages; `None` where this console cannot
    /// reach it (`planner serve --cluster` talks to peers only).
    fn store(&self) -> Option<Arc<dyn crate::store::Store>> {
        None
    }
}

/// Who may use the console: every state change (POST, DELETE) needs the token (or a client
/// certificate of the cluster CA on a peer's HTTPS listener); reads need it only with
/// `protect_reads`; without a token no state change is possible.
#[derive(Clone, Default)]
pub struct ConsoleSettings {
    /// Bearer token for state changes (and reads with `protect_reads`).
    pub token: Option<String>,
    /// Reads need the token too.
    pub protect_reads: bool,
    /// What compiles the scripts of runs started on a peer's console; without one, a peer
    /// refuses starts (`planner serve` compiles them itself and ignores this).
    pub compiler: Option<Arc<dyn PlanCompiler>>,
    /// Where scripts, params and the files they name may be read from (none: starts refused).
    pub file_roots: FileRoots,
    /// Host/Origin checks and limits of the listener serving the console.
    pub http: HttpGuard,
    /// A peer's console on a listener of its own (else on the metrics listener).
    pub listen: Option<std::net::SocketAddr>,
    /// A peer's console listener serves HTTPS with the peer's certificate.
    pub tls: bool,
    /// With `tls`: only clients with a certificate of the cluster CA may connect.
    pub require_client_cert: bool,
}

impl fmt::Debug for ConsoleSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token is a secret: never in logs.
        f.debug_struct("ConsoleSettings")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("protect_reads", &self.protect_reads)
            .field("compiler", &self.compiler.is_some())
            .field("file_roots", &self.file_roots)
            .field("http", &self.http)
            .field("listen", &self.listen)
            .field("tls", &self.tls)
            .field("require_client_cert", &self.require_client_cert)
            .finish()
    }
}

/// A fresh console token: 32 random bytes from the ring provider's system generator, hex.
pub fn generate_token() -> Result<String, ConsoleError> {
    let provider = rustls::crypto::ring::default_provider();
    let mut b = [0u8; 32];
    provider
        .secure_random
        .fill(&mut b)
        .map_err(|_| ConsoleError::Internal("the system random generator failed".to_owned()))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Reads a token file (its first line, trimmed); an empty file is an error.
pub fn read_token_file(path: &std::path::Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path)?;
    let t = text.lines().next().unwrap_or_default().trim().to_owned();
    if t.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} holds no token", path.display()),
        ));
    }
    Ok(t)
}

/// The token in `path`, or a fresh one written there (mode 0600) when the file is missing:
/// a peer without a configured token still has one, readable only by its operator.
pub fn load_or_create_token(path: &std::path::Path) -> Result<String, ConsoleError> {
    match read_token_file(path) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let t = generate_token()?;
            crate::fsmode::write_private(path, format!("{t}\n").as_bytes()).map_err(|e| {
                ConsoleError::Internal(format!("cannot write {}: {e}", path.display()))
            })?;
            Ok(t)
        }
        Err(e) => Err(ConsoleError::Internal(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

/// One HTTP request, as the console sees it.
#[derive(Clone, Debug)]
pub struct HttpRequest<'a> {
    /// `GET`, `POST`, …
    pub method: &'a str,
    /// The path, percent-encoded.
    pub path: &'a str,
    /// The query string (after `?`), if any.
    pub query: Option<&'a str>,
    /// The `Authorization` header.
    pub authorization: Option<&'a str>,
    /// The `Cookie` header.
    pub cookie: Option<&'a str>,
    /// The `Host` header (names the token cookie per port).
    pub host: Option<&'a str>,
    /// Whether the request came over TLS (the cookie is then `Secure`).
    pub tls: bool,
    /// Whether the client presented a certificate of the cluster CA (TLS listener of a peer).
    pub client_cert: bool,
    /// The body.
    pub body: &'a [u8],
}

/// One HTTP response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Methods of the path, on a 405.
    pub allow: Option<&'static str>,
    /// A `Set-Cookie` header (the token cookie after a login).
    pub set_cookie: Option<String>,
    /// A `Location` header (the redirect after a login link).
    pub location: Option<String>,
    /// The body.
    pub body: Vec<u8>,
}

impl HttpResponse {
    fn json(status: u16, v: &Value) -> Self {
        Self {
            status,
            content_type: "application/json",
            allow: None,
            set_cookie: None,
            location: None,
            body: v.to_string().into_bytes(),
        }
    }

    fn error(e: &ConsoleError) -> Self {
        Self::json(e.status(), &e.body())
    }

    fn text(content_type: &'static str, body: &str) -> Self {
        Self {
            status: 200,
            content_type,
            allow: None,
            set_cookie: None,
            location: None,
            body: body.as_bytes().to_vec(),
        }
    }
}

/// The console: routes requests to the pages and the API over one backend.
pub struct Console {
    backend: Box<dyn ConsoleBackend>,
    settings: ConsoleSettings,
}

/// Whether a request is a read or a state change, for the token check.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

impl Console {
    /// A console over `backend`.
    pub fn new(backend: Box<dyn ConsoleBackend>, settings: ConsoleSettings) -> Self {
        Self { backend, settings }
    }

    /// Whether `path` belongs to the console (the listener sends the rest to its own routes).
    pub fn owns(path: &str) -> bool {
        path == "/"
            || path == "/index.html"
            || path.starts_with("/api/")
            || path == "/api"
            || path.starts_with("/assets/")
            || webapi::owns(path.trim_end_matches('/'))
    }

    /// Answers one request.
    pub fn handle(&self, req: &HttpRequest<'_>) -> HttpResponse {
        let path = req.path.trim_end_matches('/');
        let path = if path.is_empty() { "/" } else { path };
        let login = req
            .query
            .is_some_and(|q| q.split('&').any(|kv| kv.starts_with("token=")));
        if webapi::owns(path) && !login {
            return webapi::handle(self, req, path);
        }
        if !path.starts_with("/api") {
            return self.page(req, path);
        }
        let segs: Vec<String> = path
            .trim_start_matches("/api")
            .split('/')
            .filter(|s| !s.is_empty())
            .map(percent_decode)
            .collect();
        let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
        match self.api(req, &segs) {
            Ok(r) => r,
            Err(e) => HttpResponse::error(&e),
        }
    }

    fn page(&self, req: &HttpRequest<'_>, path: &str) -> HttpResponse {
        let method = req.method;
        if method != "GET" && method != "HEAD" {
            return HttpResponse {
                status: 405,
                allow: Some("GET"),
                ..HttpResponse::error(&ConsoleError::BadRequest(format!(
                    "{method} {path}: pages are read with GET"
                )))
            };
        }
        // The link `planner serve` prints carries the token once: it becomes an HttpOnly
        // cookie and the browser is sent on to the same page without it.
        if let Some(given) = req.query.and_then(|q| {
            q.split('&')
                .find_map(|kv| kv.strip_prefix("token="))
                .map(percent_decode)
        }) {
            return if self.token_matches(&given) {
                HttpResponse {
                    status: 303,
                    location: Some(path.to_owned()),
                    set_cookie: Some(self.cookie_header(req, Some(&given))),
                    ..HttpResponse::text("text/plain; charset=utf-8", "signed in\n")
                }
            } else {
                HttpResponse {
                    status: 401,
                    ..HttpResponse::text(
                        "text/plain; charset=utf-8",
                        "the token in this link is wrong: use the link planner serve printed\n",
                    )
                }
            };
        }
        match path {
            "/assets/app.js" => HttpResponse::text("text/javascript; charset=utf-8", APP_JS),
            "/assets/style.css" => HttpResponse::text("text/css; charset=utf-8", STYLE_CSS),
            p if p == "/" || p == "/index.html" || webapi::owns(p) => {
                HttpResponse::text("text/html; charset=utf-8", INDEX_HTML)
            }
            p => HttpResponse::error(&ConsoleError::NotFound(format!("no page {p}"))),
        }
    }

    /// Whether `given` is the token (compared in constant time).
    fn token_matches(&self, given: &str) -> bool {
        self.settings
            .token
            .as_ref()
            .is_some_and(|t| bool::from(t.as_bytes().ct_eq(given.as_bytes())))
    }

    /// The token cookie's name: one per port, so consoles on one host do not sign each other
    /// out (cookies ignore ports).
    fn cookie_name(req: &HttpRequest<'_>) -> String {
        let port = req
            .host
            .and_then(|h| h.rsplit_once(':'))
            .map(|(_, p)| p)
            .filter(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
            .unwrap_or(if req.tls { "443" } else { "80" });
        format!("plexus_token_{port}")
    }

    /// A `Set-Cookie` value holding `token` (`None`: clears it). HttpOnly (no script reads
    /// it), SameSite=Strict (no other site's page sends it), Secure over TLS.
    fn cookie_header(&self, req: &HttpRequest<'_>, token: Option<&str>) -> String {
        let name = Self::cookie_name(req);
        let secure = if req.tls { "; Secure" } else { "" };
        match token {
            Some(t) => format!("{name}={t}; Path=/; HttpOnly; SameSite=Strict{secure}"),
            None => format!("{name}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}"),
        }
    }

    /// Whether the request carries the token (bearer or cookie) or a cluster client
    /// certificate.
    fn authenticated(&self, req: &HttpRequest<'_>) -> bool {
        if req.client_cert {
            return true;
        }
        // RFC 9110: the scheme is case-insensitive.
        let bearer = req.authorization.and_then(|h| {
            let (scheme, rest) = h.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        });
        if bearer.is_some_and(|b| self.token_matches(b)) {
            return true;
        }
        let name = Self::cookie_name(req);
        req.cookie.is_some_and(|c| {
            c.split(';').any(|kv| {
                kv.trim()
                    .split_once('=')
                    .is_some_and(|(k, v)| k == name && self.token_matches(v))
            })
        })
    }

    fn authorize(&self, req: &HttpRequest<'_>, access: Access) -> Result<(), ConsoleError> {
        let s = &self.settings;
        if access == Access::Read && !s.protect_reads {
            return Ok(());
        }
        if s.token.is_none() && !req.client_cert {
            return Err(ConsoleError::Unauthorized(
                "state changes are disabled: this server has no console token".to_owned(),
            ));
        }
        if self.authenticated(req) {
            return Ok(());
        }
        let given = req.authorization.is_some()
            || req
                .cookie
                .is_some_and(|c| c.contains(&Self::cookie_name(req)));
        Err(ConsoleError::Unauthorized(if given {
            "the console token is wrong".to_owned()
        } else {
            format!(
                "{} needs the console token: open the link the server printed, or send Authorization: Bearer <token>",
                if access == Access::Write {
                    "a state change"
                } else {
                    "reading"
                }
            )
        }))
    }

    /// `POST /api/session {"token": …}`: checks the token and sets it as the cookie;
    /// `DELETE /api/session` clears it.
    fn session(&self, req: &HttpRequest<'_>) -> Result<HttpResponse, ConsoleError> {
        if req.method == "DELETE" {
            return Ok(HttpResponse {
                set_cookie: Some(self.cookie_header(req, None)),
                ..HttpResponse::json(200, &json!({ "signed_in": false }))
            });
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Login {
            token: String,
        }
        let login: Login = serde_json::from_slice(req.body).map_err(|_| {
            ConsoleError::BadRequest("a sign-in takes {\"token\": \"…\"}".to_owned())
        })?;
        let token = login.token.trim();
        if !self.token_matches(token) {
            return Err(ConsoleError::Unauthorized(
                "the console token is wrong".to_owned(),
            ));
        }
        Ok(HttpResponse {
            set_cookie: Some(self.cookie_header(req, Some(token))),
            ..HttpResponse::json(200, &json!({ "signed_in": true }))
        })
    }

    /// Refuses a start whose script or params lie outside the file roots (one message for
    /// every such file, whether it exists or not).
    fn check_roots(&self, start: &StartRequest) -> Result<(), ConsoleError> {
        let roots = &self.settings.file_roots;
        if roots.is_empty() {
            return Err(ConsoleError::Forbidden(
                "the run was not started: this server has no file roots, so it reads no script (planner serve --file-root DIR, or [console] file-roots in node.toml)".to_owned(),
            ));
        }
        for url in std::iter::once(start.script_url.as_str())
            .chain(start.params_url.as_deref().filter(|p| !p.trim().is_empty()))
        {
            roots
                .check(url)
                .map_err(|e| ConsoleError::Forbidden(format!("the run was not started: {e}")))?;
        }
        Ok(())
    }

    fn api(&self, req: &HttpRequest<'_>, segs: &[&str]) -> Result<HttpResponse, ConsoleError> {
        let m = req.method;
        let not_allowed = |allow: &'static str| -> Result<HttpResponse, ConsoleError> {
            Ok(HttpResponse {
                status: 405,
                allow: Some(allow),
                ..HttpResponse::error(&ConsoleError::BadRequest(format!(
                    "{m} is not allowed here; use {allow}"
                )))
            })
        };
        let read = || self.authorize(req, Access::Read);
        let write = || self.authorize(req, Access::Write);
        match segs {
            ["info"] => match m {
                "GET" => {
                    read()?;
                    Ok(HttpResponse::json(200, &self.info(req)))
                }
                _ => not_allowed("GET"),
            },
            ["session"] => match m {
                "POST" | "DELETE" => self.session(req),
                _ => not_allowed("POST, DELETE"),
            },
            ["keyspaces"] => match m {
                "GET" => {
                    read()?;
                    Ok(HttpResponse::json(200, &self.keyspaces()?))
                }
                _ => not_allowed("GET"),
            },
            ["keyspaces", ks] => match m {
                "DELETE" => {
                    write()?;
                    check_name("keyspace", ks)?;
                    self.backend.drop_keyspace(ks)?;
                    Ok(HttpResponse::json(200, &json!({ "dropped": ks })))
                }
                "GET" => {
                    read()?;
                    Ok(HttpResponse::json(200, &self.matrix(ks)?))
                }
                _ => not_allowed("GET, DELETE"),
            },
            ["keyspaces", ks, "runs"] => match m {
                "GET" => {
                    read()?;
                    Ok(HttpResponse::json(200, &self.matrix(ks)?))
                }
                "POST" => {
                    write()?;
                    check_name("keyspace", ks)?;
                    let mut start: StartRequest = parse_body(req.body)?;
                    if start.script_url.trim().is_empty() {
                        return Err(ConsoleError::Invalid {
                            message: "the run was not started: the script URL is empty".into(),
                            errors: vec!["script_url: give the script's path or URL".into()],
                        });
                    }
                    self.check_roots(&start)?;
                    start.file_roots = self.settings.file_roots.clone();
                    let started = self.backend.start_run(ks, &start)?;
                    Ok(HttpResponse::json(
                        201,
                        &json!({ "keyspace": ks, "run_id": started.run_id, "warnings": started.warnings }),
                    ))
                }
                _ => not_allowed("GET, POST"),
            },
            ["keyspaces", ks, "runs", run] => match m {
                "GET" => {
                    read()?;
                    let (ledger, run) = self.run_of(ks, run)?;
                    let r = ledger.run(ks, run).map_err(not_found)?;
                    Ok(HttpResponse::json(200, &run_json(&ledger, r)))
                }
                _ => not_allowed("GET"),
            },
            ["keyspaces", ks, "runs", run, "stop"] => match m {
                "POST" => {
                    write()?;
                    let run = parse_run(run)?;
                    #[derive(Deserialize, Default)]
                    #[serde(deny_unknown_fields)]
                    struct Stop {
                        #[serde(default)]
                        comment: String,
                    }
                    let stop: Stop = if req.body.iter().all(u8::is_ascii_whitespace) {
                        Stop::default()
                    } else {
                        parse_body(req.body)?
                    };
                    self.stop(ks, run, &stop.comment, "stopped from the console")?;
                    Ok(HttpResponse::json(
                        200,
                        &json!({ "keyspace": ks, "run_id": run, "status": "stop" }),
                    ))
                }
                _ => not_allowed("POST"),
            },
            ["keyspaces", ks, "runs", run, "nodes"] => match m {
                "GET" => {
                    read()?;
                    let (ledger, run) = self.run_of(ks, run)?;
                    Ok(HttpResponse::json(
                        200,
                        &node_history_json(&ledger, ks, run)?,
                    ))
                }
                _ => not_allowed("GET"),
            },
            ["keyspaces", ks, "runs", run, "nodes", node, "batches"] => match m {
                "GET" => {
                    read()?;
                    let (ledger, run) = self.run_of(ks, run)?;
                    Ok(HttpResponse::json(
                        200,
                        &batches_json(&ledger, ks, run, node)?,
                    ))
                }
                _ => not_allowed("GET"),
            },
            ["keyspaces", ks, "runs", run, "dag.svg"] => match m {
                "GET" => {
                    read()?;
                    let (ledger, run) = self.run_of(ks, run)?;
                    let r = ledger.run(ks, run).map_err(not_found)?;
                    let plan = ledger.plan(&r.plan_hash).ok_or_else(|| {
                        ConsoleError::Internal(format!("the plan of run {run} is missing"))
                    })?;
                    let statuses = ledger.node_statuses(ks, run).map_err(not_found)?;
                    let svg = dag::svg(plan, Some(statuses.as_slice()), Some(r.status().name()));
                    Ok(HttpResponse {
                        status: 200,
                        content_type: "image/svg+xml",
                        allow: None,
                        set_cookie: None,
                        location: None,
                        body: svg.into_bytes(),
                    })
                }
                _ => not_allowed("GET"),
            },
            ["keyspaces", ks, "tables"] => match m {
                "GET" => {
                    read()?;
                    let (store, ledger) = self.tables_of(ks)?;
                    let list = crate::tables::list(&*store, &ledger, ks, query_u32(req, "run")?)
                        .map_err(table_error)?;
                    let tables: Vec<Value> = list
                        .iter()
                        .map(|t| {
                            json!({
                                "name": t.name,
                                "run_id": t.run_id,
                                "stored_as": t.stored_as(),
                                "created_by": t.created_by,
                                "rows": t.rows,
                                "batch_rows": t.batch_rows,
                                "columns": columns_json(&t.schema),
                            })
                        })
                        .collect();
                    Ok(HttpResponse::json(
                        200,
                        &json!({ "keyspace": ks, "tables": tables }),
                    ))
                }
                _ => not_allowed("GET"),
            },
            ["keyspaces", ks, "tables", table] => match m {
                "GET" => {
                    read()?;
                    let (store, ledger) = self.tables_of(ks)?;
                    let limit = query_u32(req, "limit")?.map_or(50, |l| l.clamp(1, 1000)) as usize;
                    let filter = crate::tables::RowFilter {
                        run: query_u32(req, "run")?,
                        batch: query_u32(req, "batch")?,
                        limit: Some(limit),
                    };
                    let t = crate::tables::rows(&*store, &ledger, ks, table, filter)
                        .map_err(table_error)?;
                    let order = crate::tables::display_order(&t.info.schema);
                    let rows = t
                        .rows
                        .iter()
                        .map(|(rowid, values)| {
                            let mut r = vec![Value::from(rowid.to_string())];
                            for v in order.iter().filter_map(|&i| values.get(i)) {
                                r.push(Value::from(crate::tables::render(v).map_err(table_error)?));
                            }
                            Ok(Value::Array(r))
                        })
                        .collect::<Result<Vec<_>, ConsoleError>>()?;
                    Ok(HttpResponse::json(
                        200,
                        &json!({
                            "keyspace": ks,
                            "table": t.info.name,
                            "run_id": t.info.run_id,
                            "stored_as": t.info.stored_as(),
                            "created_by": t.info.created_by,
                            "rows_total": t.info.rows,
                            "batch_rows": t.info.batch_rows,
                            "columns": columns_json(&t.info.schema),
                            "rows": rows,
                        }),
                    ))
                }
                _ => not_allowed("GET"),
            },
            ["keyspaces", ks, "tables", table, "csv"] => match m {
                "GET" => {
                    read()?;
                    let (store, ledger) = self.tables_of(ks)?;
                    let filter = crate::tables::RowFilter {
                        run: query_u32(req, "run")?,
                        batch: query_u32(req, "batch")?,
                        limit: None,
                    };
                    let t = crate::tables::rows(&*store, &ledger, ks, table, filter)
                        .map_err(table_error)?;
                    let text = crate::tables::to_text(&t, crate::tables::TableFormat::Csv)
                        .map_err(table_error)?;
                    Ok(HttpResponse {
                        body: text.into_bytes(),
                        ..HttpResponse::text("text/csv; charset=utf-8", "")
                    })
                }
                _ => not_allowed("GET"),
            },
            _ => Err(ConsoleError::NotFound(format!(
                "no API endpoint /api/{}; see /api/info and the README",
                segs.join("/")
            ))),
        }
    }

    /// The store and ledger of a keyspace, for its tables.
    fn tables_of(&self, ks: &str) -> Result<(Arc<dyn crate::store::Store>, Ledger), ConsoleError> {
        let ledger = self.known(ks)?;
        let store = self.backend.store().ok_or_else(|| {
            ConsoleError::Unsupported(
                "this console reaches the cluster's ledger, not its store: open a peer's console or use planner table".to_owned(),
            )
        })?;
        Ok((store, ledger))
    }

    /// Stops a running run (`comment`, else `default_comment`); a run that is not running is
    /// refused with its status.
    fn stop(
        &self,
        ks: &str,
        run: u32,
        comment: &str,
        default_comment: &str,
    ) -> Result<(), ConsoleError> {
        let (ledger, _) = self.run_of(ks, &run.to_string())?;
        // The ledger's own rule, as the CLI and the toolbelt meet it.
        ledger.stoppable(ks, run).map_err(|e| match e {
            plexus_raft::LedgerError::RunNotRunning { .. } => ConsoleError::Conflict(e.to_string()),
            e => not_found(e),
        })?;
        let comment = if comment.trim().is_empty() {
            default_comment
        } else {
            comment
        };
        self.backend.stop_run(ks, run, comment)
    }

    fn info(&self, req: &HttpRequest<'_>) -> Value {
        let i = self.backend.info();
        let s = &self.settings;
        let writes = s.token.is_some() || req.client_cert;
        json!({
            "backend": i.kind,
            "name": i.name,
            "token_required": true,
            "signed_in": self.authenticated(req),
            "writes": {
                "start": writes && i.can_start,
                "stop": writes,
                "drop": writes && i.can_drop,
            },
        })
    }

    /// The ledger of a keyspace that exists.
    fn known(&self, ks: &str) -> Result<Ledger, ConsoleError> {
        check_name("keyspace", ks)?;
        self.backend.ledger(ks)?.ok_or_else(|| {
            ConsoleError::NotFound(format!(
                "unknown keyspace {ks:?}; GET /api/keyspaces lists the keyspaces"
            ))
        })
    }

    fn run_of(&self, ks: &str, run: &str) -> Result<(Ledger, u32), ConsoleError> {
        let run = parse_run(run)?;
        let ledger = self.known(ks)?;
        ledger
            .run(ks, run)
            .map_err(|_| ConsoleError::NotFound(format!("keyspace {ks} has no run {run}")))?;
        Ok((ledger, run))
    }

    fn keyspaces(&self) -> Result<Value, ConsoleError> {
        let mut out = Vec::new();
        for name in self.backend.keyspaces()? {
            let Some(ledger) = self.backend.ledger(&name)? else {
                continue;
            };
            let Ok(ks) = ledger.keyspace(&name) else {
                continue;
            };
            let last = ks.runs.values().next_back();
            out.push(json!({
                "name": name,
                "runs": ks.runs.len(),
                "last_run": last.map(|r| r.run_id),
                "last_status": last.map(|r| r.status().name()),
                "last_outcome": last.map(|r| r.outcome().word()),
                "last_ts_ms": last.and_then(|r| r.history.iter().map(|h| h.ts_ms).max()),
            }));
        }
        Ok(json!({ "keyspaces": out }))
    }

    fn matrix(&self, ks: &str) -> Result<Value, ConsoleError> {
        let ledger = self.known(ks)?;
        let keyspace = ledger.keyspace(ks).map_err(not_found)?;
        // Columns: the nodes of the newest run's plan in plan order, then nodes only older
        // plans have.
        let mut nodes: Vec<Value> = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for run in keyspace.runs.values().rev() {
            if let Some(plan) = ledger.plan(&run.plan_hash) {
                for n in &plan.nodes {
                    if seen.insert(n.name.clone()) {
                        nodes.push(json!({
                            "name": n.name,
                            "type": n.node_type.name(),
                            "desc": n.desc,
                            "manual": n.start_policy == plexus_core::plan::StartPolicy::Manual,
                        }));
                    }
                }
            }
        }
        let runs: Vec<Value> = keyspace
            .runs
            .values()
            .map(|r| run_json(&ledger, r))
            .collect();
        Ok(json!({ "keyspace": ks, "nodes": nodes, "runs": runs }))
    }
}

/// A run with one cell per processed node.
fn run_json(ledger: &Ledger, r: &Run) -> Value {
    let at = |s: RunStatus| {
        r.history
            .iter()
            .filter(|h| h.status == s)
            .max_by_key(|h| (h.ts_ms, h.seq))
    };
    let mut cells = serde_json::Map::new();
    for name in &r.processed {
        let Some(nr) = r.nodes.get(name) else {
            continue;
        };
        let count = |s: NodeBatchStatus| nr.batches.iter().filter(|b| b.status == s).count();
        let started = nr
            .history
            .iter()
            .filter(|h| h.status == NodeBatchStatus::Start)
            .map(|h| h.ts_ms)
            .min();
        let finished = nr
            .history
            .iter()
            .filter(|h| h.status.is_final())
            .map(|h| h.ts_ms)
            .max();
        cells.insert(
            name.clone(),
            json!({
                "status": nr.status.name(),
                "batches_total": nr.batches_total(),
                "done": count(NodeBatchStatus::Success),
                "failed": count(NodeBatchStatus::Fail),
                "running": count(NodeBatchStatus::Start),
                "started_ms": started,
                "finished_ms": finished.filter(|_| nr.status.is_final()),
            }),
        );
    }
    let plan_hash = ledger.plan(&r.plan_hash).map(|_| r.plan_hash.to_string());
    json!({
        "run_id": r.run_id,
        "status": r.status().name(),
        // What the badge shows: `status` is Capillaries' raw value, which calls a run with
        // failed nodes "complete".
        "outcome": r.outcome().word(),
        "outcome_text": r.outcome().to_string(),
        "description": r.description,
        "start_nodes": r.start_nodes,
        "affected_nodes": r.affected_nodes,
        "only_start_nodes": r.only_start_nodes,
        "plan_hash": plan_hash,
        "started_ms": at(RunStatus::Start).map(|h| h.ts_ms),
        "completed_ms": at(RunStatus::Complete).map(|h| h.ts_ms),
        "stopped_ms": at(RunStatus::Stop).map(|h| h.ts_ms),
        "stopped_comment": at(RunStatus::Stop).map(|h| h.comment.clone()),
        "nodes": cells,
    })
}

fn node_history_json(ledger: &Ledger, ks: &str, run: u32) -> Result<Value, ConsoleError> {
    let r = ledger.run(ks, run).map_err(not_found)?;
    let rows = ledger
        .node_history(ks, &[run], &[])
        .map_err(not_found)?
        .into_iter()
        .map(|h| {
            json!({
                "ts_ms": h.ts_ms,
                "node": h.node,
                "batch_idx": h.written_by_batch_idx,
                "status": h.status.name(),
                "comment": h.comment,
            })
        })
        .collect::<Vec<_>>();
    Ok(json!({ "run": run_json(ledger, r), "history": rows }))
}

fn batches_json(ledger: &Ledger, ks: &str, run: u32, node: &str) -> Result<Value, ConsoleError> {
    let r = ledger.run(ks, run).map_err(not_found)?;
    let Some(nr) = r.nodes.get(node) else {
        let known = ledger
            .plan(&r.plan_hash)
            .is_some_and(|p| p.node(node).is_some());
        return Err(ConsoleError::NotFound(if known {
            format!("run {run} of {ks} does not process node {node}")
        } else {
            format!("the script of run {run} has no node {node:?}")
        }));
    };
    let node_type = ledger
        .plan(&r.plan_hash)
        .and_then(|p| p.node(node))
        .map(|n| n.node_type.name());
    let batches: Vec<Value> = nr
        .batches
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let last_start = b
                .history
                .iter()
                .filter(|h| h.status == NodeBatchStatus::Start)
                .max_by_key(|h| (h.ts_ms, h.seq));
            let fin = b
                .history
                .iter()
                .filter(|h| h.status.is_final())
                .max_by_key(|h| (h.ts_ms, h.seq));
            let instance = b
                .claim
                .as_ref()
                .map(|c| c.worker.clone())
                .or_else(|| last_start.map(|h| h.instance.clone()))
                .unwrap_or_default();
            json!({
                "batch_idx": i,
                "status": b.status.name(),
                "attempts": b.attempts,
                "instance": instance,
                "started_ms": last_start.map(|h| h.ts_ms),
                "finished_ms": fin.map(|h| h.ts_ms),
                "elapsed_ms": fin.and_then(|h| h.elapsed_ms),
                "rows_in": fin.and_then(|h| h.rows_in),
                "rows_out": fin.and_then(|h| h.rows_out),
                "error": fin.and_then(|h| h.error.clone()),
                "comment": b.history.last().map(|h| h.comment.clone()).unwrap_or_default(),
            })
        })
        .collect();
    let history: Vec<Value> = ledger
        .batch_history(ks, run, node)
        .map_err(not_found)?
        .into_iter()
        .map(|h| {
            json!({
                "ts_ms": h.ts_ms,
                "batch_idx": h.batch_idx,
                "batches_total": h.batches_total,
                "status": h.status.name(),
                "instance": h.instance,
                "first_token": h.first_token,
                "last_token": h.last_token,
                "rows_in": h.rows_in,
                "rows_out": h.rows_out,
                "elapsed_ms": h.elapsed_ms,
                "error": h.error,
                "comment": h.comment,
            })
        })
        .collect();
    Ok(json!({
        "keyspace": ks,
        "run_id": run,
        "run_status": r.status().name(),
        "node": node,
        "node_type": node_type,
        "status": nr.status.name(),
        "batches_total": nr.batches_total(),
        "batches": batches,
        "history": history,
    }))
}

/// A table error as the console reports it.
fn table_error(e: crate::tables::TablesError) -> ConsoleError {
    use crate::tables::TablesError as T;
    match e {
        T::NoTable { .. } | T::NoRun { .. } | T::NoBatch { .. } => {
            ConsoleError::NotFound(e.to_string())
        }
        other => ConsoleError::Internal(other.to_string()),
    }
}

/// `[{"name", "type"}]` of a table's fields, `rowid` first.
fn columns_json(schema: &plexus_core::plan::TableSchema) -> Value {
    let mut cols = vec![json!({ "name": "rowid", "type": "int" })];
    cols.extend(
        crate::tables::display_order(schema)
            .into_iter()
            .map(|i| &schema.fields[i])
            .map(|f| json!({ "name": f.name, "type": f.ty.to_string() })),
    );
    Value::Array(cols)
}

/// A whole-number query parameter (`?run=2`), if given.
fn query_u32(req: &HttpRequest<'_>, name: &str) -> Result<Option<u32>, ConsoleError> {
    let Some(v) = req.query.and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
    }) else {
        return Ok(None);
    };
    v.parse()
        .map(Some)
        .map_err(|_| ConsoleError::BadRequest(format!("{name}={v:?} is not a whole number")))
}

fn not_found(e: plexus_raft::LedgerError) -> ConsoleError {
    ConsoleError::NotFound(e.to_string())
}

fn parse_run(s: &str) -> Result<u32, ConsoleError> {
    s.parse().map_err(|_| {
        ConsoleError::BadRequest(format!("run id {s:?} is not a number (runs are 1, 2, …)"))
    })
}

fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ConsoleError> {
    serde_json::from_slice(body).map_err(|e| {
        ConsoleError::BadRequest(format!(
            "the request body is not the expected JSON: {e} (a start takes {{\"script_url\", \"params_url\", \"start_nodes\", \"description\"}})"
        ))
    })
}

/// Keyspace and node names as Capillaries' webapi accepts them: `[A-Za-z0-9_]+`.
fn check_name(what: &str, s: &str) -> Result<(), ConsoleError> {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(())
    } else {
        Err(ConsoleError::BadRequest(format!(
            "{what} name {s:?} is invalid: use letters, digits and _"
        )))
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_nodes_accept_a_list_or_a_comma_string() {
        let r: StartRequest =
            serde_json::from_str(r#"{"script_url":"s","start_nodes":"a,b"}"#).expect("parses");
        assert_eq!(r.start_nodes.entries(), ["a", "b"]);
        let r: StartRequest =
            serde_json::from_str(r#"{"script_url":"s","start_nodes":["c"]}"#).expect("parses");
        assert_eq!(r.start_nodes.entries(), ["c"]);
        assert!(serde_json::from_str::<StartRequest>(r#"{"script":"s"}"#).is_err());
    }

    /// A backend with no keyspaces that records the stops it is asked for.
    struct Empty(std::sync::Mutex<Vec<String>>);

    impl ConsoleBackend for Empty {
        fn info(&self) -> BackendInfo {
            BackendInfo {
                kind: "embedded",
                name: "test".into(),
                can_start: true,
                can_drop: false,
            }
        }
        fn keyspaces(&self) -> Result<Vec<String>, ConsoleError> {
            Ok(Vec::new())
        }
        fn ledger(&self, _keyspace: &str) -> Result<Option<Ledger>, ConsoleError> {
            Ok(None)
        }
        fn start_run(&self, ks: &str, _req: &StartRequest) -> Result<Started, ConsoleError> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(ks.to_owned());
            Ok(Started {
                run_id: 7,
                warnings: Vec::new(),
            })
        }
        fn stop_run(&self, _ks: &str, _run: u32, _comment: &str) -> Result<(), ConsoleError> {
            Ok(())
        }
        fn drop_keyspace(&self, _keyspace: &str) -> Result<(), ConsoleError> {
            Err(ConsoleError::Unsupported("no drop here".into()))
        }
    }

    fn console(settings: ConsoleSettings) -> Console {
        Console::new(Box::new(Empty(std::sync::Mutex::new(Vec::new()))), settings)
    }

    fn ask(c: &Console, method: &str, path: &str, auth: Option<&str>, body: &str) -> (u16, Value) {
        let r = c.handle(&HttpRequest {
            method,
            path,
            query: None,
            authorization: auth,
            cookie: None,
            host: Some("127.0.0.1:8080"),
            tls: false,
            client_cert: false,
            body: body.as_bytes(),
        });
        let v = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        (r.status, v)
    }

    #[test]
    fn tokens_guard_state_changes_and_optionally_reads() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut roots = FileRoots::default();
        roots.add(&dir.path().display().to_string())?;
        let script = std::fs::canonicalize(dir.path())?.join("s.json");
        let start = &json!({ "script_url": script.display().to_string() }).to_string();
        // No token configured, writes closed (a peer without [console] token).
        let c = console(ConsoleSettings::default());
        assert_eq!(ask(&c, "GET", "/api/keyspaces", None, "").0, 200);
        let (st, v) = ask(&c, "POST", "/api/keyspaces/ks/runs", None, start);
        assert_eq!(st, 401);
        assert!(
            v["error"]
                .as_str()
                .is_some_and(|e| e.contains("no console token"))
        );
        // A token: required for writes, not for reads.
        let c = console(ConsoleSettings {
            token: Some("t".into()),
            file_roots: roots.clone(),
            ..ConsoleSettings::default()
        });
        assert_eq!(
            ask(&c, "POST", "/api/keyspaces/ks/runs", None, start).0,
            401
        );
        assert_eq!(
            ask(
                &c,
                "POST",
                "/api/keyspaces/ks/runs",
                Some("Bearer x"),
                start
            )
            .0,
            401
        );
        let (st, v) = ask(
            &c,
            "POST",
            "/api/keyspaces/ks/runs",
            Some("Bearer t"),
            start,
        );
        assert_eq!((st, v["run_id"].as_u64()), (201, Some(7)));
        assert_eq!(ask(&c, "GET", "/api/info", None, "").0, 200);
        // protect_reads: reads too.
        let c = console(ConsoleSettings {
            token: Some("t".into()),
            protect_reads: true,
            ..ConsoleSettings::default()
        });
        assert_eq!(ask(&c, "GET", "/api/keyspaces", None, "").0, 401);
        assert_eq!(
            ask(&c, "GET", "/api/keyspaces", Some("Bearer t"), "").0,
            200
        );
        // The scheme is case-insensitive; the token is not.
        let c = console(ConsoleSettings {
            token: Some("t".into()),
            file_roots: roots,
            ..ConsoleSettings::default()
        });
        assert_eq!(
            ask(
                &c,
                "POST",
                "/api/keyspaces/ks/runs",
                Some("bearer t"),
                start
            )
            .0,
            201
        );
        assert_eq!(
            ask(
                &c,
                "POST",
                "/api/keyspaces/ks/runs",
                Some("BEARER T"),
                start
            )
            .0,
            401
        );
        Ok(())
    }

    fn request<'a>(
        method: &'a str,
        path: &'a str,
        query: Option<&'a str>,
        cookie: Option<&'a str>,
        body: &'a [u8],
    ) -> HttpRequest<'a> {
        HttpRequest {
            method,
            path,
            query,
            authorization: None,
            cookie,
            host: Some("127.0.0.1:8080"),
            tls: false,
            client_cert: false,
            body,
        }
    }

    #[test]
    fn the_login_link_and_sign_in_set_an_http_only_strict_cookie() {
        let c = console(ConsoleSettings {
            token: Some("t0k".into()),
            ..ConsoleSettings::default()
        });
        let r = c.handle(&request("GET", "/ks/x", Some("token=t0k"), None, b""));
        assert_eq!((r.status, r.location.as_deref()), (303, Some("/ks/x")));
        assert_eq!(
            r.set_cookie.as_deref(),
            Some("plexus_token_8080=t0k; Path=/; HttpOnly; SameSite=Strict")
        );
        assert_eq!(
            c.handle(&request("GET", "/", Some("token=bad"), None, b""))
                .status,
            401
        );
        let start = br#"{"script_url":"/nowhere/s.json"}"#;
        let with = |cookie| {
            c.handle(&request(
                "POST",
                "/api/keyspaces/ks/runs",
                None,
                Some(cookie),
                start,
            ))
            .status
        };
        // The right cookie passes the token check (and meets the empty file roots).
        assert_eq!(with("a=b; plexus_token_8080=t0k"), 403);
        assert_eq!(with("plexus_token_8080=bad"), 401);
        assert_eq!(with("plexus_token_9090=t0k"), 401);
        let r = c.handle(&request(
            "POST",
            "/api/session",
            None,
            None,
            br#"{"token":"t0k"}"#,
        ));
        assert_eq!(r.status, 200);
        assert!(
            r.set_cookie
                .is_some_and(|k| k.starts_with("plexus_token_8080=t0k;"))
        );
        let r = c.handle(&request(
            "POST",
            "/api/session",
            None,
            None,
            br#"{"token":"no"}"#,
        ));
        assert_eq!((r.status, r.set_cookie), (401, None));
    }

    #[test]
    fn starts_read_only_below_the_file_roots() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut roots = FileRoots::default();
        roots.add(&dir.path().display().to_string())?;
        let c = console(ConsoleSettings {
            token: Some("t".into()),
            file_roots: roots,
            ..ConsoleSettings::default()
        });
        let inside = std::fs::canonicalize(dir.path())?.join("s.json");
        let body = json!({ "script_url": inside.display().to_string() }).to_string();
        assert_eq!(
            ask(
                &c,
                "POST",
                "/api/keyspaces/ks/runs",
                Some("Bearer t"),
                &body
            )
            .0,
            201
        );
        let mut refusals = Vec::new();
        for outside in ["/etc/passwd", "/nonexistent/s.json", "s.json"] {
            let body = json!({ "script_url": outside }).to_string();
            let (st, v) = ask(
                &c,
                "POST",
                "/api/keyspaces/ks/runs",
                Some("Bearer t"),
                &body,
            );
            assert_eq!(st, 403, "{outside}");
            refusals.push(
                v["error"]
                    .as_str()
                    .unwrap_or_default()
                    .replace(outside, "X"),
            );
        }
        // One message whether the file exists or not.
        assert_eq!(refusals[0], refusals[1]);
        Ok(())
    }

    #[test]
    fn routes_refuse_with_messages() {
        let c = console(ConsoleSettings {
            token: Some("t".into()),
            ..ConsoleSettings::default()
        });
        let (st, v) = ask(&c, "GET", "/api/keyspaces/nope/runs", None, "");
        assert_eq!(st, 404);
        assert!(
            v["error"]
                .as_str()
                .is_some_and(|e| e.contains("unknown keyspace"))
        );
        assert_eq!(ask(&c, "GET", "/api/keyspaces/a-b/runs", None, "").0, 400);
        assert_eq!(ask(&c, "GET", "/api/keyspaces/ks/runs/x", None, "").0, 400);
        assert_eq!(ask(&c, "PUT", "/api/keyspaces", None, "").0, 405);
        assert_eq!(ask(&c, "GET", "/api/whatever", None, "").0, 404);
        let (st, v) = ask(&c, "POST", "/api/keyspaces/ks/runs", Some("Bearer t"), "{");
        assert_eq!(st, 400);
        assert!(
            v["error"]
                .as_str()
                .is_some_and(|e| e.contains("script_url"))
        );
        let (st, v) = ask(
            &c,
            "POST",
            "/api/keyspaces/ks/runs",
            Some("Bearer t"),
            r#"{"script_url":" "}"#,
        );
        assert_eq!(st, 422);
        assert_eq!(v["errors"].as_array().map(Vec::len), Some(1));
        assert_eq!(
            ask(&c, "DELETE", "/api/keyspaces/ks", Some("Bearer t"), "").0,
            501
        );
        let get = |path| {
            c.handle(&HttpRequest {
                method: "GET",
                path,
                query: None,
                authorization: None,
                cookie: None,
                host: None,
                tls: false,
                client_cert: false,
                body: b"",
            })
        };
        let page = get("/");
        assert_eq!(
            (page.status, page.content_type),
            (200, "text/html; charset=utf-8")
        );
        // `/ks…` is Capillaries' webapi: its envelope, not the page.
        let api = get("/ks/anything");
        let v: Value = serde_json::from_slice(&api.body).unwrap_or_default();
        assert_eq!((api.status, api.content_type), (500, "application/json"));
        assert!(v["data"].is_null() && v["error"].as_str().is_some_and(|e| e.contains("anything")));
        assert!(Console::owns("/assets/app.js") && !Console::owns("/metrics"));
    }

    #[test]
    fn percent_decoding_and_names() {
        assert_eq!(percent_decode("a%5Fb"), "a_b");
        assert_eq!(percent_decode("a%2"), "a%2");
        assert!(check_name("keyspace", "ks_1").is_ok());
        assert!(check_name("keyspace", "ks-1").is_err());
    }
}
