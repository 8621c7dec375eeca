//! Loading a script, its params and its tag-criteria files from remote URLs through the node's
//! fetcher, as every planner command does (http on loopback; s3 and sftp without credentials).

mod common;

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::Path;

use anyhow::{Context as _, Result};
use common::{Conformance, need_conformance, url};
use plexus_node::script_files::NodeFetch;
use plexus_script::load_script;

/// Serves each of `bodies` (status, body) to one request on a loopback port; returns the base URL.
fn serve(responses: Vec<(&'static str, String)>) -> Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for (status, body) in responses {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let reply = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    Ok(format!("http://{addr}"))
}

#[test]
fn http_urls_on_loopback() -> Result<()> {
    let base = serve(vec![
        ("200 OK", r#"{"d": "from http"}"#.to_string()),
        ("200 OK", r#"{"nodes": {"n": {"desc": "{d}"}}}"#.to_string()),
        ("404 Not Found", String::new()),
    ])?;
    let loaded = load_script(
        &NodeFetch::default(),
        &format!("{base}/s.json"),
        Some(&format!("{base}/p.json")),
    )?;
    assert_eq!(loaded.script.nodes["n"].desc, "from http");
    let msg = load_script(&NodeFetch::default(), &format!("{base}/missing.json"), None)
        .err()
        .context("must fail")?
        .to_string();
    assert!(
        msg.contains(&format!("cannot open {base}/missing.json: not found")) && msg.contains("404"),
        "{msg}"
    );
    Ok(())
}

/// Writes tag_and_denormalize params with `dir_cfg` set to `dir_cfg`.
fn tag_params(conf: &Conformance, dir: &Path, from: &str, dir_cfg: &str) -> Result<String> {
    let src = conf.cfg("tag_and_denormalize").join(from);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(src)?)?;
    v["dir_cfg"] = serde_json::Value::String(dir_cfg.to_string());
    let out = dir.join(from);
    std::fs::write(&out, serde_json::to_vec(&v)?)?;
    Ok(url(&out))
}

/// Without credentials (no AWS keys, no sftp private key) the loader fails before any
/// request, naming the node, the URL and what is missing.
#[test]
fn tag_criteria_from_s3_or_sftp_without_credentials_is_a_clear_error() -> Result<()> {
    let conf = need_conformance!();
    let cfg = conf.cfg("tag_and_denormalize");
    let tmp = tempfile::tempdir()?;
    for (dir_cfg, why) in [
        ("s3://bucket/cfg", "no S3 credentials"),
        ("sftp://u@h/cfg", "no sftp private key for u@h"),
    ] {
        let p = tag_params(&conf, tmp.path(), "script_params_fs_one.json", dir_cfg)?;
        let err = load_script(
            &NodeFetch::default(),
            &url(&cfg.join("script.json")),
            Some(&p),
        )
        .err()
        .context("must fail")?;
        let msg = err.to_string();
        assert!(msg.contains(why), "{msg}");
        assert!(
            msg.contains(&format!("{dir_cfg}/tag_criteria.json")),
            "{msg}"
        );
        assert!(msg.contains("node tag_products: tag criteria"), "{msg}");
    }
    Ok(())
}
