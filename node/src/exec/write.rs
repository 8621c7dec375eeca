//! The common write pipeline of every table-writing node (spec §7.1): compute the fields,
//! check their types, apply `having`, build the index keys, and hand the rows to the store in
//! large batches with deterministic rowids.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use plexus_core::expr::{Alias, Compiled, Rounding, Vars};
use plexus_core::key::build_key_into;
use plexus_core::row::encode_row;
use plexus_core::task::{BatchTask, SLICES, rowid, slice_seq};
use plexus_core::value::{AsCell, CellView, Type, Value};

use plexus_core::plan::{Field, Plan, Writer};

use super::batch::{BatchRun, BatchStats};
use super::cancel::Cancel;
use super::compiled::{OutField, OutIndex, TableOut};
use super::context::WRITE_CALL_BYTES;
use super::error::{BatchErrorKind, Inconsistency, RowLoc};
use crate::store::{
    IndexKind, IndexSpec, RowWrite, Rowid, RowidRange, Share, Slices, Store, StoreError, TableRef,
    TableSpec, WriteMode,
};

/// Duplicate messages kept in a batch error, as Capillaries keeps at most five.
pub(crate) const MAX_ERROR_MESSAGES: usize = 5;

/// A value standing in for unused slots of the fixed-size key argument array.
static NO_VALUE: Value = Value::Bool(false);

/// Most indexes have few components; their value references live on the stack.
const STACK_KEY_COMPONENTS: usize = 8;

/// Appends the key of `def` over `row[pos[i]]` to `out`.
pub(crate) fn key_into<C: AsCell>(
    out: &mut Vec<u8>,
    def: &plexus_core::key::IndexDef,
    pos: &[usize],
    row: &[C],
) -> Result<(), String> {
    let cell = |p: usize| {
        row.get(p)
            .map(AsCell::cell)
            .ok_or_else(|| format!("no value at position {p}"))
    };
    if pos.len() <= STACK_KEY_COMPONENTS {
        let mut cells = [CellView::Value(&NO_VALUE); STACK_KEY_COMPONENTS];
        for (slot, &p) in cells.iter_mut().zip(pos) {
            *slot = cell(p)?;
        }
        build_key_into(out, def, &cells[..pos.len()]).map_err(|e| e.to_string())
    } else {
        let cells = pos
            .iter()
            .map(|&p| cell(p))
            .collect::<Result<Vec<_>, _>>()?;
        build_key_into(out, def, &cells).map_err(|e| e.to_string())
    }
}

/// Checks that `v` has exactly the declared column type (no implicit conversion, spec §3.8).
pub(crate) fn check_type(v: &Value, ty: Type) -> Result<(), String> {
    if v.column_type() == Some(ty) {
        Ok(())
    } else {
        Err(format!(
            "expression returned {} ({}), expected {ty}",
            plexus_core::gofmt::format_value(v),
            v.go_type_name()
        ))
    }
}

/// A field error at `loc`.
pub(crate) fn field_err(
    loc: &dyn Fn() -> RowLoc,
    what: &'static str,
    name: &str,
    detail: impl ToString,
) -> BatchErrorKind {
    BatchErrorKind::Field {
        loc: loc(),
        what,
        name: name.to_owned(),
        detail: detail.to_string(),
    }
}

/// Sets `out` to the values of the cells of `row` that `read` marks, placeholders for the
/// others (which whatever reads `out` never reads): a row of cells seen by an expression.
pub(crate) fn values_read<C: AsCell>(row: &[C], read: &[bool], out: &mut Vec<Value>) {
    out.clear();
    out.extend(row.iter().zip(read).map(|(c, &read)| match read {
        true => c.cell().to_value(),
        false => Value::Bool(false),
    }));
}

/// Per field of `out`: whether its `having` reads it (none without `having`).
fn having_reads(out: &TableOut) -> Vec<bool> {
    let Some(h) = &out.having else {
        return Vec::new();
    };
    let refs = h.field_refs();
    out.fields
        .iter()
        .map(|f| {
            refs.iter()
                .any(|r| r.alias == Alias::W.name() && r.field == f.name)
        })
        .collect()
}

