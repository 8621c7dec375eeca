//! The leader's group commit: proposals reaching the leader within a short window go into the
//! log as one [`Command::Batch`] entry, so the leader's replication rounds (and its messages to
//! the other voters) are capped by the window, not by how many peers propose. Each proposer
//! still gets its own command's answer ([`split`]).
//!
//! [`split`] and [`batch`] are pure. [`GroupCommit`] is the peer-side driver: it waits the
//! window on tokio's clock, so unlike the ledger it reads time; it never touches the ledger and
//! has no effect on what the log means (a batch applies exactly as its commands one by one).

use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::command::{Command, Event};
use crate::replicated::Applied;

/// One log entry for `commands`: the command itself when there is one, else a batch.
pub fn batch(mut commands: Vec<Command>) -> Command {
    match commands.len() {
        1 => commands.remove(0),
        _ => Command::Batch { commands },
    }
}

/// The answers of the `n` commands [`batch`] made one entry of, in their order: the entry's
/// answer itself when `n` is 1, else its events cut at each [`Event::ProposalApplied`]. An
/// entry refused as a whole (or not applied) gives every command its answer; a command past
/// the markers an accepted answer holds gets no events.
pub fn split(applied: Applied, n: usize) -> Vec<Applied> {
    if n == 1 {
        return vec![applied];
    }
    let Applied(Some(Ok(events))) = applied else {
        return vec![applied; n];
    };
    let mut out = Vec::with_capacity(n);
    let mut current = Vec::new();
    for e in events {
        match e {
            Event::ProposalApplied { refused: Some(err) } => {
                current.clear();
                out.push(Applied(Some(Err(err))));
            }
            Event::ProposalApplied { refused: None } => {
                out.push(Applied(Some(Ok(std::mem::take(&mut current)))));
            }
            e => current.push(e),
        }
    }
    out.resize_with(n, || Applied(Some(Ok(Vec::new()))));
    out
}

/// Proposals in one entry beyond which the leader counts as saturated by its proposers: up
/// to this many (12,800 proposals a second at a 5 ms window) the window is as given.
pub const FULL_ENTRY: usize = 64;

/// At most this many windows between the writes of a saturated leader.
pub const MAX_STRETCH: f64 = 2.0;

/// How long a busy leader waits from the start of its last write, which carried `last`
/// proposals: `window`, stretched in proportion as that entry was fuller than [`FULL_ENTRY`],
/// up to [`MAX_STRETCH`] windows. A leader that fills its entries is limited by its round
/// rate, not by its proposers' latency, so under executors' load its rounds (and messages to
/// the other voters) fall to half the window's cap instead of sitting at it; a small cluster,
/// whose entries stay small, keeps the plain window.
pub fn busy_window(window: Duration, last: usize) -> Duration {
    let stretch = (last as f64 / FULL_ENTRY as f64).clamp(1.0, MAX_STRETCH);
    window.mul_f64(stretch)
}

/// Proposals of the open window and where their answers go.
struct Window<E> {
    /// Which window this is; a leader that gave up empties only its own.
    generation: u64,
    commands: Vec<Command>,
    answers: Vec<oneshot::Sender<Result<Applied, E>>>,
    /// When the last write started, while the leader is busy (none once a write finished
    /// with nothing gathered after it).
    busy_since: Option<Instant>,
    /// Proposals the last write carried ([`busy_window`]).
    last_entry: usize,
}

/// The group commit of one leader: at most one write per window while proposals keep coming.
/// A proposal reaching an idle leader (no write started within the window, or the last one
/// finished with nothing waiting) is written at once, so a lone proposer pays no window; one
/// reaching a busy leader waits for the window that began with the last write and goes out
/// with everything gathered by then, as one entry.
pub struct GroupCommit<E> {
    window: Duration,
    open: Mutex<Window<E>>,
}

/// Empties a window its leader abandoned (the leader's future was dropped before it wrote):
/// the other proposers' answers are dropped, so they see [`GroupCommit::propose`] give `None`
/// and propose again, instead of waiting for a write nobody will make.
struct Abandon<'a, E> {
    commit: &'a GroupCommit<E>,
    generation: Option<u64>,
}

