//! File formats layer against the conformance inputs (read-only) and hand-made edge cases.
//!
//! The conformance data is found by `plexus_testkit::conformance` (`PLEXUS_CONFORMANCE_DIR`,
//! `PLEXUS_CAPILLARIES_DIR`, then `../shared/conformance`); without it those tests are skipped.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail, ensure};
use plexus_core::expr::parse;
use plexus_core::key::{build_key_into, parse_order_expr};
use plexus_core::plan::{
    CsvReaderSettings, FileColumn, FileReader, FileReaderFormat, FileWriter, FileWriterFormat,
    ParquetCodec, Plan, PlanExpr, Reader, ReaderColumn, Top, Writer,
};
use plexus_core::value::{CellView, Time, Type, Value};
use plexus_node::files::{
    FileError, ProtoDirs, RowSource, SampledBound, SortedRow, TopBuffer, create_sink, open_source,
    proto_script_csv, proto_script_parquet,
};
use rust_decimal::Decimal;
use serde_json::Value as Json;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The conformance data (lookup order in `plexus_testkit::conformance`), or returns `Ok(())`
/// from the calling test after reporting the skip.
macro_rules! need_conformance {
    () => {
        match plexus_testkit::conformance::conformance(env!("CARGO_MANIFEST_DIR"))? {
            Some(c) => c,
            None => return Ok(()),
        }
    };
}

fn build_plan(script: &Path, params: Option<&Path>) -> Result<Plan> {
    let script = script.to_str().context("script path")?;
    let params = params
        .map(|p| p.to_str().context("params path"))
        .transpose()?;
    plexus_node::script_files::build_plan(script, params)
        .map_err(|e| anyhow!("{}", e.lines().join("\n")))
}

fn file_reader<'a>(plan: &'a Plan, node: &str) -> Result<&'a FileReader> {
    match &plan.node(node).context(node.to_owned())?.reader {
        Reader::File(r) => Ok(r),
        Reader::Table(_) => bail!("{node} is not a file reader"),
    }
}

fn file_writer<'a>(plan: &'a Plan, node: &str) -> Result<&'a FileWriter> {
    match &plan.node(node).context(node.to_owned())?.writer {
        Writer::File(w) => Ok(w),
        Writer::Table(_) => bail!("{node} is not a file writer"),
    }
}

fn read_all(reader: &FileReader, url: &str) -> Result<Vec<Vec<Value>>, FileError> {
    let mut src = open_source(reader, url)?;
    read_rest(src.as_mut())
}

fn read_rest(src: &mut dyn RowSource) -> Result<Vec<Vec<Value>>, FileError> {
    let mut all = Vec::new();
    let mut chunk = Vec::new();
    while src.next_chunk(&mut chunk, 100)? > 0 {
        all.extend(chunk.iter().cloned());
    }
    Ok(all)
}

fn col(name: &str, ty: Type, idx: i64, hdr: &str, format: &str) -> ReaderColumn {
    ReaderColumn {
        name: name.to_owned(),
        ty,
        default_value: String::new(),
        csv_idx: idx,
        csv_header: hdr.to_owned(),
        csv_format: format.to_owned(),
        parquet_column: String::new(),
    }
}

fn csv_reader(
    hdr: i64,
    first: i64,
    sep: u8,
    by_header: bool,
    cols: Vec<ReaderColumn>,
) -> FileReader {
    FileReader {
        urls: Vec::new(),
        format: FileReaderFormat::Csv(CsvReaderSettings {
            hdr_line_idx: hdr,
            first_data_line_idx: first,
            separator: sep,
            by_header,
            compression: plexus_core::plan::Compression::Auto,
        }),
        columns: cols,
        splits: Vec::new(),
    }
}

/// String columns `c0..c{n-1}` by index, no header.
fn strings_by_index(n: i64) -> FileReader {
    let cols = (0..n)
        .map(|i| col(&format!("c{i}"), Type::String, i, "", ""))
        .collect();
    csv_reader(-1, 0, b',', false, cols)
}

fn write_temp(dir: &Path, name: &str, bytes: &[u8]) -> Result<String> {
    let p = dir.join(name);
    std::fs::write(&p, bytes)?;
    Ok(p.to_str().context("utf-8 temp path")?.to_owned())
}

fn strs(rows: &[Vec<Value>]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| {
            r.iter()
                .map(|v| match v {
                    Value::Str(s) => s.to_string(),
                    other => format!("{other:?}"),
                })
                .collect()
        })
        .collect()
}

fn err_text<T>(r: Result<T, FileError>) -> String {
    match r {
        Ok(_) => "<no error>".to_owned(),
        Err(e) => e.to_string(),
    }
}

fn expr(src: &str) -> Result<PlanExpr> {
    Ok(PlanExpr {
        src: src.to_owned(),
        ast: parse(src).map_err(|e| anyhow!("{e}"))?,
    })
}

fn out_col(name: &str, ty: Type, header: &str, format: &str) -> Result<FileColumn> {
    Ok(FileColumn {
        name: name.to_owned(),
        ty,
        expr: expr(&format!("r.{name}"))?,
        header: header.to_owned(),
        format: format.to_owned(),
        parquet_column: name.to_owned(),
    })
}

/// Writes `rows` into a Parquet file at `path` with our writer.
fn write_parquet(
    path: &Path,
    columns: &[FileColumn],
    codec: ParquetCodec,
    rows: &[Vec<Value>],
) -> Result<()> {
    let writer = FileWriter {
        url_template: String::new(),
        format: FileWriterFormat::Parquet { codec },
        columns: columns.to_vec(),
        having: None,
        top: None,
    };
    let mut sink = create_sink(&writer, &path.to_string_lossy())?;
    for r in rows {
        sink.write_row(r)?;
    }
    sink.finish()?;
    Ok(())
}

/// A Parquet reader of the columns a file was written with.
fn parquet_reader_of(columns: &[FileColumn]) -> FileReader {
    FileReader {
        urls: Vec::new(),
        format: FileReaderFormat::Parquet,
        columns: columns
            .iter()
            .map(|c| ReaderColumn {
                name: c.name.clone(),
                ty: c.ty,
                default_value: String::new(),
                csv_idx: 0,
                csv_header: String::new(),
                csv_format: String::new(),
                parquet_column: c.parquet_column.clone(),
            })
            .collect(),
        splits: Vec::new(),
    }
}

/// Lines with a trailing `\r` stripped: the conformance `diff -b` rule.
fn diff_b_lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|l| l.trim_end_matches('\r').to_owned())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// CSV reader: Go encoding/csv LazyQuotes semantics and error reporting
// ---------------------------------------------------------------------------------------------

#[test]
fn csv_lazy_quotes_empty_lines_and_crlf() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let input =
        b"a,\"abc\"def\",x\r\n\r\n\nq,\"multi\r\nline\",\"\"\"quoted\"\"\"\nu,ab\"c,\"e,f\"\n";
    let url = write_temp(dir.path(), "lazy.csv", input)?;
    let rows = read_all(&strings_by_index(3), &url)?;
    assert_eq!(
        strs(&rows),
        vec![
            vec!["a", "abc\"def", "x"],
            vec!["q", "multi\nline", "\"quoted\""],
            vec!["u", "ab\"c", "e,f"],
        ]
    );
    // A bare quote after the closing quote keeps the field open up to EOF (Go LazyQuotes).
    let url = write_temp(dir.path(), "open.csv", b"x\n\"ab\" ,c\nd,e\n")?;
    let rows = read_all(&strings_by_index(1), &url)?;
    assert_eq!(strs(&rows), vec![vec!["x"], vec!["ab\" ,c\nd,e\n"]]);
    Ok(())
}

