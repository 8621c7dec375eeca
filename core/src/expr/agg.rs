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
#[derive(Clone, Debug, PartialEq)]
pub struct Accumulator {
    func: AggFunc,
    state: State,
    /// Rows counted (count*, avg*).
    count: i64,
    rounding: Rounding,
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
    /// them in. `compiled` must be the expression that created this accumulator.
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
                if let State::Unknown = self.state {
                    self.state = State::Str(String::new());
                }
                if let (State::Str(acc), true) = (&mut self.state, on) {
                    // Quirk (spec §5.10): separator only when the text so far is non-empty.
                    if !acc.is_empty() {
                        acc.push_str(sep);
                    }
                    acc.push_str(s);
                }
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
                // Quirk (spec §5.10): an empty accumulator is always replaced, and "" is never
                // the min unless all values are "". Decision: an empty value therefore never
                // replaces a non-empty min (the spec's stated outcome).
                if on
                    && (acc.is_empty()
                        || (is_min && !s.is_empty() && s.as_bytes() < acc.as_bytes())
                        || (!is_min && s.as_bytes() > acc.as_bytes()))
                {
                    acc.clear();
                    acc.push_str(s);
                }
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
}
