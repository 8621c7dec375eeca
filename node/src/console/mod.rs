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

mod auth;
pub mod dag;
mod error;
pub mod guard;
mod request;
pub mod start;
mod views;
mod webapi;

use std::fmt;
use std::sync::Arc;

use plexus_core::plan::Plan;
use subtle::ConstantTimeEq as _;

pub use auth::{generate_token, load_or_create_token, read_token_file};
pub use error::{ConsoleError, Missing};
use error::{not_found, table_error};
pub use guard::{FileRoots, HttpGuard};
use request::{check_name, parse_body, parse_run, percent_decode, query_u32};
use views::{batches_json, columns_json, node_history_json, run_json};

use plexus_raft::Ledger;
use serde::Deserialize;
use serde_json::{Value, json};

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// Largest request body the console reads by default (a start request is a few hundred bytes).
pub const MAX_BODY_BYTES: usize = guard::DEFAULT_MAX_BODY_BYTES;

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
            .field("file_roots", &self.file_roots)
            .field("http", &self.http)
            .field("listen", &self.listen)
            .field("tls", &self.tls)
            .field("require_client_cert", &self.require_client_cert)
            .finish()
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
            p => HttpResponse::error(&Missing::Page { path: p.to_owned() }.into()),
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
                    let plan =
                        ledger
                            .plan(&r.plan_hash)
                            .ok_or_else(|| ConsoleError::PlanMissing {
                                keyspace: ks.to_string(),
                                run,
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
            _ => Err(Missing::Endpoint {
                path: segs.join("/"),
            }
            .into()),
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
            plexus_raft::LedgerError::RunNotRunning { .. } => ConsoleError::Refused(e),
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
            Missing::Keyspace {
                keyspace: ks.to_owned(),
            }
            .into()
        })
    }

    fn run_of(&self, ks: &str, run: &str) -> Result<(Ledger, u32), ConsoleError> {
        let run = parse_run(run)?;
        let ledger = self.known(ks)?;
        ledger.run(ks, run).map_err(|_| Missing::Run {
            keyspace: ks.to_owned(),
            run,
        })?;
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

#[cfg(test)]
mod tests;
