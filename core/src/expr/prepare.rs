//! Preparing an [`Ast`] for a [`Scope`] ([`prepare`]): field references resolved to slots,
//! function names to ids, literals to values and literal regexes built, once per plan (spec §5).

use std::sync::Arc;

use regex::Regex;

use super::ast::{Ast, Expr, FieldRef, MONTHS, WFMODEL, int_literal};
use super::error::{EvalError, ExprError};
use super::fast::Fast;
use super::ops::{AggFunc, BinaryOp, UnaryOp};
use super::scope::{Alias, Scope};
use super::val::{Ctx, Val};
use super::{funcs, regex_go};
use crate::value::Value;

/// Whether decimal arithmetic results are rounded to 2 places after every operation (§5.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rounding {
    /// No intermediate rounding (having, filter, criteria, dependency rules, grouped
    /// non-aggregate fields).
    None,
    /// Round half away from zero to 2 places after every decimal `+ - * /` (writer fields and
    /// columns, aggregate fields).
    To2,
}

/// A library function, resolved by name at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Func {
    Len,
    String,
    Int,
    Float,
    Decimal2,
    IntIif,
    FloatIif,
    Decimal2Iif,
    StringIif,
    TimeIif,
    MathSqrt,
    MathRound,
    TimeParse,
    TimeFormat,
    TimeDate,
    TimeNow,
    TimeUnix,
    TimeUnixMilli,
    TimeDiffMilli,
    TimeBefore,
    TimeAfter,
    TimeFixedZone,
    ReMatchString,
    StringsReplaceAll,
    FmtSprintf,
}

impl Func {
    const ALL: [Self; 25] = [
        Self::Len,
        Self::String,
        Self::Int,
        Self::Float,
        Self::Decimal2,
        Self::IntIif,
        Self::FloatIif,
        Self::Decimal2Iif,
        Self::StringIif,
        Self::TimeIif,
        Self::MathSqrt,
        Self::MathRound,
        Self::TimeParse,
        Self::TimeFormat,
        Self::TimeDate,
        Self::TimeNow,
        Self::TimeUnix,
        Self::TimeUnixMilli,
        Self::TimeDiffMilli,
        Self::TimeBefore,
        Self::TimeAfter,
        Self::TimeFixedZone,
        Self::ReMatchString,
        Self::StringsReplaceAll,
        Self::FmtSprintf,
    ];

    /// The name scripts call it by.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Len => "len",
            Self::String => "string",
            Self::Int => "int",
            Self::Float => "float",
            Self::Decimal2 => "decimal2",
            Self::IntIif => "int.iif",
            Self::FloatIif => "float.iif",
            Self::Decimal2Iif => "decimal2.iif",
            Self::StringIif => "string.iif",
            Self::TimeIif => "time.iif",
            Self::MathSqrt => "math.Sqrt",
            Self::MathRound => "math.Round",
            Self::TimeParse => "time.Parse",
            Self::TimeFormat => "time.Format",
            Self::TimeDate => "time.Date",
            Self::TimeNow => "time.Now",
            Self::TimeUnix => "time.Unix",
            Self::TimeUnixMilli => "time.UnixMilli",
            Self::TimeDiffMilli => "time.DiffMilli",
            Self::TimeBefore => "time.Before",
            Self::TimeAfter => "time.After",
            Self::TimeFixedZone => "time.FixedZone",
            Self::ReMatchString => "re.MatchString",
            Self::StringsReplaceAll => "strings.ReplaceAll",
            Self::FmtSprintf => "fmt.Sprintf",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }
}

