//! The compiled Plan: a validated Capillaries script with parsed expressions, typed table
//! schemas, index definitions and batch counts, ready to be replicated and executed.
//!
//! A Plan is produced only by the planner after every check of spec §3.13 passed, so the
//! executor can trust it: every field reference resolves, every expression type-checks, every
//! table read is created by exactly one node and the DAG is acyclic.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use serde::{Deserialize, Serialize};

use crate::expr::Ast;
use crate::key::IndexDef;
use crate::value::Type;

/// Version tag of the Plan encoding, part of the content hash so that hashes of plans built by
/// different encodings never collide.
pub const PLAN_FORMAT_VERSION: u32 = 2;

/// Name of the dependency policy every Capillaries test script (and every generated script)
/// carries (spec §9.6).
pub const DEFAULT_POLICY_NAME: &str = "current_active_first_stopped_nogo";

/// Its event order.
pub const DEFAULT_POLICY_ORDER: &str = "run_is_current(desc), run_id(desc)";

/// Its rules (command, expression), verbatim from the Capillaries test scripts.
pub const DEFAULT_POLICY_RULES: [(&str, &str); 10] = [
    (
        "go",
        "nrs.run_is_current == true && nrs.run_status == wfmodel.RunStart && nrs.node_status == wfmodel.NodeBatchSuccess",
    ),
    (
        "wait",
        "nrs.run_is_current == true && (nrs.run_status == wfmodel.RunStart || nrs.run_status == wfmodel.RunNone) && nrs.node_status == wfmodel.NodeBatchNone",
    ),
    (
        "wait",
        "nrs.run_is_current == true && (nrs.run_status == wfmodel.RunStart || nrs.run_status == wfmodel.RunNone) && nrs.node_status == wfmodel.NodeBatchStart",
    ),
    (
        "nogo",
        "nrs.run_is_current == true && nrs.run_status == wfmodel.RunStart && nrs.node_status == wfmodel.NodeBatchFail",
    ),
    (
        "go",
        "nrs.run_is_current == false && nrs.run_status == wfmodel.RunStart && nrs.node_status == wfmodel.NodeBatchSuccess",
    ),
    (
        "wait",
        "nrs.run_is_current == false && (nrs.run_status == wfmodel.RunStart || nrs.run_status == wfmodel.RunNone) && nrs.node_status == wfmodel.NodeBatchNone",
    ),
    (
        "wait",
        "nrs.run_is_current == false && (nrs.run_status == wfmodel.RunStart || nrs.run_status == wfmodel.RunNone) && nrs.node_status == wfmodel.NodeBatchStart",
    ),
    (
        "go",
        "nrs.run_is_current == false && nrs.run_status == wfmodel.RunComplete && nrs.node_status == wfmodel.NodeBatchSuccess",
    ),
    (
        "nogo",
        "nrs.run_is_current == false && nrs.run_status == wfmodel.RunComplete && nrs.node_status == wfmodel.NodeBatchFail",
    ),
    (
        "nogo",
        "nrs.run_is_current == false && nrs.run_status == wfmodel.RunStop",
    ),
];

/// A validated, compiled script.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Script nodes in a topological order of the DAG (ties broken by name).
    pub nodes: Vec<PlanNode>,
    /// Every table of the script: its creating node and its typed fields.
    pub tables: BTreeMap<String, TableSchema>,
    /// Dependency policies by name.
    pub policies: BTreeMap<String, DependencyPolicy>,
    /// Name of the policy with `is_default: true`.
    pub default_policy: String,
}

/// The typed schema of a table created by one node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableSchema {
    /// Name of the node whose writer creates the table.
    pub created_by: String,
    /// Fields in a fixed order (sorted by name); this order is the row layout.
    pub fields: Vec<Field>,
    /// The field names in the order the script's `w.fields` lists them, for showing a table
    /// as its author wrote it; empty when unknown (then the layout order is used).
    pub script_order: Vec<String>,
    /// Index name → definition, for the indexes the writer maintains.
    pub indexes: BTreeMap<String, IndexDef>,
}

