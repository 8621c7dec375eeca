//! A `top`'s bound on the keys it can keep, estimated from a sample of its first rows.

use std::sync::{Arc, OnceLock};

/// A bound on the order keys one batch's `top` can keep, estimated from the first rows its
/// buffers are offered and shared by them (the buffers of a parallel top).
///
/// A buffer learns an exact bound only by cutting twice its limit, so a `top` keeping `limit`
/// of somewhat more rows rendered, held, spilled and merged every row: the 10 M lookup's item
/// files keep 5 M of 9.5 and 10.4 M rows, split between two threads that never reach 10 M.
/// Rows arrive in rowid order, and rowids are hashes of where a row was made, so a buffer's
/// first rows are a fair sample of the batch's keys: the first buffer to be offered
/// `sample_rows` rows takes the key at a little above the fraction `limit / expected_rows` of
/// its sample, and every buffer then drops rows whose key is at or above it, before rendering.
///
/// The estimate is a guess (the expected count comes from the ledger); the count makes it
/// safe. Each buffer counts the rows it was offered with a key below the bound: if all of
/// them together reach the limit, every dropped row sorts after the limit's rows; if not, rows
/// the `top` needed may be gone, [`super::TopBuffer::bound_held`] says so, and the caller computes the
/// `top` again without a bound.
#[derive(Debug)]
pub struct SampledBound {
    /// Rows the buffers sharing the bound are expected to be offered in all.
    expected_rows: u64,
    /// Rows of a buffer the bound is estimated from.
    pub(super) sample_rows: usize,
    /// The bound, set once by the first buffer whose sample is complete.
    pub(super) bound: OnceLock<Box<[u8]>>,
}

impl SampledBound {
    /// A bound for buffers expected to be offered `expected_rows` rows in all, estimated from
    /// a sample of `sample_rows` (`None` when 0: no sampling).
    pub fn new(expected_rows: u64, sample_rows: usize) -> Option<Arc<Self>> {
        (sample_rows > 0).then(|| {
            Arc::new(Self {
                expected_rows,
                sample_rows,
                bound: OnceLock::new(),
            })
        })
    }

    /// The key at the fraction of `keys` (a sample) below which `limit` rows of
    /// `expected_rows` are expected with a wide margin; `None` when nearly every row would be
    /// kept, where a bound saves little.
    pub(super) fn estimate(&self, limit: usize, keys: &mut [&[u8]]) -> Option<Box<[u8]>> {
        let n = keys.len() as f64;
        let p = limit as f64 / self.expected_rows.max(1) as f64;
        // Five standard deviations of a sample quantile, and 1 % for the expected count.
        let q = p * 1.01 + 5.0 * (p * (1.0 - p).max(0.0) / n).sqrt();
        if q.is_nan() || q >= MAX_SAMPLED_SHARE {
            return None;
        }
        let k = (q * n).ceil() as usize;
        if k >= keys.len() {
            return None;
        }
        let (_, kth, _) = keys.select_nth_unstable(k);
        Some((*kth).into())
    }
}

/// Above this share of the rows kept, a sampled bound is not set: it would drop too few.
const MAX_SAMPLED_SHARE: f64 = 0.9;
