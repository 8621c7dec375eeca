//! Raw serde data model of a Capillaries script (spec §3.3–§3.12), before validation.
//!
//! Decoding follows Go `encoding/json`: unknown keys are ignored, `null` leaves the field's
//! default (and a `null` map/list element becomes the element's zero value), wrong JSON types are
//! errors. Values that the validator must check (node type, policies, batch counts…) are kept
//! raw — strings stay strings and counts stay `i64` — so that every problem can be reported at
//! once later. Fixed keys are matched exactly in lower case (spec §3.4 compat note).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// Default `start_policy`.
pub const DEFAULT_START_POLICY: &str = "auto";
/// Default `rerun_policy`.
pub const DEFAULT_RERUN_POLICY: &str = "rerun";
/// Default (legacy, no effect) `handler_exe_type`.
pub const DEFAULT_HANDLER_EXE_TYPE: &str = "capi_daemon";
/// Default `max_batch_processing_time` in milliseconds.
pub const DEFAULT_MAX_BATCH_PROCESSING_TIME_MS: i64 = 60_000;
/// Default CSV separator for readers and writers.
pub const DEFAULT_CSV_SEPARATOR: &str = ",";
/// Default Parquet codec of file writers.
pub const DEFAULT_PARQUET_CODEC: &str = "gzip";
/// Effective `expected_batches_total` when it is 0 or absent.
pub const DEFAULT_EXPECTED_BATCHES_TOTAL: i64 = 1;
/// Effective `rowset_size` when it is 0 or absent.
pub const DEFAULT_ROWSET_SIZE: i64 = 1000;

/// `null` → `T::default()`, as Go leaves the zero value in place.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A map whose `null` values become the value type's zero value (Go inserts zero values).
fn nullable_map<'de, D, T>(d: D) -> Result<BTreeMap<String, T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    let raw = Option::<BTreeMap<String, Option<T>>>::deserialize(d)?.unwrap_or_default();
    Ok(raw
        .into_iter()
        .map(|(k, v)| (k, v.unwrap_or_default()))
        .collect())
}

/// A list whose `null` elements become the element type's zero value.
fn nullable_vec<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    let raw = Option::<Vec<Option<T>>>::deserialize(d)?.unwrap_or_default();
    Ok(raw.into_iter().map(Option::unwrap_or_default).collect())
}

/// Generates a `null`/absent → non-zero default pair of functions for one field.
macro_rules! defaulted {
    ($de:ident, $def:ident, $ty:ty, $val:expr) => {
        fn $def() -> $ty {
            $val.into()
        }
        fn $de<'de, D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
            Ok(Option::<$ty>::deserialize(d)?.unwrap_or_else($def))
        }
    };
}

defaulted!(
    de_start_policy,
    default_start_policy,
    String,
    DEFAULT_START_POLICY
);
defaulted!(
    de_rerun_policy,
    default_rerun_policy,
    String,
    DEFAULT_RERUN_POLICY
);
defaulted!(
    de_handler,
    default_handler,
    String,
    DEFAULT_HANDLER_EXE_TYPE
);
defaulted!(
    de_max_time,
    default_max_time,
    i64,
    DEFAULT_MAX_BATCH_PROCESSING_TIME_MS
);
defaulted!(
    de_separator,
    default_separator,
    String,
    DEFAULT_CSV_SEPARATOR
);
defaulted!(de_codec, default_codec, String, DEFAULT_PARQUET_CODEC);

/// A whole script: named nodes and named dependency policies (spec §3.3).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Script {
    /// Nodes by name (node order is irrelevant).
    #[serde(default, deserialize_with = "nullable_map")]
    pub nodes: BTreeMap<String, Node>,
    /// Dependency policies by name.
    #[serde(default, deserialize_with = "nullable_map")]
    pub dependency_policies: BTreeMap<String, DependencyPolicy>,
}

