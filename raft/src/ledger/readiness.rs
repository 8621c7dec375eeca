//! Readiness: the dependency check of a node in a run (spec §9.6), the nogo batches it fails,
//! and which batches are claimable now, with the rows their dependencies wrote.

use plexus_core::plan::{DependencyCmd, Plan, PlanNode, Reader};
use plexus_core::task::{BatchId, BatchTask};

use crate::command::Event;
use crate::dependency_policy::{NodeRunEvent, ResolvedPolicy};
use crate::error::LedgerError;
use crate::status::{NodeBatchStatus, RunStatus};

use super::state::{Ledger, Outcome, Readiness, Run};

impl Ledger {
    /// Fails the unclaimed batches of every node whose dependency check says `nogo`, until
    /// nothing changes: a failure can complete a run and so turn other checks into `nogo`.
    pub(super) fn settle(&mut self, keyspace: &str, ts_ms: i64, ev: &mut Vec<Event>) {
        loop {
            // Before anything may claim them, and before returning: a node ready now has its
            // cut fixed in the same command that made it ready.
            self.cut_ready(keyspace);
            let Some(ks) = self.keyspaces.get(keyspace) else {
                return;
            };
            let mut nogo: Vec<(u32, String, String)> = Vec::new();
            for run in ks.runs.values() {
                if run.status() != RunStatus::Start {
                    continue;
                }
                for name in &run.processed {
                    let pending = run
                        .nodes
                        .get(name)
                        .is_some_and(|nr| !nr.unclaimed.is_empty());
                    if !pending {
                        continue;
                    }
                    if let Ok(Readiness::Nogo { reason }) =
                        self.readiness(keyspace, run.run_id, name)
                    {
                        nogo.push((run.run_id, name.clone(), reason));
                    }
                }
            }
            if nogo.is_empty() {
                return;
            }
            let Some(ks) = self.keyspaces.get_mut(keyspace) else {
                return;
            };
            for (run_id, node, reason) in nogo {
                let idxs: Vec<u32> = ks
                    .runs
                    .get(&run_id)
                    .and_then(|r| r.nodes.get(&node))
                    .map(|nr| nr.unclaimed.iter().copied().collect())
                    .unwrap_or_default();
                for unit in idxs {
                    let Some((batch_idx, part)) = ks
                        .runs
                        .get(&run_id)
                        .and_then(|r| r.nodes.get(&node))
                        .map(|nr| nr.unit_id(unit))
                    else {
                        continue;
                    };
                    let id = BatchId {
                        keyspace: keyspace.to_owned(),
                        run_id,
                        node: node.clone(),
                        batch_idx,
                        part,
                    };
                    ks.finish_batch(
                        &id,
                        NodeBatchStatus::Fail,
                        format!("nogo: {reason}"),
                        Outcome {
                            error: Some(format!("nogo: {reason}")),
                            ..Outcome::default()
                        },
                        ts_ms,
                        ev,
                    );
                }
            }
        }
    }

