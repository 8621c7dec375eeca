//! Index and order definitions and the key encoding that orders and matches rows (spec §6).
//!
//! A key is a byte string: the concatenation of one encoded part per index component. Keys
//! compare byte-wise, and lookups and distinct processing match on key *equality*, so every byte
//! produced here must be exactly what Capillaries' Go `BuildKey` produces, quirks included.

use std::fmt;
use std::io::Write as _;
use std::sync::OnceLock;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use unicode_normalization::UnicodeNormalization;

use crate::value::{Type, Value};

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

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

/// Parses an index definition, `unique(<components>)` or `non_unique(<components>)` (spec §6.1).
///
/// `fields` gives the type of each field a component may name (`None`: no such field).
pub fn parse_index_def(
    text: &str,
    fields: &dyn Fn(&str) -> Option<Type>,
) -> Result<IndexDef, KeyError> {
    let mut p = Parser::new(text)?;
    let (_, keyword) = p.ident("expected `unique(...)` or `non_unique(...)`")?;
    p.expect(Tok::LParen, "expected `(` after the uniqueness keyword")?;
    let raw = p.components(true)?;
    p.expect(Tok::Eof, "unexpected text after the definition")?;
    // Go checks the keyword only after the whole expression parsed, so syntax errors win.
    let kind = match keyword {
        "unique" => IndexKind::Unique,
        "non_unique" => IndexKind::NonUnique,
        _ => {
            return Err(KeyError::UnknownKind {
                text: text.to_owned(),
                keyword: keyword.to_owned(),
            });
        }
    };
    resolve(text, kind, &raw, fields)
}

/// Parses an order expression (`top.order`, `event_priority_order`): just `<components>`,
/// which Capillaries wraps as `non_unique(<components>)` (spec §6.1).
pub fn parse_order_expr(
    text: &str,
    fields: &dyn Fn(&str) -> Option<Type>,
) -> Result<IndexDef, KeyError> {
    let mut p = Parser::new(text)?;
    let raw = p.components(false)?;
    p.expect(Tok::Eof, "unexpected text after the order expression")?;
    resolve(text, IndexKind::NonUnique, &raw, fields)
}

/// A component as written, before field lookup.
struct RawComponent<'a> {
    field: &'a str,
    mods: Vec<RawMod<'a>>,
}

