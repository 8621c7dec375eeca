//! The cells of a lookup's rows: which right columns a lookup decodes, and output rows
//! encoded from the stored cells of their left and right rows (#25 item 3). Most lookup
//! fields are a bare `r.x` or `l.y`: evaluating one clones the decoded value, encoding copies
//! it back into bytes, and the row's drop releases it. A [`CellPlan`] copies such a field's
//! cell from the encoded row it came from instead, so a right row's copied strings are never
//! built. A grouped lookup's [`GroupCells`] feeds its aggregates the right rows' cells read in
//! place, strings borrowed. [`LeftCells`] reads the left rows of lookups in place: keys and bare
//! `r.*` fields from their cells, values only for the columns the other fields read. Only rows
//! that do not outlive their page are treated so: the left page and the compact right side
//! hold the bytes until the rows are written.

use plexus_core::expr::{Accumulator, Alias, FieldRef, Rounding, Vars};
use plexus_core::key::build_key_into;
use plexus_core::plan::{JoinType, Plan, Writer};
use plexus_core::row::{
    CellRef, RowError, cell_at, copy_cell, decode_row_refs_into, encode_cell, encode_header,
};
use plexus_core::value::{Type, Value};

use super::compiled::{LookupStage, OutField, TableInput, TableOut};
use super::error::{BatchErrorKind, Inconsistency, RowLoc};
use super::joined::{default_of, grouped_row};
use super::lookup::Bufs;
use super::right::RightIndex;
use super::scan::{Page, Scan, decode_projected};
use super::write::{RowWriter, check_type, eval_field, field_err};

/// Where one output field's cell comes from.
#[derive(Debug, Clone, Copy)]
enum Source {
    /// This column of the left row, copied.
    Left(usize),
    /// This column of the right row, copied.
    Right(usize),
    /// Evaluated from the decoded rows.
    Computed,
}

/// How a non-grouped lookup encodes its output rows: a field that is nothing but a left or
/// right field of its own type is copied as stored, the others are evaluated. Only for a
/// writer without `having` and indexes, which would need every field's value.
#[derive(Debug)]
pub(crate) struct CellPlan {
    sources: Vec<Source>,
    /// The right columns to decode: those the computed fields and the filter read (the
    /// copied ones are checked, not built; with none, a right row builds no value at all).
    pub(crate) right_needed: Vec<bool>,
}

impl CellPlan {
    /// The plan for lookup `l` over rows of `left` writing `out`, or `None` when the lookup
    /// groups, the writer has `having` or indexes, or no field can be copied.
    pub(crate) fn new(left: &TableInput, l: &LookupStage, out: &TableOut) -> Option<Self> {
        if l.group || out.having.is_some() || !out.indexes.is_empty() {
            return None;
        }
        let left_types = &left.types;
        let sources: Vec<Source> = out
            .fields
            .iter()
            .map(|f| match f.expr.bare_field() {
                Some((Alias::R, c)) if left_types.get(c) == Some(&f.ty) => Source::Left(c),
                Some((Alias::L, c)) if l.types.get(c) == Some(&f.ty) => Source::Right(c),
                _ => Source::Computed,
            })
            .collect();
        if sources.iter().all(|s| matches!(s, Source::Computed)) {
            return None;
        }
        let computed = || {
            out.fields
                .iter()
                .zip(&sources)
                .filter(|(_, s)| matches!(s, Source::Computed))
                .map(|(f, _)| f)
        };
        Some(Self {
            right_needed: columns_read(l, computed())?,
            sources,
        })
    }

    /// Encodes the output row of `left` matched with `right` (each its decoded values, its
    /// encoded bytes and their cell boundaries) into `buf`.
    fn encode(
        &self,
        out: &TableOut,
        buf: &mut Vec<u8>,
        left: Cells<'_>,
        right: Cells<'_>,
        loc: &dyn Fn() -> RowLoc,
    ) -> Result<(), BatchErrorKind> {
        encode_header(buf, self.sources.len());
        let vars = Vars::new()
            .with(Alias::R, left.values)
            .with(Alias::L, right.values);
        for (column, (f, source)) in out.fields.iter().zip(&self.sources).enumerate() {
            let written = match *source {
                Source::Left(c) => left.copy(buf, column, f, c),
                Source::Right(c) => right.copy(buf, column, f, c),
                Source::Computed => {
                    let v = eval_field(f, &vars, Rounding::To2, loc)?;
                    encode_cell(buf, column, f.ty, &v)
                }
            };
            written.map_err(|e| field_err(loc, "field", &f.name, e))?;
        }
        Ok(())
    }
}

