//! The Plexus side of a benchmark: `plexus-bench exec-plexus` runs a script in-process with
//! the planner library (what `planner run` does) and is spawned as the measured child; the
//! harness then reads the run's node history for per-stage timings.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result, anyhow};
use serde_json::{Value, json};

/// Options of the hidden `exec-plexus` subcommand.
#[derive(Clone, Debug, clap::Args)]
pub struct ExecArgs {
    /// Script file.
    pub script: String,
    /// Params file.
    #[arg(long)]
    pub params: String,
    /// Keyspace of the run.
    #[arg(long)]
    pub keyspace: String,
    /// Data directory of the embedded store.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Executor threads.
    #[arg(long)]
    pub threads: usize,
    /// Python interpreter for py_calc nodes.
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Where to write the run report as JSON.
    #[arg(long)]
    pub report_json: PathBuf,
    /// Memory budget of Plexus's executors (`planner run --memory-budget`), e.g. `64MiB`;
    /// default: a fraction of physical memory.
    #[arg(long, env = "PLEXUS_MEMORY_BUDGET", value_parser = plexus_node::exec::parse_size)]
    pub memory_budget: Option<usize>,
}

/// Runs the script once and writes the report; exits 1 when a node failed.
pub fn exec(a: &ExecArgs) -> Result<ExitCode> {
    let started = std::time::Instant::now();
    let plan = planner::build_plan(&a.script, Some(&a.params))
        .map_err(|e| anyhow!("{}: {}", e.origin(), e.lines().join("; ")))?;
    // Building the plan includes the scan that splits large inputs: part of the run's cost.
    eprintln!(
        "plan built in {:.3} s (input split scan included)",
        started.elapsed().as_secs_f64()
    );
    let settings = planner::run::RunSettings {
        params: Some(a.params.clone()),
        keyspace: Some(a.keyspace.clone()),
        threads: Some(a.threads),
        memory_budget: a.memory_budget,
        python: a.python.clone(),
        ..planner::run::RunSettings::new(a.script.clone(), a.data_dir.clone())
    };
    let progress = planner::progress::RunProgress::new();
    let report = planner::run::run(&plan, &settings, &progress)?;
    print!("{}", planner::progress::report_table(&report));
    let nodes: Vec<Value> = report
        .nodes
        .iter()
        .map(|n| {
            json!({
                "name": n.name,
                "status": n.status.map_or("none", |s| s.name()),
                "batches": n.batches,
                "rows_in": n.rows_in,
                "rows_out": n.rows_out,
                "busy_ms": n.busy_ms,
                "errors": n.errors,
            })
        })
        .collect();
    let failed = report.failed().count();
    let doc = json!({
        "run_id": report.run_id,
        "status": report.status.name(),
        "elapsed_ms": report.elapsed_ms,
        "failed_nodes": failed,
        "nodes": nodes,
    });
    fs::write(&a.report_json, serde_json::to_string_pretty(&doc)?)
        .with_context(|| format!("cannot write {}", a.report_json.display()))?;
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// One script node of the finished run.
#[derive(Clone, Debug)]
pub struct NodeRun {
    /// Node name.
    pub name: String,
    /// Stage the node belongs to (ingest, lookups, py_calc, tag, file output, other).
    pub stage: &'static str,
    /// Final status name.
    pub status: String,
    /// Rows written.
    pub rows_out: u64,
    /// Batches of the node (a split input file has several).
    pub batches: u64,
    /// Sum of batch processing times, ms.
    pub busy_ms: u64,
    /// First start to last finish of the node's batches, ms since the epoch.
    pub span_ms: Option<(i64, i64)>,
    /// Error texts of failed batches.
    pub errors: Vec<String>,
}

/// Per-stage totals over the nodes of a run.
#[derive(Clone, Debug)]
pub struct Stage {
    /// Stage name.
    pub name: &'static str,
    /// Nodes in it.
    pub nodes: usize,
    /// Sum of batch busy times, ms (can exceed wall time with several threads).
    pub busy_ms: u64,
    /// Wall time from the stage's first node start to its last node end, ms.
    pub wall_ms: Option<i64>,
    /// Rows written by the stage's nodes.
    pub rows_out: u64,
}

/// What one Plexus run reported.
#[derive(Clone, Debug)]
pub struct PlexusRun {
    /// Run status name (`complete` on success).
    pub status: String,
    /// Engine-reported elapsed time, ms.
    pub elapsed_ms: u64,
    /// Nodes in plan order.
    pub nodes: Vec<NodeRun>,
}

impl PlexusRun {
    /// Nodes grouped by stage, in pipeline order.
    pub fn stages(&self) -> Vec<Stage> {
        let mut out: Vec<Stage> = Vec::new();
        let mut spans: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
        for n in &self.nodes {
            let pos = out
                .iter()
                .position(|s| s.name == n.stage)
                .unwrap_or_else(|| {
                    out.push(Stage {
                        name: n.stage,
                        nodes: 0,
                        busy_ms: 0,
                        wall_ms: None,
                        rows_out: 0,
                    });
                    out.len() - 1
                });
            let s = &mut out[pos];
            s.nodes += 1;
            s.busy_ms += n.busy_ms;
            s.rows_out += n.rows_out;
            if let Some((a, b)) = n.span_ms {
                let e = spans.entry(n.stage).or_insert((a, b));
                *e = (e.0.min(a), e.1.max(b));
            }
        }
        for s in &mut out {
            s.wall_ms = spans.get(s.name).map(|(a, b)| b - a);
        }
        out
    }
}

/// The stage of a compiled node.
fn stage_of(node: &plexus_core::plan::PlanNode) -> &'static str {
    match node.node_type.name() {
        "file_table" => "ingest",
        "table_lookup_table" => "lookups",
        "table_file" => "file output",
        "table_custom_tfm_table" => match node.processor {
            Some(plexus_core::plan::Processor::PyCalc(_)) => "py_calc",
            _ => "tag",
        },
        _ => "other",
    }
}

