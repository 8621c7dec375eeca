//! Progress display of `planner run`: a bar per script node on a terminal, plain log lines
//! otherwise, and the final table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::sync::Mutex;
use std::time::Instant;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use plexus_node::engine::{Observer, Progress, RunReport};

/// Per-node counters shown on a bar.
#[derive(Default)]
struct NodeCounters {
    done: u64,
    rows_in: u64,
    rows_out: u64,
    failed: u64,
}

/// Shows run progress on stderr: indicatif bars on a TTY, one line per event otherwise.
pub struct RunProgress {
    tty: bool,
    multi: MultiProgress,
    bars: Mutex<BTreeMap<String, (ProgressBar, NodeCounters)>>,
    started: Instant,
}

impl RunProgress {
    /// Bars when stderr is a terminal, plain lines otherwise.
    pub fn new() -> Self {
        let tty = std::io::stderr().is_terminal();
        let multi = if tty {
            MultiProgress::new()
        } else {
            MultiProgress::with_draw_target(ProgressDrawTarget::hidden())
        };
        Self {
            tty,
            multi,
            bars: Mutex::new(BTreeMap::new()),
            started: Instant::now(),
        }
    }

    fn message(c: &NodeCounters) -> String {
        let mut m = format!("rows in {} out {}", c.rows_in, c.rows_out);
        if c.failed > 0 {
            let _ = write!(m, ", {} failed", c.failed);
        }
        m
    }
}

impl Default for RunProgress {
    fn default() -> Self {
        Self::new()
    }
}

impl Observer for RunProgress {
    fn progress(&self, event: &Progress) {
        let mut bars = self.bars.lock().unwrap_or_else(|p| p.into_inner());
        match event {
            Progress::RunStarted { run_id, nodes } => {
                let width = nodes.iter().map(|(n, _)| n.len()).max().unwrap_or(10);
                let style = ProgressStyle::with_template(&format!(
                    // `wide_msg` is cut to the terminal's width: a long message would
                    // otherwise wrap mid-word and break the bars' redraw.
                    "{{prefix:<{width}}} [{{bar:30}}] {{pos}}/{{len}} batches {{elapsed:>4}} {{wide_msg}}"
                ))
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
                if !self.tty {
                    eprintln!("run {run_id}: {} nodes", nodes.len());
                }
                for (name, batches) in nodes {
                    let bar = self.multi.add(ProgressBar::new(u64::from(*batches)));
                    bar.set_style(style.clone());
                    bar.set_prefix(name.clone());
                    bars.insert(name.clone(), (bar, NodeCounters::default()));
                }
            }
            Progress::BatchFinished {
                node,
                batch_idx,
                rows_in,
                rows_out,
                error,
            } => {
                if let Some((bar, c)) = bars.get_mut(node) {
                    c.done += 1;
                    c.rows_in += rows_in;
                    c.rows_out += rows_out;
                    if error.is_some() {
                        c.failed += 1;
                    }
                    bar.set_position(c.done);
                    bar.set_message(Self::message(c));
                }
                if !self.tty {
                    let t = self.started.elapsed().as_secs_f64();
                    match error {
                        None => eprintln!(
                            "[{t:7.2}s] {node} batch {batch_idx}: rows in {rows_in} out {rows_out}"
                        ),
                        Some(e) => eprintln!("[{t:7.2}s] {node} batch {batch_idx} FAILED: {e}"),
                    }
                }
            }
            Progress::NodeFinished { node, status } => {
                if let Some((bar, c)) = bars.get(node) {
                    bar.finish_with_message(format!("{} {}", Self::message(c), status.name()));
                }
                if !self.tty {
                    let t = self.started.elapsed().as_secs_f64();
                    eprintln!("[{t:7.2}s] {node}: {}", status.name());
                }
            }
        }
    }
}

/// The final table `planner run` prints: node, status, batches, rows, busy time.
pub fn report_table(r: &RunReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "run {} of keyspace {}: {} in {:.2} s",
        r.run_id,
        r.keyspace,
        r.outcome,
        r.elapsed_ms as f64 / 1000.0
    );
    let width = r
        .nodes
        .iter()
        .map(|n| n.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = writeln!(
        out,
        "{:<width$}  {:<12}  {:>7}  {:>10}  {:>10}  {:>8}",
        "node", "status", "batches", "rows in", "rows out", "busy s"
    );
    for n in &r.nodes {
        let _ = writeln!(
            out,
            "{:<width$}  {:<12}  {:>7}  {:>10}  {:>10}  {:>8.2}",
            n.name,
            n.status.map_or("none", |s| s.name()),
            n.batches,
            n.rows_in,
            n.rows_out,
            n.busy_ms as f64 / 1000.0
        );
    }
    out
}
