//! `plexus-bench sim`: the cluster's scheduling at a scale this machine cannot host — the real
//! ledger (`plexus_raft::Ledger`, every command applied as on a peer) and the real scheduling
//! decisions (`plexus_node::schedule`: chunk sizes, steal targets and shares, heartbeats,
//! lease expiry, backups of stragglers; the ledger's longest-predicted-first picks) driven by
//! simulated peers, network and time.
//!
//! What is simulated: time (a discrete event queue); batch sizes (rows drawn lognormally per
//! batch, told to the ledger as the row counters of split file parts, as `split` records
//! them); batch execution (rows times a time per row, with per-run noise, 5x on slow peers);
//! Raft (a command is applied `commit_ms` after it is proposed, one order for everybody; a
//! peer that is not a voter proposes through one, one more hop; with a group-commit window
//! the leader gathers the proposals reaching it within the window into one entry and one
//! replication round, applied `commit_ms` after the window closes); the network (`rtt_ms` per
//! steal request); deaths (a killed peer's deque and running batches are lost; its leases
//! expire). What is measured: the makespan against the ideal (total work / threads), Raft
//! entries per batch by kind, replication rounds and the leader's messages per second (to the
//! other voters only when executors are not voters), steals, backups, and the ledger's apply
//! time per batch.
//!
//! With `--table-skew`, every file-reader node feeds a `table_table` node (`tab{k}` reads
//! `read{k}`'s table): file readers write a share of their rows (`--table-keep`), and the
//! ledger learns a table reader's rows only from those completions' `rows_out`, as in a real
//! run. Its batches are drawn lognormally per node (`--sigma`), and `--table-huge` nodes are
//! one batch of 10–30 times the median rows (`expected_batches_total: 1`), which the ledger's
//! own cut (`raft/src/ledger/split.rs`) turns into parts when the node becomes claimable; the
//! simulator runs each part for its slices' share of the batch's rows (rowids spread evenly)
//! and reports how many batches were cut into how many parts.
//!
//! Not modelled: the delay of the executors' delta stream (every peer decides on the ledger as
//! of the last apply), and cancelling the losing copy of a backup (it runs to its end; its
//! completion is refused).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use plexus_core::plan::{FilePart, FileSplit, Plan, Reader};
use plexus_core::task::{BatchId, BatchTask, SLICES};
use plexus_node::schedule;
use plexus_raft::command::{PeerId, SealedClaim, TaskOutcome, TaskRef, TaskResult};
use plexus_raft::group_commit::busy_window;
use plexus_raft::{ClaimPolicy, Command, Event, Ledger, NodeBatchStatus, RunStatus};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// CLI options of `plexus-bench sim`.
#[derive(Clone, Debug, clap::Args)]
pub struct SimArgs {
    /// Peer counts to simulate, one run each (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    pub peers: Vec<usize>,
    /// Raft voters; the other peers are executors that propose through a voter and follow
    /// the ledger without replicating the log. 0: every peer is a voter.
    #[arg(long, default_value_t = 0)]
    pub voters: usize,
    /// Executor threads per peer.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Batches of the run (file-reader nodes of up to 25,000 batches).
    #[arg(long, default_value_t = 100_000)]
    pub batches: u32,
    /// Median batch time, ms.
    #[arg(long, default_value_t = 1000.0)]
    pub median_ms: f64,
    /// Median rows of a batch (the time per row is `median_ms / median_rows`).
    #[arg(long, default_value_t = 1000)]
    pub median_rows: u64,
    /// Log-space standard deviation of batch sizes (skew).
    #[arg(long, default_value_t = 0.6)]
    pub sigma: f64,
    /// Log-space standard deviation of the time per row of each execution (noise).
    #[arg(long, default_value_t = 0.1)]
    pub noise: f64,
    /// Fraction of peers killed at random moments of the run.
    #[arg(long, default_value_t = 0.01)]
    pub kill: f64,
    /// Fraction of peers running 5x slower.
    #[arg(long, default_value_t = 0.01)]
    pub slow: f64,
    /// Whether idle threads run backups of stragglers near the end of a node.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub backups: bool,
    /// Proposal to apply on every peer, ms.
    #[arg(long, default_value_t = 2.0)]
    pub commit_ms: f64,
    /// The leader's group-commit window, ms (`plexus_raft::group_commit`): proposals reaching
    /// it within the window are one log entry and one replication round (an idle leader
    /// writes at once, a busy one at most once per window). 0: every proposal is its own
    /// entry, and rounds are capped at one per millisecond.
    #[arg(long, default_value_t = 5.0)]
    pub group_commit_ms: f64,
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
    /// Seed of sizes, noise, slow peers and deaths.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the histories of the last N batches to finish (what the makespan waited for).
    #[arg(long, default_value_t = 0)]
    pub tail: usize,
    /// Table-reader skew: every file-reader node feeds a `table_table` node downstream,
    /// whose batches' rows the ledger learns only from the file readers' completions (as in
    /// a real run), so an oversized one goes through the ledger's cut into parts. Each
    /// table-reader node's batches are drawn lognormally (`--sigma`) around `--median-rows`,
    /// and `--table-huge` of them are one batch of 10–30 times the median.
    #[arg(long, default_value_t = false)]
    pub table_skew: bool,
    /// With `--table-skew`: table-reader nodes of lognormal batches (each reads the table of
    /// a file-reader node of its own).
    #[arg(long, default_value_t = 16)]
    pub table_nodes: usize,
    /// With `--table-skew`: table-reader nodes of one batch of 10–30 times the median rows
    /// (`expected_batches_total: 1` over a table of that many rows).
    #[arg(long, default_value_t = 5)]
    pub table_huge: usize,
    /// With `--table-skew`: the fraction of its rows a file reader writes (as a `having`
    /// filter would), so the table readers' stage is that fraction of the file readers'.
    #[arg(long, default_value_t = 0.25)]
    pub table_keep: f64,
}

