//! Small hand-built plans for tests (also included by `tests/t10_ledger.rs` via `#[path]`).
#![allow(dead_code)]

use std::collections::BTreeMap;

use plexus_core::expr::parse;
use plexus_core::key::{IndexDef, parse_index_def, parse_order_expr};
use plexus_core::plan::{
    CsvReaderSettings, DependencyCmd, DependencyPolicy, DependencyRule, FileReader,
    FileReaderFormat, FileWriter, FileWriterFormat, JoinType, Lookup, NodeType, Plan, PlanExpr,
    PlanNode, Reader, RerunPolicy, StartPolicy, TableReader, TableSchema, TableWriter, Writer,
};
use plexus_core::value::Type;

pub(crate) use plexus_core::plan::DEFAULT_POLICY_RULES as DEFAULT_RULES;

pub(crate) use plexus_core::plan::DEFAULT_POLICY_NAME as DEFAULT_POLICY;

fn nrs_type(f: &str) -> Option<Type> {
    match f {
        "run_id" | "run_status" | "node_status" => Some(Type::Int),
        "run_is_current" => Some(Type::Bool),
        _ => None,
    }
}

/// A policy from (cmd, expression) texts and an order expression.
pub(crate) fn policy(order: &str, rules: &[(&str, &str)]) -> DependencyPolicy {
    DependencyPolicy {
        is_default: true,
        event_priority_order: parse_order_expr(order, &nrs_type).expect("order expression"),
        rules: rules
            .iter()
            .map(|(cmd, src)| DependencyRule {
                cmd: match *cmd {
                    "go" => DependencyCmd::Go,
                    "wait" => DependencyCmd::Wait,
                    _ => DependencyCmd::Nogo,
                },
                expr: PlanExpr {
                    src: (*src).to_owned(),
                    ast: parse(src).expect("rule expression"),
                },
            })
            .collect(),
    }
}

/// The default policy `current_active_first_stopped_nogo`.
pub(crate) fn default_policy() -> DependencyPolicy {
    policy(plexus_core::plan::DEFAULT_POLICY_ORDER, &DEFAULT_RULES)
}

fn key_index() -> IndexDef {
    parse_index_def("non_unique(k)", &|_| Some(Type::String)).expect("index")
}

/// Builds a plan node by node (callers add nodes in topological order).
pub(crate) struct PlanBuilder {
    plan: Plan,
}

impl PlanBuilder {
    pub(crate) fn new() -> Self {
        let mut policies = BTreeMap::new();
        policies.insert(DEFAULT_POLICY.to_owned(), default_policy());
        Self {
            plan: Plan {
                nodes: Vec::new(),
                tables: BTreeMap::new(),
                policies,
                default_policy: DEFAULT_POLICY.to_owned(),
            },
        }
    }

    fn creator(&self, table: &str) -> String {
        self.plan
            .tables
            .get(table)
            .map(|t| t.created_by.clone())
            .unwrap_or_else(|| panic!("table {table} not created yet"))
    }

    fn push(&mut self, mut node: PlanNode, writes: Option<&str>) {
        if let Some(t) = writes {
            self.plan.tables.insert(
                t.to_owned(),
                TableSchema {
                    created_by: node.name.clone(),
                    script_order: Vec::new(),
                    fields: Vec::new(),
                    indexes: BTreeMap::from([(format!("idx_{t}"), key_index())]),
                },
            );
            node.writer = Writer::Table(TableWriter {
                name: t.to_owned(),
                fields: Vec::new(),
                having: None,
                indexes: BTreeMap::new(),
                table_options: String::new(),
            });
        }
        node.depends_on.sort();
        node.depends_on.dedup();
        self.plan.nodes.push(node);
    }

    fn base(name: &str, node_type: NodeType, reader: Reader, batches: u32) -> PlanNode {
        PlanNode {
            name: name.to_owned(),
            node_type,
            desc: String::new(),
            start_policy: StartPolicy::Auto,
            rerun_policy: RerunPolicy::Rerun,
            max_batch_processing_time_ms: 60_000,
            dependency_policy: None,
            depends_on: Vec::new(),
            batches,
            reader,
            lookup: None,
            processor: None,
            writer: Writer::File(FileWriter {
                url_template: "/tmp/out.csv".to_owned(),
                format: FileWriterFormat::Csv {
                    separator: ",".to_owned(),
                },
                columns: Vec::new(),
                having: None,
                top: None,
            }),
        }
    }

