//! Graphviz DOT rendering of a plan's DAG (`planner diagram`).

use std::fmt::Write as _;

use plexus_core::plan::{Plan, Reader, StartPolicy, Writer};

/// Renders the DAG as a DOT digraph: one box per script node labelled with its name, type and
/// the table or file it writes; edges carry the table read (lookups dashed); manual nodes are
/// drawn with a bold double border and marked "(manual)".
pub fn to_dot(plan: &Plan) -> String {
    render(plan, None)
}

/// How a node is marked in a run's diagram: its status name and fill colour (the run's status
/// type is the ledger's, which this crate does not know).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusMark {
    /// The status name shown under the node, e.g. `success`.
    pub name: String,
    /// The fill colour, e.g. `#b7e4b0`.
    pub fill: &'static str,
}

/// The mark of a node the run has no status for.
fn no_status() -> StatusMark {
    StatusMark {
        name: "none".to_owned(),
        fill: "#ffffff",
    }
}

/// The same graph with every node filled by its status in one run (Capillaries'
/// get_run_status_diagram); nodes without a mark are white and marked "none".
pub fn to_dot_with_status(plan: &Plan, statuses: &[(String, StatusMark)]) -> String {
    render(plan, Some(statuses))
}

fn render(plan: &Plan, statuses: Option<&[(String, StatusMark)]>) -> String {
    let mut out = String::new();
    out.push_str("digraph plexus {\n");
    out.push_str("  rankdir=TB;\n");
    out.push_str("  node [shape=box, style=\"rounded,filled\", fillcolor=\"#f4f6fb\", fontname=\"Helvetica\"];\n");
    out.push_str("  edge [fontname=\"Helvetica\", fontsize=10];\n");
    for n in &plan.nodes {
        let target = match &n.writer {
            Writer::Table(w) => format!("table {}", w.name),
            Writer::File(w) => format!("file {}", w.url_template),
        };
        let manual = n.start_policy == StartPolicy::Manual;
        let mut label = format!(
            "{}\\n{}\\n{}",
            esc(&n.name),
            n.node_type.name(),
            esc(&target)
        );
        if manual {
            label.push_str("\\n(manual)");
        }
        let mut extra = String::new();
        if manual {
            extra.push_str(", peripheries=2, penwidth=2, fillcolor=\"#fff4d6\"");
        }
        if let Some(st) = statuses {
            let status = st
                .iter()
                .find(|(n2, _)| n2 == &n.name)
                .map_or_else(no_status, |(_, s)| s.clone());
            label.push_str(&format!("\\n[{}]", status.name));
            let _ = write!(extra, ", fillcolor=\"{}\"", status.fill);
        }
        let _ = writeln!(out, "  \"{}\" [label=\"{label}\"{extra}];", esc(&n.name));
    }
    for n in &plan.nodes {
        if let Reader::Table(r) = &n.reader
            && let Some(t) = plan.tables.get(&r.table)
        {
            let _ = writeln!(
                out,
                "  \"{}\" -> \"{}\" [label=\"{}\"];",
                esc(&t.created_by),
                esc(&n.name),
                esc(&r.table)
            );
        }
        if let Some(l) = &n.lookup
            && let Some(t) = plan.tables.get(&l.table)
        {
            let _ = writeln!(
                out,
                "  \"{}\" -> \"{}\" [label=\"{}\", style=dashed];",
                esc(&t.created_by),
                esc(&n.name),
                esc(&l.index_name)
            );
        }
    }
    out.push_str("}\n");
    out
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}
