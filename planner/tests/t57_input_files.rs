//! Inputs as people have them (issue #27, section 3): CSV compressed with gzip or zstd (by
//! suffix, or by `r.csv.compression` for other names; several gzip members or zstd frames),
//! and `r.urls` glob patterns. Each run writes the same output files as the plain, listed run.

mod common;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail, ensure};
use planner::SplitSettings;
use plexus_node::local_run::Silent;

/// CSV text with a header, quoted fields holding separators and newlines, and `rows` rows.
fn csv_text(rows: usize, offset: usize) -> String {
    let mut s = String::from("id,note,amount\n");
    for i in offset..offset + rows {
        let note = match i % 3 {
            0 => format!("\"two\nlines {i}\""),
            1 => format!("\"a,b {i}\""),
            _ => format!("plain{i}"),
        };
        let _ = writeln!(s, "{i},{note},{}.{:02}", i % 1000, i % 100);
    }
    s
}

fn gzip(members: &[&[u8]]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for m in members {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(m)?;
        out.extend(e.finish()?);
    }
    Ok(out)
}

/// Zstandard frames, each after a skippable frame (as `pzstd` writes them).
fn zstd(frames: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        if frames.len() > 1 {
            out.extend(0x184D_2A50u32.to_le_bytes());
            out.extend(4u32.to_le_bytes());
            out.extend(u32::try_from(f.len()).unwrap_or(0).to_le_bytes());
        }
        out.extend(ruzstd::encoding::compress_to_vec(
            *f,
            ruzstd::encoding::CompressionLevel::Fastest,
        ));
    }
    out
}

/// read (CSV at `urls`, with `csv` settings) → table → one CSV file `out/all.csv`, sorted by id.
fn script(dir: &Path, urls: &[String], csv: serde_json::Value) -> Result<PathBuf> {
    let col = |hdr: &str, ty: &str, fmt: &str| serde_json::json!({"col_type": ty, "csv": {"col_hdr": hdr, "col_format": fmt}});
    let out_col = |name: &str, ty: &str| {
        serde_json::json!({"csv": {"header": name, "format": "%v"}, "name": name,
            "expression": format!("r.{name}"), "type": ty})
    };
    let s = serde_json::json!({
        "dependency_policies": plexus_node::files::default_policies(),
        "nodes": {
            "read": {
                "type": "file_table",
                "r": {"urls": urls, "csv": csv, "columns": {
                    "col_id": col("id", "int", "%d"),
                    "col_note": col("note", "string", ""),
                    "col_amount": col("amount", "decimal2", "%f")
                }},
                "w": {"name": "items", "fields": {
                    "id": {"expression": "r.col_id", "type": "int"},
                    "note": {"expression": "r.col_note", "type": "string"},
                    "amount": {"expression": "r.col_amount", "type": "decimal2"}
                }}
            },
            "write_out": {
                "type": "table_file",
                "r": {"table": "items"},
                "w": {
                    "top": {"order": "id(asc)"},
                    "url_template": format!("{}/all.csv", dir.join("out").display()),
                    "columns": [out_col("id", "int"), out_col("note", "string"), out_col("amount", "decimal2")]
                }
            }
        }
    });
    let path = dir.join("script.json");
    std::fs::write(&path, serde_json::to_string_pretty(&s)?)?;
    Ok(path)
}

/// Runs the script in `dir` on a fresh store; the output file's bytes and the reader's batches.
fn run(dir: &Path, script: &Path) -> Result<(Vec<u8>, u32)> {
    let script = script.to_string_lossy().into_owned();
    let plan = planner::build_plan_with(&script, None, &SplitSettings::from_env())
        .map_err(|e| anyhow::anyhow!("{}", e.lines().join("\n")))?;
    let batches = plan
        .nodes
        .iter()
        .find(|n| n.name == "read")
        .map(|n| n.batches)
        .context("no read node")?;
    let out = dir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out)?;
    let data = tempfile::tempdir()?;
    let settings = common::embedded_run(script, "read", 2, ("inputs", data.path().to_owned()));
    let report = planner::run::run(&plan, &settings, &Silent)?;
    if let Some(n) = report.failed().next() {
        bail!("node {} failed: {}", n.name, n.errors.join("; "));
    }
    Ok((std::fs::read(out.join("all.csv"))?, batches))
}

