//! Per-row evaluation of a [`Compiled`] tree and the operator semantics of spec §5.5–5.6.

use std::cmp::Ordering;
use std::sync::Arc;

use rust_decimal::Decimal;

use super::error::EvalError;
use super::funcs;
use super::ops::{BinaryOp, UnaryOp};
use super::prepare::{Compiled, Node, Rounding};
use super::scope::Vars;
use super::val::{Ctx, MAX_STACK_ARGS, Val, build_str, describe, put_buf, take_buf};
use crate::decimal::{round_half_away, round2, to_f64};
use crate::value::Value;

impl Compiled {
    /// Evaluates the expression for one row (plain mode: aggregates fail, spec §5.10).
    pub fn eval(&self, vars: &Vars<'_>, rounding: Rounding) -> Result<Value, EvalError> {
        let ctx = Ctx {
            rounding,
            agg: None,
        };
        // Root operators produce their value directly (no `Val` wrapping and unwrapping).
        match &self.root {
            Node::Fast { fast, .. } => {
                if let Some(v) = fast.eval(vars) {
                    return Ok(v);
                }
            }
            Node::Binary { op, x, y } => {
                let a = self.operand(x, vars, ctx)?;
                let b = self.operand(y, vars, ctx)?;
                return apply(*op, &a, &b, rounding);
            }
            _ => {}
        }
        self.ev(&self.root, vars, ctx).map(Val::into_owned)
    }

    /// Evaluates a bool expression (having, filter, criteria, dependency rules); any other
    /// result is an [`EvalError::NotBool`].
    pub fn eval_bool(&self, vars: &Vars<'_>, rounding: Rounding) -> Result<bool, EvalError> {
        let ctx = Ctx {
            rounding,
            agg: None,
        };
        match &*self.ev(&self.root, vars, ctx)? {
            Value::Bool(b) => Ok(*b),
            other => Err(EvalError::NotBool {
                got: describe(other),
            }),
        }
    }

