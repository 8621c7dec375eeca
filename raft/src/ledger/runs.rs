//! Runs: submitting plans, starting, stopping and dropping runs and keyspaces (spec §9.2,
//! §9.8), and the checks a plan must pass before the ledger relies on it.

use std::collections::{BTreeMap, BTreeSet};

use plexus_core::plan::{Plan, Reader};
use plexus_core::task::{BatchId, Slices};

use crate::affected::affected_nodes;
use crate::command::{Event, PlanHash};
use crate::dependency_policy::ResolvedPolicy;
use crate::error::LedgerError;
use crate::history::RunHistoryRow;
use crate::status::{NodeBatchStatus, RunOutcome, RunStatus};

use super::state::{Keyspace, Ledger, NodeRun, Outcome, Run};

/// What a [`Command::StartRun`](crate::Command::StartRun) asks for, besides its time.
pub(super) struct RunRequest<'a> {
    /// Keyspace (created on first use).
    pub(super) keyspace: &'a str,
    /// A submitted plan.
    pub(super) plan_hash: PlanHash,
    /// Start nodes as given.
    pub(super) start_nodes: &'a [String],
    /// Free text.
    pub(super) description: String,
    /// `exec_node` semantics.
    pub(super) only_start_nodes: bool,
}

impl Ledger {
    pub(super) fn submit_plan(
        &mut self,
        plan: Plan,
        ev: &mut Vec<Event>,
    ) -> Result<(), LedgerError> {
        let hash = plan
            .content_hash()
            .map_err(|e| LedgerError::PlanEncode {
                reason: e.to_string(),
            })
            .map(PlanHash)?;
        if self.plans.contains_key(&hash) {
            ev.push(Event::PlanSubmitted {
                plan_hash: hash,
                already_known: true,
            });
            return Ok(());
        }
        validate_plan(&plan)?;
        self.plans.insert(hash, plan);
        self.cache_policies(hash);
        ev.push(Event::PlanSubmitted {
            plan_hash: hash,
            already_known: false,
        });
        Ok(())
    }

    pub(super) fn start_run(
        &mut self,
        req: RunRequest<'_>,
        ts_ms: i64,
        ev: &mut Vec<Event>,
    ) -> Result<(), LedgerError> {
        let RunRequest {
            keyspace,
            plan_hash,
            start_nodes,
            description,
            only_start_nodes,
        } = req;
        if keyspace.is_empty() {
            return Err(LedgerError::InvalidKeyspace {
                keyspace: keyspace.to_owned(),
                reason: "empty".to_owned(),
            });
        }
        if keyspace.starts_with("system") {
            return Err(LedgerError::InvalidKeyspace {
                keyspace: keyspace.to_owned(),
                reason: "must not start with \"system\"".to_owned(),
            });
        }
        let plan = self
            .plans
            .get(&plan_hash)
            .ok_or(LedgerError::UnknownPlan { plan_hash })?;
        if start_nodes.is_empty() {
            return Err(LedgerError::NoStartNodes);
        }
        let missing: Vec<String> = start_nodes
            .iter()
            .filter(|s| plan.node(s).is_none())
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(LedgerError::UnknownStartNodes { missing });
        }
        let last_run = self.keyspaces.get(keyspace).map_or(0, |k| k.last_run);
        let start_set: BTreeSet<&str> = start_nodes.iter().map(String::as_str).collect();
        let start: Vec<String> = plan
            .nodes
            .iter()
            .filter(|n| start_set.contains(n.name.as_str()))
            .map(|n| n.name.clone())
            .collect();
        // A client whose peer died after committing, but before answering, sends the same
        // command to the next peer: the same run, not a second one.
        if let Some(prev) = self
            .keyspaces
            .get(keyspace)
            .and_then(|k| k.runs.get(&last_run))
            && prev.plan_hash == plan_hash
            && prev.start_nodes == start
            && prev.description == description
            && prev.only_start_nodes == only_start_nodes
            && prev.history.first().is_some_and(|h| h.ts_ms == ts_ms)
        {
            ev.push(Event::RunStarted {
                keyspace: keyspace.to_owned(),
                run_id: last_run,
                nodes: prev.processed.clone(),
            });
            return Ok(());
        }
        let run_id = last_run
            .checked_add(1)
            .ok_or_else(|| LedgerError::RunIdsExhausted {
                keyspace: keyspace.to_owned(),
            })?;