/// A compiled node: the tree evaluated per row.
#[derive(Clone, Debug)]
pub(crate) enum Node {
    /// A literal or constant.
    Const(Value),
    /// A field slot; `name` indexes [`Compiled::refs`] for error messages.
    Field {
        alias: u8,
        idx: u32,
        name: u32,
    },
    /// Fails without evaluating anything (unsupported syntax, bad literal).
    Fail(EvalError),
    /// Evaluates `args`, then fails (unknown function, call on a non-identifier).
    FailAfter {
        err: EvalError,
        args: Box<[Self]>,
    },
    Unary {
        op: UnaryOp,
        x: Box<Self>,
    },
    Binary {
        op: BinaryOp,
        x: Box<Self>,
        y: Box<Self>,
    },
    /// The left spine of nested binary nodes (`a * b + c - d` is `a`, then `* b`, `+ c`, `- d`),
    /// evaluated left to right exactly like the nested nodes it replaces, without recursion and
    /// building string concatenations in one buffer.
    Chain {
        first: Box<Self>,
        rest: Box<[(BinaryOp, Self)]>,
    },
    Call {
        func: Func,
        args: Box<[Self]>,
    },
    /// `re.MatchString` with a literal pattern, compiled (or failed) once.
    Regex {
        re: Result<Regex, EvalError>,
        args: Box<[Self]>,
    },
    /// A statically typed int/bool subtree, with the generic tree as fallback.
    Fast {
        fast: Fast,
        generic: Box<Self>,
    },
    /// An aggregate call; `sep` is the `string_agg` separator when it is a string literal.
    Agg {
        func: AggFunc,
        args: Box<[Self]>,
        sep: Option<Arc<str>>,
    },
}

/// An expression compiled for one [`Scope`], ready to evaluate per row.
#[derive(Clone, Debug)]
pub struct Compiled {
    pub(crate) root: Node,
    pub(crate) refs: Vec<FieldRef>,
    /// The aggregate when the AST root is a direct aggregate call (`(sum(x))` is not one).
    root_agg: Option<AggFunc>,
    text: String,
}

impl Compiled {
    /// The fields the expression reads, in order of first appearance.
    pub fn field_refs(&self) -> &[FieldRef] {
        &self.refs
    }

    /// The root aggregate function, if the expression is one (spec §5.10).
    pub fn root_aggregate(&self) -> Option<AggFunc> {
        self.root_agg
    }

    /// The canonical text of the source expression.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The alias and slot of the one field the expression is, when it is nothing else
    /// (`r.x`): its value is that field's unchanged, so a writer may copy the field's
    /// stored cell instead of evaluating it.
    pub fn bare_field(&self) -> Option<(Alias, usize)> {
        field_slot(&self.root)
    }

    /// The argument of a root aggregate that reads one field and nothing else: `Some(None)`
    /// for `count()`, `Some(Some(field))` for `sum(l.x)`, `min(l.x)`, … and
    /// `string_agg(l.x, ",")` (its separator a literal): an accumulator may then be fed the
    /// field's stored cell ([`super::Accumulator::update_cell`]). `None` for any other shape.
    pub fn aggregate_field(&self) -> Option<Option<(Alias, usize)>> {
        let Node::Agg { func, args, sep } = &self.root else {
            return None;
        };
        if self.root_aggregate() != Some(*func) {
            return None;
        }
        match (&**args, func) {
            ([], AggFunc::Count) => Some(None),
            ([x], AggFunc::Sum | AggFunc::Avg | AggFunc::Min | AggFunc::Max) => {
                Some(Some(field_slot(x)?))
            }
            ([x, Node::Const(_)], AggFunc::StringAgg) if sep.is_some() => {
                Some(Some(field_slot(x)?))
            }
            _ => None,
        }
    }
}

/// The alias and slot of `node` when it is a field.
fn field_slot(node: &Node) -> Option<(Alias, usize)> {
    match node {
        Node::Field { alias, idx, .. } => Some((
            *Alias::ALL.get(usize::from(*alias))?,
            usize::try_from(*idx).ok()?,
        )),
        _ => None,
    }
}

/// Prepares `ast` for `scope` (fields resolved to slots, functions to ids): rejects what
/// Capillaries rejects while collecting field references (non-ident selectors, plain
/// identifiers, unknown or prohibited fields); anything else that cannot evaluate (unsupported syntax, unknown functions, bad literals, invalid
/// literal regexes) becomes an evaluation error, as in Capillaries.
pub fn prepare(ast: &Ast, scope: &Scope) -> Result<Compiled, ExprError> {
    ast.field_refs(false)?;
    let mut c = Compiler {
        scope,
        refs: Vec::new(),
    };
    let root = c.node(&ast.root)?;
    Ok(Compiled {
        root,
        refs: c.refs,
        root_agg: ast.root_aggregate(),
        text: ast.to_string(),
    })
}