impl TableSchema {
    /// Position and type of a field in the row layout.
    pub fn field(&self, name: &str) -> Option<(usize, Type)> {
        self.fields
            .iter()
            .position(|f| f.name == name)
            .map(|i| (i, self.fields[i].ty))
    }
}

/// A named, typed field.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    /// Field name as written in the script.
    pub name: String,
    /// Declared type.
    pub ty: Type,
}

/// An expression as the script wrote it, with its parsed form.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanExpr {
    /// The source text after template substitution.
    pub src: String,
    /// The parsed expression.
    pub ast: Ast,
}

/// Whether a node runs when its dependencies are done (`auto`) or only when named as a start
/// node (`manual`), spec §9.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StartPolicy {
    /// Runs as soon as its inputs are ready.
    Auto,
    /// Runs only when it is a start node of a run.
    Manual,
}

/// What happens when a node is run again in a later run (spec §9.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RerunPolicy {
    /// Run it again.
    Rerun,
    /// Refuse to run it again.
    Fail,
}

/// The six Capillaries node types (spec §3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeType {
    /// Reads files into a table.
    FileTable,
    /// Transforms a table into a table.
    TableTable,
    /// Joins a table with another through an index.
    TableLookupTable,
    /// Keeps the first row per unique key.
    DistinctTable,
    /// Writes a table to files.
    TableFile,
    /// Runs a custom processor (py_calc, tag_and_denormalize) on a table.
    TableCustomTfmTable,
}

impl NodeType {
    /// The name scripts use for the type.
    pub fn name(self) -> &'static str {
        match self {
            Self::FileTable => "file_table",
            Self::TableTable => "table_table",
            Self::TableLookupTable => "table_lookup_table",
            Self::DistinctTable => "distinct_table",
            Self::TableFile => "table_file",
            Self::TableCustomTfmTable => "table_custom_tfm_table",
        }
    }

    /// Whether a table-reader batch of this type may run in parts (runs of slices of its
    /// range, [`crate::task::Slices`]) and write the same rows, rowids and index entries as
    /// whole: types whose every output row follows from one input row (and the lookup table),
    /// written in input order. Not `distinct_table` (which row keeps a key depends on which
    /// part writes first), `table_file` (one file per batch, and `top` orders the whole
    /// batch), nor file readers (not table readers).
    pub fn splits(self) -> bool {
        matches!(
            self,
            Self::TableTable | Self::TableLookupTable | Self::TableCustomTfmTable
        )
    }

    /// Parses a script node type name.
    pub fn from_name(name: &str) -> Option<Self> {
        [
            Self::FileTable,
            Self::TableTable,
            Self::TableLookupTable,
            Self::DistinctTable,
            Self::TableFile,
            Self::TableCustomTfmTable,
        ]
        .into_iter()
        .find(|t| t.name() == name)
    }
}

/// One script node, compiled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanNode {
    /// Node name (the key in the script's `nodes` map).
    pub name: String,
    /// Node type.
    pub node_type: NodeType,
    /// Free text from the script.
    pub desc: String,
    /// Start policy.
    pub start_policy: StartPolicy,
    /// Rerun policy.
    pub rerun_policy: RerunPolicy,
    /// Grace period before a stuck batch is re-run, in milliseconds.
    pub max_batch_processing_time_ms: i64,
    /// Dependency policy deciding readiness; `None` for file readers (which have no inputs).
    pub dependency_policy: Option<String>,
    /// Nodes whose tables this node reads (reader table and lookup table), sorted, deduplicated.
    pub depends_on: Vec<String>,
    /// Number of batches the node is split into.
    pub batches: u32,
    /// Where rows come from.
    pub reader: Reader,
    /// The lookup, for `table_lookup_table`.
    pub lookup: Option<Lookup>,
    /// The custom processor, for `table_custom_tfm_table`.
    pub processor: Option<Processor>,
    /// Where rows go.
    pub writer: Writer,
}