/// How much slower a slow peer runs.
const SLOW_FACTOR: f64 = 5.0;

/// Simulated time in microseconds.
type Us = u64;

fn us(ms: f64) -> Us {
    (ms.max(0.0) * 1000.0) as Us
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
    /// A proposal reaches the leader (group commit).
    Arrive { from: usize, cmd: Box<Command> },
    /// The leader's group-commit window closes: what it gathered goes out as one entry.
    Close,
    /// One entry of gathered proposals is applied, in their order.
    ApplyEntry { cmds: Vec<(usize, Command)> },
    /// Heartbeats and the leader's duties.
    Tick,
    /// A peer dies.
    Kill { peer: usize },
}

struct SimPeer {
    id: PeerId,
    alive: bool,
    slow: bool,
    deque: VecDeque<TaskRef>,
    outcomes: Vec<TaskResult>,
    committing: bool,
    claiming: bool,
    stealing: bool,
    backing: bool,
    /// Threads executing a task (the executor's `in_flight`).
    running: usize,
    /// The peer's running mean batch time of each node, ms (the executor's `batch_ms`).
    batch_ms: HashMap<String, f64>,
    reported_queued: u32,
    salt: u64,
    /// Threads blocked on the peer's claim, steal or backup in flight (as on the claim lock).
    waiting: Vec<usize>,
}

/// Entries by kind, for the report.
#[derive(Default)]
struct Counts {
    claims: u64,
    completions: u64,
    heartbeats: u64,
    transfers: u64,
    backups: u64,
    leader: u64,
    /// Log entries (one per proposal without group commit, one per window with it).
    log_entries: u64,
    steals_asked: u64,
    steals_granted: u64,
    tasks_moved: u64,
    rounds: u64,
    last_round_ms: u64,
    apply: Duration,
}

impl Counts {
    fn entries(&self) -> u64 {
        self.claims
            + self.completions
            + self.heartbeats
            + self.transfers
            + self.backups
            + self.leader
    }
}

/// The figures of one simulated run.
#[derive(Clone, Debug)]
pub struct SimReport {
    /// Peers simulated.
    pub peers: usize,
    /// Raft voters among them.
    pub voters: usize,
    /// Time until the run completed, ms.
    pub makespan_ms: f64,
    /// Total work / threads, ms.
    pub ideal_ms: f64,
    /// An overhead-free central queue blind to sizes, in plan order, ms.
    pub blind_queue_ms: f64,
    /// An overhead-free central queue taking the longest batch first, ms.
    pub longest_first_queue_ms: f64,
    /// Commands per batch (each claim, completion, heartbeat… proposed).
    pub entries_per_batch: f64,
    /// Raft log entries per batch (commands gathered by the group commit are one entry).
    pub log_entries_per_batch: f64,
    /// Replication rounds per second.
    pub rounds_per_s: f64,
    /// Messages the leader sends per second (replication to the other voters).
    pub leader_msgs_per_s: f64,
    /// Backups started, won, and seconds their losing copies ran.
    pub backups: (u64, u64, f64),
    /// Table-reader batches (`--table-skew`; parts not counted).
    pub table_batches: u64,
    /// Batches the ledger cut into parts, and the parts they became.
    pub cut: (u64, u64),
    /// Whether every batch (every part of a cut one) ended final and successful.
    pub all_success: bool,
}

impl SimReport {
    /// Makespan against the ideal, percent.
    pub fn pct_of_ideal(&self) -> f64 {
        100.0 * self.ideal_ms / self.makespan_ms
    }
}

struct Sim<'a> {
    a: &'a SimArgs,
    ledger: Ledger,
    peers: Vec<SimPeer>,
    voters: usize,
    queue: BinaryHeap<Reverse<(Us, u64, usize)>>,
    events: Vec<Option<Ev>>,
    seq: u64,
    now: Us,
    w: &'a Workload,
    ms_per_row: f64,
    rng: ChaCha8Rng,
    /// `schedule::stragglers` as of a time, for every peer's `schedule::pick_backup`.
    stragglers: Option<(Us, Vec<schedule::Straggler>)>,
    /// `schedule::live_peers` as of a time (see [`Sim::live_peers`]).
    live_cache: Option<(Us, usize)>,
    /// `schedule::steal_target` for nobody in particular, as of a time.
    steal_cache: Option<(Us, Option<(PeerId, u32)>)>,
    counts: Counts,
    ks: String,
    /// Proposals of the leader's open group-commit window.
    window: Vec<(usize, Command)>,
    /// When the leader's last write started, while it is busy (`GroupCommit`'s rule).
    busy_since: Option<Us>,
    /// Proposals the leader's last write carried.
    last_entry: usize,
}

/// Batches per node: a node holds at most 32,767 (spec), so larger runs use several nodes.
const PER_NODE: u32 = 25_000;

/// What a simulated run processes: the rows of every file-reader batch (node `read{k}` holds
/// `rows[starts[k]..starts[k + 1]]`) and, with `--table-skew`, a table-reader node `tab{k}`
/// reading each file reader's table.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Rows of each file-reader batch, node after node.
    pub rows: Vec<u64>,
    /// Where each file-reader node's batches start in `rows`, and one past the last.
    starts: Vec<usize>,
    /// Batches of each table-reader node `tab{k}` (empty without `--table-skew`).
    tables: Vec<u32>,
    /// The rows each table-reader node reads: what its file reader wrote (the sum of its
    /// batches' `rows_out`, as the ledger sums them from the completions).
    table_rows: Vec<u64>,
    /// The fraction of its rows a file reader writes (1 without table readers).
    keep: f64,
}

