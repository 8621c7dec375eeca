//! The six Capillaries column types and the values the expression evaluator works with.

use std::fmt;
use std::sync::Arc;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// A column type of a Capillaries table or file (spec §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Type {
    /// UTF-8 text.
    String,
    /// 64-bit signed integer.
    Int,
    /// 64-bit IEEE float.
    Float,
    /// Boolean.
    Bool,
    /// Instant with a zone, millisecond precision once stored.
    DateTime,
    /// Exact decimal, stored with two fraction digits.
    Decimal2,
}

impl Type {
    /// All six types, in the order of spec §4.1.
    pub const ALL: [Self; 6] = [
        Self::String,
        Self::Int,
        Self::Float,
        Self::Bool,
        Self::DateTime,
        Self::Decimal2,
    ];

    /// The name a script uses for this type (`string`, `int`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Int => "int",
            Self::Float => "float",
            Self::Bool => "bool",
            Self::DateTime => "datetime",
            Self::Decimal2 => "decimal2",
        }
    }

    /// Parses a script type name; `None` for anything that is not one of the six names.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The zero value of the type (spec §4.2).
    pub fn zero(self) -> Value {
        match self {
            Self::String => Value::Str(Arc::from("")),
            Self::Int => Value::Int(0),
            Self::Float => Value::Float(0.0),
            Self::Bool => Value::Bool(false),
            Self::DateTime => Value::Time(Time::ZERO),
            Self::Decimal2 => Value::Decimal(Decimal::ZERO),
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A time zone as Go's `time.Location` behaves for Capillaries: a fixed offset and a name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Zone {
    /// Seconds east of UTC.
    pub offset: i32,
    /// The abbreviation printed by the `MST` layout token and by `Time.String()`; empty for an
    /// unnamed fixed offset (Go then prints the numeric offset, e.g. `-0200`).
    pub name: Arc<str>,
}

/// An instant with the zone it is shown in, Go `time.Time` semantics with nanosecond precision.
///
/// `zone == None` means UTC (`Time.String()` prints `+0000 UTC`), which is what every value read
/// back from storage carries.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Time {
    /// Whole seconds since 1970-01-01T00:00:00Z (negative before), the instant itself.
    pub secs: i64,
    /// Nanoseconds within the second, `0..1_000_000_000`.
    pub nanos: u32,
    /// The zone used for formatting; `None` is UTC.
    pub zone: Option<Arc<Zone>>,
}

impl Time {
    /// Go's zero time, `0001-01-01 00:00:00 UTC`.
    pub const ZERO: Self = Self {
        secs: -62_135_596_800,
        nanos: 0,
        zone: None,
    };

    /// A UTC time from milliseconds since the Unix epoch (the storage representation).
    pub fn from_unix_millis(ms: i64) -> Self {
        Self {
            secs: ms.div_euclid(1000),
            nanos: (ms.rem_euclid(1000) as u32) * 1_000_000,
            zone: None,
        }
    }

    /// Milliseconds since the Unix epoch, truncated toward negative infinity like Go's UnixMilli
    /// for the instants Capillaries stores.
    pub fn unix_millis(&self) -> i64 {
        self.secs * 1000 + i64::from(self.nanos / 1_000_000)
    }

    /// The offset from UTC in seconds of the zone this time is shown in.
    pub fn offset(&self) -> i32 {
        self.zone.as_ref().map_or(0, |z| z.offset)
    }

    /// The same instant shown in UTC, truncated to milliseconds: what storage gives back (§4.7).
    pub fn to_storage(&self) -> Self {
        Self::from_unix_millis(self.unix_millis())
    }
}

impl PartialOrd for Time {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some((self.secs, self.nanos).cmp(&(other.secs, other.nanos)))
    }
}