    /// The dependency check of `node` in a run (spec §9.6), as of the current state.
    pub fn readiness(
        &self,
        keyspace: &str,
        run_id: u32,
        node: &str,
    ) -> Result<Readiness, LedgerError> {
        let ks = self.keyspace(keyspace)?;
        let run = self.run(keyspace, run_id)?;
        let plan = self
            .plans
            .get(&run.plan_hash)
            .ok_or(LedgerError::UnknownPlan {
                plan_hash: run.plan_hash,
            })?;
        let pn = plan.node(node).ok_or_else(|| LedgerError::UnknownNode {
            run_id,
            node: node.to_owned(),
        })?;
        let (reader_dep, lookup_dep) = match dependencies(plan, pn) {
            // A node without a table reader (file_table) is always go.
            None => {
                return Ok(Readiness::Go {
                    reader_run: None,
                    lookup_run: None,
                });
            }
            Some(d) => d,
        };
        let policy_name = pn
            .dependency_policy
            .clone()
            .unwrap_or_else(|| plan.default_policy.clone());
        let owned;
        let policy = match self.policies.0.get(&(run.plan_hash, policy_name.clone())) {
            Some(p) => p,
            None => {
                let src =
                    plan.policies
                        .get(&policy_name)
                        .ok_or_else(|| LedgerError::InvalidPlan {
                            reason: format!(
                                "node {node:?}: unknown dependency policy {policy_name:?}"
                            ),
                        })?;
                owned = ResolvedPolicy::resolve(src).map_err(|e| LedgerError::InvalidPlan {
                    reason: format!("dependency policy {policy_name:?}: {e}"),
                })?;
                &owned
            }
        };

        let decide = |dep: &str| -> Result<(DependencyCmd, u32), String> {
            let events: Vec<NodeRunEvent> = ks
                .runs
                .values()
                .filter(|r| r.affected_nodes.iter().any(|a| a == dep))
                .map(|r| NodeRunEvent {
                    run_id: r.run_id,
                    run_is_current: r.run_id == run_id,
                    run_status: r.status(),
                    node_status: r.node_status(dep),
                })
                .collect();
            if events.is_empty() {
                // Quirk (spec §9.4 step 4, §14 #42): Capillaries drops the message without a
                // status and the run never completes; we fail the batch instead.
                return Err(format!(
                    "dependency node {dep:?} was never part of any run in keyspace {keyspace:?}"
                ));
            }
            match policy.decide(&events) {
                Ok(Some(m)) => Ok((m.cmd, m.run_id)),
                Ok(None) => Ok((DependencyCmd::Wait, 0)),
                Err(e) => Err(format!("dependency policy {policy_name:?}: {e}")),
            }
        };

        let mut verdicts = vec![(reader_dep, decide(reader_dep))];
        if let Some(l) = lookup_dep {
            verdicts.push((l, decide(l)));
        }
        // Combine: any nogo → nogo, else any wait → wait, else go.
        let mut wait = false;
        for (dep, v) in &verdicts {
            match v {
                Err(reason) => {
                    return Ok(Readiness::Nogo {
                        reason: reason.clone(),
                    });
                }
                Ok((DependencyCmd::Nogo, r)) => {
                    // Name the dependency's state, so the reason needs no batch history.
                    let state = ks.runs.get(r).map_or_else(String::new, |dr| {
                        format!(
                            " (node status {}, run status {})",
                            dr.node_status(dep),
                            dr.status()
                        )
                    });
                    return Ok(Readiness::Nogo {
                        reason: format!("dependency {dep:?} in run {r}{state}"),
                    });
                }
                Ok((DependencyCmd::Wait, _)) => wait = true,
                Ok((DependencyCmd::Go, _)) => {}
            }
        }
        if wait {
            return Ok(Readiness::Wait);
        }
        let run_of = |i: usize| {
            verdicts
                .get(i)
                .and_then(|(_, v)| v.as_ref().ok())
                .map(|v| v.1)
        };
        Ok(Readiness::Go {
            reader_run: run_of(0),
            lookup_run: lookup_dep.and_then(|_| run_of(1)),
        })
    }

    /// Rows `node` wrote in run `run_id`, summed over its batches' successful attempts; `None`
    /// unless every batch succeeded with a count. Summed once the node is final (its batches
    /// change no more), at every call before.
    pub(super) fn rows_written(&self, keyspace: &str, run_id: u32, node: &str) -> Option<u64> {
        let nr = self.run(keyspace, run_id).ok()?.nodes.get(node)?;
        let sum = || {
            nr.batches.iter().try_fold(0u64, |sum, b| {
                let last = b
                    .history
                    .iter()
                    .rev()
                    .find(|h| h.status == NodeBatchStatus::Success)?;
                Some(sum + last.rows_out?)
            })
        };
        if nr.status.is_final() {
            nr.written.get_or_init(sum)
        } else {
            sum()
        }
    }

