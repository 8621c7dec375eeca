//! Aggregate functions (spec §5.10): one [`Accumulator`] per left row and aggregate field.

use std::fmt;
use std::sync::Arc;

use rust_decimal::Decimal;

use super::error::EvalError;
use super::eval::dec_div;
use super::ops::AggFunc;
use super::prepare::{Compiled, Node, Rounding};
use super::scope::Vars;
use super::val::{Ctx, Val, describe};
use crate::decimal::round2;
use crate::row::CellRef;
use crate::value::{Type, Value};

impl fmt::Display for AggFunc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Running state; the variant (type) is fixed by the first value (spec §5.10).
#[derive(Clone, Debug, PartialEq)]
enum State {
    Unknown,
    Int(i64),
    Float(f64),
    /// For min/max `None` is Go's out-of-range sentinel (±3.4e38), beyond any rust_decimal.
    Dec(Option<Decimal>),
    Str(String),
    /// avg of ints: exact (i128) sum, floor-divided at the end.
    IntAvg(i128),
}

impl State {
    fn go_type(&self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Int(_) | Self::IntAvg(_) => "int64",
            Self::Float(_) => "float64",
            Self::Dec(_) => "decimal.Decimal",
            Self::Str(_) => "string",
        }
    }
}

/// The accumulator of one root aggregate over the matching rows of one group.
#[derive(Clone, Debug)]
pub struct Accumulator {
    func: AggFunc,
    state: State,
    /// Rows counted (count*, sum*, avg*); for string_agg the rows appended while the text was
    /// still empty, which [`Accumulator::merge`] needs to place the separators.
    count: i64,
    rounding: Rounding,
    /// The largest magnitude a decimal sum has had (zero otherwise): bounds every partial sum
    /// of these rows continued from another state, so that [`Accumulator::merge`] can tell
    /// that no step rounded or overflowed.
    peak: Decimal,
}

/// Equal running states; `peak` is a bound kept for merging, not part of the value.
impl PartialEq for Accumulator {
    fn eq(&self, other: &Self) -> bool {
        self.func == other.func
            && self.state == other.state
            && self.count == other.count
            && self.rounding == other.rounding
    }
}

/// Folds `s` into a string min (`is_min`) or max `acc` when `on`.
fn min_max_str(acc: &mut String, s: &str, is_min: bool, on: bool) {
    // Quirk (spec §5.10): an empty accumulator is always replaced, and "" is never the min
    // unless all values are "". Decision: an empty value therefore never replaces a non-empty
    // min (the spec's stated outcome).
    if on
        && (acc.is_empty()
            || (is_min && !s.is_empty() && s.as_bytes() < acc.as_bytes())
            || (!is_min && s.as_bytes() > acc.as_bytes()))
    {
        acc.clear();
        acc.push_str(s);
    }
}

/// The float min/max start values of Capillaries (`math.MaxFloat64`, `-math.MaxFloat32`).
const FLOAT_MIN_START: f64 = f64::MAX;
const FLOAT_MAX_START: f64 = -(f32::MAX as f64);

impl Compiled {
    /// A fresh accumulator when the expression is a root aggregate (spec §5.10), else `None`.
    pub fn new_accumulator(&self) -> Option<Accumulator> {
        self.root_aggregate().map(|func| Accumulator {
            func,
            state: State::Unknown,
            count: 0,
            rounding: Rounding::To2,
            peak: Decimal::ZERO,
        })
    }
}

fn cond_arg(func: AggFunc, v: &Value) -> Result<bool, EvalError> {
    match v {
        Value::Bool(b) => Ok(*b),
        other => Err(EvalError::InvalidArgs {
            func: func.name(),
            detail: format!("condition must be bool, got {}", describe(other)).into(),
        }),
    }
}

impl Accumulator {
    /// The aggregate function.
    pub fn func(&self) -> AggFunc {
        self.func
    }

    /// Heap bytes the running state holds (a string state's capacity): what a memory budget
    /// must count besides the accumulator itself.
    pub fn heap_bytes(&self) -> usize {
        match &self.state {
            State::Str(s) => s.capacity(),
            _ => 0,
        }
    }