#[test]
fn gzip_and_zstd_inputs_give_the_plain_files_bytes() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let text = csv_text(3000, 0);
    let (head, tail) = text.split_at(text.len() / 2);
    std::fs::write(d.join("plain.csv"), &text)?;
    std::fs::write(d.join("one.csv.gz"), gzip(&[text.as_bytes()])?)?;
    std::fs::write(
        d.join("members.csv.GZ"),
        gzip(&[head.as_bytes(), tail.as_bytes()])?,
    )?;
    std::fs::write(d.join("one.csv.zst"), zstd(&[text.as_bytes()]))?;
    std::fs::write(
        d.join("frames.csv.zst"),
        zstd(&[head.as_bytes(), tail.as_bytes()]),
    )?;
    std::fs::write(d.join("gzip-named.dat"), gzip(&[text.as_bytes()])?)?;
    // A plain file that merely ends in .gz, read as text when told so.
    std::fs::write(d.join("not-compressed.gz"), &text)?;
    let url = |n: &str| d.join(n).to_string_lossy().into_owned();
    let hdr = serde_json::json!({"hdr_line_idx": 0, "first_data_line_idx": 1});
    let with = |c: &str| {
        let mut h = hdr.clone();
        h["compression"] = serde_json::Value::from(c);
        h
    };
    let (want, _) = run(d, &script(d, &[url("plain.csv")], hdr.clone())?)?;
    ensure!(
        want.len() > 50_000,
        "the plain run wrote {} bytes",
        want.len()
    );
    for (name, csv) in [
        ("one.csv.gz", hdr.clone()),
        ("members.csv.GZ", hdr.clone()),
        ("one.csv.zst", hdr.clone()),
        ("frames.csv.zst", hdr.clone()),
        ("gzip-named.dat", with("gzip")),
        ("not-compressed.gz", with("none")),
        ("one.csv.zst", with("zstd")),
    ] {
        let (got, batches) = run(d, &script(d, &[url(name)], csv)?)?;
        ensure!(
            got == want,
            "{name}: the output differs from the plain file's"
        );
        ensure!(
            batches == 1,
            "{name}: a compressed file is one batch, got {batches}"
        );
    }
    // The same files streamed from an http server.
    let srv = plexus_testkit::remote::HttpFiles::start(d, false)?;
    for name in ["members.csv.GZ", "frames.csv.zst"] {
        let (got, _) = run(d, &script(d, &[srv.url(name)], hdr.clone())?)?;
        ensure!(
            got == want,
            "http {name}: the output differs from the plain file's"
        );
        ensure!(srv.gets(name) >= 1, "http {name} was not fetched");
    }
    Ok(())
}

#[test]
fn a_compressed_file_is_never_cut_into_byte_ranges() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let text = csv_text(20_000, 0);
    std::fs::write(d.join("big.csv"), &text)?;
    std::fs::write(d.join("big.csv.gz"), gzip(&[text.as_bytes()])?)?;
    let hdr = serde_json::json!({"hdr_line_idx": 0, "first_data_line_idx": 1});
    let split = SplitSettings {
        min_file_bytes: 0,
        part_bytes: 64 * 1024,
    };
    for (name, want_parts) in [("big.csv", true), ("big.csv.gz", false)] {
        let s = script(
            d,
            &[d.join(name).to_string_lossy().into_owned()],
            hdr.clone(),
        )?;
        let plan = planner::build_plan_with(&s.to_string_lossy(), None, &split)
            .map_err(|e| anyhow::anyhow!("{}", e.lines().join("\n")))?;
        let batches = plan
            .nodes
            .iter()
            .find(|n| n.name == "read")
            .map(|n| n.batches);
        ensure!(
            (batches > Some(1)) == want_parts,
            "{name}: {batches:?} batches"
        );
    }
    Ok(())
}

#[test]
fn a_corrupt_or_misnamed_compressed_file_fails_naming_the_file() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let text = csv_text(500, 0);
    let mut gz = gzip(&[text.as_bytes()])?;
    let mid = gz.len() / 2;
    gz[mid] ^= 0xff;
    gz[mid + 1] ^= 0xff;
    std::fs::write(d.join("bad.csv.gz"), &gz)?;
    std::fs::write(d.join("plain-but-zst.csv.zst"), &text)?;
    let hdr = serde_json::json!({"hdr_line_idx": 0, "first_data_line_idx": 1});
    for name in ["bad.csv.gz", "plain-but-zst.csv.zst"] {
        let s = script(
            d,
            &[d.join(name).to_string_lossy().into_owned()],
            hdr.clone(),
        )?;
        match run(d, &s) {
            Ok(_) => bail!("{name}: a corrupt file read as success"),
            Err(e) => {
                let msg = format!("{e:#}");
                ensure!(
                    msg.contains(name),
                    "{name}: the error does not name it: {msg}"
                );
            }
        }
    }
    // An unknown setting is a script error naming the field.
    let s = script(
        d,
        &[d.join("bad.csv.gz").to_string_lossy().into_owned()],
        serde_json::json!({"hdr_line_idx": 0, "first_data_line_idx": 1, "compression": "lz4"}),
    )?;
    let err = planner::build_plan(&s.to_string_lossy(), None)
        .err()
        .context("compression lz4 accepted")?;
    let lines = err.lines().join("\n");
    ensure!(
        lines.contains("r.csv.compression") && lines.contains("lz4"),
        "{lines}"
    );
    Ok(())
}

/// The URLs of the plan's reader, in batch order.
fn reader_urls(script: &Path) -> Result<Vec<String>> {
    let plan = planner::build_plan(&script.to_string_lossy(), None)
        .map_err(|e| anyhow::anyhow!("{}", e.lines().join("\n")))?;
    match plan.node("read").map(|n| &n.reader) {
        Some(plexus_core::plan::Reader::File(r)) => Ok(r.urls.clone()),
        _ => bail!("no file reader"),
    }
}

