//! Validation and compilation of a loaded script into a [`Plan`] (spec §3.13).
//!
//! Every check runs on every node, and every failure is collected as a [`Diagnostic`] naming
//! the node (or policy) and the field path, so a broken script gets all its errors at once and
//! nothing is submitted. Checks that Capillaries only makes at run time (a string column with a
//! format, an unknown Parquet codec, a root aggregate in a file column, an unknown rule command,
//! `having` on a distinct_table) are made here, at load: a script that would fail every batch is
//! rejected before any work starts.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use plexus_core::expr::{self, AggPolicy, Alias, Ast, Scope};
use plexus_core::key::{self, IndexDef, IndexKind};
use plexus_core::plan::{
    Compression, CsvReaderSettings, DependencyCmd, DependencyPolicy, DependencyRule, Field,
    FileColumn, FileReader, FileReaderFormat, FileWriter, FileWriterFormat, JoinType, Lookup,
    NodeType, ParquetCodec, Plan, PlanExpr, PlanNode, Processor, PyCalc, Reader, ReaderColumn,
    RerunPolicy, StartPolicy, TableReader, TableSchema, TableWriter, TagAndDenormalize, Top,
    Writer, WriterField,
};
use plexus_core::value::Type;

use crate::load::LoadedScript;
use crate::pycalc;
use crate::script;

/// Largest batch count accepted: Capillaries keeps batch indexes in 16 bits (spec §8, quirk 57).
pub const MAX_BATCHES: i64 = 32_767;
/// Largest `rowset_size` (spec §3.7).
pub const MAX_ROWSET_SIZE: i64 = 100_000;
/// Default and largest `top.limit` (spec §3.9; the docs' 500,000 is not what the code does).
pub const MAX_TOP_LIMIT: i64 = 5_000_000;
/// Default lookup page size (spec §3.10).
pub const DEFAULT_LOOKUP_BATCH: i64 = 3000;
/// Largest lookup page size.
pub const MAX_LOOKUP_BATCH: i64 = 20_000;
/// Longest table or index name (spec §3.8).
pub const MAX_NAME_LEN: usize = 42;

/// What a diagnostic is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Subject {
    /// The script as a whole.
    Script,
    /// A script node.
    Node(String),
    /// A dependency policy.
    Policy(String),
}

/// One validation error: where (subject and field path) and what.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Diagnostic {
    /// The node or policy at fault.
    pub subject: Subject,
    /// Field path inside it, e.g. `w.fields.total.expression`; empty for the whole subject.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.subject {
            Subject::Script => f.write_str("script")?,
            Subject::Node(n) => write!(f, "node {n}")?,
            Subject::Policy(p) => write!(f, "policy {p}")?,
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Validates a loaded script and compiles it; on failure returns every diagnostic found.
pub fn compile(loaded: &LoadedScript) -> Result<Plan, Vec<Diagnostic>> {
    let mut c = Compiler {
        loaded,
        diags: Vec::new(),
    };
    let plan = c.run();
    if c.diags.is_empty() {
        Ok(plan)
    } else {
        let mut diags = c.diags;
        diags.dedup();
        Err(diags)
    }
}

struct Compiler<'a> {
    loaded: &'a LoadedScript,
    diags: Vec<Diagnostic>,
}

/// A table as declared by its writer, before any node is compiled.
struct DeclaredTable {
    node: String,
    fields: Vec<Field>,
}

/// An index as declared by a writer.
struct DeclaredIndex {
    node: String,
    table: String,
    def: Option<IndexDef>,
}

fn node_type_of(n: &script::Node) -> Option<NodeType> {
    NodeType::from_name(&n.node_type)
}

fn writes_table(t: NodeType) -> bool {
    t != NodeType::TableFile
}

fn is_valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn fields_of(fields: &[Field]) -> impl Fn(&str) -> Option<Type> + '_ {
    move |name| fields.iter().find(|f| f.name == name).map(|f| f.ty)
}

/// The `nrs` fields dependency rules and event orders may use (spec §3.12).
fn nrs_fields() -> Vec<Field> {
    [
        ("node_status", Type::Int),
        ("run_id", Type::Int),
        ("run_is_current", Type::Bool),
        ("run_status", Type::Int),
    ]
    .into_iter()
    .map(|(n, ty)| Field {
        name: n.to_string(),
        ty,
    })
    .collect()
}

fn scope(aliases: &[(Alias, &[Field])], wfmodel: bool) -> Scope {
    let mut s = Scope::new();
    for (alias, fields) in aliases {
        s = s.with_alias(*alias, fields.iter().map(|f| (f.name.clone(), f.ty)));
    }
    if wfmodel {
        s = s.with_wfmodel();
    }
    s
}