/// A value produced or consumed by the expression evaluator.
///
/// The first six variants are the six column types; `GoInt`, `Month` and `Location` only occur
/// as intermediate results (`len()`, `time.January`, `time.UTC`) and can never be stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Value {
    /// `string`.
    Str(Arc<str>),
    /// `int` (Go int64).
    Int(i64),
    /// `float` (Go float64).
    Float(f64),
    /// `bool`.
    Bool(bool),
    /// `datetime`.
    Time(Time),
    /// `decimal2`, not yet rounded to two places.
    Decimal(Decimal),
    /// Go `int`, returned by `len()`: arithmetic treats it as int64, but it is not an `int`
    /// column value (spec §5.7 quirk).
    GoInt(i64),
    /// A `time.Month` constant, 1..=12, only meaningful as an argument of `time.Date`.
    Month(u8),
    /// A `*time.Location` (`time.UTC`, `time.FixedZone`), only meaningful as an argument.
    Location(Option<Arc<Zone>>),
}

/// A cell of a row about to be keyed or written, seen without copying: a value, or a
/// string's text borrowed from where it was read (a stored row in its page, #25 item 3).
#[derive(Debug, Clone, Copy)]
pub enum CellView<'a> {
    /// A value (a string value included).
    Value(&'a Value),
    /// A string's text.
    Str(&'a str),
}

impl<'a> CellView<'a> {
    /// The column type of the cell, `None` for the intermediate-only value variants.
    pub fn column_type(&self) -> Option<Type> {
        match self {
            Self::Value(v) => v.column_type(),
            Self::Str(_) => Some(Type::String),
        }
    }

    /// The cell's text when it is a string, borrowed or a value.
    pub fn text(&self) -> Option<&'a str> {
        match *self {
            Self::Value(Value::Str(s)) => Some(s),
            Self::Str(s) => Some(s),
            Self::Value(_) => None,
        }
    }

    /// The cell as an owned value (a borrowed string is copied).
    pub fn to_value(&self) -> Value {
        match self {
            Self::Value(v) => (*v).clone(),
            Self::Str(s) => Value::Str(Arc::from(*s)),
        }
    }
}

/// A row's cell as key builders and file writers read it ([`CellView`]): decoded values and
/// cells read in place alike.
pub trait AsCell {
    /// The cell.
    fn cell(&self) -> CellView<'_>;
}

impl AsCell for CellView<'_> {
    fn cell(&self) -> CellView<'_> {
        *self
    }
}

impl AsCell for Value {
    fn cell(&self) -> CellView<'_> {
        CellView::Value(self)
    }
}

impl<T: AsCell + ?Sized> AsCell for &T {
    fn cell(&self) -> CellView<'_> {
        (**self).cell()
    }
}

impl Value {
    /// The column type of the value, `None` for the intermediate-only variants.
    pub fn column_type(&self) -> Option<Type> {
        match self {
            Self::Str(_) => Some(Type::String),
            Self::Int(_) => Some(Type::Int),
            Self::Float(_) => Some(Type::Float),
            Self::Bool(_) => Some(Type::Bool),
            Self::Time(_) => Some(Type::DateTime),
            Self::Decimal(_) => Some(Type::Decimal2),
            Self::GoInt(_) | Self::Month(_) | Self::Location(_) => None,
        }
    }

    /// The Go type name printed by `%T` and in Sprintf mismatch messages (`int64`, `time.Time`, …).
    pub fn go_type_name(&self) -> &'static str {
        match self {
            Self::Str(_) => "string",
            Self::Int(_) => "int64",
            Self::Float(_) => "float64",
            Self::Bool(_) => "bool",
            Self::Time(_) => "time.Time",
            Self::Decimal(_) => "decimal.Decimal",
            Self::GoInt(_) => "int",
            Self::Month(_) => "time.Month",
            Self::Location(_) => "*time.Location",
        }
    }

    /// Builds a string value.
    pub fn str(s: &str) -> Self {
        Self::Str(Arc::from(s))
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Self::Str(Arc::from(s))
    }
}
