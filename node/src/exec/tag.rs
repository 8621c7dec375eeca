//! tag_and_denormalize (spec §7.8): per input row, one output row per tag whose criterion
//! holds, in tag order.

use plexus_core::expr::{Alias, Compiled, Rounding, Vars};
use plexus_core::value::Value;

use super::batch::{BatchRun, BatchStats};
use super::compiled::{TableInput, TableOut};
use super::error::BatchErrorKind;
use super::processor::Processor;
use super::scan::Scan;
use super::write::{field_err, write_table_reader};

/// A compiled tag_and_denormalize processor (spec §7.8).
#[derive(Debug)]
pub(crate) struct Tag {
    pub(crate) input: TableInput,
    /// (tag value, criterion), sorted by tag.
    pub(crate) criteria: Vec<(Value, Compiled)>,
    pub(crate) out: TableOut,
}

impl Processor for Tag {
    /// Criteria are evaluated without intermediate rounding; a non-bool result or an
    /// evaluation error fails the batch (they are not type-checked at load).
    fn run(&self, b: &BatchRun<'_>, stats: &mut BatchStats) -> Result<(), BatchErrorKind> {
        let (input, out) = (&self.input, &self.out);
        write_table_reader(b, out, stats, |w, stats| {
            let mut scan = Scan::new(b, &input.table, input.page_size)?;
            let mut p: [Value; 1] = [Value::Bool(false)];
            let mut row = Vec::with_capacity(out.fields.len());
            scan.for_each_row(&input.types, stats, |_, rowid, r, loc| {
                w.input(rowid);
                // Capillaries' tag order is unspecified (map iteration); tag-name order makes
                // rowids, and so re-runs, deterministic.
                for (tag, criterion) in &self.criteria {
                    let hit = criterion
                        .eval_bool(&Vars::new().with(Alias::R, r), Rounding::None)
                        .map_err(|e| {
                            let tag = match tag {
                                Value::Str(s) => s.to_string(),
                                other => plexus_core::gofmt::format_value(other),
                            };
                            field_err(loc, "criterion", &tag, e)
                        })?;
                    if !hit {
                        continue;
                    }
                    p[0] = tag.clone();
                    let vars = Vars::new().with(Alias::R, r).with(Alias::P, &p);
                    out.compute(&vars, Rounding::To2, &mut row, loc)?;
                    w.push(&row, loc)?;
                }
                Ok(())
            })
        })
    }
}