impl PlanNode {
    /// Whether executing a batch of this node again, after an attempt that may have written
    /// part or all of its output, leaves the same output as one clean attempt. True for every
    /// built-in node type, so the ledger re-runs a lost batch even under `rerun_policy: fail`:
    /// - table writers give each row a rowid derived from (node, batch, position in the
    ///   batch's deterministic read order), so a re-run overwrites its own rows;
    /// - unique and distinct keys are first-writer-wins and a key held by the row's own rowid
    ///   is not a duplicate (both stores), so a re-run keeps the keys it wrote;
    /// - file writers create (truncate) their batch's file before writing it;
    /// - py_calc and tag_and_denormalize write through the same table writer.
    ///
    /// A future processor with outside effects (appending to a file, calling a service) must
    /// answer false here, and its lost batches then fail under `rerun_policy: fail`.
    pub fn rerun_is_idempotent(&self) -> bool {
        match self.node_type {
            NodeType::FileTable
            | NodeType::TableTable
            | NodeType::TableLookupTable
            | NodeType::DistinctTable
            | NodeType::TableFile => true,
            NodeType::TableCustomTfmTable => matches!(
                self.processor,
                Some(Processor::PyCalc(_) | Processor::TagAndDenormalize(_))
            ),
        }
    }
}

/// A node's source of rows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Reader {
    /// Files, one batch per URL.
    File(FileReader),
    /// A table created by another node.
    Table(TableReader),
}

/// A file reader (spec §3.6).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileReader {
    /// The script's URLs; without `splits`, one batch per URL.
    pub urls: Vec<String>,
    /// CSV or Parquet settings.
    pub format: FileReaderFormat,
    /// Reader columns, sorted by name; `r.<name>` refers to them.
    pub columns: Vec<ReaderColumn>,
    /// One entry per batch when large files were split (in URL order, each URL's parts in
    /// file order); empty: batch `i` reads all of `urls[i]`. Decided once from the files when
    /// the plan is made, so every peer agrees on the batches.
    pub splits: Vec<FileSplit>,
}

/// The part of one reader URL a batch reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSplit {
    /// Index into `FileReader::urls`.
    pub url_idx: u32,
    /// Which bytes or row groups of that file.
    pub part: FilePart,
}

/// A part of one input file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FilePart {
    /// The whole file.
    Whole,
    /// CSV bytes `start..end`, both record boundaries of the Go parser, with the parser's
    /// counters at `start` so that later parts number lines and records as one pass would.
    CsvRange {
        /// First byte (the start of a record).
        start: u64,
        /// One past the last byte (the end of a record, or of the file).
        end: u64,
        /// Physical lines before `start` (Go `numLine`).
        lines_before: u64,
        /// Records before `start` (Capillaries' `lineIdx` of the first record of the part).
        records_before: i64,
        /// Data rows before `start`: the rowid sequence number of the part's first row.
        rows_before: u64,
        /// The file's length when it was split; a different length fails the batch.
        file_len: u64,
    },
    /// Parquet row groups `start..end`.
    ParquetGroups {
        /// First row group.
        start: u32,
        /// One past the last row group.
        end: u32,
        /// Rows in the groups before `start`: the rowid sequence number of the first row.
        rows_before: u64,
    },
    /// Part `index` of the `parts` equal byte ranges of a CSV file of `file_len` bytes: its
    /// record boundaries are found when a batch runs (the first record boundary at or after
    /// each range's first byte), not when the plan is made, so making the plan reads no input.
    /// Appended after the variants above, as `CsvResync` after it, so that plans encoded
    /// before a variant existed decode as they did.
    CsvCut {
        /// Which range, from 0.
        index: u32,
        /// How many ranges the file was cut into.
        parts: u32,
        /// The file's length when the plan was made; a different length fails the batch.
        file_len: u64,
    },
    /// Part `index` of the `parts` equal byte ranges of a CSV file of `file_len` bytes, like
    /// [`FilePart::CsvCut`], except that a range's first record boundary may be found by
    /// resynchronising the parser near the range's first byte rather than by running it from
    /// a boundary found before, so the file is not scanned twice. The boundaries differ from
    /// `CsvCut`'s, so a plan says which rule its ranges follow, and a build that knows only
    /// `CsvCut` refuses the plan instead of reading other ranges than its peers.
    CsvResync {
        /// Which range, from 0.
        index: u32,
        /// How many ranges the file was cut into.
        parts: u32,
        /// The file's length when the plan was made; a different length fails the batch.
        file_len: u64,
    },
}

