//! Splits: the cut of a table-reader node's batches into parts (issue #26 item 3), fixed once
//! when the node becomes claimable, so every claim, retry, backup or steal of a part covers
//! the same slices. Within a node every table-reader batch is predicted alike (its creator's
//! rows spread evenly), so the reference is run-wide: the median predicted batch of the run.

use plexus_core::plan::Reader;

use crate::claim_policy::ClaimPolicy;
use crate::status::RunStatus;

use super::state::{Ledger, Readiness, Run};

impl Ledger {
    /// Fixes the cut of every fresh table-reader node of the keyspace's running runs whose
    /// dependencies say go ([`super::state::NodeRun::parts`]): parts as
    /// [`ClaimPolicy::split_parts`] says for its predicted batch against the run's median
    /// ([`Self::reference`]), 1 (whole) when it is not far above it or nothing tells its rows.
    pub(super) fn cut_ready(&mut self, keyspace: &str) {
        let Some(ks) = self.keyspaces.get(keyspace) else {
            return;
        };
        let mut cuts: Vec<(u32, String, u32)> = Vec::new();
        for run in ks.runs.values() {
            if run.status() != RunStatus::Start {
                continue;
            }
            let Some(plan) = self.plans.get(&run.plan_hash) else {
                continue;
            };
            let mut reference = None;
            // Plan nodes, not `processed` names, so no name is searched in the plan: this
            // runs after every command. Cheap checks first.
            for pn in &plan.nodes {
                let name = &pn.name;
                let Some(nr) = run.nodes.get(name) else {
                    continue;
                };
                if !nr.fresh() || !pn.node_type.splits() || !matches!(pn.reader, Reader::Table(_)) {
                    continue;
                }
                let Ok(Readiness::Go { reader_run, .. }) =
                    self.readiness(keyspace, run.run_id, name)
                else {
                    continue;
                };
                let parts = match self.batch_value(keyspace, run, name, reader_run) {
                    Some(value) => {
                        let r = *reference.get_or_insert_with(|| self.reference(keyspace, run));
                        ClaimPolicy::DEFAULT.split_parts(value, r)
                    }
                    None => 1,
                };
                cuts.push((run.run_id, name.clone(), parts));
            }
        }
        let Some(ks) = self.keyspaces.get_mut(keyspace) else {
            return;
        };
        for (run_id, node, parts) in cuts {
            if let Some(nr) = ks
                .runs
                .get_mut(&run_id)
                .and_then(|r| r.nodes.get_mut(&node))
            {
                nr.cut(parts);
            }
        }
    }

    /// The predicted time of one whole batch of a table-reader node reading `reader_run`: its
    /// creator's rows over its batches, at the node's time per row (the run's while it has
    /// none; rows as they are while the run measured nothing, as every node then is).
    fn batch_value(
        &self,
        keyspace: &str,
        run: &Run,
        node: &str,
        reader_run: Option<u32>,
    ) -> Option<f64> {
        let nr = run.nodes.get(node)?;
        let (rows, _) = self.input_rows(keyspace, run, node, reader_run, None);
        let per_batch = rows? as f64 / f64::from(nr.batches_total().max(1));
        let per_row = ClaimPolicy::row_time(nr.ms_per_row(), run.ms_per_row()).unwrap_or(1.0);
        Some(per_batch * per_row)
    }

    /// The run's median predicted batch (same unit as [`Self::batch_value`]), each node's
    /// units counted: a measured node at its mean time per unit, a table reader that may run
    /// at its predicted batch over its parts, a file reader whose plan sizes its batches at
    /// their mean; nodes nothing tells of are left out. 0 when none is told.
    fn reference(&self, keyspace: &str, run: &Run) -> f64 {
        let run_per_row = run.ms_per_row();
        let mut values: Vec<(f64, u64)> = Vec::new();
        for name in &run.processed {
            let Some(nr) = run.nodes.get(name) else {
                continue;
            };
            let units = u64::from(nr.units_total());
            if run_per_row.is_some()
                && let Some(mean) = nr.mean_batch_ms()
            {
                values.push((mean, units));
                continue;
            }
            let sized: Vec<u64> = nr.batches.iter().filter_map(|b| b.rows).collect();
            if !sized.is_empty() {
                let mean = sized.iter().sum::<u64>() as f64 / sized.len() as f64;
                values.push((mean * run_per_row.unwrap_or(1.0), units));
                continue;
            }
            if let Ok(Readiness::Go { reader_run, .. }) = self.readiness(keyspace, run.run_id, name)
                && let Some(v) = self.batch_value(keyspace, run, name, reader_run)
            {
                values.push((v / f64::from(nr.parts_per_batch()), units));
            }
        }
        weighted_median(values)
    }
}

/// The median of values each counted `weight` times; 0 for none.
fn weighted_median(mut values: Vec<(f64, u64)>) -> f64 {
    values.retain(|(v, w)| v.is_finite() && *w > 0);
    values.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: u64 = values.iter().map(|(_, w)| w).sum();
    let mut seen = 0u64;
    for (v, w) in values {
        seen += w;
        if seen.saturating_mul(2) >= total {
            return v;
        }
    }
    0.0
}

#[cfg(test)]
mod tests {
    use super::weighted_median;

    #[test]
    fn the_median_counts_every_unit() {
        assert_eq!(weighted_median(vec![]), 0.0);
        // One huge batch beside fifty small ones: the small ones are the median.
        assert_eq!(weighted_median(vec![(5000.0, 1), (100.0, 50)]), 100.0);
        assert_eq!(weighted_median(vec![(1.0, 1), (2.0, 1), (3.0, 1)]), 2.0);
        assert_eq!(weighted_median(vec![(f64::NAN, 9), (7.0, 1)]), 7.0);
    }
}
