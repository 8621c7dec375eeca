//! What an index or order definition is: its components and modifiers, its canonical text
//! (which parses back to the same definition) and the errors of parsing and key building.
//!
//! Kept apart so that parsing and encoding both depend on it and never on each other.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::value::Type;

/// String component length used when the definition gives none (spec §6.1).
pub const DEFAULT_STRING_LEN: usize = 64;
/// Smallest string component length; shorter lengths are raised to it (spec §6.1).
pub const MIN_STRING_LEN: usize = 16;
/// Largest accepted string component length (spec §6.1).
pub const MAX_STRING_LEN: usize = 1024;

/// Whether an index allows one row per key or many (spec §6.3).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexKind {
    /// `unique(...)`: at most one row per key.
    Unique,
    /// `non_unique(...)`: any number of rows per key; also every order expression.
    NonUnique,
}

/// How a string component treats letter case.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaseMode {
    /// `case_sensitive` (the default, and the only mode of non-string components).
    Sensitive,
    /// `ignore_case`: the key part is upper-cased with Go `strings.ToUpper`.
    IgnoreCase,
}

/// Sort direction of a component.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SortDir {
    /// `asc` (the default).
    Asc,
    /// `desc`: the part's bytes are complemented and hex-encoded.
    Desc,
}

/// One component of an index or order definition: a field and its modifiers.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct KeyComponent {
    /// The field (table field, file column or `nrs` field) the component reads.
    pub field: String,
    /// The type of that field.
    pub ty: Type,
    /// Sort direction.
    pub dir: SortDir,
    /// Case handling; always `Sensitive` for non-string fields.
    pub case: CaseMode,
    /// Length L of a string part in bytes (16..=1024); 64 and unused for non-string fields.
    pub string_len: usize,
}

/// A parsed index definition (`unique(...)` / `non_unique(...)`) or order expression.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct IndexDef {
    /// Unique or non-unique; order expressions are non-unique.
    pub kind: IndexKind,
    /// The components, in key order; never empty for a parsed definition.
    pub components: Vec<KeyComponent>,
}

/// An invalid index/order definition, or values that do not fit a definition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The text is not `name(components)` with well-formed components.
    #[error("malformed index definition `{text}` at byte {pos}: {reason}")]
    Syntax {
        /// The whole definition text.
        text: String,
        /// Byte offset of the problem in `text`.
        pos: usize,
        /// What was wrong.
        reason: String,
    },
    /// The outer call is neither `unique` nor `non_unique`.
    #[error(
        "index definition `{text}`: unknown uniqueness keyword `{keyword}`, expected `unique` or `non_unique`"
    )]
    UnknownKind {
        /// The whole definition text.
        text: String,
        /// The keyword found.
        keyword: String,
    },
    /// The definition lists no component.
    #[error("index definition `{text}` has no components")]
    Empty {
        /// The whole definition text.
        text: String,
    },
    /// A component names a field that does not exist.
    #[error("index definition `{text}`: component `{field}` refers to an unknown field")]
    UnknownField {
        /// The whole definition text.
        text: String,
        /// The field name.
        field: String,
    },
    /// A component has a modifier that is not asc/desc/case_sensitive/ignore_case/a length.
    #[error(
        "index definition `{text}`: unknown modifier `{modifier}` for component `{field}`, expected asc, desc, case_sensitive, ignore_case or a string length"
    )]
    UnknownModifier {
        /// The whole definition text.
        text: String,
        /// The component's field.
        field: String,
        /// The modifier found.
        modifier: String,
    },
    /// A case modifier or a length was given for a non-string field.
    #[error(
        "index definition `{text}`: modifier `{modifier}` of component `{field}` is only valid for string fields, but `{field}` is {ty}"
    )]
    StringModifierOnNonString {
        /// The whole definition text.
        text: String,
        /// The component's field.
        field: String,
        /// The field's type.
        ty: Type,
        /// The offending modifier.
        modifier: String,
    },
    /// A string length above 1024.
    #[error(
        "index definition `{text}`: string length {len} of component `{field}` exceeds {MAX_STRING_LEN}"
    )]
    LengthTooLarge {
        /// The whole definition text.
        text: String,
        /// The component's field.
        field: String,
        /// The length as written.
        len: String,
    },
    /// `build_key` got a different number of values than the definition has components.
    #[error("key needs {expected} values (one per component), got {actual}")]
    ValueCount {
        /// Number of components.
        expected: usize,
        /// Number of values given.
        actual: usize,
    },
    /// A value's type differs from its component's type.
    #[error("key component {index} (`{field}`) needs a {expected} value, got {actual}")]
    ValueType {
        /// Zero-based component index.
        index: usize,
        /// The component's field.
        field: String,
        /// The component's type.
        expected: Type,
        /// Description of the value's type.
        actual: &'static str,
    },
}

impl fmt::Display for KeyComponent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = match self.dir {
            SortDir::Asc => "asc",
            SortDir::Desc => "desc",
        };
        if self.ty == Type::String {
            let case = match self.case {
                CaseMode::Sensitive => "case_sensitive",
                CaseMode::IgnoreCase => "ignore_case",
            };
            write!(f, "{}({dir},{case},{})", self.field, self.string_len)
        } else {
            write!(f, "{}({dir})", self.field)
        }
    }
}

/// Canonical form with every modifier spelled out, e.g.
/// `unique(order_id(asc,case_sensitive,64),qty(desc))`; it parses back to the same definition.
impl fmt::Display for IndexDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            IndexKind::Unique => "unique(",
            IndexKind::NonUnique => "non_unique(",
        })?;
        for (i, c) in self.components.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{c}")?;
        }
        f.write_str(")")
    }
}