        // Validation done; from here on nothing fails.
        let affected = affected_nodes(plan, &start);
        let processed = if only_start_nodes {
            start.clone()
        } else {
            affected.clone()
        };
        let mut nodes = BTreeMap::new();
        for name in &processed {
            if let Some(n) = plan.node(name) {
                nodes.insert(name.clone(), NodeRun::new(n));
            }
        }
        let comment = if only_start_nodes {
            "exec_node"
        } else {
            "api.StartRun"
        };
        if !self.keyspaces.contains_key(keyspace) {
            self.keyspaces_created += 1;
        }
        let incarnation = self.keyspaces_created;
        let ks = self
            .keyspaces
            .entry(keyspace.to_owned())
            .or_insert_with(|| Keyspace {
                incarnation,
                ..Keyspace::default()
            });
        ks.last_run = run_id;
        let seq = ks.seq();
        ks.runs.insert(
            run_id,
            Run {
                run_id,
                plan_hash,
                start_nodes: start,
                affected_nodes: affected,
                only_start_nodes,
                description,
                processed: processed.clone(),
                nodes,
                history: vec![RunHistoryRow {
                    ts_ms,
                    seq,
                    run_id,
                    status: RunStatus::Start,
                    comment: comment.to_owned(),
                }],
            },
        );
        ev.push(Event::RunStarted {
            keyspace: keyspace.to_owned(),
            run_id,
            nodes: processed.clone(),
        });
        // Nodes without batches are final at once.
        for name in &processed {
            let by = BatchId {
                keyspace: keyspace.to_owned(),
                run_id,
                node: name.clone(),
                batch_idx: 0,
                part: None,
            };
            ks.refresh_node(&by, ts_ms, ev);
        }
        ks.refresh_run(keyspace, run_id, ts_ms, ev);
        Ok(())
    }

    /// Whether `StopRun` would be accepted: only a running run can be stopped. Front ends ask
    /// this before proposing, so they refuse with the ledger's own words.
    pub fn stoppable(&self, keyspace: &str, run_id: u32) -> Result<(), LedgerError> {
        let run = self.run(keyspace, run_id)?;
        match run.outcome() {
            RunOutcome::Running => Ok(()),
            outcome => Err(LedgerError::RunNotRunning { run_id, outcome }),
        }
    }

    pub(super) fn stop_run(
        &mut self,
        keyspace: &str,
        run_id: u32,
        comment: String,
        ts_ms: i64,
        ev: &mut Vec<Event>,
    ) -> Result<(), LedgerError> {
        let run = self.run(keyspace, run_id)?;
        if run.status() == RunStatus::Stop {
            // The same stop resent by a client that lost the answer (see `start_run`).
            let resent = run
                .history
                .iter()
                .any(|r| r.status == RunStatus::Stop && r.ts_ms == ts_ms && r.comment == comment);
            if resent {
                ev.push(Event::RunStopped {
                    keyspace: keyspace.to_owned(),
                    run_id,
                });
                return Ok(());
            }
        }
        self.stoppable(keyspace, run_id)?;
        let ks = self.ks_mut(keyspace)?;
        let seq = ks.seq();
        let Some(run) = ks.runs.get_mut(&run_id) else {
            return Ok(());
        };
        run.history.push(RunHistoryRow {
            ts_ms,
            seq,
            run_id,
            status: RunStatus::Stop,
            comment,
        });
        ev.push(Event::RunStopped {
            keyspace: keyspace.to_owned(),
            run_id,
        });
        // Unclaimed batches will never be claimed: mark them stopreceived now, as Capillaries
        // does when their messages arrive. Claimed batches finish normally.
        let pending: Vec<(String, (u32, Option<Slices>))> = run
            .processed
            .iter()
            .filter_map(|n| run.nodes.get(n).map(|nr| (n, nr)))
            .flat_map(|(n, nr)| {
                nr.unclaimed
                    .iter()
                    .map(move |u| (n.clone(), nr.unit_id(*u)))
            })
            .collect();
        for (node, (batch_idx, part)) in pending {
            let id = BatchId {
                keyspace: keyspace.to_owned(),
                run_id,
                node,
                batch_idx,
                part,
            };
            ks.finish_batch(
                &id,
                NodeBatchStatus::StopReceived,
                "run was stopped".to_owned(),
                Outcome::default(),
                ts_ms,
                ev,
            );
        }
        Ok(())
    }

    /// Forgets a keyspace and its runs, refused while any of its runs is going or still has
    /// batches executing (they would write into tables being dropped).
    pub(super) fn drop_keyspace(
        &mut self,
        keyspace: &str,
        ev: &mut Vec<Event>,
    ) -> Result<(), LedgerError> {
        let ks = self.keyspace(keyspace)?;
        for (&run_id, run) in &ks.runs {
            if run.status() == RunStatus::Start {
                return Err(LedgerError::KeyspaceInUse {
                    keyspace: keyspace.to_owned(),
                    run_id,
                    reason: "it is still running; stop it first".to_owned(),
                });
            }
            let executing: u32 = run
                .nodes
                .values()
                .map(|nr| nr.unfinished.saturating_sub(nr.unclaimed.len() as u32))
                .sum();
            if executing > 0 {
                return Err(LedgerError::KeyspaceInUse {
                    keyspace: keyspace.to_owned(),
                    run_id,
                    reason: format!(
                        "it is stopped, but {executing} of its batches are still executing; wait until they finish"
                    ),
                });
            }
        }
        self.keyspaces.remove(keyspace);
        ev.push(Event::KeyspaceDropped {
            keyspace: keyspace.to_owned(),
        });
        Ok(())
    }
}