impl TableOut {
    /// Computes every field for `vars` into `w` (cleared first) with `rounding`, checking
    /// each result's type.
    pub(crate) fn compute(
        &self,
        vars: &Vars<'_>,
        rounding: Rounding,
        w: &mut Vec<Value>,
        loc: &dyn Fn() -> RowLoc,
    ) -> Result<(), BatchErrorKind> {
        w.clear();
        for f in &self.fields {
            w.push(eval_field(f, vars, rounding, loc)?);
        }
        Ok(())
    }

    /// [`TableOut::compute`] for a row read from one table (`r.*` only), taking the
    /// [`taken_columns`] `takes` names out of `r` instead of cloning them.
    pub(crate) fn compute_taking(
        &self,
        r: &mut [Value],
        takes: &[Option<usize>],
        w: &mut Vec<Value>,
        loc: &dyn Fn() -> RowLoc,
    ) -> Result<(), BatchErrorKind> {
        w.clear();
        let vars = Vars::new().with(Alias::R, r);
        for (f, take) in self.fields.iter().zip(takes) {
            w.push(match take {
                Some(_) => Value::Bool(false),
                None => eval_field(f, &vars, Rounding::To2, loc)?,
            });
        }
        take_columns(r, takes, w);
        Ok(())
    }

    /// Evaluates `having` on the computed row (no intermediate rounding, spec §5.6).
    pub(crate) fn having(
        &self,
        w: &[Value],
        loc: &dyn Fn() -> RowLoc,
    ) -> Result<bool, BatchErrorKind> {
        match &self.having {
            None => Ok(true),
            Some(h) => h
                .eval_bool(&Vars::new().with(Alias::W, w), Rounding::None)
                .map_err(|e| field_err(loc, "having", h.text(), e)),
        }
    }
}

/// Which of `exprs` (each with its declared type) may take its value out of the decoded
/// input row instead of cloning it: a bare `r.x` of its own type whose field no other of
/// `exprs` reads. Taking a value saves the clone's and the release's reference counting of
/// every string such a column copies through.
pub(crate) fn taken_columns<'e>(
    exprs: impl Iterator<Item = (&'e Compiled, Type)> + Clone,
    input_types: &[Type],
) -> Vec<Option<usize>> {
    let readers = |name: &str| {
        exprs
            .clone()
            .flat_map(|(e, _)| e.field_refs())
            .filter(|r| r.alias == Alias::R.name() && r.field == name)
            .count()
    };
    exprs
        .clone()
        .map(|(e, ty)| match (e.bare_field(), e.field_refs()) {
            (Some((Alias::R, c)), [only]) if input_types.get(c) == Some(&ty) => {
                (readers(&only.field) == 1).then_some(c)
            }
            _ => None,
        })
        .collect()
}

/// Moves into `w` the values `takes` names from the decoded input row `r`, leaving
/// placeholders there: the step after every other column was evaluated from `r`.
pub(crate) fn take_columns(r: &mut [Value], takes: &[Option<usize>], w: &mut [Value]) {
    for (slot, take) in w.iter_mut().zip(takes) {
        if let Some(v) = take.and_then(|c| r.get_mut(c)) {
            *slot = std::mem::replace(v, Value::Bool(false));
        }
    }
}

/// Evaluates one writer field and checks its type.
pub(crate) fn eval_field(
    f: &OutField,
    vars: &Vars<'_>,
    rounding: Rounding,
    loc: &dyn Fn() -> RowLoc,
) -> Result<Value, BatchErrorKind> {
    let v = f
        .expr
        .eval(vars, rounding)
        .map_err(|e| field_err(loc, "field", &f.name, e))?;
    check_type(&v, f.ty).map_err(|e| field_err(loc, "field", &f.name, e))?;
    Ok(v)
}