#[test]
fn csv_wrong_number_of_fields_names_file_and_line() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let url = write_temp(dir.path(), "count.csv", b"a,b\n\nc,d\ne\n")?;
    let err = err_text(read_all(&strings_by_index(2), &url));
    assert!(
        err.contains("count.csv") && err.contains("record on line 4"),
        "{err}"
    );
    assert!(err.contains("wrong number of fields"), "{err}");
    // The header counts too: a data line with more fields than the header fails.
    let url = write_temp(dir.path(), "hdr.csv", b"id,name\n1,x,extra\n")?;
    let r = csv_reader(0, 1, b',', true, vec![col("id", Type::String, 0, "id", "")]);
    let err = err_text(read_all(&r, &url));
    assert!(
        err.contains("record on line 2: wrong number of fields (expected 2, got 3)"),
        "{err}"
    );
    Ok(())
}

#[test]
fn csv_header_resolution() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let url = write_temp(dir.path(), "h.csv", b"skip,me\nprice,name\n1.50,x\n2,y\n")?;
    let cols = vec![
        col("n", Type::String, 0, "name", ""),
        col("p", Type::Decimal2, 0, "price", ""),
    ];
    let rows = read_all(&csv_reader(1, 2, b',', true, cols), &url)?;
    assert_eq!(
        rows,
        vec![
            vec![Value::str("x"), Value::Decimal(Decimal::new(150, 2))],
            vec![Value::str("y"), Value::Decimal(Decimal::new(2, 0))],
        ]
    );
    // Exact, case-sensitive match; every missing header is listed.
    let cols = vec![
        col("n", Type::String, 0, "Name", ""),
        col("p", Type::String, 0, "price", ""),
        col("q", Type::String, 0, "qty", ""),
    ];
    let err = err_text(read_all(&csv_reader(1, 2, b',', true, cols), &url));
    assert!(
        err.contains("h.csv")
            && err.contains("cannot resolve all 3 source file column indexes")
            && err.contains("\"Name\", \"qty\""),
        "{err}"
    );
    Ok(())
}

#[test]
fn csv_bom_is_not_removed() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let url = write_temp(dir.path(), "bom.csv", b"\xEF\xBB\xBFid,v\n1,2\n")?;
    let by_name = csv_reader(0, 1, b',', true, vec![col("id", Type::Int, 0, "id", "")]);
    let err = err_text(read_all(&by_name, &url));
    assert!(
        err.contains("cannot resolve all 1") && err.contains("\"id\""),
        "{err}"
    );
    let rows = read_all(&strings_by_index(2), &url)?;
    assert_eq!(rows[0][0], Value::str("\u{feff}id"));
    Ok(())
}

#[test]
fn csv_invalid_utf8_fails_with_location() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let url = write_temp(dir.path(), "latin1.csv", b"id,name\n1,caf\xE9\n")?;
    let r = csv_reader(
        0,
        1,
        b',',
        true,
        vec![col("nm", Type::String, 0, "name", "")],
    );
    let err = err_text(read_all(&r, &url));
    assert!(
        err.contains("latin1.csv")
            && err.contains("line 2")
            && err.contains("column nm")
            && err.contains("\"name\"")
            && err.contains("not valid UTF-8")
            && err.contains("caf\u{FFFD}"),
        "{err}"
    );
    // A column the reader does not use may hold anything, as in Capillaries.
    let r = csv_reader(0, 1, b',', true, vec![col("id", Type::Int, 0, "id", "")]);
    assert_eq!(read_all(&r, &url)?, vec![vec![Value::Int(1)]]);
    Ok(())
}

#[test]
fn csv_errors_name_file_line_column_and_cell() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let url = write_temp(dir.path(), "bad.csv", b"a,b\n1,2\n\n3,x4\n")?;
    let cols = vec![
        col("first", Type::Int, 0, "", ""),
        col("second", Type::Int, 1, "", "%d"),
    ];
    let err = err_text(read_all(&csv_reader(-1, 1, b',', false, cols), &url));
    assert!(
        err.contains("bad.csv")
            && err.contains("line 4 (record 2)")
            && err.contains("column second (index 1)")
            && err.contains("cell \"x4\""),
        "{err}"
    );
    // col_idx beyond the record: an error, not a crash.
    let cols = vec![col("far", Type::String, 5, "", "")];
    let err = err_text(read_all(&csv_reader(-1, 1, b',', false, cols), &url));
    assert!(
        err.contains("bad.csv")
            && err.contains("line 2")
            && err.contains("column far (index 5) is beyond the 2 fields"),
        "{err}"
    );
    Ok(())
}

#[test]
fn csv_index_mode_reads_header_as_data_when_first_data_line_is_zero() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let url = write_temp(dir.path(), "t.csv", b"h\nv\n")?;
    let rows = read_all(
        &csv_reader(0, 0, b',', false, vec![col("c", Type::String, 0, "", "")]),
        &url,
    )?;
    assert_eq!(strs(&rows), vec![vec!["h"], vec!["v"]]);
    Ok(())
}

#[test]
fn malformed_remote_urls_fail_before_any_request() {
    let r = strings_by_index(1);
    for (url, why) in [
        ("https:///x.csv", "no host"),
        ("s3://bucket", "no object key"),
        ("sftp://h/x.csv", "no user"),
    ] {
        let err = err_text(read_all(&r, url));
        assert!(err.contains(url) && err.contains(why), "{err}");
    }
}

#[test]
fn chunks_reuse_rows_and_end_with_zero() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let url = write_temp(dir.path(), "c.csv", b"1\n2\n3\n4\n5")?;
    let r = csv_reader(-1, 0, b',', false, vec![col("c", Type::Int, 0, "", "")]);
    let mut src = open_source(&r, &url)?;
    let mut out = Vec::new();
    assert_eq!(src.next_chunk(&mut out, 2)?, 2);
    assert_eq!(out, vec![vec![Value::Int(1)], vec![Value::Int(2)]]);
    assert_eq!(src.next_chunk(&mut out, 2)?, 2);
    assert_eq!(src.next_chunk(&mut out, 2)?, 1);
    assert_eq!(out, vec![vec![Value::Int(5)]]);
    assert_eq!(src.next_chunk(&mut out, 2)?, 0);
    assert!(out.is_empty());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// CSV reader on the conformance inputs, through the real scripts
// ---------------------------------------------------------------------------------------------

#[test]
fn lookup_inputs_read_completely() -> Result<()> {
    let conf = need_conformance!();
    let dir = tempfile::tempdir()?;
    let params = dir.path().join("params.yaml");
    let src = std::fs::read_to_string(conf.cfg("lookup").join("script_params_quick_fs_one.yaml"))?;
    let in_dir = conf.input("lookup");
    std::fs::write(
        &params,
        src.replace(
            "/tmp/capi_in/lookup_quicktest",
            in_dir.to_str().context("path")?,
        ),
    )?;
    let plan = build_plan(&conf.cfg("lookup").join("script_quick.yaml"), Some(&params))?;

    let orders = file_reader(&plan, "read_orders")?;
    let rows = read_all(orders, &orders.urls[0])?;
    assert_eq!(rows.len(), 1409);
    let names: Vec<&str> = orders.columns.iter().map(|c| c.name.as_str()).collect();
    let ts = names
        .iter()
        .position(|n| *n == "col_order_purchase_timestamp")
        .context("ts")?;
    let id = names
        .iter()
        .position(|n| *n == "col_order_id")
        .context("id")?;
    assert_eq!(rows[0][id], Value::str("19c6b8d993de74001dc321279b6b5e49"));
    assert_eq!(
        rows[0][ts],
        Value::Time(
            plexus_core::gotime::parse("2006-01-02 15:04:05", "2018-05-03 05:07:55")
                .map_err(|e| anyhow!("{e}"))?
        )
    );

    let items = file_reader(&plan, "read_order_items")?;
    let rows = read_all(items, &items.urls[0])?;
    assert_eq!(rows.len(), 1390);
    let names: Vec<&str> = items.columns.iter().map(|c| c.name.as_str()).collect();
    let get = |row: &Vec<Value>, n: &str| -> Result<Value> {
        let i = names.iter().position(|x| *x == n).context(n.to_owned())?;
        Ok(row[i].clone())
    };
    // `00002` with %d, `28.5` with %f rounded to cents.
    assert_eq!(get(&rows[0], "col_order_item_id")?, Value::Int(2));
    assert_eq!(
        get(&rows[1], "col_freight_value")?,
        Value::Decimal(Decimal::new(2850, 2))
    );
    assert_eq!(
        get(&rows[0], "col_price")?,
        Value::Decimal(Decimal::new(5731, 2))
    );
    Ok(())
}