/// What one batch of a file reader reads: the URL's index and the part of its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchInput<'a> {
    /// Index into `FileReader::urls`: Capillaries' batch index, which seeds the rowids and
    /// is stored with the rows.
    pub url_idx: u32,
    /// The URL.
    pub url: &'a str,
    /// The part of the file.
    pub part: &'a FilePart,
}

impl FileReader {
    /// Number of batches: one per split, or one per URL when nothing was split.
    pub fn batch_count(&self) -> usize {
        if self.splits.is_empty() {
            self.urls.len()
        } else {
            self.splits.len()
        }
    }

    /// What batch `batch_idx` reads; `None` past the last batch.
    pub fn batch_input(&self, batch_idx: u32) -> Option<BatchInput<'_>> {
        static WHOLE: FilePart = FilePart::Whole;
        if self.splits.is_empty() {
            let url = self.urls.get(batch_idx as usize)?;
            return Some(BatchInput {
                url_idx: batch_idx,
                url,
                part: &WHOLE,
            });
        }
        let s = self.splits.get(batch_idx as usize)?;
        Some(BatchInput {
            url_idx: s.url_idx,
            url: self.urls.get(s.url_idx as usize)?,
            part: &s.part,
        })
    }
}

/// The file format a file reader decoded from the column definitions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum FileReaderFormat {
    /// Delimited text.
    Csv(CsvReaderSettings),
    /// Parquet.
    Parquet,
}

/// CSV reader settings with defaults applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CsvReaderSettings {
    /// Record index of the header line, -1 for none.
    pub hdr_line_idx: i64,
    /// Index of the first data record.
    pub first_data_line_idx: i64,
    /// Field separator (the first byte of the script's separator).
    pub separator: u8,
    /// Whether columns are addressed by header name (else by index).
    pub by_header: bool,
    /// How the files are compressed (`r.csv.compression`, a Plexus extension).
    pub compression: Compression,
}

/// How a CSV input file is compressed. Decompression is streamed, so a compressed file is
/// one batch (it cannot be cut into byte ranges).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Compression {
    /// By the URL's suffix: `.gz` is gzip, `.zst` is zstd, anything else is plain text.
    #[default]
    Auto,
    /// Plain text, whatever the suffix.
    None,
    /// gzip (one or more members).
    Gzip,
    /// Zstandard (one or more frames).
    Zstd,
}

impl Compression {
    /// The script's name of each setting, as `r.csv.compression` takes it.
    pub const NAMES: [(&'static str, Self); 4] = [
        ("auto", Self::Auto),
        ("none", Self::None),
        ("gzip", Self::Gzip),
        ("zstd", Self::Zstd),
    ];

    /// The compression of `url`: the setting, or for `Auto` the URL path's suffix (a query or
    /// fragment after it does not count). Never `Auto`.
    pub fn of_url(self, url: &str) -> Self {
        if self != Self::Auto {
            return self;
        }
        let path = url
            .split(['?', '#'])
            .next()
            .unwrap_or(url)
            .to_ascii_lowercase();
        if path.ends_with(".gz") {
            Self::Gzip
        } else if path.ends_with(".zst") {
            Self::Zstd
        } else {
            Self::None
        }
    }

    /// The script's name of this setting.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Zstd => "zstd",
        }
    }
}

