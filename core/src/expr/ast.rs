//! The expression syntax tree (spec §5.2), its canonical text and the load-time walks over it
//! (field references §5.4, aggregate detection §5.10).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::error::{EvalError, ExprError};
use super::ops::{AggFunc, BinaryOp, UnaryOp};
use crate::value::Value;
use rust_decimal::Decimal;

/// A parsed expression. It serializes as its canonical text and deserializes by parsing it,
/// which keeps plan files readable and avoids deep recursion on long operator chains.
#[derive(Clone, Debug, PartialEq)]
pub struct Ast {
    /// The root node.
    pub root: Expr,
}

/// The Go syntax forms that parse but never evaluate (spec §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnsupportedKind {
    /// `a[i]` or a generic instantiation `f[T]`.
    Index,
    /// `a[i:j]`, `a[i:j:k]`.
    Slice,
    /// `x.(T)`.
    TypeAssert,
    /// `T{…}`.
    CompositeLit,
    /// `key: value` inside a composite literal.
    KeyValue,
    /// `func(…) … {…}`.
    FuncLit,
    /// A type: `[]T`, `[N]T`, `map[K]V`, `chan T`, `func(…)`, `struct{…}`, `interface{…}`.
    Type,
}

/// An expression node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Expr {
    /// Integer literal, source text (`010`, `0x1F`, `1_000` all kept verbatim).
    Int(String),
    /// Float literal, source text.
    Float(String),
    /// Imaginary literal, source text (fails at evaluation).
    Imag(String),
    /// Character literal, source text with quotes (fails at evaluation).
    Char(String),
    /// String literal; `raw` is the source text including its quotes.
    Str {
        /// Source text including the surrounding `"` or `` ` ``.
        raw: String,
        /// True for a back-quoted (raw) string.
        backquoted: bool,
    },
    /// A plain identifier (`true`, `false`; anything else is rejected outside py_calc).
    Ident(String),
    /// `x.sel` with a plain identifier on the left: a field reference or a constant.
    Selector {
        /// Alias or package.
        x: String,
        /// Field or constant name.
        sel: String,
    },
    /// `expr.sel` with anything but an identifier on the left (rejected at load, §5.2).
    BadSelector {
        /// The left side.
        x: Box<Self>,
        /// The selected name.
        sel: String,
    },
    /// `name(args)` or `pkg.name(args)`; `func` is the dotted name. A trailing `...` on the last
    /// argument is accepted and ignored, as Capillaries ignores it.
    Call {
        /// `len`, `time.Parse`, …
        func: String,
        /// The arguments.
        args: Vec<Self>,
    },
    /// A call on something that is not `name` or `pkg.name` (fails at evaluation).
    BadCall {
        /// The called expression.
        fun: Box<Self>,
        /// The arguments.
        args: Vec<Self>,
    },
    /// A unary expression.
    Unary {
        /// The operator.
        op: UnaryOp,
        /// The operand.
        x: Box<Self>,
    },
    /// A binary expression.
    Binary {
        /// The operator.
        op: BinaryOp,
        /// Left operand.
        x: Box<Self>,
        /// Right operand.
        y: Box<Self>,
    },
    /// `(x)`, kept because it matters: `(sum(l.x))` is not a root aggregate (§5.10).
    Paren(Box<Self>),
    /// Any other Go form: kept as source text plus the sub-expressions that the load-time
    /// field-reference walk visits.
    Unsupported {
        /// What it is.
        kind: UnsupportedKind,
        /// The source text.
        text: String,
        /// Sub-expressions (operands, indexes, element values, type names).
        children: Vec<Self>,
    },
}

/// An `alias.field` reference found in an expression.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FieldRef {
    /// `r`, `l`, `p`, `w`, `nrs` (or anything else the script wrote).
    pub alias: String,
    /// The field name.
    pub field: String,
}

impl fmt::Display for FieldRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.alias, self.field)
    }
}

/// The names of the twelve month constants, `time.January` = 1 (Go's month names, as the
/// time layouts spell them).
pub(crate) const MONTHS: [&str; 12] = crate::gotime::LONG_MONTHS;