    /// A file_table node reading `urls` files into `table`.
    pub(crate) fn file(mut self, name: &str, table: &str, urls: usize) -> Self {
        let reader = Reader::File(FileReader {
            urls: (0..urls).map(|i| format!("/in/{name}_{i}.csv")).collect(),
            format: FileReaderFormat::Csv(CsvReaderSettings {
                hdr_line_idx: 0,
                first_data_line_idx: 1,
                separator: b',',
                by_header: true,
                compression: plexus_core::plan::Compression::Auto,
            }),
            columns: Vec::new(),
            splits: Vec::new(),
        });
        let n = Self::base(name, NodeType::FileTable, reader, urls as u32);
        self.push(n, Some(table));
        self
    }

    /// A file_table node reading one CSV file split into parts of `rows` rows (10 bytes a
    /// row), as `split` cuts large files.
    pub(crate) fn split_file(mut self, name: &str, table: &str, rows: &[u64]) -> Self {
        let mut before = 0u64;
        let splits = rows
            .iter()
            .map(|r| {
                let part = plexus_core::plan::FilePart::CsvRange {
                    start: before * 10,
                    end: (before + r) * 10,
                    lines_before: before + 1,
                    records_before: before as i64 + 1,
                    rows_before: before,
                    file_len: rows.iter().sum::<u64>() * 10,
                };
                before += r;
                plexus_core::plan::FileSplit { url_idx: 0, part }
            })
            .collect();
        let reader = Reader::File(FileReader {
            urls: vec![format!("/in/{name}.csv")],
            format: FileReaderFormat::Csv(CsvReaderSettings {
                hdr_line_idx: 0,
                first_data_line_idx: 1,
                separator: b',',
                by_header: true,
                compression: plexus_core::plan::Compression::Auto,
            }),
            columns: Vec::new(),
            splits,
        });
        let n = Self::base(name, NodeType::FileTable, reader, rows.len() as u32);
        self.push(n, Some(table));
        self
    }

    fn table_reader(table: &str, batches: u32) -> Reader {
        Reader::Table(TableReader {
            table: table.to_owned(),
            expected_batches_total: batches,
            rowset_size: 1000,
        })
    }

    /// A table_table node (or table_file when `writes` is `None`) reading `reads`.
    pub(crate) fn table(
        mut self,
        name: &str,
        reads: &str,
        writes: Option<&str>,
        batches: u32,
        start: StartPolicy,
    ) -> Self {
        let ty = if writes.is_some() {
            NodeType::TableTable
        } else {
            NodeType::TableFile
        };
        let mut n = Self::base(name, ty, Self::table_reader(reads, batches), batches);
        n.start_policy = start;
        n.dependency_policy = Some(DEFAULT_POLICY.to_owned());
        n.depends_on = vec![self.creator(reads)];
        self.push(n, writes);
        self
    }

    /// A table_lookup_table node reading `reads` and looking up in `lookup`.
    pub(crate) fn lookup(
        mut self,
        name: &str,
        reads: &str,
        lookup: &str,
        writes: &str,
        batches: u32,
        start: StartPolicy,
    ) -> Self {
        let mut n = Self::base(
            name,
            NodeType::TableLookupTable,
            Self::table_reader(reads, batches),
            batches,
        );
        n.start_policy = start;
        n.dependency_policy = Some(DEFAULT_POLICY.to_owned());
        n.depends_on = vec![self.creator(reads), self.creator(lookup)];
        n.lookup = Some(Lookup {
            index_name: format!("idx_{lookup}"),
            table: lookup.to_owned(),
            index: key_index(),
            join_on: vec!["k".to_owned()],
            join_type: JoinType::Inner,
            group: false,
            filter: None,
            idx_read_batch_size: 3000,
            right_lookup_read_batch_size: 300,
        });
        self.push(n, Some(writes));
        self
    }