#[test]
fn tag_and_denormalize_inputs_read_completely() -> Result<()> {
    let conf = need_conformance!();
    let dir = tempfile::tempdir()?;
    let params = dir.path().join("params.json");
    let base = "tag_and_denormalize";
    let p = serde_json::json!({
        "totals_start_policy": "auto",
        "url_suffix": "",
        "dir_cfg": conf.cfg(base),
        "dir_in": conf.input(base),
        "dir_out": dir.path(),
    });
    std::fs::write(&params, serde_json::to_vec(&p)?)?;
    let plan = build_plan(&conf.cfg(base).join("script.json"), Some(&params))?;

    // Headerless single column, hdr_line_idx defaulting to 0 in index mode, first data 0.
    let tags = file_reader(&plan, "read_tags")?;
    let rows = read_all(tags, &tags.urls[0])?;
    assert_eq!(
        strs(&rows),
        vec![
            vec!["casualfootwear"],
            vec!["boys"],
            vec!["engagement"],
            vec!["diving"]
        ]
    );

    // Tab-separated, lazy quotes in JSON-ish cells, last line without newline.
    let products = file_reader(&plan, "read_products")?;
    let rows = read_all(products, &products.urls[0])?;
    assert_eq!(rows.len(), 11362);
    let names: Vec<&str> = products.columns.iter().map(|c| c.name.as_str()).collect();
    let id = names
        .iter()
        .position(|n| *n == "col_product_id")
        .context("id")?;
    let spec = names
        .iter()
        .position(|n| *n == "col_product_specifications")
        .context("spec")?;
    assert_eq!(rows[0][id], Value::Int(1));
    assert_eq!(rows[11361][id], Value::Int(11362));
    let Value::Str(last) = &rows[11361][spec] else {
        bail!("spec is not a string")
    };
    assert!(last.ends_with("Religious\"}}"), "{last}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Parquet reader
// ---------------------------------------------------------------------------------------------

fn products_csv_reader() -> FileReader {
    csv_reader(
        0,
        1,
        b'\t',
        true,
        vec![
            col("discontinued", Type::Bool, 0, "discontinued", ""),
            col("id", Type::String, 0, "id", ""),
            col("price", Type::Decimal2, 0, "price", "%f"),
            col(
                "shipping_date",
                Type::DateTime,
                0,
                "shipping_date",
                "2006-01-02 15:04:05",
            ),
            col("sku", Type::Int, 0, "sku", "%d"),
            col("weight", Type::Float, 0, "weight", "%f"),
        ],
    )
}

fn products_parquet_reader() -> FileReader {
    let pq = |name: &str, ty: Type| ReaderColumn {
        name: name.to_owned(),
        ty,
        default_value: String::new(),
        csv_idx: 0,
        csv_header: String::new(),
        csv_format: String::new(),
        parquet_column: name.to_owned(),
    };
    FileReader {
        urls: Vec::new(),
        format: FileReaderFormat::Parquet,
        columns: vec![
            pq("discontinued", Type::Bool),
            pq("id", Type::String),
            pq("price", Type::Decimal2),
            pq("shipping_date", Type::DateTime),
            pq("sku", Type::Int),
            pq("weight", Type::Float),
        ],
        splits: Vec::new(),
    }
}

#[test]
fn products_parquet_equals_products_csv() -> Result<()> {
    let conf = need_conformance!().input("proto_file_reader_creator");
    let pq = read_all(
        &products_parquet_reader(),
        conf.join("products.parquet").to_str().context("p")?,
    )?;
    let csv = read_all(
        &products_csv_reader(),
        conf.join("products.csv").to_str().context("p")?,
    )?;
    assert_eq!(pq.len(), 48);
    assert_eq!(csv.len(), 48);
    let types: Vec<Option<Type>> = pq[0].iter().map(Value::column_type).collect();
    assert_eq!(
        types,
        vec![
            Some(Type::Bool),
            Some(Type::String),
            Some(Type::Decimal2),
            Some(Type::DateTime),
            Some(Type::Int),
            Some(Type::Float),
        ]
    );
    // Decimal equality is numeric; datetimes are both UTC instants.
    assert_eq!(pq, csv);
    Ok(())
}

#[test]
fn parquet_missing_and_unsupported_columns() -> Result<()> {
    let conf = need_conformance!()
        .input("proto_file_reader_creator")
        .join("products.parquet");
    let mut r = products_parquet_reader();
    r.columns[1].parquet_column = "no_such".to_owned();
    let err = err_text(read_all(&r, conf.to_str().context("p")?));
    assert!(
        err.contains("products.parquet")
            && err.contains("\"no_such\"")
            && err.contains("not found"),
        "{err}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Writers
// ---------------------------------------------------------------------------------------------

#[test]
fn csv_writer_quirks_byte_exact() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("out.csv");
    let writer = FileWriter {
        url_template: String::new(),
        format: FileWriterFormat::Csv {
            separator: ",".to_owned(),
        },
        columns: vec![
            out_col("name", Type::String, "name,full", "%s")?,
            out_col("price", Type::Decimal2, "price", "%10s")?,
            out_col("qty", Type::Int, "qty", "%05d")?,
            out_col("ts", Type::DateTime, "ts", "2006-01-02 15:04:05")?,
            out_col("w", Type::Float, "w", "%.3f")?,
            out_col("f", Type::Float, "f", "%f")?,
            out_col("ok", Type::Bool, "ok", "%t")?,
        ],
        having: None,
        top: None,
    };
    let mut sink = create_sink(&writer, &path.to_string_lossy())?;
    sink.write_row(&[
        Value::str("x,y"),
        Value::Decimal(Decimal::new(12, 0)),
        Value::Int(7),
        Value::Time(Time::from_unix_millis(1_542_340_805_123)),
        Value::Float(1.23456),
        Value::Float(2.5),
        Value::Bool(true),
    ])?;
    sink.write_row(&[
        Value::str("a\"b"),
        Value::Decimal(Decimal::new(-5, 1)),
        Value::Int(-3),
        Value::Time(Time::ZERO),
        Value::Float(0.0005),
        Value::Float(-1.0),
        Value::Bool(false),
    ])?;
    // Wrong type: a clear error, not a `%!d(string=…)` cell.
    let err = err_text(sink.write_row(&[
        Value::str("s"),
        Value::Decimal(Decimal::ONE),
        Value::str("7"),
        Value::Time(Time::ZERO),
        Value::Float(0.0),
        Value::Float(0.0),
        Value::Bool(false),
    ]));
    assert!(
        err.contains("out.csv") && err.contains("column qty expects int"),
        "{err}"
    );
    sink.finish()?;
    let got = std::fs::read(&path)?;
    let want = "\"name,full\",price,qty,ts,w,f,ok\r\n\
                \"x,y\",     12.00,00007,2018-11-16 04:00:05,1.235,2.500000,true\n\
                a\"b,     -0.50,-0003,0001-01-01 00:00:00,0.001,-1.000000,false\n";
    assert_eq!(String::from_utf8_lossy(&got), want);
    Ok(())
}

#[test]
fn csv_writer_header_only_and_missing_directory() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let writer = FileWriter {
        url_template: String::new(),
        format: FileWriterFormat::Csv {
            separator: "\t".to_owned(),
        },
        columns: vec![
            out_col("a", Type::Int, "a", "%d")?,
            out_col("b", Type::Int, "b", "%d")?,
        ],
        having: None,
        top: None,
    };
    let path = dir.path().join("empty.tsv");
    create_sink(&writer, &path.to_string_lossy())?.finish()?;
    assert_eq!(std::fs::read(&path)?, b"a\tb\r\n");
    let missing = dir.path().join("no/such/dir/x.csv");
    let err = err_text(create_sink(&writer, &missing.to_string_lossy()));
    assert!(
        err.contains("cannot create output file") && err.contains("no/such/dir/x.csv"),
        "{err}"
    );
    Ok(())
}

#[test]
fn top_matches_a_stable_sort_across_many_cuts() -> Result<()> {
    let columns = vec![
        out_col("k", Type::Int, "k", "%d")?,
        out_col("s", Type::String, "s", "%s")?,
    ];
    let order = parse_order_expr("k(desc)", &|f| (f == "k").then_some(Type::Int))
        .map_err(|e| anyhow!("{e}"))?;
    for limit in [1usize, 7, 37, 5000] {
        let mut top = TopBuffer::new(
            &Top {
                order: order.clone(),
                limit: limit as u64,
            },
            &columns,
        )?;
        let mut all = Vec::new();
        let mut x = 12345u64;
        for i in 0..1000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = ((x >> 33) % 50) as i64;
            let row = vec![Value::Int(k), Value::str(&format!("r{i}"))];
            top.push(&row)?;
            all.push((k, i, row));
        }
        // Keys descending, ties in arrival order: what Capillaries-compatible output needs.
        all.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let want: Vec<Vec<Value>> = all.into_iter().take(limit).map(|e| e.2).collect();
        assert_eq!(top.len(), limit.min(1000));
        assert_eq!(strs(&top.into_sorted()?), strs(&want), "limit {limit}");
    }
    Ok(())
}

/// A `top` following a bound sampled from its first rows keeps exactly the rows of one
/// without it, in one buffer and in shares sealed and absorbed as a parallel top does, while
/// it holds (and so spills) about half the rows; an expected count far too high gives a bound
/// too low, which the buffer reports; one close to the limit sets no bound. Randomised (seed
/// printed).
#[test]
fn top_with_a_sampled_bound_keeps_the_rows_of_one_without() -> Result<()> {
    let seed = plexus_testkit::seed::seed("PLEXUS_TOP_SEED", "top_sampled_bound");
    let columns = vec![
        out_col("k", Type::Int, "k", "%d")?,
        out_col("s", Type::String, "s", "%s")?,
    ];
    let order = parse_order_expr("k(asc)", &|f| (f == "k").then_some(Type::Int))
        .map_err(|e| anyhow!("{e}"))?;
    let (rows_total, limit, sample) = (20_000u64, 8_000usize, 1_000usize);
    let top = Top {
        order,
        limit: limit as u64,
    };
    let dir = tempfile::tempdir()?;
    let mut x = seed | 1;
    let rows: Vec<Vec<Value>> = (0..rows_total)
        .map(|i| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Many ties: 5,000 keys over 20,000 rows.
            vec![
                Value::Int(((x >> 33) % 5000) as i64),
                Value::str(&format!("r{i}")),
            ]
        })
        .collect();
    // 128 KiB of rows per run: a sample (1,000 rows) fits before the first.
    let buffer = |bound: Option<std::sync::Arc<SampledBound>>| -> Result<TopBuffer> {
        Ok(TopBuffer::new(&top, &columns)?
            .with_spill(128 << 10, dir.path())
            .with_sampled_bound(bound))
    };
    let mut plain = buffer(None)?;
    for r in &rows {
        plain.push(r)?;
    }
    let plain_runs = plain.spilled_runs();
    let want = plain.into_sorted()?;
    assert_eq!(want.len(), limit);
    // One buffer, the true count: about half the rows are dropped before they are held.
    let mut one = buffer(SampledBound::new(rows_total, sample))?;
    for r in &rows {
        one.push(r)?;
    }
    assert!(one.bound_held(), "seed {seed}");
    let runs = one.spilled_runs();
    assert!(
        runs * 10 < plain_runs * 7,
        "seed {seed}: {runs} runs with the bound, {plain_runs} without"
    );
    assert_eq!(one.into_sorted()?, want, "seed {seed}");
    // Shares of pages, as a parallel top hands them out, sharing one bound.
    let shares = |expected: u64| -> Result<TopBuffer> {
        let bound = SampledBound::new(expected, sample);
        let mut parts = [buffer(bound.clone())?, buffer(bound)?];
        for (page, chunk) in rows.chunks(700).enumerate() {
            let first = page as u64 * 700;
            for (seq, r) in (first..).zip(chunk) {
                parts[page % 2].push_at(r, seq)?;
            }
        }
        let [mut a, mut b] = parts;
        a.seal()?;
        b.seal()?;
        a.absorb(b);
        Ok(a)
    };
    let merged = shares(rows_total)?;
    assert!(merged.bound_held(), "seed {seed}");
    assert_eq!(merged.into_sorted()?, want, "seed {seed}");
    // A count a hundred times too high: the bound is far too low, and the buffers say so.
    let mut low = buffer(SampledBound::new(rows_total * 100, sample))?;
    for r in &rows {
        low.push(r)?;
    }
    assert!(
        !low.bound_held(),
        "seed {seed}: a bound too low went unnoticed"
    );
    assert!(!shares(rows_total * 100)?.bound_held(), "seed {seed}");
    // A count close to the limit: no bound is worth setting, every row is kept.
    let mut close = buffer(SampledBound::new(limit as u64 + 100, sample))?;
    for r in &rows {
        close.push(r)?;
    }
    assert!(close.bound_held());
    assert_eq!(close.spilled_runs(), plain_runs);
    assert_eq!(close.into_sorted()?, want, "seed {seed}");
    Ok(())
}