/// The `wfmodel.*` constants of spec §3.12.
pub(crate) const WFMODEL: [(&str, i64); 9] = [
    ("RunNone", 0),
    ("RunStart", 1),
    ("RunComplete", 2),
    ("RunStop", 3),
    ("NodeBatchNone", 0),
    ("NodeBatchStart", 1),
    ("NodeBatchSuccess", 2),
    ("NodeBatchFail", 3),
    ("NodeBatchRunStopReceived", 104),
];

/// Whether `x.sel` names a Go-side constant rather than a field (spec §5.4, §3.12).
pub(crate) fn is_constant_selector(x: &str, sel: &str) -> bool {
    match x {
        "time" => sel == "UTC" || MONTHS.contains(&sel),
        "wfmodel" => WFMODEL.iter().any(|(n, _)| *n == sel),
        _ => false,
    }
}

impl Expr {
    /// Visits the nodes the Capillaries field-reference harvest visits, in source order: call
    /// arguments but not the called name, selectors but not their parts.
    fn walk_refs<'a>(
        &'a self,
        f: &mut dyn FnMut(&'a Self) -> Result<(), ExprError>,
    ) -> Result<(), ExprError> {
        f(self)?;
        match self {
            Self::Call { args, .. } | Self::BadCall { args, .. } => {
                args.iter().try_for_each(|a| a.walk_refs(f))
            }
            Self::Unary { x, .. } | Self::Paren(x) => x.walk_refs(f),
            Self::Binary { x, y, .. } => {
                x.walk_refs(f)?;
                y.walk_refs(f)
            }
            Self::Unsupported { children, .. } => children.iter().try_for_each(|c| c.walk_refs(f)),
            _ => Ok(()),
        }
    }

    /// Visits every node (pre-order), including called names of bad calls.
    pub(crate) fn walk_all<'a>(&'a self, f: &mut dyn FnMut(&'a Self)) {
        f(self);
        match self {
            Self::Call { args, .. } => args.iter().for_each(|a| a.walk_all(f)),
            Self::BadCall { fun, args } => {
                fun.walk_all(f);
                args.iter().for_each(|a| a.walk_all(f));
            }
            Self::BadSelector { x, .. } | Self::Unary { x, .. } | Self::Paren(x) => x.walk_all(f),
            Self::Binary { x, y, .. } => {
                x.walk_all(f);
                y.walk_all(f);
            }
            Self::Unsupported { children, .. } => children.iter().for_each(|c| c.walk_all(f)),
            _ => {}
        }
    }

    /// The aggregate function this node calls directly, if any.
    pub fn as_aggregate(&self) -> Option<AggFunc> {
        match self {
            Self::Call { func, .. } => AggFunc::from_name(func),
            _ => None,
        }
    }

    /// The first character of the canonical text (to keep `- -x` from printing as `--x`),
    /// found without formatting the whole subtree.
    fn first_char(&self) -> Option<char> {
        match self {
            Self::Int(s) | Self::Float(s) | Self::Imag(s) | Self::Char(s) | Self::Ident(s) => {
                s.chars().next()
            }
            Self::Str { raw, .. } => raw.chars().next(),
            Self::Selector { x, .. } => x.chars().next(),
            Self::Call { func, .. } => func.chars().next(),
            Self::Unsupported { text, .. } => text.chars().next(),
            Self::BadSelector { x, .. } | Self::BadCall { fun: x, .. } | Self::Binary { x, .. } => {
                x.first_char()
            }
            Self::Unary { op, .. } => op.text().chars().next(),
            Self::Paren(_) => Some('('),
        }
    }
}