impl Compiler<'_> {
    fn err(&mut self, subject: &Subject, path: impl Into<String>, message: impl Into<String>) {
        self.diags.push(Diagnostic {
            subject: subject.clone(),
            path: path.into(),
            message: message.into(),
        });
    }

    fn run(&mut self) -> Plan {
        let script = &self.loaded.script;
        let tables = self.declare_tables();
        let indexes = self.declare_indexes(&tables);

        let (policies, default_policy) = self.compile_policies();

        let mut nodes = Vec::new();
        for (name, node) in &script.nodes {
            if let Some(n) = self.compile_node(name, node, &tables, &indexes, &policies) {
                nodes.push(n);
            }
        }

        self.check_index_usage(&indexes);
        let nodes = self.order_nodes(nodes);

        let mut schemas = BTreeMap::new();
        for (tname, t) in &tables {
            let idx: BTreeMap<String, IndexDef> = indexes
                .iter()
                .filter(|(_, i)| &i.table == tname)
                .filter_map(|(iname, i)| i.def.clone().map(|d| (iname.clone(), d)))
                .collect();
            schemas.insert(
                tname.clone(),
                TableSchema {
                    created_by: t.node.clone(),
                    fields: t.fields.clone(),
                    script_order: crate::field_order::field_order(self.loaded, &t.node),
                    indexes: idx,
                },
            );
        }
        Plan {
            nodes,
            tables: schemas,
            policies,
            default_policy: default_policy.unwrap_or_default(),
        }
    }

    /// Registers every table a node writes, checking names (spec §3.8, validation 6).
    fn declare_tables(&mut self) -> BTreeMap<String, DeclaredTable> {
        let mut tables: BTreeMap<String, DeclaredTable> = BTreeMap::new();
        for (name, node) in &self.loaded.script.nodes {
            let subject = Subject::Node(name.clone());
            // An unknown type is reported once by compile_node; its table is still declared
            // when it has one, so that nodes reading it do not report a second, false error.
            if node_type_of(node).is_some_and(|t| !writes_table(t)) {
                continue;
            }
            let Some(w) = &node.w else { continue };
            let tname = w.name.clone();
            if tname.is_empty() {
                if node_type_of(node).is_some() {
                    self.err(&subject, "w.name", "table name is empty");
                }
                continue;
            }
            if !is_valid_name(&tname) {
                self.err(
                    &subject,
                    "w.name",
                    format!("table name {tname:?} must consist of letters, digits and _"),
                );
            }
            for prefix in ["idx", "wf", "system"] {
                if tname.starts_with(prefix) {
                    self.err(
                        &subject,
                        "w.name",
                        format!("table name {tname:?} must not start with {prefix:?}"),
                    );
                }
            }
            if tname.len() > MAX_NAME_LEN {
                self.err(
                    &subject,
                    "w.name",
                    format!("table name {tname:?} is longer than {MAX_NAME_LEN} characters"),
                );
            }
            let mut fields = Vec::new();
            for (fname, f) in &w.fields {
                match Type::from_name(&f.field_type) {
                    Some(ty) => fields.push(Field {
                        name: fname.clone(),
                        ty,
                    }),
                    None => self.err(
                        &subject,
                        format!("w.fields.{fname}.type"),
                        unknown_type(&f.field_type),
                    ),
                }
            }
            if let Some(prev) = tables.get(&tname) {
                let msg = format!(
                    "table {tname:?} is created by both {} and {name}",
                    prev.node
                );
                self.err(&subject, "w.name", msg);
                continue;
            }
            tables.insert(
                tname,
                DeclaredTable {
                    node: name.clone(),
                    fields,
                },
            );
        }
        tables
    }

    /// Parses every index definition and checks index names (spec §3.8, §6.1).
    fn declare_indexes(
        &mut self,
        tables: &BTreeMap<String, DeclaredTable>,
    ) -> BTreeMap<String, DeclaredIndex> {
        let mut indexes: BTreeMap<String, DeclaredIndex> = BTreeMap::new();
        for (name, node) in &self.loaded.script.nodes {
            let subject = Subject::Node(name.clone());
            let Some(w) = &node.w else { continue };
            if node_type_of(node).is_some_and(|t| !writes_table(t)) || w.indexes.is_empty() {
                continue;
            }
            let table = tables.get(&w.name).filter(|t| &t.node == name);
            for (iname, text) in &w.indexes {
                let path = format!("w.indexes.{iname}");
                if !iname.starts_with("idx") || !is_valid_name(iname) {
                    self.err(
                        &subject,
                        &path,
                        format!("index name {iname:?} must start with idx and consist of letters, digits and _"),
                    );
                }
                if iname.len() > MAX_NAME_LEN {
                    self.err(
                        &subject,
                        &path,
                        format!("index name {iname:?} is longer than {MAX_NAME_LEN} characters"),
                    );
                }
                if let Some(t) = tables.get(iname) {
                    let msg = format!(
                        "index name {iname:?} is also the name of the table created by {}",
                        t.node
                    );
                    self.err(&subject, &path, msg);
                }
                if let Some(prev) = indexes.get(iname) {
                    let msg = format!(
                        "index {iname:?} is defined by both {} and {name}",
                        prev.node
                    );
                    self.err(&subject, &path, msg);
                    continue;
                }
                let def = match table {
                    Some(t) => match key::parse_index_def(text, &fields_of(&t.fields)) {
                        Ok(d) => Some(d),
                        Err(e) => {
                            self.err(&subject, &path, format!("{text:?}: {e}"));
                            None
                        }
                    },
                    None => None,
                };
                indexes.insert(
                    iname.clone(),
                    DeclaredIndex {
                        node: name.clone(),
                        table: w.name.clone(),
                        def,
                    },
                );
            }
        }
        indexes
    }

    fn compile_policies(&mut self) -> (BTreeMap<String, DependencyPolicy>, Option<String>) {
        let mut out = BTreeMap::new();
        let nrs = nrs_fields();
        let defaults: Vec<&String> = self
            .loaded
            .script
            .dependency_policies
            .iter()
            .filter(|(_, p)| p.is_default)
            .map(|(n, _)| n)
            .collect();
        let default_policy = if defaults.len() == 1 {
            Some(defaults[0].clone())
        } else {
            let msg = format!(
                "found {} default policies, required 1 (set \"is_default\": true on exactly one dependency policy)",
                defaults.len()
            );
            self.err(&Subject::Script, "dependency_policies", msg);
            None
        };
        for (pname, p) in &self.loaded.script.dependency_policies {
            let subject = Subject::Policy(pname.clone());
            let order = match key::parse_order_expr(&p.event_priority_order, &fields_of(&nrs)) {
                Ok(d) => Some(d),
                Err(e) => {
                    self.err(
                        &subject,
                        "event_priority_order",
                        format!("{:?}: {e}", p.event_priority_order),
                    );
                    None
                }
            };
            let mut rules = Vec::new();
            let sc = scope(&[(Alias::Nrs, &nrs)], true);
            for (i, r) in p.rules.iter().enumerate() {
                let cmd = match r.cmd.as_str() {
                    "go" => Some(DependencyCmd::Go),
                    "wait" => Some(DependencyCmd::Wait),
                    "nogo" => Some(DependencyCmd::Nogo),
                    other => {
                        self.err(
                            &subject,
                            format!("rules[{i}].cmd"),
                            format!("unknown command {other:?}, expected go, wait or nogo"),
                        );
                        None
                    }
                };
                let e = self.rule_expr(
                    &subject,
                    &format!("rules[{i}].expression"),
                    &r.expression,
                    &sc,
                );
                if let (Some(cmd), Some(expr)) = (cmd, e) {
                    rules.push(DependencyRule { cmd, expr });
                }
            }
            if let Some(order) = order {
                out.insert(
                    pname.clone(),
                    DependencyPolicy {
                        is_default: p.is_default,
                        event_priority_order: order,
                        rules,
                    },
                );
            }
        }
        (out, default_policy)
    }

    /// Parses an expression, checks its field references against `scope` and type-checks it by
    /// dummy evaluation (spec §5.11). `required` false means a blank text yields `None` quietly.
    #[allow(clippy::too_many_arguments)]
    fn typed_expr(
        &mut self,
        subject: &Subject,
        path: &str,
        src: &str,
        scope: &Scope,
        expected: Type,
        agg: AggPolicy,
        required: bool,
    ) -> Option<PlanExpr> {
        if src.trim().is_empty() {
            if required {
                self.err(subject, path, "expression is empty");
            }
            return None;
        }
        let ast = self.parsed(subject, path, src, scope)?;
        if let Err(e) = expr::check(&ast, scope, expected, agg) {
            self.err(subject, path, format!("{src:?}: {e}"));
            return None;
        }
        Some(PlanExpr {
            src: src.to_string(),
            ast,
        })
    }

    /// An optional boolean condition (having, lookup filter): parsed, field references
    /// checked against `aliases`, type-checked by dummy evaluation; no aggregates.
    fn condition(
        &mut self,
        subject: &Subject,
        path: &str,
        src: &str,
        aliases: &[(Alias, &[Field])],
    ) -> Option<PlanExpr> {
        let sc = scope(aliases, false);
        self.typed_expr(
            subject,
            path,
            src,
            &sc,
            Type::Bool,
            AggPolicy::Forbidden,
            false,
        )
    }

    /// A dependency rule: parsed, field references checked, and evaluated once with zero values
    /// as Capillaries does at load (spec §3.12); it must return bool.
    fn rule_expr(
        &mut self,
        subject: &Subject,
        path: &str,
        src: &str,
        scope: &Scope,
    ) -> Option<PlanExpr> {
        if src.trim().is_empty() {
            self.err(subject, path, "expression is empty");
            return None;
        }
        let ast = self.parsed(subject, path, src, scope)?;
        if let Err(e) = expr::check_zero(&ast, scope, Type::Bool) {
            self.err(subject, path, format!("{src:?}: {e}"));
            return None;
        }
        Some(PlanExpr {
            src: src.to_string(),
            ast,
        })
    }

    /// Parses an expression and checks its field references against `scope`, without a type
    /// check (tag criteria are only checked at run time, spec §7.8).
    fn parsed(&mut self, subject: &Subject, path: &str, src: &str, scope: &Scope) -> Option<Ast> {
        let ast = match expr::parse(src) {
            Ok(a) => a,
            Err(e) => {
                self.err(subject, path, format!("{src:?}: {e}"));
                return None;
            }
        };
        if let Err(e) = expr::prepare(&ast, scope) {
            self.err(subject, path, format!("{src:?}: {e}"));
            return None;
        }
        Some(ast)
    }

    fn compile_node(
        &mut self,
        name: &str,
        node: &script::Node,
        tables: &BTreeMap<String, DeclaredTable>,
        indexes: &BTreeMap<String, DeclaredIndex>,
        policies: &BTreeMap<String, DependencyPolicy>,
    ) -> Option<PlanNode> {
        let subject = Subject::Node(name.to_string());
        let node_type = NodeType::from_name(&node.node_type);
        if node_type.is_none() {
            self.err(
                &subject,
                "type",
                format!(
                    "unknown node type {:?}, expected one of file_table, table_table, table_lookup_table, distinct_table, table_file, table_custom_tfm_table",
                    node.node_type
                ),
            );
        }
        let start_policy = match node.start_policy.as_str() {
            "auto" => Some(StartPolicy::Auto),
            "manual" => Some(StartPolicy::Manual),
            other => {
                self.err(
                    &subject,
                    "start_policy",
                    format!("unknown start policy {other:?}, expected auto or manual"),
                );
                None
            }
        };
        let rerun_policy = match node.rerun_policy.as_str() {
            "rerun" => Some(RerunPolicy::Rerun),
            "fail" => Some(RerunPolicy::Fail),
            other => {
                self.err(
                    &subject,
                    "rerun_policy",
                    format!("unknown rerun policy {other:?}, expected rerun or fail"),
                );
                None
            }
        };
        if node.max_batch_processing_time <= 0 {
            self.err(
                &subject,
                "max_batch_processing_time",
                format!(
                    "must be a positive number of milliseconds, got {}",
                    node.max_batch_processing_time
                ),
            );
        }
        let node_type = node_type?;

        // Reader.
        let Some(r) = &node.r else {
            self.err(&subject, "r", "reader section is missing");
            return None;
        };
        let (reader, reader_fields, batches, mut depends_on) = if node_type == NodeType::FileTable {
            let (fr, fields) = self.file_reader(&subject, r)?;
            let n = fr.urls.len() as u32;
            (Reader::File(fr), fields, n, BTreeSet::new())
        } else {
            let (tr, fields, creator) = self.table_reader(&subject, r, tables)?;
            let n = tr.expected_batches_total;
            (Reader::Table(tr), fields, n, BTreeSet::from([creator]))
        };

        // Dependency policy: only nodes that read a table have one (spec §3.4).
        let dependency_policy = if node_type == NodeType::FileTable {
            None
        } else if node.dependency_policy.is_empty() {
            self.loaded
                .script
                .dependency_policies
                .iter()
                .find(|(_, p)| p.is_default)
                .map(|(n, _)| n.clone())
        } else if policies.contains_key(&node.dependency_policy)
            || self
                .loaded
                .script
                .dependency_policies
                .contains_key(&node.dependency_policy)
        {
            Some(node.dependency_policy.clone())
        } else {
            self.err(
                &subject,
                "dependency_policy",
                format!("unknown dependency policy {:?}", node.dependency_policy),
            );
            None
        };

        // Lookup.
        let mut lookup = None;
        let mut lookup_fields: Vec<Field> = Vec::new();
        if node_type == NodeType::TableLookupTable {
            match &node.l {
                None => self.err(&subject, "l", "table_lookup_table needs a lookup section"),
                Some(l) => {
                    if let Some((lk, fields, creator)) =
                        self.lookup(&subject, l, &reader_fields, tables, indexes)
                    {
                        depends_on.insert(creator);
                        lookup_fields = fields;
                        lookup = Some(lk);
                    }
                }
            }
        }

        // Processor.
        let mut processor = None;
        let mut p_fields: Vec<Field> = Vec::new();
        if node_type == NodeType::TableCustomTfmTable {
            match &node.p {
                None => self.err(&subject, "p", "table_custom_tfm_table needs a p section"),
                Some(p) => {
                    if let Some((proc_, fields)) =
                        self.processor(&subject, name, node, p, &reader_fields)
                    {
                        p_fields = fields;
                        processor = Some(proc_);
                    }
                }
            }
        }

        // Writer.
        let Some(w) = &node.w else {
            self.err(&subject, "w", "writer section is missing");
            return None;
        };
        let writer = if node_type == NodeType::TableFile {
            Writer::File(self.file_writer(&subject, w, &reader_fields)?)
        } else {
            let grouped = lookup.as_ref().is_some_and(|l: &Lookup| l.group);
            let tw = self.table_writer(
                &subject,
                node_type,
                w,
                &reader_fields,
                lookup.as_ref().map(|_| lookup_fields.as_slice()),
                processor.as_ref().map(|_| p_fields.as_slice()),
                grouped,
                tables,
                indexes,
            )?;
            if node_type == NodeType::DistinctTable {
                if rerun_policy != Some(RerunPolicy::Fail) {
                    self.err(
                        &subject,
                        "rerun_policy",
                        "distinct_table requires rerun_policy \"fail\"",
                    );
                }
                let uniques = tw
                    .indexes
                    .values()
                    .filter(|d| d.kind == IndexKind::Unique)
                    .count();
                if uniques != 1 {
                    self.err(
                        &subject,
                        "w.indexes",
                        format!("distinct_table needs exactly one unique index, found {uniques}"),
                    );
                }
                if !w.having.trim().is_empty() {
                    self.err(
                        &subject,
                        "w.having",
                        "distinct_table is not allowed to have a having condition",
                    );
                }
            }
            Writer::Table(tw)
        };

        Some(PlanNode {
            name: name.to_string(),
            node_type,
            desc: node.desc.clone(),
            start_policy: start_policy?,
            rerun_policy: rerun_policy?,
            max_batch_processing_time_ms: node.max_batch_processing_time,
            dependency_policy,
            depends_on: depends_on.into_iter().collect(),
            batches,
            reader,
            lookup,
            processor,
            writer,
        })
    }

    fn file_reader(
        &mut self,
        subject: &Subject,
        r: &script::Reader,
    ) -> Option<(FileReader, Vec<Field>)> {
        let mut ok = true;
        if r.urls.is_empty() {
            self.err(subject, "r.urls", "a file reader needs at least one URL");
            ok = false;
        }
        for (i, u) in r.urls.iter().enumerate() {
            if u.trim().is_empty() {
                self.err(subject, format!("r.urls[{i}]"), "URL is empty");
                ok = false;
            }
        }
        if r.urls.len() as i64 > MAX_BATCHES {
            self.err(
                subject,
                "r.urls",
                format!("{} URLs, at most {MAX_BATCHES} are supported", r.urls.len()),
            );
            ok = false;
        }
        if r.columns.is_empty() {
            self.err(
                subject,
                "r.columns",
                "a file reader needs at least one column",
            );
            return None;
        }
        // File type detection (spec §3.6).
        let parquet = r.columns.values().any(|c| !c.parquet.col_name.is_empty());
        let csv = !parquet
            && (r.columns.values().any(|c| {
                c.csv.col_hdr.as_deref().is_some_and(|h| !h.is_empty()) || c.csv.col_idx > 0
            }) || r.columns.len() == 1);
        let format = if parquet {
            FileReaderFormat::Parquet
        } else if csv {
            let by_header = r
                .columns
                .values()
                .any(|c| c.csv.col_hdr.as_deref().is_some_and(|h| !h.is_empty()));
            let by_index = r
                .columns
                .values()
                .any(|c| c.csv.col_hdr.as_deref().is_none_or(str::is_empty));
            if by_header && by_index {
                self.err(
                    subject,
                    "r.columns",
                    "address all CSV columns by col_hdr or all by col_idx, not a mix",
                );
                ok = false;
            }
            let sep = r.csv.separator.as_bytes().first().copied();
            if sep.is_none() {
                self.err(subject, "r.csv.separator", "separator is empty");
                ok = false;
            }
            if r.csv.hdr_line_idx < -1 {
                self.err(
                    subject,
                    "r.csv.hdr_line_idx",
                    format!(
                        "must be -1 (no header) or a record index, got {}",
                        r.csv.hdr_line_idx
                    ),
                );
                ok = false;
            }
            if by_header && r.csv.hdr_line_idx < 0 {
                self.err(
                    subject,
                    "r.csv.hdr_line_idx",
                    "columns are addressed by col_hdr but the reader has no header line",
                );
                ok = false;
            }
            if r.csv.first_data_line_idx < 0 {
                self.err(
                    subject,
                    "r.csv.first_data_line_idx",
                    format!("must not be negative, got {}", r.csv.first_data_line_idx),
                );
                ok = false;
            }
            let compression = match r.csv.compression.as_deref() {
                None => Compression::Auto,
                Some(name) => match Compression::NAMES.iter().find(|(n, _)| *n == name) {
                    Some((_, c)) => *c,
                    None => {
                        self.err(
                            subject,
                            "r.csv.compression",
                            format!("must be auto, none, gzip or zstd, got {name:?}"),
                        );
                        ok = false;
                        Compression::Auto
                    }
                },
            };
            FileReaderFormat::Csv(CsvReaderSettings {
                hdr_line_idx: r.csv.hdr_line_idx,
                first_data_line_idx: r.csv.first_data_line_idx,
                separator: sep.unwrap_or(b','),
                by_header,
                compression,
            })
        } else {
            self.err(
                subject,
                "r.columns",
                "cannot detect file reader type: give every column csv.col_hdr or csv.col_idx, or parquet.col_name",
            );
            return None;
        };
        let mut columns = Vec::new();
        let mut fields = Vec::new();
        for (cname, c) in &r.columns {
            let path = format!("r.columns.{cname}");
            let Some(ty) = Type::from_name(&c.col_type) else {
                self.err(
                    subject,
                    format!("{path}.col_type"),
                    unknown_type(&c.col_type),
                );
                ok = false;
                continue;
            };
            if c.csv.col_idx < 0 {
                self.err(
                    subject,
                    format!("{path}.csv.col_idx"),
                    format!("column index must not be negative, got {}", c.csv.col_idx),
                );
                ok = false;
            }
            if matches!(format, FileReaderFormat::Csv(_)) {
                if let Err(msg) = check_col_format(ty, &c.csv.col_format) {
                    self.err(subject, format!("{path}.csv.col_format"), msg);
                    ok = false;
                }
            } else if c.parquet.col_name.is_empty() {
                self.err(
                    subject,
                    format!("{path}.parquet.col_name"),
                    "every column of a Parquet reader needs parquet.col_name",
                );
                ok = false;
            }
            columns.push(ReaderColumn {
                name: cname.clone(),
                ty,
                default_value: c.col_default_value.clone(),
                csv_idx: c.csv.col_idx,
                csv_header: c.csv.col_hdr.clone().unwrap_or_default(),
                csv_format: c.csv.col_format.clone(),
                parquet_column: c.parquet.col_name.clone(),
            });
            fields.push(Field {
                name: cname.clone(),
                ty,
            });
        }
        ok.then(|| {
            (
                FileReader {
                    urls: r.urls.clone(),
                    format,
                    columns,
                    splits: Vec::new(),
                },
                fields,
            )
        })
    }

    fn table_reader(
        &mut self,
        subject: &Subject,
        r: &script::Reader,
        tables: &BTreeMap<String, DeclaredTable>,
    ) -> Option<(TableReader, Vec<Field>, String)> {
        let mut ok = true;
        let batches = r.batches_total();
        if !(1..=MAX_BATCHES).contains(&batches) {
            self.err(
                subject,
                "r.expected_batches_total",
                format!("must be between 1 and {MAX_BATCHES}, got {batches}"),
            );
            ok = false;
        }
        let rowset = r.effective_rowset_size();
        if !(1..=MAX_ROWSET_SIZE).contains(&rowset) {
            self.err(
                subject,
                "r.rowset_size",
                format!("must be between 0 and {MAX_ROWSET_SIZE}, got {rowset}"),
            );
            ok = false;
        }
        if r.table.is_empty() {
            self.err(subject, "r.table", "table reader needs a table name");
            return None;
        }
        let Some(t) = tables.get(&r.table) else {
            self.err(
                subject,
                "r.table",
                format!("cannot find the node that creates table {:?}", r.table),
            );
            return None;
        };
        ok.then(|| {
            (
                TableReader {
                    table: r.table.clone(),
                    expected_batches_total: batches as u32,
                    rowset_size: rowset as u32,
                },
                t.fields.clone(),
                t.node.clone(),
            )
        })
    }

    fn lookup(
        &mut self,
        subject: &Subject,
        l: &script::Lookup,
        reader_fields: &[Field],
        tables: &BTreeMap<String, DeclaredTable>,
        indexes: &BTreeMap<String, DeclaredIndex>,
    ) -> Option<(Lookup, Vec<Field>, String)> {
        let mut ok = true;
        let join_type = match l.join_type.as_str() {
            "inner" => Some(JoinType::Inner),
            "left" => Some(JoinType::Left),
            other => {
                self.err(
                    subject,
                    "l.join_type",
                    format!("unknown join type {other:?}, expected inner or left"),
                );
                None
            }
        };
        let mut sizes = [0u32; 2];
        for (i, (field, v)) in [
            ("l.idx_read_batch_size", l.idx_read_batch_size),
            (
                "l.right_lookup_read_batch_size",
                l.right_lookup_read_batch_size,
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let v = if v <= 0 { DEFAULT_LOOKUP_BATCH } else { v };
            if v > MAX_LOOKUP_BATCH {
                self.err(
                    subject,
                    field,
                    format!("must be at most {MAX_LOOKUP_BATCH}, got {v}"),
                );
                ok = false;
            }
            sizes[i] = v as u32;
        }
        let Some(idx) = indexes.get(&l.index_name) else {
            self.err(
                subject,
                "l.index_name",
                format!(
                    "cannot find index {:?} in any node's w.indexes",
                    l.index_name
                ),
            );
            return None;
        };
        let table = tables.get(&idx.table)?;
        let def = idx.def.clone()?;
        let mut join_on = Vec::new();
        let items: Vec<&str> = l.join_on.split(',').map(str::trim).collect();
        for item in &items {
            let Some(fname) = item.strip_prefix("r.") else {
                self.err(
                    subject,
                    "l.join_on",
                    format!("{item:?} must be a reader field reference r.<field>"),
                );
                ok = false;
                continue;
            };
            match reader_fields.iter().find(|f| f.name == fname) {
                Some(f) => join_on.push(f.clone()),
                None => {
                    self.err(
                        subject,
                        "l.join_on",
                        format!("unknown field r.{fname} (the reader table has no such field)"),
                    );
                    ok = false;
                }
            }
        }
        if ok && join_on.len() != def.components.len() {
            self.err(
                subject,
                "l.join_on",
                format!(
                    "{} join fields for index {} with {} components",
                    join_on.len(),
                    l.index_name,
                    def.components.len()
                ),
            );
            ok = false;
        }
        if ok {
            for (f, c) in join_on.iter().zip(&def.components) {
                if f.ty != c.ty {
                    self.err(
                        subject,
                        "l.join_on",
                        format!(
                            "r.{} is {} but index {} component {} is {}",
                            f.name, f.ty, l.index_name, c.field, c.ty
                        ),
                    );
                    ok = false;
                }
            }
        }
        let filter = if l.filter.trim().is_empty() {
            None
        } else {
            let e = self.condition(subject, "l.filter", &l.filter, &[(Alias::L, &table.fields)]);
            ok &= e.is_some();
            e
        };
        let join_type = join_type?;
        ok.then(|| {
            (
                Lookup {
                    index_name: l.index_name.clone(),
                    table: idx.table.clone(),
                    index: def,
                    join_on: join_on.into_iter().map(|f| f.name).collect(),
                    join_type,
                    group: l.group,
                    filter,
                    idx_read_batch_size: sizes[0],
                    right_lookup_read_batch_size: sizes[1],
                },
                table.fields.clone(),
                table.node.clone(),
            )
        })
    }

    fn processor(
        &mut self,
        subject: &Subject,
        name: &str,
        node: &script::Node,
        p: &script::Processor,
        reader_fields: &[Field],
    ) -> Option<(Processor, Vec<Field>)> {
        match node.custom_proc_type.as_str() {
            "py_calc" => {
                let code = self
                    .loaded
                    .python_code
                    .get(name)
                    .cloned()
                    .unwrap_or_default();
                if p.python_code_urls.is_empty() {
                    self.err(
                        subject,
                        "p.python_code_urls",
                        "py_calc needs at least one Python file",
                    );
                }
                match pycalc::check(p, &code, reader_fields) {
                    Ok(fields) => {
                        let out: Vec<Field> = fields
                            .iter()
                            .map(|f| Field {
                                name: f.name.clone(),
                                ty: f.ty,
                            })
                            .collect();
                        Some((
                            Processor::PyCalc(PyCalc {
                                code_urls: p.python_code_urls.clone(),
                                code,
                                code_lines: self
                                    .loaded
                                    .python_code_lines
                                    .get(name)
                                    .cloned()
                                    .unwrap_or_default(),
                                fields,
                            }),
                            out,
                        ))
                    }
                    Err(errs) => {
                        for (path, msg) in errs {
                            self.err(subject, path, msg);
                        }
                        None
                    }
                }
            }
            "tag_and_denormalize" => {
                let inline = !p.tag_criteria.is_empty();
                let url = !p.tag_criteria_url.is_empty();
                if inline && url {
                    self.err(
                        subject,
                        "p.tag_criteria",
                        "give either tag_criteria or tag_criteria_url, not both",
                    );
                    return None;
                }
                let criteria_src = if url {
                    self.loaded
                        .tag_criteria
                        .get(name)
                        .cloned()
                        .unwrap_or_default()
                } else {
                    p.tag_criteria.clone()
                };
                if criteria_src.is_empty() {
                    self.err(
                        subject,
                        "p.tag_criteria",
                        "tag_and_denormalize needs tag_criteria or tag_criteria_url with at least one tag",
                    );
                    return None;
                }
                if p.tag_field_name.is_empty() {
                    self.err(subject, "p.tag_field_name", "tag field name is empty");
                    return None;
                }
                let sc = scope(&[(Alias::R, reader_fields)], false);
                let mut criteria = Vec::new();
                let mut ok = true;
                for (tag, src) in &criteria_src {
                    let path = format!("p.tag_criteria.{tag}");
                    if src.trim().is_empty() {
                        self.err(subject, &path, "criterion is empty");
                        ok = false;
                        continue;
                    }
                    match self.parsed(subject, &path, src, &sc) {
                        Some(ast) => criteria.push((
                            tag.clone(),
                            PlanExpr {
                                src: src.clone(),
                                ast,
                            },
                        )),
                        None => ok = false,
                    }
                }
                let fields = vec![Field {
                    name: p.tag_field_name.clone(),
                    ty: Type::String,
                }];
                ok.then(|| {
                    (
                        Processor::TagAndDenormalize(TagAndDenormalize {
                            tag_field: p.tag_field_name.clone(),
                            criteria,
                        }),
                        fields,
                    )
                })
            }
            other => {
                self.err(
                    subject,
                    "custom_proc_type",
                    format!("unknown custom processor type {other:?}, expected py_calc or tag_and_denormalize"),
                );
                None
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn table_writer(
        &mut self,
        subject: &Subject,
        node_type: NodeType,
        w: &script::Writer,
        reader_fields: &[Field],
        lookup_fields: Option<&[Field]>,
        p_fields: Option<&[Field]>,
        grouped: bool,
        tables: &BTreeMap<String, DeclaredTable>,
        indexes: &BTreeMap<String, DeclaredIndex>,
    ) -> Option<TableWriter> {
        let mut ok = true;
        let Some(table) = tables.get(&w.name) else {
            // Name errors were reported when tables were declared.
            return None;
        };
        if w.fields.is_empty() {
            self.err(
                subject,
                "w.fields",
                "a table writer needs at least one field",
            );
            return None;
        }
        let mut aliases: Vec<(Alias, &[Field])> = vec![(Alias::R, reader_fields)];
        if let Some(l) = lookup_fields {
            aliases.push((Alias::L, l));
        }
        if let Some(p) = p_fields {
            aliases.push((Alias::P, p));
        }
        let sc = scope(&aliases, false);
        let agg = if grouped {
            AggPolicy::RootOnly
        } else {
            AggPolicy::Forbidden
        };
        let mut fields = Vec::new();
        for f in &table.fields {
            let Some(def) = w.fields.get(&f.name) else {
                continue;
            };
            let path = format!("w.fields.{}.expression", f.name);
            match self.typed_expr(subject, &path, &def.expression, &sc, f.ty, agg, true) {
                Some(expr) => fields.push(WriterField {
                    name: f.name.clone(),
                    ty: f.ty,
                    expr,
                    default_value: (!def.default_value.is_empty())
                        .then(|| def.default_value.clone()),
                }),
                None => ok = false,
            }
        }
        let having = if w.having.trim().is_empty() || node_type == NodeType::DistinctTable {
            None
        } else {
            let e = self.condition(subject, "w.having", &w.having, &[(Alias::W, &table.fields)]);
            ok &= e.is_some();
            e
        };
        let mut idx = BTreeMap::new();
        for iname in w.indexes.keys() {
            match indexes.get(iname).and_then(|i| i.def.clone()) {
                Some(d) => {
                    idx.insert(iname.clone(), d);
                }
                None => ok = false,
            }
        }
        ok.then(|| TableWriter {
            name: w.name.clone(),
            fields,
            having,
            indexes: idx,
            table_options: w.table_options.clone(),
        })
    }

    fn file_writer(
        &mut self,
        subject: &Subject,
        w: &script::Writer,
        reader_fields: &[Field],
    ) -> Option<FileWriter> {
        let mut ok = true;
        if w.url_template.trim().is_empty() {
            self.err(
                subject,
                "w.url_template",
                "a file writer needs url_template",
            );
            ok = false;
        }
        let Some(first) = w.columns.first() else {
            self.err(
                subject,
                "w.columns",
                "a file writer needs at least one column",
            );
            return None;
        };
        let format = if !first.parquet.column_name.is_empty() {
            let codec = match w.parquet.codec.as_str() {
                "gzip" => Some(ParquetCodec::Gzip),
                "snappy" => Some(ParquetCodec::Snappy),
                "uncompressed" => Some(ParquetCodec::Uncompressed),
                other => {
                    self.err(
                        subject,
                        "w.parquet.codec",
                        format!(
                            "unknown Parquet codec {other:?}, expected gzip, snappy or uncompressed"
                        ),
                    );
                    None
                }
            };
            FileWriterFormat::Parquet {
                codec: codec.unwrap_or(ParquetCodec::Gzip),
            }
        } else if !first.csv.header.is_empty() {
            if w.csv.separator.is_empty() {
                self.err(subject, "w.csv.separator", "separator is empty");
                ok = false;
            }
            FileWriterFormat::Csv {
                separator: w.csv.separator.clone(),
            }
        } else {
            self.err(
                subject,
                "w.columns[0]",
                "cannot detect file writer type: the first column needs csv.header or parquet.column_name",
            );
            return None;
        };
        let parquet = matches!(format, FileWriterFormat::Parquet { .. });
        let sc = scope(&[(Alias::R, reader_fields)], false);
        let mut columns = Vec::new();
        let mut col_fields = Vec::new();
        let mut names = BTreeSet::new();
        for (i, c) in w.columns.iter().enumerate() {
            let path = format!("w.columns[{i}]");
            if c.name.is_empty() {
                self.err(subject, format!("{path}.name"), "column name is empty");
                ok = false;
            } else if !names.insert(c.name.clone()) {
                self.err(
                    subject,
                    format!("{path}.name"),
                    format!("duplicate column name {:?}", c.name),
                );
                ok = false;
            }
            let Some(ty) = Type::from_name(&c.field_type) else {
                self.err(subject, format!("{path}.type"), unknown_type(&c.field_type));
                ok = false;
                continue;
            };
            if parquet && c.parquet.column_name.is_empty() {
                self.err(
                    subject,
                    format!("{path}.parquet.column_name"),
                    "every column of a Parquet writer needs parquet.column_name",
                );
                ok = false;
            }
            if !parquet && c.csv.header.is_empty() {
                self.err(
                    subject,
                    format!("{path}.csv.header"),
                    "every column of a CSV writer needs csv.header",
                );
                ok = false;
            }
            // Quirk (spec §3.9, §5.10, #49): Capillaries accepts a root aggregate here and then
            // fails every batch; we reject it at load.
            let e = self.typed_expr(
                subject,
                &format!("{path}.expression"),
                &c.expression,
                &sc,
                ty,
                AggPolicy::Forbidden,
                true,
            );
            col_fields.push(Field {
                name: c.name.clone(),
                ty,
            });
            match e {
                Some(expr) => columns.push(FileColumn {
                    name: c.name.clone(),
                    ty,
                    expr,
                    header: c.csv.header.clone(),
                    format: c.csv.format.clone(),
                    parquet_column: c.parquet.column_name.clone(),
                }),
                None => ok = false,
            }
        }
        let having = if w.having.trim().is_empty() {
            None
        } else {
            let e = self.condition(subject, "w.having", &w.having, &[(Alias::W, &col_fields)]);
            ok &= e.is_some();
            e
        };
        let top = if w.top.order.trim().is_empty() {
            None
        } else {
            let limit = if w.top.limit <= 0 {
                MAX_TOP_LIMIT
            } else {
                w.top.limit
            };
            if limit > MAX_TOP_LIMIT {
                self.err(
                    subject,
                    "w.top.limit",
                    format!("must be at most {MAX_TOP_LIMIT}, got {limit}"),
                );
                ok = false;
            }
            match key::parse_order_expr(&w.top.order, &fields_of(&col_fields)) {
                Ok(order) => Some(Top {
                    order,
                    limit: limit as u64,
                }),
                Err(e) => {
                    self.err(subject, "w.top.order", format!("{:?}: {e}", w.top.order));
                    ok = false;
                    None
                }
            }
        };
        ok.then(|| FileWriter {
            url_template: w.url_template.clone(),
            format,
            columns,
            having,
            top,
        })
    }

    /// Every index must be read by a lookup or be a distinct_table's unique index (spec §3.8).
    fn check_index_usage(&mut self, indexes: &BTreeMap<String, DeclaredIndex>) {
        let script = &self.loaded.script;
        let mut used: BTreeSet<&str> = BTreeSet::new();
        for node in script.nodes.values() {
            if let Some(l) = &node.l {
                used.insert(l.index_name.as_str());
            }
        }
        for (iname, idx) in indexes {
            let distinct_unique = script.nodes.get(&idx.node).is_some_and(|n| {
                n.node_type == NodeType::DistinctTable.name()
                    && idx
                        .def
                        .as_ref()
                        .is_some_and(|d| d.kind == IndexKind::Unique)
            });
            // Quirk (spec §3.8, #6): an index whose name contains to_check_uniq is a uniqueness
            // assertion and needs no reader.
            if !used.contains(iname.as_str())
                && !distinct_unique
                && !iname.contains("to_check_uniq")
            {
                self.err(
                    &Subject::Node(idx.node.clone()),
                    format!("w.indexes.{iname}"),
                    "no lookup uses this index, consider removing this index (or put to_check_uniq in its name to keep it as a uniqueness check)",
                );
            }
        }
    }

    /// Orders nodes topologically (ties by name) and reports dependency cycles.
    fn order_nodes(&mut self, nodes: Vec<PlanNode>) -> Vec<PlanNode> {
        let mut by_name: BTreeMap<String, PlanNode> =
            nodes.into_iter().map(|n| (n.name.clone(), n)).collect();
        let mut indegree: BTreeMap<String, usize> = by_name
            .values()
            .map(|n| {
                let d = n
                    .depends_on
                    .iter()
                    .filter(|d| by_name.contains_key(d.as_str()))
                    .count();
                (n.name.clone(), d)
            })
            .collect();
        let mut ready: BTreeSet<String> = indegree
            .iter()
            .filter(|(_, d)| **d == 0)
            .map(|(n, _)| n.clone())
            .collect();
        let mut order = Vec::new();
        while let Some(next) = ready.pop_first() {
            indegree.remove(&next);
            for (name, d) in indegree.iter_mut() {
                if by_name
                    .get(name)
                    .is_some_and(|n| n.depends_on.contains(&next))
                {
                    *d -= 1;
                    if *d == 0 {
                        ready.insert(name.clone());
                    }
                }
            }
            order.push(next);
        }
        if !indegree.is_empty() {
            let cycle = find_cycle(&by_name, indegree.keys().cloned().collect());
            self.err(
                &Subject::Node(cycle[0].clone()),
                "r.table",
                format!("dependency cycle: {}", cycle.join(" -> ")),
            );
        }
        order
            .into_iter()
            .filter_map(|n| by_name.remove(&n))
            .collect()
    }
}

/// Finds one cycle among the nodes left after a topological sort, as a closed path.
fn find_cycle(nodes: &BTreeMap<String, PlanNode>, left: BTreeSet<String>) -> Vec<String> {
    let Some(start) = left.first().cloned() else {
        return Vec::new();
    };
    let mut path = vec![start.clone()];
    let mut cur = start;
    loop {
        let next = nodes
            .get(&cur)
            .and_then(|n| n.depends_on.iter().find(|d| left.contains(*d)).cloned());
        let Some(next) = next else { return path };
        if let Some(pos) = path.iter().position(|p| *p == next) {
            let mut cycle: Vec<String> = path[pos..].to_vec();
            cycle.reverse();
            cycle.insert(0, next);
            return cycle;
        }
        path.push(next.clone());
        cur = next;
    }
}

/// The message for a type name that is none of the six.
pub(crate) fn unknown_type(name: &str) -> String {
    format!("unknown type {name:?}, expected one of string, int, float, bool, datetime, decimal2")
}

/// Load-time check of a CSV column's `col_format` (spec §4.3): Capillaries only finds these
/// mistakes when a batch reads the first cell; we report them before anything runs.
fn check_col_format(ty: Type, format: &str) -> Result<(), String> {
    match ty {
        Type::String | Type::Bool if !format.is_empty() => Err(format!(
            "a {ty} column must not have a col_format, got {format:?}"
        )),
        Type::DateTime if format.is_empty() => {
            Err("a datetime column needs a col_format with a Go time layout such as \"2006-01-02 15:04:05\"".to_string())
        }
        Type::Int if !format.is_empty() && !sscanf_verb_only(format, 'd') => Err(format!(
            "an int column's col_format must use the %d verb, got {format:?}"
        )),
        Type::Float | Type::Decimal2 if !format.is_empty() && !sscanf_verb_only(format, 'f') => {
            Err(format!(
                "a {ty} column's col_format must use a float verb such as %f, got {format:?}"
            ))
        }
        _ => Ok(()),
    }
}

/// True when `format` holds exactly one Sscanf verb and it is `%<verb>` (or, for floats, one
/// of Go's equivalent float verbs), other text being literal.
fn sscanf_verb_only(format: &str, verb: char) -> bool {
    let mut verbs = Vec::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c == '%' {
            match chars.next() {
                Some('%') => {}
                Some(v) => verbs.push(v),
                None => return false,
            }
        }
    }
    let accepted: &[char] = if verb == 'f' {
        &['f', 'F', 'e', 'E', 'g', 'G', 'v']
    } else {
        &['d', 'v']
    };
    verbs.len() == 1 && accepted.contains(&verbs[0])
}