/// The spilling `top` (runs sorted to temporary files and merged) yields exactly the rows of
/// the in-memory one, in the same order: many ties, every order direction, and values the
/// storage encoding would not keep (datetimes with nanoseconds and a zone, decimals).
#[test]
fn top_spilled_runs_match_the_in_memory_buffer() -> Result<()> {
    let columns = vec![
        out_col("k", Type::Int, "k", "%d")?,
        out_col("s", Type::String, "s", "%s")?,
        out_col("t", Type::DateTime, "t", "2006-01-02")?,
        out_col("d", Type::Decimal2, "d", "%s")?,
    ];
    let dir = tempfile::tempdir()?;
    let zone = std::sync::Arc::new(plexus_core::value::Zone {
        offset: -7200,
        name: "XT".into(),
    });
    for order_text in ["k(desc)", "k(asc),s(desc)"] {
        let order = parse_order_expr(order_text, &|f| match f {
            "k" => Some(Type::Int),
            "s" => Some(Type::String),
            _ => None,
        })
        .map_err(|e| anyhow!("{e}"))?;
        for limit in [1usize, 13, 400, 5000] {
            let top = Top {
                order: order.clone(),
                limit: limit as u64,
            };
            let mut memory = TopBuffer::new(&top, &columns)?;
            // 1 KiB forces a run every dozen rows.
            let mut spilled = TopBuffer::new(&top, &columns)?.with_spill(1024, dir.path());
            let mut x = 99u64;
            for i in 0..3000u32 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let row = vec![
                    Value::Int(((x >> 33) % 40) as i64),
                    Value::str(&format!("s{}", (x >> 20) % 3)),
                    Value::Time(Time {
                        secs: 1_600_000_000 + i64::from(i),
                        nanos: 123_456_789,
                        zone: (i % 2 == 0).then(|| zone.clone()),
                    }),
                    Value::Decimal(Decimal::new(i64::from(i) * 7 + 1, 3)),
                ];
                memory.push(&row)?;
                spilled.push(&row)?;
            }
            // With limit 1 the kept row and the bound fit the budget: nothing to spill.
            let runs = spilled.spilled_runs();
            assert!(
                limit == 1 || runs > 1,
                "{order_text} limit {limit}: only {runs} runs"
            );
            let want = memory.into_sorted()?;
            assert_eq!(want.len(), limit.min(3000));
            assert_eq!(spilled.into_sorted()?, want, "{order_text} limit {limit}");
        }
    }
    // The run files are gone with the buffers.
    assert_eq!(std::fs::read_dir(dir.path())?.count(), 0);
    Ok(())
}