impl Ast {
    /// The `alias.field` references, deduplicated in order of first appearance (spec §5.4).
    ///
    /// Errors like Capillaries' harvest: a selector whose left side is not an identifier, and
    /// (unless `relaxed`, used for py_calc) any plain identifier other than `true`/`false`.
    pub fn field_refs(&self, relaxed: bool) -> Result<Vec<FieldRef>, ExprError> {
        let mut refs: Vec<FieldRef> = Vec::new();
        self.root.walk_refs(&mut |e| {
            match e {
                Expr::Selector { x, sel }
                    if !is_constant_selector(x, sel)
                        && !refs.iter().any(|r| r.alias == *x && r.field == *sel) =>
                {
                    refs.push(FieldRef {
                        alias: x.clone(),
                        field: sel.clone(),
                    });
                }
                Expr::BadSelector { .. } => {
                    return Err(ExprError::NonIdentSelector {
                        expr: e.to_string(),
                    });
                }
                Expr::Ident(name) if !relaxed && name != "true" && name != "false" => {
                    return Err(ExprError::PlainIdent { name: name.clone() });
                }
                _ => {}
            }
            Ok(())
        })?;
        Ok(refs)
    }

    /// The aggregate function when the root node is a direct aggregate call (spec §5.10).
    pub fn root_aggregate(&self) -> Option<AggFunc> {
        self.root.as_aggregate()
    }

    /// Whether an aggregate call appears anywhere in the expression.
    pub fn contains_aggregate(&self) -> bool {
        let mut found = false;
        self.root
            .walk_all(&mut |e| found |= e.as_aggregate().is_some());
        found
    }
}

fn write_list(f: &mut fmt::Formatter<'_>, args: &[Expr]) -> fmt::Result {
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{a}")?;
    }
    Ok(())
}

impl fmt::Display for Expr {
    /// Canonical Go text: binary operators surrounded by single spaces, calls as `f(a, b)`,
    /// literals and unsupported forms verbatim. Parsing it yields the same tree.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Int(s) | Self::Float(s) | Self::Imag(s) | Self::Char(s) | Self::Ident(s) => {
                f.write_str(s)
            }
            Self::Str { raw, .. } => f.write_str(raw),
            Self::Selector { x, sel } => write!(f, "{x}.{sel}"),
            // `1 .x`, not `1.x` (which would scan as the float `1.`).
            Self::BadSelector { x, sel } if matches!(**x, Self::Int(_)) => write!(f, "{x} .{sel}"),
            Self::BadSelector { x, sel } => write!(f, "{x}.{sel}"),
            Self::Call { func, args } => {
                write!(f, "{func}(")?;
                write_list(f, args)?;
                f.write_str(")")
            }
            Self::BadCall { fun, args } => {
                write!(f, "{fun}(")?;
                write_list(f, args)?;
                f.write_str(")")
            }
            Self::Unary { op, x } => {
                let clash: &[char] = match op {
                    UnaryOp::Neg | UnaryOp::Recv => &['-'],
                    UnaryOp::Plus => &['+'],
                    UnaryOp::Addr => &['&', '^'],
                    _ => &[],
                };
                if x.first_char().is_some_and(|c| clash.contains(&c)) {
                    write!(f, "{} {x}", op.text())
                } else {
                    write!(f, "{}{x}", op.text())
                }
            }
            Self::Binary { op, x, y } => write!(f, "{x} {} {y}", op.text()),
            Self::Paren(x) => write!(f, "({x})"),
            Self::Unsupported { text, .. } => f.write_str(text),
        }
    }
}

impl Serialize for Ast {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl fmt::Display for Ast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.root.fmt(f)
    }
}

/// The value of an integer literal: base-10 int64, else an exact decimal (spec §5.3).
pub(crate) fn int_literal(text: &str) -> Result<Value, EvalError> {
    // Quirk (spec §5.3): base-10 parsing, so `010` is 10 and `0x1F` fails.
    if let Ok(i) = text.parse::<i64>() {
        return Ok(Value::Int(i));
    }
    // Decision: a literal beyond rust_decimal's range (~7.9e28) is an evaluation error; Go's
    // decimals are unbounded.
    if !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && let Ok(d) = Decimal::from_str_exact(text)
    {
        return Ok(Value::Decimal(d));
    }
    Err(EvalError::BadLiteral {
        kind: "INT",
        text: text.into(),
    })
}