/// A table reader's numbering of its outputs per slice of their input rows.
struct Slicing {
    /// The whole batch's range (a part's slices are the batch's slices).
    range: RowidRange,
    /// The slice of the current input row.
    slice: u32,
    /// The positions of that slice.
    bounds: Option<RowidRange>,
    /// Rows written so far per slice.
    ranks: [u64; SLICES as usize],
}

/// The per-batch writer of one table: buffers encoded rows with their keys and writes them
/// with one [`Store::write_rows`] call per `flush_rows` rows or [`WRITE_CALL_BYTES`] of them,
/// reusing every buffer.
pub(crate) struct RowWriter<'a> {
    store: &'a dyn Store,
    /// Checked before every store write: a cancelled batch writes nothing more.
    cancel: &'a Cancel,
    keyspace: &'a str,
    spec: TableSpec,
    out: &'a TableOut,
    seed: u64,
    /// The batch being written, stored with every row.
    batch_idx: u32,
    /// The share of the batch this execution writes.
    share: Share,
    /// Sequence number of the next row: its position among the rows the batch writes, in
    /// deterministic read order, so that re-running the batch rewrites the same rowids.
    seq: u64,
    /// The next row's rowid when its reader gave it one ([`RowWriter::set_rowid`]), instead of
    /// the one from `seed` and `seq`.
    given: Option<Rowid>,
    /// A table reader's writer numbers rows per slice of their input rows instead of by
    /// `seq` ([`RowWriter::input`]).
    slicing: Option<Slicing>,
    pending: Vec<RowWrite>,
    used: usize,
    /// Encoded bytes of the queued rows and their keys ([`WRITE_CALL_BYTES`]).
    used_bytes: usize,
    flush_rows: usize,
    dup_count: u64,
    dup_messages: Vec<String>,
    pub(crate) rows_written: u64,
    /// Encoded bytes of the rows handed to the store.
    pub(crate) bytes_written: u64,
    pub(crate) duplicates_skipped: u64,
    /// Time in the store's write calls (flushes).
    pub(crate) write_time: Duration,
    /// Per field: whether `having` reads it (a row of cells builds the values of these only).
    having_reads: Vec<bool>,
    /// The values `having` reads of a row of cells, the other fields left as placeholders.
    having_row: Vec<Value>,
}

impl<'a> RowWriter<'a> {
    /// A writer of `share` of batch `b` for `out` into `spec` with rowids from `seed`,
    /// storing `batch_idx` with every row.
    pub(crate) fn new(
        b: &'a BatchRun<'_>,
        spec: TableSpec,
        out: &'a TableOut,
        seed: u64,
        batch_idx: u32,
        share: Share,
    ) -> Self {
        Self {
            store: b.ctx.store.as_ref(),
            cancel: b.cancel,
            keyspace: &b.task.keyspace,
            spec,
            out,
            seed,
            batch_idx,
            share,
            seq: 0,
            given: None,
            slicing: None,
            pending: Vec::new(),
            used: 0,
            used_bytes: 0,
            flush_rows: b.ctx.write_batch_rows.max(1),
            dup_count: 0,
            dup_messages: Vec::new(),
            rows_written: 0,
            bytes_written: 0,
            duplicates_skipped: 0,
            write_time: Duration::ZERO,
            having_reads: having_reads(out),
            having_row: Vec::new(),
        }
    }

    /// Numbers the rows of table-reader batch range `range` per slice of their input rows
    /// (see [`RowWriter::input`]).
    pub(crate) fn slice_by_input(&mut self, range: RowidRange) {
        self.slicing = Some(Slicing {
            range,
            slice: 0,
            bounds: None,
            ranks: [0; SLICES as usize],
        });
    }

