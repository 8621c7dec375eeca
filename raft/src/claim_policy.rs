//! The claim policy's knobs in one place: the retry budget the ledger applies, how a batch's
//! time is predicted, how much a peer claims at once, and when an idle thread may run a
//! backup of a straggler. The ledger needs the budget and the prediction (every peer must
//! decide the same), so the knobs live in this crate, next to their one user in the node crate
//! (`plexus_node::schedule`), instead of as literals spread over the ledger, the schedule and
//! the executor.

use std::time::Duration;

use plexus_core::task::SLICES;

use crate::ledger::Pace;

/// How many times a batch that failed with a retryable error is claimed before it fails for
/// good. Decided here, not by executors, so every peer applies the same budget.
pub const MAX_ATTEMPTS: u32 = 3;

/// The claim policy: every number claims, chunk sizes, predictions and backups follow.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClaimPolicy {
    /// A chunk holds about this much work per thread, so a short batch does not cost a Raft
    /// round trip of its own.
    pub chunk_window: Duration,
    /// Upper bound of a chunk.
    pub max_chunk: usize,
    /// The batch time assumed for a node none of whose batches was measured yet, ms.
    pub first_guess_ms: f64,
    /// Weight of the newest batch time in a peer's running mean of a node's batch time (the
    /// rest is the old mean): recent enough to follow a change, smooth enough to ignore one
    /// outlier.
    pub mean_weight: f64,
    /// Concurrent claimers start their pick at `salt % spread` among the largest
    /// unclaimed batches, so they rarely race for the same ones while still taking the
    /// longest first; `spread` is at least this ([`Self::spread`]).
    pub pick_spread: usize,
    /// And it grows by one for this many peers the ledger knows: the claims racing within one
    /// commit grow with the peers, and a spread narrower than they ask for caps what one
    /// commit can hand out (at 10,000 peers, 64 start points meant 84 claim proposals per
    /// batch).
    pub peers_per_start: usize,
    /// But it is at most the claimable batches over this, so near the end of a run the last
    /// claims still take the longest of what is left.
    pub claimable_per_start: usize,
    /// A started batch running this many times its predicted time is a straggler: an idle
    /// thread may run a backup of it once nothing is left to claim.
    pub backup_factor: f64,
    /// Nor before it has run this long, ms (predictions of short batches are noisy).
    pub backup_min_ms: f64,
    /// About this many peers contend for one straggler's backup (a hashed choice per batch),
    /// so a thousand idle peers do not all propose the same `ClaimBackup` at once.
    pub backup_contenders: usize,
    /// A peer whose completed batches took this many times their predicted time is slow
    /// ([`Self::is_slow`]): it takes the smallest batches and runs no backups.
    pub slow_pace: f64,
    /// Nor before this much predicted work of it completed, ms (one batch's noise is not a
    /// peer's pace).
    pub pace_min_ms: u64,
    /// A peer's pace counts about this much of its latest predicted work, ms: the sums halve
    /// past it, so a peer that was loaded for a while is not slow for ever.
    pub pace_window_ms: u64,
    /// A table-reader batch predicted at more than this many times the run's reference (the
    /// median predicted batch of the run) is cut into parts ([`Self::split_parts`]): a node of
    /// few huge batches (`expected_batches_total: 1`) is otherwise the run's last batch.
    pub split_factor: f64,
    /// At most this many parts a batch (each a run of whole slices, so at most
    /// `plexus_core::task::SLICES`): every part scans its own range and may build a lookup's
    /// right side again, so more parts than threads only add overhead.
    pub max_parts: u32,
}

impl ClaimPolicy {
    /// The policy peers and `planner run` use.
    pub const DEFAULT: Self = Self {
        chunk_window: Duration::from_millis(100),
        max_chunk: 256,
        first_guess_ms: 50.0,
        mean_weight: 0.3,
        pick_spread: 64,
        peers_per_start: 8,
        claimable_per_start: 8,
        backup_factor: 2.0,
        backup_min_ms: 1000.0,
        backup_contenders: 8,
        slow_pace: 2.0,
        pace_min_ms: 2_000,
        pace_window_ms: 60_000,
        split_factor: 4.0,
        max_parts: 16,
    };

