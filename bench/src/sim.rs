//! `plexus-bench sim`: the cluster's scheduling at a scale this machine cannot host — the real
//! ledger (`plexus_raft::Ledger`, every command applied as on a peer) and the real scheduling
//! decisions (`plexus_node::schedule`: chunk sizes, steal targets and shares, heartbeats,
//! lease expiry) driven by simulated peers, network and time.
//!
//! What is simulated: time (a discrete event queue), batch execution (a duration per batch
//! drawn from a lognormal distribution, fixed per batch so a re-run takes as long), Raft (a
//! command is applied `commit_ms` after it is proposed, one order for everybody), the network
//! (`rtt_ms` per steal request) and deaths (a killed peer's deque and running batches are
//! lost; its leases expire). What is measured: the makespan against the ideal (total work /
//! threads), Raft entries per batch by kind, replication rounds and leader messages per
//! second, steals, and the ledger's apply time per batch.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use plexus_core::plan::Plan;
use plexus_core::task::BatchTask;
use plexus_node::schedule;
use plexus_raft::command::{PeerId, SealedClaim, TaskOutcome, TaskRef, TaskResult};
use plexus_raft::{Command, Event, Ledger, RunStatus};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// CLI options of `plexus-bench sim`.
#[derive(Clone, Debug, clap::Args)]
pub struct SimArgs {
    /// Peer counts to simulate, one run each (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    pub peers: Vec<usize>,
    /// Executor threads per peer.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Batches of the run (one file-reader node).
    #[arg(long, default_value_t = 100_000)]
    pub batches: u32,
    /// Median batch time, ms.
    #[arg(long, default_value_t = 1000.0)]
    pub median_ms: f64,
    /// Log-space standard deviation of batch times (skew).
    #[arg(long, default_value_t = 0.6)]
    pub sigma: f64,
    /// Fraction of peers killed at random moments of the run.
    #[arg(long, default_value_t = 0.01)]
    pub kill: f64,
    /// Proposal to apply on every peer, ms.
    #[arg(long, default_value_t = 2.0)]
    pub commit_ms: f64,
    /// Peer-to-peer round trip, ms.
    #[arg(long, default_value_t = 0.5)]
    pub rtt_ms: f64,
    /// Lease, ms.
    #[arg(long, default_value_t = 5000)]
    pub lease_ms: u64,
    /// Lease renewal, ms.
    #[arg(long, default_value_t = 1000)]
    pub renew_ms: u64,
    /// Claim window per thread, ms.
    #[arg(long, default_value_t = 100)]
    pub window_ms: u64,
    /// Seed of durations and deaths.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Simulated time in microseconds.
type Us = u64;

fn us(ms: f64) -> Us {
    (ms * 1000.0) as Us
}

#[derive(Debug)]
enum Ev {
    /// A thread looks for work.
    Free { peer: usize, thread: usize },
    /// A batch finished on a thread.
    Done {
        peer: usize,
        thread: usize,
        task: TaskRef,
        ms: f64,
    },
    /// A proposal is applied.
    Apply { from: usize, cmd: Box<Command> },
    /// Heartbeats and the leader's duties.
    Tick,
    /// A peer dies.
    Kill { peer: usize },
}

struct SimPeer {
    id: PeerId,
    alive: bool,
    deque: VecDeque<TaskRef>,
    outcomes: Vec<TaskResult>,
    committing: bool,
    claiming: bool,
    stealing: bool,
    batch_ms: Option<f64>,
    reported_queued: u32,
    salt: u64,
    /// Threads blocked on the peer's claim or steal in flight (as on the claim lock).
    waiting: Vec<usize>,
}

/// Entries by kind, for the report.
#[derive(Default)]
struct Counts {
    claims: u64,
    completions: u64,
    heartbeats: u64,
    transfers: u64,
    leader: u64,
    steals_asked: u64,
    steals_granted: u64,
    tasks_moved: u64,
    rounds: u64,
    last_round_ms: u64,
    apply: Duration,
}

impl Counts {
    fn entries(&self) -> u64 {
        self.claims + self.completions + self.heartbeats + self.transfers + self.leader
    }
}

struct Sim<'a> {
    a: &'a SimArgs,
    ledger: Ledger,
    peers: Vec<SimPeer>,
    queue: BinaryHeap<Reverse<(Us, u64, usize)>>,
    events: Vec<Option<Ev>>,
    seq: u64,
    now: Us,
    durations: Vec<f64>,
    counts: Counts,
    ks: String,
}

