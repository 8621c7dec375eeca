//! The load-time type check (spec §5.11): Capillaries' "dummy evaluation", reproduced so that
//! Plexus accepts and rejects exactly the same scripts.

use std::str::FromStr;

use rust_decimal::Decimal;

use super::ast::Ast;
use super::error::{EvalError, ExprError};
use super::prepare::{Compiled, Rounding, prepare};
use super::scope::{Alias, Scope, Vars};
use crate::gotime;
use crate::value::{Type, Value};

/// Where aggregates may appear (spec §5.10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AggPolicy {
    /// An aggregate call anywhere is rejected ("cannot use agg functions …"): writer fields of
    /// non-grouped nodes and, as a compat fix (spec §14 #49), file writer columns.
    Forbidden,
    /// Capillaries' dummy evaluation decides: a root aggregate is evaluated in aggregate mode,
    /// any other aggregate fails ("context aggregate not enabled"): grouped lookup fields,
    /// having, lookup filter.
    RootOnly,
}

/// How many times a division by zero is retried with larger dummy values.
const TRIES: u32 = 5;

/// Go type name of a column type's values.
fn go_name(t: Type) -> &'static str {
    match t {
        Type::String => "string",
        Type::Int => "int64",
        Type::Float => "float64",
        Type::Bool => "bool",
        Type::DateTime => "time.Time",
        Type::Decimal2 => "decimal.Decimal",
    }
}

/// The dummy rows of try `k`: int k, float 2.35·k, decimal 3.45·k, string "12345",
/// bool false, datetime `now`.
fn dummy_rows(scope: &Scope, k: u32, now: &Value) -> [Vec<Value>; 5] {
    let mut f = 0.0f64;
    for _ in 0..k {
        f += 2.35;
    }
    let d = Decimal::from_str("3.45").unwrap_or_default() * Decimal::from(k);
    Alias::ALL.map(|a| {
        scope
            .fields(a)
            .unwrap_or_default()
            .iter()
            .map(|(_, t)| match t {
                Type::Int => Value::Int(i64::from(k)),
                Type::Float => Value::Float(f),
                Type::Decimal2 => Value::Decimal(d),
                Type::String => Value::str("12345"),
                Type::Bool => Value::Bool(false),
                Type::DateTime => now.clone(),
            })
            .collect()
    })
}

fn vars_of(rows: &[Vec<Value>; 5]) -> Vars<'_> {
    let mut vars = Vars::new();
    for a in Alias::ALL {
        vars.set(a, &rows[a as usize]);
    }
    vars
}

/// One dummy evaluation; returns the Go type name of the result.
fn dummy_eval(compiled: &Compiled, vars: &Vars<'_>) -> Result<&'static str, EvalError> {
    match compiled.new_accumulator() {
        // A root aggregate: aggregate mode, round-to-2, one row.
        Some(mut acc) => {
            acc.update(compiled, vars, Rounding::To2)?;
            Ok(acc.result_type_name())
        }
        None => compiled
            .eval(vars, Rounding::None)
            .map(|v| v.go_type_name()),
    }
}

fn expect_type(got: &'static str, expected: Type) -> Result<(), ExprError> {
    let expected_go = go_name(expected);
    if got == expected_go {
        Ok(())
    } else {
        Err(ExprError::UnexpectedType {
            got,
            expected,
            expected_go,
        })
    }
}

fn check_agg_policy(ast: &Ast, agg: AggPolicy) -> Result<(), ExprError> {
    if agg == AggPolicy::Forbidden {
        let mut found = None;
        ast.root.walk_all(&mut |e| {
            if found.is_none() {
                found = e.as_aggregate();
            }
        });
        if let Some(func) = found {
            return Err(ExprError::AggForbidden { func });
        }
    }
    Ok(())
}

/// Compiles `ast` and type-checks it like Capillaries' load-time dummy evaluation: the result
/// must be exactly `expected` (`Type::Bool` for having/filter). Only integer and decimal
/// division by zero trigger the retries.
pub fn check(ast: &Ast, scope: &Scope, expected: Type, agg: AggPolicy) -> Result<(), ExprError> {
    check_agg_policy(ast, agg)?;
    let compiled = prepare(ast, scope)?;
    let now = Value::Time(gotime::now());
    let mut last = None;
    for k in 0..TRIES {
        let rows = dummy_rows(scope, k, &now);
        match dummy_eval(&compiled, &vars_of(&rows)) {
            Ok(got) => return expect_type(got, expected),
            Err(e @ (EvalError::IntegerDivideByZero | EvalError::DecimalDivisionByZero)) => {
                last = Some(e);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.unwrap_or(EvalError::IntegerDivideByZero).into())
}

/// The dependency-policy rule check (spec §3.12): one evaluation with zero values of the
/// scope's field types, no retries, no aggregates; the result must be `expected`.
pub fn check_zero(ast: &Ast, scope: &Scope, expected: Type) -> Result<(), ExprError> {
    check_agg_policy(ast, AggPolicy::Forbidden)?;
    let compiled = prepare(ast, scope)?;
    let rows = Alias::ALL.map(|a| {
        scope
            .fields(a)
            .unwrap_or_default()
            .iter()
            .map(|(_, t)| t.zero())
            .collect::<Vec<_>>()
    });
    let got = compiled
        .eval(&vars_of(&rows), Rounding::None)?
        .go_type_name();
    expect_type(got, expected)
}