/// `top` compares keys past the prefix every kept key shares: keys whose shared prefix
/// shrinks while rows arrive (numbers crossing magnitudes and signs, long strings with a
/// common start), kept in one buffer, in a spilling one, and in shares sealed and absorbed
/// as a parallel top does, all yield exactly a stable sort's rows. Randomised (seed printed).
#[test]
fn top_with_shrinking_shared_key_prefixes_matches_a_stable_sort() -> Result<()> {
    let seed = plexus_testkit::seed::seed("PLEXUS_TOP_SEED", "top_shared_prefix");
    let columns = vec![
        out_col("k", Type::Int, "k", "%d")?,
        out_col("s", Type::String, "s", "%s")?,
        out_col("f", Type::Float, "f", "%f")?,
    ];
    let types = |f: &str| match f {
        "k" => Some(Type::Int),
        "s" => Some(Type::String),
        "f" => Some(Type::Float),
        _ => None,
    };
    let dir = tempfile::tempdir()?;
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for order_text in [
        "k(asc)",
        "k(desc),s(asc)",
        "s(asc),f(desc)",
        "f(asc),k(asc)",
    ] {
        let order = parse_order_expr(order_text, &types).map_err(|e| anyhow!("{e}"))?;
        for limit in [1usize, 50, 700, 5000] {
            let top = Top {
                order: order.clone(),
                limit: limit as u64,
            };
            let n = 2500usize;
            let rows: Vec<Vec<Value>> = (0..n)
                .map(|i| {
                    // The range grows with i, so early keys share long prefixes and later
                    // ones shrink them; a few negative numbers flip the sign byte late.
                    let span = 1u64 << (4 + (i * 40 / n));
                    let mut k = (next() % span) as i64;
                    if i > n / 2 && next() % 10 == 0 {
                        k = -k;
                    }
                    let s = format!("common-start-{:0w$}", next() % span, w = 1 + i / 300);
                    let f = k as f64 / 7.0;
                    vec![Value::Int(k), Value::str(&s), Value::Float(f)]
                })
                .collect();
            let mut one = TopBuffer::new(&top, &columns)?;
            let mut spilled = TopBuffer::new(&top, &columns)?.with_spill(4096, dir.path());
            for r in &rows {
                one.push(r)?;
                spilled.push(r)?;
            }
            // Three shares of pages of 64 rows handed out in turn, as a parallel top does,
            // in memory and spilling: the merge compares keys past what all its runs share.
            let shares = |spill: bool| -> Result<TopBuffer> {
                let mut shares = Vec::new();
                for _ in 0..3 {
                    let share = TopBuffer::new(&top, &columns)?;
                    shares.push(match spill {
                        true => share.with_spill(4096, dir.path()),
                        false => share,
                    });
                }
                for (seq, r) in rows.iter().enumerate() {
                    let Some(share) = shares.get_mut((seq / 64) % 3) else {
                        bail!("no share");
                    };
                    share.push_at(r, seq as u64)?;
                }
                let mut merged: Option<TopBuffer> = None;
                for mut share in shares {
                    share.seal()?;
                    match &mut merged {
                        Some(m) => m.absorb(share),
                        None => merged = Some(share),
                    }
                }
                merged.context("no shares")
            };
            let (merged, merged_spilled) = (shares(false)?, shares(true)?);
            // The reference: each row's order key built directly, then a stable sort.
            let mut keyed = Vec::with_capacity(n);
            for r in &rows {
                let values = order
                    .components
                    .iter()
                    .map(|c| {
                        let i = columns.iter().position(|col| col.name == c.field);
                        i.and_then(|i| r.get(i)).context("order field")
                    })
                    .collect::<Result<Vec<&Value>>>()?;
                let mut key = Vec::new();
                build_key_into(&mut key, &order, &values).map_err(|e| anyhow!("{e}"))?;
                keyed.push((key, r.clone()));
            }
            keyed.sort_by(|a, b| a.0.cmp(&b.0));
            let want: Vec<Vec<Value>> = keyed.into_iter().take(limit).map(|e| e.1).collect();
            let ctx = format!("{order_text} limit {limit} seed {seed}");
            assert_eq!(want.len(), limit.min(n), "{ctx}");
            assert_eq!(one.into_sorted()?, want, "one buffer: {ctx}");
            assert_eq!(spilled.into_sorted()?, want, "spilled: {ctx}");
            assert_eq!(merged.into_sorted()?, want, "shares: {ctx}");
            assert_eq!(merged_spilled.into_sorted()?, want, "spilled shares: {ctx}");
        }
    }
    Ok(())
}

#[test]
fn top_keeps_smallest_keys_in_order_with_stable_ties() -> Result<()> {
    let columns = vec![
        out_col("k", Type::Int, "k", "%d")?,
        out_col("s", Type::String, "s", "%s")?,
    ];
    let order = parse_order_expr("k(desc)", &|f| (f == "k").then_some(Type::Int))
        .map_err(|e| anyhow!("{e}"))?;
    let mut top = TopBuffer::new(&Top { order, limit: 3 }, &columns)?;
    for (k, s) in [(1, "a"), (5, "b"), (3, "c"), (5, "d"), (2, "e"), (5, "f")] {
        top.push(&[Value::Int(k), Value::str(s)])?;
    }
    assert_eq!(top.len(), 3);
    assert_eq!(
        strs(&top.into_sorted()?),
        vec![
            vec!["Int(5)", "b"],
            vec!["Int(5)", "d"],
            vec!["Int(5)", "f"]
        ]
    );
    let bad = parse_order_expr("nope(asc)", &|_| Some(Type::Int)).map_err(|e| anyhow!("{e}"))?;
    let err = err_text(TopBuffer::new(
        &Top {
            order: bad,
            limit: 1,
        },
        &columns,
    ));
    assert!(err.contains("nope"), "{err}");
    Ok(())
}

