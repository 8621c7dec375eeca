//! The watch log and a follower: deltas applied to a copy reproduce the ledger, whatever the
//! window, the answer size and when the follower asks. Seeded; `PLEXUS_WATCH_SEED` replays.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use super::*;

/// A command that changes the ledger (a heartbeat moves a peer's last sign of life; a key
/// registration adds a check, the first per id wins), or one the ledger refuses.
fn random_command(rng: &mut ChaCha8Rng, ts_ms: i64) -> Command {
    match rng.next_u32() % 3 {
        0 => Command::Heartbeat {
            peer: u64::from(rng.next_u32() % 5),
            queued: rng.next_u32() % 10,
            ts_ms,
        },
        1 => Command::RegisterKey {
            key_id: rng.next_u32() % 8,
            check: rng.next_u64().to_le_bytes().to_vec(),
        },
        _ => Command::StopRun {
            keyspace: "absent".into(),
            run_id: 1,
            comment: String::new(),
            ts_ms,
        },
    }
}

/// The peer's side: a ledger and its watch log, filled as the state machine fills them.
struct Source {
    ledger: Ledger,
    log: WatchLog,
    version: u64,
}

impl Source {
    fn step(&mut self, rng: &mut ChaCha8Rng) {
        self.version += 1;
        // One entry in ten is blank or a membership change: a version without a command.
        if rng.next_u32().is_multiple_of(10) {
            self.log.record(self.version, None);
            return;
        }
        let cmd = random_command(rng, self.version as i64);
        let _ = self.ledger.apply(cmd.clone());
        self.log.record(self.version, Some(&cmd));
    }

    /// What `PeerCore::watch` answers, without the wait.
    fn answer(&self, since: Option<u64>) -> WatchAnswer {
        if let Some(since) = since
            && let Some((version, commands)) = self.log.delta(since)
        {
            return WatchAnswer::Delta { version, commands };
        }
        WatchAnswer::Snapshot {
            version: self.log.version(),
            ledger: self.ledger.to_bytes().expect("the ledger encodes"),
        }
    }
}

#[test]
fn deltas_applied_to_a_copy_reproduce_the_ledger() {
    let seed = plexus_testkit::seed::seed(
        "PLEXUS_WATCH_SEED",
        "deltas_applied_to_a_copy_reproduce_the_ledger",
    );
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for trial in 0..50 {
        let window = 1 + (rng.next_u32() % 40) as usize;
        let mut src = Source {
            ledger: Ledger::new(),
            log: WatchLog::new(0, window),
            version: 0,
        };
        let mut follower = LedgerFollower::new();
        let (mut snapshots, mut deltas) = (0, 0);
        for _ in 0..(200 + rng.next_u32() % 2000) {
            // The follower asks after a random number of entries: sometimes within the
            // window, sometimes far behind it.
            for _ in 0..rng.next_u32() % (2 * window as u32 + 2) {
                src.step(&mut rng);
            }
            // Until it has caught up (a delta holds at most MAX_DELTA_COMMANDS).
            loop {
                let answer = src.answer(follower.version());
                match &answer {
                    WatchAnswer::Snapshot { .. } => snapshots += 1,
                    WatchAnswer::Delta { .. } => deltas += 1,
                }
                follower.apply(answer).expect("the answer applies");
                if follower.version() == Some(src.version) {
                    break;
                }
            }
            assert_eq!(
                follower.ledger(),
                &src.ledger,
                "seed {seed}, trial {trial}, window {window}, version {}",
                src.version
            );
        }
        assert!(
            snapshots >= 1,
            "seed {seed}: the first answer is a snapshot"
        );
        assert!(deltas >= 1, "seed {seed}, trial {trial}: no delta");
    }
}

#[test]
fn a_client_behind_the_window_gets_none_and_one_inside_gets_the_rest_in_pages() {
    let log = WatchLog::new(10, 3);
    let cmd = |i: i64| Command::Heartbeat {
        peer: 1,
        queued: 0,
        ts_ms: i,
    };
    for v in 11..=15 {
        log.record(v, Some(&cmd(v as i64)));
    }
    // The window holds 13, 14, 15: complete from 12 on.
    assert!(log.delta(11).is_none());
    let (version, commands) = log.delta(12).expect("inside the window");
    assert_eq!(version, 15);
    assert_eq!(
        commands.iter().map(|(v, _)| *v).collect::<Vec<_>>(),
        [13, 14, 15]
    );
    // A client ahead of this peer (it followed another one) is told nothing new.
    assert_eq!(log.delta(20), Some((20, Vec::new())));
    // A snapshot installed: everything before it is gone.
    log.reset(100);
    assert!(log.delta(15).is_none());
    assert_eq!(log.delta(100), Some((100, Vec::new())));

    let big = WatchLog::new(0, 2 * MAX_DELTA_COMMANDS);
    for v in 1..=(MAX_DELTA_COMMANDS as u64 + 7) {
        big.record(v, Some(&cmd(v as i64)));
    }
    let (first, page) = big.delta(0).expect("inside the window");
    assert_eq!(page.len(), MAX_DELTA_COMMANDS);
    assert_eq!(first, MAX_DELTA_COMMANDS as u64);
    let (last, rest) = big.delta(first).expect("inside the window");
    assert_eq!((last, rest.len()), (MAX_DELTA_COMMANDS as u64 + 7, 7));
}

#[test]
fn a_long_poll_returns_on_a_change_or_after_its_wait() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let log = std::sync::Arc::new(WatchLog::new(0, 8));
        let start = std::time::Instant::now();
        log.wait_past(0, Duration::from_millis(50)).await;
        assert!(start.elapsed() >= Duration::from_millis(50));
        let writer = log.clone();
        let t = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            writer.record(1, None);
        });
        let start = std::time::Instant::now();
        log.wait_past(0, Duration::from_secs(5)).await;
        assert!(start.elapsed() < Duration::from_secs(4));
        assert_eq!(log.version(), 1);
        assert!(log.wait_reach(1, Duration::from_millis(1)).await);
        assert!(!log.wait_reach(2, Duration::from_millis(20)).await);
        t.await.expect("the writer");
    });
}
