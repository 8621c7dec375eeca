//! planner: the command-line application around the script compiler (`plexus-script`) and the
//! node (`plexus-node`): `planner run`, `validate`, `serve`, the cluster client, the Capillaries
//! toolbelt and the C API environment.
//!
//! Compiling a script into a [`Plan`] is `plexus-script`'s job, with the node's file access
//! ([`build_plan`]); running it is the node's.
#![warn(missing_docs)]

pub mod capi;
pub mod cluster;
pub mod progress;
pub mod run;
pub mod serve;
pub mod table;
pub mod toolbelt;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use plexus_core::plan::{Plan, Reader, StartPolicy, Writer};

pub use plexus_node::daemon::error_text;
pub use plexus_node::files::SplitSettings;
pub use plexus_node::script_files::{build_plan, build_plan_with};
use plexus_raft::NodeBatchStatus;
pub use plexus_script::PlanError;
use plexus_script::diagram::StatusMark;

/// The one-screen summary `planner validate` prints for a valid plan.
pub fn summary(plan: &Plan, script_url: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{script_url}: valid");
    let mut by_type: BTreeMap<&str, usize> = BTreeMap::new();
    for n in &plan.nodes {
        *by_type.entry(n.node_type.name()).or_default() += 1;
    }
    let types: Vec<String> = by_type.iter().map(|(t, c)| format!("{c} {t}")).collect();
    let _ = writeln!(out, "nodes: {} ({})", plan.nodes.len(), types.join(", "));
    let manual: Vec<&str> = plan
        .nodes
        .iter()
        .filter(|n| n.start_policy == StartPolicy::Manual)
        .map(|n| n.name.as_str())
        .collect();
    if !manual.is_empty() {
        let _ = writeln!(out, "manual nodes: {}", manual.join(", "));
    }
    let _ = writeln!(out, "tables: {}", plan.tables.len());
    for (name, t) in &plan.tables {
        let _ = writeln!(
            out,
            "  {name} ({} fields, by {})",
            t.fields.len(),
            t.created_by
        );
    }
    let idx: Vec<String> = plan
        .tables
        .values()
        .flat_map(|t| t.indexes.iter().map(|(n, d)| format!("{n} = {d}")))
        .collect();
    let _ = writeln!(out, "indexes: {}", idx.len());
    for i in idx {
        let _ = writeln!(out, "  {i}");
    }
    let files: Vec<String> = plan
        .nodes
        .iter()
        .filter_map(|n| match &n.writer {
            Writer::File(w) => Some(w.url_template.clone()),
            Writer::Table(_) => None,
        })
        .collect();
    let inputs: usize = plan
        .nodes
        .iter()
        .map(|n| match &n.reader {
            Reader::File(r) => r.urls.len(),
            Reader::Table(_) => 0,
        })
        .sum();
    let _ = writeln!(out, "input files: {inputs}, output files: {}", files.len());
    let _ = writeln!(out, "DAG depth: {}", plan.depth());
    let batches: u64 = plan.nodes.iter().map(|n| u64::from(n.batches)).sum();
    let _ = writeln!(out, "batches: {batches}");
    if let Ok(h) = plan.content_hash_hex() {
        let _ = writeln!(out, "plan hash: {}", &h[..16]);
    }
    out
}

/// The plan's DOT diagram with every node filled by its status in one run (`planner diagram`
/// and the toolbelt's status diagram).
pub fn dot_with_status(plan: &Plan, statuses: &[(String, NodeBatchStatus)]) -> String {
    let marks: Vec<(String, StatusMark)> = statuses
        .iter()
        .map(|(node, s)| (node.clone(), status_mark(*s)))
        .collect();
    plexus_script::diagram::to_dot_with_status(plan, &marks)
}

/// How a node's status is drawn: green success, red fail, yellow start, grey stopped, white
/// none (Capillaries' get_run_status_diagram).
fn status_mark(status: NodeBatchStatus) -> StatusMark {
    let fill = match status {
        NodeBatchStatus::Success => "#b7e4b0",
        NodeBatchStatus::Fail => "#f4a6a6",
        NodeBatchStatus::Start => "#fff1a8",
        NodeBatchStatus::StopReceived => "#cccccc",
        NodeBatchStatus::None => "#ffffff",
    };
    StatusMark {
        name: status.name().to_owned(),
        fill,
    }
}