/// One reader column.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReaderColumn {
    /// Reader field name (`r.<name>`).
    pub name: String,
    /// Declared type.
    pub ty: Type,
    /// `col_default_value`, used for empty CSV cells.
    pub default_value: String,
    /// CSV column index (index addressing).
    pub csv_idx: i64,
    /// CSV header text (header addressing).
    pub csv_header: String,
    /// `col_format`: a Sscanf verb or a Go time layout.
    pub csv_format: String,
    /// Parquet column name.
    pub parquet_column: String,
}

/// A table reader (spec §3.7).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableReader {
    /// Source table name.
    pub table: String,
    /// Number of batches the table is split into.
    pub expected_batches_total: u32,
    /// Rows per page.
    pub rowset_size: u32,
}

/// Inner or left outer join.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum JoinType {
    /// Left rows without a match produce nothing.
    Inner,
    /// Left rows without a match produce one row with defaults.
    Left,
}

/// A lookup (spec §3.10, §7.4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lookup {
    /// The index looked up.
    pub index_name: String,
    /// The table that index belongs to (the right table).
    pub table: String,
    /// The index definition, used to build the key from the left row.
    pub index: IndexDef,
    /// Left (reader) fields whose values form the key, in index component order.
    pub join_on: Vec<String>,
    /// Join type.
    pub join_type: JoinType,
    /// Whether right rows are aggregated per left row.
    pub group: bool,
    /// Filter on right rows.
    pub filter: Option<PlanExpr>,
    /// Index rows read per page.
    pub idx_read_batch_size: u32,
    /// Right rows read per page.
    pub right_lookup_read_batch_size: u32,
}

/// A custom processor (spec §3.11).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Processor {
    /// Python formulas.
    PyCalc(PyCalc),
    /// One output row per matching tag.
    TagAndDenormalize(TagAndDenormalize),
}

/// py_calc settings (spec §7.7).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PyCalc {
    /// URLs the code came from.
    pub code_urls: Vec<String>,
    /// The concatenated Python source.
    pub code: String,
    /// Lines each of `code_urls` contributes to `code` (its text plus the joining newline),
    /// in order: how a Python line number is traced back to a file and line.
    #[serde(default)]
    pub code_lines: Vec<u32>,
    /// Calculated fields in computation (topological) order.
    pub fields: Vec<PyField>,
}

/// One py_calc calculated field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PyField {
    /// `p.<name>`.
    pub name: String,
    /// Declared type of the result.
    pub ty: Type,
    /// The Python expression exactly as written.
    pub expression: String,
}

/// tag_and_denormalize settings (spec §7.8).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TagAndDenormalize {
    /// Name of the produced `p.` field.
    pub tag_field: String,
    /// Tag → criterion, sorted by tag.
    pub criteria: Vec<(String, PlanExpr)>,
}

/// A node's destination.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Writer {
    /// A table.
    Table(TableWriter),
    /// Files, one per batch.
    File(FileWriter),
}

/// A table writer (spec §3.8).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableWriter {
    /// Table name.
    pub name: String,
    /// Fields in the row layout order of the table schema.
    pub fields: Vec<WriterField>,
    /// Filter on the computed row.
    pub having: Option<PlanExpr>,
    /// Index name → definition.
    pub indexes: BTreeMap<String, IndexDef>,
    /// Text appended to CQL `CREATE TABLE`.
    pub table_options: String,
}

/// One table writer field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WriterField {
    /// Field name.
    pub name: String,
    /// Declared type.
    pub ty: Type,
    /// The expression computing it.
    pub expr: PlanExpr,
    /// `default_value` text for unmatched lookups (parsed when needed, spec §4.2).
    pub default_value: Option<String>,
}