/// One input row: its decoded values, its encoded bytes and their cell boundaries.
#[derive(Clone, Copy)]
pub(crate) struct Cells<'a> {
    values: &'a [Value],
    bytes: &'a [u8],
    spans: &'a [u32],
}

impl<'a> Cells<'a> {
    /// Cell `c` (of type `ty`) read in place.
    fn cell(&self, c: usize, ty: Type) -> Result<CellRef<'a>, RowError> {
        cell_at(self.bytes, self.spans, c, ty)
    }

    /// Copies cell `c` as the cell of output column `column` (field `f`).
    fn copy(
        &self,
        buf: &mut Vec<u8>,
        column: usize,
        f: &OutField,
        c: usize,
    ) -> Result<(), RowError> {
        let (Some(&start), Some(&end)) = (self.spans.get(c), self.spans.get(c + 1)) else {
            return Err(RowError::Truncated { column });
        };
        let cell = self
            .bytes
            .get(start as usize..end as usize)
            .ok_or(RowError::Truncated { column })?;
        copy_cell(buf, column, f.ty, cell)
    }
}

/// How a lookup reads its left rows in place (#25 item 3): every lookup but a grouped one
/// over a decoded, spilled or point-read right side, whose grouped row evaluates every field
/// over the decoded left row. A row keeps its cell boundaries, its key is built from its
/// `join_on` cells, a field that is nothing but a left column is that column's cell, and values
/// are built only for the columns the other fields read, so a left row's strings are borrowed
/// from its page; a left join's unmatched row is built from them too. A grouped row whose fold
/// from cells failed decodes its left row again in full, so its error is the definition's.
#[derive(Debug)]
pub(crate) struct LeftCells {
    /// The left rows' column types.
    types: Vec<Type>,
    /// Per output field, the left column it is nothing but, of the field's own type.
    bare: Vec<Option<usize>>,
    /// The left columns decoded as values: those the fields that are not bare read.
    pub(crate) values: Vec<bool>,
    /// The left columns of a row decoded in full ([`left_columns_read`]).
    read: Vec<bool>,
}

impl LeftCells {
    /// How lookup `l` writing `out` reads the rows of `left` in place.
    pub(crate) fn new(left: &TableInput, l: &LookupStage, out: &TableOut) -> Self {
        let bare: Vec<Option<usize>> = out
            .fields
            .iter()
            .map(|f| match f.expr.bare_field() {
                Some((Alias::R, c)) if left.types.get(c) == Some(&f.ty) => Some(c),
                _ => None,
            })
            .collect();
        let evaluated = out.fields.iter().zip(&bare).filter(|(_, b)| b.is_none());
        let refs = evaluated.flat_map(|(f, _)| f.expr.field_refs());
        // A name that is not a left field (validation rules it out): decode everything.
        let values =
            names_read(&left.names, Alias::R, refs).unwrap_or_else(|| vec![true; left.types.len()]);
        Self {
            types: left.types.clone(),
            bare,
            values,
            read: left_columns_read(left, l, out),
        }
    }

    /// Left row `bytes` of `table` read in place: its cell boundaries into `spans`, the values
    /// of the columns [`Self::values`] marks into `values`, and its lookup key (the `join_on`
    /// fields under the index's definition, [`super::lookup`]'s step 1) into `key`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read<'a>(
        &self,
        l: &LookupStage,
        (bytes, rowid): (&'a [u8], crate::store::Rowid),
        values: &mut Vec<Value>,
        spans: &mut Vec<u32>,
        key: &mut Vec<u8>,
        key_cells: &mut Vec<CellRef<'a>>,
        scan: &Scan<'_>,
    ) -> Result<(), BatchErrorKind> {
        let table = &scan.table_name;
        super::scan::decode_spans(
            bytes,
            &self.types,
            &self.values,
            values,
            spans,
            table,
            rowid,
        )?;
        key_cells.clear();
        for &c in &l.join_pos {
            let ty = *self
                .types
                .get(c)
                .ok_or(Inconsistency::Broken("lookup key column past the left row"))?;
            let cell = cell_at(bytes, spans, c, ty)
                .map_err(|e| field_err(&|| scan.loc(rowid), "index", &l.index_name, e))?;
            key_cells.push(cell);
        }
        key.clear();
        build_key_into(key, &l.index, key_cells)
            .map_err(|e| field_err(&|| scan.loc(rowid), "index", &l.index_name, e))
    }