/// Batches per node: a node holds at most 32,767 (spec), so larger runs use several nodes.
const PER_NODE: u32 = 25_000;

/// A plan of independent file-reader nodes `read0`, `read1`, … with `batches` batches in all
/// (their files are never read).
fn plan(batches: u32) -> Result<Plan> {
    let mut nodes = serde_json::Map::new();
    let mut left = batches;
    let mut k = 0;
    while left > 0 {
        let n = left.min(PER_NODE);
        left -= n;
        let urls: Vec<String> = (0..n).map(|i| format!("/sim/{k}/{i}.csv")).collect();
        nodes.insert(
            format!("read{k}"),
            serde_json::json!({
                "type": "file_table",
                "r": {
                    "urls": urls,
                    "csv": {"hdr_line_idx": 0, "first_data_line_idx": 1},
                    "columns": {"col_a": {"col_type": "int", "csv": {"col_hdr": "a", "col_format": "%d"}}}
                },
                "w": {"name": format!("t{k}"), "fields": {"a": {"expression": "r.col_a", "type": "int"}}}
            }),
        );
        k += 1;
    }
    let script = serde_json::json!({
        "dependency_policies": plexus_node::files::default_policies(),
        "nodes": nodes
    });
    let loaded = plexus_script::load::load_script_text(
        &plexus_script::LocalFiles,
        &script.to_string(),
        plexus_script::load::ScriptFormat::Json,
        "sim.json",
        None,
    )
    .context("the simulation's script")?;
    plexus_script::compile(&loaded).map_err(|d| anyhow::anyhow!("{d:?}"))
}

/// Where a batch's duration is in the run's list.
fn duration_index(t: &TaskRef) -> usize {
    let node: usize = t.batch.node.trim_start_matches("read").parse().unwrap_or(0);
    node * PER_NODE as usize + t.batch.batch_idx as usize
}

