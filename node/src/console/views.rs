//! The JSON views the console builds from a keyspace's [`Ledger`]: a run with its node cells,
//! a run's node history, a node's batches, and a table's columns. Kept apart from the router
//! so both the API and the webapi read the same shapes.

use plexus_raft::{Ledger, NodeBatchStatus, Run, RunStatus};
use serde_json::{Value, json};

use super::{ConsoleError, Missing, not_found};

/// A run with one cell per processed node.
pub(super) fn run_json(ledger: &Ledger, r: &Run) -> Value {
    let at = |s: RunStatus| {
        r.history
            .iter()
            .filter(|h| h.status == s)
            .max_by_key(|h| (h.ts_ms, h.seq))
    };
    let mut cells = serde_json::Map::new();
    for name in &r.processed {
        let Some(nr) = r.nodes.get(name) else {
            continue;
        };
        // Per batch, not per part: a split batch is done when all its parts are, failed or
        // running when one of them is.
        let per_batch = nr.batches.chunks(nr.parts_per_batch() as usize);
        let count = |s: NodeBatchStatus| {
            per_batch
                .clone()
                .filter(|parts| match s {
                    NodeBatchStatus::Success => parts.iter().all(|b| b.status == s),
                    _ => parts.iter().any(|b| b.status == s),
                })
                .count()
        };
        let started = nr
            .history
            .iter()
            .filter(|h| h.status == NodeBatchStatus::Start)
            .map(|h| h.ts_ms)
            .min();
        let finished = nr
            .history
            .iter()
            .filter(|h| h.status.is_final())
            .map(|h| h.ts_ms)
            .max();
        cells.insert(
            name.clone(),
            json!({
                "status": nr.status.name(),
                "batches_total": nr.batches_total(),
                "done": count(NodeBatchStatus::Success),
                "failed": count(NodeBatchStatus::Fail),
                "running": count(NodeBatchStatus::Start),
                "started_ms": started,
                "finished_ms": finished.filter(|_| nr.status.is_final()),
            }),
        );
    }
    let plan_hash = ledger.plan(&r.plan_hash).map(|_| r.plan_hash.to_string());
    json!({
        "run_id": r.run_id,
        "status": r.status().name(),
        // What the badge shows: `status` is Capillaries' raw value, which calls a run with
        // failed nodes "complete".
        "outcome": r.outcome().word(),
        "outcome_text": r.outcome().to_string(),
        "description": r.description,
        "start_nodes": r.start_nodes,
        "affected_nodes": r.affected_nodes,
        "only_start_nodes": r.only_start_nodes,
        "plan_hash": plan_hash,
        "started_ms": at(RunStatus::Start).map(|h| h.ts_ms),
        "completed_ms": at(RunStatus::Complete).map(|h| h.ts_ms),
        "stopped_ms": at(RunStatus::Stop).map(|h| h.ts_ms),
        "stopped_comment": at(RunStatus::Stop).map(|h| h.comment.clone()),
        "nodes": cells,
    })
}

pub(super) fn node_history_json(
    ledger: &Ledger,
    ks: &str,
    run: u32,
) -> Result<Value, ConsoleError> {
    let r = ledger.run(ks, run).map_err(not_found)?;
    let rows = ledger
        .node_history(ks, &[run], &[])
        .map_err(not_found)?
        .into_iter()
        .map(|h| {
            json!({
                "ts_ms": h.ts_ms,
                "node": h.node,
                "batch_idx": h.written_by_batch_idx,
                "status": h.status.name(),
                "comment": h.comment,
            })
        })
        .collect::<Vec<_>>();
    Ok(json!({ "run": run_json(ledger, r), "history": rows }))
}

pub(super) fn batches_json(
    ledger: &Ledger,
    ks: &str,
    run: u32,
    node: &str,
) -> Result<Value, ConsoleError> {
    let r = ledger.run(ks, run).map_err(not_found)?;
    let Some(nr) = r.nodes.get(node) else {
        let known = ledger
            .plan(&r.plan_hash)
            .is_some_and(|p| p.node(node).is_some());
        let (keyspace, node) = (ks.to_owned(), node.to_owned());
        return Err(if known {
            Missing::NodeNotRun {
                keyspace,
                run,
                node,
            }
        } else {
            Missing::Node {
                keyspace,
                run,
                node,
            }
        }
        .into());
    };
    let node_type = ledger
        .plan(&r.plan_hash)
        .and_then(|p| p.node(node))
        .map(|n| n.node_type.name());
    let batches: Vec<Value> = nr
        .batches
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let last_start = b
                .history
                .iter()
                .filter(|h| h.status == NodeBatchStatus::Start)
                .max_by_key(|h| (h.ts_ms, h.seq));
            let fin = b
                .history
                .iter()
                .filter(|h| h.status.is_final())
                .max_by_key(|h| (h.ts_ms, h.seq));
            let instance = b
                .claim
                .as_ref()
                .map(|c| c.worker.clone())
                .or_else(|| last_start.map(|h| h.instance.clone()))
                .unwrap_or_default();
            json!({
                "batch_idx": i,
                "status": b.status.name(),
                "attempts": b.attempts,
                "instance": instance,
                "started_ms": last_start.map(|h| h.ts_ms),
                "finished_ms": fin.map(|h| h.ts_ms),
                "elapsed_ms": fin.and_then(|h| h.elapsed_ms),
                "rows_in": fin.and_then(|h| h.rows_in),
                "rows_out": fin.and_then(|h| h.rows_out),
                "error": fin.and_then(|h| h.error.clone()),
                "comment": b.history.last().map(|h| h.comment.clone()).unwrap_or_default(),
            })
        })
        .collect();
    let history: Vec<Value> = ledger
        .batch_history(ks, run, node)
        .map_err(not_found)?
        .into_iter()
        .map(|h| {
            json!({
                "ts_ms": h.ts_ms,
                "batch_idx": h.batch_idx,
                "batches_total": h.batches_total,
                "status": h.status.name(),
                "instance": h.instance,
                "first_token": h.first_token,
                "last_token": h.last_token,
                "rows_in": h.rows_in,
                "rows_out": h.rows_out,
                "elapsed_ms": h.elapsed_ms,
                "error": h.error,
                "comment": h.comment,
            })
        })
        .collect();
    Ok(json!({
        "keyspace": ks,
        "run_id": run,
        "run_status": r.status().name(),
        "node": node,
        "node_type": node_type,
        "status": nr.status.name(),
        "batches_total": nr.batches_total(),
        "batches": batches,
        "history": history,
    }))
}

/// `[{"name", "type"}]` of a table's fields, `rowid` first.
pub(super) fn columns_json(schema: &plexus_core::plan::TableSchema) -> Value {
    let mut cols = vec![json!({ "name": "rowid", "type": "int" })];
    cols.extend(
        crate::tables::display_order(schema)
            .into_iter()
            .map(|i| &schema.fields[i])
            .map(|f| json!({ "name": f.name, "type": f.ty.to_string() })),
    );
    Value::Array(cols)
}