    /// How many tasks of a node to claim in one entry: about [`Self::chunk_window`] of work
    /// per thread by the node's mean batch time (`batch_ms`, [`Self::first_guess_ms`] when
    /// unknown), at most [`Self::max_chunk`] and at most `max`, and at most a fair share of
    /// the `claimable` tasks among `live` peers. One per thread while the batch time is
    /// unknown and the ledger knows the batches' sizes (`sized`): then the first claims of a
    /// run are its largest batches, and a second one queued behind a long first one (on a
    /// peer not known to be slow yet) waits as long as the first runs.
    pub fn chunk_size(
        &self,
        batch_ms: Option<f64>,
        sized: bool,
        threads: usize,
        max: usize,
        claimable: usize,
        live: usize,
    ) -> usize {
        let max = max.min(self.max_chunk).max(1);
        let per_thread = match (batch_ms, sized) {
            (None, true) => 1,
            (ms, _) => (self.chunk_window.as_secs_f64() * 1000.0
                / ms.unwrap_or(self.first_guess_ms).max(0.01))
            .clamp(1.0, max as f64) as usize,
        };
        (per_thread * threads.max(1))
            .min(Self::fair_share(claimable, live))
            .clamp(1, max)
    }

    /// How many of the largest unclaimed batches concurrent claimers start their picks
    /// among, with `peers` peers known and `claimable` batches to pick from: at least
    /// [`Self::pick_spread`], one more per [`Self::peers_per_start`] peers, and no more than
    /// the claimable batches over [`Self::claimable_per_start`] (unless that is below
    /// [`Self::pick_spread`]).
    pub fn spread(&self, peers: usize, claimable: usize) -> usize {
        let by_peers = peers / self.peers_per_start.max(1);
        let by_claimable = claimable / self.claimable_per_start.max(1);
        by_peers.min(by_claimable).max(self.pick_spread)
    }

    /// How many of a peer's `threads` a claim is for, `busy` of them executing, by the node's
    /// mean batch time `batch_ms`: the idle ones, and the busy ones too (a task queued for
    /// each, so no thread waits for a claim's round trip) only when batches are shorter than
    /// [`Self::backup_min_ms`]. A longer task queued behind a running one would wait as long
    /// as that one runs, out of reach of idle peers' claims and counted late from its claim.
    pub fn claiming_threads(&self, threads: usize, busy: usize, batch_ms: Option<f64>) -> usize {
        if batch_ms.is_some_and(|ms| ms < self.backup_min_ms) {
            threads
        } else {
            threads.saturating_sub(busy)
        }
        .max(1)
    }

    /// A peer's fair share of `claimable` tasks among `live` peers (at least 1).
    pub fn fair_share(claimable: usize, live: usize) -> usize {
        claimable.div_ceil(live.max(1)).max(1)
    }

    /// A peer's running mean of a node's batch time after one more batch of `ms`.
    pub fn next_mean(&self, mean: Option<f64>, ms: f64) -> f64 {
        mean.map_or(ms, |m| (1.0 - self.mean_weight) * m + self.mean_weight * ms)
    }

    /// A batch's predicted time, ms: its rows times the node's measured time per row when
    /// both are known, else the node's mean batch time, else [`Self::first_guess_ms`].
    pub fn predict_ms(&self, rows: Option<u64>, ms_per_row: Option<f64>, mean: Option<f64>) -> f64 {
        match (rows, ms_per_row) {
            (Some(r), Some(m)) => r as f64 * m,
            _ => mean.unwrap_or(self.first_guess_ms),
        }
    }

    /// Build affinity: whether a peer not yet in a lookup node joins it (claims a first batch
    /// there, building the right side) while `members` peers are in it with `remaining` work
    /// left, a build costing `build` (same unit). It joins when the work left per member
    /// exceeds a build: then its build ends before they run out of work, and the node
    /// finishes sooner with it (`build + (remaining - members·build) / (members + 1) <
    /// remaining / members` exactly when `remaining / members > build`); otherwise it only
    /// spends a build. With nobody in the node, it joins (nothing starves).
    pub fn should_join(&self, remaining: f64, members: usize, build: f64) -> bool {
        members == 0 || remaining / members as f64 > build
    }

    /// The time per row to predict a node's batches with: the node's own measure (`node`) when
    /// it has one, else the run's (`run`, over every measured node of the run). A node none of
    /// whose batches finished yet would otherwise be predicted at [`Self::first_guess_ms`] a
    /// batch whatever its rows, below every measured node's large batches, so its largest
    /// batches would wait until the measured nodes ran dry and start near the end of the run.
    pub fn row_time(node: Option<f64>, run: Option<f64>) -> Option<f64> {
        node.or(run)
    }

    /// A peer's pace after one more completed batch predicted at `predicted_ms` that took
    /// `elapsed_ms`: both added, both halved once the predicted sum passes
    /// [`Self::pace_window_ms`].
    pub fn next_pace(&self, pace: Pace, predicted_ms: u64, elapsed_ms: u64) -> Pace {
        let mut p = Pace {
            predicted_ms: pace.predicted_ms.saturating_add(predicted_ms),
            elapsed_ms: pace.elapsed_ms.saturating_add(elapsed_ms),
        };
        if p.predicted_ms > self.pace_window_ms {
            p.predicted_ms /= 2;
            p.elapsed_ms /= 2;
        }
        p
    }

