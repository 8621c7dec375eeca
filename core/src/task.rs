//! Batch tasks: the unit of work the ledger hands to executors, and the rowids they write.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The content hash of a plan (BLAKE3 over its encoding): how a task names its plan, so any
/// peer holding the replicated plans can execute any task.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PlanHash(pub [u8; 32]);

impl fmt::Display for PlanHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for PlanHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PlanHash({self})")
    }
}

/// Which batch: the identity of a task in logs, errors and (next) sealed-task associated data.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct BatchId {
    /// Keyspace of the run.
    pub keyspace: String,
    /// Run id.
    pub run_id: u32,
    /// Script node name.
    pub node: String,
    /// Batch index.
    pub batch_idx: u32,
    /// The part of the batch when the ledger split it ([`BatchTask::part`]); `None` for a
    /// whole batch. Parts are units of claims, not batches: the index stays Capillaries'.
    pub part: Option<Slices>,
}

impl fmt::Display for BatchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/run {}/{}/batch {}",
            self.keyspace, self.run_id, self.node, self.batch_idx
        )?;
        match self.part {
            Some(p) => write!(f, " ({p})"),
            None => Ok(()),
        }
    }
}

/// One batch of one script node in one run: everything an executor needs besides the plan
/// and the store.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BatchTask {
    /// The plan the run executes.
    pub plan_hash: PlanHash,
    /// Keyspace of the run.
    pub keyspace: String,
    /// Which creation of the keyspace (the ledger's `Keyspace::incarnation`; 0 where
    /// keyspaces are never re-created under one ledger): what a peer's per-run caches are keyed
    /// by besides the run id, which restarts at 1 after a drop.
    #[serde(default)]
    pub keyspace_incarnation: u64,
    /// Run the batch belongs to; tables it writes carry this run id.
    pub run_id: u32,
    /// Script node name.
    pub node: String,
    /// Batch index, `0..batches_total`; for file readers the index of the URL.
    pub batch_idx: u32,
    /// Number of batches of the node.
    pub batches_total: u32,
    /// Run whose copy of the reader table is read (decided by the dependency policy); `None`
    /// for file readers.
    pub reader_run: Option<u32>,
    /// Run whose copy of the lookup table is read; `None` without a lookup.
    pub lookup_run: Option<u32>,
    /// Rows of the reader table in `reader_run` as the ledger recorded them (what its creator
    /// node's batches wrote); `None` when unknown. The lookup strategy is chosen from it.
    #[serde(default)]
    pub reader_rows: Option<u64>,
    /// Rows of the lookup table in `lookup_run` as the ledger recorded them; `None` when
    /// unknown or without a lookup.
    #[serde(default)]
    pub lookup_rows: Option<u64>,
    /// The trace the batch's span joins (its run's trace, parented by its node's span); set by
    /// the claimer before sealing, `None` when nothing is traced.
    #[serde(default)]
    pub trace: Option<TraceRef>,
    /// The part of a split table-reader batch this task runs (`exec::execute_part`); `None`
    /// for the whole batch. Inside the sealed bytes like every field, and in the envelope's
    /// associated data through [`BatchTask::id`], so a task opens only as the part claimed.
    #[serde(default)]
    pub part: Option<Slices>,
}

/// A remote span parent carried inside a sealed task: the W3C trace id and parent span id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TraceRef {
    /// The 16-byte trace id (one per run).
    pub trace_id: [u8; 16],
    /// The 8-byte id of the parent span (the script node's span).
    pub span_id: [u8; 8],
}