    /// Evaluates `args` left to right (all of them, before any function logic) and runs `f`.
    #[inline]
    pub(crate) fn with_args<'a, R>(
        &'a self,
        args: &'a [Node],
        vars: &Vars<'a>,
        ctx: Ctx,
        f: impl FnOnce(&mut [Val<'a>]) -> Result<R, EvalError>,
    ) -> Result<R, EvalError> {
        if args.len() <= MAX_STACK_ARGS {
            let mut buf: [Val<'a>; MAX_STACK_ARGS] =
                std::array::from_fn(|_| Val::Own(Value::Bool(false)));
            for (slot, a) in buf.iter_mut().zip(args) {
                *slot = self.ev(a, vars, ctx)?;
            }
            f(&mut buf[..args.len()])
        } else {
            let mut v = Vec::with_capacity(args.len());
            for a in args {
                v.push(self.ev(a, vars, ctx)?);
            }
            f(&mut v)
        }
    }

    /// An operand: constants and fields without a call (the common leaves), else [`Self::ev`].
    #[inline(always)]
    fn operand<'a>(
        &'a self,
        node: &'a Node,
        vars: &Vars<'a>,
        ctx: Ctx,
    ) -> Result<Val<'a>, EvalError> {
        match node {
            Node::Const(v) => Ok(Val::Ref(v)),
            Node::Field { alias, idx, name } => match vars.slot(*alias, *idx) {
                Some(v) => Ok(Val::Ref(v)),
                None => Err(self.missing(*name)),
            },
            _ => self.ev(node, vars, ctx),
        }
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn missing(&self, name: u32) -> EvalError {
        EvalError::VariableNotSupplied {
            name: self
                .refs
                .get(name as usize)
                .map_or_else(|| "?".into(), |r| r.to_string().into()),
        }
    }

    /// Evaluates a node. Kept small (operators only) so that its stack frame stays small;
    /// calls go through [`Self::ev_call`].
    pub(crate) fn ev<'a>(
        &'a self,
        node: &'a Node,
        vars: &Vars<'a>,
        ctx: Ctx,
    ) -> Result<Val<'a>, EvalError> {
        match node {
            Node::Const(v) => Ok(Val::Ref(v)),
            Node::Field { alias, idx, name } => match vars.slot(*alias, *idx) {
                Some(v) => Ok(Val::Ref(v)),
                None => Err(self.missing(*name)),
            },
            Node::Binary { op, x, y } => {
                let a = self.operand(x, vars, ctx)?;
                let b = self.operand(y, vars, ctx)?;
                apply(*op, &a, &b, ctx.rounding).map(Val::Own)
            }
            Node::Chain { first, rest } => self.chain(first, rest, vars, ctx),
            Node::Fast { fast, generic } => match fast.eval(vars) {
                Some(v) => Ok(Val::Own(v)),
                None => self.ev(generic, vars, ctx),
            },
            Node::Unary { op, x } => {
                if !matches!(op, UnaryOp::Not | UnaryOp::Neg) {
                    return Err(EvalError::UnknownUnaryOp { op: *op });
                }
                let v = self.operand(x, vars, ctx)?;
                unary(*op, &v).map(Val::Own)
            }
            _ => self.ev_call(node, vars, ctx),
        }
    }

    /// Calls, aggregates and failing nodes.
    #[inline(never)]
    fn ev_call<'a>(
        &'a self,
        node: &'a Node,
        vars: &Vars<'a>,
        ctx: Ctx,
    ) -> Result<Val<'a>, EvalError> {
        match node {
            Node::Call { func, args } => {
                self.with_args(args, vars, ctx, |a| funcs::call(*func, a, ctx))
            }
            Node::Regex { re, args } => self.with_args(args, vars, ctx, |a| funcs::re_match(re, a)),
            Node::Agg { func, args, .. } => self.with_args(args, vars, ctx, |_| {
                Err(match ctx.agg {
                    None => EvalError::AggNotEnabled { func: *func },
                    // The root aggregate is evaluated by the accumulator, so this is another one.
                    Some(root) => EvalError::MoreThanOneAgg {
                        extra: root,
                        first: *func,
                    },
                })
            }),
            Node::Fail(e) => Err(e.clone()),
            Node::FailAfter { err, args } => self.with_args(args, vars, ctx, |_| Err(err.clone())),
            other => self.ev(other, vars, ctx),
        }
    }

    fn chain<'a>(
        &'a self,
        first: &'a Node,
        rest: &'a [(BinaryOp, Node)],
        vars: &Vars<'a>,
        ctx: Ctx,
    ) -> Result<Val<'a>, EvalError> {
        let mut acc = self.operand(first, vars, ctx)?;
        let mut buf: Option<String> = None;
        for (op, n) in rest {
            let v = self.operand(n, vars, ctx)?;
            if let Some(s) = buf.as_mut() {
                if let (Value::Str(t), BinaryOp::Add) = (&*v, op) {
                    s.push_str(t);
                    continue;
                }
                // The concatenation run ended: materialise it and go on with the operator.
                let left = Value::Str(Arc::from(s.as_str()));
                if let Some(s) = buf.take() {
                    put_buf(s);
                }
                acc = Val::Own(binary(*op, &left, &v, ctx.rounding)?);
                continue;
            }
            if let (Value::Str(a), Value::Str(b), BinaryOp::Add) = (&*acc, &*v, op) {
                let mut s = take_buf();
                s.push_str(a);
                s.push_str(b);
                buf = Some(s);
                continue;
            }
            acc = Val::Own(apply(*op, &acc, &v, ctx.rounding)?);
        }
        Ok(match buf {
            Some(s) => {
                let v = Value::Str(Arc::from(s.as_str()));
                put_buf(s);
                Val::Own(v)
            }
            None => acc,
        })
    }
}

/// A number operand after Go int → int64 normalisation.
#[derive(Clone, Copy)]
enum Num {
    I(i64),
    F(f64),
    D(Decimal),
}

#[inline]
fn num(v: &Value) -> Option<Num> {
    match v {
        Value::Int(i) | Value::GoInt(i) => Some(Num::I(*i)),
        Value::Float(f) => Some(Num::F(*f)),
        Value::Decimal(d) => Some(Num::D(*d)),
        _ => None,
    }
}

/// Both operands in their common type: float > decimal > int64 (spec §5.5).
enum Pair {
    I(i64, i64),
    F(f64, f64),
    D(Decimal, Decimal),
}

#[inline]
fn promote(a: Num, b: Num) -> Pair {
    fn f(n: Num) -> f64 {
        match n {
            Num::I(i) => i as f64,
            Num::F(f) => f,
            Num::D(d) => to_f64(&d),
        }
    }
    fn d(n: Num) -> Decimal {
        match n {
            Num::I(i) => Decimal::from(i),
            Num::D(d) => d,
            // Not reached: floats win over decimals.
            Num::F(_) => Decimal::ZERO,
        }
    }
    match (a, b) {
        (Num::I(x), Num::I(y)) => Pair::I(x, y),
        (Num::F(_), _) | (_, Num::F(_)) => Pair::F(f(a), f(b)),
        _ => Pair::D(d(a), d(b)),
    }
}

