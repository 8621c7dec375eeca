//! `proto_file_reader_creator` (spec §10): generates a two-node script (`read_file` →
//! `write_file`) from a sample CSV or Parquet file, guessing column types.

use std::io::BufReader;
use std::path::Path;

use parquet::file::reader::FileReader as _;
use parquet::file::serialized_reader::SerializedFileReader;
use plexus_core::value::Type;
use serde_json::{Map, Value as Json, json};

use super::FileError;
use super::gocsv::{GoCsvReader, Record};
use super::parquet_source::{column_kind, find_column};

/// Number of data records examined to guess the CSV column types.
const GUESS_RECORDS: usize = 100;

/// Where the generated script reads its input and writes its output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtoDirs {
    /// Directory of the reader URL.
    pub in_dir: String,
    /// Directory of the writer `url_template`.
    pub out_dir: String,
}

impl Default for ProtoDirs {
    /// The directories Capillaries hard-codes (conformance README §5).
    fn default() -> Self {
        Self {
            in_dir: "/tmp/capi_in/proto_file_reader_creator_quicktest".to_owned(),
            out_dir: "/tmp/capi_out/proto_file_reader_creator_quicktest".to_owned(),
        }
    }
}

/// One discovered column.
struct ProtoColumn {
    /// Reader field name, `col_<sanitised>`.
    name: String,
    /// Header text or Parquet column name; for headerless CSV the column name.
    original: String,
    /// Table field name.
    field: String,
    ty: Type,
    /// Reader `col_format` (CSV only).
    format: String,
}

fn proto_err(path: &Path, reason: impl Into<String>) -> FileError {
    FileError::Proto {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// `col_` + the name with every char outside `[a-zA-Z0-9_]` replaced by `_`.
fn column_name(original: &str) -> String {
    let mut s = String::with_capacity(original.len() + 4);
    s.push_str("col_");
    s.extend(original.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    s
}

fn file_name(path: &Path) -> Result<String, FileError> {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| proto_err(path, "the path has no file name"))
}

fn all_digits(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_digit())
}

/// The Go layout of `yyyy-mm-dd[T ]hh:mm:ss[.fff|.ffffff][±hhmm]`, if `s` has that shape.
fn datetime_layout(s: &str) -> Option<String> {
    let b = s.as_bytes();
    if b.len() < 19 {
        return None;
    }
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let shape = digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && (b[10] == b'T' || b[10] == b' ')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !shape {
        return None;
    }
    let mut layout = format!("2006-01-02{}15:04:05", char::from(b[10]));
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        match n {
            3 => layout.push_str(".000"),
            // Quirk (spec §10, §14 #47): six fraction digits map to a layout with seven zeros.
            6 => layout.push_str(".0000000"),
            _ => return None,
        }
        rest = &frac[n..];
    }
    if !rest.is_empty() {
        let z = rest.as_bytes();
        if z.len() == 5 && (z[0] == b'+' || z[0] == b'-') && all_digits(&rest[1..]) {
            layout.push_str("-0700");
        } else {
            return None;
        }
    }
    Some(layout)
}

/// Guesses the type and reader format of one non-empty cell (spec §10, checked in this order).
fn guess_cell(s: &str) -> (Type, String) {
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (int_part, frac) = match unsigned.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (unsigned, None),
    };
    match frac {
        Some(f) if all_digits(int_part) && f.len() == 2 && all_digits(f) => {
            return (Type::Decimal2, "%f".to_owned());
        }
        None if !int_part.is_empty() && all_digits(int_part) => {
            return (Type::Int, "%d".to_owned());
        }
        Some(f) if all_digits(int_part) && !f.is_empty() && all_digits(f) => {
            return (Type::Float, "%f".to_owned());
        }
        _ => {}
    }
    if ["true", "false", "t", "f"]
        .iter()
        .any(|b| s.eq_ignore_ascii_case(b))
    {
        return (Type::Bool, String::new());
    }
    if let Some(layout) = datetime_layout(s) {
        return (Type::DateTime, layout);
    }
    (Type::String, String::new())
}

/// Generalises two guesses of the same column (spec §10).
fn generalise(a: Type, b: Type) -> Type {
    use Type::{Decimal2, Float, Int};
    match (a, b) {
        _ if a == b => a,
        (Int, Decimal2) | (Decimal2, Int) => Decimal2,
        (Int | Decimal2, Float) | (Float, Int | Decimal2) => Float,
        _ => Type::String,
    }
}