/// One script node (spec §3.4); which sections matter depends on `node_type` (§3.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// Node type (`file_table`, `table_table`, …); `""` when absent, reported by the validator.
    #[serde(rename = "type", default, deserialize_with = "nullable")]
    pub node_type: String,
    /// Free text.
    #[serde(default, deserialize_with = "nullable")]
    pub desc: String,
    /// `auto` (default) or `manual`; other values are kept for the validator to report.
    #[serde(default = "default_start_policy", deserialize_with = "de_start_policy")]
    pub start_policy: String,
    /// `rerun` (default) or `fail`; other values are kept for the validator to report.
    #[serde(default = "default_rerun_policy", deserialize_with = "de_rerun_policy")]
    pub rerun_policy: String,
    /// `py_calc` / `tag_and_denormalize` for `table_custom_tfm_table`; ignored elsewhere.
    #[serde(default, deserialize_with = "nullable")]
    pub custom_proc_type: String,
    /// Legacy, no effect (default `capi_daemon`).
    #[serde(default = "default_handler", deserialize_with = "de_handler")]
    pub handler_exe_type: String,
    /// Grace period in ms before a stuck batch is re-run (default 60000).
    #[serde(default = "default_max_time", deserialize_with = "de_max_time")]
    pub max_batch_processing_time: i64,
    /// Name of the dependency policy; `""` means the default policy.
    #[serde(default, deserialize_with = "nullable")]
    pub dependency_policy: String,
    /// Reader: file reader or table reader depending on `node_type`.
    #[serde(default)]
    pub r: Option<Reader>,
    /// Lookup (`table_lookup_table` only).
    #[serde(default)]
    pub l: Option<Lookup>,
    /// Custom processor settings (`table_custom_tfm_table` only).
    #[serde(default)]
    pub p: Option<Processor>,
    /// Writer: table writer or file writer depending on `node_type`.
    #[serde(default)]
    pub w: Option<Writer>,
}

impl Default for Node {
    /// The node an empty object `{}` (or `null`) decodes to.
    fn default() -> Self {
        Self {
            node_type: String::new(),
            desc: String::new(),
            start_policy: default_start_policy(),
            rerun_policy: default_rerun_policy(),
            custom_proc_type: String::new(),
            handler_exe_type: default_handler(),
            max_batch_processing_time: default_max_time(),
            dependency_policy: String::new(),
            r: None,
            l: None,
            p: None,
            w: None,
        }
    }
}

/// Reader section `r`: the union of file-reader (§3.6) and table-reader (§3.7) keys.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Reader {
    /// File reader: input URLs, one batch each.
    #[serde(default, deserialize_with = "nullable_vec")]
    pub urls: Vec<String>,
    /// File reader: CSV settings.
    #[serde(default, deserialize_with = "nullable")]
    pub csv: ReaderCsv,
    /// File reader: reader field name → column definition.
    #[serde(default, deserialize_with = "nullable_map")]
    pub columns: BTreeMap<String, ColumnDef>,
    /// Table reader: name of the table to read.
    #[serde(default, deserialize_with = "nullable")]
    pub table: String,
    /// Table reader: batch count, raw (0/absent means 1, see [`Reader::batches_total`]).
    #[serde(default, deserialize_with = "nullable")]
    pub expected_batches_total: i64,
    /// Table reader: rows per page, raw (0/absent means 1000, see [`Reader::effective_rowset_size`]).
    #[serde(default, deserialize_with = "nullable")]
    pub rowset_size: i64,
}

impl Reader {
    /// `expected_batches_total` with 0 mapped to the default 1 (range checks are the validator's).
    pub fn batches_total(&self) -> i64 {
        if self.expected_batches_total == 0 {
            DEFAULT_EXPECTED_BATCHES_TOTAL
        } else {
            self.expected_batches_total
        }
    }

    /// `rowset_size` with 0 mapped to the default 1000.
    pub fn effective_rowset_size(&self) -> i64 {
        if self.rowset_size == 0 {
            DEFAULT_ROWSET_SIZE
        } else {
            self.rowset_size
        }
    }
}

/// CSV settings of a file reader.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReaderCsv {
    /// Header record index (default 0, -1 = no header).
    #[serde(default, deserialize_with = "nullable")]
    pub hdr_line_idx: i64,
    /// First data record index (default 0).
    #[serde(default, deserialize_with = "nullable")]
    pub first_data_line_idx: i64,
    /// Field separator (default `,`; only the first byte is used).
    #[serde(default = "default_separator", deserialize_with = "de_separator")]
    pub separator: String,
    /// Plexus extension: `auto` (by suffix: `.gz`, `.zst`; the default), `none`, `gzip` or
    /// `zstd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
}