/// A file writer (spec §3.9).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileWriter {
    /// Output path or URL, may contain `{batch_idx}` / `{run_id}`.
    pub url_template: String,
    /// CSV or Parquet.
    pub format: FileWriterFormat,
    /// Output columns in file order.
    pub columns: Vec<FileColumn>,
    /// Filter over `w.<column name>`.
    pub having: Option<PlanExpr>,
    /// Sort-and-limit per batch.
    pub top: Option<Top>,
}

/// Output file format.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileWriterFormat {
    /// Delimited text with this separator.
    Csv {
        /// Field separator.
        separator: String,
    },
    /// Parquet with this codec.
    Parquet {
        /// `gzip`, `snappy` or `uncompressed`.
        codec: ParquetCodec,
    },
}

/// Parquet compression codec of a file writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ParquetCodec {
    /// gzip (the Capillaries default).
    Gzip,
    /// snappy.
    Snappy,
    /// No compression.
    Uncompressed,
}

/// One file writer column.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileColumn {
    /// Name used by `having` and `top`.
    pub name: String,
    /// Declared type.
    pub ty: Type,
    /// The expression computing it.
    pub expr: PlanExpr,
    /// CSV header text.
    pub header: String,
    /// CSV format (Go verb or time layout).
    pub format: String,
    /// Parquet column name.
    pub parquet_column: String,
}

/// `top`: keep the first `limit` rows in key order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Top {
    /// The order definition over column names.
    pub order: IndexDef,
    /// Maximum rows per batch.
    pub limit: u64,
}

/// A dependency policy (spec §3.12, §9.6).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DependencyPolicy {
    /// Whether this is the default policy.
    pub is_default: bool,
    /// Order of the dependency events considered.
    pub event_priority_order: IndexDef,
    /// Rules, first match wins.
    pub rules: Vec<DependencyRule>,
}

/// What a dependency rule decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DependencyCmd {
    /// The dependency is satisfied.
    Go,
    /// Not yet; check again later.
    Wait,
    /// Never; the batch fails.
    Nogo,
}

/// One dependency rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DependencyRule {
    /// The decision when the expression is true.
    pub cmd: DependencyCmd,
    /// Boolean expression over `nrs.*` and `wfmodel.*`.
    pub expr: PlanExpr,
}

impl Plan {
    /// A node by name.
    pub fn node(&self, name: &str) -> Option<&PlanNode> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// Stable content hash: BLAKE3 of the format version and the bincode encoding.
    pub fn content_hash(&self) -> Result<[u8; 32], bincode::error::EncodeError> {
        let bytes = self.to_bytes()?;
        let mut hasher = blake3::Hasher::new();
        hasher.update(&PLAN_FORMAT_VERSION.to_le_bytes());
        hasher.update(&bytes);
        Ok(*hasher.finalize().as_bytes())
    }

    /// The content hash as lower-case hex.
    pub fn content_hash_hex(&self) -> Result<String, bincode::error::EncodeError> {
        let h = self.content_hash()?;
        let mut s = String::with_capacity(64);
        for b in h {
            let _ = write!(s, "{b:02x}");
        }
        Ok(s)
    }

    /// Encodes the plan with bincode (the replication and wire format).
    pub fn to_bytes(&self) -> Result<Vec<u8>, bincode::error::EncodeError> {
        bincode::serde::encode_to_vec(self, bincode::config::standard())
    }

    /// Decodes a plan encoded by [`Plan::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, bincode::error::DecodeError> {
        let (plan, _) = bincode::serde::decode_from_slice(bytes, bincode::config::standard())?;
        Ok(plan)
    }

    /// Length of the longest dependency chain (a plan of independent nodes has depth 1).
    pub fn depth(&self) -> usize {
        let mut depth: BTreeMap<&str, usize> = BTreeMap::new();
        // Nodes are topologically ordered, so every dependency is already measured.
        for n in &self.nodes {
            let d = n
                .depends_on
                .iter()
                .filter_map(|dep| depth.get(dep.as_str()))
                .max()
                .map_or(1, |d| d + 1);
            depth.insert(&n.name, d);
        }
        depth.values().copied().max().unwrap_or(0)
    }
}