    /// Evaluates the aggregate's arguments for one matching row (aggregate mode) and folds
    /// them in. `compiled` must be the expression that created this accumulator. On error
    /// the running state is left as it was.
    pub fn update(
        &mut self,
        compiled: &Compiled,
        vars: &Vars<'_>,
        rounding: Rounding,
    ) -> Result<(), EvalError> {
        let Node::Agg { func, args, sep } = &compiled.root else {
            return Err(EvalError::AggNotEnabled { func: self.func });
        };
        self.rounding = rounding;
        // The common shapes (`count()`, `sum(l.value)`, `min(l.product_id)`) fold the row's
        // value directly: evaluating a bare field yields exactly that reference, and this is
        // the inner loop of every grouped lookup (once per match and aggregate field).
        match &**args {
            [] => return self.fold(*func, &[], sep.as_deref()),
            [Node::Field { alias, idx, name }] => {
                let v = vars
                    .slot(*alias, *idx)
                    .ok_or_else(|| compiled.missing(*name))?;
                return self.fold(*func, &[Val::Ref(v)], sep.as_deref());
            }
            _ => {}
        }
        let ctx = Ctx {
            rounding,
            agg: Some(*func),
        };
        compiled.with_args(args, vars, ctx, |a| self.fold(*func, a, sep.as_deref()))
    }

    /// Folds in one matching row of an aggregate whose argument is a bare field
    /// ([`Compiled::aggregate_field`]), given that field's stored cell (`None` for `count()`):
    /// the state [`Accumulator::update`] reaches on the decoded row, without building a
    /// string argument (#25 item 3). On error the running state is left as it was; the error
    /// may word a wrong argument differently, so a caller that reports errors re-runs
    /// [`Accumulator::update`] for the message.
    pub fn update_cell(
        &mut self,
        compiled: &Compiled,
        cell: Option<&CellRef<'_>>,
        rounding: Rounding,
    ) -> Result<(), EvalError> {
        let Node::Agg { func, sep, .. } = &compiled.root else {
            return Err(EvalError::AggNotEnabled { func: self.func });
        };
        self.rounding = rounding;
        let sep = sep.as_deref();
        match cell {
            None => self.fold(*func, &[], sep),
            Some(CellRef::Value(v)) => self.fold(*func, &[Val::Ref(v)], sep),
            Some(CellRef::Str(s)) => match (*func, &mut self.state, sep) {
                (AggFunc::StringAgg, State::Unknown | State::Str(_), Some(sep)) => {
                    self.append_str(s, sep, true);
                    Ok(())
                }
                (AggFunc::Min | AggFunc::Max, state @ (State::Unknown | State::Str(_)), _) => {
                    if let State::Unknown = state {
                        *state = State::Str(String::new());
                    }
                    if let State::Str(acc) = state {
                        min_max_str(acc, s, *func == AggFunc::Min, true);
                    }
                    Ok(())
                }
                // Anything else fails: the decoded path words the error.
                _ => self.fold(*func, &[Val::Own(Value::str(s))], sep),
            },
        }
    }

    /// Appends `s` to a string_agg's text when `on` (after `sep` unless the text is empty).
    fn append_str(&mut self, s: &str, sep: &str, on: bool) {
        if let State::Unknown = self.state {
            self.state = State::Str(String::new());
        }
        if let (State::Str(acc), true) = (&mut self.state, on) {
            // Quirk (spec §5.10): separator only when the text so far is non-empty.
            if acc.is_empty() {
                self.count += 1;
            } else {
                acc.push_str(sep);
            }
            acc.push_str(s);
        }
    }

    fn type_changed(&self, v: &Value) -> EvalError {
        EvalError::AggTypeChanged {
            func: self.func,
            started: self.state.go_type(),
            got: describe(v),
        }
    }

