//! Parsing of index definitions (`unique(...)`, `non_unique(...)`) and order expressions,
//! with the Go tokenizer's rules and Capillaries' error texts (spec §6.1).

use super::def::{
    CaseMode, DEFAULT_STRING_LEN, IndexDef, IndexKind, KeyComponent, KeyError, MAX_STRING_LEN,
    MIN_STRING_LEN, SortDir,
};
use crate::value::Type;

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