    /// Left row `bytes` of `table` decoded in full (every column a field or the key reads)
    /// into `out`: for a grouped row whose fold from cells failed.
    pub(crate) fn decode_full(
        &self,
        (bytes, rowid): (&[u8], crate::store::Rowid),
        out: &mut Vec<Value>,
        table: &str,
    ) -> Result<(), BatchErrorKind> {
        decode_projected(bytes, &self.types, &self.read, out, table, rowid)
    }

    /// The cells of the output row of `left` matched with the decoded `right` into `row`
    /// (cleared first): a bare field is the left row's cell, the others are evaluated
    /// (round-to-2) as [`TableOut::compute`] evaluates them.
    pub(crate) fn matched_row<'a>(
        &self,
        out: &TableOut,
        left: Cells<'a>,
        right: &[Value],
        row: &mut Vec<CellRef<'a>>,
        loc: &dyn Fn() -> RowLoc,
    ) -> Result<(), BatchErrorKind> {
        row.clear();
        let vars = Vars::new()
            .with(Alias::R, left.values)
            .with(Alias::L, right);
        for (f, bare) in out.fields.iter().zip(&self.bare) {
            row.push(match *bare {
                Some(c) => left
                    .cell(c, f.ty)
                    .map_err(|e| field_err(loc, "field", &f.name, e))?,
                None => CellRef::Value(eval_field(f, &vars, Rounding::To2, loc)?),
            });
        }
        Ok(())
    }

    /// The cells of a left join's row for `left` without matches into `row` (cleared first),
    /// as [`super::joined::unmatched_row`] computes it (spec §7.4): a field that reads `l.*`
    /// (grouped: an aggregate) takes its default, a bare field is the left row's cell, the
    /// others are evaluated (round-to-2).
    pub(crate) fn unmatched_row<'a>(
        &self,
        out: &TableOut,
        group: bool,
        left: Cells<'a>,
        row: &mut Vec<CellRef<'a>>,
        loc: &dyn Fn() -> RowLoc,
    ) -> Result<(), BatchErrorKind> {
        row.clear();
        let vars = Vars::new().with(Alias::R, left.values);
        for (f, bare) in out.fields.iter().zip(&self.bare) {
            let defaulted = if group {
                f.agg.is_some()
            } else {
                f.refs_lookup
            };
            row.push(match (defaulted, *bare) {
                (true, _) => CellRef::Value(default_of(f, loc)?),
                (false, Some(c)) => left
                    .cell(c, f.ty)
                    .map_err(|e| field_err(loc, "field", &f.name, e))?,
                (false, None) => CellRef::Value(eval_field(f, &vars, Rounding::To2, loc)?),
            });
        }
        Ok(())
    }

    /// The cells of a grouped row of `left` into `row` (cleared first): field `i` is `agg(i)`
    /// when it aggregates, the left row's cell when it is bare, and otherwise is evaluated over
    /// the left row's values without intermediate rounding (spec §5.10). The first failing
    /// field in field order is the error: its position and message.
    pub(crate) fn grouped_row<'a>(
        &self,
        out: &TableOut,
        left: Cells<'a>,
        mut agg: impl FnMut(usize) -> Option<Result<Value, String>>,
        row: &mut Vec<CellRef<'a>>,
    ) -> Result<(), (usize, String)> {
        row.clear();
        let vars = Vars::new().with(Alias::R, left.values);
        for (i, (f, bare)) in out.fields.iter().zip(&self.bare).enumerate() {
            let fail = |e: &dyn std::fmt::Display| (i, e.to_string());
            let cell = match (agg(i), *bare) {
                (Some(v), _) => {
                    let v = v.map_err(|e| (i, e))?;
                    check_type(&v, f.ty).map_err(|e| fail(&e))?;
                    CellRef::Value(v)
                }
                (None, Some(c)) => left.cell(c, f.ty).map_err(|e| fail(&e))?,
                (None, None) => {
                    let v = f.expr.eval(&vars, Rounding::None).map_err(|e| fail(&e))?;
                    check_type(&v, f.ty).map_err(|e| fail(&e))?;
                    CellRef::Value(v)
                }
            };
            row.push(cell);
        }
        Ok(())
    }
}

