//! Progress display of `planner run`: a bar per script node on a terminal, plain log lines
//! otherwise, and the final table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::sync::Mutex;
use std::time::Instant;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use plexus_node::local_run::{Observer, Progress, RunReport};

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
    /// Terminal columns the bars must fit in (they would wrap mid-word otherwise).
    columns: usize,
    multi: MultiProgress,
    bars: Mutex<BTreeMap<String, (ProgressBar, NodeCounters)>>,
    started: Instant,
}

impl RunProgress {
    /// Bars when stderr is a terminal, plain lines otherwise.
    pub fn new() -> Self {
        let tty = std::io::stderr().is_terminal();
        if tty {
            let columns = console::Term::stderr()
                .size_checked()
                .map_or(80, |(_, cols)| usize::from(cols));
            Self::with_target(ProgressDrawTarget::stderr(), columns)
        } else {
            Self {
                tty,
                ..Self::with_target(ProgressDrawTarget::hidden(), 80)
            }
        }
    }

    /// Bars drawn to `target`, a terminal `columns` wide.
    pub fn with_target(target: ProgressDrawTarget, columns: usize) -> Self {
        Self {
            tty: true,
            columns,
            multi: MultiProgress::with_draw_target(target),
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
                let names = nodes.iter().map(|(n, _)| n.chars().count()).max();
                let style =
                    ProgressStyle::with_template(&bar_template(names.unwrap_or(10), self.columns))
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

/// The bar line of a node, at most `columns` wide: the name (cut past a third of the line), a bar of 10 to 30 cells, the batch count and time, and the counters in what is left
/// (`wide_msg` cuts them to fit; a line longer than the terminal would wrap mid-word).
fn bar_template(name_width: usize, columns: usize) -> String {
    let name = name_width.clamp(4, (columns / 3).max(4));
    // " [" + "] " + "9999/9999" + " " + "999s" + " " around the bar, then 12 for the counters.
    let fixed = name + 2 + 2 + 9 + 1 + 4 + 1 + 12;
    let bar = columns.saturating_sub(fixed).clamp(10, 30);
    format!("{{prefix:<{name}!}} [{{bar:{bar}}}] {{pos:>4}}/{{len:<4}} {{elapsed:>4}} {{wide_msg}}")
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

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use indicatif::{ProgressDrawTarget, TermLike};
    use plexus_node::local_run::{Observer as _, Progress};
    use plexus_raft::NodeBatchStatus;

    use super::RunProgress;

    /// A terminal of a fixed width that keeps every line drawn on it.
    #[derive(Debug, Clone)]
    struct Screen {
        columns: u16,
        lines: Arc<Mutex<Vec<String>>>,
    }

    impl Screen {
        fn push(&self, s: &str) {
            let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
            lines.extend(s.split('\n').map(str::to_owned));
        }
    }

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            self.columns
        }
        fn move_cursor_up(&self, _n: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _n: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _n: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _n: usize) -> io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> io::Result<()> {
            self.push(s);
            Ok(())
        }
        fn write_str(&self, s: &str) -> io::Result<()> {
            self.push(s);
            Ok(())
        }
        fn clear_line(&self) -> io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn bars_fit_an_80_column_terminal_with_long_names_and_counters() {
        for columns in [80u16, 100, 60] {
            let screen = Screen {
                columns,
                lines: Arc::default(),
            };
            let target = ProgressDrawTarget::term_like(Box::new(screen.clone()));
            let progress = RunProgress::with_target(target, usize::from(columns));
            let nodes = [
                "read_the_very_long_named_portfolio_transactions_file",
                "join_accounts_with_their_transactions_and_positions",
                "out",
            ];
            progress.progress(&Progress::RunStarted {
                run_id: 1,
                nodes: nodes.iter().map(|n| ((*n).to_owned(), 1200)).collect(),
            });
            for node in nodes {
                for batch_idx in 0..3 {
                    progress.progress(&Progress::BatchFinished {
                        node: node.to_owned(),
                        batch_idx,
                        rows_in: 123_456_789,
                        rows_out: 987_654_321,
                        error: (batch_idx == 1).then(|| "boom".to_owned()),
                    });
                }
                progress.progress(&Progress::NodeFinished {
                    node: node.to_owned(),
                    status: NodeBatchStatus::Fail,
                });
            }
            let lines = screen.lines.lock().unwrap_or_else(|p| p.into_inner());
            let drawn: Vec<&String> = lines.iter().filter(|l| l.contains('[')).collect();
            assert!(!drawn.is_empty(), "nothing drawn at {columns} columns");
            for line in drawn {
                let width = console::measure_text_width(line);
                assert!(
                    width <= usize::from(columns),
                    "{width} > {columns} columns: {line:?}"
                );
            }
        }
    }
}
