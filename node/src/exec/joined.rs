//! The rows a lookup's left row gives beyond a plain match (spec §7.4): a left join's row for
//! a left row without matches, and a grouped lookup's row folding its matches. Shared by every
//! strategy of [`super::lookup`] and by the folded and cell paths.

use plexus_core::expr::{Accumulator, Alias, Rounding, Vars};
use plexus_core::value::Value;

use super::compiled::{OutField, TableOut};
use super::error::{BatchErrorKind, Inconsistency, RowLoc};
use super::write::{check_type, eval_field, field_err};

/// The default of a field for an unmatched left row.
pub(crate) fn default_of(f: &OutField, loc: &dyn Fn() -> RowLoc) -> Result<Value, BatchErrorKind> {
    // Quirk (spec §7.4, §14 #53) fixed: defaults are ordinary values, so a having or an index
    // over a defaulted decimal2 field works.
    f.default
        .clone()
        .map_err(|e| field_err(loc, "default_value", &f.name, e))
}

/// A left row without matches in a left join (spec §7.4 table). Quirk (spec §7.4, §14 #34):
/// non-grouped, every field that references `l.*` gets its default; grouped, every aggregate
/// field does. The other fields are computed from `r` alone in round-to-2 mode.
pub(crate) fn unmatched_row(
    out: &TableOut,
    group: bool,
    left: &[Value],
    row: &mut Vec<Value>,
    loc: &dyn Fn() -> RowLoc,
) -> Result<(), BatchErrorKind> {
    let vars = Vars::new().with(Alias::R, left);
    row.clear();
    for f in &out.fields {
        let defaulted = if group {
            f.agg.is_some()
        } else {
            f.refs_lookup
        };
        row.push(if defaulted {
            default_of(f, loc)?
        } else {
            eval_field(f, &vars, Rounding::To2, loc)?
        });
    }
    Ok(())
}

/// A left row with matches in a grouped lookup: aggregate fields fold over the matches in
/// round-to-2 mode; other fields keep the value of the last match, evaluated without
/// intermediate rounding (quirk spec §5.10, §14 #35).
///
/// One pass over the matches folds every aggregate straight from the right rows into `accs`
/// (no per-field pass over the matches), and a non-aggregate field that reads no `l.*` field
/// is evaluated once, since every match gives it the same value. Any error falls back to
/// [`grouped_row_by_field`], the field-by-field definition, so the error reported is the one
/// it reports (the first failing field, not the first failing match).
pub(crate) fn grouped_row(
    out: &TableOut,
    left: &[Value],
    right: &[Vec<Value>],
    matches: &[usize],
    accs: &mut Vec<Option<Accumulator>>,
    row: &mut Vec<Value>,
    loc: &dyn Fn() -> RowLoc,
) -> Result<(), BatchErrorKind> {
    if grouped_row_one_pass(out, left, right, matches, accs, row).is_none() {
        grouped_row_by_field(out, left, right, matches, row, loc)?;
    }
    Ok(())
}

/// The fast path of [`grouped_row`]; `None` on any error (the caller recomputes the row
/// field by field to report it).
fn grouped_row_one_pass(
    out: &TableOut,
    left: &[Value],
    right: &[Vec<Value>],
    matches: &[usize],
    accs: &mut Vec<Option<Accumulator>>,
    row: &mut Vec<Value>,
) -> Option<()> {
    let last = *matches.last()?;
    accs.clear();
    accs.extend(out.fields.iter().map(|f| f.agg.clone()));
    row.clear();
    // Fields that read `l.*` without aggregating keep the last match's value: evaluated per
    // match, as an earlier match may fail where the last does not.
    let per_match = out.fields.iter().any(|f| f.agg.is_none() && f.refs_lookup);
    for &ri in matches {
        let vars = Vars::new()
            .with(Alias::R, left)
            .with(Alias::L, right.get(ri)?);
        for (f, acc) in out.fields.iter().zip(accs.iter_mut()) {
            match acc {
                Some(a) => a.update(&f.expr, &vars, Rounding::To2).ok()?,
                None if per_match && f.refs_lookup => {
                    f.expr.eval(&vars, Rounding::None).ok()?;
                }
                None => {}
            }
        }
    }
    let vars = Vars::new()
        .with(Alias::R, left)
        .with(Alias::L, right.get(last)?);
    finish_grouped_row(out, accs, &vars, row)
}