    /// Tells a table reader's writer that the rows pushed next are outputs of the input row
    /// `rowid`: each gets the sequence number [`slice_seq`] of the input row's slice of the
    /// batch's range and its rank among that slice's outputs. So an output's rowid depends
    /// only on the rows of its own slice before it, in read order, never on which other
    /// slices the same run covers: a part of the batch writes what the whole batch writes
    /// for its rows. A no-op for file readers.
    pub(crate) fn input(&mut self, rowid: Rowid) {
        if let Some(s) = &mut self.slicing {
            let pos = self.store.range_position(rowid);
            // Reads come in range order, so the slice changes at most SLICES times a batch:
            // the division only runs when the position leaves the current slice.
            if !s.bounds.is_some_and(|b| b.contains(pos)) {
                s.slice = s.range.slice_of(pos);
                s.bounds = s.range.slices(Slices {
                    first: s.slice,
                    end: s.slice + 1,
                });
            }
        }
    }

    /// The sequence number of the next row.
    fn next_seq(&mut self) -> Result<u64, BatchErrorKind> {
        let Some(s) = &mut self.slicing else {
            let seq = self.seq;
            self.seq += 1;
            return Ok(seq);
        };
        let rank = s
            .ranks
            .get_mut(s.slice as usize)
            .ok_or(BatchErrorKind::Internal(Inconsistency::Broken(
                "an input row's slice past the last",
            )))?;
        let seq = slice_seq(s.slice, *rank).ok_or(BatchErrorKind::Internal(
            Inconsistency::Broken("over 2^34 rows written for one slice of a batch"),
        ))?;
        *rank += 1;
        Ok(seq)
    }

    /// Sets the sequence number of the next row: file readers number rows by their position
    /// in the file, so every part of a split file continues the numbering of one pass.
    pub(crate) fn set_seq(&mut self, seq: u64) {
        self.seq = seq;
        self.given = None;
    }

    /// Sets the rowid of the next row: a file reader's row whose place in the file is known
    /// ([`plexus_core::task::file_rowid`]). The next [`RowWriter::set_seq`] goes back to
    /// rowids from the sequence number.
    pub(crate) fn set_rowid(&mut self, rowid: Rowid) {
        self.given = Some(rowid);
    }

    /// Applies `having` to the computed row `w`, builds its keys and queues it.
    pub(crate) fn push(
        &mut self,
        w: &[Value],
        loc: &dyn Fn() -> RowLoc,
    ) -> Result<(), BatchErrorKind> {
        if !self.out.having(w, loc)? {
            return Ok(());
        }
        self.queue(w, loc)
    }

    /// Applies `having` to row `w`, cells read in place (strings borrowed from where they
    /// were read), builds its keys and queues it. `having` gets values of the fields it reads
    /// alone, so the other cells are never built.
    pub(crate) fn push_cells<C: AsCell>(
        &mut self,
        w: &[C],
        loc: &dyn Fn() -> RowLoc,
    ) -> Result<(), BatchErrorKind> {
        if self.out.having.is_some() {
            values_read(w, &self.having_reads, &mut self.having_row);
            if !self.out.having(&self.having_row, loc)? {
                return Ok(());
            }
        }
        self.queue(w, loc)
    }

    /// Encodes row `w`, builds its keys and queues it.
    fn queue<C: AsCell>(
        &mut self,
        w: &[C],
        loc: &dyn Fn() -> RowLoc,
    ) -> Result<(), BatchErrorKind> {
        // Not timed per row: a clock read per row cost 3.5 % of ingest CPU (issue #25). Encoding
        // and keying count as the caller's compute; `write_time` is the store's write calls.
        let out = self.out;
        let slot = self.next_slot()?;
        encode_row(&mut slot.row, &out.types, w).map_err(|e| {
            let name = match &e {
                plexus_core::row::RowError::TypeMismatch { column, .. }
                | plexus_core::row::RowError::DecimalOutOfRange { column, .. }
                | plexus_core::row::RowError::DateTimeOutOfRange { column, .. } => out
                    .fields
                    .get(*column)
                    .map_or_else(String::new, |f| f.name.clone()),
                _ => String::new(),
            };
            field_err(loc, "field", &name, e)
        })?;
        for (key, idx) in slot.keys.iter_mut().zip(&out.indexes) {
            key.clear();
            build_index_key(key, idx, w, loc)?;
        }
        self.queued()
    }