fn opt_expr(e: &Option<PlanExpr>) -> String {
    e.as_ref()
        .map_or_else(|| "-".to_string(), |e| e.ast.to_string())
}

impl fmt::Display for Plan {
    /// A stable, human-readable rendering for golden tests and `planner validate --show-plan`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "plan: {} nodes, {} tables",
            self.nodes.len(),
            self.tables.len()
        )?;
        for (name, t) in &self.tables {
            write!(f, "table {name} (by {}):", t.created_by)?;
            for fl in &t.fields {
                write!(f, " {}:{}", fl.name, fl.ty)?;
            }
            writeln!(f)?;
            for (iname, def) in &t.indexes {
                writeln!(f, "  index {iname} = {def}")?;
            }
        }
        for n in &self.nodes {
            writeln!(f)?;
            writeln!(f, "node {} [{}]", n.name, n.node_type.name())?;
            if !n.desc.is_empty() {
                writeln!(f, "  desc: {}", n.desc)?;
            }
            writeln!(
                f,
                "  start: {:?}, rerun: {:?}, max_batch_ms: {}, batches: {}",
                n.start_policy, n.rerun_policy, n.max_batch_processing_time_ms, n.batches
            )?;
            if let Some(p) = &n.dependency_policy {
                writeln!(f, "  dependency_policy: {p}")?;
            }
            if !n.depends_on.is_empty() {
                writeln!(f, "  depends_on: {}", n.depends_on.join(", "))?;
            }
            match &n.reader {
                Reader::File(r) => {
                    match &r.format {
                        FileReaderFormat::Csv(c) => {
                            write!(
                                f,
                                "  read csv: hdr_line_idx {}, first_data_line_idx {}, separator {:?}, by {}",
                                c.hdr_line_idx,
                                c.first_data_line_idx,
                                char::from(c.separator),
                                if c.by_header { "header" } else { "index" }
                            )?;
                            // Only when set, so the text of every older plan stays as it was.
                            if c.compression != Compression::Auto {
                                write!(f, ", compression {}", c.compression.name())?;
                            }
                            writeln!(f)?;
                        }
                        FileReaderFormat::Parquet => writeln!(f, "  read parquet")?,
                    }
                    for u in &r.urls {
                        writeln!(f, "    url {u}")?;
                    }
                    for (i, sp) in r.splits.iter().enumerate() {
                        match &sp.part {
                            FilePart::Whole => {
                                writeln!(f, "    batch {i}: url {} whole", sp.url_idx)?
                            }
                            FilePart::CsvRange {
                                start,
                                end,
                                lines_before,
                                records_before,
                                rows_before,
                                file_len,
                            } => writeln!(
                                f,
                                "    batch {i}: url {} bytes {start}..{end} of {file_len}, lines before {lines_before}, records before {records_before}, rows before {rows_before}",
                                sp.url_idx
                            )?,
                            FilePart::CsvCut {
                                index,
                                parts,
                                file_len,
                            } => writeln!(
                                f,
                                "    batch {i}: url {} range {index} of {parts} of {file_len} bytes, cut at record boundaries when run",
                                sp.url_idx
                            )?,
                            FilePart::CsvResync {
                                index,
                                parts,
                                file_len,
                            } => writeln!(
                                f,
                                "    batch {i}: url {} range {index} of {parts} of {file_len} bytes, resynchronised on record boundaries when run",
                                sp.url_idx
                            )?,
                            FilePart::ParquetGroups {
                                start,
                                end,
                                rows_before,
                            } => writeln!(
                                f,
                                "    batch {i}: url {} row groups {start}..{end}, rows before {rows_before}",
                                sp.url_idx
                            )?,
                        }
                    }
                    for c in &r.columns {
                        write!(f, "    r.{}:{}", c.name, c.ty)?;
                        match &r.format {
                            FileReaderFormat::Csv(cs) if cs.by_header => {
                                write!(f, " hdr {:?}", c.csv_header)?
                            }
                            FileReaderFormat::Csv(_) => write!(f, " idx {}", c.csv_idx)?,
                            FileReaderFormat::Parquet => write!(f, " col {:?}", c.parquet_column)?,
                        }
                        if !c.csv_format.is_empty() {
                            write!(f, " format {:?}", c.csv_format)?;
                        }
                        if !c.default_value.is_empty() {
                            write!(f, " default {:?}", c.default_value)?;
                        }
                        writeln!(f)?;
                    }
                }
                Reader::Table(t) => writeln!(
                    f,
                    "  read table {}: batches {}, rowset {}",
                    t.table, t.expected_batches_total, t.rowset_size
                )?,
            }
            if let Some(l) = &n.lookup {
                writeln!(
                    f,
                    "  lookup {} on {} = {} join_on [{}] {:?} group {} filter {} pages {}/{}",
                    l.index_name,
                    l.table,
                    l.index,
                    l.join_on.join(", "),
                    l.join_type,
                    l.group,
                    opt_expr(&l.filter),
                    l.idx_read_batch_size,
                    l.right_lookup_read_batch_size
                )?;
            }
            match &n.processor {
                Some(Processor::PyCalc(p)) => {
                    writeln!(
                        f,
                        "  py_calc: {} code bytes from [{}]",
                        p.code.len(),
                        p.code_urls.join(", ")
                    )?;
                    for pf in &p.fields {
                        writeln!(f, "    p.{}:{} = {}", pf.name, pf.ty, pf.expression)?;
                    }
                }
                Some(Processor::TagAndDenormalize(t)) => {
                    writeln!(f, "  tag_and_denormalize: p.{}", t.tag_field)?;
                    for (tag, e) in &t.criteria {
                        writeln!(f, "    tag {tag:?} when {}", e.ast)?;
                    }
                }
                None => {}
            }
            match &n.writer {
                Writer::Table(w) => {
                    writeln!(f, "  write table {}", w.name)?;
                    for wf in &w.fields {
                        write!(f, "    w.{}:{} = {}", wf.name, wf.ty, wf.expr.ast)?;
                        if let Some(d) = &wf.default_value {
                            write!(f, " default {d:?}")?;
                        }
                        writeln!(f)?;
                    }
                    writeln!(f, "    having {}", opt_expr(&w.having))?;
                    if !w.table_options.is_empty() {
                        writeln!(f, "    table_options {:?}", w.table_options)?;
                    }
                }
                Writer::File(w) => {
                    match &w.format {
                        FileWriterFormat::Csv { separator } => {
                            writeln!(f, "  write csv {} separator {separator:?}", w.url_template)?
                        }
                        FileWriterFormat::Parquet { codec } => {
                            writeln!(f, "  write parquet {} codec {codec:?}", w.url_template)?
                        }
                    }
                    for c in &w.columns {
                        write!(f, "    {}:{} = {}", c.name, c.ty, c.expr.ast)?;
                        if !c.header.is_empty() {
                            write!(f, " header {:?} format {:?}", c.header, c.format)?;
                        }
                        if !c.parquet_column.is_empty() {
                            write!(f, " parquet {:?}", c.parquet_column)?;
                        }
                        writeln!(f)?;
                    }
                    writeln!(f, "    having {}", opt_expr(&w.having))?;
                    if let Some(t) = &w.top {
                        writeln!(f, "    top {} limit {}", t.order, t.limit)?;
                    }
                }
            }
        }
        for (name, p) in &self.policies {
            writeln!(f)?;
            writeln!(
                f,
                "policy {name}{}: order {}",
                if p.is_default { " (default)" } else { "" },
                p.event_priority_order
            )?;
            for r in &p.rules {
                writeln!(f, "  {:?} when {}", r.cmd, r.expr.ast)?;
            }
        }
        Ok(())
    }
}
