//! Table rows written from the cells their input holds (#25 item 3): a field that is a bare
//! reader column of its own type is the input's cell (a CSV string borrowed from its record,
//! a stored string from its scan page), never built as a value, evaluated or released.
//! Computed fields build the values of the reader columns they read alone, and `having` those
//! of the fields it reads ([`super::write::RowWriter::push_cells`]). Used by file_table,
//! table_table and distinct_table.

use plexus_core::expr::{Alias, Rounding, Vars};
use plexus_core::value::{AsCell, CellView, Type, Value};

use super::compiled::TableOut;
use super::error::{BatchErrorKind, Inconsistency, RowLoc};
use super::write::{eval_field, values_read};

/// How a reader's rows are written from their cells.
#[derive(Debug)]
pub(crate) struct InPlace {
    /// Per field: the reader column it is; `None`: computed.
    from: Vec<Option<usize>>,
    /// Per reader column: whether a computed field reads it (its value is then built).
    read: Vec<bool>,
    /// Whether any field is computed.
    any_computed: bool,
}

impl InPlace {
    /// The plan for `out` over reader rows of `types` (`position` finds a column by name),
    /// `None` where no string column is copied: rows are then built as values, as cheaply.
    pub(crate) fn new(
        types: &[Type],
        position: impl Fn(&str) -> Option<usize>,
        out: &TableOut,
    ) -> Option<Self> {
        let from: Vec<Option<usize>> = out
            .fields
            .iter()
            .map(|f| match f.expr.bare_field() {
                Some((Alias::R, c)) if types.get(c) == Some(&f.ty) => Some(c),
                _ => None,
            })
            .collect();
        if !from
            .iter()
            .flatten()
            .any(|&c| types.get(c) == Some(&Type::String))
        {
            return None;
        }
        let mut read = vec![false; types.len()];
        let computed = out.fields.iter().zip(&from).filter(|(_, c)| c.is_none());
        for r in computed.flat_map(|(f, _)| f.expr.field_refs()) {
            if r.alias == Alias::R.name() {
                *read.get_mut(position(&r.field)?)? = true;
            }
        }
        Some(Self {
            any_computed: from.iter().any(Option::is_none),
            from,
            read,
        })
    }

    /// Builds into `cells` the table row of reader row `row` read in place: each field the
    /// cell it is, or its value computed into `computed` from the reader columns built into
    /// `values`.
    pub(crate) fn row<'r, C: AsCell>(
        &self,
        out: &TableOut,
        row: &'r [C],
        (values, computed, cells): (&mut Vec<Value>, &'r mut Vec<Value>, &mut Vec<CellView<'r>>),
        loc: &dyn Fn() -> RowLoc,
    ) -> Result<(), BatchErrorKind> {
        if row.len() != self.read.len() {
            return Err(BatchErrorKind::Internal(Inconsistency::RowWidth {
                loc: loc(),
                values: row.len(),
                columns: self.read.len(),
            }));
        }
        computed.clear();
        if self.any_computed {
            values_read(row, &self.read, values);
            let vars = Vars::new().with(Alias::R, values);
            for (f, from) in out.fields.iter().zip(&self.from) {
                if from.is_none() {
                    computed.push(eval_field(f, &vars, Rounding::To2, loc)?);
                }
            }
        }
        let mut next = computed.iter();
        cells.clear();
        for from in &self.from {
            let cell = match from {
                Some(c) => row.get(*c).map(AsCell::cell),
                None => next.next().map(CellView::Value),
            };
            cells.push(cell.ok_or(Inconsistency::Broken("a reader row without a field's cell"))?);
        }
        Ok(())
    }
}