fn lognormal(rng: &mut ChaCha8Rng, median: f64, sigma: f64) -> f64 {
    // Box-Muller on two uniform draws.
    let u = |r: &mut ChaCha8Rng| ((r.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let (a, b) = (u(rng), u(rng));
    let z = (-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos();
    median * (sigma * z).exp()
}

impl<'a> Sim<'a> {
    fn push(&mut self, at: Us, ev: Ev) {
        self.seq += 1;
        self.events.push(Some(ev));
        let i = self.events.len() - 1;
        self.queue.push(Reverse((at, self.seq, i)));
    }

    fn ms(&self) -> i64 {
        (self.now / 1000) as i64
    }

    fn propose(&mut self, from: usize, cmd: Command, extra_ms: f64) {
        let at = self.now + us(self.a.commit_ms + extra_ms);
        self.push(
            at,
            Ev::Apply {
                from,
                cmd: Box::new(cmd),
            },
        );
    }

    fn run_done(&self) -> bool {
        !matches!(self.ledger.run_status(&self.ks, 1), Ok(RunStatus::Start))
    }

    /// A thread of `p` looks for work: its deque, else a claim, else a steal.
    fn free(&mut self, p: usize, thread: usize) {
        if !self.peers[p].alive || self.run_done() {
            return;
        }
        if let Some(task) = self.peers[p].deque.pop_front() {
            let ms = self.durations[duration_index(&task)];
            let at = self.now + us(ms);
            self.push(
                at,
                Ev::Done {
                    peer: p,
                    thread,
                    task,
                    ms,
                },
            );
            return;
        }
        // An idle executor looks again after IDLE_POLL (or when the ledger changes).
        let poll = self.now + us(200.0);
        if self.peers[p].claiming || self.peers[p].stealing {
            self.peers[p].waiting.push(thread);
            return;
        }
        let me = self.peers[p].id;
        let since = self.ms() - 2 * self.a.lease_ms as i64;
        self.peers[p].salt = self.peers[p].salt.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let picked: Vec<BatchTask> = self.ledger.pick_chunk(None, 256, self.peers[p].salt);
        if let Some(first) = picked.first() {
            let claimable = self.ledger.claimable(&first.keyspace, first.run_id);
            let live = schedule::live_peers(&self.ledger, me, since);
            let n = schedule::chunk_size(
                Duration::from_millis(self.a.window_ms),
                self.peers[p].batch_ms,
                self.a.threads,
                256,
                claimable,
                live,
            );
            let tasks = picked
                .iter()
                .take(n)
                .map(|t| SealedClaim {
                    node: t.node.clone(),
                    batch_idx: t.batch_idx,
                    reader_run: t.reader_run,
                    lookup_run: t.lookup_run,
                    sealed: vec![0; 64],
                })
                .collect();
            let cmd = Command::ClaimTasks {
                keyspace: self.ks.clone(),
                run_id: 1,
                peer: me,
                worker: format!("n{me}"),
                tasks,
                ts_ms: self.ms(),
            };
            self.peers[p].claiming = true;
            self.propose(p, cmd, self.a.rtt_ms);
            self.peers[p].waiting.push(thread);
            return;
        }
        // Nothing claimable: steal.
        if let Some((victim, max)) = schedule::steal_target(&self.ledger, me, since) {
            self.counts.steals_asked += 1;
            let v = (victim - 1) as usize;
            let given: Vec<TaskRef> = if self.peers[v].alive {
                let k = schedule::give_count(max as usize, self.peers[v].deque.len());
                let at = self.peers[v].deque.len() - k;
                self.peers[v].deque.split_off(at).into()
            } else {
                Vec::new()
            };
            if !given.is_empty() {
                let cmd = Command::TransferTasks {
                    from: victim,
                    to: me,
                    to_worker: format!("n{me}"),
                    tasks: given,
                    ts_ms: self.ms(),
                };
                self.peers[p].stealing = true;
                // The victim proposes after the request's half round trip.
                self.propose(v, cmd, self.a.rtt_ms);
                self.peers[p].waiting.push(thread);
                return;
            }
        }
        self.push(poll, Ev::Free { peer: p, thread });
    }

    fn done(&mut self, p: usize, thread: usize, task: TaskRef, ms: f64) {
        if !self.peers[p].alive {
            return;
        }
        let peer = &mut self.peers[p];
        peer.batch_ms = Some(peer.batch_ms.map_or(ms, |m| 0.7 * m + 0.3 * ms));
        peer.outcomes.push(TaskResult {
            task,
            outcome: TaskOutcome::Done {
                rows_in: 1,
                rows_out: 1,
                elapsed_ms: ms as u64,
            },
        });
        self.flush(p);
        self.free(p, thread);
    }

    /// Group commit: one completion entry in flight per peer.
    fn flush(&mut self, p: usize) {
        let ts_ms = self.ms();
        let peer = &mut self.peers[p];
        if peer.committing || peer.outcomes.is_empty() {
            return;
        }
        let results = std::mem::take(&mut peer.outcomes);
        let cmd = Command::CompleteTasks {
            peer: peer.id,
            results,
            ts_ms,
        };
        peer.committing = true;
        self.propose(p, cmd, self.a.rtt_ms);
    }

    fn apply(&mut self, from: usize, cmd: Command) {
        match &cmd {
            Command::ClaimTasks { .. } => self.counts.claims += 1,
            Command::CompleteTasks { .. } => self.counts.completions += 1,
            Command::Heartbeat { .. } => self.counts.heartbeats += 1,
            Command::TransferTasks { .. } => self.counts.transfers += 1,
            _ => self.counts.leader += 1,
        }
        let round = self.now / 1000;
        if round != self.counts.last_round_ms || self.counts.rounds == 0 {
            self.counts.rounds += 1;
            self.counts.last_round_ms = round;
        }
        let kind_claim = matches!(cmd, Command::ClaimTasks { .. });
        let kind_complete = matches!(cmd, Command::CompleteTasks { .. });
        let transfer_to = match &cmd {
            Command::TransferTasks { to, .. } => Some((*to - 1) as usize),
            _ => None,
        };
        let started = Instant::now();
        let r = self.ledger.apply(cmd);
        self.counts.apply += started.elapsed();
        let events = r.unwrap_or_default();
        if kind_claim {
            self.peers[from].claiming = false;
            self.wake(from);
        }
        if kind_complete {
            self.peers[from].committing = false;
            self.flush(from);
        }
        for e in events {
            match e {
                Event::BatchClaimed { task, peer, .. } => {
                    let p = (peer - 1) as usize;
                    if self.peers[p].alive {
                        self.peers[p].deque.push_back(task);
                    }
                }
                Event::BatchTransferred { task, to, .. } => {
                    let p = (to - 1) as usize;
                    self.counts.tasks_moved += 1;
                    if self.peers[p].alive {
                        self.peers[p].deque.push_back(task);
                    }
                }
                _ => {}
            }
        }
        if let Some(thief) = transfer_to {
            self.peers[thief].stealing = false;
            self.counts.steals_granted += 1;
            self.wake(thief);
        }
    }

    /// The threads of `p` blocked on its claim or steal go on.
    fn wake(&mut self, p: usize) {
        for t in std::mem::take(&mut self.peers[p].waiting) {
            let now = self.now;
            self.push(now, Ev::Free { peer: p, thread: t });
        }
    }

    fn tick(&mut self) {
        let now = self.ms();
        let renew = Duration::from_millis(self.a.renew_ms);
        for p in 0..self.peers.len() {
            if !self.peers[p].alive {
                continue;
            }
            let queued = self.peers[p].deque.len() as u32;
            let me = self.peers[p].id;
            if schedule::needs_heartbeat(
                &self.ledger,
                me,
                now,
                renew,
                queued,
                self.peers[p].reported_queued,
            ) {
                self.peers[p].reported_queued = queued;
                let cmd = Command::Heartbeat {
                    peer: me,
                    queued,
                    ts_ms: now,
                };
                self.propose(p, cmd, self.a.rtt_ms);
            }
        }
        // Peer 1 leads the whole run (it is never killed).
        let leading = Duration::from_millis(now as u64);
        let cmds = schedule::leader_commands(
            &self.ledger,
            now,
            Duration::from_millis(self.a.lease_ms),
            renew,
            leading,
        );
        for c in cmds {
            self.propose(0, c, 0.0);
        }
        if !self.run_done() {
            let at = self.now + us(self.a.renew_ms as f64);
            self.push(at, Ev::Tick);
        }
    }

    fn kill(&mut self, p: usize) {
        let peer = &mut self.peers[p];
        peer.alive = false;
        peer.deque.clear();
        peer.outcomes.clear();
    }
}

/// One simulated run on `n` peers; prints its figures.
fn simulate(a: &SimArgs, plan: &Plan, n: usize) -> Result<()> {
    if n < 2 {
        bail!("simulate at least 2 peers");
    }
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed);
    let durations: Vec<f64> = (0..a.batches.div_ceil(PER_NODE) * PER_NODE)
        .map(|_| lognormal(&mut rng, a.median_ms, a.sigma))
        .collect();
    let total_ms: f64 = plan
        .nodes
        .iter()
        .enumerate()
        .map(|(k, node)| {
            let from = k * PER_NODE as usize;
            durations[from..from + node.batches as usize]
                .iter()
                .sum::<f64>()
        })
        .sum();
    let ideal_ms = total_ms / (n * a.threads) as f64;
    // The best a scheduler that does not know durations can do: one central queue, no
    // overhead, no deaths, every thread taking the next batch the moment it is free.
    let oracle_ms = {
        let mut free: BinaryHeap<Reverse<u64>> = (0..n * a.threads).map(|_| Reverse(0)).collect();
        for (k, node) in plan.nodes.iter().enumerate() {
            let from = k * PER_NODE as usize;
            for d in &durations[from..from + node.batches as usize] {
                let Reverse(t) = free.pop().unwrap_or(Reverse(0));
                free.push(Reverse(t + us(*d)));
            }
        }
        free.into_iter().map(|Reverse(t)| t).max().unwrap_or(0) as f64 / 1000.0
    };
    let mut ledger = Ledger::new();
    let hash = plexus_core::task::PlanHash(plan.content_hash().context("plan hash")?);
    ledger.apply(Command::SubmitPlan { plan: plan.clone() })?;
    ledger.apply(Command::StartRun {
        keyspace: "sim".into(),
        plan_hash: hash,
        start_nodes: plan.nodes.iter().map(|n| n.name.clone()).collect(),
        description: String::new(),
        only_start_nodes: false,
        ts_ms: 0,
    })?;
    let peers = (0..n)
        .map(|i| SimPeer {
            id: i as PeerId + 1,
            alive: true,
            deque: VecDeque::new(),
            outcomes: Vec::new(),
            committing: false,
            claiming: false,
            stealing: false,
            batch_ms: None,
            reported_queued: 0,
            salt: rng.next_u64(),
            waiting: Vec::new(),
        })
        .collect();
    let mut sim = Sim {
        a,
        ledger,
        peers,
        queue: BinaryHeap::new(),
        events: Vec::new(),
        seq: 0,
        now: 0,
        durations,
        counts: Counts::default(),
        ks: "sim".into(),
    };
    for p in 0..n {
        for t in 0..a.threads {
            // Peers come up within the first 100 ms.
            let at = rng.next_u64() % 100_000;
            sim.push(at, Ev::Free { peer: p, thread: t });
        }
    }
    sim.push(us(a.renew_ms as f64), Ev::Tick);
    let kills = ((n as f64) * a.kill).round() as usize;
    let mut killed = Vec::new();
    for _ in 0..kills {
        // Never peer 1 (the simulated leader); uniformly in the first 80 % of the ideal time.
        let p = 1 + (rng.next_u64() as usize) % (n - 1);
        let at = us(ideal_ms * 0.8 * (rng.next_u64() % 1000) as f64 / 1000.0);
        killed.push(p);
        sim.push(at, Ev::Kill { peer: p });
    }
    let wall = Instant::now();
    while let Some(Reverse((at, _, i))) = sim.queue.pop() {
        sim.now = at;
        let Some(ev) = sim.events[i].take() else {
            continue;
        };
        match ev {
            Ev::Free { peer, thread } => sim.free(peer, thread),
            Ev::Done {
                peer,
                thread,
                task,
                ms,
            } => sim.done(peer, thread, task, ms),
            Ev::Apply { from, cmd } => sim.apply(from, *cmd),
            Ev::Tick => sim.tick(),
            Ev::Kill { peer } => sim.kill(peer),
        }
        if sim.run_done() && sim.queue.len() > 10 * n * a.threads {
            break;
        }
    }
    let status = sim.ledger.run_status("sim", 1)?;
    if status != RunStatus::Complete {
        bail!("the simulated run ended {status} at {} ms", sim.ms());
    }
    let makespan = sim
        .ledger
        .run_lifespans("sim")?
        .first()
        .and_then(|l| l.completed.as_ref().map(|c| c.0))
        .unwrap_or(0) as f64;
    let c = &sim.counts;
    let b = f64::from(a.batches);
    let secs = makespan / 1000.0;
    println!(
        "peers {n:>5} x {} threads, {} batches (median {} ms, sigma {}), {} killed",
        a.threads,
        a.batches,
        a.median_ms,
        a.sigma,
        killed.len()
    );
    println!(
        "  makespan {:.1} s, ideal {:.1} s (total work / threads): {:.1} % of ideal speed-up",
        secs,
        ideal_ms / 1000.0,
        100.0 * ideal_ms / makespan
    );
    println!(
        "  an overhead-free central queue: {:.1} s ({:.1} % of ideal; stragglers bound any scheduler blind to durations): Plexus at {:.1} % of it",
        oracle_ms / 1000.0,
        100.0 * ideal_ms / oracle_ms,
        100.0 * oracle_ms / makespan
    );
    println!(
        "  raft entries per batch {:.3} (claims {:.3}, completions {:.3}, heartbeats {:.3}, transfers {:.3}, leader {:.4})",
        c.entries() as f64 / b,
        c.claims as f64 / b,
        c.completions as f64 / b,
        c.heartbeats as f64 / b,
        c.transfers as f64 / b,
        c.leader as f64 / b
    );
    println!(
        "  replication rounds {:.0}/s; leader messages {:.0}/s (rounds x followers); entries {:.0}/s",
        c.rounds as f64 / secs,
        c.rounds as f64 * (n - 1) as f64 / secs,
        c.entries() as f64 / secs
    );
    println!(
        "  steals asked {}, granted {}, tasks moved {}; ledger apply {:.1} us per batch; simulated in {:.1} s",
        c.steals_asked,
        c.steals_granted,
        c.tasks_moved,
        c.apply.as_secs_f64() * 1e6 / b,
        wall.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `plexus-bench sim`.
pub fn main(a: &SimArgs) -> Result<()> {
    let plan = plan(a.batches)?;
    for &n in &a.peers {
        simulate(a, &plan, n)?;
    }
    Ok(())
}