    fn fold(
        &mut self,
        func: AggFunc,
        args: &[Val<'_>],
        sep: Option<&str>,
    ) -> Result<(), EvalError> {
        if args.len() != func.arity() {
            return Err(EvalError::Arity {
                func: func.name(),
                required: func.arity(),
                supplied: args.len(),
            });
        }
        use AggFunc as A;
        match func {
            A::Count => {
                self.count += 1;
                Ok(())
            }
            A::CountIf => {
                if cond_arg(func, &args[0])? {
                    self.count += 1;
                }
                Ok(())
            }
            A::Sum | A::SumIf | A::Avg | A::AvgIf => {
                let on = !func.is_conditional() || cond_arg(func, &args[1])?;
                self.fold_number(func, &args[0], on)
            }
            A::Min | A::MinIf | A::Max | A::MaxIf => {
                let on = !func.is_conditional() || cond_arg(func, &args[1])?;
                self.fold_min_max(func, &args[0], on)
            }
            A::StringAgg | A::StringAggIf => {
                let Some(sep) = sep else {
                    return Err(EvalError::StringAggSeparator { func });
                };
                let on = !func.is_conditional() || cond_arg(func, &args[2])?;
                let Value::Str(s) = &*args[0] else {
                    return Err(EvalError::InvalidArgs {
                        func: func.name(),
                        detail: format!("invalid argument {}", describe(&args[0])).into(),
                    });
                };
                self.append_str(s, sep, on);
                Ok(())
            }
        }
    }

    fn fold_number(&mut self, func: AggFunc, v: &Value, on: bool) -> Result<(), EvalError> {
        let avg = matches!(func, AggFunc::Avg | AggFunc::AvgIf);
        if let State::Unknown = self.state {
            self.state = match v {
                Value::Int(_) | Value::GoInt(_) if avg => State::IntAvg(0),
                Value::Int(_) | Value::GoInt(_) => State::Int(0),
                Value::Float(_) => State::Float(0.0),
                Value::Decimal(_) => State::Dec(Some(Decimal::ZERO)),
                other => {
                    return Err(EvalError::InvalidArgs {
                        func: func.name(),
                        detail: format!("invalid argument {}", describe(other)).into(),
                    });
                }
            };
        }
        let ok = match (&mut self.state, v) {
            (State::Int(acc), Value::Int(i) | Value::GoInt(i)) => {
                if on {
                    *acc = acc.wrapping_add(*i);
                }
                true
            }
            (State::IntAvg(acc), Value::Int(i) | Value::GoInt(i)) => {
                if on {
                    *acc = acc.wrapping_add(i128::from(*i));
                }
                true
            }
            (State::Float(acc), Value::Float(f)) => {
                if on {
                    *acc += f;
                }
                true
            }
            (State::Dec(Some(acc)), Value::Decimal(d)) => {
                if on {
                    *acc = acc
                        .checked_add(*d)
                        .ok_or(EvalError::DecimalOverflow { op: "+" })?;
                    let magnitude = acc.abs();
                    if magnitude > self.peak {
                        self.peak = magnitude;
                    }
                }
                true
            }
            _ => false,
        };
        if !ok {
            return Err(self.type_changed(v));
        }
        if on {
            self.count += 1;
        }
        Ok(())
    }

    fn fold_min_max(&mut self, func: AggFunc, v: &Value, on: bool) -> Result<(), EvalError> {
        let is_min = matches!(func, AggFunc::Min | AggFunc::MinIf);
        if let State::Unknown = self.state {
            self.state = match v {
                Value::Int(_) | Value::GoInt(_) => {
                    State::Int(if is_min { i64::MAX } else { i64::MIN })
                }
                Value::Float(_) => State::Float(if is_min {
                    FLOAT_MIN_START
                } else {
                    FLOAT_MAX_START
                }),
                Value::Decimal(_) => State::Dec(None),
                Value::Str(_) => State::Str(String::new()),
                other => {
                    return Err(EvalError::InvalidArgs {
                        func: func.name(),
                        detail: format!("invalid argument {}", describe(other)).into(),
                    });
                }
            };
        }
        let ok = match (&mut self.state, v) {
            (State::Int(acc), Value::Int(i) | Value::GoInt(i)) => {
                if on && ((is_min && *i < *acc) || (!is_min && *i > *acc)) {
                    *acc = *i;
                }
                true
            }
            (State::Float(acc), Value::Float(f)) => {
                // Plain `<`/`>` as in Go: NaN never wins, nor does anything below -MaxFloat32
                // for max (the start value).
                if on && ((is_min && *f < *acc) || (!is_min && *f > *acc)) {
                    *acc = *f;
                }
                true
            }
            (State::Dec(acc), Value::Decimal(d)) => {
                let better = match acc {
                    None => true,
                    Some(a) => (is_min && d < a) || (!is_min && d > a),
                };
                if on && better {
                    *acc = Some(*d);
                }
                true
            }
            (State::Str(acc), Value::Str(s)) => {
                min_max_str(acc, s, is_min, on);
                true
            }
            _ => false,
        };
        if !ok {
            return Err(self.type_changed(v));
        }
        Ok(())
    }

    /// The column type the final value will have (used by the load-time check).
    pub(crate) fn result_type_name(&self) -> &'static str {
        match self.func {
            AggFunc::Count | AggFunc::CountIf => "int64",
            AggFunc::StringAgg | AggFunc::StringAggIf => "string",
            _ => match self.state {
                State::Unknown => "int64",
                ref s => s.go_type(),
            },
        }
    }