/// Applies a binary operator, with the int64 and bool cases inline.
#[inline(always)]
fn apply(op: BinaryOp, a: &Value, b: &Value, rounding: Rounding) -> Result<Value, EvalError> {
    use BinaryOp as B;
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => {
            let (x, y) = (*x, *y);
            match op {
                B::Add => return Ok(Value::Int(x.wrapping_add(y))),
                B::Sub => return Ok(Value::Int(x.wrapping_sub(y))),
                B::Mul => return Ok(Value::Int(x.wrapping_mul(y))),
                B::Eql => return Ok(Value::Bool(x == y)),
                B::Neq => return Ok(Value::Bool(x != y)),
                B::Lss => return Ok(Value::Bool(x < y)),
                B::Leq => return Ok(Value::Bool(x <= y)),
                B::Gtr => return Ok(Value::Bool(x > y)),
                B::Geq => return Ok(Value::Bool(x >= y)),
                _ => {}
            }
        }
        (Value::Bool(x), Value::Bool(y)) => match op {
            B::LAnd => return Ok(Value::Bool(*x && *y)),
            B::LOr => return Ok(Value::Bool(*x || *y)),
            _ => {}
        },
        (Value::Decimal(x), Value::Decimal(y)) if matches!(op, B::Add | B::Sub) => {
            let r = if op == B::Add {
                x.checked_add(*y)
            } else {
                x.checked_sub(*y)
            };
            if let Some(r) = r {
                // Rounding a value with at most 2 fraction digits changes nothing.
                return Ok(Value::Decimal(
                    if rounding == Rounding::To2 && r.scale() > 2 {
                        round2(r)
                    } else {
                        r
                    },
                ));
            }
        }
        _ => {}
    }
    binary(op, a, b, rounding)
}

/// Applies a binary operator to evaluated operands.
#[inline(never)]
pub(crate) fn binary(
    op: BinaryOp,
    a: &Value,
    b: &Value,
    rounding: Rounding,
) -> Result<Value, EvalError> {
    use BinaryOp as B;
    match op {
        B::Add | B::Sub | B::Mul | B::Quo | B::Rem => arith(op, a, b, rounding),
        B::Eql | B::Neq | B::Lss | B::Leq | B::Gtr | B::Geq => compare(op, a, b).map(Value::Bool),
        B::LAnd | B::LOr => match (a, b) {
            (Value::Bool(x), Value::Bool(y)) => {
                Ok(Value::Bool(if op == B::LAnd { *x && *y } else { *x || *y }))
            }
            _ => Err(EvalError::Logic {
                op,
                left: describe(a),
                right: describe(b),
            }),
        },
        B::And | B::Or | B::Xor | B::Shl | B::Shr | B::AndNot => {
            Err(EvalError::UnknownBinaryOp { op })
        }
    }
}

#[inline]
fn int_op(op: BinaryOp, x: i64, y: i64) -> Result<Value, EvalError> {
    // Go int64 semantics: wrap-around, truncating division, MinInt64 / -1 == MinInt64.
    Ok(Value::Int(match op {
        BinaryOp::Add => x.wrapping_add(y),
        BinaryOp::Sub => x.wrapping_sub(y),
        BinaryOp::Mul => x.wrapping_mul(y),
        BinaryOp::Quo => {
            if y == 0 {
                return Err(EvalError::IntegerDivideByZero);
            }
            x.wrapping_div(y)
        }
        _ => {
            if y == 0 {
                return Err(EvalError::IntegerDivideByZero);
            }
            x.wrapping_rem(y)
        }
    }))
}

/// Decimal `/`: 16 fraction digits, half away from zero (shopspring `Div`).
pub(crate) fn dec_div(x: Decimal, y: Decimal) -> Result<Decimal, EvalError> {
    if y.is_zero() {
        return Err(EvalError::DecimalDivisionByZero);
    }
    x.checked_div(y)
        .map(|q| round_half_away(q, 16))
        .ok_or(EvalError::DecimalOverflow { op: "/" })
}

fn arith(op: BinaryOp, a: &Value, b: &Value, rounding: Rounding) -> Result<Value, EvalError> {
    let incompatible = || EvalError::Arith {
        op,
        left: describe(a),
        right: describe(b),
    };
    if let Value::Str(x) = a {
        return match (op, b) {
            (BinaryOp::Add, Value::Str(y)) => Ok(build_str(|s| {
                s.push_str(x);
                s.push_str(y);
            })),
            _ => Err(incompatible()),
        };
    }
    let (Some(x), Some(y)) = (num(a), num(b)) else {
        return Err(incompatible());
    };
    match promote(x, y) {
        Pair::I(x, y) => int_op(op, x, y),
        Pair::F(x, y) => Ok(Value::Float(match op {
            BinaryOp::Add => x + y,
            BinaryOp::Sub => x - y,
            BinaryOp::Mul => x * y,
            BinaryOp::Quo => x / y,
            _ => {
                return Err(EvalError::ArithNotSupported { op, ty: "float64" });
            }
        })),
        Pair::D(x, y) => {
            let r = match op {
                BinaryOp::Add => x
                    .checked_add(y)
                    .ok_or(EvalError::DecimalOverflow { op: "+" })?,
                BinaryOp::Sub => x
                    .checked_sub(y)
                    .ok_or(EvalError::DecimalOverflow { op: "-" })?,
                BinaryOp::Mul => x
                    .checked_mul(y)
                    .ok_or(EvalError::DecimalOverflow { op: "*" })?,
                BinaryOp::Quo => dec_div(x, y)?,
                _ => {
                    return Err(EvalError::ArithNotSupported {
                        op,
                        ty: "decimal.Decimal",
                    });
                }
            };
            Ok(Value::Decimal(match rounding {
                Rounding::None => r,
                Rounding::To2 => round2(r),
            }))
        }
    }
}