    /// Queues a row that `encode` writes into its (empty) buffer: a writer without `having`
    /// and indexes, whose rows need no values ([`super::cells`]).
    pub(crate) fn push_encoded(
        &mut self,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<(), BatchErrorKind>,
    ) -> Result<(), BatchErrorKind> {
        if self.out.having.is_some() || !self.out.indexes.is_empty() {
            return Err(
                Inconsistency::Broken("an encoded row for a writer that needs values").into(),
            );
        }
        let slot = self.next_slot()?;
        encode(&mut slot.row)?;
        self.queued()
    }

    /// The buffer of the next row, with its rowid set and its encoded row empty.
    fn next_slot(&mut self) -> Result<&mut RowWrite, BatchErrorKind> {
        if self.used == self.pending.len() {
            // A new slot's buffers start as large as the last slot's: grown from empty, each
            // of a batch's 20,000 slots reallocated its row and keys four or five times, 5 %
            // of the instructions of a CSV ingest cut into 7 batches (issue #25).
            let (row, keys) = match self.pending.last() {
                Some(last) => (
                    Vec::with_capacity(last.row.capacity()),
                    last.keys
                        .iter()
                        .map(|k| Vec::with_capacity(k.capacity()))
                        .collect(),
                ),
                None => (Vec::new(), vec![Vec::new(); self.out.indexes.len()]),
            };
            self.pending.push(RowWrite {
                rowid: 0,
                batch_idx: self.batch_idx,
                row,
                keys,
            });
        }
        let seq = self.next_seq()?;
        let slot = &mut self.pending[self.used];
        slot.rowid = self.given.unwrap_or_else(|| rowid(self.seed, seq));
        slot.row.clear();
        Ok(slot)
    }

