//! Remote data files against real servers on loopback (testkit::remote): Capillaries' own s3
//! params of the lookup test on moto's S3 server, the lookup test reading from and writing to
//! OpenSSH's sftp, the https params of tag_and_denormalize on a TLS server with a test CA (and
//! the multi-run params on plain http with a connection dropped mid-file), Parquet read by
//! ranges and written back over s3 and sftp, Parquet by ranged reads over http, and a
//! three-peer cluster reading its inputs over http. Outputs are compared with the conformance
//! baselines.

mod cluster_harness;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail, ensure};
use common::{Conformance, params_with, url};
use plexus_testkit::remote::{HttpFiles, MotoS3, Sshd};

/// The bucket the rewritten Capillaries s3 params name.
const BUCKET: &str = "capillaries-test";

const LOOKUP_OUTPUTS: [&str; 4] = [
    "order_item_date_inner",
    "order_item_date_left_outer",
    "order_date_value_grouped_inner",
    "order_date_value_grouped_left_outer",
];

/// `planner ARGS` with extra environment; (succeeded, stdout + stderr).
fn planner(args: &[&str], env: &[(&str, String)]) -> Result<(bool, String)> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_planner"));
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    // The tests' settings only: no config or AWS profile of the machine leaks in.
    cmd.env_remove("PLEXUS_FILES_CONFIG")
        .env_remove("AWS_PROFILE")
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent");
    let out = cmd.output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), text))
}

/// Like [`planner`], failing with the output unless it succeeds.
fn planner_ok(args: &[&str], env: &[(&str, String)]) -> Result<String> {
    let (ok, text) = planner(args, env)?;
    ensure!(ok, "planner {args:?} failed:\n{text}");
    Ok(text)
}

/// Lines compared like `diff -b` (see t50_conformance).
fn diff_b_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

fn same_lines(got: &str, want: &str, what: &str) -> Result<()> {
    let (got, want) = (diff_b_lines(got), diff_b_lines(want));
    if got == want {
        return Ok(());
    }
    let first = got
        .iter()
        .zip(&want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    bail!(
        "{what}: differs from baseline at line {} ({} lines vs {}):\n  got:  {:?}\n  want: {:?}",
        first + 1,
        got.len(),
        want.len(),
        got.get(first),
        want.get(first)
    )
}

fn same_file(got: &Path, want: &Path) -> Result<()> {
    let g = std::fs::read_to_string(got).with_context(|| format!("{} missing", got.display()))?;
    same_lines(
        &g,
        &std::fs::read_to_string(want)?,
        &got.display().to_string(),
    )
}

/// The tag_and_denormalize outputs in `out` against the baselines (the review file sorted).
fn check_tag_outputs(conf: &Conformance, out: &Path) -> Result<()> {
    let base = conf.out("tag_and_denormalize");
    same_file(
        &out.join("tag_totals.tsv"),
        &base.join("tag_totals_baseline.tsv"),
    )?;
    let got = std::fs::read_to_string(out.join("tagged_products_for_operator_review.csv"))?;
    let mut got: Vec<&str> = got.lines().map(|l| l.trim_end_matches('\r')).collect();
    got.sort_unstable();
    same_lines(
        &got.join("\n"),
        &std::fs::read_to_string(base.join("tagged_products_for_operator_review_baseline.csv"))?,
        "tagged_products_for_operator_review.csv",
    )
}

/// Copies every file of `from` into `to` (created).
fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        std::fs::copy(e.path(), to.join(e.file_name()))?;
    }
    Ok(())
}

/// Capillaries' s3 params with the bucket filled in, as its test scripts do.
fn s3_params(conf: &Conformance, name: &str, dir: &Path) -> Result<PathBuf> {
    let text = std::fs::read_to_string(conf.cfg("lookup").join(name))?;
    ensure!(
        text.contains("$CAPILLARIES_AWS_TESTBUCKET"),
        "{name} names no bucket"
    );
    let path = dir.join(name);
    std::fs::write(&path, text.replace("$CAPILLARIES_AWS_TESTBUCKET", BUCKET))?;
    Ok(path)
}