impl TraceRef {
    /// The trace id in the lowercase hex form Jaeger shows.
    pub fn trace_hex(&self) -> String {
        self.trace_id.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The trace of a run: the same on every peer without coordination, derived from the
/// keyspace, run id and the run's start time in the ledger's run history.
pub fn run_trace_id(keyspace: &str, run_id: u32, started_ms: i64) -> [u8; 16] {
    let mut h = blake3::Hasher::new();
    h.update(b"plexus-trace");
    h.update(&(keyspace.len() as u64).to_le_bytes());
    h.update(keyspace.as_bytes());
    h.update(&run_id.to_le_bytes());
    h.update(&started_ms.to_le_bytes());
    let mut id = [0u8; 16];
    id.copy_from_slice(&h.finalize().as_bytes()[..16]);
    id
}

/// The span id of a run's span (`node` = `None`) or of one script node's span in the trace.
pub fn span_id(trace_id: &[u8; 16], node: Option<&str>) -> [u8; 8] {
    let mut h = blake3::Hasher::new();
    h.update(b"plexus-span");
    h.update(trace_id);
    match node {
        None => h.update(b"run"),
        Some(n) => h.update(b"node:").update(n.as_bytes()),
    };
    let mut id = [0u8; 8];
    id.copy_from_slice(&h.finalize().as_bytes()[..8]);
    id
}

impl BatchTask {
    /// The batch's identity.
    pub fn id(&self) -> BatchId {
        BatchId {
            keyspace: self.keyspace.clone(),
            run_id: self.run_id,
            node: self.node.clone(),
            batch_idx: self.batch_idx,
            part: self.part,
        }
    }
}

/// The seed of a batch's rowids: a hash of (node, batch) so that re-executing a batch
/// produces the same rowids and overwrites its own earlier rows (idempotent writes). The run
/// id is left out on purpose: tables are per run already, and the same script on the same
/// inputs must put the same rows in the same table-reader batches (and so write the same
/// files) in run 1 and in run 7.
pub fn rowid_seed(node: &str, batch_idx: u32) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(b"plexus-rowid-v2");
    h.update(&(node.len() as u64).to_le_bytes());
    h.update(node.as_bytes());
    h.update(&batch_idx.to_le_bytes());
    let bytes = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&bytes.as_bytes()[..8]);
    u64::from_le_bytes(first)
}

/// The rowid of the `seq`-th row written by a batch, distinct for distinct `seq` within the
/// batch (the mix below is a bijection on u64 for a fixed seed).
///
/// Rowids spread over the whole i64 range, negative values included: table-reader batches
/// split that whole range into `expected_batches_total` intervals (spec §8), so rowids limited
/// to one half would leave half of the batches empty. Capillaries' rowids are non-negative,
/// but no output exposes them.
pub fn rowid(seed: u64, seq: u64) -> i64 {
    // splitmix64 finaliser: cheap, well distributed, invertible.
    let mut z = seed ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    z as i64
}

/// Slices every table-reader batch's range is cut into, by range position (the rowid on the
/// embedded store, its token on CQL): a part of a batch is a run of whole slices, and the rows
/// a batch writes are numbered per slice of their input row ([`slice_seq`]), so a part writes
/// the same rowids whatever other parts the batch was cut into.
pub const SLICES: u32 = 64;

/// Bits of a table-reader batch's sequence number that hold an output's rank among its
/// slice's outputs; the slice sits above them. 64 slices × 2^34 keeps every sequence number
/// below 2^40, the bound `planner table show --batch` tells a batch's rows by.
pub const SLICE_SHIFT: u32 = 34;

/// The sequence number ([`rowid`]) of the `rank`-th row a table-reader batch writes for input
/// rows of slice `slice`; `None` past 2^34 rows in one slice or beyond the last slice.
pub fn slice_seq(slice: u32, rank: u64) -> Option<u64> {
    (slice < SLICES && rank < 1 << SLICE_SHIFT).then(|| (u64::from(slice) << SLICE_SHIFT) | rank)
}

/// A part of a table-reader batch: slices `first..end` of its range ([`SLICES`]). The whole
/// batch is [`Slices::ALL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Slices {
    /// First slice of the part.
    pub first: u32,
    /// One past its last slice.
    pub end: u32,
}

impl Slices {
    /// The whole batch.
    pub const ALL: Self = Self {
        first: 0,
        end: SLICES,
    };

    /// Whether the part is the whole batch.
    pub fn is_all(&self) -> bool {
        *self == Self::ALL
    }

    /// Whether the part holds slice `j`.
    pub fn holds(&self, j: u32) -> bool {
        (self.first..self.end).contains(&j)
    }

    /// A batch cut into `n` parts (at least 1, at most [`SLICES`]) of as equal a number of
    /// slices as may be, in order.
    pub fn cut(n: u32) -> Vec<Self> {
        let n = n.clamp(1, SLICES);
        (0..n)
            .map(|k| Self {
                first: k * SLICES / n,
                end: (k + 1) * SLICES / n,
            })
            .collect()
    }
}

