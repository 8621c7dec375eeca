//! A cluster in one process: N real peers (openraft over QUIC on loopback, mutual TLS under a
//! fresh CA) sharing one store, plus the client certificate `planner` uses. For tests and
//! benchmarks; a production cluster runs one `plexus-node` process per machine.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cluster::{ExecutorPeer, Peer, PeerSettings, RaftTimers};
use crate::console::ConsoleSettings;
use crate::exec::ExecContext;
use crate::telemetry::TelemetrySettings;
use std::sync::Arc;

use crate::transport::faults::Faults;
use crate::transport::{TlsFiles, TransportConfig, certs};

/// Why a local cluster could not start or change.
#[derive(Debug, thiserror::Error)]
#[error("local cluster: {0}")]
pub struct LocalClusterError(pub String);

type Result<T> = std::result::Result<T, LocalClusterError>;

fn err(e: impl std::fmt::Display) -> LocalClusterError {
    LocalClusterError(e.to_string())
}

/// Certificates made beyond the first `n` peers: the spare voter and executor peers.
const SPARE_CERTS: u64 = 4;

/// Makes the execution context (store, Python pool) of one peer.
pub type ContextFactory = Box<dyn Fn(u64) -> std::result::Result<ExecContext, String> + Send>;

/// N peers, their certificates and the store they share.
pub struct LocalCluster {
    /// The runtime the peers run on.
    pub rt: tokio::runtime::Runtime,
    peers: BTreeMap<u64, Peer>,
    settings: BTreeMap<u64, PeerSettings>,
    /// Running executor peers (not Raft members).
    executors: BTreeMap<u64, ExecutorPeer>,
    /// The settings of every executor peer that ran.
    executor_settings: BTreeMap<u64, PeerSettings>,
    dir: PathBuf,
    contexts: ContextFactory,
    threads: usize,
    faults: Option<Arc<Faults>>,
    telemetry: TelemetrySettings,
    console: Option<ConsoleSettings>,
}

impl LocalCluster {
    /// Starts `n` peers (n1..nN) and bootstraps the cluster from n1; returns once it has a
    /// leader that every peer knows.
    /// Starts `n` peers with `threads` executor threads each, certificates and data in `dir`.
    pub fn start(
        dir: &std::path::Path,
        n: u64,
        threads: usize,
        contexts: ContextFactory,
    ) -> Result<Self> {
        Self::start_with(dir, n, threads, contexts, Self::fast_timers())
    }

    /// Timers of test clusters: elections within a second.
    pub fn fast_timers() -> RaftTimers {
        RaftTimers {
            heartbeat: Duration::from_millis(100),
            election_min: Duration::from_millis(500),
            election_max: Duration::from_millis(1000),
            lease: Duration::from_millis(1000),
            lease_renew: Duration::from_millis(200),
            ..RaftTimers::default()
        }
    }

    /// Like [`LocalCluster::start`] with these Raft timers.
    pub fn start_with(
        dir: &std::path::Path,
        n: u64,
        threads: usize,
        contexts: ContextFactory,
        timers: RaftTimers,
    ) -> Result<Self> {
        Self::start_observed(
            dir,
            n,
            threads,
            contexts,
            timers,
            TelemetrySettings::default(),
        )
    }

    /// Like [`LocalCluster::start_with`], every peer exporting spans and serving metrics as
    /// `telemetry` says (a `metrics_listen` port 0 gives each peer a port of its own).
    pub fn start_observed(
        dir: &std::path::Path,
        n: u64,
        threads: usize,
        contexts: ContextFactory,
        timers: RaftTimers,
        telemetry: TelemetrySettings,
    ) -> Result<Self> {
        Self::start_with_console(dir, n, threads, contexts, timers, telemetry, None)
    }

    /// Like [`LocalCluster::start_observed`], every peer also serving the web console with
    /// `console` on its metrics listener.
    pub fn start_with_console(
        dir: &std::path::Path,
        n: u64,
        threads: usize,
        contexts: ContextFactory,
        timers: RaftTimers,
        telemetry: TelemetrySettings,
        console: Option<ConsoleSettings>,
    ) -> Result<Self> {
        let ids: Vec<u64> = (1..=n).collect();
        // Spare certificates, for a peer added later (`start_spare`) and executor peers
        // (`start_executor`).
        let with_spare: Vec<u64> = (1..=n + SPARE_CERTS).collect();
        certs::init(&dir.join("tls"), &with_spare, &["planner".to_owned()]).map_err(err)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(err)?;
        let mut c = Self {
            rt,
            peers: BTreeMap::new(),
            settings: BTreeMap::new(),
            executors: BTreeMap::new(),
            executor_settings: BTreeMap::new(),
            dir: dir.to_owned(),
            contexts,
            threads,
            faults: None,
            telemetry,
            console,
        };
        for id in ids {
            let s = c.settings_for(id, timers.clone());
            c.start_peer(s)?;
        }
        let members: BTreeMap<u64, String> = c
            .peers
            .iter()
            .map(|(id, p)| (*id, p.advertise().to_owned()))
            .collect();
        let first = c.peers.get(&1).ok_or_else(|| err("no peer n1"))?;
        c.rt.block_on(first.initialize(members)).map_err(err)?;
        c.wait_leader(Duration::from_secs(10))?;
        Ok(c)
    }

