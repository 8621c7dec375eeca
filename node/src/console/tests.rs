//! Unit tests of the console router: tokens, cookies, routes and refusals, over a backend
//! without a store.

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
