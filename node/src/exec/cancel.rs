//! Cancelling a running batch: the losing copy of a speculative backup stops within a page
//! instead of running to its end (issue #26 item 4).
//!
//! A [`Cancel`] is a flag, optionally backed by a probe the executor thread calls at each
//! check (the worker's probe reads its ledger copy). Every long loop a batch runs checks it
//! once per page or chunk — `Scan::next_page` (table readers, distinct, tag, lookup, py_calc,
//! the file writer), the file reader's chunk loop, and `RowWriter::flush` — and returns
//! [`BatchErrorKind::Cancelled`](super::BatchErrorKind::Cancelled), so no store write
//! happens after the check that saw it. A py_calc batch finishes waiting for the page in
//! Python first. A hash join's right-side build is not cancelled: it is shared with the
//! lookup's other batches, which wait for it.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the batch must stop, asked once per page or chunk (so it must be cheap).
type Probe = Box<dyn Fn() -> bool + Send + Sync>;

/// Tells a running batch to stop early; [`Cancel::never`] for a batch nobody cancels.
#[derive(Default)]
pub struct Cancel {
    flag: AtomicBool,
    probe: Option<Probe>,
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancel")
            .field("cancelled", &self.flag.load(Ordering::Relaxed))
            .field("probe", &self.probe.is_some())
            .finish()
    }
}

impl Cancel {
    /// A token only [`Cancel::cancel`] sets.
    pub fn never() -> Self {
        Self::default()
    }

    /// A token that is also cancelled once `probe` returns true (asked at every check until
    /// then, from the batch's thread).
    pub fn with_probe(probe: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Self {
            flag: AtomicBool::new(false),
            probe: Some(Box::new(probe)),
        }
    }

    /// Cancels the batch: its next check stops it.
    pub fn cancel(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }

    /// Whether the batch must stop; a probe saying so sets the flag for good.
    pub fn is_cancelled(&self) -> bool {
        if self.flag.load(Ordering::SeqCst) {
            return true;
        }
        if self.probe.as_ref().is_some_and(|p| p()) {
            self.cancel();
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn a_probe_cancels_for_good_once_it_says_so() {
        let asked = Arc::new(AtomicU32::new(0));
        let a = asked.clone();
        let c = Cancel::with_probe(move || a.fetch_add(1, Ordering::SeqCst) >= 2);
        assert!(!c.is_cancelled());
        assert!(!c.is_cancelled());
        assert!(c.is_cancelled());
        // Set for good: the probe is not asked again.
        assert!(c.is_cancelled());
        assert_eq!(asked.load(Ordering::SeqCst), 3);
        let n = Cancel::never();
        assert!(!n.is_cancelled());
        n.cancel();
        assert!(n.is_cancelled());
    }
}