impl<E> Drop for Abandon<'_, E> {
    fn drop(&mut self) {
        if let Some(g) = self.generation {
            let mut w = self.commit.lock();
            if w.generation == g {
                w.generation += 1;
                w.commands.clear();
                w.answers.clear();
            }
        }
    }
}

impl<E> GroupCommit<E> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Window<E>> {
        // The window holds no invariant a panicking holder could break halfway.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<E: Clone> GroupCommit<E> {
    /// A group commit holding proposals for `window` (zero: every proposal is its own entry).
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            open: Mutex::new(Window {
                generation: 0,
                commands: Vec::new(),
                answers: Vec::new(),
                busy_since: None,
                last_entry: 0,
            }),
        }
    }

    /// Commits `cmd` with the proposals that reach this leader within the window: the first
    /// of a window waits until the window that began with the last write is over (not at all
    /// when the leader is idle), then `write`s all of them as one entry; the others wait for
    /// its answer. `write` is the Raft write (`client_write`), called at most once, and only
    /// by the first. Gives this command's answer, the write's error (every proposal of the
    /// window gets it), or `None` when the window's first proposer was cancelled before it
    /// wrote (nothing was written: propose again).
    pub async fn propose<F, Fut>(&self, cmd: Command, write: F) -> Option<Result<Applied, E>>
    where
        F: FnOnce(Command) -> Fut,
        Fut: Future<Output = Result<Applied, E>>,
    {
        if self.window.is_zero() {
            return Some(write(cmd).await);
        }
        let (tx, rx) = oneshot::channel();
        let first = {
            let mut w = self.lock();
            w.commands.push(cmd);
            w.answers.push(tx);
            (w.commands.len() == 1).then_some((w.generation, w.busy_since, w.last_entry))
        };
        if let Some((generation, busy_since, last_entry)) = first {
            let mut guard = Abandon {
                commit: self,
                generation: Some(generation),
            };
            if let Some(since) = busy_since {
                tokio::time::sleep_until(since + busy_window(self.window, last_entry)).await;
            }
            let (commands, answers) = {
                let mut w = self.lock();
                w.generation += 1;
                w.busy_since = Some(Instant::now());
                w.last_entry = w.commands.len();
                (
                    std::mem::take(&mut w.commands),
                    std::mem::take(&mut w.answers),
                )
            };
            guard.generation = None;
            let n = commands.len();
            let written = write(batch(commands)).await;
            {
                let mut w = self.lock();
                if w.commands.is_empty() {
                    // Nothing gathered while this write ran: the next proposal is alone.
                    w.busy_since = None;
                }
            }
            match written {
                Ok(applied) => {
                    for (a, tx) in split(applied, n).into_iter().zip(answers) {
                        // A proposer that went away no longer wants its answer.
                        let _ = tx.send(Ok(a));
                    }
                }
                Err(e) => {
                    for tx in answers {
                        let _ = tx.send(Err(e.clone()));
                    }
                }
            }
        }
        rx.await.ok()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::error::LedgerError;
    use crate::ledger::Ledger;

    fn key(key_id: u32) -> Command {
        Command::RegisterKey {
            key_id,
            check: vec![key_id as u8],
        }
    }

    fn drop_unknown() -> Command {
        Command::DropKeyspace {
            keyspace: "nope".into(),
        }
    }

    /// A batch applies as its commands one by one: each proposer gets the events its own
    /// command would have given, a refused command refuses only itself, and the ledger ends
    /// byte-identical to applying them separately.
    #[test]
    fn a_batch_applies_and_answers_like_its_commands_one_by_one() -> Result<(), LedgerError> {
        let cmds = vec![key(1), drop_unknown(), key(1), key(2)];
        let mut one_by_one = Ledger::new();
        let separate: Vec<Applied> = cmds
            .iter()
            .map(|c| Applied(Some(one_by_one.apply(c.clone()))))
            .collect();
        let mut batched = Ledger::new();
        let entry = batch(cmds.clone());
        assert!(matches!(entry, Command::Batch { .. }));
        let answers = split(Applied(Some(batched.apply(entry))), cmds.len());
        assert_eq!(answers, separate);
        assert!(matches!(answers[1].0, Some(Err(_))));
        assert_eq!(batched.to_bytes()?, one_by_one.to_bytes()?);
        Ok(())
    }

    /// A batch inside a batch is refused item by item, and one command is never wrapped.
    #[test]
    fn nested_batches_are_refused_and_single_commands_stay_single() -> Result<(), LedgerError> {
        assert_eq!(batch(vec![key(3)]), key(3));
        let mut l = Ledger::new();
        let inner = Command::Batch {
            commands: vec![key(1), key(2)],
        };
        let answers = split(Applied(Some(l.apply(batch(vec![inner, key(4)])))), 2);
        assert_eq!(answers[0], Applied(Some(Err(LedgerError::NestedBatch))));
        assert!(matches!(&answers[1].0, Some(Ok(ev)) if ev.len() == 1));
        Ok(())
    }

    /// A busy leader's window stays as given while its entries are small (a small cluster
    /// pays nothing more) and stretches in proportion once they are fuller than
    /// [`FULL_ENTRY`], at most [`MAX_STRETCH`] windows, so a saturated leader's round rate
    /// falls instead of growing with its proposers.
    #[test]
    fn a_saturated_leader_stretches_its_window_up_to_twice() {
        let w = Duration::from_millis(5);
        assert_eq!(busy_window(w, 0), w);
        assert_eq!(busy_window(w, 1), w);
        assert_eq!(busy_window(w, FULL_ENTRY), w);
        assert_eq!(busy_window(w, FULL_ENTRY * 3 / 2), w.mul_f64(1.5));
        assert_eq!(busy_window(w, FULL_ENTRY * 2), w * 2);
        assert_eq!(busy_window(w, 100_000), w * 2);
        // Monotone: a fuller entry never shortens the wait.
        let waits: Vec<Duration> = (0..400).map(|n| busy_window(w, n)).collect();
        assert!(waits.windows(2).all(|p| p[0] <= p[1]));
    }

    fn runtime() -> tokio::runtime::Runtime {
        match tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => panic!("a test runtime: {e}"),
        }
    }

    /// A lone proposal is written at once; proposals made while a write is in flight become
    /// one write, and each proposer gets its own command's answer.
    #[test]
    fn proposals_within_a_window_are_one_write() {
        runtime().block_on(async {
            // A window far longer than a stall of a loaded machine's test thread: a lone
            // proposal that waited for it could not pass for one written at once.
            let window = Duration::from_secs(1);
            let gc: Arc<GroupCommit<String>> = Arc::new(GroupCommit::new(window));
            let ledger = Arc::new(Mutex::new(Ledger::new()));
            let writes = Arc::new(AtomicUsize::new(0));
            let propose = |c: Command| {
                let (gc, ledger, writes) = (gc.clone(), ledger.clone(), writes.clone());
                tokio::spawn(async move {
                    gc.propose(c, |entry| async move {
                        writes.fetch_add(1, Ordering::SeqCst);
                        // A write takes a while (replication), as on a real leader.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        let mut l = ledger.lock().unwrap_or_else(PoisonError::into_inner);
                        Ok(Applied(Some(l.apply(entry))))
                    })
                    .await
                })
            };
            // A lone proposal to an idle leader is written at once, without the window.
            let started = Instant::now();
            let alone = propose(key(9)).await.ok().flatten();
            assert!(matches!(alone, Some(Ok(Applied(Some(Ok(_)))))));
            assert!(started.elapsed() < window / 2, "{:?}", started.elapsed());
            assert_eq!(writes.load(Ordering::SeqCst), 1);
            // Proposals arriving while the leader is busy (a write in flight) wait for the
            // window that began with that write and go out together.
            let busy = propose(key(10));
            tokio::task::yield_now().await;
            let handles: Vec<_> = (1..=5).map(|k| propose(key(k))).collect();
            let refused = propose(drop_unknown());
            for (k, h) in (1..=5).zip(handles) {
                let answer = h.await.ok().flatten();
                let expect = Event::KeyRegistered {
                    key_id: k,
                    already_known: false,
                };
                assert_eq!(answer, Some(Ok(Applied(Some(Ok(vec![expect]))))));
            }
            assert!(matches!(
                refused.await.ok().flatten(),
                Some(Ok(Applied(Some(Err(LedgerError::UnknownKeyspace { .. })))))
            ));
            assert!(matches!(
                busy.await.ok().flatten(),
                Some(Ok(Applied(Some(Ok(_)))))
            ));
            // `busy` was written at once (the leader was idle again); the six that arrived
            // during its write are one more.
            assert_eq!(writes.load(Ordering::SeqCst), 3);
            let late = propose(key(1)).await.ok().flatten();
            assert!(matches!(late, Some(Ok(Applied(Some(Ok(_)))))));
            assert_eq!(writes.load(Ordering::SeqCst), 4);
        });
    }

    /// The write's error reaches every proposer of the window; a cancelled first proposer
    /// releases the others (they get `None` and may propose again) instead of leaving them
    /// waiting, and the next window works.
    #[test]
    fn errors_reach_everyone_and_a_cancelled_window_releases_its_proposers() {
        runtime().block_on(async {
            let gc: Arc<GroupCommit<String>> =
                Arc::new(GroupCommit::new(Duration::from_millis(20)));
            let fail = |gc: Arc<GroupCommit<String>>, c: Command| {
                tokio::spawn(async move {
                    gc.propose(c, |_| async { Err("no leader".to_owned()) })
                        .await
                })
            };
            // A write in flight for 10 ms keeps the leader busy, so what arrives meanwhile
            // waits for the window instead of being written at once.
            let slow = |gc: Arc<GroupCommit<String>>| {
                tokio::spawn(async move {
                    gc.propose(key(7), |_| async {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        Err("no leader".to_owned())
                    })
                    .await
                })
            };
            let in_flight = slow(gc.clone());
            tokio::time::sleep(Duration::from_millis(2)).await;
            let (a, b) = (fail(gc.clone(), key(1)), fail(gc.clone(), key(2)));
            for h in [in_flight, a, b] {
                assert_eq!(h.await.ok().flatten(), Some(Err("no leader".to_owned())));
            }
            // The cancel: a write the test holds open keeps the leader busy, and the window is
            // longer than any test, so the first proposer of the next window is still waiting
            // for it when it is cancelled (a 10 ms write and 2 ms steps lost their order when a
            // loaded machine stalled this thread: the write ended first, and the next proposal
            // was written at once).
            let gc: Arc<GroupCommit<String>> =
                Arc::new(GroupCommit::new(Duration::from_secs(3600)));
            let (started_tx, started_rx) = oneshot::channel::<()>();
            let (release_tx, release_rx) = oneshot::channel::<()>();
            let in_flight = {
                let gc = gc.clone();
                tokio::spawn(async move {
                    gc.propose(key(7), |_| async move {
                        let _ = started_tx.send(());
                        let _ = release_rx.await;
                        Err("no leader".to_owned())
                    })
                    .await
                })
            };
            assert_eq!(started_rx.await, Ok(()), "the held write never started");
            // Waits until `n` proposals wait in the open window.
            let gathered = |n: usize| {
                let gc = gc.clone();
                async move {
                    for _ in 0..100_000 {
                        if gc.lock().commands.len() >= n {
                            return;
                        }
                        tokio::task::yield_now().await;
                    }
                    panic!("{n} proposals never reached the open window");
                }
            };
            let first = fail(gc.clone(), key(1));
            gathered(1).await;
            let second = fail(gc.clone(), key(2));
            gathered(2).await;
            first.abort();
            assert_eq!(second.await.ok().flatten(), None);
            let _ = release_tx.send(());
            assert_eq!(
                in_flight.await.ok().flatten(),
                Some(Err("no leader".to_owned()))
            );
            let again = gc.propose(key(3), |_| async { Ok(Applied(None)) }).await;
            assert_eq!(again, Some(Ok(Applied(None))));
        });
    }
}