struct Compiler<'s> {
    scope: &'s Scope,
    refs: Vec<FieldRef>,
}

/// A call of `func` on `args`, or its value when every argument is a constant and `func`
/// is pure (all but `time.Now`): `time.Parse("2006-01-02", "{start_date}")` in a `having` was
/// parsed again for every row. A call that fails stays a call, so it fails on each row
/// exactly as before (with the row's location); a function's result never depends on the
/// rounding of its caller, so the value is the one every row would compute.
fn fold_call(func: Func, args: Box<[Node]>) -> Node {
    let consts: Option<Vec<Val<'_>>> = args
        .iter()
        .map(|a| match a {
            Node::Const(v) => Some(Val::Ref(v)),
            _ => None,
        })
        .collect();
    let folded = match consts {
        Some(mut vals) if func != Func::TimeNow => {
            let ctx = Ctx {
                rounding: Rounding::None,
                agg: None,
            };
            funcs::call(func, &mut vals, ctx).ok().map(Val::into_owned)
        }
        _ => None,
    };
    match folded {
        Some(v) => Node::Const(v),
        None => Node::Call { func, args },
    }
}

/// Go `strconv.ParseFloat` of a float literal the Go scanner accepted, range errors ignored
/// (spec §5.3): `1e400` is +Inf, `1e-400` is 0, `1_0.5` is 10.5, `0x1p-2` is 0.25.
pub(crate) fn float_literal(text: &str) -> Option<f64> {
    match crate::cell::parse_go_float_full(text) {
        Ok(f) | Err(crate::cell::GoFloatError::Range(f)) => Some(f),
        Err(_) => None,
    }
}

/// The value of a string literal: quotes stripped, no escape processing (spec §5.3).
pub(crate) fn string_literal(raw: &str, backquoted: bool) -> &str {
    // Quirk (spec §5.3): every leading/trailing quote goes, backslashes stay.
    if backquoted {
        raw.trim_matches('`')
    } else {
        raw.trim_matches('"')
    }
}