    /// Counts the row [`RowWriter::next_slot`] gave as queued, writing the queue when full.
    fn queued(&mut self) -> Result<(), BatchErrorKind> {
        if let Some(slot) = self.pending.get(self.used) {
            self.used_bytes += slot.row.len() + slot.keys.iter().map(Vec::len).sum::<usize>();
        }
        self.used += 1;
        if self.used >= self.flush_rows || self.used_bytes >= WRITE_CALL_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the queued rows, unless the batch was cancelled (the rows are dropped).
    pub(crate) fn flush(&mut self) -> Result<(), BatchErrorKind> {
        if self.used == 0 {
            return Ok(());
        }
        if self.cancel.is_cancelled() {
            self.used = 0;
            self.used_bytes = 0;
            return Err(BatchErrorKind::Cancelled);
        }
        let start = Instant::now();
        let rows = &self.pending[..self.used];
        let report = self
            .store
            .write_rows(self.keyspace, &self.spec, self.share, rows, self.out.mode)
            .map_err(BatchErrorKind::store("write_rows"))?;
        self.rows_written += report.rows_written as u64;
        self.bytes_written += rows.iter().map(|r| r.row.len() as u64).sum::<u64>();
        match self.out.mode {
            // distinct_table (spec §7.5): later rows with a known key are dropped silently.
            WriteMode::Distinct => self.duplicates_skipped += report.duplicates.len() as u64,
            WriteMode::Insert => {
                for d in &report.duplicates {
                    self.dup_count += 1;
                    if self.dup_messages.len() < MAX_ERROR_MESSAGES {
                        let index = self
                            .spec
                            .indexes
                            .get(d.index)
                            .map_or_else(|| format!("#{}", d.index), |i| i.table.storage_name());
                        let e = StoreError::DuplicateKey {
                            keyspace: self.keyspace.to_owned(),
                            index,
                            key: d.key.clone(),
                            existing_rowid: d.existing_rowid,
                        };
                        self.dup_messages.push(e.to_string());
                    }
                }
            }
        }
        self.used = 0;
        self.used_bytes = 0;
        self.write_time += start.elapsed();
        Ok(())
    }

    /// Flushes and, as Capillaries does after writing everything else, fails the batch if any
    /// row hit a unique key held by another row (spec §6.3).
    pub(crate) fn finish(&mut self) -> Result<(), BatchErrorKind> {
        self.flush()?;
        if self.dup_count > 0 {
            return Err(BatchErrorKind::Duplicates {
                count: self.dup_count,
                messages: std::mem::take(&mut self.dup_messages),
            });
        }
        Ok(())
    }
}

fn build_index_key<C: AsCell>(
    out: &mut Vec<u8>,
    idx: &OutIndex,
    w: &[C],
    loc: &dyn Fn() -> RowLoc,
) -> Result<(), BatchErrorKind> {
    key_into(out, &idx.def, &idx.pos, w).map_err(|e| field_err(loc, "index", &idx.name, e))
}

/// The data table and indexes `node` writes in run `run_id`, or `None` when the node writes
/// files (or does not exist); the engine creates these before the node's first batch.
pub fn table_spec(plan: &Plan, node: &str, run_id: u32) -> Option<TableSpec> {
    let Writer::Table(w) = &plan.node(node)?.writer else {
        return None;
    };
    Some(TableSpec {
        data: TableRef::new(w.name.clone(), run_id),
        indexes: w
            .indexes
            .iter()
            .map(|(name, def)| IndexSpec {
                table: TableRef::new(name.clone(), run_id),
                kind: def.kind,
            })
            .collect(),
        fields: Some(
            w.fields
                .iter()
                .map(|f| Field {
                    name: f.name.clone(),
                    ty: f.ty,
                })
                .collect(),
        ),
        table_options: w.table_options.clone(),
    })
}

/// [`write_table`] for a table-reader batch (or a part of it): the rows are stored under the
/// batch's index and numbered per slice of their input rows, which `f` names with
/// [`RowWriter::input`] before pushing each input row's outputs.
pub(crate) fn write_table_reader(
    b: &BatchRun<'_>,
    out: &TableOut,
    stats: &mut BatchStats,
    f: impl FnOnce(&mut RowWriter<'_>, &mut BatchStats) -> Result<(), BatchErrorKind>,
) -> Result<(), BatchErrorKind> {
    let range = RowidRange::for_batch(b.task.batch_idx, b.task.batches_total)
        .map_err(BatchErrorKind::store("scan_batch"))?;
    write_table(
        b,
        out,
        b.task.batch_idx,
        Share::of_slices(b.part),
        stats,
        |w, stats| {
            w.slice_by_input(range);
            f(w, stats)
        },
    )
}

/// Runs `f` with the writer of `share` of the batch's table, then flushes it and records the
/// write figures in `stats`. `row_batch` is the batch index stored with the rows and seeding
/// their rowids. Rows computed before an error are still written, as Capillaries' asynchronous
/// writes are (spec §7.1), except after a cancel; the first error wins. What earlier
/// executions of the share wrote is dropped first ([`Store::share_begins`]), so the table ends
/// holding this execution's rows of the share only.
pub(crate) fn write_table(
    b: &BatchRun<'_>,
    out: &TableOut,
    row_batch: u32,
    share: Share,
    stats: &mut BatchStats,
    f: impl FnOnce(&mut RowWriter<'_>, &mut BatchStats) -> Result<(), BatchErrorKind>,
) -> Result<(), BatchErrorKind> {
    let spec = table_spec(b.plan, &b.task.node, b.task.run_id).ok_or(BatchErrorKind::Internal(
        Inconsistency::Broken("node has no table writer in the plan"),
    ))?;
    b.ctx
        .store
        .share_begins(&b.task.keyspace, &spec, row_batch, share)
        .map_err(BatchErrorKind::store("share_begins"))?;
    let mut w = RowWriter::new(
        b,
        spec,
        out,
        plexus_core::task::rowid_seed(&b.task.node, row_batch),
        row_batch,
        share,
    );
    let r = f(&mut w, stats);
    // A cancelled batch stops without its last flush: nothing is written after the cancel.
    let finished = match &r {
        Err(BatchErrorKind::Cancelled) => Ok(()),
        _ => w.finish(),
    };
    let completed = r.is_ok() && finished.is_ok();
    b.ctx
        .store
        .share_ends(&b.task.keyspace, &w.spec, row_batch, share, completed);
    stats.rows_out = w.rows_written;
    stats.bytes_out = w.bytes_written;
    stats.duplicates_skipped = w.duplicates_skipped;
    stats.write += w.write_time;
    r.and(finished)
}

/// The batches this process finished of each node that writes a table with a unique index,
/// so that the store hears when such a table is complete ([`Store::table_complete`]) and can
/// drop its unique-key claims. Counting short (batches run by another process, a node that
/// failed) only keeps them in memory; counting early cannot happen, and would only cost a
/// reload.
#[derive(Debug, Default)]
pub struct CompletedBatches {
    /// The batches done so far of each node in a run.
    done: Mutex<HashMap<NodeInRun, HashSet<u32>>>,
}

/// (keyspace, its incarnation, run, node).
type NodeInRun = (String, u64, u32, String);

impl CompletedBatches {
    /// Records `task` done; when that completes its node, tells `store` that the node's table
    /// is complete.
    pub(crate) fn finished(&self, store: &dyn Store, plan: &Plan, task: &BatchTask) {
        let Some(spec) = table_spec(plan, &task.node, task.run_id) else {
            return;
        };
        if !spec.indexes.iter().any(|i| i.kind == IndexKind::Unique) {
            return;
        }
        let key = (
            task.keyspace.clone(),
            task.keyspace_incarnation,
            task.run_id,
            task.node.clone(),
        );
        let complete = {
            let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
            let batches = done.entry(key.clone()).or_default();
            batches.insert(task.batch_idx);
            let complete = batches.len() >= task.batches_total as usize;
            if complete {
                done.remove(&key);
            }
            complete
        };
        if complete {
            store.table_complete(&task.keyspace, &spec);
        }
    }
}

#[cfg(test)]
mod tests {
    use plexus_core::expr::{Scope, parse, prepare};

    use super::*;

    /// Compiles `text` over the input row `r.s` (string), `r.n` (int), `r.d` (decimal2).
    fn expr(text: &str) -> Compiled {
        let scope = Scope::new().with_alias(
            Alias::R,
            [("s", Type::String), ("n", Type::Int), ("d", Type::Decimal2)],
        );
        let ast = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        prepare(&ast, &scope).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn takes(columns: &[(&str, Type)]) -> Vec<Option<usize>> {
        let exprs: Vec<(Compiled, Type)> = columns.iter().map(|&(t, ty)| (expr(t), ty)).collect();
        let input = [Type::String, Type::Int, Type::Decimal2];
        taken_columns(exprs.iter().map(|(e, ty)| (e, *ty)), &input)
    }

    #[test]
    fn only_a_bare_field_of_its_own_type_read_once_is_taken() {
        // Bare fields of their own type, each read once: taken.
        assert_eq!(
            takes(&[("r.d", Type::Decimal2), ("r.s", Type::String)]),
            [Some(2), Some(0)]
        );
        // A field another column also reads stays in the row: cloned.
        assert_eq!(
            takes(&[
                ("r.s", Type::String),
                ("len(r.s)", Type::Int),
                ("r.n", Type::Int)
            ]),
            [None, None, Some(1)]
        );
        assert_eq!(
            takes(&[("r.s", Type::String), ("r.s", Type::String)]),
            [None, None]
        );
        // A declared type that differs is evaluated, so the mismatch is reported.
        assert_eq!(takes(&[("r.n", Type::String)]), [None]);
    }

    #[test]
    fn taken_values_leave_placeholders_and_the_rest_untouched() {
        let mut r = vec![Value::str("abc"), Value::Int(7), Value::Bool(true)];
        let mut w = vec![Value::Bool(false), Value::Int(1), Value::Bool(false)];
        take_columns(&mut r, &[Some(1), None, Some(0)], &mut w);
        assert_eq!(w, [Value::Int(7), Value::Int(1), Value::str("abc")]);
        assert_eq!(
            r,
            [Value::Bool(false), Value::Bool(false), Value::Bool(true)]
        );
    }
}
