//! The tables `plexus-bench run` prints.

use std::fmt::Write as _;

use super::BenchReport;
use super::measure::Measured;

/// One peer's figures in one round, against Plexus' in the same round.
#[derive(Clone, Debug, PartialEq)]
pub struct RoundRatio {
    /// Peer name.
    pub peer: String,
    /// Round number, from 1.
    pub round: usize,
    /// Whether Plexus ran before the peers in that round.
    pub plexus_first: bool,
    /// Plexus' wall seconds.
    pub plexus_wall: f64,
    /// The peer's wall seconds.
    pub peer_wall: f64,
    /// Plexus' wall over the peer's.
    pub wall: f64,
    /// Plexus' CPU over the peer's.
    pub cpu: f64,
    /// Whether other processes or the host took a notable share of the machine while either
    /// ran ([`Measured::disturbed`]).
    pub disturbed: bool,
}

/// Each peer's ratios to Plexus, round by round. A round where either failed or their
/// outputs differ is left out: it has no ratio.
pub fn round_ratios(rounds: &[BenchReport]) -> Vec<RoundRatio> {
    let mut out = Vec::new();
    for (i, r) in rounds.iter().enumerate() {
        let Some(p) = r.engines.first().filter(|p| p.error.is_none()) else {
            continue;
        };
        let Some(pm) = &p.measured else { continue };
        for e in r.engines.iter().skip(1) {
            let agrees = e.error.is_none() && e.agreement.iter().all(|(_, d)| d.is_none());
            let Some(m) = e.measured.as_ref().filter(|_| agrees) else {
                continue;
            };
            out.push(RoundRatio {
                peer: e.engine.clone(),
                round: i + 1,
                plexus_first: r.plexus_first,
                plexus_wall: pm.wall.as_secs_f64(),
                peer_wall: m.wall.as_secs_f64(),
                wall: pm.wall.as_secs_f64() / m.wall.as_secs_f64().max(1e-9),
                cpu: pm.cpu.as_secs_f64() / m.cpu.as_secs_f64().max(1e-9),
                disturbed: pm.disturbed().is_some() || m.disturbed().is_some(),
            });
        }
    }
    out
}

/// The median of `v` (the mean of the middle two for an even count); `None` when empty.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => v.get(n / 2).copied(),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The ratios of every round side by side, then per peer their median and largest.
pub fn render_rounds(rounds: &[BenchReport]) -> String {
    let ratios = round_ratios(rounds);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nrounds (ratio = Plexus / peer, above 1 = Plexus slower)"
    );
    let _ = writeln!(
        out,
        "{:<8} {:>6} {:>7} {:>14} {:>12} {:>11} {:>10}  machine",
        "peer", "round", "first", "plexus wall s", "peer wall s", "wall ratio", "cpu ratio"
    );
    for x in &ratios {
        let _ = writeln!(
            out,
            "{:<8} {:>6} {:>7} {:>14.2} {:>12.2} {:>11.2} {:>10.2}  {}",
            x.peer,
            x.round,
            if x.plexus_first { "plexus" } else { "peer" },
            x.plexus_wall,
            x.peer_wall,
            x.wall,
            x.cpu,
            if x.disturbed {
                "BUSY (see the round's notes)"
            } else {
                "quiet"
            }
        );
    }
    let mut peers: Vec<&str> = ratios.iter().map(|x| x.peer.as_str()).collect();
    peers.sort_unstable();
    peers.dedup();
    for peer in peers {
        let mine: Vec<&RoundRatio> = ratios.iter().filter(|x| x.peer == peer).collect();
        let wall = median(mine.iter().map(|x| x.wall).collect());
        let cpu = median(mine.iter().map(|x| x.cpu).collect());
        let worst = mine.iter().map(|x| x.wall).fold(f64::NAN, f64::max);
        if let (Some(wall), Some(cpu)) = (wall, cpu) {
            let _ = writeln!(
                out,
                "{peer:<8} median of {} of {} rounds: wall ratio {wall:.2}, cpu ratio {cpu:.2}; \
                 largest wall ratio {worst:.2}",
                mine.len(),
                rounds.len()
            );
        }
        // When some rounds ran beside other work, the quiet ones alone are the fair figure.
        let quiet: Vec<&&RoundRatio> = mine.iter().filter(|x| !x.disturbed).collect();
        if !quiet.is_empty() && quiet.len() < mine.len() {
            let wall = median(quiet.iter().map(|x| x.wall).collect());
            let cpu = median(quiet.iter().map(|x| x.cpu).collect());
            if let (Some(wall), Some(cpu)) = (wall, cpu) {
                let _ = writeln!(
                    out,
                    "{peer:<8} median of the quiet rounds only ({} of {}): wall ratio {wall:.2}, \
                     cpu ratio {cpu:.2}",
                    quiet.len(),
                    mine.len()
                );
            }
        }
    }
    out
}

