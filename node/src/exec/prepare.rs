//! Turning a plan node into a [`PreparedNode`]: scopes, compiled expressions, index positions,
//! parsed defaults and row schemas, built once per (plan, node) and shared by all its batches.

use plexus_core::cell::{CellError, parse_default_value};
use plexus_core::expr::{Accumulator, Alias, Compiled, Scope, parse, prepare};
use plexus_core::key::{IndexDef, IndexKind};
use plexus_core::plan::{
    Field, FileReader, FileWriter, JoinType, Plan, PlanExpr, PlanNode, Processor, Reader, Writer,
};
use plexus_core::value::{Type, Value};

use super::error::ExecError;
use crate::pycalc::{CalcField, PyProgram, ReaderField};
use crate::store::{IndexSpec, TableRef, TableSpec, WriteMode};

/// Everything a batch of one node needs that does not depend on the batch: built once by
/// [`prepare_node`], then shared (read-only) by every batch of the node.
#[derive(Debug)]
pub struct PreparedNode {
    pub(crate) name: String,
    pub(crate) input: Input,
    pub(crate) stage: Stage,
    pub(crate) output: Output,
}

impl PreparedNode {
    /// The script node name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Where a node's rows come from.
#[derive(Debug)]
pub(crate) enum Input {
    /// Files, one per batch; rows are aligned with `reader.columns`.
    File(FileReader),
    /// A table of another node; rows are decoded with the full schema (scope `r` = schema).
    Table(TableInput),
}

/// A table reader, ready to scan.
#[derive(Debug)]
pub(crate) struct TableInput {
    pub(crate) table: String,
    pub(crate) types: Vec<Type>,
    pub(crate) page_size: usize,
}

/// What happens between reading and writing.
#[derive(Debug)]
pub(crate) enum Stage {
    /// Nothing: file_table, table_table, distinct_table, table_file.
    Plain,
    /// table_lookup_table.
    Lookup(LookupStage),
    /// tag_and_denormalize.
    Tag(TagStage),
    /// py_calc.
    Py(PyStage),
}

/// A compiled lookup (spec §7.4).
#[derive(Debug)]
pub(crate) struct LookupStage {
    /// The right table name.
    pub(crate) table: String,
    /// Its row layout.
    pub(crate) types: Vec<Type>,
    /// The index looked up.
    pub(crate) index_name: String,
    pub(crate) index: IndexDef,
    /// Positions in the left row of the `join_on` fields, in index component order.
    pub(crate) join_pos: Vec<usize>,
    /// Positions in the right row of the index components, in component order (hash join).
    pub(crate) index_pos: Vec<usize>,
    pub(crate) join_type: JoinType,
    pub(crate) group: bool,
    pub(crate) filter: Option<Compiled>,
    pub(crate) idx_batch: usize,
    pub(crate) right_batch: usize,
}

/// A compiled tag_and_denormalize processor (spec §7.8).
#[derive(Debug)]
pub(crate) struct TagStage {
    /// (tag value, criterion), sorted by tag.
    pub(crate) criteria: Vec<(Value, Compiled)>,
}

/// A compiled py_calc processor (spec §7.7).
#[derive(Debug)]
pub(crate) struct PyStage {
    pub(crate) program: PyProgram,
    /// Positions in the reader row of the fields handed to Python, in program order.
    pub(crate) reader_pos: Vec<usize>,
}

/// Where a node's rows go.
#[derive(Debug)]
pub(crate) enum Output {
    /// A table (all table-writing nodes).
    Table(TableOut),
    /// Files, one per batch (table_file).
    File(FileOut),
}

/// A compiled table writer: the common write pipeline of spec §7.1.
#[derive(Debug)]
pub(crate) struct TableOut {
    pub(crate) fields: Vec<OutField>,
    pub(crate) types: Vec<Type>,
    pub(crate) having: Option<Compiled>,
    /// Indexes in name order (the order of [`TableSpec::indexes`] and of row keys).
    pub(crate) indexes: Vec<OutIndex>,
    pub(crate) mode: WriteMode,
}

/// One writer field.
#[derive(Debug)]
pub(crate) struct OutField {
    pub(crate) name: String,
    pub(crate) ty: Type,
    pub(crate) expr: Compiled,
    /// The expression reads an `l.*` field (spec §7.4 defaults of non-grouped left joins).
    pub(crate) refs_lookup: bool,
    /// A fresh accumulator when the expression is a root aggregate.
    pub(crate) agg: Option<Accumulator>,
    /// The lookup default: `default_value` parsed per spec §4.2, or the zero value. A parse
    /// error is kept and fails a batch only when the default is needed.
    pub(crate) default: Result<Value, CellError>,
}

/// One index of the written table.
#[derive(Debug)]
pub(crate) struct OutIndex {
    pub(crate) name: String,
    pub(crate) def: IndexDef,
    /// Positions of the components in the written row.
    pub(crate) pos: Vec<usize>,
}

/// A compiled file writer (spec §7.6).
#[derive(Debug)]
pub(crate) struct FileOut {
    pub(crate) writer: FileWriter,
    pub(crate) columns: Vec<(String, Type, Compiled)>,
    pub(crate) having: Option<Compiled>,
}

fn fields_of(fields: &[Field]) -> Vec<(String, Type)> {
    fields.iter().map(|f| (f.name.clone(), f.ty)).collect()
}

fn positions(
    node: &str,
    what: &str,
    def: &IndexDef,
    names: &[String],
) -> Result<Vec<usize>, ExecError> {
    def.components
        .iter()
        .map(|c| {
            names
                .iter()
                .position(|n| *n == c.field)
                .ok_or_else(|| ExecError::Prepare {
                    node: node.to_owned(),
                    detail: format!("{what} component {} is not a field", c.field),
                })
        })
        .collect()
}

/// Builds the [`PreparedNode`] of `node`: resolves the tables it reads, compiles every
/// expression against its scope and resolves index components to row positions.
pub fn prepare_node(plan: &Plan, node: &str) -> Result<PreparedNode, ExecError> {
    let pn = plan.node(node).ok_or_else(|| ExecError::Prepare {
        node: node.to_owned(),
        detail: "no such node in the plan".into(),
    })?;
    let err = |detail: String| ExecError::Prepare {
        node: node.to_owned(),
        detail,
    };
    let schema = |table: &str| {
        plan.tables
            .get(table)
            .ok_or_else(|| err(format!("table {table} is not in the plan")))
    };
    let cexpr = |what: &str, e: &PlanExpr, scope: &Scope| {
        prepare(&e.ast, scope).map_err(|x| err(format!("{what} `{}`: {x}", e.src)))
    };

    // Scope `r`: the reader's fields in row order.
    let (input, r_fields) = match &pn.reader {
        Reader::File(f) => {
            let fields: Vec<(String, Type)> =
                f.columns.iter().map(|c| (c.name.clone(), c.ty)).collect();
            (Input::File(f.clone()), fields)
        }
        Reader::Table(t) => {
            let s = schema(&t.table)?;
            let fields = fields_of(&s.fields);
            let input = Input::Table(TableInput {
                table: t.table.clone(),
                types: s.fields.iter().map(|f| f.ty).collect(),
                page_size: (t.rowset_size as usize).max(1),
            });
            (input, fields)
        }
    };
    let mut scope = Scope::new().with_alias(Alias::R, r_fields.clone());

    let stage = match (&pn.lookup, &pn.processor) {
        (Some(l), _) => {
            let right = schema(&l.table)?;
            let l_fields = fields_of(&right.fields);
            let filter_scope = Scope::new().with_alias(Alias::L, l_fields.clone());
            scope = scope.with_alias(Alias::L, l_fields);
            let join_pos =
                l.join_on
                    .iter()
                    .map(|f| {
                        r_fields.iter().position(|(n, _)| n == f).ok_or_else(|| {
                            err(format!("join_on field r.{f} is not a reader field"))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
            if join_pos.len() != l.index.components.len() {
                return Err(err(format!(
                    "join_on has {} fields, index {} has {} components",
                    join_pos.len(),
                    l.index_name,
                    l.index.components.len()
                )));
            }
            let index_pos = l
                .index
                .components
                .iter()
                .map(|c| {
                    right
                        .fields
                        .iter()
                        .position(|f| f.name == c.field)
                        .ok_or_else(|| {
                            err(format!(
                                "index {} component {} is not a field of table {}",
                                l.index_name, c.field, l.table
                            ))
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Stage::Lookup(LookupStage {
                table: l.table.clone(),
                index_pos,
                types: right.fields.iter().map(|f| f.ty).collect(),
                index_name: l.index_name.clone(),
                index: l.index.clone(),
                join_pos,
                join_type: l.join_type,
                group: l.group,
                filter: l
                    .filter
                    .as_ref()
                    .map(|f| cexpr("filter", f, &filter_scope))
                    .transpose()?,
                idx_batch: (l.idx_read_batch_size as usize).max(1),
                right_batch: (l.right_lookup_read_batch_size as usize).max(1),
            })
        }
        (None, Some(Processor::TagAndDenormalize(t))) => {
            scope = scope.with_alias(Alias::P, [(t.tag_field.clone(), Type::String)]);
            // Criteria see only `r.*` (spec §7.8); a `p.` reference fails at run time.
            let crit_scope = Scope::new().with_alias(Alias::R, r_fields.clone());
            let criteria = t
                .criteria
                .iter()
                .map(|(tag, e)| {
                    Ok((
                        Value::str(tag),
                        cexpr(&format!("tag criterion {tag:?}"), e, &crit_scope)?,
                    ))
                })
                .collect::<Result<Vec<_>, ExecError>>()?;
            Stage::Tag(TagStage { criteria })
        }
        (None, Some(Processor::PyCalc(p))) => {
            let p_fields: Vec<(String, Type)> =
                p.fields.iter().map(|f| (f.name.clone(), f.ty)).collect();
            scope = scope.with_alias(Alias::P, p_fields);
            Stage::Py(py_stage(pn, p, &r_fields, &err)?)
        }
        (None, None) => Stage::Plain,
    };

    let output = match &pn.writer {
        Writer::Table(w) => {
            let grouped = matches!(&stage, Stage::Lookup(l) if l.group);
            let fields = w
                .fields
                .iter()
                .map(|f| {
                    let expr = cexpr(&format!("field {}", f.name), &f.expr, &scope)?;
                    Ok(OutField {
                        name: f.name.clone(),
                        ty: f.ty,
                        refs_lookup: expr.field_refs().iter().any(|r| r.alias == "l"),
                        // Aggregates only aggregate in grouped lookups; elsewhere the planner
                        // rejected them, and evaluation would fail anyway (spec §5.10).
                        agg: if grouped {
                            expr.new_accumulator()
                        } else {
                            None
                        },
                        default: parse_default_value(
                            f.default_value.as_deref().unwrap_or(""),
                            f.ty,
                        ),
                        expr,
                    })
                })
                .collect::<Result<Vec<_>, ExecError>>()?;
            let names: Vec<String> = w.fields.iter().map(|f| f.name.clone()).collect();
            let types: Vec<Type> = w.fields.iter().map(|f| f.ty).collect();
            let w_scope =
                Scope::new().with_alias(Alias::W, names.iter().cloned().zip(types.iter().copied()));
            let indexes = w
                .indexes
                .iter()
                .map(|(name, def)| {
                    Ok(OutIndex {
                        name: name.clone(),
                        pos: positions(node, &format!("index {name}"), def, &names)?,
                        def: def.clone(),
                    })
                })
                .collect::<Result<Vec<_>, ExecError>>()?;
            let mode = if pn.node_type == plexus_core::plan::NodeType::DistinctTable {
                let uniques = indexes
                    .iter()
                    .filter(|i| i.def.kind == IndexKind::Unique)
                    .count();
                if uniques != 1 {
                    return Err(err(format!(
                        "distinct_table needs exactly one unique index, has {uniques}"
                    )));
                }
                WriteMode::Distinct
            } else {
                WriteMode::Insert
            };
            Output::Table(TableOut {
                having: w
                    .having
                    .as_ref()
                    .map(|h| cexpr("having", h, &w_scope))
                    .transpose()?,
                fields,
                types,
                indexes,
                mode,
            })
        }
        Writer::File(w) => {
            let columns = w
                .columns
                .iter()
                .map(|c| {
                    Ok((
                        c.name.clone(),
                        c.ty,
                        cexpr(&format!("column {}", c.name), &c.expr, &scope)?,
                    ))
                })
                .collect::<Result<Vec<_>, ExecError>>()?;
            let w_scope =
                Scope::new().with_alias(Alias::W, w.columns.iter().map(|c| (c.name.clone(), c.ty)));
            // Fail when preparing, not per batch, if top.order names no column.
            if let Some(t) = &w.top {
                crate::files::TopBuffer::new(t, &w.columns).map_err(|e| err(e.to_string()))?;
            }
            Output::File(FileOut {
                writer: w.clone(),
                columns,
                having: w
                    .having
                    .as_ref()
                    .map(|h| cexpr("having", h, &w_scope))
                    .transpose()?,
            })
        }
    };

    Ok(PreparedNode {
        name: node.to_owned(),
        input,
        stage,
        output,
    })
}

/// The py_calc program and the reader fields it is handed: those referenced by a calculated
/// field or a writer expression (spec §7.7), in reader row order.
fn py_stage(
    pn: &PlanNode,
    p: &plexus_core::plan::PyCalc,
    r_fields: &[(String, Type)],
    err: &dyn Fn(String) -> ExecError,
) -> Result<PyStage, ExecError> {
    let mut used = vec![false; r_fields.len()];
    let mut mark = |alias: &str, field: &str| {
        if alias == "r"
            && let Some(i) = r_fields.iter().position(|(n, _)| n == field)
        {
            used[i] = true;
        }
    };
    for f in &p.fields {
        // The planner accepted the text in relaxed mode, so it parses; a failure here means
        // the plan was not built by the planner.
        let ast = parse(&f.expression)
            .map_err(|e| err(format!("p.{} `{}`: {e}", f.name, f.expression)))?;
        let refs = ast
            .field_refs(true)
            .map_err(|e| err(format!("p.{} `{}`: {e}", f.name, f.expression)))?;
        for r in refs {
            mark(&r.alias, &r.field);
        }
    }
    if let Writer::Table(w) = &pn.writer {
        for f in &w.fields {
            if let Ok(refs) = f.expr.ast.field_refs(false) {
                for r in refs {
                    mark(&r.alias, &r.field);
                }
            }
        }
    }
    let mut reader_pos = Vec::new();
    let mut readers = Vec::new();
    for (i, (name, ty)) in r_fields.iter().enumerate() {
        if used[i] {
            reader_pos.push(i);
            readers.push(ReaderField {
                name: name.clone(),
                ty: *ty,
            });
        }
    }
    let calc = p
        .fields
        .iter()
        .map(|f| CalcField {
            name: f.name.clone(),
            ty: f.ty,
            expression: f.expression.clone(),
        })
        .collect();
    // The planner's code already ends every source with a newline (Capillaries' join);
    // PyProgram adds one per source, so hand it the text without the last one.
    let code = p.code.strip_suffix('\n').unwrap_or(&p.code);
    Ok(PyStage {
        program: PyProgram::new(&[code], calc, readers).with_origins(
            p.code_urls
                .iter()
                .cloned()
                .zip(p.code_lines.iter().copied())
                .collect(),
        ),
        reader_pos,
    })
}

/// The data table and indexes `node` writes in run `run_id`, or `None` when the node writes
/// files (or does not exist); the engine creates these before the node's first batch.
pub fn table_spec(plan: &Plan, node: &str, run_id: u32) -> Option<TableSpec> {
    let Writer::Table(w) = &plan.node(node)?.writer else {
        return None;
    };
    Some(TableSpec {
        data: TableRef::new(w.name.clone(), run_id),
        indexes: w
            .indexes
            .iter()
            .map(|(name, def)| IndexSpec {
                table: TableRef::new(name.clone(), run_id),
                kind: def.kind,
            })
            .collect(),
        fields: Some(
            w.fields
                .iter()
                .map(|f| Field {
                    name: f.name.clone(),
                    ty: f.ty,
                })
                .collect(),
        ),
        table_options: w.table_options.clone(),
    })
}
