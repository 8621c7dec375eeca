//! The operator and aggregate-function names that the syntax tree, the checks, the errors
//! and the evaluator all speak of; they sit in a file of their own, below all of those, so
//! that each of them can name an operator without depending on the others.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A unary operator as Go parses it; only `!` and `-` evaluate (spec §5.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnaryOp {
    /// `!x`.
    Not,
    /// `-x`.
    Neg,
    /// `+x` (rejected at evaluation).
    Plus,
    /// `^x` (rejected at evaluation).
    Xor,
    /// `&x` (rejected at evaluation).
    Addr,
    /// `<-x` (rejected at evaluation).
    Recv,
    /// `~x` (rejected at evaluation).
    Tilde,
    /// `*x`, Go's star expression (rejected at evaluation).
    Deref,
}

impl UnaryOp {
    /// The Go operator text.
    pub fn text(self) -> &'static str {
        match self {
            Self::Not => "!",
            Self::Neg => "-",
            Self::Plus => "+",
            Self::Xor => "^",
            Self::Addr => "&",
            Self::Recv => "<-",
            Self::Tilde => "~",
            Self::Deref => "*",
        }
    }
}

/// A binary operator; the bitwise ones parse but are rejected at evaluation (spec §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinaryOp {
    /// `+`.
    Add,
    /// `-`.
    Sub,
    /// `*`.
    Mul,
    /// `/`.
    Quo,
    /// `%`.
    Rem,
    /// `&` (rejected at evaluation).
    And,
    /// `|` (rejected at evaluation).
    Or,
    /// `^` (rejected at evaluation).
    Xor,
    /// `<<` (rejected at evaluation).
    Shl,
    /// `>>` (rejected at evaluation).
    Shr,
    /// `&^` (rejected at evaluation).
    AndNot,
    /// `&&`, both sides always evaluated.
    LAnd,
    /// `||`, both sides always evaluated.
    LOr,
    /// `==`.
    Eql,
    /// `!=`.
    Neq,
    /// `<`.
    Lss,
    /// `<=`.
    Leq,
    /// `>`.
    Gtr,
    /// `>=`.
    Geq,
}

impl BinaryOp {
    /// The Go operator text.
    pub fn text(self) -> &'static str {
        match self {
            Self::Add => "+",
            Self::Sub => "-",
            Self::Mul => "*",
            Self::Quo => "/",
            Self::Rem => "%",
            Self::And => "&",
            Self::Or => "|",
            Self::Xor => "^",
            Self::Shl => "<<",
            Self::Shr => ">>",
            Self::AndNot => "&^",
            Self::LAnd => "&&",
            Self::LOr => "||",
            Self::Eql => "==",
            Self::Neq => "!=",
            Self::Lss => "<",
            Self::Leq => "<=",
            Self::Gtr => ">",
            Self::Geq => ">=",
        }
    }

    /// Go precedence, 1 (`||`) to 5 (`*`).
    pub fn precedence(self) -> u8 {
        match self {
            Self::LOr => 1,
            Self::LAnd => 2,
            Self::Eql | Self::Neq | Self::Lss | Self::Leq | Self::Gtr | Self::Geq => 3,
            Self::Add | Self::Sub | Self::Or | Self::Xor => 4,
            _ => 5,
        }
    }
}

impl fmt::Display for UnaryOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

impl fmt::Display for BinaryOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

/// An aggregate function name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AggFunc {
    /// `count()`.
    Count,
    /// `count_if(cond)`.
    CountIf,
    /// `sum(x)`.
    Sum,
    /// `sum_if(x, cond)`.
    SumIf,
    /// `avg(x)`.
    Avg,
    /// `avg_if(x, cond)`.
    AvgIf,
    /// `min(x)`.
    Min,
    /// `min_if(x, cond)`.
    MinIf,
    /// `max(x)`.
    Max,
    /// `max_if(x, cond)`.
    MaxIf,
    /// `string_agg(x, "sep")`.
    StringAgg,
    /// `string_agg_if(x, "sep", cond)`.
    StringAggIf,
}

impl AggFunc {
    /// All twelve, in spec order.
    pub const ALL: [Self; 12] = [
        Self::Count,
        Self::CountIf,
        Self::Sum,
        Self::SumIf,
        Self::Avg,
        Self::AvgIf,
        Self::Min,
        Self::MinIf,
        Self::Max,
        Self::MaxIf,
        Self::StringAgg,
        Self::StringAggIf,
    ];

    /// The function name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Count => "count",
            Self::CountIf => "count_if",
            Self::Sum => "sum",
            Self::SumIf => "sum_if",
            Self::Avg => "avg",
            Self::AvgIf => "avg_if",
            Self::Min => "min",
            Self::MinIf => "min_if",
            Self::Max => "max",
            Self::MaxIf => "max_if",
            Self::StringAgg => "string_agg",
            Self::StringAggIf => "string_agg_if",
        }
    }

    /// Parses an aggregate name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Whether it is an `_if` variant (last argument is the condition).
    pub fn is_conditional(self) -> bool {
        matches!(
            self,
            Self::CountIf
                | Self::SumIf
                | Self::AvgIf
                | Self::MinIf
                | Self::MaxIf
                | Self::StringAggIf
        )
    }

    /// The number of arguments it takes.
    pub fn arity(self) -> usize {
        match self {
            Self::Count => 0,
            Self::CountIf | Self::Sum | Self::Avg | Self::Min | Self::Max => 1,
            Self::SumIf | Self::AvgIf | Self::MinIf | Self::MaxIf | Self::StringAgg => 2,
            Self::StringAggIf => 3,
        }
    }
}
