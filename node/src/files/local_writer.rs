//! A local output file written by a thread of its own.
//!
//! A file writer's last step (the merge of a `top`) runs on one core, and a third of it was
//! the `write` calls copying its lines into the page cache (the 10 M-row lookup benchmark's
//! last node, alone at the end of the run). Here the producing thread fills a buffer, hands it
//! to the writer thread and goes on with the next one, so both copies run at once. Buffers come
//! back to be refilled: reused pages cost no fault, fresh ones do.
//!
//! The batch ends with the file made durable, and that `fsync` waited for every byte at once:
//! about half a second for a 630 MB file here, alone at the end of the run. So every
//! [`SYNC_EVERY`] bytes the writer asks a third thread to sync what is written so far, and the
//! disk writes those bytes while the merge goes on; the last sync waits only for the rest.

use std::fs::File;
use std::io::{self, Write};
use std::sync::mpsc;
use std::thread::JoinHandle;

/// Bytes handed to the writer thread at a time.
const HANDOFF_BYTES: usize = 1 << 20;

/// Buffers queued for the writer thread at most: with the one it writes and the one being
/// filled, the memory a file holds is a few of [`HANDOFF_BYTES`].
const QUEUED: usize = 2;

/// Bytes written between two requests for a background sync.
const SYNC_EVERY: usize = 64 << 20;

/// What the writer thread is sent.
enum Job {
    /// Bytes to append; the buffer comes back emptied.
    Write(Vec<u8>),
    /// Answer once every byte sent before has been written.
    Flush(mpsc::SyncSender<()>),
}

/// A local file whose bytes are written by a thread of its own (see the module doc).
///
/// Errors of the writer thread surface at the next [`Write`] call, at [`LocalWriter::finish`]
/// or at a flush; a writer dropped without `finish` writes what it holds and waits for its
/// thread, so no byte of it is written after it is gone (a retry may be writing the same
/// path by then).
pub(crate) struct LocalWriter {
    buf: Vec<u8>,
    jobs: Option<mpsc::SyncSender<Job>>,
    spare: mpsc::Receiver<Vec<u8>>,
    thread: Option<JoinHandle<io::Result<File>>>,
}

impl LocalWriter {
    /// Starts the writer thread of `file`.
    pub(crate) fn new(mut file: File) -> io::Result<Self> {
        let (jobs, todo) = mpsc::sync_channel::<Job>(QUEUED);
        let (back, spare) = mpsc::channel();
        let syncer = Syncer::start(&file)?;
        let thread = std::thread::Builder::new()
            .name("output-file".into())
            .spawn(move || -> io::Result<File> {
                let mut unsynced = 0;
                for job in todo {
                    match job {
                        Job::Write(mut bytes) => {
                            file.write_all(&bytes)?;
                            unsynced += bytes.len();
                            if unsynced >= SYNC_EVERY {
                                syncer.request();
                                unsynced = 0;
                            }
                            bytes.clear();
                            // The producer gone, nobody refills it: drop it.
                            let _ = back.send(bytes);
                        }
                        Job::Flush(done) => {
                            file.flush()?;
                            let _ = done.send(());
                        }
                    }
                }
                syncer.finish()?;
                Ok(file)
            })?;
        Ok(Self {
            buf: Vec::with_capacity(HANDOFF_BYTES),
            jobs: Some(jobs),
            spare,
            thread: Some(thread),
        })
    }

    /// Sends `job`; when the thread has stopped, its error.
    fn send(&mut self, job: Job) -> io::Result<()> {
        let sent = match &self.jobs {
            Some(jobs) => jobs.send(job).is_ok(),
            None => false,
        };
        if sent { Ok(()) } else { Err(self.stop()) }
    }

    /// Hands the filled buffer to the thread, taking an emptied one back when there is one.
    fn hand_off(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let next = self
            .spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(HANDOFF_BYTES));
        let full = std::mem::replace(&mut self.buf, next);
        self.send(Job::Write(full))
    }

    /// Ends the thread and returns why it stopped early (it only does on an error).
    fn stop(&mut self) -> io::Error {
        match self.join() {
            Err(e) => e,
            Ok(_) => io::Error::other("the output file's writer has stopped"),
        }
    }

    /// Closes the queue and waits for the thread: the file, or the thread's error.
    fn join(&mut self) -> io::Result<File> {
        self.jobs = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(done)) => done,
            Some(Err(_)) => Err(io::Error::other(
                "the thread writing an output file panicked",
            )),
            None => Err(io::Error::other("the output file's writer has stopped")),
        }
    }

    /// Writes what is left, waits for the thread and returns the file, every byte written.
    pub(crate) fn finish(mut self) -> io::Result<File> {
        self.hand_off()?;
        self.join()
    }
}