    /// The column type of the final value.
    pub fn result_type(&self) -> Type {
        match self.result_type_name() {
            "float64" => Type::Float,
            "decimal.Decimal" => Type::Decimal2,
            "string" => Type::String,
            _ => Type::Int,
        }
    }

    /// The aggregate value of a group with at least one matching row (spec §5.10 "Final
    /// values"). Decision: with no update at all (the caller should use defaults, §7.4) it
    /// returns int64 0, or "" for `string_agg`.
    ///
    /// A decimal `min_if`/`max_if` whose condition never held is an error: Go returns
    /// ±340282350000000000000000000000000000000, which `rust_decimal` cannot represent (and
    /// which overflows storage in Go anyway).
    pub fn finish(&self) -> Result<Value, EvalError> {
        use AggFunc as A;
        Ok(match (self.func, &self.state) {
            (A::Count | A::CountIf, _) => Value::Int(self.count),
            (A::StringAgg | A::StringAggIf, State::Str(s)) => Value::Str(Arc::from(s.as_str())),
            (A::StringAgg | A::StringAggIf, _) => Value::str(""),
            (_, State::Unknown) => Value::Int(0),
            (A::Avg | A::AvgIf, State::IntAvg(sum)) => {
                // Quirk (spec §5.10): floor (Euclidean) division, -7/2 = -4.
                Value::Int(if self.count == 0 {
                    0
                } else {
                    sum.div_euclid(i128::from(self.count)) as i64
                })
            }
            (A::Avg | A::AvgIf, State::Float(sum)) => Value::Float(if self.count == 0 {
                0.0
            } else {
                sum / self.count as f64
            }),
            (A::Avg | A::AvgIf, State::Dec(sum)) => {
                let sum = sum.unwrap_or(Decimal::ZERO);
                if self.count == 0 {
                    Value::Decimal(Decimal::ZERO)
                } else {
                    let q = dec_div(sum, Decimal::from(self.count))?;
                    Value::Decimal(match self.rounding {
                        Rounding::To2 => round2(q),
                        Rounding::None => q,
                    })
                }
            }
            (_, State::Int(i)) => Value::Int(*i),
            (_, State::IntAvg(i)) => Value::Int(*i as i64),
            (_, State::Float(f)) => Value::Float(*f),
            (_, State::Dec(Some(d))) => Value::Decimal(*d),
            (_, State::Dec(None)) => return Err(EvalError::DecimalSentinel { func: self.func }),
            (_, State::Str(s)) => Value::Str(Arc::from(s.as_str())),
        })
    }