impl Default for ReaderCsv {
    /// Defaults of an absent `csv` object.
    fn default() -> Self {
        Self {
            hdr_line_idx: 0,
            first_data_line_idx: 0,
            separator: default_separator(),
            compression: None,
        }
    }
}

/// A file reader column definition.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ColumnDef {
    /// One of the six types (checked by the validator).
    #[serde(default, deserialize_with = "nullable")]
    pub col_type: String,
    /// CSV only: value used for an empty cell.
    #[serde(default, deserialize_with = "nullable")]
    pub col_default_value: String,
    /// CSV addressing and format.
    #[serde(default, deserialize_with = "nullable")]
    pub csv: ColumnCsv,
    /// Parquet column name.
    #[serde(default, deserialize_with = "nullable")]
    pub parquet: ColumnParquet,
}

/// CSV part of a reader column.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ColumnCsv {
    /// Column index (index mode; 0 when absent).
    #[serde(default, deserialize_with = "nullable")]
    pub col_idx: i64,
    /// Header text (header mode); YAML/JSON `null` is the same as absent.
    #[serde(default)]
    pub col_hdr: Option<String>,
    /// Value format (`%d`, `%f`, a Go time layout…).
    #[serde(default, deserialize_with = "nullable")]
    pub col_format: String,
}

/// Parquet part of a reader column.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ColumnParquet {
    /// Column name in the Parquet file.
    #[serde(default, deserialize_with = "nullable")]
    pub col_name: String,
}

/// Lookup section `l` (spec §3.10).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Lookup {
    /// Index defined in some node's `w.indexes`.
    #[serde(default, deserialize_with = "nullable")]
    pub index_name: String,
    /// Comma-separated `r.<field>` list.
    #[serde(default, deserialize_with = "nullable")]
    pub join_on: String,
    /// `inner` or `left`.
    #[serde(default, deserialize_with = "nullable")]
    pub join_type: String,
    /// Grouped lookup (aggregates allowed).
    #[serde(default, deserialize_with = "nullable")]
    pub group: bool,
    /// Optional bool expression over `l.*`.
    #[serde(default, deserialize_with = "nullable")]
    pub filter: String,
    /// Paging only; ≤0 means 3000.
    #[serde(default, deserialize_with = "nullable")]
    pub idx_read_batch_size: i64,
    /// Paging only; ≤0 means 3000.
    #[serde(default, deserialize_with = "nullable")]
    pub right_lookup_read_batch_size: i64,
}

/// Custom processor section `p` (spec §3.11), the union of `py_calc` and `tag_and_denormalize`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Processor {
    /// py_calc: Python source URLs (fetched by the loader, see `LoadedScript::python_code`).
    #[serde(default, deserialize_with = "nullable_vec")]
    pub python_code_urls: Vec<String>,
    /// py_calc: `p` field → expression and type.
    #[serde(default, deserialize_with = "nullable_map")]
    pub calculated_fields: BTreeMap<String, CalculatedField>,
    /// tag_and_denormalize: name of the produced `p` field.
    #[serde(default, deserialize_with = "nullable")]
    pub tag_field_name: String,
    /// tag_and_denormalize: tag → bool expression, inline.
    #[serde(default, deserialize_with = "nullable_map")]
    pub tag_criteria: BTreeMap<String, String>,
    /// tag_and_denormalize: URL of a JSON object tag → expression (see `LoadedScript::tag_criteria`).
    #[serde(default, deserialize_with = "nullable")]
    pub tag_criteria_url: String,
}

/// A py_calc calculated field.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CalculatedField {
    /// Python call or `r.x` / `p.x`.
    #[serde(default, deserialize_with = "nullable")]
    pub expression: String,
    /// Declared type.
    #[serde(rename = "type", default, deserialize_with = "nullable")]
    pub field_type: String,
}

