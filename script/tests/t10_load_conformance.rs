//! Every script + params combination of the conformance data loads (spec §3, §13).

mod common;

use std::path::Path;

use common::{Conformance, need_conformance, url};

use anyhow::{Context as _, Result};
use plexus_script::LocalFiles;
use plexus_script::load::{LoadError, LoadedScript, load_script};

/// Loads `script` with `params` from the conformance cfg dir of `test`.
fn load(conf: &Conformance, test: &str, script: &str, params: &str) -> Result<LoadedScript> {
    let cfg = conf.cfg(test);
    load_script(
        &LocalFiles,
        &url(&cfg.join(script)),
        Some(&url(&cfg.join(params))),
    )
    .with_context(|| format!("{test}: {script} with {params}"))
}

#[test]
fn lookup_quick_yaml_with_every_quick_params() -> Result<()> {
    let conf = need_conformance!();
    for (params, policy, dir_in) in [
        (
            "script_params_quick_fs_one.yaml",
            "auto",
            "/tmp/capi_in/lookup_quicktest",
        ),
        (
            "script_params_quick_fs_multi.yaml",
            "manual",
            "/tmp/capi_in/lookup_quicktest",
        ),
        (
            "script_params_quick_s3_one.yaml",
            "auto",
            "s3://$CAPILLARIES_AWS_TESTBUCKET/capi_in/lookup_quicktest",
        ),
        (
            "script_params_quick_s3_multi.yaml",
            "manual",
            "s3://$CAPILLARIES_AWS_TESTBUCKET/capi_in/lookup_quicktest",
        ),
    ] {
        let loaded = load(&conf, "lookup", "script_quick.yaml", params)?;
        let s = &loaded.script;
        assert_eq!(s.nodes.len(), 10, "{params}");
        let inner = &s.nodes["order_item_date_inner"];
        assert_eq!(inner.node_type, "table_lookup_table");
        assert_eq!(inner.start_policy, policy, "{params}");
        assert_eq!(inner.r.as_ref().map(|r| r.expected_batches_total), Some(10));
        assert_eq!(
            inner.l.as_ref().map(|l| l.join_type.as_str()),
            Some("inner")
        );
        let orders = &s.nodes["read_orders"];
        let r = orders.r.as_ref().context("read_orders.r")?;
        assert_eq!(r.urls, vec![format!("{dir_in}/olist_orders_dataset.csv")]);
        assert_eq!(r.csv.separator, ",");
        assert_eq!(r.csv.first_data_line_idx, 1);
        assert_eq!(
            r.columns["col_order_id"].csv.col_hdr.as_deref(),
            Some("order_id")
        );
        let w = orders.w.as_ref().context("read_orders.w")?;
        assert!(
            w.having
                .contains(r#"time.Parse("2006-01-02 15:04:05","2016-01-01 00:00:00")"#),
            "{}",
            w.having
        );
        let items = &s.nodes["read_order_items"];
        let cols = &items.r.as_ref().context("items.r")?.columns;
        assert_eq!(cols["col_price"].csv.col_hdr, None, "YAML null is absent");
        assert_eq!(cols["col_price"].csv.col_idx, 5);
        assert_eq!(items.w.as_ref().map(|w| w.having.as_str()), Some(""));
        let left = &s.nodes["order_item_date_left_outer"]
            .w
            .as_ref()
            .context("left.w")?
            .fields;
        assert_eq!(
            left["shipping_limit_date"].default_value,
            "1980-02-03T04:05:06.777+00:00"
        );
        assert_eq!(left["value"].default_value, "999.00");
        let file = s.nodes["file_order_item_date_inner"]
            .w
            .as_ref()
            .context("file.w")?;
        assert_eq!(file.columns.len(), 6);
        assert_eq!(file.columns[1].csv.format, "%05d");
        assert_eq!(file.top.order, "order_id(asc),order_item_id(asc)");
        let policy = &s.dependency_policies["current_active_first_stopped_nogo"];
        assert!(policy.is_default);
        assert_eq!(policy.rules.len(), 10);
        assert!(loaded.python_code.is_empty() && loaded.tag_criteria.is_empty());
        assert_eq!(
            loaded.params_url.as_deref().map(|p| p.ends_with(params)),
            Some(true)
        );
    }
    Ok(())
}

#[test]
fn lookup_big_json_with_every_big_params() -> Result<()> {
    let conf = need_conformance!();
    for params in [
        "script_params_big_fs_one.json",
        "script_params_big_fs_multi.json",
        "script_params_big_s3_one.json",
        "script_params_big_s3_multi.json",
    ] {
        let loaded = load(&conf, "lookup", "script_big.json", params)?;
        let inner = &loaded.script.nodes["order_item_date_inner"];
        assert_eq!(
            inner.r.as_ref().map(|r| r.expected_batches_total),
            Some(100),
            "{params}"
        );
        assert!(!loaded.text.contains("|number}"), "{params}");
    }
    Ok(())
}

/// A stand-in for the user-provided Python file (its content is irrelevant to loading).
const PY_STUB: &str =
    "def increase_by_ten_percent(numeric_val):\n    return float(numeric_val) * 1.1";

/// Writes py_calc params (JSON and YAML) with `dir_py` pointing into `dir`.
fn py_calc_params(dir: &Path, dir_py: &Path) -> Result<(String, String)> {
    let json = dir.join("script_params.json");
    let yaml = dir.join("script_params.yaml");
    let py = dir_py.to_string_lossy();
    std::fs::write(
        &json,
        format!(
            r#"{{"dir_in": "/tmp/capi_in/py_calc_quicktest", "dir_out": "/tmp/capi_out/py_calc_quicktest", "dir_py": "{py}"}}"#
        ),
    )?;
    std::fs::write(
        &yaml,
        format!(
            "dir_in: \"/tmp/capi_in/py_calc_quicktest\"\ndir_out: \"/tmp/capi_out/py_calc_quicktest\"\ndir_py: \"{py}\"\n"
        ),
    )?;
    Ok((url(&json), url(&yaml)))
}

#[test]
fn py_calc_json_and_yaml_decode_to_equal_scripts() -> Result<()> {
    let conf = need_conformance!();
    let tmp = tempfile::tempdir()?;
    let py_dir = tmp.path().join("py");
    std::fs::create_dir(&py_dir)?;
    std::fs::write(py_dir.join("calc_order_items_code.py"), PY_STUB)?;
    let (pj, py) = py_calc_params(tmp.path(), &py_dir)?;
    let cfg = conf.cfg("py_calc");
    let mut loaded = Vec::new();
    for script in ["script.json", "script.yaml"] {
        for params in [&pj, &py] {
            loaded.push(
                load_script(&LocalFiles, &url(&cfg.join(script)), Some(params))
                    .with_context(|| format!("{script} {params}"))?,
            );
        }
    }
    for l in &loaded[1..] {
        assert_eq!(l.script, loaded[0].script);
        assert_eq!(l.python_code, loaded[0].python_code);
    }
    let first = &loaded[0];
    assert_eq!(first.python_code.len(), 1);
    assert_eq!(
        first.python_code["taxed_order_items_py"],
        format!("{PY_STUB}\n")
    );
    let go = &first.script.nodes["taxed_order_items_go"];
    assert_eq!(
        (go.node_type.as_str(), go.custom_proc_type.as_str()),
        ("table_table", "py_calc")
    );
    let file = first.script.nodes["file_taxed_order_items_py"]
        .w
        .as_ref()
        .context("w")?;
    assert_eq!(
        file.url_template,
        "/tmp/capi_out/py_calc_quicktest/taxed_order_items_py_{batch_idx|string}.csv"
    );
    let p = first.script.nodes["taxed_order_items_py"]
        .p
        .as_ref()
        .context("p")?;
    assert_eq!(
        p.calculated_fields["shipping_limit_is_weekend"].field_type,
        "bool"
    );
    Ok(())
}

#[test]
fn py_calc_missing_python_file_is_a_load_error() -> Result<()> {
    let conf = need_conformance!();
    let tmp = tempfile::tempdir()?;
    let missing = tmp.path().join("no_such_dir");
    let (pj, _) = py_calc_params(tmp.path(), &missing)?;
    let cfg = conf.cfg("py_calc");
    let err = load_script(&LocalFiles, &url(&cfg.join("script.json")), Some(&pj))
        .err()
        .context("must fail")?;
    let msg = err.to_string();
    assert!(matches!(err, LoadError::Fetch { .. }), "{msg}");
    assert!(
        msg.contains("node taxed_order_items_py: python code: cannot read"),
        "{msg}"
    );
    assert!(
        msg.contains("calc_order_items_code.py") && msg.contains("No such file"),
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

#[test]
fn tag_and_denormalize_fs_params_with_copied_criteria() -> Result<()> {
    let conf = need_conformance!();
    let cfg = conf.cfg("tag_and_denormalize");
    let tmp = tempfile::tempdir()?;
    std::fs::copy(
        cfg.join("tag_criteria.json"),
        tmp.path().join("tag_criteria.json"),
    )?;
    for (params, policy) in [
        ("script_params_fs_one.json", "auto"),
        ("script_params_fs_multi.json", "manual"),
    ] {
        let p = tag_params(&conf, tmp.path(), params, &url(tmp.path()))?;
        let loaded = load_script(&LocalFiles, &url(&cfg.join("script.json")), Some(&p))
            .with_context(|| params.to_string())?;
        assert_eq!(loaded.script.nodes["tag_totals"].start_policy, policy);
        let criteria = &loaded.tag_criteria["tag_products"];
        assert_eq!(
            criteria.keys().collect::<Vec<_>>(),
            ["boys", "casualfootwear", "diving", "engagement"]
        );
        // Not templated: `[\w ,]*` is kept, no `{...}` processing.
        assert!(
            criteria["boys"].contains(r#"[\w ,]*Boys"#),
            "{}",
            criteria["boys"]
        );
        assert!(criteria["engagement"].ends_with("r.price > 5000"));
        let read_products = loaded.script.nodes["read_products"]
            .r
            .as_ref()
            .context("r")?;
        assert_eq!(read_products.csv.separator, "\t");
        let read_tags = loaded.script.nodes["read_tags"].r.as_ref().context("r")?;
        assert_eq!(
            read_tags.urls,
            ["/tmp/capi_in/tag_and_denormalize_quicktest/tags.csv"]
        );
        assert_eq!(
            (read_tags.csv.hdr_line_idx, read_tags.csv.separator.as_str()),
            (0, ",")
        );
    }
    Ok(())
}

#[test]
fn tag_criteria_file_problems() -> Result<()> {
    let conf = need_conformance!();
    let cfg = conf.cfg("tag_and_denormalize");
    let tmp = tempfile::tempdir()?;
    let p = tag_params(
        &conf,
        tmp.path(),
        "script_params_fs_one.json",
        &url(tmp.path()),
    )?;
    for (content, expect) in [
        ("", "EOF while parsing"),
        ("[1]", "invalid type: sequence"),
        (r#"{"a": 1}"#, "a: invalid type: integer"),
    ] {
        std::fs::write(tmp.path().join("tag_criteria.json"), content)?;
        let err = load_script(&LocalFiles, &url(&cfg.join("script.json")), Some(&p))
            .err()
            .context("must fail")?;
        let msg = err.to_string();
        assert!(
            msg.starts_with("node tag_products: tag criteria ") && msg.contains(expect),
            "{msg}"
        );
    }
    Ok(())
}