impl fmt::Display for Slices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "slices {}..{} of {SLICES}", self.first, self.end)
    }
}

/// Bits of a file row's rowid that hold its place in the file (see [`file_rowid`]); the
/// other 16 hold the URL's index, which the spec bounds at 32,767.
const PLACE_BITS: u32 = 48;

/// The place of the row starting at byte (or row) `at` of a file `extent` long, for
/// [`file_rowid`]: `at` scaled to 48 bits, so distinct starts get distinct places in the same
/// order. `None` when the extent is unknown (0), `at` lies outside it (the file changed), or
/// the file is too large for the scaling to keep starts apart (over 2^48).
pub fn file_place(at: u64, extent: u64) -> Option<u64> {
    if extent == 0 || at >= extent || extent > 1 << PLACE_BITS {
        return None;
    }
    u64::try_from((u128::from(at) << PLACE_BITS) / u128::from(extent)).ok()
}

/// The rowid of a file reader's row at `place` ([`file_place`]) of the node's URL `url_idx`.
///
/// Ascending rowids follow the file's order, so whatever reads a table in rowid order (a
/// table reader's batch, a `string_agg`, a key's matches) sees each file's rows in file order,
/// as Capillaries' users see them in the file. Places spread over the whole 48 bits whatever
/// the file's size, so the rowid ranges of table-reader batches (spec §8) still split every
/// file evenly; the rows of one file are told apart by their places and the files by the low
/// bits. Rows whose place is unknown keep the hashed [`rowid`].
pub fn file_rowid(place: u64, url_idx: u32) -> Option<i64> {
    if place >= 1 << PLACE_BITS || url_idx >= 1 << (64 - PLACE_BITS) {
        return None;
    }
    let ordered = (place << (64 - PLACE_BITS)) | u64::from(url_idx);
    // Flipping the sign bit keeps the unsigned order in i64's order.
    Some((ordered ^ (1 << 63)).cast_signed())
}

/// The URL index of a row whose rowid [`file_rowid`] made.
pub fn file_rowid_url(rowid: i64) -> u32 {
    (rowid.cast_unsigned() & ((1 << (64 - PLACE_BITS)) - 1)) as u32
}