/// Appends to `row` each field of a grouped row: an aggregate's final value from `accs`, any
/// other field evaluated over `vars` (the last match's) without intermediate rounding (spec
/// §5.10); `None` on any error or a value of another type than the field's.
pub(crate) fn finish_grouped_row(
    out: &TableOut,
    accs: &[Option<Accumulator>],
    vars: &Vars<'_>,
    row: &mut Vec<Value>,
) -> Option<()> {
    for (f, acc) in out.fields.iter().zip(accs) {
        let v = match acc {
            Some(a) => a.finish().ok()?,
            None => f.expr.eval(vars, Rounding::None).ok()?,
        };
        check_type(&v, f.ty).ok()?;
        row.push(v);
    }
    Some(())
}

/// A grouped row computed field by field, each over all the matches: the definition
/// [`grouped_row`] follows, used to report its errors.
fn grouped_row_by_field(
    out: &TableOut,
    left: &[Value],
    right: &[Vec<Value>],
    matches: &[usize],
    row: &mut Vec<Value>,
    loc: &dyn Fn() -> RowLoc,
) -> Result<(), BatchErrorKind> {
    row.clear();
    for f in &out.fields {
        // Quirk (spec §5.10): a bare string literal as a grouped non-aggregate field keeps its
        // quotes in Capillaries; we store the literal's value (no test depends on it).
        let mut last = None;
        let mut acc = f.agg.clone();
        for &ri in matches {
            let vars = Vars::new().with(Alias::R, left).with(Alias::L, &right[ri]);
            match &mut acc {
                Some(a) => a
                    .update(&f.expr, &vars, Rounding::To2)
                    .map_err(|e| field_err(loc, "field", &f.name, e))?,
                None => {
                    last = Some(
                        f.expr
                            .eval(&vars, Rounding::None)
                            .map_err(|e| field_err(loc, "field", &f.name, e))?,
                    )
                }
            }
        }
        let v = match acc {
            Some(a) => a
                .finish()
                .map_err(|e| field_err(loc, "field", &f.name, e))?,
            None => last.ok_or(Inconsistency::Broken(
                "grouped row evaluated without matches",
            ))?,
        };
        check_type(&v, f.ty).map_err(|e| field_err(loc, "field", &f.name, e))?;
        row.push(v);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::WriteMode;
    use crate::store::suite::Rng;
    use plexus_core::expr::{Scope, parse, prepare};
    use plexus_core::value::Type;
    use rust_decimal::Decimal;

    /// The right rows' columns: `l.i, l.f, l.d, l.s, l.b, l.z`.
    fn scope() -> Scope {
        Scope::new()
            .with_alias(Alias::R, [("k", Type::String), ("n", Type::Int)])
            .with_alias(
                Alias::L,
                [
                    ("i", Type::Int),
                    ("f", Type::Float),
                    ("d", Type::Decimal2),
                    ("s", Type::String),
                    ("b", Type::Bool),
                    ("z", Type::Int),
                ],
            )
    }

    /// A grouped lookup's writer over `fields` (name, type, expression).
    fn table_out(fields: &[(&str, Type, &str)]) -> TableOut {
        let scope = scope();
        let fields: Vec<OutField> = fields
            .iter()
            .map(|&(name, ty, text)| {
                let ast = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
                let expr = prepare(&ast, &scope).unwrap_or_else(|e| panic!("{text}: {e}"));
                OutField {
                    name: name.to_owned(),
                    ty,
                    refs_lookup: expr.field_refs().iter().any(|r| r.alias == "l"),
                    agg: expr.new_accumulator(),
                    default: Ok(Value::Int(0)),
                    expr,
                }
            })
            .collect();
        TableOut {
            types: fields.iter().map(|f| f.ty).collect(),
            fields,
            having: None,
            indexes: Vec::new(),
            mode: WriteMode::Insert,
        }
    }

    /// Random right rows: small value ranges so that ties, equal strings, empty strings and
    /// zero divisors occur.
    fn right_rows(rng: &mut Rng, n: usize) -> Vec<Vec<Value>> {
        let words = ["", "a", "ab", "b", "zz", "Ab", "é"];
        (0..n)
            .map(|_| {
                let i = rng.below(21) as i64 - 10;
                vec![
                    Value::Int(i),
                    Value::Float(i as f64 / 4.0),
                    Value::Decimal(Decimal::new(rng.below(2001) as i64 - 1000, 2)),
                    Value::str(words[rng.below(words.len() as u64) as usize]),
                    Value::Bool(rng.below(3) == 0),
                    Value::Int(rng.below(4) as i64),
                ]
            })
            .collect()
    }

    /// Runs both paths over random groups of `right` (none empty: unmatched left rows never
    /// reach them) and asserts the same row or the same error text.
    fn compare(out: &TableOut, seed: u64, groups: usize) -> (usize, usize) {
        let mut rng = Rng::new(seed);
        let right = right_rows(&mut rng, 64);
        let (mut ok, mut failed) = (0, 0);
        let mut accs = Vec::new();
        for g in 0..groups {
            let left = vec![
                Value::str(&format!("k{g}")),
                Value::Int(rng.below(7) as i64),
            ];
            let n = 1 + rng.below(if g % 4 == 0 { 40 } else { 4 }) as usize;
            let matches: Vec<usize> = (0..n).map(|_| rng.below(64) as usize).collect();
            let loc = || RowLoc::Table {
                table: "t".to_owned(),
                rowid: g as i64,
            };
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            let a = grouped_row(out, &left, &right, &matches, &mut accs, &mut fast, &loc);
            let b = grouped_row_by_field(out, &left, &right, &matches, &mut slow, &loc);
            match (a, b) {
                (Ok(()), Ok(())) => {
                    assert_eq!(fast, slow, "seed {seed}, group {g}, matches {matches:?}");
                    ok += 1;
                }
                (Err(a), Err(b)) => {
                    assert_eq!(a.to_string(), b.to_string(), "seed {seed}, group {g}");
                    failed += 1;
                }
                (a, b) => panic!("seed {seed}, group {g}: one pass {a:?}, by field {b:?}"),
            }
        }
        (ok, failed)
    }

    #[test]
    fn grouped_rows_in_one_pass_match_the_field_by_field_definition() {
        let seed = plexus_testkit::seed::seed("PLEXUS_TEST_SEED", "grouped_rows_one_pass");
        // Every aggregate kind over every type it takes, bare fields (the direct fold) and
        // expressions, and non-aggregate fields with and without `l.*`.
        let out = table_out(&[
            ("key", Type::String, "r.k"),
            ("last_s", Type::String, "l.s"),
            ("mixed", Type::Int, "r.n + l.i"),
            ("n", Type::Int, "count()"),
            ("n_if", Type::Int, "count_if(l.b)"),
            ("sum_i", Type::Int, "sum(l.i)"),
            ("sum_f", Type::Float, "sum(l.f)"),
            ("sum_d", Type::Decimal2, "sum(l.d)"),
            ("sum_expr", Type::Int, "sum(l.i * 2 + r.n)"),
            ("avg_i", Type::Int, "avg(l.i)"),
            ("avg_f", Type::Float, "avg(l.f)"),
            ("avg_d", Type::Decimal2, "avg(l.d)"),
            ("min_i", Type::Int, "min(l.i)"),
            ("max_f", Type::Float, "max(l.f)"),
            ("min_d", Type::Decimal2, "min(l.d)"),
            ("max_d", Type::Decimal2, "max(l.d)"),
            ("min_s", Type::String, "min(l.s)"),
            ("max_s", Type::String, "max(l.s)"),
            ("sum_d_if", Type::Decimal2, "sum_if(l.d, l.b)"),
            ("avg_i_if", Type::Int, "avg_if(l.i, l.b)"),
            ("min_f_if", Type::Float, "min_if(l.f, l.b)"),
            ("max_i_if", Type::Int, "max_if(l.i, l.b)"),
            ("agg_s", Type::String, "string_agg(l.s, \",\")"),
            ("agg_s_if", Type::String, "string_agg_if(l.s, \"-\", l.b)"),
        ]);
        let (ok, failed) = compare(&out, seed, 2000);
        assert_eq!((ok, failed), (2000, 0), "seed {seed}");
    }

    #[test]
    fn grouped_rows_in_one_pass_report_the_field_by_field_error() {
        let seed = plexus_testkit::seed::seed("PLEXUS_TEST_SEED", "grouped_rows_one_pass_errors");
        // A later field failing on an earlier match than an earlier field: the row's error is
        // still the earlier field's; a decimal max_if whose condition never held fails at the
        // end; a string summed fails on the first match.
        let failing = table_out(&[
            ("n", Type::Int, "count()"),
            ("late", Type::Int, "sum(l.i / (l.z - 3))"),
            ("early", Type::Int, "sum(r.n / l.z)"),
            ("sentinel", Type::Decimal2, "max_if(l.d, l.b)"),
        ]);
        let (ok, failed) = compare(&failing, seed, 2000);
        assert!(
            ok > 0 && failed > 0,
            "seed {seed}: {ok} rows, {failed} errors"
        );
        let typed = table_out(&[("bad", Type::Int, "sum(l.s)")]);
        assert_eq!(compare(&typed, seed, 50), (0, 50), "seed {seed}");
        // A field of the wrong declared type fails the row after its value is computed.
        let mistyped = table_out(&[("n", Type::String, "count()")]);
        assert_eq!(compare(&mistyped, seed, 50), (0, 50), "seed {seed}");
    }
}