    /// Folds in `later`, an accumulator of the same expression `compiled` created fresh and
    /// updated without error with the rows that come after this one's. True when the result
    /// is exactly the state one accumulator updated with both row sequences in order has
    /// (value, type, count, and so every later update and error text); false, with `self`
    /// unchanged, when that is not certain: float sums and averages over rows on both sides
    /// (float addition is not associative), states of different types (the sequential pass
    /// fails on the first later row), a decimal sum whose bound does not rule out a rounding
    /// or an overflow, a count that would overflow, different functions or roundings.
    pub fn merge(&mut self, later: Self, compiled: &Compiled) -> bool {
        if self.func != later.func || self.rounding != later.rounding {
            return false;
        }
        let Some(count) = self.count.checked_add(later.count) else {
            return false;
        };
        // A fresh state continued over the later rows is `later` itself.
        if self.state == State::Unknown && self.count == 0 {
            *self = later;
            return true;
        }
        use AggFunc as A;
        match self.func {
            A::Count | A::CountIf => {
                if self.state != State::Unknown || later.state != State::Unknown {
                    return false;
                }
                self.count = count;
                true
            }
            A::Sum | A::SumIf | A::Avg | A::AvgIf => self.merge_number(later, count),
            A::Min | A::MinIf | A::Max | A::MaxIf => self.merge_min_max(later, count),
            A::StringAgg | A::StringAggIf => {
                let Node::Agg { sep: Some(sep), .. } = &compiled.root else {
                    return false;
                };
                self.merge_strings(later, sep, count)
            }
        }
    }

    /// [`Accumulator::merge`] of sums and averages; `count` is the rows of both.
    fn merge_number(&mut self, later: Self, count: i64) -> bool {
        // A state still unknown saw no value of a type the sum takes, so no row counted: the
        // other side alone is the result.
        match (&mut self.state, later.state) {
            (State::Unknown, state) => {
                self.state = state;
                self.peak = later.peak;
            }
            (_, State::Unknown) => {}
            (State::Int(a), State::Int(b)) => *a = a.wrapping_add(b),
            (State::IntAvg(a), State::IntAvg(b)) => *a = a.wrapping_add(b),
            // No row added on one side: that side is still exactly the start value 0.0, which
            // the other side started from too.
            (State::Float(_), State::Float(_)) if later.count == 0 => {}
            (State::Float(a), State::Float(b)) if self.count == 0 => *a = b,
            (State::Float(_), State::Float(_)) => return false,
            (State::Dec(Some(_)), State::Dec(Some(_))) if later.count == 0 => {}
            (State::Dec(Some(a)), State::Dec(Some(b))) if self.count == 0 => {
                *a = b;
                self.peak = later.peak;
            }
            (State::Dec(Some(a)), State::Dec(Some(b))) => {
                let Some((sum, bound)) = exact_decimal_sum(*a, b, later.peak) else {
                    return false;
                };
                *a = sum;
                self.peak = self.peak.max(bound);
            }
            _ => return false,
        }
        self.count = count;
        true
    }

    /// [`Accumulator::merge`] of min and max: the later extreme replaces this one exactly
    /// when it would have replaced it row by row (strictly better; ties keep the first).
    fn merge_min_max(&mut self, later: Self, count: i64) -> bool {
        let is_min = matches!(self.func, AggFunc::Min | AggFunc::MinIf);
        match (&mut self.state, later.state) {
            (State::Unknown, state) => self.state = state,
            (_, State::Unknown) => {}
            (State::Int(a), State::Int(b)) => {
                if (is_min && b < *a) || (!is_min && b > *a) {
                    *a = b;
                }
            }
            // Both started from the same start value; NaN never wins on either side.
            (State::Float(a), State::Float(b)) => {
                if (is_min && b < *a) || (!is_min && b > *a) {
                    *a = b;
                }
            }
            (State::Dec(a), State::Dec(b)) => {
                if let Some(b) = b {
                    let better = match a {
                        None => true,
                        Some(a) => (is_min && b < *a) || (!is_min && b > *a),
                    };
                    if better {
                        *a = Some(b);
                    }
                }
            }
            // The string quirk: an empty text is the start state (anything replaces it), and
            // an empty value never replaces a non-empty min.
            (State::Str(a), State::Str(b)) => {
                let better = if is_min {
                    a.is_empty() || (!b.is_empty() && b.as_bytes() < a.as_bytes())
                } else {
                    b.as_bytes() > a.as_bytes()
                };
                if better {
                    *a = b;
                }
            }
            _ => return false,
        }
        self.count = count;
        true
    }

