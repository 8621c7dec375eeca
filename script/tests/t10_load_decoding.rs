//! Decoding rules of spec §3.13 and the loading pipeline of §3.1 on small scripts.

use std::path::Path;

use anyhow::{Context as _, Result};
use plexus_script::LocalFiles;
use plexus_script::load::{LoadError, LoadedScript, ScriptFormat, load_script, load_script_text};
use plexus_script::script::{DEFAULT_MAX_BATCH_PROCESSING_TIME_MS, Node};
use plexus_script::template::Params;

/// Loads JSON script text without params.
fn json(text: &str) -> Result<LoadedScript, LoadError> {
    load_script_text(
        &LocalFiles,
        text,
        ScriptFormat::Json,
        "/x/script.json",
        None,
    )
}

/// Loads YAML script text without params.
fn yaml(text: &str) -> Result<LoadedScript, LoadError> {
    load_script_text(
        &LocalFiles,
        text,
        ScriptFormat::Yaml,
        "/x/script.yaml",
        None,
    )
}

/// The error message of a load that must fail.
fn err_of(r: Result<LoadedScript, LoadError>) -> String {
    match r {
        Ok(l) => panic!("expected an error, loaded {:?}", l.script),
        Err(e) => e.to_string(),
    }
}

#[test]
fn quoted_number_names_file_and_field_path() {
    let msg = err_of(json(
        r#"{"nodes": {"read_orders": {"r": {"expected_batches_total": "10"}}}}"#,
    ));
    assert_eq!(
        msg,
        r#"script /x/script.json: nodes.read_orders.r.expected_batches_total: invalid type: string "10", expected i64"#
    );
}

#[test]
fn integral_float_rejected_in_json_accepted_in_yaml() -> Result<()> {
    let msg = err_of(json(
        r#"{"nodes": {"n": {"r": {"expected_batches_total": 10.0}}}}"#,
    ));
    assert!(
        msg.contains(
            "nodes.n.r.expected_batches_total: invalid type: floating point `10.0`, expected i64"
        ),
        "{msg}"
    );
    let loaded = yaml("nodes:\n  n:\n    r:\n      expected_batches_total: 10.0\n")?;
    assert_eq!(
        loaded.script.nodes["n"]
            .r
            .as_ref()
            .map(|r| r.expected_batches_total),
        Some(10)
    );
    Ok(())
}

#[test]
fn duplicate_keys_json_last_wins_yaml_error() -> Result<()> {
    let loaded = json(r#"{"nodes": {"n": {"type": "a", "type": "table_table"}}}"#)?;
    assert_eq!(loaded.script.nodes["n"].node_type, "table_table");
    let msg = err_of(yaml("nodes:\n  n:\n    type: a\n    type: b\n"));
    assert!(
        msg.starts_with("script /x/script.yaml: ")
            && msg.contains("mapping key \"type\" already defined"),
        "{msg}"
    );
    assert!(msg.contains("nodes.n: ") && msg.contains("line 3"), "{msg}");
    Ok(())
}

#[test]
fn unknown_keys_ignored_and_null_leaves_defaults() -> Result<()> {
    let loaded = json(
        r#"{"nodes": {"n": {"type": "file_table", "explicit_run_only": true, "start_policy": null,
            "rerun_policy": null, "max_batch_processing_time": null, "desc": null,
            "r": {"urls": ["a", null], "csv": {"separator": null, "hdr_line_idx": null}, "columns": {"c": null}},
            "w": {"having": null, "csv": null, "parquet": {"codec": null}, "columns": [null]}}},
          "dependency_policies": null, "other": [1, 2]}"#,
    )?;
    let n = &loaded.script.nodes["n"];
    assert_eq!(
        (n.start_policy.as_str(), n.rerun_policy.as_str()),
        ("auto", "rerun")
    );
    assert_eq!(
        n.max_batch_processing_time,
        DEFAULT_MAX_BATCH_PROCESSING_TIME_MS
    );
    let r = n.r.as_ref().context("r")?;
    assert_eq!(r.urls, ["a", ""]);
    assert_eq!((r.csv.separator.as_str(), r.csv.hdr_line_idx), (",", 0));
    assert_eq!(r.columns["c"], Default::default());
    let w = n.w.as_ref().context("w")?;
    assert_eq!(
        (
            w.csv.separator.as_str(),
            w.parquet.codec.as_str(),
            w.columns.len()
        ),
        (",", "gzip", 1)
    );
    assert!(loaded.script.dependency_policies.is_empty());
    Ok(())
}