/// A modifier as written.
enum RawMod<'a> {
    Ident(&'a str),
    Int(&'a str),
}

/// Applies the semantic rules of spec §6.1 to the parsed components, in Go's order.
fn resolve(
    text: &str,
    kind: IndexKind,
    raw: &[RawComponent<'_>],
    fields: &dyn Fn(&str) -> Option<Type>,
) -> Result<IndexDef, KeyError> {
    if raw.is_empty() {
        // Go accepts `unique()` and builds empty keys; an index without components is useless
        // and every row would collide, so reject it.
        return Err(KeyError::Empty {
            text: text.to_owned(),
        });
    }
    let mut components = Vec::with_capacity(raw.len());
    for rc in raw {
        let ty = fields(rc.field).ok_or_else(|| KeyError::UnknownField {
            text: text.to_owned(),
            field: rc.field.to_owned(),
        })?;
        let mut comp = KeyComponent {
            field: rc.field.to_owned(),
            ty,
            dir: SortDir::Asc,
            case: CaseMode::Sensitive,
            string_len: DEFAULT_STRING_LEN,
        };
        let non_string = |modifier: &str| KeyError::StringModifierOnNonString {
            text: text.to_owned(),
            field: rc.field.to_owned(),
            ty,
            modifier: modifier.to_owned(),
        };
        // Repeated or contradicting modifiers are not errors in Go: the last one wins.
        for m in &rc.mods {
            match *m {
                RawMod::Ident("asc") => comp.dir = SortDir::Asc,
                RawMod::Ident("desc") => comp.dir = SortDir::Desc,
                RawMod::Ident(name @ ("case_sensitive" | "ignore_case")) => {
                    if ty != Type::String {
                        return Err(non_string(name));
                    }
                    comp.case = if name == "ignore_case" {
                        CaseMode::IgnoreCase
                    } else {
                        CaseMode::Sensitive
                    };
                }
                RawMod::Ident(other) => {
                    return Err(KeyError::UnknownModifier {
                        text: text.to_owned(),
                        field: rc.field.to_owned(),
                        modifier: other.to_owned(),
                    });
                }
                RawMod::Int(digits) => {
                    if ty != Type::String {
                        return Err(non_string(digits));
                    }
                    let too_large = || KeyError::LengthTooLarge {
                        text: text.to_owned(),
                        field: rc.field.to_owned(),
                        len: digits.to_owned(),
                    };
                    // The lexer only produces ASCII digits, so a parse failure is an overflow.
                    let len: usize = digits.parse().map_err(|_| too_large())?;
                    if len > MAX_STRING_LEN {
                        return Err(too_large());
                    }
                    comp.string_len = len.max(MIN_STRING_LEN);
                }
            }
        }
        components.push(comp);
    }
    Ok(IndexDef { kind, components })
}

/// A token of the (Go expression) syntax of definitions.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tok<'a> {
    Ident(&'a str),
    Int(&'a str),
    LParen,
    RParen,
    Comma,
    Eof,
}

/// Go keywords: the Go parser Capillaries uses cannot take them as identifiers.
const GO_KEYWORDS: [&str; 25] = [
    "break",
    "case",
    "chan",
    "const",
    "continue",
    "default",
    "defer",
    "else",
    "fallthrough",
    "for",
    "func",
    "go",
    "goto",
    "if",
    "import",
    "interface",
    "map",
    "package",
    "range",
    "return",
    "select",
    "struct",
    "switch",
    "type",
    "var",
];

/// Recursive-descent parser over a pre-lexed token list (definitions are short, load-time only).
struct Parser<'a> {
    text: &'a str,
    toks: Vec<(usize, Tok<'a>)>,
    at: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Result<Self, KeyError> {
        Ok(Self {
            text,
            toks: lex(text)?,
            at: 0,
        })
    }

    fn err(&self, pos: usize, reason: impl Into<String>) -> KeyError {
        KeyError::Syntax {
            text: self.text.to_owned(),
            pos,
            reason: reason.into(),
        }
    }

    fn peek(&self) -> (usize, Tok<'a>) {
        self.toks
            .get(self.at)
            .copied()
            .unwrap_or((self.text.len(), Tok::Eof))
    }

    fn bump(&mut self) -> (usize, Tok<'a>) {
        let t = self.peek();
        if self.at < self.toks.len() {
            self.at += 1;
        }
        t
    }

    fn expect(&mut self, want: Tok<'_>, reason: &str) -> Result<(), KeyError> {
        let (pos, tok) = self.bump();
        if tok == want {
            Ok(())
        } else {
            Err(self.err(pos, format!("{reason}, found {}", describe(tok))))
        }
    }

    fn ident(&mut self, reason: &str) -> Result<(usize, &'a str), KeyError> {
        match self.bump() {
            (pos, Tok::Ident(name)) => Ok((pos, name)),
            (pos, tok) => Err(self.err(pos, format!("{reason}, found {}", describe(tok)))),
        }
    }

    /// `component (',' component)* [',']`, then `)` if `closed`, else end of text. Go allows
    /// a trailing comma in an argument list and an empty one.
    fn components(&mut self, closed: bool) -> Result<Vec<RawComponent<'a>>, KeyError> {
        let end = if closed { Tok::RParen } else { Tok::Eof };
        let mut out = Vec::new();
        loop {
            if self.peek().1 == end {
                if closed {
                    self.bump();
                }
                return Ok(out);
            }
            let (_, field) = self.ident("expected a field name")?;
            let mut mods = Vec::new();
            if self.peek().1 == Tok::LParen {
                self.bump();
                loop {
                    match self.bump() {
                        (_, Tok::RParen) => break,
                        (_, Tok::Ident(m)) => mods.push(RawMod::Ident(m)),
                        (_, Tok::Int(m)) => mods.push(RawMod::Int(m)),
                        (pos, tok) => {
                            return Err(self.err(
                                pos,
                                format!(
                                    "expected a modifier (asc, desc, case_sensitive, ignore_case or a length) of `{field}`, found {}",
                                    describe(tok)
                                ),
                            ));
                        }
                    }
                    match self.bump() {
                        (_, Tok::Comma) => {}
                        (_, Tok::RParen) => break,
                        (pos, tok) => {
                            return Err(self.err(
                                pos,
                                format!(
                                    "expected `,` or `)` in the modifiers of `{field}`, found {}",
                                    describe(tok)
                                ),
                            ));
                        }
                    }
                }
            }
            out.push(RawComponent { field, mods });
            match self.peek() {
                (_, Tok::Comma) => {
                    self.bump();
                }
                (_, t) if t == end => {}
                (pos, tok) => {
                    return Err(self.err(
                        pos,
                        format!(
                            "expected `,` after component `{field}`, found {}",
                            describe(tok)
                        ),
                    ));
                }
            }
        }
    }
}

/// Human description of a token for error messages.
fn describe(tok: Tok<'_>) -> String {
    match tok {
        Tok::Ident(s) => format!("`{s}`"),
        Tok::Int(s) => format!("`{s}`"),
        Tok::LParen => "`(`".to_owned(),
        Tok::RParen => "`)`".to_owned(),
        Tok::Comma => "`,`".to_owned(),
        Tok::Eof => "end of text".to_owned(),
    }
}

/// Splits a definition into tokens the way the Go scanner would for the subset we accept.
fn lex(text: &str) -> Result<Vec<(usize, Tok<'_>)>, KeyError> {
    let syntax = |pos: usize, reason: String| KeyError::Syntax {
        text: text.to_owned(),
        pos,
        reason,
    };
    let mut toks = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((pos, c)) = chars.next() {
        match c {
            // Go whitespace. Go would also insert a `;` at some newlines, which turns
            // `unique(a\n)` into a syntax error; we accept such text instead.
            ' ' | '\t' | '\r' | '\n' => {}
            '(' => toks.push((pos, Tok::LParen)),
            ')' => toks.push((pos, Tok::RParen)),
            ',' => toks.push((pos, Tok::Comma)),
            '/' if text[pos..].starts_with("/*") => {
                // Go comments are whitespace to the parser.
                let Some(close) = text[pos + 2..].find("*/") else {
                    return Err(syntax(pos, "comment not terminated".to_owned()));
                };
                let end = pos + 2 + close + 2;
                while chars.peek().is_some_and(|&(p, _)| p < end) {
                    chars.next();
                }
            }
            '/' if text[pos..].starts_with("//") => {
                while chars.peek().is_some_and(|&(_, c)| c != '\n') {
                    chars.next();
                }
            }
            c if c == '_' || c.is_alphabetic() => {
                let mut end = pos + c.len_utf8();
                while let Some(&(p, c)) = chars.peek() {
                    if c == '_' || c.is_alphanumeric() {
                        end = p + c.len_utf8();
                        chars.next();
                    } else {
                        break;
                    }
                }
                let word = &text[pos..end];
                if GO_KEYWORDS.contains(&word) {
                    // Quirk (spec §6.1): definitions are parsed as Go expressions, where a
                    // keyword cannot be an identifier, so `unique(type)` never parses.
                    return Err(syntax(
                        pos,
                        format!("`{word}` is a Go keyword and cannot name a field or modifier"),
                    ));
                }
                toks.push((pos, Tok::Ident(word)));
            }
            c if c.is_ascii_digit() => {
                let mut end = pos + 1;
                while let Some(&(p, c)) = chars.peek() {
                    if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                        end = p + 1;
                        chars.next();
                    } else {
                        break;
                    }
                }
                let lit = &text[pos..end];
                if !lit.bytes().all(|b| b.is_ascii_digit()) {
                    // Go would accept `0x40` or `1_0` as INT literals and then fail to parse
                    // them as decimal (silently giving 16); reject them instead.
                    return Err(syntax(
                        pos,
                        format!("string length `{lit}` must be a decimal integer"),
                    ));
                }
                toks.push((pos, Tok::Int(lit)));
            }
            other => {
                return Err(syntax(pos, format!("unexpected character `{other}`")));
            }
        }
    }
    Ok(toks)
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

// ---------------------------------------------------------------------------------------------
// Key encoding
// ---------------------------------------------------------------------------------------------

/// Builds the key of one row: `values[i]` is the value of `def.components[i]` (spec §6.2).
pub fn build_key(def: &IndexDef, values: &[&Value]) -> Result<Vec<u8>, KeyError> {
    let mut out = Vec::with_capacity(estimated_len(def));
    build_key_into(&mut out, def, values)?;
    Ok(out)
}

/// Appends the key of one row to `out` (see [`build_key`]); on error `out` is left unchanged.
pub fn build_key_into(
    out: &mut Vec<u8>,
    def: &IndexDef,
    values: &[&Value],
) -> Result<(), KeyError> {
    if values.len() != def.components.len() {
        return Err(KeyError::ValueCount {
            expected: def.components.len(),
            actual: values.len(),
        });
    }
    let origin = out.len();
    for (index, (comp, value)) in def.components.iter().zip(values).enumerate() {
        let start = out.len();
        match (comp.ty, value) {
            (Type::Int, Value::Int(v)) => push_int(out, *v),
            (Type::Float, Value::Float(v)) => push_float(out, *v),
            (Type::Decimal2, Value::Decimal(d)) => push_float(out, decimal_to_f64(d)),
            (Type::DateTime, Value::Time(t)) => {
                // Go: t.UnixMicro() + 62135596800000000, both with int64 wrap-around.
                let micros = t
                    .secs
                    .wrapping_mul(1_000_000)
                    .wrapping_add(i64::from(t.nanos / 1000))
                    .wrapping_add(62_135_596_800_000_000);
                push_go_020d(out, micros);
            }
            (Type::Bool, Value::Bool(b)) => out.push(if *b { b'T' } else { b'F' }),
            (Type::String, Value::Str(s)) => {
                push_string(out, s, comp.string_len, comp.case == CaseMode::IgnoreCase);
            }
            _ => {
                out.truncate(origin);
                return Err(KeyError::ValueType {
                    index,
                    field: comp.field.clone(),
                    expected: comp.ty,
                    actual: value_kind(value),
                });
            }
        }
        if comp.dir == SortDir::Desc {
            complement_hex(out, start);
        }
    }
    Ok(())
}

/// A capacity hint for a key of `def`, so that building it never reallocates in the common case.
fn estimated_len(def: &IndexDef) -> usize {
    def.components
        .iter()
        .map(|c| {
            let n = match c.ty {
                Type::Int => 21,
                Type::Float | Type::Decimal2 => 67,
                Type::DateTime => 20,
                Type::Bool => 1,
                Type::String => c.string_len,
            };
            if c.dir == SortDir::Desc { 2 * n } else { n }
        })
        .sum()
}

/// Describes a value's type for error messages: its script type name, or the Go type of an
/// intermediate-only value.
pub(crate) fn value_kind(v: &Value) -> &'static str {
    match v.column_type() {
        Some(t) => t.name(),
        None => match v {
            Value::GoInt(_) => "Go int (a len() result)",
            _ => v.go_type_name(),
        },
    }
}

/// Replaces every ASCII digit d by 9−d, leaving signs, dots, spaces and letters alone.
fn flip_digits(bytes: &mut [u8]) {
    for b in bytes {
        if b.is_ascii_digit() {
            *b = b'9' - (*b - b'0');
        }
    }
}

/// Appends `v` as exactly `width` zero-padded decimal digits (`v` must fit in `width` digits).
fn push_padded_u64(out: &mut Vec<u8>, mut v: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let mut i = buf.len();
    while v > 0 && i > 0 {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out.extend_from_slice(&buf[buf.len().saturating_sub(width)..]);
}

/// Appends Go's `fmt.Sprintf("%020d", v)`: the sign counts towards the width.
fn push_go_020d(out: &mut Vec<u8>, v: i64) {
    if v >= 0 {
        push_padded_u64(out, v.unsigned_abs(), 20);
    } else {
        out.push(b'-');
        push_padded_u64(out, v.unsigned_abs(), 19);
    }
}

/// Int part: sign char + 20 digits, digits flipped for negatives (spec §6.2).
fn push_int(out: &mut Vec<u8>, v: i64) {
    if v >= 0 {
        out.push(b'0');
        push_padded_u64(out, v.unsigned_abs(), 20);
    } else if v == i64::MIN {
        // Quirk (spec §6.2): Go negates MinInt64 back to itself and `%020d` prints it with its
        // sign, so the key is `-` + flip("-9223372036854775808"); it still sorts first.
        out.extend_from_slice(b"--0776627963145224191");
    } else {
        out.push(b'-');
        let start = out.len();
        push_padded_u64(out, v.unsigned_abs(), 20);
        flip_digits(&mut out[start..]);
    }
}

/// Float part: sign char + `%066.32f` of the absolute value, digits flipped for negatives.
fn push_float(out: &mut Vec<u8>, f: f64) {
    if f.is_nan() {
        // Quirk (spec §6.2): `NaN >= 0` is false, so NaN takes the negative branch; Go prints
        // NaN without sign and pads it with spaces, never zeros.
        out.push(b'-');
        out.resize(out.len() + 63, b' ');
        out.extend_from_slice(b"NaN");
    } else if f.is_infinite() {
        // Quirk (spec §6.2): Go's `%f` prints `+Inf` (the negative branch formats -(-Inf)),
        // space-padded.
        out.push(if f > 0.0 { b'0' } else { b'-' });
        out.resize(out.len() + 62, b' ');
        out.extend_from_slice(b"+Inf");
    } else if f >= 0.0 {
        // Quirk (spec §6.2): -0.0 passes `>= 0` but prints as `-000…0.000…`, so its key differs
        // from 0.0's. Rust's sign-aware zero padding matches Go's here.
        out.push(b'0');
        push_f66(out, f);
    } else {
        out.push(b'-');
        let start = out.len();
        push_f66(out, -f);
        flip_digits(&mut out[start..]);
    }
}

/// Appends `%066.32f`: Rust's `{:.32}` is the exact decimal expansion rounded half-to-even at
/// the 32nd digit, like Go's `strconv` (checked on ties such as 2^-33).
fn push_f66(out: &mut Vec<u8>, f: f64) {
    // Writing into a Vec<u8> cannot fail.
    let _ = write!(out, "{f:066.32}");
}

/// The nearest f64 to a decimal, as Go's shopspring `Float64()` (exact rational → nearest).
///
/// `rust_decimal`'s own `to_f64` is not correctly rounded, so small mantissas take the exact
/// fast path (both operands exactly representable, one correctly rounded division) and the rest
/// go through the decimal text and Rust's correctly rounded parser.
pub(crate) fn decimal_to_f64(d: &Decimal) -> f64 {
    let mantissa = d.mantissa();
    if mantissa == 0 {
        // Go decimals have no negative zero; a negative-zero Decimal must not give -0.0.
        return 0.0;
    }
    let scale = d.scale();
    const POW10: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    if mantissa.unsigned_abs() < (1u128 << 53)
        && let Some(p) = POW10.get(scale as usize)
    {
        return mantissa as f64 / p;
    }
    let mut buf = StackText::default();
    if fmt::write(&mut buf, format_args!("{d}")).is_ok()
        && let Ok(f) = buf.as_str().parse::<f64>()
    {
        return f;
    }
    // Unreachable in practice (the text always fits and parses); stay total anyway.
    rust_decimal::prelude::ToPrimitive::to_f64(d).unwrap_or(0.0)
}

/// A small fixed buffer for formatting a Decimal without a heap allocation.
struct StackText {
    buf: [u8; 64],
    len: usize,
}

impl Default for StackText {
    fn default() -> Self {
        Self {
            buf: [0; 64],
            len: 0,
        }
    }
}

impl StackText {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// String part: the first `len` bytes of (NFD → drop Mn → NFC)(s) followed by spaces, then
/// Go-upper-cased for `ignore_case` (spec §6.2).
///
/// Quirk (spec §6.2): Go pads to `len` *runes* and then cuts at `len` *bytes*. The padded text
/// always has at least `len` bytes, so that equals the first `len` bytes of the normalised text
/// followed by endless spaces; a multi-byte character may be cut in half, and strings that
/// share their first `len` bytes get equal keys.
fn push_string(out: &mut Vec<u8>, s: &str, len: usize, upper: bool) {
    if s.is_ascii() {
        // Fast path: ASCII is unchanged by NFD/NFC, has no Mn, and upper-cases byte for byte.
        let start = out.len();
        let bytes = s.as_bytes();
        out.extend_from_slice(&bytes[..bytes.len().min(len)]);
        if upper {
            out[start..].make_ascii_uppercase();
        }
        out.resize(start + len, b' ');
        return;
    }
    // Bytes of normalised text consumed so far (before upper-casing, which may change widths).
    let mut raw = 0;
    for c in s.nfd().filter(|&c| !is_mn(c)).nfc() {
        let w = c.len_utf8();
        if raw + w > len {
            let cut = len - raw;
            if upper {
                // Go's ToUpper decodes each byte of a cut character as an invalid rune and
                // writes U+FFFD for each of them.
                for _ in 0..cut {
                    push_char(out, '\u{FFFD}');
                }
            } else {
                let mut buf = [0u8; 4];
                out.extend_from_slice(&c.encode_utf8(&mut buf).as_bytes()[..cut]);
            }
            return;
        }
        push_char(out, if upper { go_to_upper(c) } else { c });
        raw += w;
        if raw == len {
            return;
        }
    }
    out.resize(out.len() + (len - raw), b' ');
}

/// Appends the UTF-8 encoding of `c`.
fn push_char(out: &mut Vec<u8>, c: char) {
    let mut buf = [0u8; 4];
    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

/// Go's `unicode.ToUpper`: the *simple* (one-to-one) upper-case mapping.
///
/// Rust's `to_uppercase` applies the full mapping (`ß` → `SS`); where that yields several
/// characters, the simple mapping is the character itself except for the Greek letters with
/// ypogegrammeni, which map to their title-case forms.
fn go_to_upper(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_uppercase();
    }
    let mut up = c.to_uppercase();
    if up.len() == 1 {
        return up.next().unwrap_or(c);
    }
    let simple = match c {
        '\u{1F80}'..='\u{1F87}' | '\u{1F90}'..='\u{1F97}' | '\u{1FA0}'..='\u{1FA7}' => {
            u32::from(c) + 8
        }
        '\u{1FB3}' => 0x1FBC,
        '\u{1FC3}' => 0x1FCC,
        '\u{1FF3}' => 0x1FFC,
        _ => return c,
    };
    char::from_u32(simple).unwrap_or(c)
}

/// Whether `c` has general category Mn (non-spacing mark), as Go's `unicode.Mn`.
///
/// `unicode_normalization::char::is_combining_mark` also covers Mc and Me, which Go keeps, so
/// the exact Mn ranges come from regex-syntax's Unicode tables (built once).
fn is_mn(c: char) -> bool {
    if c < '\u{300}' {
        // The first Mn character is U+0300.
        return false;
    }
    match mn_ranges() {
        Some(ranges) => ranges
            .binary_search_by(|&(lo, hi)| {
                if hi < c {
                    std::cmp::Ordering::Less
                } else if lo > c {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok(),
        None => unicode_normalization::char::is_combining_mark(c),
    }
}

/// The sorted ranges of general category Mn, or `None` if regex-syntax could not supply them.
fn mn_ranges() -> Option<&'static [(char, char)]> {
    static RANGES: OnceLock<Option<Vec<(char, char)>>> = OnceLock::new();
    RANGES
        .get_or_init(|| {
            use regex_syntax::hir::{Class, HirKind};
            let hir = regex_syntax::Parser::new().parse(r"\p{Mn}").ok()?;
            match hir.kind() {
                HirKind::Class(Class::Unicode(cls)) => {
                    Some(cls.ranges().iter().map(|r| (r.start(), r.end())).collect())
                }
                _ => None,
            }
        })
        .as_deref()
}

/// `desc`: replaces the bytes from `start` on by the lower-case hex of 255−b (spec §6.2).
fn complement_hex(out: &mut Vec<u8>, start: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let n = out.len() - start;
    out.resize(start + 2 * n, 0);
    // Back to front, so that no byte is overwritten before it has been read.
    for i in (0..n).rev() {
        let b = 255 - out[start + i];
        out[start + 2 * i] = HEX[usize::from(b >> 4)];
        out[start + 2 * i + 1] = HEX[usize::from(b & 0xf)];
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::value::Time;

    /// The field set of most tests: `s` string, `i` int, `f` float, `d` decimal2, `t` datetime,
    /// `b` bool.
    fn fields(name: &str) -> Option<Type> {
        match name {
            "s" | "s2" | "order_id" => Some(Type::String),
            "i" => Some(Type::Int),
            "f" => Some(Type::Float),
            "d" => Some(Type::Decimal2),
            "t" => Some(Type::DateTime),
            "b" => Some(Type::Bool),
            _ => None,
        }
    }

    fn def(text: &str) -> IndexDef {
        parse_index_def(text, &fields).unwrap()
    }

    fn key1(text: &str, v: Value) -> String {
        String::from_utf8(build_key(&def(text), &[&v]).unwrap()).unwrap()
    }

    fn key_bytes(text: &str, v: Value) -> Vec<u8> {
        build_key(&def(text), &[&v]).unwrap()
    }

    fn dec(s: &str) -> Value {
        Value::Decimal(s.parse().unwrap())
    }

    /// `s` followed by spaces up to `len` bytes.
    fn pad(s: &str, len: usize) -> String {
        format!("{s}{}", " ".repeat(len - s.len()))
    }

    // ---- parsing ----

    #[test]
    fn parses_defaults_and_canonical_text() {
        let d = def("unique(order_id)");
        assert_eq!(d.kind, IndexKind::Unique);
        assert_eq!(
            d.components,
            vec![KeyComponent {
                field: "order_id".into(),
                ty: Type::String,
                dir: SortDir::Asc,
                case: CaseMode::Sensitive,
                string_len: 64,
            }]
        );
        assert_eq!(d.to_string(), "unique(order_id(asc,case_sensitive,64))");
        assert_eq!(
            def("non_unique(i, f(desc))").to_string(),
            "non_unique(i(asc),f(desc))"
        );
    }

    #[test]
    fn whitespace_modifiers_and_length_rules() {
        let d = def(" non_unique (\t s ( desc , ignore_case , 10 ) ,\n s2(1024, asc,) , ) ");
        assert_eq!(d.kind, IndexKind::NonUnique);
        let (a, b) = (&d.components[0], &d.components[1]);
        assert_eq!(
            (a.dir, a.case, a.string_len),
            (SortDir::Desc, CaseMode::IgnoreCase, 16)
        );
        assert_eq!(
            (b.dir, b.case, b.string_len),
            (SortDir::Asc, CaseMode::Sensitive, 1024)
        );
        // Last modifier wins, as in Go; `s()` is just the defaults.
        let d = def("unique(s(desc,asc,ignore_case,case_sensitive,20,30),i())");
        assert_eq!(d.to_string(), "unique(s(asc,case_sensitive,30),i(asc))");
    }

    #[test]
    fn display_parses_back() {
        for text in [
            "unique(s)",
            "non_unique(s(desc,ignore_case,5), i(desc), f, d, t(desc), b)",
        ] {
            let d = def(text);
            assert_eq!(def(&d.to_string()), d);
        }
    }

    #[test]
    fn order_expressions() {
        let nrs = |n: &str| match n {
            "run_id" | "run_status" | "node_status" => Some(Type::Int),
            "run_is_current" => Some(Type::Bool),
            _ => None,
        };
        let d = parse_order_expr("run_is_current(desc), node_status, run_id(desc)", &nrs).unwrap();
        assert_eq!(d.kind, IndexKind::NonUnique);
        assert_eq!(
            d.to_string(),
            "non_unique(run_is_current(desc),node_status(asc),run_id(desc))"
        );
        assert!(matches!(
            parse_order_expr("", &nrs),
            Err(KeyError::Empty { .. })
        ));
        assert!(matches!(
            parse_order_expr("run_id), unique(run_id", &nrs),
            Err(KeyError::Syntax { .. })
        ));
    }

    #[test]
    fn parse_errors() {
        let err = |t: &str| parse_index_def(t, &fields).unwrap_err();
        assert!(
            matches!(err("unique(nope)"), KeyError::UnknownField { field, .. } if field == "nope")
        );
        assert!(
            matches!(err("uniq(s)"), KeyError::UnknownKind { keyword, .. } if keyword == "uniq")
        );
        assert!(matches!(
            err("unique(i(ignore_case))"),
            KeyError::StringModifierOnNonString { ty: Type::Int, .. }
        ));
        assert!(matches!(
            err("unique(f(case_sensitive))"),
            KeyError::StringModifierOnNonString { .. }
        ));
        assert!(matches!(
            err("unique(b(20))"),
            KeyError::StringModifierOnNonString { .. }
        ));
        assert!(matches!(
            err("unique(s(1025))"),
            KeyError::LengthTooLarge { .. }
        ));
        assert!(matches!(
            err("unique(s(99999999999999999999999))"),
            KeyError::LengthTooLarge { .. }
        ));
        assert!(
            matches!(err("unique(s(up))"), KeyError::UnknownModifier { modifier, .. } if modifier == "up")
        );
        assert!(matches!(err("unique()"), KeyError::Empty { .. }));
        for bad in [
            "",
            "unique",
            "unique(s",
            "unique(s) x",
            "unique(s.x)",
            "unique(s(0x40))",
            "unique(s(1.5))",
            "unique(s(-5))",
            "unique(s(\"x\"))",
            "unique(s(desc(1)))",
            "unique(,s)",
            "unique(s,,i)",
            "unique(s i)",
            "unique(type)",
            "(s)",
        ] {
            assert!(
                matches!(err(bad), KeyError::Syntax { .. }),
                "{bad}: {:?}",
                err(bad)
            );
        }
        // Messages name the text and the component.
        let msg = err("unique(s, i(desc, 20))").to_string();
        assert!(
            msg.contains("unique(s, i(desc, 20))") && msg.contains("`i`"),
            "{msg}"
        );
    }

    // ---- encoding: examples of spec §6.2 ----

    #[test]
    fn int_keys() {
        assert_eq!(key1("unique(i)", Value::Int(5)), "000000000000000000005");
        assert_eq!(key1("unique(i)", Value::Int(-5)), "-99999999999999999994");
        assert_eq!(key1("unique(i)", Value::Int(0)), "000000000000000000000");
        assert_eq!(
            key1("unique(i)", Value::Int(i64::MAX)),
            "009223372036854775807"
        );
        assert_eq!(
            key1("unique(i)", Value::Int(-i64::MAX)),
            "-90776627963145224192"
        );
        assert_eq!(
            key1("unique(i)", Value::Int(i64::MIN)),
            "--0776627963145224191"
        );
        assert!(key1("unique(i)", Value::Int(i64::MIN)) < key1("unique(i)", Value::Int(-i64::MAX)));
    }

    #[test]
    fn float_keys() {
        let frac0 = "0".repeat(32);
        assert_eq!(
            key1("unique(f)", Value::Float(0.0)),
            format!("0{:0>66}", format!("0.{frac0}"))
        );
        assert_eq!(
            key1("unique(f)", Value::Float(1.5)),
            format!("0{:0>66}", format!("1.5{}", "0".repeat(31)))
        );
        assert_eq!(
            key1("unique(f)", Value::Float(-1.5)),
            format!("-{}8.4{}", "9".repeat(32), "9".repeat(31))
        );
        // Exact expansion, correctly rounded at 32 digits.
        assert_eq!(
            key1("unique(f)", Value::Float(0.1)),
            format!("0{:0>66}", "0.10000000000000000555111512312578")
        );
        let neg_zero = key1("unique(f)", Value::Float(-0.0));
        assert_eq!(neg_zero, format!("0-{}0.{frac0}", "0".repeat(31)));
        assert_ne!(neg_zero, key1("unique(f)", Value::Float(0.0)));
        assert!(neg_zero < key1("unique(f)", Value::Float(0.0)));
        assert!(key1("unique(f)", Value::Float(-1e-300)) < neg_zero);
        assert_eq!(
            key1("unique(f)", Value::Float(f64::NAN)),
            format!("-{}NaN", " ".repeat(63))
        );
        assert_eq!(
            key1("unique(f)", Value::Float(f64::INFINITY)),
            format!("0{}+Inf", " ".repeat(62))
        );
        assert_eq!(
            key1("unique(f)", Value::Float(f64::NEG_INFINITY)),
            format!("-{}+Inf", " ".repeat(62))
        );
        // >= 1e33 gets longer than 67 bytes (spec: ordering breaks; not our concern).
        assert_eq!(key1("unique(f)", Value::Float(1e40)).len(), 1 + 41 + 1 + 32);
    }

    #[test]
    fn decimal_keys_go_through_f64() {
        assert_eq!(
            key1("unique(d)", dec("1.10")),
            key1("unique(f)", Value::Float(1.1))
        );
        assert_eq!(
            key1("unique(d)", dec("-2.675")),
            key1("unique(f)", Value::Float(-2.675))
        );
        assert_eq!(
            key1("unique(d)", dec("-0.00")),
            key1("unique(f)", Value::Float(0.0))
        );
        // Larger than the fast path: 2^53 + 1 rounds to even, and a long fraction.
        assert_eq!(
            key1("unique(d)", dec("9007199254740993")),
            key1("unique(f)", Value::Float(9007199254740992.0))
        );
        let long = "1234567890.123456789012345678";
        assert_eq!(
            key1("unique(d)", dec(long)),
            key1("unique(f)", Value::Float(long.parse().unwrap()))
        );
    }

    #[test]
    fn decimal_to_f64_is_correctly_rounded() {
        for s in [
            "0.1",
            "2.675",
            "1.005",
            "-123456.78",
            "0.0000000000000000000000000001",
            "79228162514264337593543950335",
            "-7.9228162514264337593543950335",
            "1e-3",
        ] {
            let d: Decimal = match s.parse() {
                Ok(d) => d,
                Err(_) => Decimal::from_scientific(s).unwrap(),
            };
            assert_eq!(
                decimal_to_f64(&d),
                d.to_string().parse::<f64>().unwrap(),
                "{s}"
            );
        }
    }

    #[test]
    fn datetime_and_bool_keys() {
        assert_eq!(
            key1("unique(t)", Value::Time(Time::ZERO)),
            "00000000000000000000"
        );
        assert_eq!(
            key1("unique(t)", Value::Time(Time::from_unix_millis(0))),
            "00062135596800000000"
        );
        let t = Time {
            secs: 1,
            nanos: 123_456_789,
            zone: Some(Arc::new(crate::value::Zone {
                offset: 3600,
                name: Arc::from("CET"),
            })),
        };
        // The zone does not matter, sub-microsecond digits are dropped.
        assert_eq!(key1("unique(t)", Value::Time(t)), "00062135596801123456");
        let before_year_1 = Time {
            secs: Time::ZERO.secs - 1,
            nanos: 0,
            zone: None,
        };
        assert_eq!(
            key1("unique(t)", Value::Time(before_year_1)),
            "-0000000000001000000"
        );
        assert_eq!(key1("unique(b)", Value::Bool(true)), "T");
        assert_eq!(key1("unique(b)", Value::Bool(false)), "F");
    }

    #[test]
    fn string_keys_pad_and_strip_accents() {
        assert_eq!(key1("unique(s)", Value::str("abc")), pad("abc", 64));
        assert_eq!(key1("unique(s(16))", Value::str("")), pad("", 16));
        assert_eq!(key1("unique(s)", Value::str("café")), pad("cafe", 64));
        // Decomposed input gives the same key as precomposed.
        assert_eq!(
            key1("unique(s)", Value::str("cafe\u{301}")),
            pad("cafe", 64)
        );
        assert_eq!(
            key1("unique(s)", Value::str("Ångström")),
            pad("Angstrom", 64)
        );
        // Only Mn goes: Mc (Devanagari visarga) and Me (enclosing circle) stay, NFC applies.
        assert_eq!(
            key1("unique(s(16))", Value::str("क\u{903}")),
            pad("क\u{903}", 16)
        );
        assert_eq!(key1("unique(s(16))", Value::str("क\u{941}")), pad("क", 16));
        assert_eq!(
            key1("unique(s(16))", Value::str("a\u{20DD}")),
            pad("a\u{20DD}", 16)
        );
        // Hangul jamo recompose to the syllable (NFC after NFD).
        assert_eq!(
            key1("unique(s(16))", Value::str("\u{1100}\u{1161}")),
            pad("가", 16)
        );
    }

    #[test]
    fn mn_table_is_exact() {
        let ranges = mn_ranges().expect("regex-syntax supplies \\p{Mn}");
        assert!(ranges.len() > 100);
        assert!(is_mn('\u{301}') && is_mn('\u{941}') && is_mn('\u{345}'));
        assert!(!is_mn('\u{903}') && !is_mn('\u{20DD}') && !is_mn('a') && !is_mn('é'));
    }

    #[test]
    fn string_keys_cut_at_l_bytes() {
        // Quirk: long strings sharing the first L bytes collide.
        let a = format!("{}x", "a".repeat(64));
        let b = format!("{}y", "a".repeat(64));
        assert_eq!(
            key1("unique(s)", Value::str(&a)),
            key1("unique(s)", Value::str(&b))
        );
        assert_eq!(key1("unique(s)", Value::str(&a)), "a".repeat(64));
        // A 2-byte character straddling byte 64 is cut in half.
        let s = format!("{}ж", "a".repeat(63));
        let mut want = "a".repeat(63).into_bytes();
        want.push(0xD0);
        assert_eq!(key_bytes("unique(s)", Value::str(&s)), want);
        // Rune padding then byte cut: 20 two-byte runes fill 16 bytes exactly.
        assert_eq!(
            key1("unique(s(16))", Value::str(&"ж".repeat(20))),
            "ж".repeat(8)
        );
        assert_eq!(
            key1("unique(s(16))", Value::str(&"ж".repeat(3))),
            pad(&"ж".repeat(3), 16)
        );
        // ignore_case: the cut byte becomes U+FFFD per byte, so the part is longer than L.
        let s = format!("{}€", "a".repeat(62));
        assert_eq!(
            key1("unique(s(ignore_case))", Value::str(&s)),
            format!("{}\u{FFFD}\u{FFFD}", "A".repeat(62))
        );
    }

    #[test]
    fn ignore_case_keys() {
        let k = |s: &str| key1("unique(s(ignore_case))", Value::str(s));
        assert_eq!(k("Hello World"), k("hELLO wORLD"));
        assert_eq!(k("hello"), pad("HELLO", 64));
        assert_eq!(k("žluťoučký"), k("ZLUTOUCKY"));
        // Go's simple mapping: ß stays, ı becomes I (one byte shorter), ﬀ stays.
        assert_eq!(k("straße"), pad("STRAßE", 64));
        assert_eq!(k("ı"), pad("I", 63));
        assert_eq!(k("ﬀ"), pad("ﬀ", 64));
        assert_eq!(go_to_upper('\u{1F80}'), '\u{1F88}');
        assert_eq!(go_to_upper('\u{1FB3}'), '\u{1FBC}');
        assert_eq!(go_to_upper('ǆ'), 'Ǆ');
        assert_eq!(go_to_upper('ǅ'), 'Ǆ');
        assert_ne!(
            key1("unique(s)", Value::str("Hello")),
            key1("unique(s)", Value::str("hello"))
        );
    }

    #[test]
    fn desc_and_multi_component_keys() {
        let k = key1("unique(i(desc))", Value::Int(5));
        assert_eq!(k, format!("{}ca", "cf".repeat(20)));
        assert_eq!(key1("unique(b(desc))", Value::Bool(true)), "ab");
        let d = def("unique(s(16), i(desc), b)");
        let key = build_key(
            &d,
            &[&Value::str("x"), &Value::Int(-5), &Value::Bool(false)],
        )
        .unwrap();
        let mut want = pad("x", 16).into_bytes();
        want.extend(
            "-99999999999999999994"
                .bytes()
                .flat_map(|b| format!("{:02x}", 255 - b).into_bytes()),
        );
        want.push(b'F');
        assert_eq!(key, want);
        // build_key_into appends.
        let mut out = b"prefix".to_vec();
        build_key_into(
            &mut out,
            &d,
            &[&Value::str("x"), &Value::Int(-5), &Value::Bool(false)],
        )
        .unwrap();
        assert_eq!(&out[6..], &want[..]);
    }

    #[test]
    fn value_errors() {
        let d = def("unique(s, i)");
        let mut out = b"keep".to_vec();
        let e = build_key_into(&mut out, &d, &[&Value::str("a"), &Value::Float(1.0)]).unwrap_err();
        assert_eq!(
            e,
            KeyError::ValueType {
                index: 1,
                field: "i".into(),
                expected: Type::Int,
                actual: "float",
            }
        );
        assert_eq!(out, b"keep");
        let e = build_key(&d, &[&Value::str("a"), &Value::GoInt(1)]).unwrap_err();
        assert!(e.to_string().contains("len()"), "{e}");
        assert!(matches!(
            build_key(&d, &[&Value::str("a")]),
            Err(KeyError::ValueCount {
                expected: 2,
                actual: 1
            })
        ));
        assert!(build_key(&def("unique(t)"), &[&Value::Month(1)]).is_err());
    }

    // ---- ordering ----

    /// Asserts that ascending keys of `field` follow `sorted`, and that desc keys reverse it.
    fn assert_sorted_keys(field: &str, sorted: &[Value]) {
        let text = format!("unique({field})");
        let d = def(&text);
        let keys: Vec<Vec<u8>> = sorted
            .iter()
            .map(|v| build_key(&d, &[v]).unwrap())
            .collect();
        for w in keys.windows(2) {
            assert!(
                w[0] < w[1],
                "{text}: {:?} !< {:?}",
                String::from_utf8_lossy(&w[0]),
                String::from_utf8_lossy(&w[1])
            );
        }
        let desc = format!("unique({field}(desc))");
        let d = def(&desc);
        let keys: Vec<Vec<u8>> = sorted
            .iter()
            .map(|v| build_key(&d, &[v]).unwrap())
            .collect();
        for w in keys.windows(2) {
            assert!(w[0] > w[1], "{desc}");
        }
    }

    #[test]
    fn keys_sort_like_values() {
        assert_sorted_keys(
            "i",
            &[i64::MIN, -i64::MAX, -100, -99, -1, 0, 1, 9, 10, i64::MAX].map(Value::Int),
        );
        assert_sorted_keys(
            "f",
            &[
                -1e32, -1e10, -1.5, -1.25, -1e-30, 0.0, 1e-30, 0.1, 1.0, 1.5, 2.0, 1e32,
            ]
            .map(Value::Float),
        );
        assert_sorted_keys(
            "d",
            &[
                "-1000000.01",
                "-1.5",
                "-0.01",
                "0",
                "0.01",
                "0.1",
                "1",
                "99999999.99",
            ]
            .map(dec),
        );
        assert_sorted_keys(
            "t",
            &[-62_135_596_800_000, -1, 0, 1, 1_700_000_000_000]
                .map(|ms| Value::Time(Time::from_unix_millis(ms))),
        );
        assert_sorted_keys("b", &[Value::Bool(false), Value::Bool(true)]);
        assert_sorted_keys(
            "s",
            &["", "A", "B", "a", "aa", "ab", "b", "zzz"].map(Value::str),
        );
    }

    proptest! {
        #[test]
        fn int_key_order_is_value_order(a: i64, b: i64) {
            let d = def("unique(i)");
            let (ka, kb) = (build_key(&d, &[&Value::Int(a)]).unwrap(), build_key(&d, &[&Value::Int(b)]).unwrap());
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
        }

        #[test]
        fn float_key_order_is_value_order(
            a in prop_oneof![-1e30f64..1e30, -1e3f64..1e3, prop::num::f64::NORMAL.prop_filter("small", |x| x.abs() < 1e30)],
            b in prop_oneof![-1e30f64..1e30, -1e3f64..1e3, prop::num::f64::NORMAL.prop_filter("small", |x| x.abs() < 1e30)],
        ) {
            // -0.0 has its own key (tested above); compare it as 0.0 here.
            let (a, b) = (if a == 0.0 { 0.0 } else { a }, if b == 0.0 { 0.0 } else { b });
            let d = def("unique(f)");
            let ka = build_key(&d, &[&Value::Float(a)]).unwrap();
            let kb = build_key(&d, &[&Value::Float(b)]).unwrap();
            let by_value = a.partial_cmp(&b).unwrap();
            if a.abs() >= 1e-15 && b.abs() >= 1e-15 || a == 0.0 || b == 0.0 {
                // Distinct doubles of this size differ within 32 fraction digits.
                if a == 0.0 && b.abs() < 1e-32 || b == 0.0 && a.abs() < 1e-32 {
                    prop_assert!(ka.cmp(&kb) == by_value || ka == kb);
                } else {
                    prop_assert_eq!(ka.cmp(&kb), by_value);
                }
            } else {
                // Below 1e-32 values round to the same key: order is never reversed.
                prop_assert!(ka.cmp(&kb) == by_value || ka == kb);
            }
            // Desc reverses equal-length parts.
            let dd = def("unique(f(desc))");
            let da = build_key(&dd, &[&Value::Float(a)]).unwrap();
            let db = build_key(&dd, &[&Value::Float(b)]).unwrap();
            prop_assert_eq!(da.cmp(&db), ka.cmp(&kb).reverse());
        }

        #[test]
        fn ascii_string_key_order(a in "[a-zA-Z0-9]{0,70}", b in "[a-zA-Z0-9]{0,70}") {
            let d = def("unique(s)");
            let ka = build_key(&d, &[&Value::str(&a)]).unwrap();
            let kb = build_key(&d, &[&Value::str(&b)]).unwrap();
            let (ta, tb) = (&a.as_bytes()[..a.len().min(64)], &b.as_bytes()[..b.len().min(64)]);
            prop_assert_eq!(ka.cmp(&kb), ta.cmp(tb));
        }

        #[test]
        fn non_ascii_string_key_has_l_bytes(s in "\\PC{0,80}") {
            let d = def("unique(s(20))");
            let k = build_key(&d, &[&Value::str(&s)]).unwrap();
            prop_assert_eq!(k.len(), 20);
            // ignore_case never panics and only grows through U+FFFD or case changes.
            let d = def("unique(s(20, ignore_case))");
            build_key(&d, &[&Value::str(&s)]).unwrap();
        }
    }
}