/// A thread syncing a file's written bytes when asked, while they are still being written.
struct Syncer {
    requests: mpsc::SyncSender<()>,
    thread: JoinHandle<io::Result<()>>,
}

impl Syncer {
    /// Starts the thread, on its own handle of `file`.
    fn start(file: &File) -> io::Result<Self> {
        let file = file.try_clone()?;
        let (requests, todo) = mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("output-sync".into())
            .spawn(move || -> io::Result<()> {
                for () in todo {
                    // The handle shares the writer's open file: an error reported here is not
                    // reported again to the last sync, so it is returned from `finish`.
                    file.sync_data()?;
                }
                Ok(())
            })?;
        Ok(Self { requests, thread })
    }

    /// Asks for a sync, unless one is pending already (or the thread stopped on an error,
    /// which `finish` returns).
    fn request(&self) {
        let _ = self.requests.try_send(());
    }

    /// Waits for the thread; the error of a sync that failed.
    fn finish(self) -> io::Result<()> {
        drop(self.requests);
        self.thread.join().unwrap_or_else(|_| {
            Err(io::Error::other(
                "the thread syncing an output file panicked",
            ))
        })
    }
}

impl Write for LocalWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= HANDOFF_BYTES {
            self.hand_off()?;
        }
        Ok(bytes.len())
    }

    /// Returns once every byte written so far is in the file.
    fn flush(&mut self) -> io::Result<()> {
        self.hand_off()?;
        let (done, wait) = mpsc::sync_channel(1);
        self.send(Job::Flush(done))?;
        wait.recv().map_err(|_| self.stop())
    }
}

impl Drop for LocalWriter {
    /// Writes what is buffered, as a dropped `BufWriter` does (a cancelled batch's file keeps
    /// its header), then waits for the thread.
    fn drop(&mut self) {
        let _ = self.hand_off();
        let _ = self.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes of every size, across many hand-offs, a background sync and a flush in the
    /// middle, land in order.
    #[test]
    fn bytes_land_in_order_across_hand_offs() -> io::Result<()> {
        let seed = plexus_testkit::seed::seed("PLEXUS_TEST_SEED", "local_writer");
        let mut rng = crate::store::suite::Rng::new(seed);
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("out.csv");
        let mut w = LocalWriter::new(File::create(&path)?)?;
        let mut want = Vec::new();
        let mut n = 0u64;
        while want.len() < SYNC_EVERY + 5 * HANDOFF_BYTES {
            let len = match rng.below(10) {
                0 => rng.below(3 * HANDOFF_BYTES as u64) as usize,
                _ => rng.below(300) as usize,
            };
            let chunk: Vec<u8> = (0..len)
                .map(|_| {
                    n += 1;
                    (n % 251) as u8
                })
                .collect();
            w.write_all(&chunk)?;
            want.extend_from_slice(&chunk);
            if want.len() > 2 * HANDOFF_BYTES && want.len() - chunk.len() <= 2 * HANDOFF_BYTES {
                w.flush()?;
                assert_eq!(std::fs::read(&path)?, want, "seed {seed}: flushed");
            }
        }
        w.finish()?;
        assert_eq!(std::fs::read(&path)?, want, "seed {seed}");
        Ok(())
    }

    /// A writer dropped without `finish` has written every byte once the drop returns.
    #[test]
    fn a_dropped_writer_leaves_its_bytes() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("out.csv");
        let mut w = LocalWriter::new(File::create(&path)?)?;
        w.write_all(b"header\n")?;
        drop(w);
        assert_eq!(std::fs::read(&path)?, b"header\n");
        Ok(())
    }

    /// A write the device refuses is an error at the latest at `finish`, never a success.
    #[test]
    fn a_failing_write_is_reported() -> io::Result<()> {
        let full = File::options().write(true).open("/dev/full")?;
        let mut w = LocalWriter::new(full)?;
        let chunk = vec![b'x'; HANDOFF_BYTES / 2];
        let mut failed = false;
        for _ in 0..10 {
            if w.write_all(&chunk).is_err() {
                failed = true;
                break;
            }
        }
        if !failed {
            assert!(
                w.finish().is_err(),
                "finish after writes to /dev/full succeeded"
            );
        }
        Ok(())
    }
}