/// lookup with `script_params_quick_s3_one.yaml` and `_multi.yaml`: script, params and inputs
/// on S3, outputs written to S3 (multipart-capable uploads), fetched back and compared; then
/// a wrong secret is a clear "access denied" that does not show the secret.
#[test]
fn s3_lookup_conformance_and_wrong_secret() -> Result<()> {
    let Some(conf) = common::conformance()? else {
        return Ok(());
    };
    let Some(s3) = MotoS3::start()? else {
        return Ok(());
    };
    let tmp = tempfile::tempdir()?;
    s3.make_bucket(BUCKET)?;
    let input = conf.input("lookup");
    for f in ["olist_orders_dataset.csv", "olist_order_items_dataset.csv"] {
        s3.put(
            BUCKET,
            &format!("capi_in/lookup_quicktest/{f}"),
            &input.join(f),
        )?;
    }
    s3.put(
        BUCKET,
        "capi_cfg/lookup_quicktest/script_quick.yaml",
        &conf.cfg("lookup").join("script_quick.yaml"),
    )?;
    let script = format!("s3://{BUCKET}/capi_cfg/lookup_quicktest/script_quick.yaml");
    let env = s3.env();
    for (variant, runs) in [
        ("one", vec!["read_orders,read_order_items"]),
        (
            "multi",
            vec![
                "read_orders,read_order_items",
                "order_item_date_inner,order_item_date_left_outer,order_date_value_grouped_inner,order_date_value_grouped_left_outer",
            ],
        ),
    ] {
        let name = format!("script_params_quick_s3_{variant}.yaml");
        let local = s3_params(&conf, &name, tmp.path())?;
        let params = format!("s3://{BUCKET}/capi_cfg/lookup_quicktest/{name}");
        s3.put(BUCKET, &params[format!("s3://{BUCKET}/").len()..], &local)?;
        let data = tmp.path().join(format!("data_{variant}"));
        for start in runs {
            planner_ok(
                &[
                    "run",
                    &script,
                    "--params",
                    &params,
                    "--keyspace",
                    &format!("lookup_s3_{variant}"),
                    "--start-nodes",
                    start,
                    "--data-dir",
                    &url(&data),
                ],
                &env,
            )?;
        }
        for out in LOOKUP_OUTPUTS {
            let got = tmp.path().join(format!("{variant}_{out}.csv"));
            s3.get(
                BUCKET,
                &format!("capi_out/lookup_quicktest/{out}.csv"),
                &got,
            )?;
            same_file(
                &got,
                &conf.out("lookup").join(format!("{out}_baseline.csv")),
            )?;
        }
    }

    // Parquet on S3 both ways: the footer and column chunks by ranged GETs, the copy written
    // back by an upload, fetched with boto3 and compared row by row.
    let pq = conf
        .input("proto_file_reader_creator")
        .join("products.parquet");
    s3.put(BUCKET, "capi_in/proto/products.parquet", &pq)?;
    let (in_url, out_url) = (
        format!("s3://{BUCKET}/capi_in/proto"),
        format!("s3://{BUCKET}/capi_out/proto"),
    );
    let text = proto_parquet(
        &format!("{in_url}/products.parquet"),
        &in_url,
        &out_url,
        &[],
        &env,
    )?;
    ensure!(
        text == proto_parquet(&url(&pq), &in_url, &out_url, &[], &env)?,
        "parquet schema over S3 differs"
    );
    let pq_script = tmp.path().join("script_parquet.json");
    run_proto_parquet(&text, &pq_script, &tmp.path().join("data_pq"), &[], &env)?;
    let copy = tmp.path().join("products_copy.parquet");
    s3.get(BUCKET, "capi_out/proto/products.parquet", &copy)?;
    same_parquet_rows(&pq_script, &pq, &copy)?;

    let wrong = "wrong-secret-0123456789";
    let mut bad_env = env.clone();
    for (k, v) in &mut bad_env {
        if *k == "AWS_SECRET_ACCESS_KEY" {
            *v = wrong.to_owned();
        }
    }
    let (ok, text) = planner(&["validate", &script], &bad_env)?;
    ensure!(!ok, "a wrong secret must fail:\n{text}");
    ensure!(
        text.contains("access denied") && text.contains(&script),
        "expected an access-denied error naming {script}:\n{text}"
    );
    ensure!(!text.contains(wrong), "the secret leaked into:\n{text}");
    ensure!(
        !text.contains(&s3.secret),
        "the secret leaked into:\n{text}"
    );
    Ok(())
}