/// Writer section `w`: the union of table-writer (§3.8) and file-writer (§3.9) keys.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Writer {
    /// Table writer: table name.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// Both: optional bool filter over `w.*`.
    #[serde(default, deserialize_with = "nullable")]
    pub having: String,
    /// Table writer: field → definition.
    #[serde(default, deserialize_with = "nullable_map")]
    pub fields: BTreeMap<String, TableField>,
    /// Table writer: index name → definition.
    #[serde(default, deserialize_with = "nullable_map")]
    pub indexes: BTreeMap<String, String>,
    /// Table writer: Cassandra DDL suffix, accepted and ignored.
    #[serde(default, deserialize_with = "nullable")]
    pub table_options: String,
    /// File writer: output path/URL, may contain `{batch_idx|string}`.
    #[serde(default, deserialize_with = "nullable")]
    pub url_template: String,
    /// File writer: ordering and limit.
    #[serde(default, deserialize_with = "nullable")]
    pub top: Top,
    /// File writer: CSV settings.
    #[serde(default, deserialize_with = "nullable")]
    pub csv: WriterCsv,
    /// File writer: Parquet settings.
    #[serde(default, deserialize_with = "nullable")]
    pub parquet: WriterParquet,
    /// File writer: output columns in order.
    #[serde(default, deserialize_with = "nullable_vec")]
    pub columns: Vec<FileColumn>,
}

/// A table writer field.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TableField {
    /// Expression over `r.*`, `l.*`, `p.*`.
    #[serde(default, deserialize_with = "nullable")]
    pub expression: String,
    /// Declared type.
    #[serde(rename = "type", default, deserialize_with = "nullable")]
    pub field_type: String,
    /// Lookup default (text, parsed when needed; empty = zero value).
    #[serde(default, deserialize_with = "nullable")]
    pub default_value: String,
}

/// `top` of a file writer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Top {
    /// Order expression; `top` is in effect when this is non-blank.
    #[serde(default, deserialize_with = "nullable")]
    pub order: String,
    /// Row limit, raw (≤0 means 5,000,000).
    #[serde(default, deserialize_with = "nullable")]
    pub limit: i64,
}

/// CSV settings of a file writer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriterCsv {
    /// Field separator (default `,`).
    #[serde(default = "default_separator", deserialize_with = "de_separator")]
    pub separator: String,
}

impl Default for WriterCsv {
    /// Defaults of an absent `csv` object.
    fn default() -> Self {
        Self {
            separator: default_separator(),
        }
    }
}

/// Parquet settings of a file writer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriterParquet {
    /// `gzip` (default), `snappy` or `uncompressed`; validated later.
    #[serde(default = "default_codec", deserialize_with = "de_codec")]
    pub codec: String,
}

impl Default for WriterParquet {
    /// Defaults of an absent `parquet` object.
    fn default() -> Self {
        Self {
            codec: default_codec(),
        }
    }
}

/// A file writer column.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FileColumn {
    /// Name used in `having`/`top`.
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    /// Expression over `r.*`.
    #[serde(default, deserialize_with = "nullable")]
    pub expression: String,
    /// Declared type.
    #[serde(rename = "type", default, deserialize_with = "nullable")]
    pub field_type: String,
    /// CSV header and format.
    #[serde(default, deserialize_with = "nullable")]
    pub csv: FileColumnCsv,
    /// Parquet column name.
    #[serde(default, deserialize_with = "nullable")]
    pub parquet: FileColumnParquet,
}

/// CSV part of a file writer column.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FileColumnCsv {
    /// Header text.
    #[serde(default, deserialize_with = "nullable")]
    pub header: String,
    /// Output format.
    #[serde(default, deserialize_with = "nullable")]
    pub format: String,
}

/// Parquet part of a file writer column.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct FileColumnParquet {
    /// Output Parquet column name.
    #[serde(default, deserialize_with = "nullable")]
    pub column_name: String,
}

/// A dependency policy (spec §3.12).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DependencyPolicy {
    /// Exactly one policy of a script must be the default.
    #[serde(default, deserialize_with = "nullable")]
    pub is_default: bool,
    /// Order expression over the `nrs` fields.
    #[serde(default, deserialize_with = "nullable")]
    pub event_priority_order: String,
    /// Rules evaluated in order.
    #[serde(default, deserialize_with = "nullable_vec")]
    pub rules: Vec<DependencyRule>,
}

/// One dependency rule.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct DependencyRule {
    /// `go`, `wait` or `nogo` (validated later).
    #[serde(default, deserialize_with = "nullable")]
    pub cmd: String,
    /// Bool expression over `nrs.*` and `wfmodel.*`.
    #[serde(default, deserialize_with = "nullable")]
    pub expression: String,
}

