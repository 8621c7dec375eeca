//! History rows of runs, nodes and batches (spec §9.1, §9.9) and their toolbelt CSV forms
//! (spec §10).

use std::fmt::Write as _;

use plexus_core::gotime;
use plexus_core::value::Time;
use serde::{Deserialize, Serialize};

use crate::status::{NodeBatchStatus, RunStatus};

/// The timestamp layout of the toolbelt history CSVs.
pub const TS_LAYOUT: &str = "2006-01-02T15:04:05.000-0700";

/// One `wf_run_history` row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunHistoryRow {
    /// Milliseconds since the Unix epoch, from the command that wrote the row.
    pub ts_ms: i64,
    /// Keyspace-wide recording order; breaks ties between equal timestamps.
    pub seq: u64,
    /// The run.
    pub run_id: u32,
    /// The status recorded.
    pub status: RunStatus,
    /// Free text (`api.StartRun`, the stop comment, the final node statuses).
    pub comment: String,
}

/// One `wf_node_history` row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeHistoryRow {
    /// Milliseconds since the Unix epoch.
    pub ts_ms: i64,
    /// Keyspace-wide recording order; breaks ties between equal timestamps.
    pub seq: u64,
    /// The run.
    pub run_id: u32,
    /// The script node.
    pub node: String,
    /// The batch whose processing wrote the row.
    pub written_by_batch_idx: u32,
    /// The node status recorded.
    pub status: NodeBatchStatus,
    /// Free text (`marked started by batch i / N`, …).
    pub comment: String,
}

/// One `wf_batch_history` row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchHistoryRow {
    /// Milliseconds since the Unix epoch.
    pub ts_ms: i64,
    /// Keyspace-wide recording order; breaks ties between equal timestamps.
    pub seq: u64,
    /// The run.
    pub run_id: u32,
    /// The script node.
    pub node: String,
    /// The batch.
    pub batch_idx: u32,
    /// Number of batches of the node.
    pub batches_total: u32,
    /// The batch status recorded; `None` marks a batch returned to the pool.
    pub status: NodeBatchStatus,
    /// First token of the batch (file readers: the batch index).
    pub first_token: i64,
    /// Last token of the batch (file readers: the batch index).
    pub last_token: i64,
    /// The worker that claimed the batch (Capillaries' `instance`); empty when unclaimed.
    pub instance: String,
    /// Rows read, on success.
    pub rows_in: Option<u64>,
    /// Rows written, on success.
    pub rows_out: Option<u64>,
    /// Processing time reported by the worker, on success.
    pub elapsed_ms: Option<u64>,
    /// The error, on failure.
    pub error: Option<String>,
    /// Free text (statistics, error, nogo reason, stop).
    pub comment: String,
}

/// The start/complete/stop times of one run (webapi run lifespan, spec §9.9).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunLifespan {
    /// The run.
    pub run_id: u32,
    /// Start time and comment.
    pub started: Option<(i64, String)>,
    /// Completion time and comment.
    pub completed: Option<(i64, String)>,
    /// Stop time and comment.
    pub stopped: Option<(i64, String)>,
    /// stop if stopped, else complete if completed, else start.
    pub final_status: RunStatus,
}

/// Formats a timestamp with [`TS_LAYOUT`], shown at `offset_secs` east of UTC (the caller
/// knows the local zone; this crate never reads it).
pub fn format_ts(ts_ms: i64, offset_secs: i32) -> String {
    let mut t = Time::from_unix_millis(ts_ms);
    if offset_secs != 0 {
        t.zone = Some(gotime::fixed_zone("", i64::from(offset_secs)));
    }
    gotime::format(&t, TS_LAYOUT)
}

/// A comment as the toolbelt prints it: commas become semicolons so the CSV stays 1 field.
fn csv_comment(c: &str) -> String {
    c.replace(',', ";")
}

/// `get_run_history` CSV: header `ts,run_id,status,comment`, one line per row.
pub fn run_history_csv(rows: &[RunHistoryRow], offset_secs: i32) -> String {
    let mut out = String::from("ts,run_id,status,comment\n");
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{}",
            format_ts(r.ts_ms, offset_secs),
            r.run_id,
            r.status.code(),
            csv_comment(&r.comment)
        );
    }
    out
}

/// `get_node_history` CSV. Quirk (spec §10, #45): Capillaries omits `written_by_batch_idx`
/// from the rows but not from the header; we print it so rows match the header.
pub fn node_history_csv(rows: &[NodeHistoryRow], offset_secs: i32) -> String {
    let mut out = String::from("ts,run_id,script_node,written_by_batch_idx,status,comment\n");
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{}",
            format_ts(r.ts_ms, offset_secs),
            r.run_id,
            r.node,
            r.written_by_batch_idx,
            r.status.code(),
            csv_comment(&r.comment)
        );
    }
    out
}

/// `get_batch_history` CSV. Quirk (spec §10, #45): Capillaries prints 9 values under an
/// 11-name header; we print all 11 (`instance` = the worker, `thread` empty).
pub fn batch_history_csv(rows: &[BatchHistoryRow], offset_secs: i32) -> String {
    let mut out = String::from(
        "ts,run_id,script_node,batch_idx,batches_total,status,first_token,last_token,instance,thread,comment\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},,{}",
            format_ts(r.ts_ms, offset_secs),
            r.run_id,
            r.node,
            r.batch_idx,
            r.batches_total,
            r.status.code(),
            r.first_token,
            r.last_token,
            r.instance,
            csv_comment(&r.comment)
        );
    }
    out
}

/// The token interval of batch `i` of `n` for a table reader (spec §8): contiguous intervals
/// over the signed 64-bit token space, the last one ending at `i64::MAX`.
pub fn token_range(i: u32, n: u32) -> (i64, i64) {
    let n = i128::from(n.max(1));
    let i = i128::from(i);
    let step = i128::from(i64::MAX) / n - i128::from(i64::MIN) / n;
    let start = i128::from(i64::MIN) + i * step;
    let end = if i + 1 >= n {
        i128::from(i64::MAX)
    } else {
        start + step - 1
    };
    let clamp = |v: i128| v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    (clamp(start), clamp(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_ranges_follow_capillaries() {
        assert_eq!(token_range(0, 1), (i64::MIN, i64::MAX));
        assert_eq!(token_range(0, 2), (i64::MIN, -2));
        assert_eq!(token_range(1, 2), (-1, i64::MAX));
        // Contiguous for an odd count.
        let n = 7;
        for i in 0..n - 1 {
            assert_eq!(token_range(i, n).1 + 1, token_range(i + 1, n).0);
        }
    }

    #[test]
    fn ts_layout() {
        assert_eq!(format_ts(0, 0), "1970-01-01T00:00:00.000+0000");
        assert_eq!(format_ts(1_500, 3600), "1970-01-01T01:00:01.500+0100");
    }

    #[test]
    fn run_history_csv_replaces_commas() {
        let rows = [RunHistoryRow {
            ts_ms: 0,
            seq: 0,
            run_id: 1,
            status: RunStatus::Complete,
            comment: r#"{"a":"success","b":"fail"}"#.into(),
        }];
        assert_eq!(
            run_history_csv(&rows, 0),
            "ts,run_id,status,comment\n1970-01-01T00:00:00.000+0000,1,2,{\"a\":\"success\";\"b\":\"fail\"}\n"
        );
    }
}