/// Generates the script for a CSV sample (`-file_type=csv`).
///
/// Columns are named from the header record when `hdr_line_idx` ≥ 0, else `col_000`, … and
/// typed from up to 100 data records.
pub fn proto_script_csv(
    path: &Path,
    hdr_line_idx: i64,
    first_line_idx: i64,
    separator: &str,
    dirs: &ProtoDirs,
) -> Result<Json, FileError> {
    if first_line_idx <= hdr_line_idx {
        return Err(proto_err(
            path,
            format!(
                "csv_first_line_idx {first_line_idx} must be greater than csv_hdr_line_idx {hdr_line_idx}"
            ),
        ));
    }
    let sep = match separator.as_bytes().first() {
        Some(&b) if b.is_ascii() && !matches!(b, b'\r' | b'\n' | b'"') => b,
        _ => return Err(proto_err(path, format!("invalid separator {separator:?}"))),
    };
    // A local path, or a remote URL (streamed; only the first records are read).
    let f = super::location::open_stream(&path.to_string_lossy())?;
    let mut rdr = GoCsvReader::new(BufReader::new(f), sep);
    let mut rec = Record::default();
    let mut header: Option<Vec<String>> = None;
    // Per column: generalised type and the format of the last examined non-empty cell.
    let mut guesses: Vec<Option<(Type, String)>> = Vec::new();
    let mut examined = 0;
    let mut idx: i64 = 0;
    while examined < GUESS_RECORDS {
        let more = rdr
            .read_record(&mut rec)
            .map_err(|source| FileError::Read {
                path: path.display().to_string(),
                source,
            })?;
        if !more {
            break;
        }
        if idx == hdr_line_idx {
            header = Some(
                rec.fields()
                    .map(|f| String::from_utf8_lossy(f).into_owned())
                    .collect(),
            );
        } else if idx >= first_line_idx {
            if guesses.len() < rec.len() {
                guesses.resize(rec.len(), None);
            }
            for (g, field) in guesses.iter_mut().zip(rec.fields()) {
                let text = String::from_utf8_lossy(field);
                if text.trim().is_empty() {
                    continue;
                }
                let (ty, format) = guess_cell(&text);
                let ty = g.as_ref().map_or(ty, |(prev, _)| generalise(*prev, ty));
                // Quirk (spec §10, §14 #47): the format is the one of the last examined row.
                *g = Some((ty, format));
            }
            examined += 1;
        }
        idx += 1;
    }
    if hdr_line_idx >= 0 && header.is_none() {
        return Err(proto_err(path, format!("no header record {hdr_line_idx}")));
    }
    let count = header.as_ref().map_or(guesses.len(), Vec::len);
    let mut columns = Vec::with_capacity(count);
    for i in 0..count {
        let (name, original, field) = match &header {
            Some(h) => {
                let name = column_name(&h[i]);
                let field = name["col_".len()..].to_owned();
                (name, h[i].clone(), field)
            }
            // Deviation: Capillaries would name the table field `000`, which `r.000` cannot
            // reference; the column name is used instead.
            None => {
                let name = format!("col_{i:03}");
                (name.clone(), name.clone(), name)
            }
        };
        let Some(Some((ty, format))) = guesses.get(i).cloned() else {
            return Err(proto_err(
                path,
                format!("cannot guess the type of column {original:?}: no non-empty values"),
            ));
        };
        // Deviation: a column generalised to string keeps no format (a string column with a
        // col_format fails every read, spec §4.3).
        let format = if ty == Type::String {
            String::new()
        } else {
            format
        };
        columns.push(ProtoColumn {
            name,
            original,
            field,
            ty,
            format,
        });
    }
    let by_header = header.is_some();
    let reader_columns: Map<String, Json> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut csv = Map::new();
            if by_header {
                csv.insert("col_hdr".to_owned(), json!(c.original));
            } else {
                csv.insert("col_idx".to_owned(), json!(i));
            }
            if !c.format.is_empty() {
                csv.insert("col_format".to_owned(), json!(c.format));
            }
            (
                c.name.clone(),
                json!({ "col_type": c.ty.name(), "csv": csv }),
            )
        })
        .collect();
    let writer_columns: Vec<Json> = columns
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "expression": format!("r.{}", c.field),
                "type": c.ty.name(),
                "csv": { "header": c.original, "format": writer_format(c.ty) },
            })
        })
        .collect();
    let csv_settings = json!({
        "hdr_line_idx": hdr_line_idx,
        "first_data_line_idx": first_line_idx,
        "separator": separator,
    });
    script(
        &file_name(path)?,
        dirs,
        &columns,
        json!({ "urls": [], "csv": csv_settings, "columns": reader_columns }),
        writer_columns,
        ("csv", json!({ "separator": separator })),
    )
}

