//! The function library of spec §5.7 (aggregates are in `agg`).

use std::cell::RefCell;
use std::sync::Arc;

use regex::Regex;
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;

use super::error::EvalError;
use super::prepare::Func;
use super::regex_go;
use super::val::{Ctx, MAX_STACK_ARGS, Val, build_str, describe, put_buf, take_buf};
use crate::value::{Time, Value};
use crate::{cell, decimal, gofmt, gotime};

fn arity(func: &'static str, required: usize, args: &[Val<'_>]) -> Result<(), EvalError> {
    if args.len() != required {
        return Err(EvalError::Arity {
            func,
            required,
            supplied: args.len(),
        });
    }
    Ok(())
}

fn invalid(func: Func, args: &[Val<'_>]) -> EvalError {
    let list: Vec<String> = args.iter().map(|a| describe(a).into_string()).collect();
    EvalError::InvalidArgs {
        func: func.name(),
        detail: format!("invalid args {}", list.join(", ")).into(),
    }
}

fn take<'a>(args: &mut [Val<'a>], i: usize) -> Val<'a> {
    std::mem::replace(&mut args[i], Val::Own(Value::Bool(false)))
}

/// A number argument as float64 (`math.*`).
fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Int(i) | Value::GoInt(i) => Some(*i as f64),
        Value::Float(f) => Some(*f),
        Value::Decimal(d) => Some(decimal::to_f64(d)),
        _ => None,
    }
}

fn time_args<'v>(func: Func, args: &'v [Val<'_>]) -> Result<(&'v Time, &'v Time), EvalError> {
    arity(func.name(), 2, args)?;
    match (&*args[0], &*args[1]) {
        (Value::Time(a), Value::Time(b)) => Ok((a, b)),
        _ => Err(invalid(func, args)),
    }
}