/// Checks what the ledger relies on; the planner guarantees it, hand-made plans may not.
pub(super) fn validate_plan(plan: &Plan) -> Result<(), LedgerError> {
    let bad = |reason: String| Err(LedgerError::InvalidPlan { reason });
    let mut seen = BTreeSet::new();
    for n in &plan.nodes {
        for d in &n.depends_on {
            if !seen.contains(d.as_str()) {
                return bad(format!(
                    "node {:?} depends on {d:?}, which is not an earlier node",
                    n.name
                ));
            }
        }
        if !seen.insert(n.name.as_str()) {
            return bad(format!("duplicate node {:?}", n.name));
        }
        let expected = match &n.reader {
            Reader::File(f) => f.batch_count(),
            Reader::Table(t) => {
                match plan.tables.get(&t.table) {
                    Some(s) if plan.node(&s.created_by).is_some() => {}
                    _ => {
                        return bad(format!(
                            "node {:?} reads table {:?}, which no node creates",
                            n.name, t.table
                        ));
                    }
                }
                t.expected_batches_total as usize
            }
        };
        if n.batches as usize != expected {
            return bad(format!(
                "node {:?} has {} batches, its reader implies {expected}",
                n.name, n.batches
            ));
        }
        if let Some(l) = &n.lookup
            && !plan.tables.contains_key(&l.table)
        {
            return bad(format!(
                "node {:?} looks up in table {:?}, which no node creates",
                n.name, l.table
            ));
        }
        if let Some(p) = &n.dependency_policy
            && !plan.policies.contains_key(p)
        {
            return bad(format!(
                "node {:?} uses unknown dependency policy {p:?}",
                n.name
            ));
        }
    }
    if !plan.policies.contains_key(&plan.default_policy)
        && plan
            .nodes
            .iter()
            .any(|n| matches!(n.reader, Reader::Table(_)) && n.dependency_policy.is_none())
    {
        return bad(format!(
            "default dependency policy {:?} is missing",
            plan.default_policy
        ));
    }
    for (name, p) in &plan.policies {
        if let Err(e) = ResolvedPolicy::resolve(p) {
            return bad(format!("dependency policy {name:?}: {e}"));
        }
    }
    Ok(())
}
