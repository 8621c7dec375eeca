//! Load-time ([`ExprError`]) and evaluation ([`EvalError`]) errors of the expression language.

use std::fmt;

use thiserror::Error;

use super::ops::{AggFunc, BinaryOp, UnaryOp};
use crate::decimal::DecimalError;
use crate::gotime::TimeError;
use crate::value::Type;

/// Why an expression is rejected at load (parse, field references, type check).
#[derive(Clone, Debug, PartialEq, Error)]
pub enum ExprError {
    /// Go parser error.
    #[error("{0}")]
    Parse(#[from] ParseError),
    /// `a.b.c`, `f(x).y` (spec §5.2).
    #[error("selectors starting with non-ident are not allowed, aliases must be used: {expr}")]
    NonIdentSelector {
        /// The offending selector, canonical text.
        expr: String,
    },
    /// A plain identifier other than `true`/`false` (spec §5.4).
    #[error("plain (non-selector) identifiers are not allowed: {name}")]
    PlainIdent {
        /// The identifier.
        name: String,
    },
    /// The alias is allowed here but has no such field.
    #[error("unknown field {alias}.{field}")]
    UnknownField {
        /// Alias.
        alias: String,
        /// Field.
        field: String,
    },
    /// The alias is not allowed in this expression.
    #[error("prohibited field {alias}.{field}")]
    ProhibitedField {
        /// Alias.
        alias: String,
        /// Field.
        field: String,
    },
    /// An aggregate call where aggregates are not allowed (spec §5.10).
    #[error("cannot use agg functions in this expression, found {func}()")]
    AggForbidden {
        /// The first aggregate found.
        func: AggFunc,
    },
    /// The load-time dummy evaluation failed (spec §5.11).
    #[error("{0}")]
    Eval(#[from] EvalError),
    /// The dummy evaluation returned a value of another type (spec §5.11).
    #[error("unexpected type {got}, expected {expected} ({expected_go})")]
    UnexpectedType {
        /// Go type name of the value produced (`int` for `len()`, `int64`, …).
        got: &'static str,
        /// The declared type.
        expected: Type,
        /// Go type name of the declared type.
        expected_go: &'static str,
    },
}

/// Why an evaluation failed; messages follow Capillaries' evaluator.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum EvalError {
    /// int64 `/` or `%` by zero.
    #[error("integer divide by zero")]
    IntegerDivideByZero,
    /// decimal `/` by zero.
    #[error("decimal division by 0")]
    DecimalDivisionByZero,
    /// A decimal result outside `rust_decimal`'s range (Go's decimals are unbounded).
    #[error("decimal overflow in {op}")]
    DecimalOverflow {
        /// The operation.
        op: &'static str,
    },
    /// Wrong number of arguments.
    #[error("cannot evaluate {func}(), requires {required} args, {supplied} supplied")]
    Arity {
        /// Function name as Capillaries prints it (`iif` for the `*.iif` functions).
        func: &'static str,
        /// Required count.
        required: usize,
        /// Supplied count.
        supplied: usize,
    },
    /// `fmt.Sprintf` with fewer than two arguments.
    #[error("cannot evaluate fmt.Sprintf(), requires at least 2 args, {supplied} supplied")]
    SprintfArity {
        /// Supplied count.
        supplied: usize,
    },
    /// Arguments of the wrong type or value.
    #[error("cannot evaluate {func}(), {detail}")]
    InvalidArgs {
        /// Function name.
        func: &'static str,
        /// What was wrong, with the argument values.
        detail: Box<str>,
    },
    /// Not a function of the library.
    #[error("cannot evaluate unsupported func '{name}'")]
    UnsupportedFunc {
        /// The called name.
        name: Box<str>,
    },
    /// An aggregate evaluated outside aggregate mode (not the expression root).
    #[error("cannot evaluate {func}(), context aggregate not enabled")]
    AggNotEnabled {
        /// The aggregate.
        func: AggFunc,
    },
    /// A second (nested) aggregate in an aggregate expression.
    #[error(
        "cannot evaluate more than one aggregate functions in the expression, extra {extra}() found besides {first}()"
    )]
    MoreThanOneAgg {
        /// The aggregate evaluated last.
        extra: AggFunc,
        /// The aggregate evaluated first.
        first: AggFunc,
    },
    /// An aggregate got a value of another type than the first one.
    #[error("cannot evaluate {func}(), it started with type {started}, now got {got}")]
    AggTypeChanged {
        /// The aggregate.
        func: AggFunc,
        /// Go type name of the accumulator.
        started: &'static str,
        /// The new value and its type.
        got: Box<str>,
    },
    /// `string_agg` separator that is not a string literal.
    #[error("cannot evaluate {func}(), separator must be a string literal")]
    StringAggSeparator {
        /// `string_agg` or `string_agg_if`.
        func: AggFunc,
    },
    /// A decimal `min_if`/`max_if` whose condition never held: Go returns ±3.4e38, which
    /// `rust_decimal` cannot hold.
    #[error("cannot evaluate {func}(), no value matched and the decimal sentinel is out of range")]
    DecimalSentinel {
        /// The aggregate.
        func: AggFunc,
    },
    /// `+ - * / %` on operands that do not support it.
    #[error("cannot perform binary arithmetic op {op}, incompatible arg types {left} {op} {right}")]
    Arith {
        /// Operator.
        op: BinaryOp,
        /// Left value and type.
        left: Box<str>,
        /// Right value and type.
        right: Box<str>,
    },
    /// `%` on floats or decimals.
    #[error("cannot perform binary arithmetic op {op}, not supported for {ty}")]
    ArithNotSupported {
        /// Operator.
        op: BinaryOp,
        /// Go type name.
        ty: &'static str,
    },
    /// Comparison of a number with a non-number.
    #[error("cannot perform binary comp op {op}, incompatible arg types {left} {op} {right}")]
    CompIncompatible {
        /// Operator.
        op: BinaryOp,
        /// Left value and type.
        left: Box<str>,
        /// Right value and type.
        right: Box<str>,
    },
    /// Comparison of a string, bool or time with a value of another type.
    #[error("cannot perform binary comp op {op}, invalid right arg {right} for left arg {left}")]
    CompInvalidRight {
        /// Operator.
        op: BinaryOp,
        /// Left value and type.
        left: Box<str>,
        /// Right value and type.
        right: Box<str>,
    },
    /// Ordering of bools, or any comparison of months/locations.
    #[error("cannot perform binary comp op {op}, not supported for {ty}")]
    CompNotSupported {
        /// Operator.
        op: BinaryOp,
        /// Go type name of the left operand.
        ty: &'static str,
    },
    /// `&&`/`||` on non-bools.
    #[error("cannot perform binary logical op {op}, both args must be bool: {left}, {right}")]
    Logic {
        /// Operator.
        op: BinaryOp,
        /// Left value and type.
        left: Box<str>,
        /// Right value and type.
        right: Box<str>,
    },
    /// Bitwise operators.
    #[error("cannot perform binary expression unknown op {op}")]
    UnknownBinaryOp {
        /// Operator.
        op: BinaryOp,
    },
    /// `+x`, `^x`, `&x`, `<-x`, `~x`, `*x`.
    #[error("cannot evaluate unary op {op}, unknown op")]
    UnknownUnaryOp {
        /// Operator.
        op: UnaryOp,
    },
    /// `!` on a non-bool, `-` on a non-number.
    #[error("cannot evaluate unary op {op}, unsupported arg {arg}")]
    UnaryArg {
        /// Operator.
        op: UnaryOp,
        /// The value and its type.
        arg: Box<str>,
    },
    /// A literal that Capillaries cannot evaluate (`0x1F`, `'a'`, `2i`, …).
    #[error("cannot evaluate {kind} literal {text}")]
    BadLiteral {
        /// `INT`, `FLOAT`, `CHAR`, `IMAG`.
        kind: &'static str,
        /// Source text.
        text: Box<str>,
    },
    /// A Go form the evaluator does not support (index, slice, composite literal, …).
    #[error("cannot evaluate unsupported expression {text}")]
    Unsupported {
        /// Source text.
        text: Box<str>,
    },
    /// A field the evaluation context does not supply.
    #[error("variable not supplied: {name}")]
    VariableNotSupplied {
        /// `alias.field`.
        name: Box<str>,
    },
    /// `re.MatchString` with an invalid pattern.
    #[error("cannot evaluate re.MatchString(), invalid pattern {pattern}: {detail}")]
    Regex {
        /// The pattern.
        pattern: Box<str>,
        /// The compiler's message.
        detail: Box<str>,
    },
    /// A bool expression (having, filter, criteria, rule) returned something else.
    #[error("expression must return bool, got {got}")]
    NotBool {
        /// The value and its type.
        got: Box<str>,
    },
    /// `time.Parse` failure.
    #[error("cannot evaluate time.Parse(), {0}")]
    Time(Box<TimeError>),
    /// Decimal conversion failure (`decimal2("x")`, `decimal2(NaN)`).
    #[error("cannot evaluate decimal2(), {0}")]
    Decimal(Box<DecimalError>),
}

/// A Go-style parse error: `1:6: expected ')', found 'EOF'`.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub struct ParseError {
    /// 1-based line of the first error.
    pub line: u32,
    /// 1-based byte column of the first error.
    pub column: u32,
    /// The first error's message.
    pub message: String,
    /// How many further errors Go would report ("(and N more errors)").
    pub more: usize,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)?;
        if self.more > 0 {
            write!(f, " (and {} more errors)", self.more)?;
        }
        Ok(())
    }
}