    fn settings_for(&self, id: u64, raft: RaftTimers) -> PeerSettings {
        PeerSettings {
            id,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            data_dir: self.dir.join(format!("n{id}")),
            tls: TlsFiles::in_dir(&self.dir.join("tls"), &format!("n{id}")),
            threads: self.threads,
            raft,
            transport: TransportConfig::default(),
            cluster_key: self.dir.join("tls").join("cluster.key"),
            claim_window: Duration::from_millis(100),
            telemetry: self.telemetry.clone(),
            console: self.console.clone(),
        }
    }

    /// Starts an executor peer (the next free id; certificates exist for [`SPARE_CERTS`]
    /// beyond the voters), committing through the voters, and with `record` records it as
    /// `planner cluster add --executor` does (else it holds until that is done). Returns its
    /// id and address.
    pub fn start_executor(&mut self, record: bool) -> Result<(u64, String)> {
        let id = self
            .settings
            .keys()
            .chain(self.executor_settings.keys())
            .max()
            .copied()
            .unwrap_or(0)
            + 1;
        let raft = self
            .settings
            .values()
            .next()
            .map_or_else(Self::fast_timers, |s| s.raft.clone());
        let s = self.settings_for(id, raft);
        self.start_executor_with(s)?;
        let addr = self
            .executors
            .get(&id)
            .map(|p| p.advertise().to_owned())
            .ok_or_else(|| err("the executor peer did not start"))?;
        if !record {
            return Ok((id, addr));
        }
        let voter = self
            .peers
            .values()
            .next()
            .ok_or_else(|| err("no voter runs to record the executor peer"))?;
        self.rt
            .block_on(voter.core().add_executor(id, &addr))
            .map_err(err)?;
        Ok((id, addr))
    }

    fn start_executor_with(&mut self, mut s: PeerSettings) -> Result<()> {
        let voters: BTreeMap<u64, String> = self
            .settings
            .iter()
            .filter_map(|(id, v)| v.advertise.clone().map(|a| (*id, a)))
            .collect();
        let ctx = (self.contexts)(s.id).map_err(err)?;
        let peer = self
            .rt
            .block_on(ExecutorPeer::start(s.clone(), voters, ctx))
            .map_err(err)?;
        if let Some(f) = &self.faults {
            peer.core().transport().set_faults(f.clone());
        }
        s.listen = peer.advertise().parse().map_err(err)?;
        s.advertise = Some(peer.advertise().to_owned());
        let id = s.id;
        self.executor_settings.insert(id, s);
        self.executors.insert(id, peer);
        Ok(())
    }

    /// The running executor peer `id`.
    pub fn executor_peer(&self, id: u64) -> Option<&ExecutorPeer> {
        self.executors.get(&id)
    }

    /// Ids of running executor peers.
    pub fn running_executors(&self) -> Vec<u64> {
        self.executors.keys().copied().collect()
    }

    /// Starts the spare peer (id n + 1, not a member): it waits to be added
    /// (`planner cluster add`). Returns its id and address.
    pub fn start_spare(&mut self) -> Result<(u64, String)> {
        let id = self
            .settings
            .keys()
            .chain(self.executor_settings.keys())
            .max()
            .copied()
            .unwrap_or(0)
            + 1;
        let raft = self
            .settings
            .values()
            .next()
            .map_or_else(Self::fast_timers, |s| s.raft.clone());
        let s = self.settings_for(id, raft);
        self.start_peer(s)?;
        let addr = self
            .peers
            .get(&id)
            .map(|p| p.advertise().to_owned())
            .ok_or_else(|| err("the spare peer did not start"))?;
        Ok((id, addr))
    }

    fn start_peer(&mut self, mut s: PeerSettings) -> Result<()> {
        let ctx = (self.contexts)(s.id).map_err(err)?;
        let peer = self.rt.block_on(Peer::start(s.clone(), ctx)).map_err(err)?;
        if let Some(f) = &self.faults {
            peer.core().transport().set_faults(f.clone());
        }
        // A restart binds the same address, so the others' membership still points at it.
        s.listen = peer.advertise().parse().map_err(err)?;
        s.advertise = Some(peer.advertise().to_owned());
        self.settings.insert(s.id, s.clone());
        self.peers.insert(s.id, peer);
        Ok(())
    }

