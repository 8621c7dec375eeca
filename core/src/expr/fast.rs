//! A statically typed fast path for the int64/bool core of expressions (`r.a*3+r.b-7`,
//! `r.a > 5 && r.b < 10`): no `Value` enums moved around, no error paths.
//!
//! Only built for subtrees whose types are certain from the [`Scope`] (fields declared `int`
//! or `bool`, int64 literals, `true`/`false`) and whose operators cannot fail (`+ - *` wrap,
//! comparisons, `&&`, `||`, `!`; both sides of `&&`/`||` are pure, so evaluating both like
//! Capillaries is the same as any order). If a row value does not have its declared type, or
//! is missing, evaluation falls back to the generic tree, which then behaves exactly as
//! without this path.

use super::ast::{Expr, int_literal};
use super::ops::{BinaryOp, UnaryOp};
use super::scope::{Scope, Vars};
use crate::value::{Type, Value};

/// A typed node.
#[derive(Clone, Debug)]
pub(crate) enum Fast {
    Int(i64),
    Bool(bool),
    IntField {
        alias: u8,
        idx: u32,
    },
    BoolField {
        alias: u8,
        idx: u32,
    },
    /// `+ - *` on ints, and the int comparisons.
    IntOp {
        op: BinaryOp,
        x: Box<Self>,
        y: Box<Self>,
    },
    /// `&&`, `||`, `==`, `!=` on bools.
    BoolOp {
        op: BinaryOp,
        x: Box<Self>,
        y: Box<Self>,
    },
    Not(Box<Self>),
}

/// Static type of a fast node.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ty {
    I,
    B,
}

impl Fast {
    fn ty(&self) -> Ty {
        match self {
            Self::Int(_) | Self::IntField { .. } => Ty::I,
            Self::IntOp {
                op: BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul,
                ..
            } => Ty::I,
            _ => Ty::B,
        }
    }

    /// Builds the fast form of `e`, or `None` when any part is outside the fast subset.
    pub(crate) fn build(e: &Expr, scope: &Scope) -> Option<Self> {
        Some(match e {
            Expr::Int(t) => match int_literal(t) {
                Ok(Value::Int(i)) => Self::Int(i),
                _ => return None,
            },
            Expr::Ident(n) if n == "true" => Self::Bool(true),
            Expr::Ident(n) if n == "false" => Self::Bool(false),
            Expr::Selector { x, sel } => {
                if super::ast::is_constant_selector(x, sel) {
                    return None;
                }
                let (alias, idx, ty) = scope.resolve(x, sel).ok()?;
                let (alias, idx) = (alias as u8, u32::try_from(idx).ok()?);
                match ty {
                    Type::Int => Self::IntField { alias, idx },
                    Type::Bool => Self::BoolField { alias, idx },
                    _ => return None,
                }
            }
            Expr::Paren(x) => Self::build(x, scope)?,
            Expr::Unary {
                op: UnaryOp::Not,
                x,
            } => {
                let x = Self::build(x, scope)?;
                if x.ty() != Ty::B {
                    return None;
                }
                Self::Not(Box::new(x))
            }
            Expr::Binary { op, x, y } => {
                let x = Self::build(x, scope)?;
                let y = Self::build(y, scope)?;
                use BinaryOp as B;
                match (x.ty(), y.ty(), op) {
                    (
                        Ty::I,
                        Ty::I,
                        B::Add
                        | B::Sub
                        | B::Mul
                        | B::Eql
                        | B::Neq
                        | B::Lss
                        | B::Leq
                        | B::Gtr
                        | B::Geq,
                    ) => Self::IntOp {
                        op: *op,
                        x: Box::new(x),
                        y: Box::new(y),
                    },
                    (Ty::B, Ty::B, B::LAnd | B::LOr | B::Eql | B::Neq) => Self::BoolOp {
                        op: *op,
                        x: Box::new(x),
                        y: Box::new(y),
                    },
                    _ => return None,
                }
            }
            _ => return None,
        })
    }

    /// Whether the node is worth it (an operator, not a lone leaf).
    pub(crate) fn is_operator(&self) -> bool {
        matches!(
            self,
            Self::IntOp { .. } | Self::BoolOp { .. } | Self::Not(_)
        )
    }

    #[inline]
    fn int(&self, vars: &Vars<'_>) -> Option<i64> {
        match self {
            Self::Int(i) => Some(*i),
            Self::IntField { alias, idx } => match vars.slot(*alias, *idx) {
                Some(Value::Int(i)) => Some(*i),
                _ => None,
            },
            Self::IntOp { op, x, y } => {
                let (a, b) = (x.int(vars)?, y.int(vars)?);
                Some(match op {
                    BinaryOp::Add => a.wrapping_add(b),
                    BinaryOp::Sub => a.wrapping_sub(b),
                    _ => a.wrapping_mul(b),
                })
            }
            _ => None,
        }
    }

    #[inline]
    fn bool(&self, vars: &Vars<'_>) -> Option<bool> {
        match self {
            Self::Bool(b) => Some(*b),
            Self::BoolField { alias, idx } => match vars.slot(*alias, *idx) {
                Some(Value::Bool(b)) => Some(*b),
                _ => None,
            },
            Self::Not(x) => Some(!x.bool(vars)?),
            Self::BoolOp { op, x, y } => {
                let (a, b) = (x.bool(vars)?, y.bool(vars)?);
                Some(match op {
                    BinaryOp::LAnd => a && b,
                    BinaryOp::LOr => a || b,
                    BinaryOp::Eql => a == b,
                    _ => a != b,
                })
            }
            Self::IntOp { op, x, y } => {
                let (a, b) = (x.int(vars)?, y.int(vars)?);
                Some(match op {
                    BinaryOp::Eql => a == b,
                    BinaryOp::Neq => a != b,
                    BinaryOp::Lss => a < b,
                    BinaryOp::Leq => a <= b,
                    BinaryOp::Gtr => a > b,
                    _ => a >= b,
                })
            }
            _ => None,
        }
    }

    /// The value, or `None` to fall back to the generic tree.
    #[inline]
    pub(crate) fn eval(&self, vars: &Vars<'_>) -> Option<Value> {
        match self.ty() {
            Ty::I => self.int(vars).map(Value::Int),
            Ty::B => self.bool(vars).map(Value::Bool),
        }
    }
}