/// Calls a library function on evaluated arguments.
pub(crate) fn call<'a>(func: Func, args: &mut [Val<'a>], _ctx: Ctx) -> Result<Val<'a>, EvalError> {
    use Func as F;
    let own = |v: Value| Ok(Val::Own(v));
    match func {
        F::Len => {
            arity(func.name(), 1, args)?;
            match &*args[0] {
                // Quirk (spec §5.7): Go `int`, not int64.
                Value::Str(s) => own(Value::GoInt(s.len() as i64)),
                _ => Err(invalid(func, args)),
            }
        }
        F::String => {
            arity(func.name(), 1, args)?;
            if let Value::Str(_) = &*args[0] {
                return Ok(take(args, 0));
            }
            own(build_str(|s| gofmt::write_value(s, &args[0])))
        }
        F::Int => {
            arity(func.name(), 1, args)?;
            own(Value::Int(match &*args[0] {
                // Go strconv.ParseInt(s, 10, 64): sign and digits only.
                Value::Str(s) => cell::parse_go_int(s).ok_or_else(|| EvalError::InvalidArgs {
                    func: func.name(),
                    detail: format!("cannot parse {s:?} as int64").into(),
                })?,
                Value::Bool(b) => i64::from(*b),
                Value::Int(i) | Value::GoInt(i) => *i,
                // Out-of-range floats are unspecified in Go; Rust saturates (NaN → 0).
                Value::Float(f) => *f as i64,
                // Like big.Int.Int64(): the low 64 bits of the truncated value.
                Value::Decimal(d) => d.trunc().to_i128().unwrap_or(0) as i64,
                _ => return Err(invalid(func, args)),
            }))
        }
        F::Float => {
            arity(func.name(), 1, args)?;
            own(Value::Float(match &*args[0] {
                Value::Str(s) => cell::parse_go_float(s).ok_or_else(|| EvalError::InvalidArgs {
                    func: func.name(),
                    detail: format!("cannot parse {s:?} as float64").into(),
                })?,
                Value::Bool(b) => f64::from(u8::from(*b)),
                Value::Int(i) | Value::GoInt(i) => *i as f64,
                Value::Float(f) => *f,
                Value::Decimal(d) => decimal::to_f64(d),
                _ => return Err(invalid(func, args)),
            }))
        }
        F::Decimal2 => {
            arity(func.name(), 1, args)?;
            let dec_err = |e| EvalError::Decimal(Box::new(e));
            own(Value::Decimal(match &*args[0] {
                // No rounding (spec §5.6): decimal2(2.345) stays 2.345.
                Value::Str(s) => decimal::parse_exact(s).map_err(dec_err)?,
                Value::Bool(b) => Decimal::from(u8::from(*b)),
                Value::Int(i) | Value::GoInt(i) => Decimal::from(*i),
                // Compat (spec §14 #48): NaN/±Inf is an error instead of Go's panic.
                Value::Float(f) => decimal::from_f64(*f).map_err(dec_err)?,
                Value::Decimal(d) => *d,
                _ => return Err(invalid(func, args)),
            }))
        }
        F::IntIif | F::FloatIif | F::Decimal2Iif | F::StringIif | F::TimeIif => {
            // Capillaries names all five just `iif` in arity errors.
            arity("iif", 3, args)?;
            let kind_ok = |v: &Value| match func {
                // Strict types (spec §5.7): `1.0` is not an int, a Go int (len) is not int64.
                F::IntIif => matches!(v, Value::Int(_)),
                F::FloatIif => matches!(v, Value::Float(_)),
                F::Decimal2Iif => matches!(v, Value::Decimal(_)),
                F::StringIif => matches!(v, Value::Str(_)),
                _ => matches!(v, Value::Time(_)),
            };
            match &*args[0] {
                Value::Bool(c) if kind_ok(&args[1]) && kind_ok(&args[2]) => {
                    Ok(take(args, if *c { 1 } else { 2 }))
                }
                _ => Err(invalid(func, args)),
            }
        }
        F::MathSqrt | F::MathRound => {
            arity(func.name(), 1, args)?;
            let x = as_f64(&args[0]).ok_or_else(|| invalid(func, args))?;
            // f64::round is half away from zero, like Go math.Round.
            own(Value::Float(if func == F::MathSqrt {
                x.sqrt()
            } else {
                x.round()
            }))
        }
        F::TimeParse => {
            arity(func.name(), 2, args)?;
            match (&*args[0], &*args[1]) {
                (Value::Str(layout), Value::Str(value)) => gotime::parse(layout, value)
                    .map(|t| Val::Own(Value::Time(t)))
                    .map_err(|e| EvalError::Time(Box::new(e))),
                _ => Err(invalid(func, args)),
            }
        }
        F::TimeFormat => {
            arity(func.name(), 2, args)?;
            match (&*args[0], &*args[1]) {
                (Value::Time(t), Value::Str(layout)) => {
                    own(build_str(|s| gotime::format_into(s, t, layout)))
                }
                _ => Err(invalid(func, args)),
            }
        }
        F::TimeDate => {
            arity(func.name(), 8, args)?;
            let int = |v: &Value| match v {
                Value::Int(i) => Some(*i),
                _ => None,
            };
            let parts = (
                int(&args[0]),
                &*args[1],
                int(&args[2]),
                int(&args[3]),
                int(&args[4]),
                int(&args[5]),
                int(&args[6]),
                &*args[7],
            );
            match parts {
                (
                    Some(y),
                    Value::Month(m),
                    Some(d),
                    Some(h),
                    Some(mi),
                    Some(s),
                    Some(ns),
                    Value::Location(zone),
                ) => own(Value::Time(gotime::date(
                    y,
                    i64::from(*m),
                    d,
                    h,
                    mi,
                    s,
                    ns,
                    zone.clone(),
                ))),
                _ => Err(invalid(func, args)),
            }
        }
        F::TimeNow => {
            arity(func.name(), 0, args)?;
            own(Value::Time(gotime::now()))
        }
        F::TimeUnix | F::TimeUnixMilli => {
            arity(func.name(), 1, args)?;
            match &*args[0] {
                Value::Time(t) => own(Value::Int(if func == F::TimeUnix {
                    t.secs
                } else {
                    t.secs
                        .wrapping_mul(1000)
                        .wrapping_add(i64::from(t.nanos / 1_000_000))
                })),
                _ => Err(invalid(func, args)),
            }
        }
        F::TimeDiffMilli => {
            let (a, b) = time_args(func, args)?;
            // Quirk (spec §5.7): saturates at ±292 years through a Go Duration (in gotime).
            own(Value::Int(gotime::diff_milli(a, b)))
        }
        F::TimeBefore | F::TimeAfter => {
            let (a, b) = time_args(func, args)?;
            let ord = (a.secs, a.nanos).cmp(&(b.secs, b.nanos));
            own(Value::Bool(if func == F::TimeBefore {
                ord.is_lt()
            } else {
                ord.is_gt()
            }))
        }
        F::TimeFixedZone => {
            arity(func.name(), 2, args)?;
            match (&*args[0], &*args[1]) {
                // Offset in seconds east of UTC (spec §5.7).
                (Value::Str(name), Value::Int(off)) => {
                    own(Value::Location(Some(gotime::fixed_zone(name, *off))))
                }
                _ => Err(invalid(func, args)),
            }
        }
        F::ReMatchString => {
            arity(func.name(), 2, args)?;
            match (&*args[0], &*args[1]) {
                (Value::Str(p), Value::Str(s)) => {
                    own(Value::Bool(dynamic_regex(p, |re| re.is_match(s))?))
                }
                _ => Err(invalid(func, args)),
            }
        }
        F::StringsReplaceAll => {
            arity(func.name(), 3, args)?;
            match (&*args[0], &*args[1], &*args[2]) {
                (Value::Str(s), Value::Str(old), Value::Str(new)) => {
                    own(build_str(|out| replace_all(out, s, old, new)))
                }
                _ => Err(invalid(func, args)),
            }
        }
        F::FmtSprintf => sprintf(args),
    }
}