/// A window of left rows read by [`LeftCells::read`]: the values and cell boundaries of each.
#[derive(Clone, Copy)]
pub(crate) struct LeftWindow<'a> {
    /// How the rows were read.
    pub(crate) plan: &'a LeftCells,
    /// Each row's values of the columns [`LeftCells::values`] marks.
    pub(crate) values: &'a [Vec<Value>],
    /// Each row's cell boundaries.
    pub(crate) spans: &'a [Vec<u32>],
}

impl<'a> LeftWindow<'a> {
    /// Row `i` of the window, whose encoded bytes are `bytes`.
    pub(crate) fn row(&self, i: usize, bytes: &'a [u8]) -> Result<Cells<'a>, BatchErrorKind> {
        match (self.values.get(i), self.spans.get(i)) {
            (Some(values), Some(spans)) => Ok(Cells {
                values,
                bytes,
                spans,
            }),
            _ => Err(Inconsistency::Broken("lookup window past its left rows").into()),
        }
    }
}

/// Step 4 of a lookup over a compact right side with a [`CellPlan`]: the output rows of the
/// page's left rows in page order, as [`super::lookup`]'s `emit` writes them, each matched
/// row encoded from the cells of its left row (read by `lp`) and of its right row in `ix`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_cells(
    page: &Page,
    scan: &Scan<'_>,
    l: &LookupStage,
    out: &TableOut,
    (plan, lp): (&CellPlan, &LeftCells),
    w: &mut RowWriter<'_>,
    ix: &RightIndex,
    bf: &mut Bufs,
) -> Result<(), BatchErrorKind> {
    let mut unmatched = Vec::new();
    for (i, (rowid, bytes)) in page.iter().enumerate() {
        let loc = || scan.loc(rowid);
        w.input(rowid);
        let k = bf.key_of_left[i];
        let matches = &bf.match_items[bf.match_start[k]..bf.match_start[k + 1]];
        let left = Cells {
            values: &bf.left[i],
            bytes,
            spans: &bf.left_spans[i],
        };
        if matches.is_empty() {
            if l.join_type == JoinType::Left {
                lp.unmatched_row(out, false, left, &mut unmatched, &loc)?;
                w.push_cells(&unmatched, &loc)?;
            }
            continue;
        }
        for &nr in matches {
            let bytes = ix.encoded(bf.right_at[nr]).ok_or(Inconsistency::Broken(
                "hash join index points past its rows",
            ))?;
            let right = Cells {
                values: &bf.right[nr],
                bytes,
                spans: &bf.right_spans[nr],
            };
            w.push_encoded(|buf| plan.encode(out, buf, left, right, &loc))?;
        }
    }
    Ok(())
}

/// How a grouped lookup over a compact right side folds its matches from their cells
/// (#25 item 3): when every aggregate is `count()` or reads one bare `l.*` field
/// ([`plexus_core::expr::Compiled::aggregate_field`]) and no other field reads `l.*`, a
/// matched right row builds no value. It is read once, in place, each aggregate fed its
/// field's cell (a string borrowed from the side's bytes); the other fields are evaluated from
/// the left row.
#[derive(Debug)]
pub(crate) struct GroupCells {
    /// Per output field: `Some` for an aggregate, holding the position among the cells read
    /// of the column it reads (`None` for `count()`); `None` for a field of the left row alone.
    args: Vec<Option<Option<usize>>>,
    /// The right columns the aggregates read.
    wanted: Vec<bool>,
    /// The right columns to decode before the fold: those the filter reads.
    pub(crate) right_needed: Vec<bool>,
}