#[test]
fn node_defaults() -> Result<()> {
    let loaded = json(r#"{"nodes": {"n": {}, "m": null}}"#)?;
    let d = Node::default();
    assert_eq!(loaded.script.nodes["n"], d);
    assert_eq!(loaded.script.nodes["m"], d);
    assert_eq!(
        (d.handler_exe_type.as_str(), d.node_type.as_str()),
        ("capi_daemon", "")
    );
    let r = json(r#"{"nodes": {"n": {"r": {}}}}"#)?.script.nodes["n"]
        .r
        .clone()
        .context("r")?;
    assert_eq!((r.batches_total(), r.effective_rowset_size()), (1, 1000));
    Ok(())
}

#[test]
fn wrong_types_are_errors_with_paths() {
    for (text, expect) in [
        (
            r#"{"nodes": {"n": {"r": {"urls": "a"}}}}"#,
            "nodes.n.r.urls: invalid type: string \"a\", expected a sequence",
        ),
        (
            r#"{"nodes": {"n": {"l": {"group": "true"}}}}"#,
            "nodes.n.l.group: invalid type: string \"true\", expected a boolean",
        ),
        (
            r#"{"nodes": {"n": {"w": {"columns": [{}, {"name": 1}]}}}}"#,
            "nodes.n.w.columns[1].name: invalid type: integer `1`",
        ),
        (
            r#"{"nodes": []}"#,
            "nodes: invalid type: sequence, expected a map",
        ),
        (
            r#"[]"#,
            "script /x/script.json: .: invalid type: sequence, expected struct Script",
        ),
        (
            r#"{"nodes": {"n": {"r": []}}}"#,
            "nodes.n.r: invalid type: sequence, expected struct Reader",
        ),
        (
            r#"{"nodes": {"n": {"w": {"columns": [{"csv": ["h"]}]}}}}"#,
            "nodes.n.w.columns[0].csv: invalid type: sequence, expected struct FileColumnCsv",
        ),
        (
            r#"{"dependency_policies": {"d": {"rules": [[]]}}}"#,
            "dependency_policies.d.rules[0]: invalid type: sequence, expected struct DependencyRule",
        ),
        (
            r#"{"nodes": {"n": {"r": {"expected_batches_total": 1e3}}}}"#,
            "expected i64",
        ),
        (
            r#"{"nodes": {"n": {"r": {"rowset_size": 99999999999999999999}}}}"#,
            "nodes.n.r.rowset_size",
        ),
    ] {
        let msg = err_of(json(text));
        assert!(msg.contains(expect), "{text}: {msg}");
    }
}

#[test]
fn syntax_errors_name_file_line_and_column() {
    let msg = err_of(json("{\n  \"nodes\": {,}\n}"));
    assert!(
        msg.starts_with("script /x/script.json: ") && msg.contains("line 2 column 13"),
        "{msg}"
    );
    let msg = err_of(yaml("nodes:\n  n: [1,\n"));
    assert!(
        msg.starts_with("script /x/script.yaml: ") && msg.contains("line"),
        "{msg}"
    );
    let msg = err_of(yaml("nodes:\n  2021: {}\n"));
    assert!(msg.contains("mapping key 2021 is not a string"), "{msg}");
}

#[test]
fn yml_and_other_suffixes_rejected() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let yml = tmp.path().join("s.yml");
    std::fs::write(&yml, "nodes: {}\n")?;
    let msg = load_script(&LocalFiles, &yml.to_string_lossy(), None)
        .err()
        .context("must fail")?
        .to_string();
    assert!(
        msg.contains("s.yml: cannot detect file type, expected a .json or .yaml suffix"),
        "{msg}"
    );
    let script = tmp.path().join("s.json");
    std::fs::write(&script, "{}")?;
    let msg = load_script(
        &LocalFiles,
        &script.to_string_lossy(),
        Some("/p/params.txt"),
    )
    .err()
    .context("must fail")?
    .to_string();
    assert!(
        msg.starts_with("params /p/params.txt: cannot detect file type"),
        "{msg}"
    );
    Ok(())
}

#[test]
fn params_applied_from_files_and_missing_files_named() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let script = tmp.path().join("s.yaml");
    std::fs::write(
        &script,
        "nodes:\n  n:\n    desc: \"{d}\"\n    r:\n      expected_batches_total: \"{b|number}\"\n",
    )?;
    let params = tmp.path().join("p.yaml");
    std::fs::write(&params, "d: hello\nb: 7\n")?;
    let s = script.to_string_lossy();
    let loaded = load_script(&LocalFiles, &s, Some(&params.to_string_lossy()))?;
    let n = &loaded.script.nodes["n"];
    assert_eq!(
        (
            n.desc.as_str(),
            n.r.as_ref().map(|r| r.expected_batches_total)
        ),
        ("hello", Some(7))
    );
    let msg = load_script(&LocalFiles, &s, Some("/nonexistent/p.json"))
        .err()
        .context("must fail")?
        .to_string();
    assert!(
        msg.starts_with("params: cannot read /nonexistent/p.json: No such file"),
        "{msg}"
    );
    let msg = load_script(&LocalFiles, "/nonexistent/s.json", None)
        .err()
        .context("must fail")?
        .to_string();
    assert!(
        msg.starts_with("script: cannot read /nonexistent/s.json"),
        "{msg}"
    );
    let msg = load_script(&LocalFiles, &s, None)
        .err()
        .context("must fail")?
        .to_string();
    assert!(
        msg.contains("unresolved parameter references {d|string}, {b|number}"),
        "{msg}"
    );
    Ok(())
}