/// Go `strings.ReplaceAll`; an empty `old` inserts `new` around every UTF-8 character.
fn replace_all(out: &mut String, s: &str, old: &str, new: &str) {
    if old.is_empty() {
        out.push_str(new);
        for c in s.chars() {
            out.push(c);
            out.push_str(new);
        }
        return;
    }
    let mut last = 0;
    for (i, _) in s.match_indices(old) {
        out.push_str(&s[last..i]);
        out.push_str(new);
        last = i + old.len();
    }
    out.push_str(&s[last..]);
}

/// `fmt.Sprintf(format, a1, …)`: at least one argument besides the format (spec §5.7).
fn sprintf<'a>(args: &mut [Val<'a>]) -> Result<Val<'a>, EvalError> {
    if args.len() < 2 {
        return Err(EvalError::SprintfArity {
            supplied: args.len(),
        });
    }
    let Value::Str(format) = &*args[0] else {
        return Err(invalid(Func::FmtSprintf, args));
    };
    let format = Arc::clone(format);
    let rest = &mut args[1..];
    let mut out = take_buf();
    if rest.len() <= MAX_STACK_ARGS {
        let mut vals: [Value; MAX_STACK_ARGS] = std::array::from_fn(|_| Value::Bool(false));
        for (slot, a) in vals.iter_mut().zip(rest.iter_mut()) {
            *slot = take(std::slice::from_mut(a), 0).into_owned();
        }
        gofmt::sprintf_into(&mut out, &format, &vals[..rest.len()]);
    } else {
        let vals: Vec<Value> = rest
            .iter_mut()
            .map(|a| take(std::slice::from_mut(a), 0).into_owned())
            .collect();
        gofmt::sprintf_into(&mut out, &format, &vals);
    }
    let v = Value::Str(Arc::from(out.as_str()));
    put_buf(out);
    Ok(Val::Own(v))
}

/// `re.MatchString` with a pattern compiled at load.
pub(crate) fn re_match<'a>(
    re: &Result<Regex, EvalError>,
    args: &mut [Val<'a>],
) -> Result<Val<'a>, EvalError> {
    arity(Func::ReMatchString.name(), 2, args)?;
    match (&*args[0], &*args[1]) {
        (Value::Str(_), Value::Str(s)) => match re {
            Ok(re) => Ok(Val::Own(Value::Bool(re.is_match(s)))),
            Err(e) => Err(e.clone()),
        },
        _ => Err(invalid(Func::ReMatchString, args)),
    }
}

thread_local! {
    /// The last pattern compiled for a non-literal `re.MatchString` pattern.
    static LAST_RE: RefCell<Option<(Arc<str>, Regex)>> = const { RefCell::new(None) };
}

fn dynamic_regex<R>(pattern: &Arc<str>, f: impl FnOnce(&Regex) -> R) -> Result<R, EvalError> {
    LAST_RE.with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return regex_go::build(pattern).map(|re| f(&re));
        };
        if let Some((p, re)) = slot.as_ref()
            && **p == **pattern
        {
            return Ok(f(re));
        }
        let re = regex_go::build(pattern)?;
        let r = f(&re);
        *slot = Some((Arc::clone(pattern), re));
        Ok(r)
    })
}