impl GroupCells {
    /// The plan for lookup `l` writing `out`, or `None` when the lookup does not group or a
    /// field is of another shape.
    pub(crate) fn new(l: &LookupStage, out: &TableOut) -> Option<Self> {
        if !l.group {
            return None;
        }
        let mut wanted = vec![false; l.types.len()];
        let mut read = Vec::with_capacity(out.fields.len());
        for f in &out.fields {
            read.push(match (&f.agg, f.expr.aggregate_field()) {
                (Some(_), Some(None)) => Some(None),
                (Some(_), Some(Some((Alias::L, c)))) => {
                    *wanted.get_mut(c)? = true;
                    Some(Some(c))
                }
                (None, _) if !f.refs_lookup => None,
                _ => return None,
            });
        }
        // Cells come in column order: a column's position is the wanted ones before it.
        let position = |c: usize| wanted[..c].iter().filter(|w| **w).count();
        Some(Self {
            args: read
                .into_iter()
                .map(|a| a.map(|c| c.map(position)))
                .collect(),
            wanted,
            right_needed: columns_read(l, std::iter::empty())?,
        })
    }

    /// The grouped row of `left` (read by `lp`) over `matches` (rows of `ix` at `at`) into
    /// `row`, the state of each aggregate in `accs`, each right row's cells read into `cells`;
    /// `None` on any error, which the caller has the decoded rows report.
    #[allow(clippy::too_many_arguments)]
    fn fold<'ix, 'a>(
        &self,
        (l, out, lp): (&LookupStage, &TableOut, &LeftCells),
        ix: &'ix RightIndex,
        left: Cells<'a>,
        (at, matches): (&[usize], &[usize]),
        cells: &mut Vec<CellRef<'ix>>,
        accs: &mut Vec<Option<Accumulator>>,
        row: &mut Vec<CellRef<'a>>,
    ) -> Option<()> {
        accs.clear();
        accs.extend(out.fields.iter().map(|f| f.agg.clone()));
        for &nr in matches {
            let bytes = ix.encoded(*at.get(nr)?)?;
            decode_row_refs_into(bytes, &l.types, &self.wanted, cells).ok()?;
            for ((f, acc), arg) in out.fields.iter().zip(accs.iter_mut()).zip(&self.args) {
                if let (Some(a), Some(arg)) = (acc, arg) {
                    let cell = match *arg {
                        Some(i) => Some(cells.get(i)?),
                        None => None,
                    };
                    a.update_cell(&f.expr, cell, Rounding::To2).ok()?;
                }
            }
        }
        // The other fields read no `l.*` field: the left row alone gives their value.
        let agg = |i: usize| {
            let a = accs.get(i)?.as_ref()?;
            Some(a.finish().map_err(|e| e.to_string()))
        };
        lp.grouped_row(out, left, agg, row).ok()
    }
}

/// Step 4 of a grouped lookup over a compact right side with a [`GroupCells`]: the output
/// rows of the page's left rows in page order, as [`super::lookup`]'s `emit` writes them.
/// A row the cells cannot fold (any error) is folded again from its decoded matches, which
/// report the error as the field-by-field definition does.
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_grouped_cells(
    page: &Page,
    scan: &Scan<'_>,
    (l, right_name): (&LookupStage, &str),
    out: &TableOut,
    (plan, lp): (&GroupCells, &LeftCells),
    w: &mut RowWriter<'_>,
    ix: &RightIndex,
    bf: &mut Bufs,
) -> Result<(), BatchErrorKind> {
    let (mut cells, mut row) = (Vec::new(), Vec::new());
    for (i, (rowid, bytes)) in page.iter().enumerate() {
        let loc = || scan.loc(rowid);
        w.input(rowid);
        let k = bf.key_of_left[i];
        let matches = &bf.match_items[bf.match_start[k]..bf.match_start[k + 1]];
        let left = Cells {
            values: &bf.left[i],
            bytes,
            spans: &bf.left_spans[i],
        };
        if matches.is_empty() {
            if l.join_type == JoinType::Left {
                lp.unmatched_row(out, true, left, &mut row, &loc)?;
                w.push_cells(&row, &loc)?;
            }
            continue;
        }
        let folded = plan.fold(
            (l, out, lp),
            ix,
            left,
            (&bf.right_at, matches),
            &mut cells,
            &mut bf.accs,
            &mut row,
        );
        if folded.is_some() {
            w.push_cells(&row, &loc)?;
        } else {
            let mut right = Vec::with_capacity(matches.len());
            for &nr in matches {
                let ri = *bf
                    .right_at
                    .get(nr)
                    .ok_or(Inconsistency::Broken("grouped lookup match past its rows"))?;
                let (Some(bytes), Some(&right_rowid)) = (ix.encoded(ri), ix.rowids.get(ri)) else {
                    return Err(
                        Inconsistency::Broken("hash join index points past its rows").into(),
                    );
                };
                let mut values = Vec::new();
                decode_projected(bytes, &l.types, &[], &mut values, right_name, right_rowid)?;
                right.push(values);
            }
            let all: Vec<usize> = (0..right.len()).collect();
            lp.decode_full((bytes, rowid), &mut bf.left_full, &scan.table_name)?;
            let left = &bf.left_full;
            grouped_row(out, left, &right, &all, &mut bf.accs, &mut bf.row, &loc)?;
            w.push(&bf.row, &loc)?;
        }
    }
    Ok(())
}