/// lookup (`script_params_quick_fs_one.yaml` values) with the script, the inputs and the
/// outputs on sftp (OpenSSH's internal-sftp, key auth, known_hosts checked).
#[test]
fn sftp_lookup_reads_and_writes() -> Result<()> {
    let Some(conf) = common::conformance()? else {
        return Ok(());
    };
    let Some(sshd) = Sshd::start()? else {
        return Ok(());
    };
    let tmp = tempfile::tempdir()?;
    let (input, out) = (tmp.path().join("in"), tmp.path().join("out"));
    copy_dir(&conf.input("lookup"), &input)?;
    std::fs::create_dir_all(&out)?;
    let params = params_with(
        tmp.path(),
        &conf.cfg("lookup").join("script_params_quick_fs_one.yaml"),
        &[("dir_in", &sshd.url(&input)), ("dir_out", &sshd.url(&out))],
    )?;
    let files = tmp.path().join("files.toml");
    std::fs::write(&files, sshd.files_config())?;
    planner_ok(
        &[
            "run",
            &sshd.url(&conf.cfg("lookup").join("script_quick.yaml")),
            "--params",
            &sshd.url(&params),
            "--keyspace",
            "lookup_sftp",
            "--start-nodes",
            "read_orders,read_order_items",
            "--data-dir",
            &url(&tmp.path().join("data")),
            "--files-config",
            &url(&files),
        ],
        &[],
    )?;
    for name in LOOKUP_OUTPUTS {
        same_file(
            &out.join(format!("{name}.csv")),
            &conf.out("lookup").join(format!("{name}_baseline.csv")),
        )?;
    }
    // Parquet over sftp both ways: proto-file-reader-creator reads the footer by ranges (the
    // same script as from the local file), the generated script reads the file over sftp and
    // writes its Parquet copy back over sftp, with the same rows.
    let (pq_in, pq_out) = (tmp.path().join("pq_in"), tmp.path().join("pq_out"));
    copy_dir(&conf.input("proto_file_reader_creator"), &pq_in)?;
    std::fs::create_dir_all(&pq_out)?;
    let extra = ["--files-config".to_owned(), url(&files)];
    let (in_url, out_url) = (sshd.url(&pq_in), sshd.url(&pq_out));
    let local_script = proto_parquet(
        &url(&pq_in.join("products.parquet")),
        &in_url,
        &out_url,
        &extra,
        &[],
    )?;
    let script = tmp.path().join("script_parquet.json");
    let remote_script = proto_parquet(
        &sshd.url(&pq_in.join("products.parquet")),
        &in_url,
        &out_url,
        &extra,
        &[],
    )?;
    ensure!(
        local_script == remote_script,
        "parquet schema over sftp differs"
    );
    run_proto_parquet(
        &remote_script,
        &script,
        &tmp.path().join("data_pq"),
        &extra,
        &[],
    )?;
    same_parquet_rows(
        &script,
        &pq_in.join("products.parquet"),
        &pq_out.join("products.parquet"),
    )?;
    // A host key that is not in known_hosts is refused, by name.
    let other = tmp.path().join("other_known_hosts");
    std::fs::write(&other, "")?;
    let (ok, text) = planner(
        &[
            "validate",
            &sshd.url(&conf.cfg("lookup").join("script_quick.yaml")),
        ],
        &[
            ("PLEXUS_FILES__KNOWN_HOSTS", url(&other)),
            (
                "PLEXUS_FILES__PRIVATE_KEYS",
                format!("{}@127.0.0.1={}", sshd.user, sshd.key.display()),
            ),
        ],
    )?;
    ensure!(
        !ok && text.contains("sftp://") && text.contains("not trusted"),
        "an unknown host key must be refused:\n{text}"
    );
    Ok(())
}

/// A server root with the tag_and_denormalize cfg and input files under `cfg/` and `in/`.
fn tag_root(conf: &Conformance, root: &Path) -> Result<()> {
    copy_dir(&conf.cfg("tag_and_denormalize"), &root.join("cfg"))?;
    copy_dir(&conf.input("tag_and_denormalize"), &root.join("in"))
}

