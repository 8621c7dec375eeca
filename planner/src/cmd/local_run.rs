//! `planner run` / `exec-node`: a local run with progress bars, signals that stop it cleanly,
//! tracing, and the exit code from its report.

use std::process::ExitCode;
use std::sync::Arc;

use crate::*;

pub(crate) fn run_plan(
    target: &RunTarget,
    start_nodes: Vec<String>,
    exec_node: Option<String>,
) -> anyhow::Result<ExitCode> {
    let Some(plan) = plan_or_report(&target.script, target.params.as_deref()) else {
        return Ok(ExitCode::FAILURE);
    };
    let Some(start) = start_or_report(&plan, &start_nodes) else {
        return Ok(ExitCode::FAILURE);
    };
    let capi = planner::capi::load(target.capi_config.as_deref())?;
    for ignored in &capi.ignored {
        eprintln!("warning: Capillaries setting {ignored}");
    }
    let log_level = capi.log_level.clone();
    let settings = planner::run::RunSettings {
        script: target.script.clone(),
        params: target.params.clone(),
        keyspace: target.keyspace.clone(),
        data_dir: target.store.target().data_dir,
        store: target.store.store,
        cql_contact_points: target.store.cql_contact_points.clone(),
        cql_config: target.store.cql_config.clone(),
        threads: target.threads,
        memory_budget: target.memory_budget,
        python: target.python.clone(),
        python_args: target.python_args.clone(),
        start_nodes: start.names,
        exec_node: exec_node.is_some(),
        capi: Some(capi),
        tracing: start_tracing(log_level.as_deref())?,
    };
    let interrupt = Arc::new(plexus_node::local_run::Interrupt::new());
    on_signals(interrupt.clone())?;
    let progress = planner::progress::RunProgress::new();
    let report =
        planner::run::run_interruptible(&plan, &settings, &progress, Some(interrupt.clone()));
    // Spans are flushed before the process exits, whatever the run's outcome.
    if let Some(t) = &settings.tracing {
        t.shutdown();
    }
    let code = finish_report(&report?);
    if interrupt.requested().is_some() {
        return Ok(ExitCode::from(INTERRUPTED));
    }
    Ok(code)
}

/// The exit code of an interrupted `planner run` (128 + SIGINT, as shells report it).
pub(crate) const INTERRUPTED: u8 = 130;

/// SIGINT and SIGTERM: the first stops the run cleanly (its ledger says why, its Python
/// workers end, the report is printed, exit 130); a second exits at once. Registered before
/// this returns, so no signal in between takes the default (silent) death.
pub(crate) fn on_signals(interrupt: Arc<plexus_node::local_run::Interrupt>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("cannot start the signal handler")?;
    let (mut int, mut term) = {
        let _in_rt = rt.enter();
        (
            signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
        )
    };
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            rt.block_on(async move {
                let mut seen = 0;
                loop {
                    let name = tokio::select! {
                        _ = int.recv() => "SIGINT",
                        _ = term.recv() => "SIGTERM",
                    };
                    seen += 1;
                    if seen > 1 {
                        eprintln!("{name} again: exiting at once");
                        std::process::exit(i32::from(INTERRUPTED));
                    }
                    eprintln!(
                        "{name}: stopping the run (its Python workers end; send it again to exit at once)"
                    );
                    interrupt.request(&format!("interrupted by {name}"));
                }
            });
        })
        .context("cannot start the signal handler")?;
    Ok(())
}

/// The logs and span export of `planner run`. Logs go to stderr, filtered by `RUST_LOG`, else
/// by Capillaries' `log.level` (`capi_level`), else at warn with span export and off without;
/// what py_calc formulas print (target `plexus::py_calc`, with node, batch and row) is shown
/// unless `RUST_LOG` says otherwise. Spans are exported when `OTEL_EXPORTER_OTLP_ENDPOINT` is
/// set (service name `OTEL_SERVICE_NAME`, else `planner`), with `tracing` spans bridged.
pub(crate) fn start_tracing(
    capi_level: Option<&str>,
) -> anyhow::Result<Option<Arc<plexus_node::telemetry::Tracing>>> {
    use plexus_node::telemetry::{LogSettings, TelemetrySettings, Tracing, init_logging};
    let settings = TelemetrySettings {
        service_name: "planner".to_owned(),
        ..TelemetrySettings::default()
    }
    .with_env();
    let tracing = Tracing::start(&settings, None)?;
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| {
        let base = match (capi_level, &tracing) {
            (Some(level), _) => capi_log_filter(level),
            (None, Some(_)) => "warn".to_owned(),
            (None, None) => "off".to_owned(),
        };
        format!("{base},plexus::py_calc=info")
    });
    let log = LogSettings {
        filter: Some(filter),
        ..LogSettings::default()
    };
    // A subscriber installed already (a library caller) keeps its place.
    let _ = init_logging(&log, tracing.as_deref());
    Ok(tracing)
}

/// Capillaries' zap level (`debug`, `info`, `warn`, `error`, `dpanic`, `panic`, `fatal`) as a
/// log filter.
pub(crate) fn capi_log_filter(level: &str) -> String {
    match level.trim().to_ascii_lowercase().as_str() {
        "debug" => "debug",
        "info" => "info",
        "warn" | "warning" => "warn",
        _ => "error",
    }
    .to_owned()
}

/// Prints the final table and the failed nodes with their reasons; exit 0 only when the run
/// succeeded (a stopped run did not).
pub(crate) fn finish_report(report: &plexus_node::local_run::RunReport) -> ExitCode {
    print!("{}", planner::progress::report_table(report));
    for n in &report.nodes {
        for notice in &n.notices {
            eprintln!("notice: node {}: {notice}", n.name);
        }
    }
    for n in report.failed() {
        match n.errors.as_slice() {
            [] => eprintln!("node {} failed (no reason recorded)", n.name),
            [one] => eprintln!("node {} failed: {one}", n.name),
            many => {
                eprintln!("node {} failed:", n.name);
                for e in many {
                    eprintln!("  {e}");
                }
            }
        }
    }
    if report.outcome.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