/// Which columns of the left rows (of `left`) lookup `l` writing `out` reads: its `join_on`
/// fields and those its output fields name as `r.*` (the filter reads right rows alone).
/// Empty (every column) if a name is not a left field.
pub(crate) fn left_columns_read(left: &TableInput, l: &LookupStage, out: &TableOut) -> Vec<bool> {
    let refs = out.fields.iter().flat_map(|f| f.expr.field_refs());
    let Some(mut needed) = names_read(&left.names, Alias::R, refs) else {
        return Vec::new();
    };
    for &c in &l.join_pos {
        match needed.get_mut(c) {
            Some(slot) => *slot = true,
            None => return Vec::new(),
        }
    }
    needed
}

/// Which of the columns `names` the field references `refs` read as `alias`; `None` if one
/// of them names no column.
pub(crate) fn names_read<'r>(
    names: &[String],
    alias: Alias,
    refs: impl Iterator<Item = &'r FieldRef>,
) -> Option<Vec<bool>> {
    let mut read = vec![false; names.len()];
    for r in refs.filter(|r| r.alias == alias.name()) {
        let c = names.iter().position(|n| *n == r.field)?;
        *read.get_mut(c)? = true;
    }
    Some(read)
}

/// Which columns of the right rows lookup `l` writing `out` reads: those its output fields
/// and its filter name as `l.*`. Empty (every column) if a name is not a right field.
pub(crate) fn right_columns_read(l: &LookupStage, out: &TableOut) -> Vec<bool> {
    columns_read(l, out.fields.iter()).unwrap_or_default()
}

/// Which columns of the right rows `fields` and the filter of lookup `l` read as `l.*`;
/// `None` if a name is not a right field.
pub(crate) fn columns_read<'f>(
    l: &LookupStage,
    fields: impl Iterator<Item = &'f OutField>,
) -> Option<Vec<bool>> {
    let refs = fields
        .flat_map(|f| f.expr.field_refs())
        .chain(l.filter.iter().flat_map(|f| f.field_refs()));
    names_read(&l.names, Alias::L, refs)
}

/// Which columns of the right rows any lookup of `plan` on `l`'s right table and index reads
/// (its output fields, `having` and filter naming them as `l.*`): a right side is shared by
/// those lookups, and a compact one keeps only these columns (the key column, which its index
/// holds anyway, was a third of the 10 M-row lookup benchmark's side). Empty (every column)
/// if a name is not a right field or an expression does not parse, or a lookup writes files.
pub(crate) fn side_columns_read(plan: &Plan, l: &LookupStage) -> Vec<bool> {
    let mut needed = vec![false; l.types.len()];
    for n in &plan.nodes {
        let Some(x) = &n.lookup else { continue };
        if x.table != l.table || x.index_name != l.index_name {
            continue;
        }
        let Writer::Table(w) = &n.writer else {
            return Vec::new();
        };
        let exprs = w
            .fields
            .iter()
            .map(|f| &f.expr)
            .chain(&w.having)
            .chain(&x.filter);
        for e in exprs {
            let Ok(refs) = e.ast.field_refs(false) else {
                return Vec::new();
            };
            for r in refs.iter().filter(|r| r.alias == "l") {
                let c = l.names.iter().position(|name| *name == r.field);
                match c.and_then(|c| needed.get_mut(c)) {
                    Some(slot) => *slot = true,
                    None => return Vec::new(),
                }
            }
        }
    }
    needed
}

/// Whether a right side keeping the columns `side` marks (all when empty) holds every column
/// `needed` marks (all when empty).
pub(crate) fn covers(side: &[bool], needed: &[bool]) -> bool {
    side.is_empty()
        || (!needed.is_empty()
            && needed.len() == side.len()
            && needed.iter().zip(side).all(|(&n, &s)| s || !n))
}
