//! Making published segment and run files durable in the background.
//!
//! Why: `Store::sync` must not return before every file published so far is on disk (the run
//! is reported done after it). Doing all the fsyncs there, at the end of a run, left the
//! process idle for up to a fifth of a lookup's wall while the kernel wrote back a gigabyte of
//! intermediate tables (bench/RESULTS.md, "Issue #25 round 3"). So each published file is handed
//! to one background thread that fsyncs it (and then its directory) while the run goes on, and
//! `sync` only waits for the files handed over before it was called.
//!
//! A failed fsync is reported by the next `sync`, with the file's path, and its file is handed
//! over again, so a retried `sync` tries it again (as the synchronous version did).

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

/// Hands published files to the fsync thread and waits for them in [`Syncer::wait`].
pub(super) struct Syncer {
    shared: Arc<Shared>,
    /// `None` only while dropping.
    tx: Option<Sender<PathBuf>>,
    thread: Option<JoinHandle<()>>,
}

/// What the store's threads and the fsync thread share.
struct Shared {
    state: Mutex<Progress>,
    /// Signalled whenever the fsync thread settles a group of files.
    settled: Condvar,
    /// Set while the store is dropped: the files still queued are skipped (they were never
    /// promised durable: no `sync` returned after them).
    stopping: AtomicBool,
}

/// How far the fsync thread has come.
#[derive(Default)]
struct Progress {
    /// Files handed over so far.
    queued: u64,
    /// Files fsynced (or failed) so far; files are settled in the order they were queued.
    settled: u64,
    /// Files whose fsync failed since the last `wait`, with the error.
    failed: Vec<(PathBuf, io::Error)>,
}

impl Syncer {
    /// Starts the fsync thread.
    pub(super) fn start() -> io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(Progress::default()),
            settled: Condvar::new(),
            stopping: AtomicBool::new(false),
        });
        let (tx, rx) = channel();
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("plexus-store-sync".to_owned())
                .spawn(move || fsync_loop(&rx, &shared))?
        };
        Ok(Self {
            shared,
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Hands a published file over to be made durable.
    pub(super) fn queue(&self, path: PathBuf) {
        let mut state = self.shared.lock();
        state.queued += 1;
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(path).is_ok());
        if !sent {
            // Only while dropping; nothing waits any more.
            state.settled += 1;
        }
    }

    /// Waits until every file queued before this call is fsynced; the first failure since
    /// the last call is the error (its path in the message), and the failed files are queued
    /// again.
    pub(super) fn wait(&self) -> io::Result<()> {
        let mut state = self.shared.lock();
        let target = state.queued;
        while state.settled < target {
            state = self
                .shared
                .settled
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let failed = std::mem::take(&mut state.failed);
        drop(state);
        let mut first = None;
        for (path, e) in failed {
            first.get_or_insert_with(|| {
                io::Error::new(e.kind(), format!("fsync of {}: {e}", path.display()))
            });
            self.queue(path);
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            // The thread only fsyncs; a panic there has nothing left to report.
            let _ = t.join();
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The fsync thread: takes every file queued so far, fsyncs the files and then their
/// directories (so that each file's name is durable too), and settles them; until the store
/// is dropped.
fn fsync_loop(rx: &Receiver<PathBuf>, shared: &Shared) {
    while let Ok(first) = rx.recv() {
        let mut files = vec![first];
        files.extend(rx.try_iter());
        let mut failed = Vec::new();
        if !shared.stopping.load(Ordering::Relaxed) {
            let dirs: BTreeSet<&Path> = files.iter().filter_map(|p| p.parent()).collect();
            for p in &files {
                if let Err(e) = fsync(p) {
                    failed.push((p.clone(), e));
                }
            }
            for d in dirs {
                if let Err(e) = fsync(d) {
                    failed.push((d.to_path_buf(), e));
                }
            }
        }
        let mut state = shared.lock();
        state.settled += files.len() as u64;
        state.failed.append(&mut failed);
        drop(state);
        shared.settled.notify_all();
    }
}

/// fsyncs one file or directory; one replaced or dropped since has nothing to make durable.
fn fsync(path: &Path) -> io::Result<()> {
    match std::fs::File::open(path).and_then(|f| f.sync_all()) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_returns_after_every_queued_file_and_reports_a_failure_with_its_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let syncer = Syncer::start().expect("start");
        for i in 0..50 {
            let p = dir.path().join(format!("{i}.seg"));
            std::fs::write(&p, b"rows").expect("write");
            syncer.queue(p);
        }
        // A file removed before its fsync (a replaced segment) is nothing to make durable.
        let gone = dir.path().join("gone.seg");
        std::fs::write(&gone, b"rows").expect("write");
        std::fs::remove_file(&gone).expect("remove");
        syncer.queue(gone);
        syncer.wait().expect("every file synced");
        {
            let state = syncer.shared.lock();
            assert_eq!((state.queued, state.settled), (51, 51));
        }
        // A path that cannot be opened for reading (a directory without permission would need
        // root to fail; a path through a regular file fails for everyone).
        let file = dir.path().join("0.seg");
        let bad = file.join("child.seg");
        syncer.queue(bad.clone());
        let err = syncer.wait().expect_err("the failure is reported");
        assert!(
            err.to_string().contains(&bad.display().to_string()),
            "{err}"
        );
        // Queued again: the next wait tries it again and reports it again.
        assert!(syncer.wait().is_err());
    }
}