/// Rows larger than the buffer's arena chunks (1 MiB) beside small ones, in memory, spilled,
/// and cut: the `limit` smallest come back whole and in order.
#[test]
fn top_keeps_rows_larger_than_its_arena_chunks() -> Result<()> {
    let columns = vec![
        out_col("k", Type::Int, "k", "%d")?,
        out_col("s", Type::String, "s", "%s")?,
    ];
    let order = parse_order_expr("k(asc)", &|f| (f == "k").then_some(Type::Int))
        .map_err(|e| anyhow!("{e}"))?;
    let dir = tempfile::tempdir()?;
    let rows: Vec<Vec<Value>> = (0..40i64)
        .map(|i| {
            let k = (i * 17) % 23;
            let len = if i % 3 == 0 {
                (1 << 20) + 100 + i as usize
            } else {
                10
            };
            vec![Value::Int(k), Value::str(&"x".repeat(len))]
        })
        .collect();
    let mut want: Vec<(i64, usize, Vec<Value>)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r.first() {
            Some(Value::Int(k)) => Some((*k, i, r.clone())),
            _ => None,
        })
        .collect();
    want.sort_by_key(|w| (w.0, w.1));
    for limit in [5usize, 40] {
        let top = Top {
            order: order.clone(),
            limit: limit as u64,
        };
        let want: Vec<Vec<Value>> = want.iter().take(limit).map(|w| w.2.clone()).collect();
        let mut memory = TopBuffer::new(&top, &columns)?;
        let mut spilled = TopBuffer::new(&top, &columns)?.with_spill(3 << 20, dir.path());
        for r in &rows {
            memory.push(r)?;
            spilled.push(r)?;
        }
        assert!(spilled.spilled_runs() > 0, "limit {limit}: nothing spilled");
        assert_eq!(memory.into_sorted()?, want, "limit {limit}, in memory");
        assert_eq!(spilled.into_sorted()?, want, "limit {limit}, spilled");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// proto_file_reader_creator and the full read → top → write round trips
// ---------------------------------------------------------------------------------------------

fn proto_dirs(dir: &Path) -> Result<ProtoDirs> {
    let in_dir = dir.join("in");
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&in_dir)?;
    std::fs::create_dir_all(&out_dir)?;
    Ok(ProtoDirs {
        in_dir: in_dir.to_str().context("path")?.to_owned(),
        out_dir: out_dir.to_str().context("path")?.to_owned(),
    })
}

/// Inserts the test's `top` in front of `"url_template"` (as upstream does) and loads the plan.
fn load_generated(script: &Json, dir: &Path, name: &str) -> Result<Plan> {
    let text = serde_json::to_string_pretty(script)?;
    ensure!(text.matches("\"url_template\"").count() == 1);
    let text = text.replace(
        "\"url_template\"",
        "\"top\": {\"order\": \"col_id(asc)\"}, \"url_template\"",
    );
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    build_plan(&path, None)
}

/// Runs read_file → write_file of a generated plan without a table in between: writer column
/// `col_x` takes reader column `col_x` (the generated expressions are `r.col_x` → `r.x`).
fn run_generated(plan: &Plan, input: &Path) -> Result<PathBuf> {
    let reader = file_reader(plan, "read_file")?;
    let writer = file_writer(plan, "write_file")?;
    let map: Vec<usize> = writer
        .columns
        .iter()
        .map(|wc| {
            reader
                .columns
                .iter()
                .position(|rc| rc.name == wc.name)
                .context(wc.name.clone())
        })
        .collect::<Result<_>>()?;
    let top = writer.top.as_ref().context("top")?;
    let mut buf = TopBuffer::new(top, &writer.columns)?;
    for row in read_all(reader, input.to_str().context("path")?)? {
        let r: Vec<Value> = map.iter().map(|&i| row[i].clone()).collect();
        buf.push(&r)?;
    }
    let out = PathBuf::from(plexus_node::files::resolve_url_template(
        &writer.url_template,
        0,
        1,
    ));
    let mut sink = create_sink(writer, &out.to_string_lossy())?;
    for row in buf.into_sorted()? {
        sink.write_row(&row)?;
    }
    sink.finish()?;
    Ok(out)
}

#[test]
fn proto_csv_script_and_round_trip() -> Result<()> {
    let conf = need_conformance!().input("proto_file_reader_creator");
    let dir = tempfile::tempdir()?;
    let dirs = proto_dirs(dir.path())?;
    let input = conf.join("products.csv");
    let script = proto_script_csv(&input, 0, 1, "\t", &dirs)?;

    let read = &script["nodes"]["read_file"];
    assert_eq!(read["type"], "file_table");
    assert_eq!(read["start_policy"], "manual");
    let in_url = format!("{}/products.csv", dirs.in_dir);
    assert_eq!(read["desc"], format!("Read file {in_url} to table"));
    assert_eq!(read["r"]["urls"], serde_json::json!([in_url]));
    assert_eq!(
        read["r"]["csv"],
        serde_json::json!({"hdr_line_idx": 0, "first_data_line_idx": 1, "separator": "\t"})
    );
    let rc = &read["r"]["columns"];
    let expect = [
        ("id", "string", None),
        ("sku", "int", Some("%d")),
        ("shipping_date", "datetime", Some("2006-01-02 15:04:05")),
        ("price", "decimal2", Some("%f")),
        ("weight", "float", Some("%f")),
        ("discontinued", "bool", None),
    ];
    for (name, ty, fmt) in expect {
        let c = &rc[format!("col_{name}")];
        assert_eq!(c["col_type"], ty, "{name}");
        assert_eq!(c["csv"]["col_hdr"], name);
        assert_eq!(c["csv"]["col_format"].as_str(), fmt, "{name}");
        let f = &read["w"]["fields"][name];
        assert_eq!(f["expression"], format!("r.col_{name}"));
        assert_eq!(f["type"], ty);
    }
    assert_eq!(read["w"]["name"], "products_csv");

    let write = &script["nodes"]["write_file"];
    assert_eq!(write["type"], "table_file");
    let out_url = format!("{}/products.csv", dirs.out_dir);
    assert_eq!(write["desc"], format!("Write from table to file {out_url}"));
    assert_eq!(write["r"]["table"], "products_csv");
    assert_eq!(write["w"]["url_template"], out_url);
    assert_eq!(write["w"]["csv"]["separator"], "\t");
    let wc: Vec<(String, String, String, String)> = write["w"]["columns"]
        .as_array()
        .context("columns")?
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_owned(),
                c["expression"].as_str().unwrap_or_default().to_owned(),
                c["csv"]["header"].as_str().unwrap_or_default().to_owned(),
                c["csv"]["format"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let want: Vec<(String, String, String, String)> = [
        ("id", "%s"),
        ("sku", "%d"),
        ("shipping_date", "2006-01-02 15:04:05"),
        ("price", "%s"),
        ("weight", "%.3f"),
        ("discontinued", "%t"),
    ]
    .iter()
    .map(|(n, f)| {
        (
            format!("col_{n}"),
            format!("r.{n}"),
            (*n).to_owned(),
            (*f).to_owned(),
        )
    })
    .collect();
    assert_eq!(wc, want);
    let policy = &script["dependency_policies"]["current_active_first_stopped_nogo"];
    assert_eq!(policy["is_default"], true);
    assert_eq!(
        policy["event_priority_order"],
        "run_is_current(desc), run_id(desc)"
    );
    assert_eq!(policy["rules"].as_array().map(Vec::len), Some(10));

    // The generated script loads, and its reader/writer reproduce the input (diff -b rule).
    let plan = load_generated(&script, dir.path(), "script_csv.json")?;
    let out = run_generated(&plan, &input)?;
    let got = std::fs::read(&out)?;
    assert!(got.starts_with(b"id\tsku\tshipping_date\tprice\tweight\tdiscontinued\r\n"));
    assert_eq!(diff_b_lines(&got), diff_b_lines(&std::fs::read(&input)?));
    Ok(())
}

#[test]
fn proto_parquet_script_and_round_trip() -> Result<()> {
    let conf = need_conformance!().input("proto_file_reader_creator");
    let dir = tempfile::tempdir()?;
    let dirs = proto_dirs(dir.path())?;
    let input = conf.join("products.parquet");
    let script = proto_script_parquet(&input, &dirs)?;

    let read = &script["nodes"]["read_file"];
    assert_eq!(read["w"]["name"], "products_parquet");
    assert!(read["r"].get("csv").is_none());
    let types = [
        ("id", "string"),
        ("sku", "int"),
        ("shipping_date", "datetime"),
        ("price", "decimal2"),
        ("weight", "float"),
        ("discontinued", "bool"),
    ];
    for (name, ty) in types {
        let c = &read["r"]["columns"][format!("col_{name}")];
        assert_eq!(
            c,
            &serde_json::json!({"col_type": ty, "parquet": {"col_name": name}})
        );
    }
    let w = &script["nodes"]["write_file"]["w"];
    assert_eq!(w["parquet"]["codec"], "gzip");
    assert_eq!(
        w["url_template"],
        format!("{}/products.parquet", dirs.out_dir)
    );
    let names: Vec<&str> = w["columns"]
        .as_array()
        .context("columns")?
        .iter()
        .filter_map(|c| c["parquet"]["column_name"].as_str())
        .collect();
    assert_eq!(
        names,
        vec![
            "id",
            "sku",
            "shipping_date",
            "price",
            "weight",
            "discontinued"
        ]
    );

    let plan = load_generated(&script, dir.path(), "script_parquet.json")?;
    let out = run_generated(&plan, &input)?;
    let back = read_all(&products_parquet_reader(), out.to_str().context("path")?)?;
    let orig = read_all(&products_parquet_reader(), input.to_str().context("path")?)?;
    assert_eq!(back.len(), 48);
    // Stored datetimes are milliseconds (spec §4.7): compare the input at that precision.
    let orig: Vec<Vec<Value>> = orig
        .into_iter()
        .map(|r| {
            r.into_iter()
                .map(|v| match v {
                    Value::Time(t) => Value::Time(t.to_storage()),
                    other => other,
                })
                .collect()
        })
        .collect();
    assert_eq!(back, orig);
    Ok(())
}

#[test]
fn parquet_writer_types_nulls_and_codecs() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let columns = vec![
        out_col("s", Type::String, "", "")?,
        out_col("i", Type::Int, "", "")?,
        out_col("f", Type::Float, "", "")?,
        out_col("b", Type::Bool, "", "")?,
        out_col("d", Type::Decimal2, "", "")?,
        out_col("t", Type::DateTime, "", "")?,
    ];
    let rows = vec![
        vec![
            Value::str("héllo"),
            Value::Int(-7),
            Value::Float(1.5),
            Value::Bool(true),
            Value::Decimal(Decimal::new(-123_456, 2)),
            Value::Time(Time::from_unix_millis(1_542_340_805_123)),
        ],
        vec![
            Value::str(""),
            Value::Int(i64::MAX),
            Value::Float(-0.25),
            Value::Bool(false),
            // value×100 truncated toward zero
            Value::Decimal(Decimal::new(19_999, 3)),
            Value::Time(Time::ZERO),
        ],
    ];
    for codec in [
        ParquetCodec::Gzip,
        ParquetCodec::Snappy,
        ParquetCodec::Uncompressed,
    ] {
        let path = dir.path().join(format!("{codec:?}.parquet"));
        write_parquet(&path, &columns, codec, &rows)?;
        let reader = parquet_reader_of(&columns);
        let back = read_all(&reader, path.to_str().context("path")?)?;
        let mut want = rows.clone();
        want[1][4] = Value::Decimal(Decimal::new(1999, 2));
        assert_eq!(back, want, "{codec:?}");
    }
    Ok(())
}

