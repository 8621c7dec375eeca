//! Capillaries' webapi (spec §11), served beside our own API so that Capillaries' UI and the
//! scripts written against it work unchanged: `GET /ks`, `GET /ks/{ks}`,
//! `GET /ks/{ks}/run/{run}/node_history`, `GET /ks/{ks}/run/{run}/node/{node}/batch_history`,
//! `GET /ks/{ks}/run/{run}/viz`, `POST /ks/{ks}/run`, `DELETE /ks/{ks}/run/{run}`,
//! `DELETE /ks/{ks}`. Answers are `{"data": …, "error": ""}`, statuses Capillaries' numbers.
//!
//! The same rules as our API apply (SECURITY.md), which Capillaries' webapi does not have: a
//! state change needs the console token (or a cluster client certificate), starts read only
//! below the file roots, and cross-origin callers must be in `access_control_allow_origin` (the
//! listener answers the CORS preflights). Errors a caller can fix keep their status (401, 403,
//! 404, 405); the others are 500, as in Capillaries.

use plexus_raft::history::RunLifespan;
use plexus_raft::{Ledger, NodeBatchStatus, Run};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    Access, Console, ConsoleError, HttpRequest, HttpResponse, StartNodes, StartRequest, dag,
};

/// Go's `time.Time` in JSON (RFC 3339 with the fraction it has).
const JSON_TIME: &str = "2006-01-02T15:04:05.999999999Z07:00";
/// The matrix's node status times.
const MATRIX_TIME: &str = "2006-01-02T15:04:05.000-0700";

/// Whether `path` (no trailing slash) is one of Capillaries' webapi paths.
pub(super) fn owns(path: &str) -> bool {
    path == "/ks" || path.starts_with("/ks/")
}

/// A time of the ledger (ms since the epoch; `None`: Go's zero time) in `layout`.
fn time(ms: Option<i64>, layout: &str) -> String {
    let t = ms.map_or(
        plexus_core::value::Time::ZERO,
        plexus_core::value::Time::from_unix_millis,
    );
    plexus_core::gotime::format(&t, layout)
}

/// Capillaries' name rule for keyspaces and nodes.
fn name_ok(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The envelope of an answer.
fn ok(data: &Value) -> HttpResponse {
    HttpResponse::json(200, &json!({ "data": data, "error": "" }))
}

/// The envelope of a failure: `data` null, the message in `error`.
fn failed(e: &ConsoleError) -> HttpResponse {
    // A refusal of ours keeps its status (the caller must act on it); the rest are 500 as in
    // Capillaries.
    let status = match e {
        ConsoleError::Unauthorized(_) | ConsoleError::Forbidden(_) => e.status(),
        _ => 500,
    };
    HttpResponse::json(
        status,
        &json!({ "data": Value::Null, "error": e.to_string() }),
    )
}

/// Answers one webapi request; `path` has no trailing slash.
pub(super) fn handle(console: &Console, req: &HttpRequest<'_>, path: &str) -> HttpResponse {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let route = match segs.as_slice() {
        ["ks"] => Some(("GET", Route::Keyspaces)),
        ["ks", ks] if name_ok(ks) => match req.method {
            "DELETE" => Some(("GET, DELETE", Route::Drop(ks))),
            _ => Some(("GET, DELETE", Route::Matrix(ks))),
        },
        ["ks", ks, "run"] if name_ok(ks) => Some(("POST", Route::Start(ks))),
        ["ks", ks, "run", run] if name_ok(ks) => run
            .parse::<u32>()
            .ok()
            .map(|r| ("DELETE", Route::Stop(ks, r))),
        ["ks", ks, "run", run, "node_history"] if name_ok(ks) => run
            .parse::<u32>()
            .ok()
            .map(|r| ("GET", Route::NodeHistory(ks, r))),
        ["ks", ks, "run", run, "node", node, "batch_history"] if name_ok(ks) && name_ok(node) => {
            run.parse::<u32>()
                .ok()
                .map(|r| ("GET", Route::BatchHistory(ks, r, node)))
        }
        ["ks", ks, "run", run, "viz"] if name_ok(ks) => {
            run.parse::<u32>().ok().map(|r| ("GET", Route::Viz(ks, r)))
        }
        _ => None,
    };
    let Some((allow, route)) = route else {
        return HttpResponse::json(
            404,
            &json!({ "data": Value::Null, "error": format!("no webapi endpoint {path}") }),
        );
    };
    let method_ok = match route {
        Route::Start(_) => req.method == "POST",
        Route::Stop(..) | Route::Drop(_) => req.method == "DELETE",
        _ => matches!(req.method, "GET" | "HEAD"),
    };
    if !method_ok {
        return HttpResponse {
            status: 405,
            allow: Some(allow),
            ..HttpResponse::json(
                405,
                &json!({ "data": Value::Null, "error": format!("{} is not allowed here; use {allow}", req.method) }),
            )
        };
    }
    match answer(console, req, route) {
        Ok(r) => r,
        Err(e) => failed(&e),
    }
}