    /// The rows of the reader and the lookup table a batch of `node` reads, from what their
    /// creator nodes wrote in `reader_run` and `lookup_run` ([`BatchTask::reader_rows`]).
    pub(super) fn input_rows(
        &self,
        keyspace: &str,
        run: &Run,
        node: &str,
        reader_run: Option<u32>,
        lookup_run: Option<u32>,
    ) -> (Option<u64>, Option<u64>) {
        let Some((reader, lookup)) = self
            .plans
            .get(&run.plan_hash)
            .and_then(|p| dependencies(p, p.node(node)?))
        else {
            return (None, None);
        };
        let rows = |dep: Option<&str>, run: Option<u32>| self.rows_written(keyspace, run?, dep?);
        (rows(Some(reader), reader_run), rows(lookup, lookup_run))
    }

    /// Every claimable batch of every active run: keyspace, run id, node (plan order), batch.
    pub fn ready_tasks(&self) -> Vec<BatchTask> {
        let mut out = Vec::new();
        for (name, ks) in &self.keyspaces {
            for run_id in ks.runs.keys() {
                if let Ok(t) = self.ready_tasks_for(name, *run_id) {
                    out.extend(t);
                }
            }
        }
        out
    }

    /// The claimable batches of one run, in node (plan) order then batch order.
    pub fn ready_tasks_for(
        &self,
        keyspace: &str,
        run_id: u32,
    ) -> Result<Vec<BatchTask>, LedgerError> {
        let run = self.run(keyspace, run_id)?;
        let mut out = Vec::new();
        if run.status() != RunStatus::Start {
            return Ok(out);
        }
        for name in &run.processed {
            let Some(nr) = run.nodes.get(name) else {
                continue;
            };
            if nr.unclaimed.is_empty() {
                continue;
            }
            let Readiness::Go {
                reader_run,
                lookup_run,
            } = self.readiness(keyspace, run_id, name)?
            else {
                continue;
            };
            let (reader_rows, lookup_rows) =
                self.input_rows(keyspace, run, name, reader_run, lookup_run);
            for &u in &nr.unclaimed {
                let (i, part) = nr.unit_id(u);
                out.push(BatchTask {
                    plan_hash: run.plan_hash,
                    keyspace: keyspace.to_owned(),
                    keyspace_incarnation: self.incarnation(keyspace),
                    run_id,
                    node: name.clone(),
                    batch_idx: i,
                    batches_total: nr.batches_total(),
                    reader_run,
                    lookup_run,
                    reader_rows,
                    lookup_rows,
                    trace: None,
                    part,
                });
            }
        }
        Ok(out)
    }

    /// How many batches of the run are in the pool, in every node whose dependencies say go.
    pub fn claimable(&self, keyspace: &str, run_id: u32) -> usize {
        let Ok(run) = self.run(keyspace, run_id) else {
            return 0;
        };
        if run.status() != RunStatus::Start {
            return 0;
        }
        run.processed
            .iter()
            .filter_map(|n| run.nodes.get(n).map(|nr| (n, nr)))
            .filter(|(n, nr)| {
                !nr.unclaimed.is_empty()
                    && matches!(
                        self.readiness(keyspace, run_id, n),
                        Ok(Readiness::Go { .. })
                    )
            })
            .map(|(_, nr)| nr.unclaimed.len())
            .sum()
    }

    /// Whether any batch of the run is claimed and not yet final (someone is working on it).
    pub fn has_running(&self, keyspace: &str, run_id: u32) -> bool {
        self.run(keyspace, run_id).is_ok_and(|r| {
            r.nodes
                .values()
                .any(|nr| nr.unfinished as usize > nr.unclaimed.len())
        })
    }
}

/// The creators of the reader table and of the lookup table; `None` for file readers.
pub(super) fn dependencies<'a>(
    plan: &'a Plan,
    node: &PlanNode,
) -> Option<(&'a str, Option<&'a str>)> {
    let Reader::Table(t) = &node.reader else {
        return None;
    };
    let creator = |table: &str| plan.tables.get(table).map(|s| s.created_by.as_str());
    // Plans are validated on submission, so both tables exist.
    let reader = creator(&t.table)?;
    let lookup = node.lookup.as_ref().and_then(|l| creator(&l.table));
    Some((reader, lookup))
}
