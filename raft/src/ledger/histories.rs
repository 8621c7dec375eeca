//! Histories: the run, node and batch history rows and node statuses that `planner history`,
//! `planner status` and the console show (spec §9.9).

use crate::error::LedgerError;
use crate::history::{BatchHistoryRow, NodeHistoryRow, RunHistoryRow, RunLifespan};
use crate::status::{NodeBatchStatus, RunStatus};

use super::NOTICE_PREFIX;
use super::state::Ledger;

impl Ledger {
    /// Status of every node of the run's plan, in plan order (the status diagram); nodes the
    /// run does not process are `none`.
    pub fn node_statuses(
        &self,
        keyspace: &str,
        run_id: u32,
    ) -> Result<Vec<(String, NodeBatchStatus)>, LedgerError> {
        let run = self.run(keyspace, run_id)?;
        let plan = self
            .plans
            .get(&run.plan_hash)
            .ok_or(LedgerError::UnknownPlan {
                plan_hash: run.plan_hash,
            })?;
        Ok(plan
            .nodes
            .iter()
            .map(|n| (n.name.clone(), run.node_status(&n.name)))
            .collect())
    }

    /// All run history rows of the keyspace, sorted by time (`planner history runs`).
    pub fn run_history(&self, keyspace: &str) -> Result<Vec<RunHistoryRow>, LedgerError> {
        let ks = self.keyspace(keyspace)?;
        let mut rows: Vec<RunHistoryRow> = ks
            .runs
            .values()
            .flat_map(|r| r.history.iter().cloned())
            .collect();
        rows.sort_by_key(|r| (r.ts_ms, r.seq));
        Ok(rows)
    }

    /// Node history (`planner history nodes`, spec §9.9): per (run, node) the earliest start
    /// and the latest final row, sorted by time, run id, batch index. Empty filters match all;
    /// a run id the keyspace never had is [`LedgerError::UnknownRun`].
    pub fn node_history(
        &self,
        keyspace: &str,
        run_ids: &[u32],
        nodes: &[&str],
    ) -> Result<Vec<NodeHistoryRow>, LedgerError> {
        let ks = self.keyspace(keyspace)?;
        // A run asked for by id that the keyspace never had is an error, not an empty history.
        if let Some(&run_id) = run_ids.iter().find(|id| !ks.runs.contains_key(id)) {
            return Err(LedgerError::UnknownRun {
                keyspace: keyspace.to_owned(),
                run_id,
            });
        }
        let mut rows = Vec::new();
        for run in ks.runs.values() {
            if !run_ids.is_empty() && !run_ids.contains(&run.run_id) {
                continue;
            }
            for (name, nr) in &run.nodes {
                if !nodes.is_empty() && !nodes.contains(&name.as_str()) {
                    continue;
                }
                let key = |r: &&NodeHistoryRow| (r.ts_ms, r.seq);
                let notice = |r: &&NodeHistoryRow| r.comment.starts_with(NOTICE_PREFIX);
                let start = nr
                    .history
                    .iter()
                    .filter(|r| r.status == NodeBatchStatus::Start && !notice(r))
                    .min_by_key(key);
                let fin = nr
                    .history
                    .iter()
                    .filter(|r| r.status.is_final() && !notice(r))
                    .max_by_key(key);
                rows.extend(start.into_iter().chain(fin).cloned());
                rows.extend(nr.history.iter().filter(notice).cloned());
            }
        }
        rows.sort_by_key(|r| (r.ts_ms, r.run_id, r.written_by_batch_idx, r.seq));
        Ok(rows)
    }

    /// All batch history rows of (run, node), sorted by time (`planner history batches`).
    pub fn batch_history(
        &self,
        keyspace: &str,
        run_id: u32,
        node: &str,
    ) -> Result<Vec<BatchHistoryRow>, LedgerError> {
        let run = self.run(keyspace, run_id)?;
        let nr = run
            .nodes
            .get(node)
            .ok_or_else(|| LedgerError::UnknownNode {
                run_id,
                node: node.to_owned(),
            })?;
        let mut rows: Vec<BatchHistoryRow> = nr
            .batches
            .iter()
            .flat_map(|b| b.history.iter().cloned())
            .collect();
        rows.sort_by_key(|r| (r.ts_ms, r.seq));
        Ok(rows)
    }

    /// Start/complete/stop times of every run of the keyspace, by run id (spec §9.9).
    pub fn run_lifespans(&self, keyspace: &str) -> Result<Vec<RunLifespan>, LedgerError> {
        let ks = self.keyspace(keyspace)?;
        Ok(ks
            .runs
            .values()
            .map(|r| {
                let find = |s| {
                    r.history
                        .iter()
                        .filter(|h| h.status == s)
                        .max_by_key(|h| (h.ts_ms, h.seq))
                        .map(|h| (h.ts_ms, h.comment.clone()))
                };
                RunLifespan {
                    run_id: r.run_id,
                    started: find(RunStatus::Start),
                    completed: find(RunStatus::Complete),
                    stopped: find(RunStatus::Stop),
                    final_status: r.status(),
                }
            })
            .collect())
    }
}
