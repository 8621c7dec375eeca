//! What several commands print: a keyspace's histories, and a script or start-node list that
//! does not compile, reported line by line.

use crate::*;

/// `planner history` text from a ledger (a cluster's).
pub(crate) fn history_text(
    ledger: &plexus_raft::Ledger,
    what: HistoryKind,
    keyspace: &str,
    run_id: &[u32],
    node: Option<&str>,
) -> anyhow::Result<String> {
    use plexus_raft::history::{batch_history_csv, node_history_csv, run_history_csv};
    Ok(match what {
        HistoryKind::Runs => run_history_csv(&ledger.run_history(keyspace)?, 0),
        HistoryKind::Nodes => node_history_csv(&ledger.node_history(keyspace, run_id, &[])?, 0),
        HistoryKind::Batches => {
            let (Some(run), Some(node)) = (run_id.first(), node) else {
                anyhow::bail!("history batches needs --run-id and --node");
            };
            batch_history_csv(&ledger.batch_history(keyspace, *run, node)?, 0)
        }
    })
}

/// The plan, or `None` after printing every error of the script.
pub(crate) fn plan_or_report(
    script: &str,
    params: Option<&str>,
) -> Option<plexus_core::plan::Plan> {
    match planner::build_plan(script, params) {
        Ok(plan) => Some(plan),
        Err(err) => {
            report(&err);
            None
        }
    }
}

/// The cleaned start nodes (warnings printed), or `None` after printing why they are unusable.
pub(crate) fn start_or_report(
    plan: &plexus_core::plan::Plan,
    given: &[String],
) -> Option<plexus_script::start_nodes::StartNodes> {
    match plexus_script::start_nodes::resolve(plan, given) {
        Ok(start) => {
            for w in &start.warnings {
                eprintln!("warning: {w}");
            }
            Some(start)
        }
        Err(err) => {
            eprintln!("error: {err}");
            None
        }
    }
}

pub(crate) fn report(err: &planner::PlanError) {
    let lines = err.lines();
    eprintln!(
        "{}: {} error{}",
        err.origin(),
        lines.len(),
        if lines.len() == 1 { "" } else { "s" }
    );
    for line in lines {
        eprintln!("  {line}");
    }
}

/// `--memory-budget`: a size or a percentage of physical memory, at least 256 KiB.
pub(crate) fn parse_budget(text: &str) -> Result<usize, String> {
    let n = plexus_node::exec::parse_size(text)?;
    if n < plexus_node::exec::MIN_BUDGET {
        return Err(format!("{text:?} is below the minimum of 256 KiB"));
    }
    Ok(n)
}