/// Engine table, Plexus stage table and output agreement, as text.
pub fn render(r: &BenchReport) -> String {
    let o = &r.options;
    let rows = r.data.total_rows();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{} scale {} ({} input rows: {}), {} threads{}",
        o.pipeline.name(),
        o.scale,
        rows,
        r.data
            .rows
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        o.threads,
        match (o.rounds > 1, r.plexus_first) {
            (false, _) => "",
            (true, true) => ", plexus ran first",
            (true, false) => ", the peers ran first",
        }
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
    for (e, why) in r
        .engines
        .iter()
        .filter_map(|e| Some((e, e.measured.as_ref().and_then(Measured::disturbed)?)))
    {
        let _ = writeln!(
            out,
            "NOTE: while {} ran, {why}: its figures are not those of an idle machine",
            e.engine
        );
    }
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

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt as _;
    use std::path::PathBuf;
    use std::process::ExitStatus;
    use std::time::Duration;

    use super::*;
    use crate::run::data::DataSet;
    use crate::run::measure::Measured;
    use crate::run::{EngineResult, Pipeline, RunOptions, plexus_first};

    fn engine(name: &str, wall: f64, cpu: f64, agrees: bool) -> EngineResult {
        EngineResult {
            engine: name.into(),
            measured: Some(Measured {
                status: ExitStatus::from_raw(0),
                wall: Duration::from_secs_f64(wall),
                cpu: Duration::from_secs_f64(cpu),
                peak_rss_kib: 1024,
                others_cpu: Duration::ZERO,
                steal: Duration::ZERO,
                cpus: 2,
            }),
            out_dir: PathBuf::new(),
            error: None,
            agreement: vec![("out".into(), (!agrees).then(|| "row 3 differs".to_string()))],
        }
    }

    fn round(first: bool, engines: Vec<EngineResult>) -> BenchReport {
        BenchReport {
            options: RunOptions {
                pipeline: Pipeline::Lookup,
                scale: 1.0,
                seed: 1,
                threads: 2,
                peers: Vec::new(),
                work: PathBuf::new(),
                bench_dir: PathBuf::new(),
                bench_exe: PathBuf::new(),
                python: None,
                peer_python: PathBuf::new(),
                split_mib: None,
                rounds: 3,
            },
            data: DataSet {
                dir: PathBuf::new(),
                rows: Default::default(),
                reused: true,
            },
            engines,
            plexus: None,
            plexus_first: first,
        }
    }

    #[test]
    fn rounds_alternate_who_runs_first() {
        let firsts: Vec<bool> = (0..4).map(plexus_first).collect();
        assert_eq!(firsts, [true, false, true, false]);
    }

    #[test]
    fn medians_take_the_middle_or_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    /// Each round's ratio is Plexus' figure over the peer's of the same round; a round whose
    /// outputs differ or whose Plexus failed gives no ratio, and the summary says of how many
    /// rounds its median is.
    #[test]
    fn ratios_pair_each_round_and_skip_rounds_without_agreement() {
        let mut failed = engine("plexus", 10.0, 10.0, true);
        failed.error = Some("exit 1".into());
        // Round 2's DuckDB ran while something else took 20 of the machine's 100 CPU-s.
        let mut busy_duckdb = engine("duckdb", 50.0, 60.0, true);
        if let Some(m) = &mut busy_duckdb.measured {
            m.others_cpu = Duration::from_secs(20);
        }
        let rounds = vec![
            round(
                true,
                vec![
                    engine("plexus", 60.0, 100.0, true),
                    engine("duckdb", 40.0, 50.0, true),
                ],
            ),
            round(false, vec![engine("plexus", 50.0, 90.0, true), busy_duckdb]),
            round(
                true,
                vec![
                    engine("plexus", 45.0, 80.0, true),
                    engine("duckdb", 30.0, 40.0, false),
                ],
            ),
            round(false, vec![failed, engine("duckdb", 30.0, 40.0, true)]),
        ];
        let r = round_ratios(&rounds);
        let got: Vec<(usize, bool, f64, f64)> = r
            .iter()
            .map(|x| (x.round, x.plexus_first, x.wall, x.cpu))
            .collect();
        assert_eq!(got, [(1, true, 1.5, 2.0), (2, false, 1.0, 1.5)]);
        let busy: Vec<bool> = r.iter().map(|x| x.disturbed).collect();
        assert_eq!(busy, [false, true]);
        let note = render(&rounds[1]);
        assert!(
            note.contains(
                "NOTE: while duckdb ran, other processes used 20.0 CPU-s (20 % of the machine)"
            ),
            "{note}"
        );
        assert!(!render(&rounds[0]).contains("NOTE"));
        let text = render_rounds(&rounds);
        let machine: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("duckdb ") && !l.contains("median"))
            .filter_map(|l| l.split("  ").last())
            .collect();
        assert_eq!(machine, ["quiet", "BUSY (see the round's notes)"], "{text}");
        assert!(
            text.contains("duckdb   median of 2 of 4 rounds: wall ratio 1.25, cpu ratio 1.75; largest wall ratio 1.50"),
            "{text}"
        );
        assert!(
            text.contains(
                "duckdb   median of the quiet rounds only (1 of 2): wall ratio 1.50, cpu ratio 2.00"
            ),
            "{text}"
        );
        // With every round quiet there is no second median.
        assert!(!render_rounds(&rounds[..1]).contains("quiet rounds only"));
    }
}
