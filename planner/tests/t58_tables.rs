//! `planner table list|show|dump` on both stores: the sample pipeline run on the embedded store
//! and on the CQL wire double shows the same tables with the same rows (rowids included: they
//! do not depend on the store), as CSV, JSON lines and Parquet.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, Result, ensure};
use plexus_testkit::cql::CqlDouble;

/// `planner ARGS` in the workspace; stdout, or an error with stderr.
fn planner(args: &[&str]) -> Result<String> {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(env!("CARGO_BIN_EXE_planner"))
        .args(args)
        .current_dir(&ws)
        .env_remove("PLEXUS_CLUSTER")
        .output()?;
    ensure!(
        out.status.success(),
        "planner {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs the sample into the store `store` names, its outputs in `tmp/out_<tag>`.
fn run_sample(tmp: &Path, tag: &str, store: &[&str]) -> Result<()> {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = tmp.join(format!("out_{tag}"));
    std::fs::create_dir_all(&out)?;
    let params = tmp.join(format!("params_{tag}.json"));
    std::fs::write(
        &params,
        serde_json::json!({
            "dir_in": ws.join("examples/roastery/data"),
            "dir_out": out,
            "dir_py": ws.join("examples/roastery"),
            "first_order_date": "2026-01-01 00:00:00",
            "bean_batches": 2
        })
        .to_string(),
    )?;
    let mut args = vec![
        "run",
        "examples/roastery/script.json",
        "--params",
        params.to_str().context("path")?,
        "--keyspace",
        "tables",
    ];
    args.extend_from_slice(store);
    planner(&args)?;
    Ok(())
}

/// `planner table show` of up to 1,000 rows of `table` in the test's keyspace, of one batch.
fn show_args<'a>(table: &'a str, batch: Option<&'a str>) -> Vec<&'a str> {
    let mut a = vec![
        "table",
        "show",
        "--keyspace",
        "tables",
        table,
        "--limit",
        "1000",
    ];
    a.extend(batch.map(|b| ["--batch", b]).into_iter().flatten());
    a
}

fn sorted_lines(text: &str) -> Vec<&str> {
    let mut v: Vec<&str> = text.lines().collect();
    v.sort_unstable();
    v
}

#[test]
fn list_show_and_dump_agree_on_both_stores() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    let embedded = ["--data-dir", data.to_str().context("path")?];
    run_sample(tmp.path(), "embedded", &embedded)?;
    let double = CqlDouble::start()?;
    let addr = double.addr().to_string();
    let cql = ["--store", "cql", "--cql-contact-points", addr.as_str()];
    run_sample(tmp.path(), "cql", &cql)?;

    let with = |args: &[&str], store: &[&str]| -> Result<String> {
        let mut a = args.to_vec();
        a.extend_from_slice(store);
        planner(&a)
    };
    let list = with(&["table", "list", "--keyspace", "tables"], &embedded)?;
    ensure!(
        list.lines().next() == Some("table,run_id,stored_as,created_by,rows"),
        "{list}"
    );
    ensure!(
        list.contains("\nbeans,1,beans_00001,read_beans,15\n"),
        "{list}"
    );
    ensure!(
        list.contains("\norder_lines,1,order_lines_00001,order_lines,240\n"),
        "{list}"
    );
    ensure!(
        with(&["table", "list", "--keyspace", "tables"], &cql)? == list,
        "the stores list other tables"
    );

    for table in ["beans", "order_lines", "customers"] {
        let args = show_args(table, None);
        let e = with(&args, &embedded)?;
        let c = with(&args, &cql)?;
        ensure!(
            e.lines().next().is_some_and(|h| h.starts_with("rowid,")),
            "{table}: {e}"
        );
        // The rowids of a file reader's rows are the same on both stores; a table reader's
        // batches are rowid ranges on one store and token ranges on the other, so the rowids
        // of what they write differ (as between Capillaries' runs), the rows do not.
        let strip = |t: &str| -> String {
            t.lines()
                .map(|l| l.split_once(',').map_or(l, |(_, rest)| rest))
                .collect::<Vec<_>>()
                .join("\n")
        };
        if table == "beans" {
            ensure!(
                sorted_lines(&e) == sorted_lines(&c),
                "{table}: other rows or rowids"
            );
        }
        ensure!(
            sorted_lines(&strip(&e)) == sorted_lines(&strip(&c)),
            "{table}: the stores show other rows"
        );
        let count = list
            .lines()
            .find(|l| l.starts_with(&format!("{table},")))
            .and_then(|l| l.rsplit(',').next())
            .and_then(|n| n.parse::<usize>().ok())
            .context("row count")?;
        ensure!(
            e.lines().count() == count + 1,
            "{table}: {count} rows listed"
        );
    }
    // Prices render as Capillaries' CSV writer renders decimal2 (two decimals).
    let beans = with(
        &[
            "table",
            "show",
            "--keyspace",
            "tables",
            "beans",
            "--limit",
            "1",
        ],
        &embedded,
    )?;
    // The fields in the order the script's w.fields lists them.
    let header: Vec<&str> = beans.lines().next().context("header")?.split(',').collect();
    ensure!(
        header
            == [
                "rowid",
                "bean_id",
                "origin",
                "roast",
                "price_per_kg",
                "harvested"
            ],
        "{header:?}"
    );
    let price = beans
        .lines()
        .nth(1)
        .and_then(|l| l.split(',').nth(4))
        .context("row")?;
    ensure!(
        price.split_once('.').is_some_and(|(_, c)| c.len() == 2),
        "{price}"
    );

    // --batch: the rows each batch of the creating node wrote, on both stores; together the
    // batches hold every row once, and each matches the batch's count in the ledger.
    for store in [&embedded[..], &cql[..]] {
        let all = with(
            &[
                "table",
                "show",
                "--keyspace",
                "tables",
                "order_lines",
                "--limit",
                "1000",
            ],
            store,
        )?;
        let mut parts: Vec<String> = Vec::new();
        for b in ["0", "1"] {
            let part = with(
                &[
                    "table",
                    "show",
                    "--keyspace",
                    "tables",
                    "order_lines",
                    "--limit",
                    "1000",
                    "--batch",
                    b,
                ],
                store,
            )?;
            ensure!(part.lines().count() > 1, "batch {b} wrote no rows: {part}");
            parts.extend(part.lines().skip(1).map(str::to_owned));
        }
        let mut whole: Vec<String> = all.lines().skip(1).map(str::to_owned).collect();
        whole.sort_unstable();
        parts.sort_unstable();
        ensure!(
            parts == whole,
            "batches 0 and 1 are not the table's rows, once each"
        );
        // A file reader's batch is its URL's rows (rowids by their place in the file).
        let show = |table: &str, batch: Option<&str>| -> Result<Vec<String>> {
            let text = with(&show_args(table, batch), store)?;
            Ok(sorted_lines(&text).into_iter().map(str::to_owned).collect())
        };
        let beans = show("beans", None)?;
        ensure!(beans.len() > 2, "beans: {beans:?}");
        ensure!(
            show("beans", Some("0"))? == beans,
            "batch 0 of read_beans is not every row of its one file"
        );
        let err = with(
            &[
                "table",
                "show",
                "--keyspace",
                "tables",
                "order_lines",
                "--batch",
                "2",
            ],
            store,
        )
        .err()
        .context("a batch the node does not have was shown")?;
        ensure!(format!("{err:#}").contains("no batch 2"), "{err:#}");
    }

    // JSON lines: one object per row with every field.
    let json = with(
        &[
            "table",
            "dump",
            "--keyspace",
            "tables",
            "customers",
            "--format",
            "json",
        ],
        &cql,
    )?;
    ensure!(json.lines().count() == 10, "{json}");
    for line in json.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        ensure!(
            v.get("rowid").is_some_and(serde_json::Value::is_i64),
            "{line}"
        );
    }

    // Parquet, read back with the parquet crate.
    let file = tmp.path().join("order_lines.parquet");
    with(
        &[
            "table",
            "dump",
            "--keyspace",
            "tables",
            "order_lines",
            "--format",
            "parquet",
            "--output",
            file.to_str().context("path")?,
        ],
        &embedded,
    )?;
    let reader = parquet::file::reader::SerializedFileReader::new(std::fs::File::open(&file)?)?;
    use parquet::file::reader::FileReader as _;
    ensure!(reader.metadata().file_metadata().num_rows() == 240);

    // An unknown table is an error that says where to look.
    let err = with(
        &["table", "show", "--keyspace", "tables", "nosuch"],
        &embedded,
    )
    .err()
    .context("an unknown table was shown")?;
    ensure!(format!("{err:#}").contains("planner table list"), "{err:#}");
    Ok(())
}