/// Rows read from a source, each with its place in the file.
type PlacedRows = Vec<(Vec<Value>, Option<u64>)>;

/// A source's rows read through `next_chunk`, `chunk` rows at a time, with each row's place.
fn rows_and_places(src: &mut dyn RowSource, chunk: usize) -> Result<PlacedRows> {
    let (mut all, mut rows) = (Vec::new(), Vec::new());
    loop {
        let n = src.next_chunk(&mut rows, chunk)?;
        if n == 0 {
            return Ok(all);
        }
        let places = src.places();
        all.extend((0..n).map(|i| (rows[i].clone(), places.get(i).copied())));
    }
}

/// A source's rows read through `next_chunk_cells`, with each row's place, and how many of
/// the cells were strings lent from the source's buffers.
fn cells_and_places(src: &mut dyn RowSource, chunk: usize) -> Result<(PlacedRows, usize)> {
    let (mut all, mut lent) = (Vec::new(), 0);
    while src.next_chunk_cells(chunk, &mut |place, cells| {
        lent += cells
            .iter()
            .filter(|c| matches!(c, CellView::Str(_)))
            .count();
        all.push((cells.iter().map(CellView::to_value).collect(), place));
        true
    })? > 0
    {}
    Ok((all, lent))
}

/// Parquet rows read as cells lend their strings from the column buffers and equal the rows
/// read as values, places included: a file of our writer over many chunks (empty and
/// non-ASCII strings) and Capillaries' products file.
#[test]
fn parquet_cells_read_in_place_equal_the_values() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let columns = vec![
        out_col("s", Type::String, "", "")?,
        out_col("i", Type::Int, "", "")?,
        out_col("d", Type::Decimal2, "", "")?,
        out_col("t", Type::DateTime, "", "")?,
    ];
    let rows: Vec<Vec<Value>> = (0..2500i64)
        .map(|i| {
            let s = match i % 3 {
                0 => String::new(),
                1 => format!("héllo {i}"),
                _ => format!("x{}", i % 17),
            };
            vec![
                Value::str(&s),
                Value::Int(i),
                Value::Decimal(Decimal::new(i * 7 - 3000, 2)),
                Value::Time(Time::from_unix_millis(1_542_340_805_123 + i * 1000)),
            ]
        })
        .collect();
    let path = dir.path().join("rows.parquet");
    write_parquet(&path, &columns, ParquetCodec::Snappy, &rows)?;
    let ours = parquet_reader_of(&columns);
    let url = path.to_str().context("path")?;
    let values = rows_and_places(open_source(&ours, url)?.as_mut(), 64)?;
    let (cells, lent) = cells_and_places(open_source(&ours, url)?.as_mut(), 64)?;
    assert!(
        values.iter().map(|(r, _)| r).eq(rows.iter()),
        "rows read back differ"
    );
    assert!(values.iter().all(|(_, place)| place.is_some()));
    assert!(cells == values, "rows or places read as cells differ");
    assert_eq!(lent, 2500, "one string cell lent per row");

    let conf = need_conformance!().input("proto_file_reader_creator");
    let products = products_parquet_reader();
    let url = conf.join("products.parquet");
    let url = url.to_str().context("p")?;
    let values = rows_and_places(open_source(&products, url)?.as_mut(), 10)?;
    let (cells, lent) = cells_and_places(open_source(&products, url)?.as_mut(), 10)?;
    assert_eq!(values.len(), 48);
    assert!(cells == values, "products read as cells differ");
    assert_eq!(lent, 48);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Throughput
// ---------------------------------------------------------------------------------------------