/// Where the script model has structs, so that JSON arrays there can be rejected: serde's
/// derived structs also accept a positional array (`"r": []`), Go's `encoding/json` does not.
enum Shape {
    /// A struct whose listed fields have nested structs.
    Struct(&'static str, &'static [(&'static str, Self)]),
    /// A map of values of this shape.
    Map(&'static Self),
    /// A list of values of this shape.
    List(&'static Self),
}

/// Shape of a struct without nested structs.
const fn leaf(name: &'static str) -> Shape {
    Shape::Struct(name, &[])
}

/// Reader columns and file-writer columns both nest `csv` and `parquet` structs.
const COLUMN: Shape = Shape::Struct(
    "ColumnDef",
    &[
        ("csv", leaf("ColumnCsv")),
        ("parquet", leaf("ColumnParquet")),
    ],
);
/// File-writer column shape.
const FILE_COLUMN: Shape = Shape::Struct(
    "FileColumn",
    &[
        ("csv", leaf("FileColumnCsv")),
        ("parquet", leaf("FileColumnParquet")),
    ],
);
/// Node shape.
const NODE: Shape = Shape::Struct(
    "Node",
    &[
        (
            "r",
            Shape::Struct(
                "Reader",
                &[("csv", leaf("ReaderCsv")), ("columns", Shape::Map(&COLUMN))],
            ),
        ),
        ("l", leaf("Lookup")),
        (
            "p",
            Shape::Struct(
                "Processor",
                &[("calculated_fields", Shape::Map(&leaf("CalculatedField")))],
            ),
        ),
        (
            "w",
            Shape::Struct(
                "Writer",
                &[
                    ("fields", Shape::Map(&leaf("TableField"))),
                    ("top", leaf("Top")),
                    ("csv", leaf("WriterCsv")),
                    ("parquet", leaf("WriterParquet")),
                    ("columns", Shape::List(&FILE_COLUMN)),
                ],
            ),
        ),
    ],
);
/// Whole-script shape.
const SCRIPT: Shape = Shape::Struct(
    "Script",
    &[
        ("nodes", Shape::Map(&NODE)),
        (
            "dependency_policies",
            Shape::Map(&Shape::Struct(
                "DependencyPolicy",
                &[("rules", Shape::List(&leaf("DependencyRule")))],
            )),
        ),
    ],
);

/// Finds the first JSON array where the script model expects a struct; returns its field path
/// (formatted like `serde_path_to_error`) and the message.
pub(crate) fn find_positional_struct(value: &serde_json::Value) -> Option<(String, String)> {
    /// Recursive walk; `path` holds the segments so far.
    fn walk(
        v: &serde_json::Value,
        shape: &Shape,
        path: &mut Vec<String>,
    ) -> Option<(String, String)> {
        match (shape, v) {
            (Shape::Struct(name, _), serde_json::Value::Array(_)) => {
                let p = if path.is_empty() {
                    ".".to_string()
                } else {
                    path.join(".")
                };
                Some((p, format!("invalid type: sequence, expected struct {name}")))
            }
            (Shape::Struct(_, fields), serde_json::Value::Object(map)) => {
                fields.iter().find_map(|(key, sub)| {
                    let child = map.get(*key)?;
                    path.push((*key).to_string());
                    let found = walk(child, sub, path);
                    path.pop();
                    found
                })
            }
            (Shape::Map(sub), serde_json::Value::Object(map)) => {
                map.iter().find_map(|(key, child)| {
                    path.push(key.clone());
                    let found = walk(child, sub, path);
                    path.pop();
                    found
                })
            }
            (Shape::List(sub), serde_json::Value::Array(items)) => {
                items.iter().enumerate().find_map(|(i, child)| {
                    // serde_path_to_error writes list indexes as `[i]` appended to the previous segment.
                    let last = path.pop().unwrap_or_default();
                    path.push(format!("{last}[{i}]"));
                    let found = walk(child, sub, path);
                    path.pop();
                    path.push(last);
                    found
                })
            }
            _ => None,
        }
    }
    walk(value, &SCRIPT, &mut Vec::new())
}

/// The message for a type name that is none of the six.
pub(crate) fn unknown_type(name: &str) -> String {
    format!("unknown type {name:?}, expected one of string, int, float, bool, datetime, decimal2")
}
