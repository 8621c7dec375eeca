//! Turning a plan node into a [`PreparedNode`]: scopes, compiled expressions, index positions,
//! parsed defaults and row schemas, built once per (plan, node) and shared by all its batches;
//! then the node's [`Processor`], chosen by [`register`].

use plexus_core::cell::parse_default_value;
use plexus_core::expr::{Alias, Scope, prepare};
use plexus_core::key::{IndexDef, IndexKind};
use plexus_core::plan::{Field, FileReader, Plan, PlanExpr, Reader, Writer};
use plexus_core::value::{Type, Value};

use super::compiled::{FileOut, LookupStage, OutField, OutIndex, TableInput, TableOut};
use super::error::ExecError;
use super::file_in::FileTable;
use super::file_out::TableFile;
use super::lookup::Lookup;
use super::processor::Processor;
use super::py_calc::{PyCalc, PyStage, py_stage};
use super::table::TableTable;
use super::tag::Tag;
use crate::store::WriteMode;

/// Everything a batch of one node needs that does not depend on the batch: built once by
/// [`prepare_node`], then shared (read-only) by every batch of the node.
#[derive(Debug)]
pub struct PreparedNode {
    pub(crate) name: String,
    /// What runs each batch.
    pub(crate) processor: Box<dyn Processor>,
}

impl PreparedNode {
    /// The script node name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Where a node's rows come from.
enum Input {
    /// Files, one per batch; rows are aligned with `reader.columns`.
    File(FileReader),
    /// A table of another node; rows are decoded with the full schema (scope `r` = schema).
    Table(TableInput),
}

/// What happens between reading and writing.
enum Stage {
    /// Nothing: file_table, table_table, distinct_table, table_file.
    Plain,
    /// table_lookup_table.
    Lookup(LookupStage),
    /// tag_and_denormalize: (tag value, criterion), sorted by tag.
    Tag(Vec<(Value, plexus_core::expr::Compiled)>),
    /// py_calc.
    Py(PyStage),
}

/// Where a node's rows go.
enum Output {
    /// A table (all table-writing nodes).
    Table(TableOut),
    /// Files, one per batch (table_file).
    File(FileOut),
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
                names: s.fields.iter().map(|f| f.name.clone()).collect(),
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
                names: right.fields.iter().map(|f| f.name.clone()).collect(),
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
        (None, Some(plexus_core::plan::Processor::TagAndDenormalize(t))) => {
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
            Stage::Tag(criteria)
        }
        (None, Some(plexus_core::plan::Processor::PyCalc(p))) => {
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
        processor: register(input, stage, output).map_err(|detail| err(detail.to_owned()))?,
    })
}

/// The processor of a node of this shape: every processor has its arm here (ARCHITECTURE.md
/// "Where to make a change: Add a processor").
fn register(
    input: Input,
    stage: Stage,
    output: Output,
) -> Result<Box<dyn Processor>, &'static str> {
    Ok(match (input, stage, output) {
        (Input::File(reader), Stage::Plain, Output::Table(out)) => {
            Box::new(FileTable::new(reader, out))
        }
        (Input::Table(input), Stage::Plain, Output::Table(out)) => {
            Box::new(TableTable::new(input, out))
        }
        (Input::Table(input), Stage::Lookup(stage), Output::Table(out)) => {
            Box::new(Lookup::new(input, stage, out))
        }
        (Input::Table(input), Stage::Tag(criteria), Output::Table(out)) => Box::new(Tag {
            input,
            criteria,
            out,
        }),
        (Input::Table(input), Stage::Py(stage), Output::Table(out)) => {
            Box::new(PyCalc { input, stage, out })
        }
        (Input::Table(input), Stage::Plain, Output::File(out)) => {
            Box::new(TableFile::new(input, out))
        }
        (Input::File(_), _, _) => return Err("a file reader cannot have a lookup or processor"),
        (Input::Table(_), _, Output::File(_)) => {
            return Err("a file writer needs a plain table reader");
        }
    })
}