    /// Every peer's address, comma-separated (what `--cluster` takes).
    pub fn addrs(&self) -> String {
        self.settings
            .values()
            .filter_map(|s| s.advertise.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The certificate directory (`--tls-dir`).
    pub fn tls_dir(&self) -> PathBuf {
        self.dir.join("tls")
    }

    /// The leader every running peer agrees on, if any.
    pub fn leader(&self) -> Option<u64> {
        let mut leaders = self
            .peers
            .values()
            .map(|p| p.core().raft().metrics().borrow().current_leader);
        let first = leaders.next()??;
        leaders.all(|l| l == Some(first)).then_some(first)
    }

    /// Waits until the running peers agree on a leader.
    pub fn wait_leader(&self, timeout: Duration) -> Result<u64> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.leader()
                && self.peers.contains_key(&l)
            {
                return Ok(l);
            }
            if Instant::now() > deadline {
                return Err(err(format!("no leader after {timeout:?}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Installs fault rules on every peer's transport, now and after restarts.
    pub fn set_faults(&mut self, faults: Arc<Faults>) {
        for p in self.peers.values() {
            p.core().transport().set_faults(faults.clone());
        }
        for p in self.executors.values() {
            p.core().transport().set_faults(faults.clone());
        }
        self.faults = Some(faults);
    }

    /// Stops peer `id` (as [`LocalCluster::kill`] does) and starts it again with its settings
    /// changed by `change` (another cluster key, a longer claim window).
    pub fn restart_with(&mut self, id: u64, change: impl FnOnce(&mut PeerSettings)) -> Result<()> {
        if self.peers.contains_key(&id) {
            self.kill(id)?;
        }
        let mut s = self
            .settings
            .get(&id)
            .cloned()
            .ok_or_else(|| err(format!("n{id} never ran")))?;
        change(&mut s);
        self.start_peer(s)
    }

    /// Stops a peer, voter or executor peer, abruptly (no hand-back, no flush beyond what is
    /// durable).
    pub fn kill(&mut self, id: u64) -> Result<()> {
        if let Some(p) = self.executors.remove(&id) {
            self.rt.block_on(p.kill());
            return Ok(());
        }
        let p = self
            .peers
            .remove(&id)
            .ok_or_else(|| err(format!("n{id} is not running")))?;
        self.rt.block_on(p.kill());
        Ok(())
    }

    /// Starts a killed peer (voter or executor peer) again on its data directory and address.
    pub fn restart(&mut self, id: u64) -> Result<()> {
        if let Some(s) = self.executor_settings.get(&id).cloned() {
            return self.start_executor_with(s);
        }
        let s = self
            .settings
            .get(&id)
            .cloned()
            .ok_or_else(|| err(format!("n{id} never ran")))?;
        self.start_peer(s)
    }

    /// Applied index of a running peer.
    pub fn applied(&self, id: u64) -> Option<u64> {
        self.peers
            .get(&id)?
            .core()
            .raft()
            .metrics()
            .borrow()
            .last_applied
            .map(|l| l.index)
    }

    /// Tries to start peer `id` with the certificate files of `cert` (another peer's).
    pub fn start_impostor(&self, id: u64, cert: &str) -> Result<()> {
        let s = PeerSettings {
            id,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            data_dir: self.dir.join(format!("impostor{id}")),
            tls: TlsFiles::in_dir(&self.tls_dir(), cert),
            threads: 1,
            raft: Self::fast_timers(),
            transport: TransportConfig::default(),
            cluster_key: self.dir.join("tls").join("cluster.key"),
            claim_window: Duration::from_millis(100),
            telemetry: TelemetrySettings::default(),
            console: None,
        };
        let ctx = (self.contexts)(id).map_err(err)?;
        let peer = self.rt.block_on(Peer::start(s, ctx)).map_err(err)?;
        self.rt.block_on(peer.shutdown());
        Ok(())
    }

    /// The running peer `id`.
    pub fn peer(&self, id: u64) -> Option<&Peer> {
        self.peers.get(&id)
    }

    /// Waits until every running peer has applied at least what the leader has.
    pub fn wait_caught_up(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let leader = self.wait_leader(timeout)?;
            let target = self.applied(leader);
            if self.running().iter().all(|id| self.applied(*id) >= target) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(err(format!(
                    "peers did not catch up with the leader's applied index {target:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Shuts every peer down gracefully (as on drop): batches finish, spans are flushed.
    pub fn stop_all(&mut self) {
        let peers = std::mem::take(&mut self.peers);
        let executors = std::mem::take(&mut self.executors);
        self.rt.block_on(async move {
            for (_, p) in executors {
                p.shutdown().await;
            }
            for (_, p) in peers {
                p.shutdown().await;
            }
        });
    }

    /// Ids of running peers.
    pub fn running(&self) -> Vec<u64> {
        self.peers.keys().copied().collect()
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let peers = std::mem::take(&mut self.peers);
        let executors = std::mem::take(&mut self.executors);
        self.rt.block_on(async move {
            // Executor peers first: they commit their last completions through the voters.
            for (_, p) in executors {
                p.shutdown().await;
            }
            for (_, p) in peers {
                p.shutdown().await;
            }
        });
    }
}