/// tag_and_denormalize with Capillaries' `script_params_https_one.json` (dir_cfg and dir_in
/// moved to a local TLS server whose test CA is the configured `ca-path`, then Capillaries'
/// `ca_path` in capidaemon.json); without the CA the certificate is refused, the URL named.
#[test]
fn https_tag_and_denormalize_with_custom_ca() -> Result<()> {
    let Some(conf) = common::conformance()? else {
        return Ok(());
    };
    let tmp = tempfile::tempdir()?;
    let root = tmp.path().join("www");
    tag_root(&conf, &root)?;
    let srv = HttpFiles::start(&root, true)?;
    let ca = srv.ca_pem().context("TLS server without CA")?;
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out)?;
    let params = params_with(
        &root.join("cfg"),
        &conf
            .cfg("tag_and_denormalize")
            .join("script_params_https_one.json"),
        &[
            ("dir_cfg", &srv.url("cfg")),
            ("dir_in", &srv.url("in")),
            ("dir_out", &url(&out)),
        ],
    )?;
    let files = tmp.path().join("files.toml");
    std::fs::write(&files, format!("ca-path = {:?}\n", url(ca)))?;
    let script = srv.url("cfg/script.json");
    let params_url = srv.url(&format!(
        "cfg/{}",
        params
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    planner_ok(
        &[
            "run",
            &script,
            "--params",
            &params_url,
            "--keyspace",
            "tag_https",
            "--start-nodes",
            "read_tags,read_products",
            "--data-dir",
            &url(&tmp.path().join("data")),
            "--files-config",
            &url(&files),
        ],
        &[],
    )?;
    check_tag_outputs(&conf, &out)?;

    // The same CA given as Capillaries' `ca_path` (a directory of PEM files) in capidaemon.json.
    let ca_dir = ca.parent().context("CA file without a directory")?;
    let capi = tmp.path().join("capidaemon.json");
    std::fs::write(
        &capi,
        serde_json::json!({ "ca_path": url(ca_dir) }).to_string(),
    )?;
    for f in ["tag_totals.tsv", "tagged_products_for_operator_review.csv"] {
        std::fs::remove_file(out.join(f))?;
    }
    planner_ok(
        &[
            "run",
            &script,
            "--params",
            &params_url,
            "--keyspace",
            "tag_https_capi",
            "--start-nodes",
            "read_tags,read_products",
            "--data-dir",
            &url(&tmp.path().join("data_capi")),
            "--capi-config",
            &url(&capi),
        ],
        &[],
    )?;
    check_tag_outputs(&conf, &out)?;

    let (ok, text) = planner(&["validate", &script], &[])?;
    ensure!(
        !ok && text.contains(&script) && text.contains("certificate"),
        "an unknown CA must be refused with the URL named:\n{text}"
    );
    Ok(())
}

/// tag_and_denormalize with `script_params_https_multi.json` over plain http; the server drops
/// the connection in the middle of the products file once, with in-request retries off: the
/// batch fails as retryable, is run again, and the run completes with the baseline outputs.
#[test]
fn http_connection_dropped_mid_file_is_retried() -> Result<()> {
    let Some(conf) = common::conformance()? else {
        return Ok(());
    };
    let tmp = tempfile::tempdir()?;
    let root = tmp.path().join("www");
    tag_root(&conf, &root)?;
    let srv = HttpFiles::start(&root, false)?;
    srv.drop_connection("flipcart_products.tsv", 500_000, 1);
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out)?;
    let params = params_with(
        tmp.path(),
        &conf
            .cfg("tag_and_denormalize")
            .join("script_params_https_multi.json"),
        &[
            ("dir_cfg", &srv.url("cfg")),
            ("dir_in", &srv.url("in")),
            ("dir_out", &url(&out)),
        ],
    )?;
    let env = [("PLEXUS_FILES__RETRIES", "0".to_owned())];
    let script = srv.url("cfg/script.json");
    let data = url(&tmp.path().join("data"));
    let ks = "tag_http_multi";
    for start in ["read_tags,read_products", "tag_totals"] {
        planner_ok(
            &[
                "run",
                &script,
                "--params",
                &url(&params),
                "--keyspace",
                ks,
                "--start-nodes",
                start,
                "--data-dir",
                &data,
            ],
            &env,
        )?;
    }
    ensure!(
        srv.dropped() == 1,
        "the server dropped {} connections",
        srv.dropped()
    );
    ensure!(
        srv.gets("flipcart_products.tsv") >= 2,
        "the products batch was not retried"
    );
    check_tag_outputs(&conf, &out)?;
    Ok(())
}

