//! The in-process test cluster: `plexus_node::cluster::LocalCluster` with every peer on one
//! CQL wire double, CPython for py_calc, and a temp dir that lives as long as the cluster.
#![allow(dead_code)]

use std::sync::Arc;

use anyhow::Result;
use plexus_node::cluster::{LocalCluster, RaftTimers};
use plexus_node::exec::ExecContext;
use plexus_node::pycalc::{PyPool, PyPoolConfig};
use plexus_node::store::{CqlConfig, CqlStore};
use plexus_node::telemetry::TelemetrySettings;
use plexus_testkit::cql::CqlDouble;

/// A [`LocalCluster`] with the store and directory it needs.
pub(crate) struct TestCluster {
    // Field order is drop order: the peers stop before the double and the directory go.
    pub(crate) cluster: LocalCluster,
    pub(crate) double: CqlDouble,
    pub(crate) dir: tempfile::TempDir,
}

impl std::ops::Deref for TestCluster {
    type Target = LocalCluster;
    fn deref(&self) -> &LocalCluster {
        &self.cluster
    }
}

impl std::ops::DerefMut for TestCluster {
    fn deref_mut(&mut self) -> &mut LocalCluster {
        &mut self.cluster
    }
}

impl TestCluster {
    /// Runs `exe ARGS` (in `cwd` when given) pointed at this cluster through `PLEXUS_CLUSTER`
    /// and `PLEXUS_TLS_DIR`; its stdout, or an error with its stderr.
    pub(crate) fn cli(
        &self,
        exe: &str,
        args: &[&str],
        cwd: Option<&std::path::Path>,
    ) -> Result<String> {
        let mut cmd = std::process::Command::new(exe);
        cmd.args(args)
            .env("PLEXUS_CLUSTER", self.addrs())
            .env("PLEXUS_TLS_DIR", self.tls_dir());
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        let out = cmd.output()?;
        anyhow::ensure!(
            out.status.success(),
            "{exe} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `n` peers with 2 executor threads each.
    pub(crate) fn start(n: u64) -> Result<Self> {
        Self::start_with(n, LocalCluster::fast_timers())
    }

    /// Timers of test clusters.
    pub(crate) fn fast_timers() -> RaftTimers {
        LocalCluster::fast_timers()
    }

    /// `n` peers with these Raft timers.
    pub(crate) fn start_with(n: u64, timers: RaftTimers) -> Result<Self> {
        Self::start_observed(n, timers, TelemetrySettings::default())
    }

    /// `n` peers exporting spans and serving metrics as `telemetry` says.
    pub(crate) fn start_observed(
        n: u64,
        timers: RaftTimers,
        telemetry: TelemetrySettings,
    ) -> Result<Self> {
        Self::start_full(n, timers, telemetry, None)
    }

    /// `n` peers each serving metrics and the web console (with `console`) on a port of its own.
    pub(crate) fn start_with_console(
        n: u64,
        console: plexus_node::console::ConsoleSettings,
    ) -> Result<Self> {
        let telemetry = TelemetrySettings {
            metrics_listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
            ..TelemetrySettings::default()
        };
        Self::start_full(n, Self::fast_timers(), telemetry, Some(console))
    }

    fn start_full(
        n: u64,
        timers: RaftTimers,
        telemetry: TelemetrySettings,
        console: Option<plexus_node::console::ConsoleSettings>,
    ) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let double = CqlDouble::start()?;
        let addr = double.addr().to_string();
        let contexts = Box::new(move |_id: u64| -> Result<ExecContext, String> {
            let store = CqlStore::connect(CqlConfig::with_contact_points(&addr))
                .map_err(|e| e.to_string())?;
            let py = PyPool::new(PyPoolConfig::new("python3", 2));
            Ok(ExecContext::new(Arc::new(store)).with_py(Arc::new(py)))
        });
        let cluster = LocalCluster::start_with_console(
            dir.path(),
            n,
            2,
            contexts,
            timers,
            telemetry,
            console,
        )?;
        Ok(Self {
            cluster,
            double,
            dir,
        })
    }
}