#[test]
fn params_from_text_drive_load_script_text() -> Result<()> {
    let p = Params::from_text(
        r#"{"t": "table_table", "l": ["u1", "u2"]}"#,
        ScriptFormat::Json,
        "/p/p.json",
    )?;
    let loaded = load_script_text(
        &LocalFiles,
        r#"{"nodes": {"n": {"type": "{t}", "r": {"urls": "{l|stringlist}"}}}}"#,
        ScriptFormat::Json,
        "/s/s.json",
        Some(&p),
    )?;
    assert_eq!(loaded.params_url.as_deref(), Some("/p/p.json"));
    assert_eq!(
        loaded.script.nodes["n"].r.as_ref().map(|r| r.urls.clone()),
        Some(vec!["u1".into(), "u2".into()])
    );
    assert_eq!(
        loaded.text,
        r#"{"nodes": {"n": {"type": "table_table", "r": {"urls": ["u1","u2"]}}}}"#
    );
    Ok(())
}

#[test]
fn python_files_concatenated_with_newlines() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (a, b) = (tmp.path().join("a.py"), tmp.path().join("b.py"));
    std::fs::write(&a, "def f(x):\n    return x")?;
    std::fs::write(&b, "def g():\n    return 0\n")?;
    let u = |p: &Path| p.to_string_lossy().into_owned();
    let script = serde_json::json!({"nodes": {
        "py": {"type": "table_custom_tfm_table", "custom_proc_type": "py_calc", "p": {"python_code_urls": [u(&a), u(&b)]}},
        // Not a custom-transform node: its `p` is ignored, nothing is fetched.
        "other": {"type": "table_table", "custom_proc_type": "py_calc", "p": {"python_code_urls": ["/nonexistent.py"]}}
    }});
    let loaded = json(&script.to_string())?;
    assert_eq!(loaded.python_code.len(), 1);
    assert_eq!(
        loaded.python_code["py"],
        "def f(x):\n    return x\ndef g():\n    return 0\n\n"
    );
    Ok(())
}