    /// [`Accumulator::merge`] of string_agg: after a non-empty text every later row appended
    /// while the later text was still empty (`later.count`) brings its separator too.
    /// `count` is the rows of both appended while their text was empty, when this text is.
    fn merge_strings(&mut self, later: Self, sep: &str, count: i64) -> bool {
        match (&mut self.state, later.state) {
            (State::Unknown, state) => {
                self.state = state;
                self.count = count;
            }
            (_, State::Unknown) => {}
            (State::Str(a), State::Str(b)) if a.is_empty() => {
                *a = b;
                self.count = count;
            }
            (State::Str(a), State::Str(b)) => {
                let Ok(seps) = usize::try_from(later.count) else {
                    return false;
                };
                a.reserve_exact(sep.len().saturating_mul(seps).saturating_add(b.len()));
                for _ in 0..seps {
                    a.push_str(sep);
                }
                a.push_str(&b);
            }
            _ => return false,
        }
        true
    }
}

/// The bound of partial sums below which decimal additions are exact: their mantissas, and
/// those of the rows (each at most twice the bound), stay below 2^96 ≈ 7.9e28 at the largest
/// scale involved, so `rust_decimal` neither rounds nor overflows.
const EXACT_DECIMAL_BOUND: i128 = 10i128.pow(27);

/// `a + b` where `b` is a sum started from zero whose partial sums never exceeded
/// `later_peak` in magnitude, with the bound of the partial sums `a + …` continued over the
/// same rows, when every step of that sequential continuation is certainly exact (see
/// [`EXACT_DECIMAL_BOUND`]); `None` otherwise.
fn exact_decimal_sum(a: Decimal, b: Decimal, later_peak: Decimal) -> Option<(Decimal, Decimal)> {
    let scale = a.scale().max(b.scale()).max(later_peak.scale());
    let at_scale = |d: Decimal| -> Option<i128> {
        d.mantissa()
            .checked_abs()?
            .checked_mul(10i128.checked_pow(scale - d.scale())?)
    };
    let bound = at_scale(a)?.checked_add(at_scale(later_peak)?)?;
    if bound >= EXACT_DECIMAL_BOUND {
        return None;
    }
    let sum = a.checked_add(b)?;
    let bound = Decimal::try_from_i128_with_scale(bound, scale).ok()?;
    Some((sum, bound))
}

#[cfg(test)]
mod merge_tests {
    //! [`Accumulator::merge`] against one sequential pass, on random rows: the merge of two
    //! (or three) parts either equals the sequential state or declines, never differs.

    use rust_decimal::Decimal;

    use super::Accumulator;
    use crate::expr::{Alias, Compiled, Rounding, Scope, Vars, parse, prepare};
    use crate::value::{Type, Value};

    /// The seed: `PLEXUS_AGG_SEED` replays one, else the clock; printed either way.
    fn seed(test: &str) -> u64 {
        plexus_testkit::seed::seed("PLEXUS_AGG_SEED", test)
    }

    use plexus_testkit::seed::Rng;

    /// The aggregates merged: every function, over `l.v` with the condition `l.c`.
    const EXPRS: &[&str] = &[
        "count()",
        "count_if(l.c)",
        "sum(l.v)",
        "sum_if(l.v, l.c)",
        "avg(l.v)",
        "avg_if(l.v, l.c)",
        "min(l.v)",
        "min_if(l.v, l.c)",
        "max(l.v)",
        "max_if(l.v, l.c)",
        "string_agg(l.v, \",\")",
        "string_agg(l.v, \"\")",
        "string_agg_if(l.v, \"--\", l.c)",
    ];

    fn compile(src: &str) -> Compiled {
        let scope = Scope::new().with_alias(Alias::L, [("c", Type::Bool), ("v", Type::Int)]);
        let ast = parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
        prepare(&ast, &scope).unwrap_or_else(|e| panic!("{src}: {e}"))
    }

