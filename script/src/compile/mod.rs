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
use crate::py_calc_check;
use crate::script::{self, unknown_type};

mod node;
mod readers;
mod writers;

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

        let (policies, default_policy) = self.resolve_policies();

        let mut nodes = Vec::new();
        for (name, node) in &script.nodes {
            if let Some(n) = self.plan_node(name, node, &tables, &indexes, &policies) {
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
            // An unknown type is reported once by plan_node; its table is still declared
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

    fn resolve_policies(&mut self) -> (BTreeMap<String, DependencyPolicy>, Option<String>) {
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