impl Workload {
    /// The workload `a` describes, drawn from `a.seed`.
    pub fn new(a: &SimArgs) -> Self {
        let rows = batch_rows(a);
        if !a.table_skew {
            let mut starts: Vec<usize> = (0..rows.len()).step_by(PER_NODE as usize).collect();
            starts.push(rows.len());
            return Self {
                rows,
                starts,
                tables: Vec::new(),
                table_rows: Vec::new(),
                keep: 1.0,
            };
        }
        let keep = a.table_keep.clamp(0.001, 1.0);
        // A stream of its own, so the file readers' sizes are those of the same seed without
        // table readers.
        let mut rng = ChaCha8Rng::seed_from_u64(a.seed ^ 0x7AB1_E5CE_u64);
        let uniform =
            |r: &mut ChaCha8Rng| ((r.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        let written = |r: u64| (r as f64 * keep).round() as u64;
        let mut starts = vec![0usize];
        let mut tables = Vec::new();
        let mut at = 0usize;
        // The huge ones first: a file reader of just enough batches to write 10–30 times the
        // median rows, read by a table reader of one batch.
        for _ in 0..a.table_huge {
            let target = (a.median_rows as f64 * (10.0 + 20.0 * uniform(&mut rng))) as u64;
            let mut sum = 0u64;
            while sum < target && at < rows.len() {
                sum += written(rows[at]);
                at += 1;
            }
            starts.push(at);
            tables.push(1);
        }
        // The rest in `table_nodes` file readers (more when a node would pass PER_NODE).
        let rest = rows.len() - at;
        let nodes = a.table_nodes.max(rest.div_ceil(PER_NODE as usize)).max(1);
        let per = rest.div_ceil(nodes).max(1);
        while at < rows.len() {
            at = (at + per).min(rows.len());
            starts.push(at);
            tables.push(0);
        }
        let mut table_rows = Vec::with_capacity(tables.len());
        for (k, b) in tables.iter_mut().enumerate() {
            let total: u64 = rows[starts[k]..starts[k + 1]]
                .iter()
                .map(|r| written(*r))
                .sum();
            table_rows.push(total);
            if *b == 0 {
                // Batches of lognormal rows around the median: the table's rows over them.
                let size = a.median_rows as f64 * (a.sigma * normal(&mut rng)).exp();
                *b = ((total as f64 / size.max(1.0)).round() as u32).clamp(1, PER_NODE);
            }
        }
        Self {
            rows,
            starts,
            tables,
            table_rows,
            keep,
        }
    }

    /// File-reader nodes.
    fn files(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// The rows of file-reader node `k`'s batches.
    fn file(&self, k: usize) -> &[u64] {
        match (self.starts.get(k), self.starts.get(k + 1)) {
            (Some(&s), Some(&e)) => &self.rows[s..e],
            _ => &[],
        }
    }

    /// Batches of every table reader.
    pub fn table_batches(&self) -> u64 {
        self.tables.iter().map(|b| u64::from(*b)).sum()
    }

    /// The rows one whole batch of table reader `k` reads: its table's rows spread evenly
    /// over its batches (rowids hash evenly over the token ranges).
    fn table_batch_rows(&self, k: usize, batch_idx: u32) -> u64 {
        let (Some(&total), Some(&b)) = (self.table_rows.get(k), self.tables.get(k)) else {
            return 0;
        };
        let (b, i) = (u64::from(b.max(1)), u64::from(batch_idx));
        total * (i + 1) / b - total * i / b
    }

    /// The rows a task reads: a file part's, or a table-reader batch's, or of one of its
    /// parts, the slices' share of the batch's rows.
    fn rows_in(&self, id: &BatchId) -> u64 {
        if let Some(k) = id.node.strip_prefix("read").and_then(|k| k.parse().ok()) {
            return self
                .file(k)
                .get(id.batch_idx as usize)
                .copied()
                .unwrap_or(0);
        }
        let Some(k) = id.node.strip_prefix("tab").and_then(|k| k.parse().ok()) else {
            return 0;
        };
        let rows = self.table_batch_rows(k, id.batch_idx);
        match id.part {
            None => rows,
            Some(p) => {
                let at = |s: u32| rows * u64::from(s) / u64::from(SLICES);
                at(p.end) - at(p.first)
            }
        }
    }

    /// The rows a task writes: a file reader its kept share (what the table readers read).
    fn rows_out(&self, id: &BatchId) -> u64 {
        let rows = self.rows_in(id);
        if id.node.starts_with("read") && self.keep < 1.0 {
            (rows as f64 * self.keep).round() as u64
        } else {
            rows
        }
    }

    /// Every batch's rows, file readers then table readers (whole batches).
    fn all_batches(&self) -> impl Iterator<Item = u64> + '_ {
        let tables = (0..self.tables.len())
            .flat_map(move |k| (0..self.tables[k]).map(move |i| self.table_batch_rows(k, i)));
        self.rows.iter().copied().chain(tables)
    }
}

/// A plan of independent file-reader nodes `read0`, `read1`, … over the workload's file
/// batches, each node one file split into parts of the given rows (10 bytes a row; the file
/// is never read), as `split` cuts a large file; with table readers, `tab{k}` reads
/// `read{k}`'s table `t{k}` in its number of batches.
pub fn plan(w: &Workload) -> Result<Plan> {
    let mut nodes = serde_json::Map::new();
    for k in 0..w.files() {
        nodes.insert(
            format!("read{k}"),
            serde_json::json!({
                "type": "file_table",
                "r": {
                    "urls": [format!("/sim/{k}.csv")],
                    "csv": {"hdr_line_idx": 0, "first_data_line_idx": 1},
                    "columns": {"col_a": {"col_type": "int", "csv": {"col_hdr": "a", "col_format": "%d"}}}
                },
                "w": {"name": format!("t{k}"), "fields": {"a": {"expression": "r.col_a", "type": "int"}}}
            }),
        );
    }
    for (k, b) in w.tables.iter().enumerate() {
        nodes.insert(
            format!("tab{k}"),
            serde_json::json!({
                "type": "table_table",
                "r": {"table": format!("t{k}"), "expected_batches_total": b},
                "w": {"name": format!("u{k}"), "fields": {"a": {"expression": "r.a", "type": "int"}}}
            }),
        );
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
    let mut plan = plexus_script::compile(&loaded).map_err(|d| anyhow::anyhow!("{d:?}"))?;
    for node in plan.nodes.iter_mut() {
        if let Some(k) = node.name.strip_prefix("tab") {
            let batches = k.parse().ok().and_then(|k: usize| w.tables.get(k));
            if !matches!(node.reader, Reader::Table(_)) || batches != Some(&node.batches) {
                bail!(
                    "node {} is not the table reader the simulation made",
                    node.name
                );
            }
            continue;
        }
        // By the node's name, as `Workload::rows_in` reads it back: the plan need not keep
        // the order the nodes were made in (`read10` may come before `read2`).
        let k: usize = node
            .name
            .trim_start_matches("read")
            .parse()
            .unwrap_or(usize::MAX);
        let sizes = w.file(k);
        let Reader::File(f) = &mut node.reader else {
            bail!(
                "node {} is not the file reader the simulation made",
                node.name
            );
        };
        if sizes.is_empty() {
            bail!("node {} has no batches in the simulation", node.name);
        }
        let total: u64 = sizes.iter().sum();
        let mut before = 0u64;
        f.splits = sizes
            .iter()
            .map(|r| {
                let part = FilePart::CsvRange {
                    start: before * 10,
                    end: (before + r) * 10,
                    lines_before: before + 1,
                    records_before: before as i64 + 1,
                    rows_before: before,
                    file_len: total * 10,
                };
                before += r;
                FileSplit { url_idx: 0, part }
            })
            .collect();
        node.batches = sizes.len() as u32;
    }
    Ok(plan)
}

/// A standard normal draw (Box-Muller on two uniform draws).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u = |r: &mut ChaCha8Rng| ((r.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let (a, b) = (u(rng), u(rng));
    (-2.0 * a.ln()).sqrt() * (2.0 * std::f64::consts::PI * b).cos()
}

/// The makespan of an overhead-free central queue handing `durations` out in that order to
/// `threads` threads, ms.
fn central_queue(durations: impl Iterator<Item = f64>, threads: usize) -> f64 {
    let mut free: BinaryHeap<Reverse<u64>> = (0..threads).map(|_| Reverse(0)).collect();
    for d in durations {
        let Reverse(t) = free.pop().unwrap_or(Reverse(0));
        free.push(Reverse(t + us(d)));
    }
    free.into_iter().map(|Reverse(t)| t).max().unwrap_or(0) as f64 / 1000.0
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

    /// Proposes `cmd` from peer `from`: applied after the commit time, plus a hop to a voter
    /// for an executor.
    fn propose(&mut self, from: usize, cmd: Command, extra_ms: f64) {
        let hop = if from >= self.voters {
            self.a.rtt_ms / 2.0
        } else {
            0.0
        };
        let cmd = Box::new(cmd);
        if self.a.group_commit_ms > 0.0 {
            let at = self.now + us(extra_ms + hop);
            self.push(at, Ev::Arrive { from, cmd });
        } else {
            let at = self.now + us(self.a.commit_ms + extra_ms + hop);
            self.push(at, Ev::Apply { from, cmd });
        }
    }

    /// A proposal reaches the leader: the first of a window opens it. As in
    /// `GroupCommit::propose`, an idle leader writes at once; a busy one (its last write
    /// started within the window and more came since) writes when that window is over, the
    /// window stretched by how full the last entry was (`group_commit::busy_window`).
    fn arrive(&mut self, from: usize, cmd: Command) {
        if self.window.is_empty() {
            let at = match self.busy_since {
                Some(t) => {
                    let window = Duration::from_secs_f64(self.a.group_commit_ms / 1000.0);
                    let wait = busy_window(window, self.last_entry).as_secs_f64() * 1000.0;
                    (t + us(wait)).max(self.now)
                }
                None => self.now,
            };
            self.push(at, Ev::Close);
        }
        self.window.push((from, cmd));
    }

    /// The window closes: one entry, one replication round, applied after the commit time.
    fn close(&mut self) {
        let cmds = std::mem::take(&mut self.window);
        self.busy_since = Some(self.now);
        self.last_entry = cmds.len();
        let at = self.now + us(self.a.commit_ms);
        self.push(at, Ev::ApplyEntry { cmds });
    }

    /// One entry of gathered proposals is applied (one round).
    fn apply_entry(&mut self, cmds: Vec<(usize, Command)>) {
        self.counts.rounds += 1;
        self.counts.log_entries += 1;
        if self.window.is_empty() {
            // Nothing came while it was written: the leader is idle again.
            self.busy_since = None;
        }
        for (from, cmd) in cmds {
            self.apply(from, cmd);
        }
    }

    /// One proposal is its own entry; rounds are at most one per millisecond.
    fn apply_alone(&mut self, from: usize, cmd: Command) {
        self.counts.log_entries += 1;
        let round = self.now / 1000;
        if round != self.counts.last_round_ms || self.counts.rounds == 0 {
            self.counts.rounds += 1;
            self.counts.last_round_ms = round;
        }
        self.apply(from, cmd);
    }

    fn run_done(&self) -> bool {
        !matches!(self.ledger.run_status(&self.ks, 1), Ok(RunStatus::Start))
    }

    /// How long `task` runs on peer `p`: its rows at the time per row, with noise, slower on
    /// a slow peer.
    fn exec_ms(&mut self, p: usize, task: &TaskRef) -> f64 {
        let rows = self.w.rows_in(&task.batch) as f64;
        let noise = (self.a.noise * normal(&mut self.rng)).exp();
        let slow = if self.peers[p].slow { SLOW_FACTOR } else { 1.0 };
        rows * self.ms_per_row * noise * slow
    }

    fn start(&mut self, p: usize, thread: usize, task: TaskRef) {
        self.peers[p].running += 1;
        let ms = self.exec_ms(p, &task);
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
    }

    /// `schedule::live_peers`, computed at most every 100 simulated ms for everybody: on a
    /// real peer it is one scan of the leases per claim, but one process simulating 10,000
    /// peers cannot scan 10,000 leases per claim. Leaving `me` out changes it by at most 1.
    fn live_peers(&mut self, since: i64) -> usize {
        match self.live_cache {
            Some((at, live)) if self.now < at + us(100.0) => live,
            _ => {
                let live = schedule::live_peers(&self.ledger, 0, since).saturating_sub(1);
                self.live_cache = Some((self.now, live.max(1)));
                live.max(1)
            }
        }
    }

    /// `schedule::steal_target` for `me`, from one computation per simulated millisecond for
    /// nobody in particular (recomputed for `me` when `me` is the answer), for the same reason.
    fn steal_target(&mut self, me: PeerId, since: i64) -> Option<(PeerId, u32)> {
        // `schedule::steal_target`'s own first check, which the shared answer skips.
        if !self.ledger.may_steal(me) {
            return None;
        }
        let target = match self.steal_cache {
            Some((at, t)) if self.now < at + 1000 => t,
            _ => {
                let t = schedule::steal_target(&self.ledger, 0, since);
                self.steal_cache = Some((self.now, t));
                t
            }
        };
        match target {
            Some((victim, _)) if victim == me => schedule::steal_target(&self.ledger, me, since),
            t => t,
        }
    }

    /// A thread of `p` looks for work: its deque, else a steal, else a backup of a straggler
    /// (before the end only one that would hold it), else a claim.
    fn free(&mut self, p: usize, thread: usize) {
        if !self.peers[p].alive || self.run_done() {
            return;
        }
        // The first task nobody runs a backup of (as the executor's `next_queued`).
        let ledger = &self.ledger;
        let deque = &mut self.peers[p].deque;
        let first = deque
            .iter()
            .position(|t| {
                !ledger
                    .claim_of(&t.batch)
                    .is_some_and(|(c, backup)| backup && c.attempt == t.attempt)
            })
            .unwrap_or(0);
        if let Some(task) = deque.remove(first) {
            self.start(p, thread, task);
            return;
        }
        // An idle executor looks again after IDLE_POLL (or when the ledger changes).
        let poll = self.now + us(200.0);
        if self.peers[p].claiming || self.peers[p].stealing || self.peers[p].backing {
            self.peers[p].waiting.push(thread);
            return;
        }
        let me = self.peers[p].id;
        let since = self.ms() - 2 * self.a.lease_ms as i64;
        let policy = ClaimPolicy::DEFAULT;
        self.peers[p].salt = self.peers[p].salt.wrapping_add(0x9E37_79B9_7F4A_7C15);
        // Unstarted tasks in another peer's deque first (as the executor does).
        if let Some((victim, max)) = self.steal_target(me, since) {
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
        // Then a straggler (as the executor does): before the end only one that would
        // hold it (`schedule::stragglers`). `schedule::backup_candidate` is
        // `stragglers` then `pick_backup`; the stragglers (a look over every running claim)
        // are found for everybody at most every 50 simulated ms, and each peer picks its own
        // among them against the ledger of now.
        if self.a.backups {
            let fresh = self
                .stragglers
                .as_ref()
                .is_some_and(|(t, _)| self.now < t + us(50.0));
            if !fresh {
                let found = schedule::stragglers(&self.ledger, self.ms(), &policy);
                self.stragglers = Some((self.now, found));
            }
            let found = self
                .stragglers
                .as_ref()
                .map_or(&[][..], |(_, f)| f.as_slice());
            if let Some((claim, _task)) = schedule::pick_backup(&self.ledger, found, me, &policy) {
                let cmd = Command::ClaimBackup {
                    task: claim,
                    peer: me,
                    worker: format!("n{me}"),
                    sealed: vec![0; 64],
                    ts_ms: self.ms(),
                };
                self.peers[p].backing = true;
                self.propose(p, cmd, self.a.rtt_ms);
                self.peers[p].waiting.push(thread);
                return;
            }
        }
        // The chunk size first, so the pick builds only the tasks claimed (the executor picks
        // up to the bound and truncates; the tasks are the same, as a pick's first task does
        // not depend on how many it takes): a pick of one tells the node and whether the
        // ledger knows its batches' sizes, as the executor reads them off its first task.
        let claimable = self.ledger.claimable(&self.ks, 1);
        let first = if claimable > 0 {
            self.ledger
                .pick_chunk_for(me, None, 1, self.peers[p].salt, None)
                .into_iter()
                .next()
        } else {
            None
        };
        let picked: Vec<BatchTask> = match first {
            Some(first) => {
                let live = self.live_peers(since);
                let sized = self.ledger.size_known(&first.id());
                let batch_ms = self.peers[p].batch_ms.get(&first.node).copied();
                let n = schedule::chunk_size(
                    Duration::from_millis(self.a.window_ms),
                    batch_ms,
                    sized,
                    policy.claiming_threads(self.a.threads, self.peers[p].running, batch_ms),
                    policy.max_chunk,
                    claimable,
                    live,
                );
                if n == 1 {
                    vec![first]
                } else {
                    self.ledger
                        .pick_chunk_for(me, None, n, self.peers[p].salt, None)
                }
            }
            None => Vec::new(),
        };
        if !picked.is_empty() {
            let tasks = picked
                .iter()
                .map(|t| SealedClaim {
                    node: t.node.clone(),
                    batch_idx: t.batch_idx,
                    part: t.part,
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
        self.push(poll, Ev::Free { peer: p, thread });
    }

    fn done(&mut self, p: usize, thread: usize, task: TaskRef, ms: f64) {
        if !self.peers[p].alive {
            return;
        }
        let (rows_in, rows_out) = (self.w.rows_in(&task.batch), self.w.rows_out(&task.batch));
        let peer = &mut self.peers[p];
        peer.running = peer.running.saturating_sub(1);
        // Per node, as the executor keeps it (by plan and node).
        let mean = peer.batch_ms.get(&task.batch.node).copied();
        peer.batch_ms.insert(
            task.batch.node.clone(),
            ClaimPolicy::DEFAULT.next_mean(mean, ms),
        );
        peer.outcomes.push(TaskResult {
            task,
            outcome: TaskOutcome::Done {
                rows_in,
                rows_out,
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
            Command::ClaimBackup { .. } => self.counts.backups += 1,
            _ => self.counts.leader += 1,
        }
        let kind_claim = matches!(cmd, Command::ClaimTasks { .. });
        let kind_complete = matches!(cmd, Command::CompleteTasks { .. });
        let kind_backup = matches!(cmd, Command::ClaimBackup { .. });
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
        }
        if kind_complete {
            self.peers[from].committing = false;
            self.flush(from);
        }
        if kind_backup {
            self.peers[from].backing = false;
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
                // The thread that asked runs the backup at once (it never waits in a deque).
                Event::BackupClaimed { task, peer, .. } => {
                    let p = (peer - 1) as usize;
                    if self.peers[p].alive
                        && let Some(thread) = self.peers[p].waiting.pop()
                    {
                        self.start(p, thread, task);
                    }
                }
                _ => {}
            }
        }
        if kind_claim || kind_backup {
            self.wake(from);
        }
        if let Some(thief) = transfer_to {
            self.peers[thief].stealing = false;
            self.counts.steals_granted += 1;
            self.wake(thief);
        }
    }

    /// The threads of `p` blocked on its claim, steal or backup go on.
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

/// `count` distinct peers other than peer 1 (index 0, the simulated leader).
fn pick_peers(rng: &mut ChaCha8Rng, n: usize, count: usize) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::new();
    while out.len() < count.min(n - 1) {
        let p = 1 + (rng.next_u64() as usize) % (n - 1);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// One simulated run on `n` peers over the workload `w` (the plan [`plan`] made of it).
pub fn simulate(a: &SimArgs, plan: &Plan, w: &Workload, n: usize) -> Result<SimReport> {
    if n < 2 {
        bail!("simulate at least 2 peers");
    }
    let voters = if a.voters == 0 || a.voters >= n {
        n
    } else {
        a.voters
    };
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed ^ n as u64);
    let ms_per_row = a.median_ms / a.median_rows.max(1) as f64;
    // Table-reader batches whole: a central queue knows nothing of parts.
    let nominal = || w.all_batches().map(|r| r as f64 * ms_per_row);
    let threads = n * a.threads;
    let ideal_ms = nominal().sum::<f64>() / threads as f64;
    // The best a scheduler that does not know sizes can do: one central queue in plan order,
    // no overhead, no deaths, no noise; and the same queue taking the longest first.
    let blind_queue_ms = central_queue(nominal(), threads);
    let mut sorted: Vec<f64> = nominal().collect();
    sorted.sort_by(|x, y| y.total_cmp(x));
    let longest_first_queue_ms = central_queue(sorted.into_iter(), threads);

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
    let slow = pick_peers(&mut rng, n, ((n as f64) * a.slow).round() as usize);
    let peers = (0..n)
        .map(|i| SimPeer {
            id: i as PeerId + 1,
            alive: true,
            slow: slow.contains(&i),
            deque: VecDeque::new(),
            outcomes: Vec::new(),
            committing: false,
            claiming: false,
            stealing: false,
            backing: false,
            running: 0,
            batch_ms: HashMap::new(),
            reported_queued: 0,
            salt: rng.next_u64(),
            waiting: Vec::new(),
        })
        .collect();
    let mut sim = Sim {
        a,
        ledger,
        peers,
        voters,
        queue: BinaryHeap::new(),
        events: Vec::new(),
        seq: 0,
        now: 0,
        w,
        ms_per_row,
        rng: ChaCha8Rng::seed_from_u64(a.seed.wrapping_add(7)),
        stragglers: None,
        live_cache: None,
        steal_cache: None,
        counts: Counts::default(),
        ks: "sim".into(),
        window: Vec::new(),
        busy_since: None,
        last_entry: 0,
    };
    for p in 0..n {
        for t in 0..a.threads {
            // Peers come up within the first 100 ms.
            let at = rng.next_u64() % 100_000;
            sim.push(at, Ev::Free { peer: p, thread: t });
        }
    }
    sim.push(us(a.renew_ms as f64), Ev::Tick);
    let killed = pick_peers(&mut rng, n, ((n as f64) * a.kill).round() as usize);
    for &p in &killed {
        // Uniformly in the first 80 % of the ideal time.
        let at = us(ideal_ms * 0.8 * (rng.next_u64() % 1000) as f64 / 1000.0);
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
            Ev::Apply { from, cmd } => sim.apply_alone(from, *cmd),
            Ev::Arrive { from, cmd } => sim.arrive(from, *cmd),
            Ev::Close => sim.close(),
            Ev::ApplyEntry { cmds } => sim.apply_entry(cmds),
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
    let makespan_ms = sim
        .ledger
        .run_lifespans("sim")?
        .first()
        .and_then(|l| l.completed.as_ref().map(|c| c.0))
        .unwrap_or(0) as f64;
    let (mut cut, mut all_success) = ((0u64, 0u64), true);
    for nr in sim.ledger.run("sim", 1)?.nodes.values() {
        if nr.parts_per_batch() > 1 {
            cut.0 += u64::from(nr.batches_total());
            cut.1 += u64::from(nr.units_total());
        }
        all_success &= nr.status == NodeBatchStatus::Success
            && nr
                .batches
                .iter()
                .all(|b| b.status == NodeBatchStatus::Success);
    }
    let c = &sim.counts;
    let batches = w.rows.len() as u64 + w.table_batches();
    let b = batches as f64;
    let secs = makespan_ms / 1000.0;
    let backups = sim.ledger.backup_counters();
    let report = SimReport {
        peers: n,
        voters,
        makespan_ms,
        ideal_ms,
        blind_queue_ms,
        longest_first_queue_ms,
        entries_per_batch: c.entries() as f64 / b,
        log_entries_per_batch: c.log_entries as f64 / b,
        rounds_per_s: c.rounds as f64 / secs,
        leader_msgs_per_s: c.rounds as f64 * (voters - 1) as f64 / secs,
        backups: (
            backups.started,
            backups.won,
            backups.wasted_ms as f64 / 1000.0,
        ),
        table_batches: w.table_batches(),
        cut,
        all_success,
    };
    println!(
        "peers {n:>5} ({voters} voters, {} executors) x {} threads, {} batches (median {} ms, sigma {}, noise {}), {} killed, {} slow (5x)",
        n - voters,
        a.threads,
        batches,
        a.median_ms,
        a.sigma,
        a.noise,
        killed.len(),
        slow.len()
    );
    println!(
        "  makespan {:.1} s, ideal {:.1} s (total work / threads): {:.1} % of ideal speed-up",
        secs,
        ideal_ms / 1000.0,
        report.pct_of_ideal()
    );
    println!(
        "  overhead-free central queue: blind to sizes {:.1} s ({:.1} % of ideal), longest first {:.1} s ({:.1} % of ideal)",
        blind_queue_ms / 1000.0,
        100.0 * ideal_ms / blind_queue_ms,
        longest_first_queue_ms / 1000.0,
        100.0 * ideal_ms / longest_first_queue_ms,
    );
    println!(
        "  raft log entries per batch {:.3} (group commit {} ms); commands per batch {:.3} (claims {:.3}, completions {:.3}, heartbeats {:.3}, transfers {:.3}, backups {:.4}, leader {:.4})",
        report.log_entries_per_batch,
        a.group_commit_ms,
        report.entries_per_batch,
        c.claims as f64 / b,
        c.completions as f64 / b,
        c.heartbeats as f64 / b,
        c.transfers as f64 / b,
        c.backups as f64 / b,
        c.leader as f64 / b
    );
    println!(
        "  replication rounds {:.0}/s; leader messages {:.0}/s (rounds x {} other voters); commands {:.0}/s; delta stream to executors {:.0} msgs/s over {} followers",
        report.rounds_per_s,
        report.leader_msgs_per_s,
        voters - 1,
        c.entries() as f64 / secs,
        c.rounds as f64 * (n - voters) as f64 / secs,
        voters - 1,
    );
    println!(
        "  backups started {}, won {}, wasted {:.1} s; steals asked {}, granted {}, tasks moved {}; ledger apply {:.1} us per batch; simulated in {:.1} s",
        report.backups.0,
        report.backups.1,
        report.backups.2,
        c.steals_asked,
        c.steals_granted,
        c.tasks_moved,
        c.apply.as_secs_f64() * 1e6 / b,
        wall.elapsed().as_secs_f64()
    );
    if report.table_batches > 0 {
        let largest = (0..w.tables.len())
            .map(|k| w.table_batch_rows(k, 0))
            .max()
            .unwrap_or(0);
        println!(
            "  table readers: {} batches in {} nodes (file readers keep {} of their rows; the largest batch {:.1}x the median rows); the ledger cut {} batches into {} parts; every batch final and success: {}",
            report.table_batches,
            w.tables.len(),
            w.keep,
            largest as f64 / a.median_rows.max(1) as f64,
            report.cut.0,
            report.cut.1,
            if report.all_success { "yes" } else { "NO" },
        );
    }
    if a.tail > 0 {
        sim.print_tail(a.tail, &slow, &killed)?;
    }
    Ok(report)
}

impl Sim<'_> {
    /// The histories of the last `n` batches to finish, with their rows and predicted time
    /// and whether the peers that held them were slow or killed.
    fn print_tail(&self, n: usize, slow: &[usize], killed: &[usize]) -> Result<()> {
        let run = self.ledger.run(&self.ks, 1)?;
        let mut last: Vec<(i64, &str, usize)> = Vec::new();
        for (name, nr) in &run.nodes {
            for (i, b) in nr.batches.iter().enumerate() {
                if let Some(h) = b.history.last() {
                    last.push((h.ts_ms, name.as_str(), i));
                }
            }
        }
        last.sort_unstable_by_key(|(ts, ..)| Reverse(*ts));
        let role = |w: &str| {
            let p = w.trim_start_matches('n').parse::<usize>().unwrap_or(0);
            match (
                slow.contains(&p.wrapping_sub(1)),
                killed.contains(&p.wrapping_sub(1)),
            ) {
                (true, _) => "slow",
                (_, true) => "killed",
                _ => "",
            }
        };
        // Each node's span, last to end first: a table reader starts only once its creator
        // ended, so a late creator shows up here before it shows in the batches below.
        let mut spans: Vec<(i64, i64, &str, u32, u32)> = run
            .nodes
            .iter()
            .map(|(name, nr)| {
                let ts = nr
                    .batches
                    .iter()
                    .flat_map(|b| b.history.iter().map(|h| h.ts_ms));
                let (first, last) = ts.fold((i64::MAX, 0), |(f, l), t| (f.min(t), l.max(t)));
                (
                    last,
                    first,
                    name.as_str(),
                    nr.batches_total(),
                    nr.parts_per_batch(),
                )
            })
            .collect();
        spans.sort_unstable_by_key(|(last, ..)| Reverse(*last));
        let names = |ps: &[usize]| {
            ps.iter()
                .map(|p| format!("n{}", p + 1))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!("  slow peers: {}; killed: {}", names(slow), names(killed));
        println!("  the last {n} nodes to end (first claim, last completion):");
        for (last, first, name, batches, parts) in spans.into_iter().take(n) {
            println!(
                "    {name:<6} {batches:>5} batches x {parts:>2} parts: {:.2} s .. {:.2} s",
                first as f64 / 1000.0,
                last as f64 / 1000.0
            );
        }
        println!("  the last {n} batches to finish:");
        for (ts, name, i) in last.into_iter().take(n) {
            let Some(nr) = run.nodes.get(name) else {
                continue;
            };
            let Some(b) = nr.batches.get(i) else {
                continue;
            };
            // `i` is a unit: a batch, or a part of a cut one.
            let (batch_idx, part) = nr.unit_id(i as u32);
            let rows = self.w.rows_in(&BatchId {
                keyspace: self.ks.clone(),
                run_id: 1,
                node: name.to_owned(),
                batch_idx,
                part,
            });
            let part = part.map_or(String::new(), |p| format!(" slices {}..{}", p.first, p.end));
            println!(
                "    {name}/{batch_idx}{part} finished {:.2} s: {rows} rows ({:.2} s nominal)",
                ts as f64 / 1000.0,
                rows as f64 * self.ms_per_row / 1000.0
            );
            for h in &b.history {
                println!(
                    "      {:>8.2} s {:<8} {:<5} {:<6} {}",
                    h.ts_ms as f64 / 1000.0,
                    h.status.to_string(),
                    h.instance,
                    role(&h.instance),
                    h.comment
                );
            }
        }
        Ok(())
    }
}

/// Batch sizes in rows, lognormal around `median_rows` (at least 1 row).
fn batch_rows(a: &SimArgs) -> Vec<u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed);
    (0..a.batches)
        .map(|_| {
            let r = a.median_rows as f64 * (a.sigma * normal(&mut rng)).exp();
            (r.round() as u64).max(1)
        })
        .collect()
}

/// `plexus-bench sim`.
pub fn main(a: &SimArgs) -> Result<()> {
    let w = Workload::new(a);
    let plan = plan(&w)?;
    for &n in &a.peers {
        simulate(a, &plan, &w, n)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }

    /// A small skewed run with deaths, slow peers and 3 voters completes, close to ideal, and
    /// only the voters count in the leader's messages.
    #[test]
    fn a_small_skewed_run_completes_near_ideal() -> Result<()> {
        let cli = Cli::try_parse_from([
            "sim",
            "--peers",
            "20",
            "--voters",
            "3",
            "--batches",
            "4000",
            "--kill",
            "0.05",
            "--slow",
            "0.05",
        ])?;
        let a = cli.sim;
        let w = Workload::new(&a);
        let plan = plan(&w)?;
        let r = simulate(&a, &plan, &w, 20)?;
        assert_eq!(r.voters, 3);
        assert!(r.pct_of_ideal() > 85.0, "{r:?}");
        assert!(r.entries_per_batch <= 3.0, "{r:?}");
        assert!(r.log_entries_per_batch < r.entries_per_batch, "{r:?}");
        Ok(())
    }

    /// Table readers downstream of the file readers, two of them one batch of 10–30 times
    /// the median rows, which the ledger knows only from the file readers' completions: the
    /// ledger cuts them into parts (its own decision, `split.rs`; the simulator only runs
    /// what it is handed), and every batch and part of the run ends final and successful,
    /// deaths and slow peers included.
    #[test]
    fn oversized_table_reader_batches_are_cut_and_the_run_completes() -> Result<()> {
        let seed = 3u64;
        println!("seed {seed}");
        let cli = Cli::try_parse_from([
            "sim",
            "--peers",
            "20",
            "--batches",
            "2000",
            "--table-skew",
            "--table-nodes",
            "4",
            "--table-huge",
            "2",
            "--kill",
            "0.05",
            "--slow",
            "0.05",
            "--seed",
            &seed.to_string(),
        ])?;
        let a = cli.sim;
        let w = Workload::new(&a);
        let plan = plan(&w)?;
        let r = simulate(&a, &plan, &w, 20)?;
        assert!(r.table_batches > 0, "{r:?}");
        assert!(r.cut.0 >= 1, "no batch was cut (seed {seed}): {r:?}");
        assert!(r.cut.1 > r.cut.0, "a cut batch has several parts: {r:?}");
        assert!(
            r.all_success,
            "a batch or part is not final and successful: {r:?}"
        );
        Ok(())
    }

    /// The leader's group commit caps its replication rounds at one per window whatever the
    /// number of proposing peers, where one entry per proposal gives up to one per ms, at a
    /// small cost in speed-up (no deaths or slow peers here: a 5 s run cannot absorb a lease).
    #[test]
    fn the_group_commit_caps_the_leaders_rounds() -> Result<()> {
        let args = |window: &str| {
            Cli::try_parse_from([
                "sim",
                "--peers",
                "200",
                "--voters",
                "5",
                "--batches",
                "8000",
                "--median-ms",
                "200",
                "--kill",
                "0",
                "--slow",
                "0",
                "--group-commit-ms",
                window,
            ])
        };
        let (alone, grouped) = (args("0")?.sim, args("10")?.sim);
        let w = Workload::new(&alone);
        let plan = plan(&w)?;
        let alone = simulate(&alone, &plan, &w, 200)?;
        let grouped = simulate(&grouped, &plan, &w, 200)?;
        assert!(alone.rounds_per_s > 150.0, "{alone:?}");
        assert!(grouped.rounds_per_s <= 100.0, "{grouped:?}");
        assert!(
            grouped.leader_msgs_per_s < alone.leader_msgs_per_s / 1.5,
            "{grouped:?}"
        );
        // The window delays every proposal a little; it must not cost much speed-up.
        assert!(
            grouped.pct_of_ideal() > alone.pct_of_ideal() - 5.0,
            "{grouped:?} against {alone:?}"
        );
        Ok(())
    }
}