    /// Whether a peer of this pace is slow: at least [`Self::pace_min_ms`] of its work
    /// measured, taking [`Self::slow_pace`] times its prediction or more. A slow peer holding
    /// the longest batches or running backups is what holds a run's end.
    pub fn is_slow(&self, pace: &Pace) -> bool {
        pace.predicted_ms >= self.pace_min_ms
            && pace.elapsed_ms as f64 >= self.slow_pace * pace.predicted_ms as f64
    }

    /// A peer's pace as a ratio, its batches' time over their prediction (1 before it
    /// completed any).
    pub fn pace_ratio(pace: &Pace) -> f64 {
        if pace.predicted_ms == 0 {
            1.0
        } else {
            pace.elapsed_ms as f64 / pace.predicted_ms as f64
        }
    }

    /// Whether a peer measured slow, at `pace` (its time over predictions), may claim a batch
    /// predicted at `predicted_ms` while its run is estimated to need `remaining_ms` more
    /// ([`crate::Ledger::remaining_ms`]): only if it would finish it within that time.
    /// Otherwise the other peers finish the rest sooner, and its claim would be the last batch
    /// to finish (or wait for a backup).
    pub fn slow_may_claim(&self, pace: f64, predicted_ms: f64, remaining_ms: f64) -> bool {
        pace * predicted_ms <= remaining_ms
    }

    /// Whether a peer of this pace may steal unstarted tasks from another peer's deque: not
    /// once it is measured slow ([`Self::is_slow`]). A task queued on its victim starts there
    /// after the victim's running ones (a chunk queues tasks behind running ones only when
    /// batches are short, [`Self::claiming_threads`]), while a slow thief runs it
    /// [`Self::slow_pace`] times its prediction or more: stolen, it becomes a straggler. In
    /// the simulator (`--table-skew`, 1,000 peers) the slow peers stole the batches of a
    /// table reader that became ready late, and ran them at 5x until backups ended them,
    /// last. A slow peer still claims, smallest first ([`Self::slow_may_claim`]).
    pub fn may_steal(&self, pace: &Pace) -> bool {
        !self.is_slow(pace)
    }

    /// Whether a batch started `running_ms` ago with a prediction of `predicted_ms` is a
    /// straggler worth a backup: [`Self::backup_factor`] times past its prediction, and
    /// [`Self::backup_min_ms`] old unless its holder is measured slow (`holder_slow`: then
    /// it is late for sure, not by noise).
    pub fn is_straggler(&self, running_ms: f64, predicted_ms: f64, holder_slow: bool) -> bool {
        (holder_slow || running_ms >= self.backup_min_ms)
            && running_ms >= self.backup_factor * predicted_ms
    }

    /// Whether a straggler predicted at `predicted_ms` is backed up while its run still has
    /// batches to claim, which the run is estimated to need `remaining_ms` for
    /// ([`crate::Ledger::remaining_ms`]): when a copy started now would take as long as the
    /// rest of the run. Started later, at the end, it would finish after everything else (at
    /// 10,000 peers, an 11 s batch a slow peer claimed first finished 10 s after the rest).
    pub fn is_critical(&self, predicted_ms: f64, remaining_ms: f64) -> bool {
        predicted_ms >= remaining_ms
    }

    /// How many parts a table-reader batch predicted at `batch` is cut into, against the
    /// run's `reference` (same unit: ms, or rows while the run measured nothing): 1 (no cut)
    /// unless it is above [`Self::split_factor`] times the reference, else about as many as
    /// make each part the reference's size, at most [`Self::max_parts`] and [`SLICES`].
    pub fn split_parts(&self, batch: f64, reference: f64) -> u32 {
        if !(reference > 0.0 && batch.is_finite() && batch > self.split_factor * reference) {
            return 1;
        }
        let cap = self.max_parts.clamp(1, SLICES);
        // Bounded by the cap before the cast, so the cast neither saturates nor truncates.
        (batch / reference).ceil().min(f64::from(cap)) as u32
    }

    /// Whether a peer whose hash for a straggler is `draw` may contend for its backup among
    /// `peers` peers: about [`Self::backup_contenders`] of them may, each batch choosing
    /// others; once the straggler runs twice the backup threshold past its prediction
    /// (`past`, running / predicted) any peer may, as the chosen ones may be busy or gone.
    pub fn may_back_up(&self, draw: u64, peers: usize, past: f64) -> bool {
        let spread = (peers / self.backup_contenders.max(1)).max(1) as u64;
        past >= 2.0 * self.backup_factor || draw.is_multiple_of(spread)
    }
}

