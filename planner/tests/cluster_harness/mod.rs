//! An in-process cluster for tests: N real peers (openraft over QUIC on loopback, mutual TLS
//! under a fresh CA) sharing one CQL wire double, plus the client certificate `planner` uses.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use plexus_node::cluster::{Peer, PeerSettings, RaftTimers};
use plexus_node::exec::ExecContext;
use plexus_node::pycalc::{PyPool, PyPoolConfig};
use plexus_node::store::{CqlConfig, CqlStore};
use plexus_node::transport::{TlsFiles, TransportConfig, certs};
use plexus_testkit::cql::CqlDouble;

/// N peers, their certificates and the store they share.
pub(crate) struct TestCluster {
    pub(crate) rt: tokio::runtime::Runtime,
    peers: BTreeMap<u64, Peer>,
    settings: BTreeMap<u64, PeerSettings>,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) double: CqlDouble,
}

impl TestCluster {
    /// Starts `n` peers (n1..nN) and bootstraps the cluster from n1; returns once it has a
    /// leader that every peer knows.
    pub(crate) fn start(n: u64) -> Result<Self> {
        Self::start_with(n, Self::fast_timers())
    }

    /// Timers of test clusters: elections within a second.
    pub(crate) fn fast_timers() -> RaftTimers {
        RaftTimers {
            heartbeat: Duration::from_millis(100),
            election_min: Duration::from_millis(500),
            election_max: Duration::from_millis(1000),
            ..RaftTimers::default()
        }
    }

    /// Like [`TestCluster::start`] with these Raft timers.
    pub(crate) fn start_with(n: u64, timers: RaftTimers) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let ids: Vec<u64> = (1..=n).collect();
        certs::init(&dir.path().join("tls"), &ids, &["planner".to_owned()])?;
        let double = CqlDouble::start()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let mut c = Self {
            rt,
            peers: BTreeMap::new(),
            settings: BTreeMap::new(),
            dir,
            double,
        };
        for id in ids {
            let s = PeerSettings {
                id,
                listen: "127.0.0.1:0".parse()?,
                advertise: None,
                data_dir: c.dir.path().join(format!("n{id}")),
                tls: TlsFiles::in_dir(&c.dir.path().join("tls"), &format!("n{id}")),
                threads: 2,
                raft: timers.clone(),
                transport: TransportConfig::default(),
            };
            c.start_peer(s)?;
        }
        let members: BTreeMap<u64, String> = c
            .peers
            .iter()
            .map(|(id, p)| (*id, p.advertise().to_owned()))
            .collect();
        let first = c.peers.get(&1).context("no peer n1")?;
        c.rt.block_on(first.initialize(members))?;
        c.wait_leader(Duration::from_secs(10))?;
        Ok(c)
    }

    fn start_peer(&mut self, mut s: PeerSettings) -> Result<()> {
        let store = CqlStore::connect(CqlConfig::with_contact_points(
            &self.double.addr().to_string(),
        ))?;
        let py = PyPool::new(PyPoolConfig::new("python3", s.threads));
        let ctx = ExecContext::new(Arc::new(store)).with_py(Arc::new(py));
        let peer = self.rt.block_on(Peer::start(s.clone(), ctx))?;
        // A restart binds the same address, so the others' membership still points at it.
        s.listen = peer.advertise().parse()?;
        s.advertise = Some(peer.advertise().to_owned());
        self.settings.insert(s.id, s.clone());
        self.peers.insert(s.id, peer);
        Ok(())
    }

    /// Every peer's address, comma-separated (what `--cluster` takes).
    pub(crate) fn addrs(&self) -> String {
        self.settings
            .values()
            .filter_map(|s| s.advertise.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The certificate directory (`--tls-dir`).
    pub(crate) fn tls_dir(&self) -> PathBuf {
        self.dir.path().join("tls")
    }

    /// The leader every running peer agrees on, if any.
    pub(crate) fn leader(&self) -> Option<u64> {
        let mut leaders = self
            .peers
            .values()
            .map(|p| p.core().raft().metrics().borrow().current_leader);
        let first = leaders.next()??;
        leaders.all(|l| l == Some(first)).then_some(first)
    }

    /// Waits until the running peers agree on a leader.
    pub(crate) fn wait_leader(&self, timeout: Duration) -> Result<u64> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.leader()
                && self.peers.contains_key(&l)
            {
                return Ok(l);
            }
            if Instant::now() > deadline {
                bail!("no leader after {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops a peer abruptly (no hand-back, no flush beyond what is durable).
    pub(crate) fn kill(&mut self, id: u64) -> Result<()> {
        let p = self
            .peers
            .remove(&id)
            .with_context(|| format!("n{id} is not running"))?;
        self.rt.block_on(p.kill());
        Ok(())
    }

    /// Starts a killed peer again on its data directory and address.
    pub(crate) fn restart(&mut self, id: u64) -> Result<()> {
        let s = self
            .settings
            .get(&id)
            .cloned()
            .with_context(|| format!("n{id} never ran"))?;
        self.start_peer(s)
    }

    /// Applied index of a running peer.
    pub(crate) fn applied(&self, id: u64) -> Option<u64> {
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
    pub(crate) fn start_impostor(&self, id: u64, cert: &str) -> Result<()> {
        let s = PeerSettings {
            id,
            listen: "127.0.0.1:0".parse()?,
            advertise: None,
            data_dir: self.dir.path().join(format!("impostor{id}")),
            tls: TlsFiles::in_dir(&self.tls_dir(), cert),
            threads: 1,
            raft: Self::fast_timers(),
            transport: TransportConfig::default(),
        };
        let store = CqlStore::connect(CqlConfig::with_contact_points(
            &self.double.addr().to_string(),
        ))?;
        let ctx = ExecContext::new(Arc::new(store));
        let peer = self.rt.block_on(Peer::start(s, ctx))?;
        self.rt.block_on(peer.shutdown());
        Ok(())
    }

    /// The running peer `id`.
    pub(crate) fn peer(&self, id: u64) -> Option<&Peer> {
        self.peers.get(&id)
    }

    /// Waits until every running peer has applied at least what the leader has.
    pub(crate) fn wait_caught_up(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let leader = self.wait_leader(timeout)?;
            let target = self.applied(leader);
            if self.running().iter().all(|id| self.applied(*id) >= target) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("peers did not catch up with the leader's applied index {target:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Ids of running peers.
    pub(crate) fn running(&self) -> Vec<u64> {
        self.peers.keys().copied().collect()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let peers = std::mem::take(&mut self.peers);
        self.rt.block_on(async move {
            for (_, p) in peers {
                p.shutdown().await;
            }
        });
    }
}