#[inline]
fn ordering_result(op: BinaryOp, o: Option<Ordering>) -> bool {
    // `None` only for NaN: every comparison but `!=` is false, as in Go.
    match (op, o) {
        (BinaryOp::Neq, None) => true,
        (_, None) => false,
        (BinaryOp::Eql, Some(o)) => o == Ordering::Equal,
        (BinaryOp::Neq, Some(o)) => o != Ordering::Equal,
        (BinaryOp::Lss, Some(o)) => o == Ordering::Less,
        (BinaryOp::Leq, Some(o)) => o != Ordering::Greater,
        (BinaryOp::Gtr, Some(o)) => o == Ordering::Greater,
        (_, Some(o)) => o != Ordering::Less,
    }
}

/// Quirk (spec §5.5): strings compare after stripping surrounding `"` from both sides, then
/// replacing `\"` by `\` on the left and by `"` on the right.
fn quirk_string_cmp(a: &str, b: &str) -> Ordering {
    let a = a.trim_matches('"');
    let b = b.trim_matches('"');
    if !a.contains("\\\"") && !b.contains("\\\"") {
        return a.as_bytes().cmp(b.as_bytes());
    }
    let a = a.replace("\\\"", "\\");
    let b = b.replace("\\\"", "\"");
    a.as_bytes().cmp(b.as_bytes())
}

/// A comparison, dispatched on the left operand's type (spec §5.5).
#[inline]
pub(crate) fn compare(op: BinaryOp, a: &Value, b: &Value) -> Result<bool, EvalError> {
    let invalid_right = || EvalError::CompInvalidRight {
        op,
        left: describe(a),
        right: describe(b),
    };
    match a {
        Value::Int(x) | Value::GoInt(x) => {
            if let Value::Int(y) | Value::GoInt(y) = b {
                return Ok(ordering_result(op, Some(x.cmp(y))));
            }
        }
        Value::Str(x) => {
            return match b {
                Value::Str(y) => Ok(ordering_result(op, Some(quirk_string_cmp(x, y)))),
                _ => Err(invalid_right()),
            };
        }
        Value::Bool(x) => {
            return match b {
                Value::Bool(y) => match op {
                    BinaryOp::Eql => Ok(x == y),
                    BinaryOp::Neq => Ok(x != y),
                    _ => Err(EvalError::CompNotSupported { op, ty: "bool" }),
                },
                _ => Err(invalid_right()),
            };
        }
        Value::Time(x) => {
            return match b {
                Value::Time(y) => Ok(ordering_result(
                    op,
                    Some((x.secs, x.nanos).cmp(&(y.secs, y.nanos))),
                )),
                _ => Err(invalid_right()),
            };
        }
        Value::Month(_) | Value::Location(_) => {
            return Err(EvalError::CompNotSupported {
                op,
                ty: a.go_type_name(),
            });
        }
        Value::Float(_) | Value::Decimal(_) => {}
    }
    let (Some(x), Some(y)) = (num(a), num(b)) else {
        return Err(EvalError::CompIncompatible {
            op,
            left: describe(a),
            right: describe(b),
        });
    };
    Ok(match promote(x, y) {
        Pair::I(x, y) => ordering_result(op, Some(x.cmp(&y))),
        Pair::F(x, y) => ordering_result(op, x.partial_cmp(&y)),
        Pair::D(x, y) => ordering_result(op, Some(x.cmp(&y))),
    })
}

/// `!x` and `-x` (spec §5.5); a Go int becomes int64, a negated decimal is not rounded.
fn unary(op: UnaryOp, v: &Value) -> Result<Value, EvalError> {
    match (op, v) {
        (UnaryOp::Not, Value::Bool(b)) => Ok(Value::Bool(!b)),
        (UnaryOp::Neg, Value::Int(i) | Value::GoInt(i)) => Ok(Value::Int(i.wrapping_neg())),
        (UnaryOp::Neg, Value::Float(f)) => Ok(Value::Float(-f)),
        (UnaryOp::Neg, Value::Decimal(d)) => Ok(Value::Decimal(-*d)),
        _ => Err(EvalError::UnaryArg {
            op,
            arg: describe(v),
        }),
    }
}