impl Compiler<'_> {
    fn nodes(&mut self, exprs: &[Expr]) -> Result<Box<[Node]>, ExprError> {
        exprs.iter().map(|e| self.node(e)).collect()
    }

    fn field(&mut self, x: &str, sel: &str) -> Result<Node, ExprError> {
        if x == "time" {
            if sel == "UTC" {
                return Ok(Node::Const(Value::Location(None)));
            }
            if let Some(i) = MONTHS.iter().position(|m| *m == sel) {
                return Ok(Node::Const(Value::Month(i as u8 + 1)));
            }
        }
        if x == "wfmodel"
            && self.scope.has_wfmodel()
            && let Some((_, v)) = WFMODEL.iter().find(|(n, _)| *n == sel)
        {
            return Ok(Node::Const(Value::Int(*v)));
        }
        let (alias, idx, _) = self.scope.resolve(x, sel)?;
        let name = match self
            .refs
            .iter()
            .position(|r| r.alias == x && r.field == sel)
        {
            Some(i) => i,
            None => {
                self.refs.push(FieldRef {
                    alias: x.to_owned(),
                    field: sel.to_owned(),
                });
                self.refs.len() - 1
            }
        };
        Ok(Node::Field {
            alias: alias.index() as u8,
            idx: idx as u32,
            name: name as u32,
        })
    }

    fn node(&mut self, e: &Expr) -> Result<Node, ExprError> {
        let generic = self.generic(e)?;
        if let Expr::Binary { .. } | Expr::Unary { .. } = e
            && let Some(fast) = Fast::build(e, self.scope).filter(Fast::is_operator)
        {
            return Ok(Node::Fast {
                fast,
                generic: Box::new(generic),
            });
        }
        Ok(generic)
    }

    fn generic(&mut self, e: &Expr) -> Result<Node, ExprError> {
        Ok(match e {
            Expr::Int(t) => match int_literal(t) {
                Ok(v) => Node::Const(v),
                Err(err) => Node::Fail(err),
            },
            Expr::Float(t) => match float_literal(t) {
                Some(f) => Node::Const(Value::Float(f)),
                None => Node::Fail(EvalError::BadLiteral {
                    kind: "FLOAT",
                    text: t.as_str().into(),
                }),
            },
            Expr::Imag(t) => Node::Fail(EvalError::BadLiteral {
                kind: "IMAG",
                text: t.as_str().into(),
            }),
            Expr::Char(t) => Node::Fail(EvalError::BadLiteral {
                kind: "CHAR",
                text: t.as_str().into(),
            }),
            Expr::Str { raw, backquoted } => {
                Node::Const(Value::str(string_literal(raw, *backquoted)))
            }
            Expr::Ident(name) => match name.as_str() {
                "true" => Node::Const(Value::Bool(true)),
                "false" => Node::Const(Value::Bool(false)),
                _ => return Err(ExprError::PlainIdent { name: name.clone() }),
            },
            Expr::Selector { x, sel } => self.field(x, sel)?,
            Expr::BadSelector { .. } => {
                return Err(ExprError::NonIdentSelector {
                    expr: e.to_string(),
                });
            }
            Expr::Call { func, args } => {
                let nodes = self.nodes(args)?;
                if let Some(agg) = AggFunc::from_name(func) {
                    // Quirk (spec §5.10): only `"` is stripped from the separator literal, so a
                    // back-quoted separator keeps its back-quotes.
                    let sep = match (agg, args.get(1)) {
                        (
                            AggFunc::StringAgg | AggFunc::StringAggIf,
                            Some(Expr::Str { raw, .. }),
                        ) => Some(Arc::from(raw.trim_matches('"'))),
                        _ => None,
                    };
                    Node::Agg {
                        func: agg,
                        args: nodes,
                        sep,
                    }
                } else if let Some(f) = Func::from_name(func) {
                    match (f, args.first()) {
                        (Func::ReMatchString, Some(Expr::Str { raw, backquoted })) => {
                            let pattern = string_literal(raw, *backquoted);
                            Node::Regex {
                                re: regex_go::build(pattern),
                                args: nodes,
                            }
                        }
                        _ => fold_call(f, nodes),
                    }
                } else {
                    Node::FailAfter {
                        err: EvalError::UnsupportedFunc {
                            name: func.as_str().into(),
                        },
                        args: nodes,
                    }
                }
            }
            Expr::BadCall { args, .. } => Node::FailAfter {
                err: EvalError::Unsupported {
                    text: e.to_string().into(),
                },
                args: self.nodes(args)?,
            },
            Expr::Unary { op, x } => Node::Unary {
                op: *op,
                x: Box::new(self.node(x)?),
            },
            Expr::Binary { op, x, y } => {
                if let Expr::Binary { .. } = x.as_ref() {
                    return self.chain(e);
                }
                Node::Binary {
                    op: *op,
                    x: Box::new(self.node(x)?),
                    y: Box::new(self.node(y)?),
                }
            }
            Expr::Paren(x) => self.node(x)?,
            Expr::Unsupported { text, .. } => Node::Fail(EvalError::Unsupported {
                text: text.as_str().into(),
            }),
        })
    }

    /// Flattens the left spine of binary nodes (`a * b + c - d`) into a [`Node::Chain`].
    fn chain(&mut self, e: &Expr) -> Result<Node, ExprError> {
        let mut rest_exprs = Vec::new();
        let mut cur = e;
        while let Expr::Binary { op, x, y } = cur {
            rest_exprs.push((*op, y.as_ref()));
            cur = x;
        }
        let first = Box::new(self.node(cur)?);
        let mut rest = Vec::with_capacity(rest_exprs.len());
        for (op, y) in rest_exprs.into_iter().rev() {
            rest.push((op, self.node(y)?));
        }
        Ok(Node::Chain {
            first,
            rest: rest.into_boxed_slice(),
        })
    }
}