    /// A value of kind `kind` (0 int, 1 float, 2 decimal, 3 string), small most of the time
    /// (ties, zeros, empty strings), now and then extreme (overflow, rounding, NaN, ±0).
    fn value(rng: &mut Rng, kind: u64) -> Value {
        match kind {
            0 => Value::Int(match rng.below(8) {
                0 => i64::MAX - rng.below(3) as i64,
                1 => i64::MIN + rng.below(3) as i64,
                _ => rng.below(21) as i64 - 10,
            }),
            1 => Value::Float(match rng.below(10) {
                0 => f64::NAN,
                1 => -0.0,
                2 => 0.0,
                3 => 1e300 * (rng.below(3) as f64 - 1.0),
                4 => f64::MAX,
                _ => (rng.below(41) as f64 - 20.0) / 8.0 + 0.1,
            }),
            2 => {
                let (mantissa, scale) = match rng.below(10) {
                    // Near the 96-bit mantissa: sums round or overflow.
                    0 => ((1i128 << 95) - rng.below(1000) as i128, rng.below(3) as u32),
                    1 => (
                        -(1i128 << 95) + rng.below(1000) as i128,
                        rng.below(3) as u32,
                    ),
                    // Just below the merge's bound, at larger scales.
                    2 => (
                        10i128.pow(26) + rng.below(1000) as i128,
                        rng.below(2) as u32 + 1,
                    ),
                    3 => (rng.below(2001) as i128 - 1000, 20 + rng.below(9) as u32),
                    _ => (rng.below(4001) as i128 - 2000, rng.below(4) as u32),
                };
                let sign = if rng.one_in(2) { 1 } else { -1 };
                Value::Decimal(
                    Decimal::try_from_i128_with_scale(mantissa * sign, scale)
                        .unwrap_or(Decimal::ONE),
                )
            }
            _ => Value::str(["", "", "a", "b", "ab", "zz", "Ab", "é"][rng.below(8) as usize]),
        }
    }

    /// Random rows `[c, v]`: one value kind per sequence with the odd value of another kind
    /// (type changes), and now and then a condition that is not a bool (an error).
    fn rows(rng: &mut Rng, n: usize) -> Vec<Vec<Value>> {
        let kind = rng.below(4);
        (0..n)
            .map(|_| {
                let k = if rng.one_in(12) { rng.below(4) } else { kind };
                let c = if rng.one_in(40) {
                    Value::Int(1)
                } else {
                    Value::Bool(rng.below(3) != 0)
                };
                vec![c, value(rng, k)]
            })
            .collect()
    }

    /// The accumulator over `rows`, or the first error's text; a failed update must leave
    /// the state as it was (a parallel fold re-runs the failing row from a merged state).
    fn fold(c: &Compiled, rows: &[Vec<Value>]) -> Result<Accumulator, String> {
        let mut acc = c.new_accumulator().ok_or("not an aggregate")?;
        for r in rows {
            let before = state(&acc);
            if let Err(e) = acc.update(c, &Vars::new().with(Alias::L, r), Rounding::To2) {
                assert_eq!(state(&acc), before, "{e} changed the state");
                return Err(e.to_string());
            }
        }
        Ok(acc)
    }

    /// The running state as text (NaN and -0.0 compare as themselves); `peak` is a bound.
    fn state(a: &Accumulator) -> String {
        format!("{:?} {} {:?}", a.state, a.count, a.rounding)
    }

    fn finished(a: &Accumulator) -> String {
        format!("{:?}", a.finish())
    }

