//! A run's progress read off successive copies of its keyspace's ledger, as the same
//! [`Progress`] events a local run's engine sends: the cluster client keeps a copy current
//! through the watch stream (`cluster::watch`), and [`LedgerProgress`] says what changed since
//! the last copy, so local and cluster runs feed one stream to one renderer.

use std::collections::BTreeSet;

use plexus_raft::{Ledger, LedgerError, NodeBatchStatus, RunStatus};

use crate::local_run::{Observer, Progress};

/// What has been reported of one run so far.
#[derive(Debug)]
pub struct LedgerProgress {
    /// The run followed.
    run_id: u32,
    /// Whether [`Progress::RunStarted`] was sent.
    announced: bool,
    /// (node, batch index) of every batch reported final.
    seen: BTreeSet<(String, u32)>,
    /// Nodes reported final.
    finished: BTreeSet<String>,
}

impl LedgerProgress {
    /// Nothing reported yet of `run_id`.
    pub fn new(run_id: u32) -> Self {
        Self {
            run_id,
            announced: false,
            seen: BTreeSet::new(),
            finished: BTreeSet::new(),
        }
    }

    /// Sends `observer` every event `ledger` shows that earlier copies did not; returns whether
    /// the run has ended (complete or stopped).
    pub fn feed(
        &mut self,
        ledger: &Ledger,
        keyspace: &str,
        observer: &dyn Observer,
    ) -> Result<bool, LedgerError> {
        let run_id = self.run_id;
        let run = ledger.run(keyspace, run_id)?;
        if !self.announced {
            let plan = ledger.plan(&run.plan_hash);
            let nodes = run
                .processed
                .iter()
                .map(|n| {
                    (
                        n.clone(),
                        plan.and_then(|p| p.node(n)).map_or(0, |p| p.batches),
                    )
                })
                .collect();
            observer.progress(&Progress::RunStarted { run_id, nodes });
            self.announced = true;
        }
        for name in &run.processed {
            let Some(nr) = run.nodes.get(name) else {
                continue;
            };
            for (i, b) in nr.batches.iter().enumerate() {
                // Units: batches, or parts of them (each reported as its batch).
                let unit = u32::try_from(i).unwrap_or(u32::MAX);
                let (batch_idx, _) = nr.unit_id(unit);
                if !b.status.is_final() || !self.seen.insert((name.clone(), unit)) {
                    continue;
                }
                let last = b.history.last();
                observer.progress(&Progress::BatchFinished {
                    node: name.clone(),
                    batch_idx,
                    rows_in: last.and_then(|h| h.rows_in).unwrap_or(0),
                    rows_out: last.and_then(|h| h.rows_out).unwrap_or(0),
                    error: (b.status == NodeBatchStatus::Fail)
                        .then(|| last.and_then(|h| h.error.clone()).unwrap_or_default()),
                });
            }
            if nr.status.is_final() && self.finished.insert(name.clone()) {
                observer.progress(&Progress::NodeFinished {
                    node: name.clone(),
                    status: nr.status,
                });
            }
        }
        Ok(matches!(
            run.status(),
            RunStatus::Complete | RunStatus::Stop
        ))
    }
}