impl Default for ClaimPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_batch_far_above_the_run_reference_is_cut() {
        let p = ClaimPolicy::DEFAULT;
        // At or below split_factor times the reference: whole.
        assert_eq!(p.split_parts(400.0, 100.0), 1);
        assert_eq!(p.split_parts(50.0, 100.0), 1);
        // Nothing to compare with: whole.
        assert_eq!(p.split_parts(1e9, 0.0), 1);
        assert_eq!(p.split_parts(f64::NAN, 100.0), 1);
        assert_eq!(p.split_parts(f64::INFINITY, 100.0), 1);
        // Above: parts of about the reference's size.
        assert_eq!(p.split_parts(401.0, 100.0), 5);
        assert_eq!(p.split_parts(1000.0, 100.0), 10);
        // Capped by max_parts, and never above the slices of a batch.
        assert_eq!(p.split_parts(1e9, 1.0), 16);
        let wide = ClaimPolicy {
            max_parts: 1000,
            ..ClaimPolicy::DEFAULT
        };
        assert_eq!(wide.split_parts(1e9, 1.0), SLICES);
    }

    #[test]
    fn a_claim_queues_tasks_for_busy_threads_only_when_batches_are_short() {
        let p = ClaimPolicy::DEFAULT;
        // 200 ms batches: one for each thread, busy or not (the claim's round trip hides).
        assert_eq!(p.claiming_threads(4, 3, Some(200.0)), 4);
        // 2 s batches, or not measured yet: the idle threads only, at least the asking one.
        assert_eq!(p.claiming_threads(4, 3, Some(2000.0)), 1);
        assert_eq!(p.claiming_threads(4, 1, None), 3);
        assert_eq!(p.claiming_threads(4, 4, None), 1);
    }

    #[test]
    fn chunks_follow_batch_times_and_fair_shares() {
        let p = ClaimPolicy::DEFAULT;
        // Unknown: the first guess, 2 per thread; one per thread where the ledger knows the
        // batches' sizes (the first claims are the largest).
        assert_eq!(p.chunk_size(None, false, 2, 256, 1000, 1), 4);
        assert_eq!(p.chunk_size(None, true, 2, 256, 1000, 1), 2);
        assert_eq!(p.chunk_size(Some(1.0), true, 2, 256, 1000, 1), 200);
        // Short batches fill the window, up to the bound.
        assert_eq!(p.chunk_size(Some(1.0), false, 2, 256, 1000, 1), 200);
        assert_eq!(p.chunk_size(Some(0.1), false, 4, 256, 10_000, 1), 256);
        assert_eq!(p.chunk_size(Some(0.1), false, 4, 1000, 10_000, 1), 256);
        // Long batches: one per thread.
        assert_eq!(p.chunk_size(Some(5000.0), false, 3, 256, 1000, 1), 3);
        // Never more than a fair share among live peers, never zero.
        assert_eq!(p.chunk_size(Some(1.0), false, 2, 256, 30, 3), 10);
        assert_eq!(p.chunk_size(Some(1.0), false, 2, 256, 0, 3), 1);
    }

    #[test]
    fn predictions_use_rows_when_known() {
        let p = ClaimPolicy::DEFAULT;
        assert_eq!(p.predict_ms(Some(1000), Some(0.5), Some(7.0)), 500.0);
        assert_eq!(p.predict_ms(None, Some(0.5), Some(7.0)), 7.0);
        assert_eq!(p.predict_ms(Some(1000), None, None), p.first_guess_ms);
        assert_eq!(p.next_mean(None, 10.0), 10.0);
        assert!((p.next_mean(Some(10.0), 20.0) - 13.0).abs() < 1e-9);
        assert!(!p.is_straggler(500.0, 100.0, false), "too young");
        assert!(
            p.is_straggler(500.0, 100.0, true),
            "young, but on a slow peer"
        );
        assert!(!p.is_straggler(150.0, 100.0, true));
        // An unmeasured node borrows the run's time per row: its 5,000-row batch ranks above
        // a measured node's 1,000-row one instead of at the first guess.
        let borrowed = ClaimPolicy::row_time(None, Some(1.0));
        assert_eq!(p.predict_ms(Some(5000), borrowed, None), 5000.0);
        assert!(
            p.predict_ms(Some(5000), borrowed, None)
                > p.predict_ms(Some(1000), Some(1.0), Some(1000.0))
        );
        assert_eq!(ClaimPolicy::row_time(Some(0.5), Some(1.0)), Some(0.5));
        assert_eq!(ClaimPolicy::row_time(None, None), None);
        assert!(p.is_straggler(2000.0, 1000.0, false));
        assert!(!p.is_straggler(1999.0, 1000.0, false));
    }

    #[test]
    fn the_pick_spread_grows_with_the_peers_and_shrinks_near_the_end() {
        let p = ClaimPolicy::DEFAULT;
        assert_eq!(p.spread(100, 10_000), 64, "small clusters: the floor");
        assert_eq!(
            p.spread(10_000, 1_000_000),
            1_250,
            "one start point per 8 peers"
        );
        assert_eq!(
            p.spread(10_000, 4_000),
            500,
            "at most an eighth of what is left"
        );
        assert_eq!(p.spread(10_000, 100), 64);
    }

    #[test]
    fn a_peer_is_slow_once_enough_of_its_work_took_twice_its_prediction() {
        let p = ClaimPolicy::DEFAULT;
        let one = p.next_pace(Pace::default(), 1000, 5000);
        assert!(!p.is_slow(&one), "one batch is not a pace");
        let two = p.next_pace(one, 1000, 5000);
        assert!(p.is_slow(&two));
        let noisy = p.next_pace(p.next_pace(Pace::default(), 1000, 1300), 1000, 1200);
        assert!(!p.is_slow(&noisy), "noise is not slowness");
        // Past the window the sums halve: a peer that recovers stops being slow.
        let mut pace = two;
        for _ in 0..200 {
            pace = p.next_pace(pace, 1000, 1000);
        }
        assert!(pace.predicted_ms <= p.pace_window_ms);
        assert!(!p.is_slow(&pace), "{pace:?}");
        // Near the end a slow peer leaves what it would finish after the rest.
        assert_eq!(ClaimPolicy::pace_ratio(&two), 5.0);
        assert!(p.slow_may_claim(5.0, 250.0, 2000.0));
        assert!(!p.slow_may_claim(5.0, 250.0, 1000.0));
    }

    #[test]
    fn a_peer_measured_slow_steals_nothing() {
        let p = ClaimPolicy::DEFAULT;
        assert!(p.may_steal(&Pace::default()), "nothing measured: may steal");
        let slow = p.next_pace(p.next_pace(Pace::default(), 1000, 5000), 1000, 5000);
        assert!(p.is_slow(&slow) && !p.may_steal(&slow));
        // One slow batch is noise, not a pace: it still steals.
        let once = p.next_pace(Pace::default(), 1000, 5000);
        assert!(p.may_steal(&once));
        // On time: steals.
        let on_time = p.next_pace(p.next_pace(Pace::default(), 1000, 1100), 1000, 900);
        assert!(p.may_steal(&on_time));
    }

    #[test]
    fn a_straggler_is_backed_up_before_the_end_when_it_needs_the_rest_of_the_run() {
        let p = ClaimPolicy::DEFAULT;
        assert!(
            !p.is_critical(11_000.0, 30_000.0),
            "time enough to back it up at the end"
        );
        assert!(p.is_critical(11_000.0, 11_000.0));
        assert!(p.is_critical(11_000.0, 2_000.0));
    }

    #[test]
    fn a_peer_joins_a_lookup_node_only_when_the_work_left_per_member_exceeds_a_build() {
        let p = ClaimPolicy::DEFAULT;
        // Nobody in it: always join, however costly the build.
        assert!(p.should_join(0.0, 0, 1e12));
        // 1,000 batches of 1 s left to 10 peers (100 s each) against a 5 s build: join;
        // left to 250 peers (4 s each): a build would end after the work, stay out.
        assert!(p.should_join(1000.0, 10, 5.0));
        assert!(!p.should_join(1000.0, 250, 5.0));
        // The boundary: equal is not worth it (the node would end no sooner).
        assert!(!p.should_join(10.0, 2, 5.0));
        assert!(p.should_join(10.1, 2, 5.0));
    }

    #[test]
    fn about_backup_contenders_peers_contend_for_a_straggler() {
        let p = ClaimPolicy::DEFAULT;
        let allowed = (0..1000u64)
            .filter(|d| p.may_back_up(d.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7, 1000, 2.5))
            .count();
        assert!((4..=16).contains(&allowed), "{allowed} of 1000");
        // Few peers: all may; far past the prediction: all may.
        assert!((0..5u64).all(|d| p.may_back_up(d, 5, 2.5)));
        assert!((0..1000u64).all(|d| p.may_back_up(d, 1000, 4.0)));
    }
}