/// A webapi route with its path parameters.
#[derive(Clone, Copy)]
enum Route<'a> {
    Keyspaces,
    Matrix(&'a str),
    NodeHistory(&'a str, u32),
    BatchHistory(&'a str, u32, &'a str),
    Viz(&'a str, u32),
    Start(&'a str),
    Stop(&'a str, u32),
    Drop(&'a str),
}

/// A start request as Capillaries' UI sends it.
#[derive(Deserialize)]
struct WebStart {
    script_url: String,
    #[serde(default)]
    script_params_url: String,
    #[serde(default)]
    start_nodes: String,
    #[serde(default)]
    run_description: String,
}

/// A stop request as Capillaries' UI sends it.
#[derive(Deserialize, Default)]
struct WebStop {
    #[serde(default)]
    comment: String,
}

fn answer(
    console: &Console,
    req: &HttpRequest<'_>,
    route: Route<'_>,
) -> Result<HttpResponse, ConsoleError> {
    let read = || console.authorize(req, Access::Read);
    let write = || console.authorize(req, Access::Write);
    match route {
        Route::Keyspaces => {
            read()?;
            Ok(ok(&json!(console.backend.keyspaces()?)))
        }
        Route::Matrix(ks) => {
            read()?;
            let ledger = console.known(ks)?;
            Ok(ok(&matrix(&ledger, ks)?))
        }
        Route::NodeHistory(ks, run) => {
            read()?;
            let (ledger, run) = console.run_of(ks, &run.to_string())?;
            let r = ledger.run(ks, run).map_err(super::not_found)?;
            let rows = ledger
                .node_history(ks, &[run], &[])
                .map_err(super::not_found)?;
            let history: Vec<Value> = rows
                .iter()
                .map(|h| {
                    json!({
                        "ts": time(Some(h.ts_ms), JSON_TIME),
                        "run_id": h.run_id,
                        "script_node": h.node,
                        "written_by_batch_idx": h.written_by_batch_idx,
                        "status": h.status.code(),
                        "comment": h.comment,
                    })
                })
                .collect();
            Ok(ok(&json!({
                "run_props": run_props(r),
                "run_lifespan": lifespan(&ledger, ks, run)?,
                "node_history": history,
            })))
        }
        Route::BatchHistory(ks, run, node) => {
            read()?;
            let (ledger, run) = console.run_of(ks, &run.to_string())?;
            let r = ledger.run(ks, run).map_err(super::not_found)?;
            let rows = ledger
                .batch_history(ks, run, node)
                .map_err(super::not_found)?;
            let history: Vec<Value> = rows
                .iter()
                .map(|b| {
                    // `instance` is the worker (`n2/3` on a cluster: peer and thread).
                    let (instance, thread) =
                        b.instance.split_once('/').unwrap_or((&b.instance, ""));
                    json!({
                        "ts": time(Some(b.ts_ms), JSON_TIME),
                        "run_id": b.run_id,
                        "script_node": b.node,
                        "batch_idx": b.batch_idx,
                        "batches_total": b.batches_total,
                        "status": b.status.code(),
                        "first_token": b.first_token,
                        "last_token": b.last_token,
                        "instance": instance,
                        "thread": thread,
                        "comment": b.comment,
                    })
                })
                .collect();
            Ok(ok(&json!({
                "run_props": run_props(r),
                "run_lifespan": lifespan(&ledger, ks, run)?,
                "batch_history": history,
            })))
        }
        Route::Viz(ks, run) => {
            read()?;
            let (ledger, run) = console.run_of(ks, &run.to_string())?;
            let r = ledger.run(ks, run).map_err(super::not_found)?;
            let plan = ledger
                .plan(&r.plan_hash)
                .ok_or_else(|| ConsoleError::PlanMissing {
                    keyspace: ks.to_owned(),
                    run,
                })?;
            let statuses = ledger.node_statuses(ks, run).map_err(super::not_found)?;
            let svg = dag::svg(plan, Some(statuses.as_slice()), Some(r.status().name()));
            Ok(HttpResponse {
                content_type: "image/svg+xml",
                body: svg.into_bytes(),
                ..HttpResponse::text("image/svg+xml", "")
            })
        }
        Route::Start(ks) => {
            write()?;
            let web: WebStart = serde_json::from_slice(req.body).map_err(|_| {
                ConsoleError::BadRequest(
                    "a start takes {\"script_url\", \"script_params_url\", \"start_nodes\", \"run_description\"}"
                        .to_owned(),
                )
            })?;
            let mut start = StartRequest {
                script_url: web.script_url,
                params_url: Some(web.script_params_url).filter(|p| !p.trim().is_empty()),
                start_nodes: StartNodes::Text(web.start_nodes),
                description: web.run_description,
                file_roots: super::FileRoots::default(),
            };
            if start.script_url.trim().is_empty() {
                return Err(ConsoleError::BadRequest(
                    "the run was not started: script_url is empty".to_owned(),
                ));
            }
            console.check_roots(&start)?;
            start.file_roots = console.settings.file_roots.clone();
            let started = console.backend.start_run(ks, &start)?;
            Ok(ok(&json!({ "run_id": started.run_id })))
        }
        Route::Stop(ks, run) => {
            write()?;
            let stop: WebStop = if req.body.iter().all(u8::is_ascii_whitespace) {
                WebStop::default()
            } else {
                serde_json::from_slice(req.body).map_err(|_| {
                    ConsoleError::BadRequest("a stop takes {\"comment\": \"…\"}".to_owned())
                })?
            };
            console.stop(ks, run, &stop.comment, "stopped through the webapi")?;
            Ok(ok(&Value::Null))
        }
        Route::Drop(ks) => {
            write()?;
            console.backend.drop_keyspace(ks)?;
            Ok(ok(&Value::Null))
        }
    }
}

/// RunProperties: node lists comma-joined. The ledger keeps the description, not the script
/// URLs, so those are empty.
fn run_props(r: &Run) -> Value {
    json!({
        "run_id": r.run_id,
        "start_nodes": r.start_nodes.join(","),
        "affected_nodes": r.affected_nodes.join(","),
        "script_url": "",
        "script_params_url": "",
        "run_description": r.description,
    })
}

fn lifespan_json(l: &RunLifespan) -> Value {
    let part = |p: &Option<(i64, String)>| {
        (
            time(p.as_ref().map(|(ts, _)| *ts), JSON_TIME),
            p.as_ref().map_or(String::new(), |(_, c)| c.clone()),
        )
    };
    let (start_ts, start_comment) = part(&l.started);
    let (completed_ts, completed_comment) = part(&l.completed);
    let (stopped_ts, stopped_comment) = part(&l.stopped);
    json!({
        "run_id": l.run_id,
        "start_ts": start_ts,
        "start_comment": start_comment,
        "final_status": l.final_status.code(),
        "completed_ts": completed_ts,
        "completed_comment": completed_comment,
        "stopped_ts": stopped_ts,
        "stopped_comment": stopped_comment,
    })
}

fn lifespan(ledger: &Ledger, ks: &str, run: u32) -> Result<Value, ConsoleError> {
    let all = ledger.run_lifespans(ks).map_err(super::not_found)?;
    all.iter()
        .find(|l| l.run_id == run)
        .map(lifespan_json)
        .ok_or_else(|| {
            super::Missing::Run {
                keyspace: ks.to_owned(),
                run,
            }
            .into()
        })
}

/// The run × node matrix: lifespans by run id; nodes that started first (by first start),
/// then the rest by name; one status per run per node, zero-valued where it has no event;
/// descriptions from the plan of the first run.
fn matrix(ledger: &Ledger, ks: &str) -> Result<Value, ConsoleError> {
    let keyspace = ledger.keyspace(ks).map_err(super::not_found)?;
    let lifespans: Vec<Value> = ledger
        .run_lifespans(ks)
        .map_err(super::not_found)?
        .iter()
        .map(lifespan_json)
        .collect();
    let mut descs: std::collections::BTreeMap<String, String> = Default::default();
    for run in keyspace.runs.values().rev() {
        if let Some(plan) = ledger.plan(&run.plan_hash) {
            for n in &plan.nodes {
                descs.insert(n.name.clone(), n.desc.clone());
            }
        }
    }
    let mut nodes: Vec<(Option<i64>, String, Value)> = Vec::new();
    for (name, desc) in &descs {
        let mut first_start: Option<i64> = None;
        let statuses: Vec<Value> = keyspace
            .runs
            .values()
            .map(
                |r| match r.nodes.get(name).filter(|_| r.processed.contains(name)) {
                    Some(nr) => {
                        let start = nr
                            .history
                            .iter()
                            .filter(|h| h.status == NodeBatchStatus::Start)
                            .map(|h| h.ts_ms)
                            .min();
                        if let Some(s) = start {
                            first_start = Some(first_start.map_or(s, |f: i64| f.min(s)));
                        }
                        let ts = nr.history.iter().map(|h| h.ts_ms).max();
                        json!({
                            "run_id": r.run_id,
                            "status": nr.status.code(),
                            "ts": time(ts, MATRIX_TIME),
                        })
                    }
                    None => json!({ "run_id": 0, "status": 0, "ts": time(None, MATRIX_TIME) }),
                },
            )
            .collect();
        nodes.push((
            first_start,
            name.clone(),
            json!({ "node_name": name, "node_desc": desc, "node_statuses": statuses }),
        ));
    }
    nodes.sort_by(|a, b| match (a.0, b.0) {
        (Some(x), Some(y)) => x.cmp(&y).then(a.1.cmp(&b.1)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.1.cmp(&b.1),
    });
    Ok(json!({
        "run_lifespans": lifespans,
        "nodes": nodes.into_iter().map(|(_, _, v)| v).collect::<Vec<_>>(),
    }))
}
