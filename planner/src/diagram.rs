//! Graphviz DOT rendering of a plan's DAG (`planner diagram`).

use std::fmt::Write as _;

use plexus_core::plan::{Plan, Reader, StartPolicy, Writer};
use plexus_raft::NodeBatchStatus;

/// Renders the DAG as a DOT digraph: one box per script node labelled with its name, type and
/// the table or file it writes; edges carry the table read (lookups dashed); manual nodes are
/// drawn with a bold double border and marked "(manual)".
pub fn to_dot(plan: &Plan) -> String {
    render(plan, None)
}

/// The same graph with every node filled by its status in one run (Capillaries'
/// get_run_status_diagram): green success, red fail, yellow start, grey stopped, white none.
pub fn to_dot_with_status(plan: &Plan, statuses: &[(String, NodeBatchStatus)]) -> String {
    render(plan, Some(statuses))
}

fn status_color(s: NodeBatchStatus) -> &'static str {
    match s {
        NodeBatchStatus::Success => "#b7e4b0",
        NodeBatchStatus::Fail => "#f4a6a6",
        NodeBatchStatus::Start => "#fff1a8",
        NodeBatchStatus::StopReceived => "#cccccc",
        NodeBatchStatus::None => "#ffffff",
    }
}

fn render(plan: &Plan, statuses: Option<&[(String, NodeBatchStatus)]>) -> String {
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
                .map_or(NodeBatchStatus::None, |(_, s)| *s);
            label.push_str(&format!("\\n[{}]", status.name()));
            let _ = write!(extra, ", fillcolor=\"{}\"", status_color(status));
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