/// Generates the script for a Parquet sample (`-file_type=parquet`), typed from its schema.
pub fn proto_script_parquet(path: &Path, dirs: &ProtoDirs) -> Result<Json, FileError> {
    let display = path.display().to_string();
    // A local path, or a remote URL read by ranges (only the footer is needed).
    let f = super::location::open_parquet(&path.to_string_lossy())?;
    let file = SerializedFileReader::new(f).map_err(|e| FileError::parquet(&display, e))?;
    let schema = file.metadata().file_metadata().schema_descr();
    let mut columns = Vec::new();
    for field in schema.root_schema().get_fields() {
        let original = field.name().to_owned();
        let unsupported = |detail: String| FileError::ParquetUnsupported {
            path: display.clone(),
            column: original.clone(),
            detail,
        };
        if field.is_group() {
            return Err(unsupported("group column".to_owned()));
        }
        let leaf = find_column(schema, &original)
            .ok_or_else(|| unsupported("column without a leaf".to_owned()))?;
        let kind = column_kind(&schema.column(leaf)).map_err(unsupported)?;
        let name = column_name(&original);
        columns.push(ProtoColumn {
            field: name["col_".len()..].to_owned(),
            name,
            original,
            ty: kind.ty(),
            format: String::new(),
        });
    }
    let reader_columns: Map<String, Json> = columns
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                json!({ "col_type": c.ty.name(), "parquet": { "col_name": c.original } }),
            )
        })
        .collect();
    let writer_columns: Vec<Json> = columns
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "expression": format!("r.{}", c.field),
                "type": c.ty.name(),
                "parquet": { "column_name": c.original },
            })
        })
        .collect();
    script(
        &file_name(path)?,
        dirs,
        &columns,
        json!({ "urls": [], "columns": reader_columns }),
        writer_columns,
        ("parquet", json!({ "codec": "gzip" })),
    )
}

/// CSV output formats of the generated writer (spec §10).
fn writer_format(ty: Type) -> &'static str {
    match ty {
        Type::String | Type::Decimal2 => "%s",
        Type::Int => "%d",
        Type::Float => "%.3f",
        Type::DateTime => "2006-01-02 15:04:05",
        Type::Bool => "%t",
    }
}

/// Assembles the two nodes and the default dependency policy.
fn script(
    file: &str,
    dirs: &ProtoDirs,
    columns: &[ProtoColumn],
    mut reader: Json,
    writer_columns: Vec<Json>,
    (format_key, format_settings): (&str, Json),
) -> Result<Json, FileError> {
    let in_url = format!("{}/{file}", dirs.in_dir.trim_end_matches('/'));
    let out_url = format!("{}/{file}", dirs.out_dir.trim_end_matches('/'));
    let table: String = file
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    reader["urls"] = json!([in_url]);
    let fields: Map<String, Json> = columns
        .iter()
        .map(|c| {
            (
                c.field.clone(),
                json!({ "expression": format!("r.{}", c.name), "type": c.ty.name() }),
            )
        })
        .collect();
    let mut writer = Map::new();
    writer.insert("url_template".to_owned(), json!(out_url));
    writer.insert(format_key.to_owned(), format_settings);
    writer.insert("columns".to_owned(), Json::Array(writer_columns));
    Ok(json!({
        "nodes": {
            "read_file": {
                "type": "file_table",
                "desc": format!("Read file {in_url} to table"),
                "start_policy": "manual",
                "r": reader,
                "w": { "name": table, "fields": fields },
            },
            "write_file": {
                "type": "table_file",
                "desc": format!("Write from table to file {out_url}"),
                "r": { "table": table },
                "w": writer,
            },
        },
        "dependency_policies": default_policies(),
    }))
}