/// A Parquet input read over http by ranged requests (footer, then column chunks) gives the
/// rows of the local file.
#[test]
fn parquet_over_http_by_ranges() -> Result<()> {
    let Some(conf) = common::conformance()? else {
        return Ok(());
    };
    let input = conf.input("proto_file_reader_creator");
    let srv = HttpFiles::start(&input, false)?;
    let tmp = tempfile::tempdir()?;
    let script = tmp.path().join("script.json");
    let text = planner_ok(
        &[
            "proto-file-reader-creator",
            "--file",
            &srv.url("products.parquet"),
            "--file-type",
            "parquet",
            "--in-dir",
            &srv.url(""),
            "--out-dir",
            &url(tmp.path()),
        ],
        &[],
    )?;
    std::fs::write(&script, text)?;
    let plan = planner::build_plan(&url(&script), None).map_err(|e| anyhow::anyhow!("{e}"))?;
    let Some(plexus_core::plan::Reader::File(reader)) =
        plan.node("read_file").map(|n| n.reader.clone())
    else {
        bail!("read_file is not a file reader");
    };
    ensure!(
        reader.urls.iter().all(|u| u.starts_with("http://")),
        "the generated reader reads {:?}",
        reader.urls
    );
    let read_all = |u: &str| -> Result<Vec<Vec<plexus_core::value::Value>>> {
        let mut src = plexus_node::files::open_source(&reader, u)?;
        let mut rows = Vec::new();
        let mut chunk = Vec::new();
        while src.next_chunk(&mut chunk, 1000)? > 0 {
            rows.append(&mut chunk);
        }
        Ok(rows)
    };
    let want = read_all(&url(&input.join("products.parquet")))?;
    let got = read_all(&srv.url("products.parquet"))?;
    ensure!(want.len() == 48, "input has {} rows", want.len());
    ensure!(got == want, "parquet over http changed values");
    ensure!(
        srv.gets("products.parquet") >= 2,
        "expected ranged GETs, saw {}",
        srv.gets("products.parquet")
    );
    Ok(())
}

/// On a three-peer cluster (peers that share no input directory), tag_and_denormalize reads
/// its script, params and inputs over http and gives the baseline outputs.
#[test]
fn cluster_reads_inputs_over_http() -> Result<()> {
    let Some(conf) = common::conformance()? else {
        return Ok(());
    };
    let tmp = tempfile::tempdir()?;
    let root = tmp.path().join("www");
    tag_root(&conf, &root)?;
    let srv = HttpFiles::start(&root, false)?;
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out)?;
    params_with(
        &root.join("cfg"),
        &conf
            .cfg("tag_and_denormalize")
            .join("script_params_https_one.json"),
        &[
            ("dir_cfg", &srv.url("cfg")),
            ("dir_in", &srv.url("in")),
            ("dir_out", &url(&out)),
        ],
    )?;
    let cluster = cluster_harness::TestCluster::start(3)?;
    planner_ok(
        &[
            "submit",
            &srv.url("cfg/script.json"),
            "--params",
            &srv.url("cfg/script_params_https_one.json"),
            "--keyspace",
            "tag_http_cluster",
            "--start-nodes",
            "read_tags,read_products",
            "--wait",
            "--cluster",
            &cluster.addrs(),
            "--tls-dir",
            &url(&cluster.tls_dir()),
        ],
        &[],
    )?;
    check_tag_outputs(&conf, &out)?;
    ensure!(
        srv.gets("flipcart_products.tsv") >= 1,
        "products not read over http"
    );
    Ok(())
}

/// `planner proto-file-reader-creator` for a Parquet `file` with these dirs: the script text.
fn proto_parquet(
    file: &str,
    in_dir: &str,
    out_dir: &str,
    extra: &[String],
    env: &[(&str, String)],
) -> Result<String> {
    let mut args = vec![
        "proto-file-reader-creator",
        "--file",
        file,
        "--file-type",
        "parquet",
        "--in-dir",
        in_dir,
        "--out-dir",
        out_dir,
    ];
    args.extend(extra.iter().map(String::as_str));
    planner_ok(&args, env)
}

/// Runs a generated proto script (with `top` on `col_id`, as upstream does), written to
/// `script`.
fn run_proto_parquet(
    text: &str,
    script: &Path,
    data: &Path,
    extra: &[String],
    env: &[(&str, String)],
) -> Result<()> {
    let mut json: serde_json::Value = serde_json::from_str(text)?;
    json.pointer_mut("/nodes/write_file/w")
        .and_then(|w| w.as_object_mut())
        .context("generated script has no nodes.write_file.w")?
        .insert("top".into(), serde_json::json!({"order": "col_id(asc)"}));
    std::fs::write(script, serde_json::to_string_pretty(&json)?)?;
    let (script_url, data_url) = (url(script), url(data));
    let mut args = vec![
        "run",
        &script_url,
        "--keyspace",
        "proto_parquet_remote",
        "--start-nodes",
        "read_file",
        "--data-dir",
        &data_url,
    ];
    args.extend(extra.iter().map(String::as_str));
    planner_ok(&args, env).map(|_| ())
}