    /// A distinct_table node reading `reads` into `writes`, with the `rerun_policy: fail` the
    /// spec requires of that type.
    pub(crate) fn distinct(mut self, name: &str, reads: &str, writes: &str, batches: u32) -> Self {
        let mut n = Self::base(
            name,
            NodeType::DistinctTable,
            Self::table_reader(reads, batches),
            batches,
        );
        n.rerun_policy = RerunPolicy::Fail;
        n.dependency_policy = Some(DEFAULT_POLICY.to_owned());
        n.depends_on = vec![self.creator(reads)];
        self.push(n, Some(writes));
        self
    }

    /// Turns the last added node into a custom node without a known processor: one whose
    /// re-run the ledger cannot prove idempotent.
    pub(crate) fn unknown_processor(mut self) -> Self {
        if let Some(n) = self.plan.nodes.last_mut() {
            n.node_type = NodeType::TableCustomTfmTable;
            n.processor = None;
        }
        self
    }

    /// Sets the rerun policy of the last added node.
    pub(crate) fn rerun_fail(mut self) -> Self {
        if let Some(n) = self.plan.nodes.last_mut() {
            n.rerun_policy = RerunPolicy::Fail;
        }
        self
    }

    pub(crate) fn build(self) -> Plan {
        self.plan
    }
}

/// The lookup test's DAG (conformance/lookup/cfg/script_quick.yaml) with its lookup nodes'
/// start policy `manual_if_multi`.
pub(crate) fn lookup_plan(manual_if_multi: StartPolicy) -> Plan {
    let m = manual_if_multi;
    PlanBuilder::new()
        .file("read_orders", "orders", 1)
        .file("read_order_items", "order_items", 1)
        .lookup(
            "order_item_date_inner",
            "orders",
            "order_items",
            "order_item_date_inner",
            10,
            m,
        )
        .lookup(
            "order_item_date_left_outer",
            "orders",
            "order_items",
            "order_item_date_left_outer",
            10,
            m,
        )
        .lookup(
            "order_date_value_grouped_inner",
            "orders",
            "order_items",
            "order_date_value_grouped_inner",
            10,
            m,
        )
        .lookup(
            "order_date_value_grouped_left_outer",
            "orders",
            "order_items",
            "order_date_value_grouped_left_outer",
            10,
            m,
        )
        .table(
            "file_order_item_date_inner",
            "order_item_date_inner",
            None,
            1,
            StartPolicy::Auto,
        )
        .table(
            "file_order_item_date_left_outer",
            "order_item_date_left_outer",
            None,
            1,
            StartPolicy::Auto,
        )
        .table(
            "file_order_date_value_grouped_inner",
            "order_date_value_grouped_inner",
            None,
            1,
            StartPolicy::Auto,
        )
        .table(
            "file_order_date_value_grouped_left_outer",
            "order_date_value_grouped_left_outer",
            None,
            1,
            StartPolicy::Auto,
        )
        .build()
}

/// The tag_and_denormalize test's DAG (conformance/tag_and_denormalize/cfg/script.json) with
/// tag_totals' start policy `totals_start_policy`.
pub(crate) fn tag_plan(totals_start_policy: StartPolicy) -> Plan {
    PlanBuilder::new()
        .file("read_tags", "tags", 1)
        .file("read_products", "products", 1)
        .table(
            "tag_products",
            "products",
            Some("tagged_products"),
            10,
            StartPolicy::Auto,
        )
        .table(
            "file_tagged_products_for_operator_review",
            "tagged_products",
            None,
            1,
            StartPolicy::Auto,
        )
        .lookup(
            "tag_totals",
            "tags",
            "tagged_products",
            "tag_totals",
            10,
            totals_start_policy,
        )
        .table("file_tag_totals", "tag_totals", None, 1, StartPolicy::Auto)
        .build()
}

/// The lookup test's node names in plan order.
pub(crate) const LOOKUP_NODES: [&str; 10] = [
    "read_orders",
    "read_order_items",
    "order_item_date_inner",
    "order_item_date_left_outer",
    "order_date_value_grouped_inner",
    "order_date_value_grouped_left_outer",
    "file_order_item_date_inner",
    "file_order_item_date_left_outer",
    "file_order_date_value_grouped_inner",
    "file_order_date_value_grouped_left_outer",
];