/// CSV parse + cell conversion of 1,000,000 rows shaped like the lookup order items. Run with
/// `cargo test --release -p plexus-node --test t30_files -- --ignored --nocapture throughput`.
#[test]
#[ignore = "measurement; run in release"]
fn throughput_csv_lookup_items_shape() -> Result<()> {
    const ROWS: usize = 1_000_000;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("items.csv");
    let mut text = String::with_capacity(ROWS * 180);
    text.push_str(
        "order_id,order_item_id,product_id,seller_id,shipping_limit_date,price,freight_value\n",
    );
    for i in 0..ROWS {
        let _ = writeln!(
            text,
            "{:032x},{:05},{:032x},{:032x},2018-{:02}-{:02} {:02}:{:02}:{:02},{}.{:02},{}.{}",
            i * 7919,
            i % 7 + 1,
            i * 104_729,
            i % 3000,
            i % 12 + 1,
            i % 28 + 1,
            i % 24,
            i % 60,
            (i * 7) % 60,
            i % 900,
            i % 100,
            i % 90,
            i % 10
        );
    }
    std::fs::write(&path, &text)?;
    let mb = text.len() as f64 / 1e6;
    drop(text);
    let cols = vec![
        col("col_order_id", Type::String, 0, "", ""),
        col("col_order_item_id", Type::Int, 1, "", "%d"),
        col("col_product_id", Type::String, 2, "", ""),
        col("col_seller_id", Type::String, 3, "", ""),
        col(
            "col_shipping_limit_date",
            Type::DateTime,
            4,
            "",
            "2006-01-02 15:04:05",
        ),
        col("col_price", Type::Decimal2, 5, "", "%f"),
        col("col_freight_value", Type::Decimal2, 6, "", "%f"),
    ];
    let reader = csv_reader(0, 1, b',', false, cols);
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        let mut src = open_source(&reader, path.to_str().context("path")?)?;
        let mut chunk = Vec::new();
        let mut n = 0;
        loop {
            let got = src.next_chunk(&mut chunk, 1000)?;
            if got == 0 {
                break;
            }
            n += got;
        }
        ensure!(n == ROWS);
        best = best.min(start.elapsed().as_secs_f64());
    }
    println!(
        "csv parse+convert: {ROWS} rows, {mb:.0} MB in {best:.3} s = {:.2} M rows/s, {:.0} MB/s",
        ROWS as f64 / best / 1e6,
        mb / best
    );
    // Parse only (strings), to separate parser and conversion costs.
    let strings = csv_reader(
        0,
        1,
        b',',
        false,
        (0..7)
            .map(|i| col(&format!("c{i}"), Type::String, i, "", ""))
            .collect(),
    );
    let start = Instant::now();
    let mut src = open_source(&strings, path.to_str().context("path")?)?;
    let mut chunk = Vec::new();
    while src.next_chunk(&mut chunk, 1000)? > 0 {}
    let t = start.elapsed().as_secs_f64();
    println!(
        "csv parse (7 string cells): {:.2} M rows/s",
        ROWS as f64 / t / 1e6
    );
    Ok(())
}

/// Writes `buf`'s rows to a new CSV file at `path` of `writer` the way a file node does:
/// rendered lines as they are, values through the sink. Returns the file and the first error.
fn write_top(buf: TopBuffer, writer: &FileWriter, path: &Path) -> Result<(Vec<u8>, String)> {
    let mut sink = create_sink(writer, &path.to_string_lossy())?;
    let r = buf.for_each_sorted_row(|row| -> Result<(), FileError> {
        match row {
            SortedRow::Line(line) => sink.write_rendered(line),
            SortedRow::Values(values) => sink.write_row(values),
        }
    });
    let err = match r {
        Ok(()) => String::new(),
        Err(e) => e.to_string(),
    };
    sink.finish()?;
    Ok((std::fs::read(path)?, err))
}

/// A `top` keeping its rows as rendered CSV lines writes the same bytes as one keeping values
/// and rendering them at the end: in memory, spilled, and as shares of a parallel top merged.
/// A row the renderer refuses (a value of the wrong type) stays values and fails the file at
/// the same row with the same error. Randomised (seed printed).
#[test]
fn top_of_rendered_lines_writes_the_same_bytes_as_top_of_values() -> Result<()> {
    let seed = plexus_testkit::seed::seed("PLEXUS_TOP_SEED", "top_rendered_lines");
    let types = |f: &str| match f {
        "k" => Some(Type::Int),
        "s" => Some(Type::String),
        _ => None,
    };
    let order = parse_order_expr("k(desc),s(asc)", &types).map_err(|e| anyhow!("{e}"))?;
    let writer = FileWriter {
        url_template: String::new(),
        format: FileWriterFormat::Csv {
            separator: ";".to_owned(),
        },
        columns: vec![
            out_col("k", Type::Int, "k", "%05d")?,
            out_col("s", Type::String, "s,q", "%s")?,
            out_col("d", Type::Decimal2, "d", "%10s")?,
            out_col("t", Type::DateTime, "t", "2006-01-02 15:04:05.000")?,
            out_col("f", Type::Float, "f", "%.3f")?,
            out_col("b", Type::Bool, "b", "%t")?,
        ],
        having: None,
        top: None,
    };
    let dir = tempfile::tempdir()?;
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let words = ["", "a", "a;b", "q\"uote", "line\nbreak", "zz"];
    for (limit, bad_at) in [
        (0u64, None),
        (40, None),
        (3000, Some(1200usize)),
        (0, Some(7)),
    ] {
        let top = Top {
            order: order.clone(),
            limit,
        };
        let rows: Vec<Vec<Value>> = (0..2000usize)
            .map(|i| {
                let k = (next() % 300) as i64 - 100;
                let d = if Some(i) == bad_at {
                    // Not a decimal: the sink refuses it.
                    Value::str("oops")
                } else {
                    Value::Decimal(Decimal::new((next() % 200_001) as i64 - 100_000, 2))
                };
                vec![
                    Value::Int(k),
                    Value::str(words[(next() % words.len() as u64) as usize]),
                    d,
                    Value::Time(Time::from_unix_millis((next() % (1 << 40)) as i64)),
                    Value::Float(k as f64 / 3.0),
                    Value::Bool(next() % 2 == 0),
                ]
            })
            .collect();
        let values = || -> Result<TopBuffer> { Ok(TopBuffer::new(&top, &writer.columns)?) };
        let lines = || -> Result<TopBuffer> {
            Ok(TopBuffer::new(&top, &writer.columns)?
                .with_renderer(plexus_node::files::line_renderer(&writer)))
        };
        let mut want_buf = values()?;
        let mut one = lines()?;
        let mut spilled = lines()?.with_spill(4096, dir.path());
        // Shares spilling too, as a parallel top under a small budget does.
        let mut shares = vec![
            lines()?.with_spill(4096, dir.path()),
            lines()?.with_spill(4096, dir.path()),
        ];
        for (seq, r) in rows.iter().enumerate() {
            want_buf.push(r)?;
            one.push(r)?;
            spilled.push(r)?;
            if let Some(s) = shares.get_mut((seq / 64) % 2) {
                s.push_at(r, seq as u64)?;
            }
        }
        assert!(spilled.spilled_runs() > 0, "seed {seed}: no spill");
        let mut merged: Option<TopBuffer> = None;
        for mut s in shares {
            // What a share holds at its end is merged from memory, not written as a run.
            let runs = s.spilled_runs();
            assert!(runs > 0, "seed {seed}: a share did not spill");
            s.seal()?;
            assert_eq!(s.spilled_runs(), runs, "seed {seed}: sealing spilled");
            match &mut merged {
                Some(m) => m.absorb(s),
                None => merged = Some(s),
            }
        }
        let merged = merged.context("shares")?;
        let ctx = format!("seed {seed}, limit {limit}, bad row {bad_at:?}");
        let want = write_top(want_buf, &writer, &dir.path().join("want.csv"))?;
        if bad_at.is_some() {
            assert!(
                want.1.contains("column d expects decimal2"),
                "{ctx}: {}",
                want.1
            );
        } else {
            assert!(want.1.is_empty(), "{ctx}: {}", want.1);
            assert!(want.0.len() > 1000, "{ctx}");
        }
        for (name, buf) in [("one", one), ("spilled", spilled), ("shares", merged)] {
            let got = write_top(buf, &writer, &dir.path().join(format!("{name}.csv")))?;
            assert_eq!(
                got.1,
                want.1.replace("want.csv", &format!("{name}.csv")),
                "{ctx}: {name}"
            );
            assert!(got.0 == want.0, "{ctx}: {name}: the files differ");
        }
    }
    Ok(())
}