/// The `seq` that [`rowid`] turned into `rowid` under `seed` (the finaliser is a bijection, so
/// it can be undone). Under another batch's seed the answer is a number no batch reaches, which
/// is how a table's row is told to the batch that wrote it.
pub fn rowid_seq(seed: u64, rowid: i64) -> u64 {
    let mut z = rowid as u64;
    z ^= (z >> 31) ^ (z >> 62);
    z = z.wrapping_mul(0x3196_42B2_D24D_8EC3);
    z ^= (z >> 27) ^ (z >> 54);
    z = z.wrapping_mul(0x96DE_1B17_3F11_9089);
    z ^= (z >> 30) ^ (z >> 60);
    (z ^ seed).wrapping_mul(0xF1DE_83E1_9937_733D)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn rowid_seq_undoes_rowid() {
        for (seed, seq) in [
            (0u64, 0u64),
            (1, 1),
            (u64::MAX, 12_345),
            (0xDEAD_BEEF, u64::MAX),
        ] {
            assert_eq!(rowid_seq(seed, rowid(seed, seq)), seq);
        }
        // Under another seed the sequence number is far beyond any batch's rows.
        assert!(rowid_seq(7, rowid(8, 3)) > 1 << 40);
    }

    #[test]
    fn slice_sequence_numbers_stay_below_the_batch_bound() {
        assert_eq!(slice_seq(0, 0), Some(0));
        assert_eq!(slice_seq(1, 0), Some(1 << SLICE_SHIFT));
        let last = slice_seq(SLICES - 1, (1 << SLICE_SHIFT) - 1).expect("in bounds");
        assert_eq!(last, (1 << 40) - 1, "every sequence number is below 2^40");
        assert_eq!(slice_seq(SLICES, 0), None);
        assert_eq!(slice_seq(0, 1 << SLICE_SHIFT), None);
    }

    #[test]
    fn a_batch_cut_into_parts_covers_every_slice_once_in_order() {
        for n in [1, 2, 3, 7, 64, 65, 1000] {
            let parts = Slices::cut(n);
            assert_eq!(parts.len() as u32, n.clamp(1, SLICES));
            assert_eq!(parts.first().map(|p| p.first), Some(0));
            assert_eq!(parts.last().map(|p| p.end), Some(SLICES));
            for w in parts.windows(2) {
                assert_eq!(w[0].end, w[1].first);
            }
            assert!(parts.iter().all(|p| p.first < p.end));
        }
        assert_eq!(Slices::cut(1), vec![Slices::ALL]);
        assert!(Slices::ALL.is_all() && Slices::ALL.holds(SLICES - 1));
    }

    #[test]
    fn file_rowids_follow_the_file_order_and_spread_over_i64() {
        let len = 10_000_000u64;
        let mut last = i64::MIN;
        let mut negative = 0;
        for at in (0..len).step_by(997) {
            let place = file_place(at, len).expect("inside the file");
            let r = file_rowid(place, 3).expect("a URL index under 2^16");
            assert!(r > last, "rowids ascend with the byte offset");
            assert_eq!(file_rowid_url(r), 3);
            negative += usize::from(r < 0);
            last = r;
        }
        let rows = len.div_ceil(997) as usize;
        assert!((rows * 45 / 100..rows * 55 / 100).contains(&negative));
        // Neighbouring bytes of the largest file allowed still get distinct places.
        let big = 1u64 << 48;
        assert_ne!(file_place(big - 2, big), file_place(big - 1, big));
        // Unknown extents, offsets past the end and files too large have no place.
        assert_eq!(file_place(0, 0), None);
        assert_eq!(file_place(5, 5), None);
        assert_eq!(file_place(0, big + 1), None);
        // Two files at the same place stay apart.
        assert_ne!(file_rowid(7, 0), file_rowid(7, 1));
        assert_eq!(file_rowid(0, 1 << 16), None);
    }

    #[test]
    fn rowids_are_deterministic_and_distinct() {
        let s = rowid_seed("read_orders", 0);
        assert_eq!(s, rowid_seed("read_orders", 0));
        assert_ne!(s, rowid_seed("read_orders", 1));
        assert_ne!(s, rowid_seed("read_order", 0));
        let ids: HashSet<i64> = (0..100_000).map(|i| rowid(s, i)).collect();
        assert_eq!(ids.len(), 100_000);
        let negative = ids.iter().filter(|&&r| r < 0).count();
        assert!(
            (45_000..55_000).contains(&negative),
            "rowids cover both halves of i64"
        );
    }

    #[test]
    fn trace_ids_are_derived_from_the_run() {
        let a = run_trace_id("ks", 1, 1_700_000_000_000);
        assert_eq!(
            a,
            run_trace_id("ks", 1, 1_700_000_000_000),
            "same run, same trace"
        );
        assert_ne!(a, run_trace_id("ks", 2, 1_700_000_000_000));
        assert_ne!(
            a,
            run_trace_id("ks", 1, 1_700_000_000_001),
            "a re-created keyspace"
        );
        assert_ne!(a, run_trace_id("kt", 1, 1_700_000_000_000));
        let run = span_id(&a, None);
        let node = span_id(&a, Some("read_orders"));
        assert_ne!(run, node);
        assert_ne!(node, span_id(&a, Some("read_order_items")));
        assert_eq!(node, span_id(&a, Some("read_orders")));
        let t = TraceRef {
            trace_id: [0xab; 16],
            span_id: run,
        };
        assert_eq!(t.trace_hex(), "ab".repeat(16));
    }

    #[test]
    fn task_round_trips_through_bincode() {
        let t = BatchTask {
            plan_hash: PlanHash([9; 32]),
            keyspace: "ks".into(),
            keyspace_incarnation: 0,
            run_id: 3,
            node: "n".into(),
            batch_idx: 2,
            batches_total: 10,
            reader_run: Some(1),
            lookup_run: None,
            reader_rows: None,
            lookup_rows: None,
            trace: Some(TraceRef {
                trace_id: run_trace_id("ks", 3, 1_700_000_000_000),
                span_id: [7; 8],
            }),
            part: None,
        };
        let bytes = bincode::serde::encode_to_vec(&t, bincode::config::standard()).unwrap();
        let (back, _): (BatchTask, _) =
            bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).unwrap();
        assert_eq!(back, t);
    }
}