    #[test]
    fn agg_merge_equals_the_sequential_pass_or_declines() {
        let seed = seed("agg_merge_equals_the_sequential_pass_or_declines");
        let mut rng = Rng::new(seed);
        let compiled: Vec<Compiled> = EXPRS.iter().map(|s| compile(s)).collect();
        let mut exact = vec![0usize; EXPRS.len()];
        let mut declined = vec![0usize; EXPRS.len()];
        for trial in 0..40_000 {
            let which = rng.below(EXPRS.len() as u64) as usize;
            let c = &compiled[which];
            let n = rng.below(14) as usize;
            let all = rows(&mut rng, n);
            // Two or three parts, any of them possibly empty.
            let mut cuts = vec![rng.below(all.len() as u64 + 1) as usize];
            if rng.one_in(3) {
                cuts.push(rng.below(all.len() as u64 + 1) as usize);
            }
            cuts.sort_unstable();
            let mut bounds = vec![0];
            bounds.extend(&cuts);
            bounds.push(all.len());
            let parts: Vec<Result<Accumulator, String>> = bounds
                .windows(2)
                .map(|w| fold(c, &all[w[0]..w[1]]))
                .collect();
            // The merge's contract: every part updated without error.
            let Ok(parts) = parts.into_iter().collect::<Result<Vec<_>, _>>() else {
                continue;
            };
            let sequential = fold(c, &all);
            let ctx = || {
                format!(
                    "{} over {all:?} cut at {cuts:?} (trial {trial}, seed {seed})",
                    EXPRS[which]
                )
            };
            let mut parts = parts.into_iter();
            let Some(mut merged) = parts.next() else {
                continue;
            };
            let mut ok = true;
            for later in parts {
                let before = state(&merged);
                if !merged.merge(later, c) {
                    assert_eq!(state(&merged), before, "declined but changed: {}", ctx());
                    ok = false;
                    break;
                }
            }
            if !ok {
                declined[which] += 1;
                continue;
            }
            exact[which] += 1;
            let Ok(sequential) = &sequential else {
                panic!(
                    "merged to {} where the sequential pass fails with {sequential:?}: {}",
                    state(&merged),
                    ctx()
                );
            };
            assert_eq!(state(&merged), state(sequential), "{}", ctx());
            assert_eq!(finished(&merged), finished(sequential), "{}", ctx());
        }
        eprintln!("exact merges {exact:?}, declined {declined:?} (seed {seed})");
        for (i, src) in EXPRS.iter().enumerate() {
            // Every function merges exactly most of the time; only float sums decline often.
            assert!(
                exact[i] > declined[i] || src.contains("sum") || src.contains("avg"),
                "{src}: {} exact, {} declined (seed {seed})",
                exact[i],
                declined[i]
            );
            assert!(
                exact[i] > 100,
                "{src}: {} exact merges (seed {seed})",
                exact[i]
            );
        }
    }

    #[test]
    fn agg_merge_declines_what_is_not_exact() {
        let c = compile("sum(l.v)");
        let row = |v: Value| vec![Value::Bool(true), v];
        let acc = |vs: &[Value]| {
            let rows: Vec<Vec<Value>> = vs.iter().cloned().map(row).collect();
            fold(&c, &rows).unwrap_or_else(|e| panic!("{e}"))
        };
        // Float sums over rows on both sides.
        let mut a = acc(&[Value::Float(0.1)]);
        assert!(!a.merge(acc(&[Value::Float(0.2)]), &c));
        // …but not when one side added nothing.
        assert!(a.merge(acc(&[]), &c));
        assert_eq!(finished(&a), finished(&acc(&[Value::Float(0.1)])));
        // Types that differ: the sequential pass fails on the first later row.
        let mut a = acc(&[Value::Int(1)]);
        assert!(!a.merge(acc(&[Value::Float(0.2)]), &c));
        // A decimal sum whose partial sums come near the 96-bit mantissa.
        let big = Value::Decimal(Decimal::from_i128_with_scale(1i128 << 94, 0));
        let mut a = acc(std::slice::from_ref(&big));
        assert!(!a.merge(acc(&[big.clone(), big]), &c));
        // Small decimals merge exactly, at the larger scale of the two.
        let mut a = acc(&[Value::Decimal(Decimal::new(125, 2))]);
        assert!(a.merge(acc(&[Value::Decimal(Decimal::new(5, 3))]), &c));
        assert_eq!(
            finished(&a),
            format!("{:?}", Ok::<_, ()>(Value::Decimal(Decimal::new(1255, 3))))
        );
        // The separator quirk: rows appended to an empty text bring their separators along.
        let c = compile("string_agg(l.v, \",\")");
        let strs = |vs: &[&str]| {
            let rows: Vec<Vec<Value>> = vs.iter().map(|s| row(Value::str(s))).collect();
            fold(&c, &rows).unwrap_or_else(|e| panic!("{e}"))
        };
        let mut a = strs(&["x"]);
        assert!(a.merge(strs(&["", "", "y", ""]), &c));
        assert_eq!(
            finished(&a),
            format!("{:?}", Ok::<_, ()>(Value::str("x,,,y,")))
        );
    }
}