/// Reads the JSON report of `exec-plexus` and the node history of its run.
pub fn collect(
    script: &str,
    params: &str,
    report_json: &Path,
    data_dir: &Path,
    keyspace: &str,
) -> Result<PlexusRun> {
    let text = fs::read_to_string(report_json)
        .with_context(|| format!("cannot read {}", report_json.display()))?;
    let doc: Value = serde_json::from_str(&text).context("bad exec-plexus report")?;
    // Only node types are needed here: no need to scan the inputs for a split again.
    let plan = planner::build_plan_with(script, Some(params), &planner::SplitSettings::off())
        .map_err(|e| anyhow!("{}: {}", e.origin(), e.lines().join("; ")))?;
    let stages: BTreeMap<&str, &'static str> = plan
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), stage_of(n)))
        .collect();
    let run_id = doc["run_id"]
        .as_u64()
        .and_then(|r| u32::try_from(r).ok())
        .context("report has no run_id")?;
    let target = planner::run::StoreTarget {
        data_dir: data_dir.to_path_buf(),
        ..planner::run::StoreTarget::default()
    };
    let history = planner::run::node_history(&target, keyspace, &[run_id])?;
    let spans = node_spans(&history);
    let nodes = doc["nodes"]
        .as_array()
        .context("report has no nodes")?
        .iter()
        .map(|n| {
            let name = n["name"].as_str().unwrap_or_default().to_string();
            NodeRun {
                stage: stages.get(name.as_str()).copied().unwrap_or("other"),
                status: n["status"].as_str().unwrap_or_default().to_string(),
                rows_out: n["rows_out"].as_u64().unwrap_or(0),
                batches: n["batches"].as_u64().unwrap_or(0),
                busy_ms: n["busy_ms"].as_u64().unwrap_or(0),
                span_ms: spans.get(&name).copied(),
                errors: n["errors"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|e| e.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default(),
                name,
            }
        })
        .collect();
    Ok(PlexusRun {
        status: doc["status"].as_str().unwrap_or_default().to_string(),
        elapsed_ms: doc["elapsed_ms"].as_u64().unwrap_or(0),
        nodes,
    })
}

/// Node name -> (first start, last success/fail) from the node history CSV
/// (`ts,run_id,script_node,written_by_batch_idx,status,comment`; status 1 = start).
fn node_spans(csv: &str) -> BTreeMap<String, (i64, i64)> {
    let mut out: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.splitn(6, ',').collect();
        let (Some(ts), Some(node)) = (f.first().and_then(|t| parse_ts_ms(t)), f.get(2)) else {
            continue;
        };
        let e = out.entry((*node).to_string()).or_insert((ts, ts));
        *e = (e.0.min(ts), e.1.max(ts));
    }
    out
}

/// Milliseconds since the epoch of history text such as `2026-11-30T07:40:57.611+0000`.
fn parse_ts_ms(s: &str) -> Option<i64> {
    let dt = chrono::DateTime::parse_from_str(s.trim(), "%Y-%m-%dT%H:%M:%S%.f%z").ok()?;
    Some(dt.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_from_history() {
        let csv = "ts,run_id,script_node,written_by_batch_idx,status,comment\n\
                   2024-01-01T00:00:01.000+0000,1,a,0,1,\n\
                   2024-01-01T00:00:03.500+0000,1,a,0,2,\n";
        let s = node_spans(csv);
        assert_eq!(s.get("a"), Some(&(1_704_067_201_000, 1_704_067_203_500)));
    }
}