/// The local Parquet files `want` and `got` hold the same 48 rows (read with the reader of
/// `script`'s read_file node).
fn same_parquet_rows(script: &Path, want: &Path, got: &Path) -> Result<()> {
    let plan = planner::build_plan(&url(script), None).map_err(|e| anyhow::anyhow!("{e}"))?;
    let Some(plexus_core::plan::Reader::File(reader)) =
        plan.node("read_file").map(|n| n.reader.clone())
    else {
        bail!("read_file is not a file reader");
    };
    let rows = |p: &Path| -> Result<Vec<Vec<plexus_core::value::Value>>> {
        let mut src = plexus_node::files::open_source(&reader, &url(p))?;
        let (mut all, mut chunk) = (Vec::new(), Vec::new());
        while src.next_chunk(&mut chunk, 1000)? > 0 {
            all.append(&mut chunk);
        }
        Ok(all)
    };
    let want_rows = rows(want)?;
    ensure!(want_rows.len() == 48, "input has {} rows", want_rows.len());
    ensure!(
        rows(got)? == want_rows,
        "{} has other rows than {}",
        got.display(),
        want.display()
    );
    Ok(())
}

/// S3 credentials from a machine role: the EC2 instance metadata service (IMDSv2) and the ECS
/// container credentials URL, both served by a loopback stand-in handing out the moto test
/// key. With the metadata service turned off and no other source, the read fails naming the
/// missing credentials, and the stand-in is never asked.
#[test]
fn s3_credentials_from_instance_metadata_and_container_role() -> Result<()> {
    let Some(s3) = MotoS3::start()? else {
        return Ok(());
    };
    let tmp = tempfile::tempdir()?;
    s3.make_bucket("roles")?;
    let csv = tmp.path().join("a.csv");
    std::fs::write(&csv, "id,name\n1,one\n2,two\n")?;
    s3.put("roles", "in/a.csv", &csv)?;
    let (key, secret, token) = s3.session()?;
    let meta = plexus_testkit::remote::MetadataStandIn::start(&key, &secret, &token)?;
    // Only the endpoint and region from moto's variables: the key must come from the role.
    let base: Vec<(&str, String)> = s3
        .env()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("AWS_ACCESS_KEY") && !k.starts_with("AWS_SECRET"))
        .chain([
            ("HOME", tmp.path().to_string_lossy().into_owned()),
            ("PATH", std::env::var("PATH").unwrap_or_default()),
            (
                "AWS_CONFIG_FILE",
                tmp.path().join("none").to_string_lossy().into_owned(),
            ),
            (
                "AWS_SHARED_CREDENTIALS_FILE",
                tmp.path().join("none").to_string_lossy().into_owned(),
            ),
        ])
        .collect();
    let proto = |extra: &[(&str, String)]| -> Result<(bool, String)> {
        let out = Command::new(env!("CARGO_BIN_EXE_planner"))
            .args(["proto-file-reader-creator", "--file", "s3://roles/in/a.csv"])
            .args(["--csv-hdr-line-idx", "0", "--csv-first-line-idx", "1"])
            .env_clear()
            .envs(base.iter().cloned())
            .envs(extra.iter().cloned())
            .output()?;
        Ok((
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ))
    };

    let (ok, text) = proto(&[
        ("AWS_EC2_METADATA_DISABLED", "false".into()),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", meta.endpoint()),
    ])?;
    ensure!(
        ok && text.contains("col_name"),
        "instance role: {text} {:?}",
        meta.hits()
    );
    let hits = meta.hits();
    ensure!(
        hits.iter().any(|h| h == "PUT /latest/api/token")
            && hits
                .iter()
                .any(|h| h.ends_with("/security-credentials/plexus-test-role")),
        "IMDSv2 not used as a machine would: {hits:?}"
    );

    let before = meta.hits().len();
    let (ok, text) = proto(&[
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", meta.container_uri()),
    ])?;
    ensure!(ok && text.contains("col_name"), "container role: {text}");
    let hits = meta.hits();
    ensure!(
        hits[before..] == ["GET /ecs/credentials".to_owned()],
        "container credentials: {hits:?}"
    );

    let before = meta.hits().len();
    let (ok, text) = proto(&[("AWS_EC2_METADATA_DISABLED", "true".into())])?;
    ensure!(!ok && text.contains("no S3 credentials found"), "{text}");
    ensure!(
        meta.hits().len() == before,
        "asked with the metadata service off"
    );
    Ok(())
}