/// The `dependency_policies` of a script holding only the default policy every Capillaries
/// test script carries (spec §9.6), for generated scripts.
pub fn default_policies() -> Json {
    const RULES: [(&str, &str); 10] = plexus_core::plan::DEFAULT_POLICY_RULES;
    json!({ plexus_core::plan::DEFAULT_POLICY_NAME: {
        "is_default": true,
        "event_priority_order": plexus_core::plan::DEFAULT_POLICY_ORDER,
        "rules": RULES
            .iter()
            .map(|(cmd, expr)| json!({ "cmd": cmd, "expression": expr }))
            .collect::<Vec<_>>(),
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_guesses() {
        let g = |s: &str| {
            let (t, f) = guess_cell(s);
            (t.name(), f)
        };
        assert_eq!(g("288.79"), ("decimal2", "%f".to_owned()));
        assert_eq!(g("-.79"), ("decimal2", "%f".to_owned()));
        assert_eq!(g("8840123"), ("int", "%d".to_owned()));
        assert_eq!(g("+1"), ("int", "%d".to_owned()));
        assert_eq!(g("65.130"), ("float", "%f".to_owned()));
        assert_eq!(g("1."), ("string", String::new()));
        assert_eq!(g("FALSE"), ("bool", String::new()));
        assert_eq!(g("t"), ("bool", String::new()));
        assert_eq!(
            g("2018-11-16 04:00:05"),
            ("datetime", "2006-01-02 15:04:05".to_owned())
        );
        assert_eq!(
            g("2018-11-16T04:00:05.123+0200"),
            ("datetime", "2006-01-02T15:04:05.000-0700".to_owned())
        );
        assert_eq!(
            g("2018-11-16 04:00:05.123456"),
            ("datetime", "2006-01-02 15:04:05.0000000".to_owned())
        );
        assert_eq!(g("2018-11-16 04:00:05.1234"), ("string", String::new()));
        assert_eq!(g("abc"), ("string", String::new()));
    }

    #[test]
    fn generalisation() {
        assert_eq!(generalise(Type::Int, Type::Decimal2), Type::Decimal2);
        assert_eq!(generalise(Type::Decimal2, Type::Float), Type::Float);
        assert_eq!(generalise(Type::Float, Type::Int), Type::Float);
        assert_eq!(generalise(Type::Bool, Type::Int), Type::String);
        assert_eq!(generalise(Type::DateTime, Type::DateTime), Type::DateTime);
        assert_eq!(generalise(Type::DateTime, Type::String), Type::String);
    }

    #[test]
    fn names() {
        assert_eq!(
            column_name("shipping date (UTC)"),
            "col_shipping_date__UTC_"
        );
        assert_eq!(column_name("é_1"), "col___1");
    }

    fn script_of(text: &[u8], hdr: i64, first: i64) -> Result<Json, FileError> {
        let dir = tempfile::tempdir().map_err(|source| FileError::Read {
            path: "tempdir".to_owned(),
            source,
        })?;
        let path = dir.path().join("My File.csv");
        std::fs::write(&path, text).map_err(|source| FileError::Read {
            path: "tempdir".to_owned(),
            source,
        })?;
        proto_script_csv(&path, hdr, first, ",", &ProtoDirs::default())
    }

    #[test]
    fn headerless_csv_and_last_row_format() -> Result<(), FileError> {
        let s = script_of(
            b"1,2018-01-02 03:04:05,x\n2.50,2018-01-02T03:04:05.123,true\n",
            -1,
            0,
        )?;
        let read = &s["nodes"]["read_file"];
        assert_eq!(read["w"]["name"], "My_File_csv");
        assert_eq!(
            read["r"]["urls"][0],
            "/tmp/capi_in/proto_file_reader_creator_quicktest/My File.csv"
        );
        let c = &read["r"]["columns"];
        // int then decimal2 → decimal2, format of the last row.
        assert_eq!(
            c["col_000"],
            json!({"col_type": "decimal2", "csv": {"col_idx": 0, "col_format": "%f"}})
        );
        // Two datetime layouts: still datetime, layout of the last row (quirk §14 #47).
        assert_eq!(c["col_001"]["col_type"], "datetime");
        assert_eq!(c["col_001"]["csv"]["col_format"], "2006-01-02T15:04:05.000");
        // string then bool → string, no format.
        assert_eq!(
            c["col_002"],
            json!({"col_type": "string", "csv": {"col_idx": 2}})
        );
        assert_eq!(read["w"]["fields"]["col_002"]["expression"], "r.col_002");
        let w0 = &s["nodes"]["write_file"]["w"]["columns"][0];
        assert_eq!(w0["expression"], "r.col_000");
        assert_eq!(w0["csv"], json!({"header": "col_000", "format": "%s"}));
        Ok(())
    }

    #[test]
    fn proto_errors() {
        let err = |r: Result<Json, FileError>| r.err().map(|e| e.to_string()).unwrap_or_default();
        let e = err(script_of(b"a,b\n1,\n", 0, 1));
        assert!(e.contains("My File.csv") && e.contains("\"b\""), "{e}");
        let e = err(script_of(b"a\n1\n", 0, 0));
        assert!(e.contains("must be greater than"), "{e}");
    }
}
