//! Plan-building helpers shared by the executor tests.
#![allow(dead_code)]

use std::collections::BTreeMap;

use plexus_core::expr::parse;
use plexus_core::key::{IndexDef, parse_index_def};
use plexus_core::plan::{
    CsvReaderSettings, Field, Plan, PlanExpr, PlanNode, TableSchema, TableWriter, Writer,
    WriterField,
};
use plexus_core::value::{Type, Value};
use plexus_node::store::{IndexSpec, RowWrite, Store, TableRef, TableSpec};

pub(crate) fn e(src: &str) -> PlanExpr {
    PlanExpr {
        src: src.to_owned(),
        ast: parse(src).unwrap_or_else(|err| panic!("test expression {src:?}: {err}")),
    }
}

pub(crate) fn fields(list: &[(&str, Type)]) -> Vec<Field> {
    let mut v: Vec<Field> = list
        .iter()
        .map(|(n, t)| Field {
            name: (*n).to_owned(),
            ty: *t,
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

pub(crate) fn index(def: &str, f: &[Field]) -> IndexDef {
    parse_index_def(def, &|name| f.iter().find(|x| x.name == name).map(|x| x.ty))
        .unwrap_or_else(|err| panic!("test index {def:?}: {err}"))
}

pub(crate) fn items_fields() -> Vec<Field> {
    fields(&[
        ("item_id", Type::Int),
        ("order_id", Type::Int),
        ("price", Type::Decimal2),
        ("product", Type::String),
    ])
}

/// CSV settings of a file with a header line and data from the next line, comma-separated.
pub(crate) fn csv_with_header() -> CsvReaderSettings {
    CsvReaderSettings {
        hdr_line_idx: 0,
        first_data_line_idx: 1,
        separator: b',',
        by_header: true,
        compression: plexus_core::plan::Compression::Auto,
    }
}

/// Adds `n` to the plan and registers the table it writes.
pub(crate) fn add(plan: &mut Plan, n: PlanNode) {
    if let Writer::Table(w) = &n.writer {
        plan.tables.insert(
            w.name.clone(),
            TableSchema {
                created_by: n.name.clone(),
                script_order: Vec::new(),
                fields: w
                    .fields
                    .iter()
                    .map(|f| Field {
                        name: f.name.clone(),
                        ty: f.ty,
                    })
                    .collect(),
                indexes: w.indexes.clone(),
            },
        );
    }
    plan.nodes.push(n);
}

pub(crate) fn s(v: &str) -> Value {
    Value::str(v)
}

pub(crate) fn d(v: &str) -> Value {
    Value::Decimal(v.parse().unwrap_or_default())
}

/// A plan with the `orders` (these fields) and `items` tables, without nodes.
pub(crate) fn base_plan(orders: Vec<Field>) -> Plan {
    let mut tables = BTreeMap::new();
    tables.insert(
        "orders".to_owned(),
        TableSchema {
            created_by: "read_orders".into(),
            script_order: Vec::new(),
            fields: orders,
            indexes: BTreeMap::new(),
        },
    );
    let itf = items_fields();
    let mut idx = BTreeMap::new();
    idx.insert(
        "idx_items_order_id".to_owned(),
        index("non_unique(order_id)", &itf),
    );
    idx.insert(
        "idx_items_item_id".to_owned(),
        index("unique(item_id)", &itf),
    );
    tables.insert(
        "items".to_owned(),
        TableSchema {
            created_by: "read_items".into(),
            script_order: Vec::new(),
            fields: itf,
            indexes: idx,
        },
    );
    Plan {
        nodes: Vec::new(),
        tables,
        policies: BTreeMap::new(),
        default_policy: String::new(),
    }
}

/// The data and index tables of `plan`'s `table` in `run`, for tests that write a source table.
pub(crate) fn source_spec(plan: &Plan, table: &str, run: u32) -> TableSpec {
    source_spec_as(plan, table, table, run)
}

/// [`source_spec`] with the rows in data table `data` (the indexes are `table`'s).
pub(crate) fn source_spec_as(plan: &Plan, table: &str, data: &str, run: u32) -> TableSpec {
    let schema = &plan.tables[table];
    TableSpec {
        data: TableRef::new(data, run),
        indexes: schema
            .indexes
            .iter()
            .map(|(n, d)| IndexSpec {
                table: TableRef::new(n.clone(), run),
                kind: d.kind,
            })
            .collect(),
        fields: Some(schema.fields.clone()),
        table_options: String::new(),
    }
}

/// The store write of row `r` (in `schema`'s field order) at `rowid`, with its index keys.
pub(crate) fn row_write(schema: &TableSchema, rowid: i64, r: &[Value]) -> anyhow::Result<RowWrite> {
    let types: Vec<Type> = schema.fields.iter().map(|f| f.ty).collect();
    let mut row = Vec::new();
    plexus_core::row::encode_row(&mut row, &types, r)?;
    let keys = schema
        .indexes
        .values()
        .map(|def| {
            let vals: Vec<&Value> = def
                .components
                .iter()
                .map(|c| &r[schema.field(&c.field).map_or(0, |(p, _)| p)])
                .collect();
            plexus_core::key::build_key(def, &vals)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RowWrite {
        batch_idx: 0,
        rowid,
        row,
        keys,
    })
}

/// Every (rowid, encoded row) of `table` in run `run` of `ks`, in rowid order: what "byte for
/// byte" means for a table output (rowids follow the output sequence, so order matters too).
pub(crate) fn raw(
    store: &dyn Store,
    ks: &str,
    table: &str,
    run: u32,
) -> anyhow::Result<Vec<(i64, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut resume = None;
    loop {
        let page = store.scan_batch(ks, &TableRef::new(table, run), 0, 1, 1000, resume)?;
        out.extend(page.iter().map(|(r, b)| (r, b.to_vec())));
        match page.resume_after {
            Some(r) => resume = Some(r),
            None => break,
        }
    }
    out.sort();
    Ok(out)
}

/// A writer field: (name, type, expression, default_value).
pub(crate) type Wf<'a> = (&'a str, Type, &'a str, Option<&'a str>);

/// The writer fields `wf`, in layout (name) order.
pub(crate) fn writer_fields(wf: &[Wf<'_>]) -> Vec<WriterField> {
    let mut fs: Vec<WriterField> = wf
        .iter()
        .map(|(n, t, x, d)| WriterField {
            name: (*n).to_owned(),
            ty: *t,
            expr: e(x),
            default_value: d.map(str::to_owned),
        })
        .collect();
    fs.sort_by(|a, b| a.name.cmp(&b.name));
    fs
}

/// A table writer of `wf` with `having` and indexes `idx` (name, definition).
pub(crate) fn table_writer(
    name: &str,
    wf: &[Wf<'_>],
    having: Option<&str>,
    idx: &[(&str, &str)],
) -> TableWriter {
    let fs = writer_fields(wf);
    let plain: Vec<Field> = fs
        .iter()
        .map(|f| Field {
            name: f.name.clone(),
            ty: f.ty,
        })
        .collect();
    TableWriter {
        name: name.to_owned(),
        fields: fs,
        having: having.map(e),
        indexes: idx
            .iter()
            .map(|(n, d)| ((*n).to_owned(), index(d, &plain)))
            .collect(),
        table_options: String::new(),
    }
}

/// A plan with the `lefts` and `rights` tables (`rights` indexed non-unique by `k` and
/// unique by `u`), without nodes.
pub(crate) fn lefts_rights_plan(left: Vec<Field>, right: Vec<Field>) -> Plan {
    let mut idx = BTreeMap::new();
    idx.insert("idx_rights_k".to_owned(), index("non_unique(k)", &right));
    idx.insert("idx_rights_u".to_owned(), index("unique(u)", &right));
    let mut tables = BTreeMap::new();
    for (name, fields, indexes) in [("lefts", left, BTreeMap::new()), ("rights", right, idx)] {
        tables.insert(
            name.to_owned(),
            TableSchema {
                created_by: format!("read_{name}"),
                script_order: Vec::new(),
                fields,
                indexes,
            },
        );
    }
    Plan {
        nodes: Vec::new(),
        tables,
        policies: BTreeMap::new(),
        default_policy: String::new(),
    }
}
