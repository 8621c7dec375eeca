//! Run and node/batch status values (spec §9.5), with Capillaries' numeric codes.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Status of a run (`wfmodel.Run*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RunStatus {
    /// Never started (code 0).
    None,
    /// Started, not all affected nodes final (code 1).
    Start,
    /// All affected nodes final, even with failures (code 2).
    Complete,
    /// Stopped by an operator; wins over `Complete` (code 3).
    Stop,
}

impl RunStatus {
    /// The numeric code Capillaries stores and prints.
    pub fn code(self) -> i64 {
        match self {
            Self::None => 0,
            Self::Start => 1,
            Self::Complete => 2,
            Self::Stop => 3,
        }
    }

    /// The lower-case name used in comments and diagrams.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Start => "start",
            Self::Complete => "complete",
            Self::Stop => "stop",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Status of a script node or of one of its batches in a run (`wfmodel.NodeBatch*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum NodeBatchStatus {
    /// Not started (code 0).
    None,
    /// Claimed / running (code 1).
    Start,
    /// Finished successfully (code 2).
    Success,
    /// Failed, including dependency `nogo` (code 3).
    Fail,
    /// The run was stopped before this batch started (code 104).
    StopReceived,
}

impl NodeBatchStatus {
    /// The numeric code Capillaries stores and prints.
    pub fn code(self) -> i64 {
        match self {
            Self::None => 0,
            Self::Start => 1,
            Self::Success => 2,
            Self::Fail => 3,
            Self::StopReceived => 104,
        }
    }

    /// The lower-case name used in comments and diagrams.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Start => "start",
            Self::Success => "success",
            Self::Fail => "fail",
            Self::StopReceived => "stopreceived",
        }
    }

    /// Whether the status is final (success, fail or stopreceived).
    pub fn is_final(self) -> bool {
        matches!(self, Self::Success | Self::Fail | Self::StopReceived)
    }
}

impl fmt::Display for NodeBatchStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a run came to, in the one vocabulary every front end shows: `running`,
/// `succeeded`, `failed (N nodes)` or `stopped (reason)`. Capillaries' raw [`RunStatus`] calls
/// a run with failed nodes `complete`; that value stays in its history formats only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RunOutcome {
    /// Not every processed node is final yet.
    Running,
    /// Every processed node succeeded.
    Succeeded,
    /// Every processed node is final and these failed (plan order).
    Failed {
        /// The failed nodes.
        nodes: Vec<String>,
    },
    /// An operator, an interruption or an error stopped the run.
    Stopped {
        /// The stop's comment.
        reason: String,
    },
}

impl RunOutcome {
    /// The outcome's word alone: running, succeeded, failed or stopped.
    pub fn word(&self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed { .. } => "failed",
            Self::Stopped { .. } => "stopped",
        }
    }

    /// Whether the run ended with every node succeeded.
    pub fn is_success(&self) -> bool {
        matches!(self, Self::Succeeded)
    }

    /// Whether the run has ended.
    pub fn is_final(&self) -> bool {
        !matches!(self, Self::Running)
    }
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Failed { nodes } => {
                let n = nodes.len();
                write!(f, "failed ({n} node{})", if n == 1 { "" } else { "s" })
            }
            Self::Stopped { reason } if reason.is_empty() => {
                f.write_str("stopped (no reason given)")
            }
            Self::Stopped { reason } => write!(f, "stopped ({reason})"),
            other => f.write_str(other.word()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_capillaries() {
        let run: Vec<i64> = [
            RunStatus::None,
            RunStatus::Start,
            RunStatus::Complete,
            RunStatus::Stop,
        ]
        .map(RunStatus::code)
        .to_vec();
        assert_eq!(run, [0, 1, 2, 3]);
        let nb: Vec<i64> = [
            NodeBatchStatus::None,
            NodeBatchStatus::Start,
            NodeBatchStatus::Success,
            NodeBatchStatus::Fail,
            NodeBatchStatus::StopReceived,
        ]
        .map(NodeBatchStatus::code)
        .to_vec();
        assert_eq!(nb, [0, 1, 2, 3, 104]);
        // The derived order follows the codes, which run-status combination relies on.
        assert!(NodeBatchStatus::StopReceived > NodeBatchStatus::Fail);
        assert!(NodeBatchStatus::Fail > NodeBatchStatus::Success);
    }
}
