//! The tables `plexus-bench run` prints.

use std::fmt::Write as _;

use super::BenchReport;

/// Engine table, Plexus stage table and output agreement, as text.
pub fn render(r: &BenchReport) -> String {
    let o = &r.options;
    let rows = r.data.total_rows();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{} scale {} ({} input rows: {}), {} threads",
        o.pipeline.name(),
        o.scale,
        rows,
        r.data
            .rows
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        o.threads
    );
    let _ = writeln!(
        out,
        "{:<8} {:>8} {:>8} {:>9} {:>11} {:>13} {:>13} {:>11} {:>10}  status",
        "engine",
        "wall s",
        "cpu s",
        "peak MiB",
        "rows/s",
        "rows/s/thread",
        "rows/cpu-s",
        "wall ratio",
        "cpu ratio"
    );
    let plexus = r.engines.first().and_then(|e| e.measured.as_ref());
    for e in &r.engines {
        let status = match &e.error {
            Some(err) => format!("FAILED: {err}"),
            None if e.engine == "plexus" => "ok".to_string(),
            None if e.agreement.iter().all(|(_, d)| d.is_none()) => "ok, outputs match".into(),
            None => "ok, OUTPUTS DIFFER".into(),
        };
        let Some(m) = &e.measured else {
            let _ = writeln!(out, "{:<8} {:>8}  {status}", e.engine, "-");
            continue;
        };
        let wall = m.wall.as_secs_f64();
        let cpu = m.cpu.as_secs_f64();
        // Ratio Plexus/peer: above 1 means Plexus took longer.
        let (wr, cr) = match plexus {
            Some(p) if e.engine != "plexus" => (
                format!("{:.2}", p.wall.as_secs_f64() / wall.max(1e-9)),
                format!("{:.2}", p.cpu.as_secs_f64() / cpu.max(1e-9)),
            ),
            _ => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            out,
            "{:<8} {:>8.2} {:>8.2} {:>9.0} {:>11.0} {:>13.0} {:>13.0} {:>11} {:>10}  {status}",
            e.engine,
            wall,
            cpu,
            m.peak_rss_kib as f64 / 1024.0,
            rows as f64 / wall.max(1e-9),
            rows as f64 / wall.max(1e-9) / o.threads.max(1) as f64,
            rows as f64 / cpu.max(1e-9),
            wr,
            cr,
        );
    }
    let _ = writeln!(
        out,
        "(rows/s = input rows / wall; rows/s/thread = rows/s / threads; rows/cpu-s = input rows \
         per core-second of CPU; \
         ratio = Plexus / peer, above 1 = Plexus slower)"
    );
    if let Some(p) = &r.plexus {
        let _ = writeln!(
            out,
            "\nplexus stages (run {}, engine time {:.2} s)",
            p.status,
            p.elapsed_ms as f64 / 1000.0
        );
        let _ = writeln!(
            out,
            "{:<12} {:>5} {:>9} {:>9} {:>11}",
            "stage", "nodes", "wall s", "busy s", "rows out"
        );
        for s in p.stages() {
            let _ = writeln!(
                out,
                "{:<12} {:>5} {:>9} {:>9.2} {:>11}",
                s.name,
                s.nodes,
                s.wall_ms
                    .map_or("-".to_string(), |w| format!("{:.2}", w as f64 / 1000.0)),
                s.busy_ms as f64 / 1000.0,
                s.rows_out
            );
        }
        let _ = writeln!(
            out,
            "{:<42} {:<12} {:>8} {:>9} {:>11}",
            "node", "stage", "batches", "busy s", "rows out"
        );
        for n in &p.nodes {
            let _ = writeln!(
                out,
                "{:<42} {:<12} {:>8} {:>9.2} {:>11}  {}",
                n.name,
                n.stage,
                n.batches,
                n.busy_ms as f64 / 1000.0,
                n.rows_out,
                n.status
            );
        }
    }
    let _ = writeln!(out, "\noutputs");
    for e in &r.engines {
        for (name, d) in &e.agreement {
            match d {
                None => {
                    let _ = writeln!(out, "  {:<8} {name}: same rows as plexus", e.engine);
                }
                Some(why) => {
                    let _ = writeln!(out, "  {:<8} {name}: {why}", e.engine);
                }
            }
        }
    }
    out
}
