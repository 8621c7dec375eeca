//! The Capillaries expression language (spec §5): parser, type check and evaluator.
//!
//! Flow: [`parse`] the text once into an [`Ast`] (Go syntax, Go error messages); collect its
//! [`FieldRef`]s with [`Ast::field_refs`]; [`check`] it against a [`Scope`] the way Capillaries
//! does at load; [`prepare`] it for the scope (fields resolved to slots, functions to ids,
//! literal regexes compiled); then per row call [`Compiled::eval`] with [`Vars`], or, for a root
//! aggregate, feed an [`Accumulator`].

mod agg;
mod ast;
mod check;
mod error;
mod eval;
mod fast;
mod funcs;
mod lexer;
mod ops;
mod parser;
mod prepare;
mod regex_go;
mod scope;
mod val;

pub use agg::Accumulator;
pub use ast::{Ast, Expr, FieldRef, UnsupportedKind};
pub use check::{AggPolicy, check, check_zero};
pub use error::{EvalError, ExprError, ParseError};
pub use ops::{AggFunc, BinaryOp, UnaryOp};
pub use parser::parse;
pub use prepare::{Compiled, Rounding, prepare};
pub use scope::{Alias, Scope, Vars};

#[cfg(test)]
mod check_tests;
#[cfg(test)]
mod parser_tests;
#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod tests;