/// Three parts of one data set (plain, gzip, zstd) and a file no pattern should take.
fn parts(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir.join("sub"))?;
    std::fs::write(dir.join("part_b.csv"), csv_text(400, 400))?;
    std::fs::write(
        dir.join("part_a.csv.gz"),
        gzip(&[csv_text(400, 0).as_bytes()])?,
    )?;
    std::fs::write(
        dir.join("sub/part_c.csv.zst"),
        zstd(&[csv_text(400, 800).as_bytes()]),
    )?;
    std::fs::write(dir.join("other.txt"), "not,a,part\n")?;
    Ok(())
}

#[test]
fn local_patterns_expand_sorted_and_write_the_listed_runs_files() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let input = d.join("in");
    parts(&input)?;
    let p = |rel: &str| input.join(rel).to_string_lossy().into_owned();
    let hdr = serde_json::json!({"hdr_line_idx": 0, "first_data_line_idx": 1});
    let listed = script(d, &[p("part_a.csv.gz"), p("part_b.csv")], hdr.clone())?;
    let (want, _) = run(d, &listed)?;
    let pattern = script(d, &[p("part_*")], hdr.clone())?;
    ensure!(
        reader_urls(&pattern)? == vec![p("part_a.csv.gz"), p("part_b.csv")],
        "{:?}",
        reader_urls(&pattern)?
    );
    let (got, batches) = run(d, &pattern)?;
    ensure!(batches == 2, "{batches} batches");
    ensure!(
        got == want,
        "the pattern's run wrote other bytes than the listed run"
    );
    // `**` reaches into directories; a literal URL beside a pattern keeps its place.
    let deep = script(d, &[p("**/part_*.csv*"), p("part_b.csv")], hdr)?;
    ensure!(
        reader_urls(&deep)?
            == vec![
                p("part_a.csv.gz"),
                p("part_b.csv"),
                p("sub/part_c.csv.zst"),
                p("part_b.csv")
            ],
        "{:?}",
        reader_urls(&deep)?
    );
    Ok(())
}

#[test]
fn a_pattern_that_matches_nothing_is_an_error_naming_it() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    parts(&d.join("in"))?;
    let pattern = d.join("in/nothing_*.csv").to_string_lossy().into_owned();
    let s = script(
        d,
        std::slice::from_ref(&pattern),
        serde_json::json!({"hdr_line_idx": 0, "first_data_line_idx": 1}),
    )?;
    let err = planner::build_plan(&s.to_string_lossy(), None)
        .err()
        .context("a pattern matching nothing made a plan")?;
    let text = err.lines().join("\n");
    ensure!(
        text.contains("node read")
            && text.contains("r.urls")
            && text.contains(&pattern)
            && text.contains("matches no file"),
        "{text}"
    );
    Ok(())
}

/// `s3://bucket/dir*/part_*` lists the bucket and matches keys at depth (moto's S3 server on
/// loopback). The pattern's literal prefix here holds no `/`: moto checks signatures against
/// the query as sent, and a listing prefix `in/` (sent unencoded, signed encoded, as AWS
/// wants) is refused by moto alone.
#[test]
fn s3_patterns_list_the_bucket() -> Result<()> {
    let Some(s3) = plexus_testkit::remote::MotoS3::start()? else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let input = d.join("in");
    parts(&input)?;
    s3.make_bucket("globs")?;
    for (key, file) in [
        ("in/part_b.csv", "part_b.csv"),
        ("in/part_a.csv.gz", "part_a.csv.gz"),
        ("in/sub/part_c.csv.zst", "sub/part_c.csv.zst"),
        ("in/other.txt", "other.txt"),
        ("elsewhere/part_z.csv", "part_b.csv"),
    ] {
        s3.put("globs", key, &input.join(file))?;
    }
    let hdr = serde_json::json!({"hdr_line_idx": 0, "first_data_line_idx": 1});
    let p = |rel: &str| input.join(rel).to_string_lossy().into_owned();
    let listed = script(d, &[p("part_a.csv.gz"), p("part_b.csv")], hdr.clone())?;
    let (want, _) = run(d, &listed)?;
    let pattern = script(d, &["s3://globs/in*/part_*".to_owned()], hdr)?;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_planner"))
        .args(["validate", &pattern.to_string_lossy(), "--show-plan"])
        .envs(s3.env())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let urls: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("url "))
        .collect();
    ensure!(
        urls == ["s3://globs/in/part_a.csv.gz", "s3://globs/in/part_b.csv"],
        "{text}"
    );
    let data = d.join("data_s3");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_planner"))
        .args(["run", &pattern.to_string_lossy(), "--data-dir"])
        .arg(&data)
        .args(["--keyspace", "globs"])
        .envs(s3.env())
        .output()?;
    ensure!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        std::fs::read(d.join("out/all.csv"))? == want,
        "the s3 pattern's run wrote other bytes than the listed local run"
    );
    Ok(())
}
