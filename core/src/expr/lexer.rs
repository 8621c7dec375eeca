//! A port of Go's `go/scanner` for single expressions: same tokens, same automatic semicolon
//! insertion and same error messages, so parse errors read like Capillaries' (spec §5.2).

use std::fmt;

/// A Go token kind (the subset of `go/token` an expression scanner can produce).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tok {
    Illegal,
    Eof,
    Comment,
    Ident,
    Int,
    Float,
    Imag,
    Char,
    String,
    Add,
    Sub,
    Mul,
    Quo,
    Rem,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    AndNot,
    AddAssign,
    SubAssign,
    MulAssign,
    QuoAssign,
    RemAssign,
    AndAssign,
    OrAssign,
    XorAssign,
    ShlAssign,
    ShrAssign,
    AndNotAssign,
    LAnd,
    LOr,
    Arrow,
    Inc,
    Dec,
    Eql,
    Lss,
    Gtr,
    Assign,
    Not,
    Neq,
    Leq,
    Geq,
    Define,
    Ellipsis,
    LParen,
    LBrack,
    LBrace,
    Comma,
    Period,
    RParen,
    RBrack,
    RBrace,
    Semicolon,
    Colon,
    Tilde,
    // Keywords.
    Break,
    Case,
    Chan,
    Const,
    Continue,
    Default,
    Defer,
    Else,
    Fallthrough,
    For,
    Func,
    Go,
    Goto,
    If,
    Import,
    Interface,
    Map,
    Package,
    Range,
    Return,
    Select,
    Struct,
    Switch,
    Type,
    Var,
}

/// The 25 Go keywords, in `go/token` order.
const KEYWORDS: [(&str, Tok); 25] = [
    ("break", Tok::Break),
    ("case", Tok::Case),
    ("chan", Tok::Chan),
    ("const", Tok::Const),
    ("continue", Tok::Continue),
    ("default", Tok::Default),
    ("defer", Tok::Defer),
    ("else", Tok::Else),
    ("fallthrough", Tok::Fallthrough),
    ("for", Tok::For),
    ("func", Tok::Func),
    ("go", Tok::Go),
    ("goto", Tok::Goto),
    ("if", Tok::If),
    ("import", Tok::Import),
    ("interface", Tok::Interface),
    ("map", Tok::Map),
    ("package", Tok::Package),
    ("range", Tok::Range),
    ("return", Tok::Return),
    ("select", Tok::Select),
    ("struct", Tok::Struct),
    ("switch", Tok::Switch),
    ("type", Tok::Type),
    ("var", Tok::Var),
];

impl Tok {
    /// Go's `token.Token.String()`.
    pub(crate) fn text(self) -> &'static str {
        match self {
            Self::Illegal => "ILLEGAL",
            Self::Eof => "EOF",
            Self::Comment => "COMMENT",
            Self::Ident => "IDENT",
            Self::Int => "INT",
            Self::Float => "FLOAT",
            Self::Imag => "IMAG",
            Self::Char => "CHAR",
            Self::String => "STRING",
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
            Self::AddAssign => "+=",
            Self::SubAssign => "-=",
            Self::MulAssign => "*=",
            Self::QuoAssign => "/=",
            Self::RemAssign => "%=",
            Self::AndAssign => "&=",
            Self::OrAssign => "|=",
            Self::XorAssign => "^=",
            Self::ShlAssign => "<<=",
            Self::ShrAssign => ">>=",
            Self::AndNotAssign => "&^=",
            Self::LAnd => "&&",
            Self::LOr => "||",
            Self::Arrow => "<-",
            Self::Inc => "++",
            Self::Dec => "--",
            Self::Eql => "==",
            Self::Lss => "<",
            Self::Gtr => ">",
            Self::Assign => "=",
            Self::Not => "!",
            Self::Neq => "!=",
            Self::Leq => "<=",
            Self::Geq => ">=",
            Self::Define => ":=",
            Self::Ellipsis => "...",
            Self::LParen => "(",
            Self::LBrack => "[",
            Self::LBrace => "{",
            Self::Comma => ",",
            Self::Period => ".",
            Self::RParen => ")",
            Self::RBrack => "]",
            Self::RBrace => "}",
            Self::Semicolon => ";",
            Self::Colon => ":",
            Self::Tilde => "~",
            kw => KEYWORDS
                .iter()
                .find(|(_, t)| *t == kw)
                .map_or("ILLEGAL", |(name, _)| name),
        }
    }

    /// Go's `Token.IsLiteral()`: identifiers and basic literals.
    pub(crate) fn is_literal(self) -> bool {
        matches!(
            self,
            Self::Ident | Self::Int | Self::Float | Self::Imag | Self::Char | Self::String
        )
    }

    /// Go's binary operator precedence (`Token.Precedence()`), 0 for non-operators.
    pub(crate) fn precedence(self) -> u8 {
        match self {
            Self::LOr => 1,
            Self::LAnd => 2,
            Self::Eql | Self::Neq | Self::Lss | Self::Leq | Self::Gtr | Self::Geq => 3,
            Self::Add | Self::Sub | Self::Or | Self::Xor => 4,
            Self::Mul
            | Self::Quo
            | Self::Rem
            | Self::Shl
            | Self::Shr
            | Self::And
            | Self::AndNot => 5,
            _ => 0,
        }
    }
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text())
    }
}

/// A source position: byte offset, 1-based line and 1-based byte column (Go's `token.Position`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct Pos {
    pub(crate) line: u32,
    pub(crate) col: u32,
    pub(crate) offset: usize,
}

/// One scanned token: kind, position and literal text (`"\n"` for an inserted semicolon).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Token<'s> {
    pub(crate) tok: Tok,
    pub(crate) pos: Pos,
    pub(crate) lit: &'s str,
}

/// A scanner error (Go records them all, unlike parser errors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ScanError {
    pub(crate) pos: Pos,
    pub(crate) msg: String,
}

/// Go's byte-order mark, skipped at the very start and an error anywhere else.
const BOM: char = '\u{FEFF}';

/// The scanner: Go's `scanner.Scanner` in `ScanComments` mode over one string.
pub(crate) struct Lexer<'s> {
    src: &'s str,
    /// Current character, `None` at EOF.
    ch: Option<char>,
    /// Byte offset of `ch`.
    offset: usize,
    /// Byte offset of the character after `ch`.
    rd_offset: usize,
    /// Byte offset where the current line starts.
    line_offset: usize,
    line: u32,
    insert_semi: bool,
    /// Position of an artificial `;` owed after a `/*…*/` comment containing a newline.
    nl_pos: Option<Pos>,
    pub(crate) errors: Vec<ScanError>,
}

fn is_letter(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || (!c.is_ascii() && c.is_alphabetic())
}

fn is_digit(c: char) -> bool {
    c.is_ascii_digit() || (!c.is_ascii() && c.is_numeric())
}

fn lower(c: Option<char>) -> Option<char> {
    c.map(|c| c.to_ascii_lowercase())
}

fn digit_val(c: Option<char>) -> u32 {
    match c {
        Some(c @ '0'..='9') => c as u32 - '0' as u32,
        Some(c @ 'a'..='f') => c as u32 - 'a' as u32 + 10,
        Some(c @ 'A'..='F') => c as u32 - 'A' as u32 + 10,
        _ => 16,
    }
}

/// Go's `%#U` of a rune: `U+0023 '#'` (without the quoted form for non-printables).
pub(crate) fn sharp_u(c: char) -> String {
    if c.is_control() {
        format!("U+{:04X}", c as u32)
    } else {
        format!("U+{:04X} '{c}'", c as u32)
    }
}

/// Go's `%q` of a rune, enough for the characters that show up in scanner errors.
fn quote_rune(c: Option<char>) -> String {
    match c {
        None => "'\\uffffffff'".to_owned(),
        Some('\'') => "'\\''".to_owned(),
        Some('\\') => "'\\\\'".to_owned(),
        Some('\n') => "'\\n'".to_owned(),
        Some('\t') => "'\\t'".to_owned(),
        Some('\r') => "'\\r'".to_owned(),
        Some(c) if c.is_control() => format!("'\\x{:02x}'", c as u32),
        Some(c) => format!("'{c}'"),
    }
}

fn litname(prefix: char) -> &'static str {
    match prefix {
        'x' => "hexadecimal literal",
        'o' | '0' => "octal literal",
        'b' => "binary literal",
        _ => "decimal literal",
    }
}

/// Index of the first misplaced `_` in a number literal, Go's `invalidSep`.
fn invalid_sep(x: &str) -> Option<usize> {
    let b = x.as_bytes();
    let mut x1 = ' ';
    let mut d = '.';
    let mut i = 0;
    if b.len() >= 2 && b[0] == b'0' {
        x1 = (b[1] as char).to_ascii_lowercase();
        if x1 == 'x' || x1 == 'o' || x1 == 'b' {
            d = '0';
            i = 2;
        }
    }
    while i < b.len() {
        let p = d;
        d = b[i] as char;
        if d == '_' {
            if p != '0' {
                return Some(i);
            }
        } else if d.is_ascii_digit() || (x1 == 'x' && d.is_ascii_hexdigit()) {
            d = '0';
        } else {
            if p == '_' {
                return Some(i - 1);
            }
            d = '.';
        }
        i += 1;
    }
    if d == '_' {
        return Some(b.len() - 1);
    }
    None
}

impl<'s> Lexer<'s> {
    /// A scanner positioned at the first token of `src` (a leading BOM is skipped, like Go).
    pub(crate) fn new(src: &'s str) -> Self {
        let mut l = Self {
            src,
            ch: Some(' '),
            offset: 0,
            rd_offset: 0,
            line_offset: 0,
            line: 1,
            insert_semi: false,
            nl_pos: None,
            errors: Vec::new(),
        };
        l.next();
        if l.ch == Some(BOM) {
            l.next();
        }
        l
    }

    fn pos_at(&self, offset: usize) -> Pos {
        // Offsets handed to this are always on the current line or an earlier point of it.
        let (line, line_start) = if offset >= self.line_offset {
            (self.line, self.line_offset)
        } else {
            let before = &self.src[..offset];
            let line = 1 + before.bytes().filter(|&b| b == b'\n').count() as u32;
            let start = before.rfind('\n').map_or(0, |i| i + 1);
            (line, start)
        };
        Pos {
            line,
            col: (offset - line_start + 1) as u32,
            offset,
        }
    }

    fn error(&mut self, offset: usize, msg: impl Into<String>) {
        let pos = self.pos_at(offset);
        self.errors.push(ScanError {
            pos,
            msg: msg.into(),
        });
    }

    /// Reads the next character into `ch` (Go's `next`).
    fn next(&mut self) {
        if self.rd_offset < self.src.len() {
            self.offset = self.rd_offset;
            if self.ch == Some('\n') {
                self.line_offset = self.offset;
                self.line += 1;
            }
            let c = self.src[self.rd_offset..].chars().next().unwrap_or('\0');
            self.rd_offset += c.len_utf8();
            if c == '\0' {
                self.error(self.offset, "illegal character NUL");
            } else if c == BOM && self.offset > 0 {
                self.error(self.offset, "illegal byte order mark");
            }
            self.ch = Some(c);
        } else {
            self.offset = self.src.len();
            if self.ch == Some('\n') {
                self.line_offset = self.offset;
                self.line += 1;
            }
            self.ch = None;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.src.as_bytes().get(self.rd_offset).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.ch, Some(' ' | '\t' | '\r'))
            || (self.ch == Some('\n') && !self.insert_semi)
        {
            self.next();
        }
    }

    fn scan_identifier(&mut self) -> &'s str {
        let offs = self.offset;
        while self.ch.is_some_and(|c| is_letter(c) || is_digit(c)) {
            self.next();
        }
        &self.src[offs..self.offset]
    }

    /// Go's `digits`: bit 0 = a digit was seen, bit 1 = an `_` was seen.
    fn digits(&mut self, base: u32, invalid: &mut Option<usize>) -> u8 {
        let mut digsep = 0;
        if base <= 10 {
            let max = char::from_digit(base, 10).unwrap_or(':');
            while let Some(c) = self.ch.filter(|&c| c.is_ascii_digit() || c == '_') {
                let mut ds = 1;
                if c == '_' {
                    ds = 2;
                } else if c >= max && invalid.is_none() {
                    *invalid = Some(self.offset);
                }
                digsep |= ds;
                self.next();
            }
        } else {
            while let Some(c) = self.ch.filter(|&c| c.is_ascii_hexdigit() || c == '_') {
                digsep |= if c == '_' { 2 } else { 1 };
                self.next();
            }
        }
        digsep
    }

    fn scan_number(&mut self) -> (Tok, &'s str) {
        let offs = self.offset;
        let mut tok = Tok::Illegal;
        let mut base = 10;
        let mut prefix = '\0';
        let mut digsep = 0u8;
        let mut invalid: Option<usize> = None;

        if self.ch != Some('.') {
            tok = Tok::Int;
            if self.ch == Some('0') {
                self.next();
                match lower(self.ch) {
                    Some('x') => {
                        self.next();
                        base = 16;
                        prefix = 'x';
                    }
                    Some('o') => {
                        self.next();
                        base = 8;
                        prefix = 'o';
                    }
                    Some('b') => {
                        self.next();
                        base = 2;
                        prefix = 'b';
                    }
                    _ => {
                        base = 8;
                        prefix = '0';
                        digsep = 1;
                    }
                }
            }
            digsep |= self.digits(base, &mut invalid);
        }

        if self.ch == Some('.') {
            tok = Tok::Float;
            if prefix == 'o' || prefix == 'b' {
                self.error(
                    self.offset,
                    format!("invalid radix point in {}", litname(prefix)),
                );
            }
            self.next();
            digsep |= self.digits(base, &mut invalid);
        }

        if digsep & 1 == 0 {
            self.error(self.offset, format!("{} has no digits", litname(prefix)));
        }

        let e = lower(self.ch);
        if e == Some('e') || e == Some('p') {
            if e == Some('e') && prefix != '\0' && prefix != '0' {
                let q = quote_rune(self.ch);
                self.error(
                    self.offset,
                    format!("{q} exponent requires decimal mantissa"),
                );
            } else if e == Some('p') && prefix != 'x' {
                let q = quote_rune(self.ch);
                self.error(
                    self.offset,
                    format!("{q} exponent requires hexadecimal mantissa"),
                );
            }
            self.next();
            tok = Tok::Float;
            if matches!(self.ch, Some('+' | '-')) {
                self.next();
            }
            let ds = self.digits(10, &mut None);
            digsep |= ds;
            if ds & 1 == 0 {
                self.error(self.offset, "exponent has no digits");
            }
        } else if prefix == 'x' && tok == Tok::Float {
            self.error(self.offset, "hexadecimal mantissa requires a 'p' exponent");
        }

        if self.ch == Some('i') {
            tok = Tok::Imag;
            self.next();
        }

        let lit = &self.src[offs..self.offset];
        if tok == Tok::Int
            && let Some(inv) = invalid
        {
            let c = self.src[inv..].chars().next();
            self.error(
                inv,
                format!("invalid digit {} in {}", quote_rune(c), litname(prefix)),
            );
        }
        if digsep & 2 != 0
            && let Some(i) = invalid_sep(lit)
        {
            self.error(offs + i, "'_' must separate successive digits");
        }
        (tok, lit)
    }

    /// Go's `scanEscape`; returns false after reporting an error.
    fn scan_escape(&mut self, quote: char) -> bool {
        let offs = self.offset;
        let (mut n, base, max): (u32, u32, u32) = match self.ch {
            Some('a' | 'b' | 'f' | 'n' | 'r' | 't' | 'v' | '\\') => {
                self.next();
                return true;
            }
            Some(c) if c == quote => {
                self.next();
                return true;
            }
            Some('0'..='7') => (3, 8, 255),
            Some('x') => {
                self.next();
                (2, 16, 255)
            }
            Some('u') => {
                self.next();
                (4, 16, 0x10FFFF)
            }
            Some('U') => {
                self.next();
                (8, 16, 0x10FFFF)
            }
            c => {
                let msg = if c.is_none() {
                    "escape sequence not terminated"
                } else {
                    "unknown escape sequence"
                };
                self.error(offs, msg);
                return false;
            }
        };
        let mut x: u32 = 0;
        while n > 0 {
            let d = digit_val(self.ch);
            if d >= base {
                let msg = match self.ch {
                    None => "escape sequence not terminated".to_owned(),
                    Some(c) => format!("illegal character {} in escape sequence", sharp_u(c)),
                };
                self.error(self.offset, msg);
                return false;
            }
            x = x.wrapping_mul(base).wrapping_add(d);
            self.next();
            n -= 1;
        }
        if x > max || (0xD800..0xE000).contains(&x) {
            self.error(offs, "escape sequence is invalid Unicode code point");
            return false;
        }
        true
    }

    fn scan_rune(&mut self) -> &'s str {
        let offs = self.offset - 1;
        let mut valid = true;
        let mut n = 0;
        loop {
            let ch = self.ch;
            if ch == Some('\n') || ch.is_none() {
                if valid {
                    self.error(offs, "rune literal not terminated");
                    valid = false;
                }
                break;
            }
            self.next();
            if ch == Some('\'') {
                break;
            }
            n += 1;
            if ch == Some('\\') && !self.scan_escape('\'') {
                valid = false;
            }
        }
        if valid && n != 1 {
            self.error(offs, "illegal rune literal");
        }
        &self.src[offs..self.offset]
    }

    fn scan_string(&mut self) -> &'s str {
        let offs = self.offset - 1;
        loop {
            let ch = self.ch;
            if ch == Some('\n') || ch.is_none() {
                self.error(offs, "string literal not terminated");
                break;
            }
            self.next();
            if ch == Some('"') {
                break;
            }
            if ch == Some('\\') {
                self.scan_escape('"');
            }
        }
        &self.src[offs..self.offset]
    }

    fn scan_raw_string(&mut self) -> &'s str {
        let offs = self.offset - 1;
        loop {
            let ch = self.ch;
            if ch.is_none() {
                self.error(offs, "raw string literal not terminated");
                break;
            }
            self.next();
            if ch == Some('`') {
                break;
            }
        }
        // Go strips '\r' from raw strings; the parser does that when building the literal.
        &self.src[offs..self.offset]
    }

    /// Scans a comment after its first `/`; returns the offset of the first newline inside a
    /// `/*…*/` comment (0 when none), like Go's `scanComment`.
    fn scan_comment(&mut self) -> usize {
        let offs = self.offset - 1;
        if self.ch == Some('/') {
            self.next();
            while self.ch.is_some() && self.ch != Some('\n') {
                self.next();
            }
            return 0;
        }
        let mut nl_offset = 0;
        self.next();
        while let Some(ch) = self.ch {
            if ch == '\n' && nl_offset == 0 {
                nl_offset = self.offset;
            }
            self.next();
            if ch == '*' && self.ch == Some('/') {
                self.next();
                return nl_offset;
            }
        }
        self.error(offs, "comment not terminated");
        nl_offset
    }

    fn switch2(&mut self, t0: Tok, t1: Tok) -> Tok {
        if self.ch == Some('=') {
            self.next();
            return t1;
        }
        t0
    }

    fn switch3(&mut self, t0: Tok, t1: Tok, ch2: char, t2: Tok) -> Tok {
        if self.ch == Some('=') {
            self.next();
            return t1;
        }
        if self.ch == Some(ch2) {
            self.next();
            return t2;
        }
        t0
    }

    fn switch4(&mut self, t0: Tok, t1: Tok, ch2: char, t2: Tok, t3: Tok) -> Tok {
        if self.ch == Some('=') {
            self.next();
            return t1;
        }
        if self.ch == Some(ch2) {
            self.next();
            if self.ch == Some('=') {
                self.next();
                return t3;
            }
            return t2;
        }
        t0
    }

    /// Scans the next token (comments included), Go's `Scan`.
    pub(crate) fn scan(&mut self) -> Token<'s> {
        if let Some(pos) = self.nl_pos.take() {
            return Token {
                tok: Tok::Semicolon,
                pos,
                lit: "\n",
            };
        }
        self.skip_whitespace();
        let pos = self.pos_at(self.offset);
        let mut insert_semi = false;
        let start = self.offset;
        let (tok, lit): (Tok, &'s str) = match self.ch {
            Some(c) if is_letter(c) => {
                let lit = self.scan_identifier();
                let mut tok = Tok::Ident;
                if lit.len() > 1
                    && let Some((_, kw)) = KEYWORDS.iter().find(|(name, _)| *name == lit)
                {
                    tok = *kw;
                }
                insert_semi = matches!(
                    tok,
                    Tok::Ident | Tok::Break | Tok::Continue | Tok::Fallthrough | Tok::Return
                );
                (tok, lit)
            }
            Some(c)
                if c.is_ascii_digit()
                    || (c == '.' && self.peek().is_some_and(|b| b.is_ascii_digit())) =>
            {
                insert_semi = true;
                self.scan_number()
            }
            None => {
                if self.insert_semi {
                    self.insert_semi = false;
                    return Token {
                        tok: Tok::Semicolon,
                        pos,
                        lit: "\n",
                    };
                }
                (Tok::Eof, "")
            }
            Some(ch) => {
                self.next();
                let tok = match ch {
                    '\n' => {
                        self.insert_semi = false;
                        return Token {
                            tok: Tok::Semicolon,
                            pos,
                            lit: "\n",
                        };
                    }
                    '"' => {
                        insert_semi = true;
                        let lit = self.scan_string();
                        self.insert_semi = insert_semi;
                        return Token {
                            tok: Tok::String,
                            pos,
                            lit,
                        };
                    }
                    '\'' => {
                        insert_semi = true;
                        let lit = self.scan_rune();
                        self.insert_semi = insert_semi;
                        return Token {
                            tok: Tok::Char,
                            pos,
                            lit,
                        };
                    }
                    '`' => {
                        insert_semi = true;
                        let lit = self.scan_raw_string();
                        self.insert_semi = insert_semi;
                        return Token {
                            tok: Tok::String,
                            pos,
                            lit,
                        };
                    }
                    ':' => self.switch2(Tok::Colon, Tok::Define),
                    '.' => {
                        if self.ch == Some('.') && self.peek() == Some(b'.') {
                            self.next();
                            self.next();
                            Tok::Ellipsis
                        } else {
                            Tok::Period
                        }
                    }
                    ',' => Tok::Comma,
                    ';' => Tok::Semicolon,
                    '(' => Tok::LParen,
                    ')' => {
                        insert_semi = true;
                        Tok::RParen
                    }
                    '[' => Tok::LBrack,
                    ']' => {
                        insert_semi = true;
                        Tok::RBrack
                    }
                    '{' => Tok::LBrace,
                    '}' => {
                        insert_semi = true;
                        Tok::RBrace
                    }
                    '+' => {
                        let t = self.switch3(Tok::Add, Tok::AddAssign, '+', Tok::Inc);
                        insert_semi = t == Tok::Inc;
                        t
                    }
                    '-' => {
                        let t = self.switch3(Tok::Sub, Tok::SubAssign, '-', Tok::Dec);
                        insert_semi = t == Tok::Dec;
                        t
                    }
                    '*' => self.switch2(Tok::Mul, Tok::MulAssign),
                    '/' => {
                        if self.ch == Some('/') || self.ch == Some('*') {
                            let nl_offset = self.scan_comment();
                            if self.insert_semi && nl_offset != 0 {
                                self.nl_pos = Some(self.pos_at(nl_offset));
                                self.insert_semi = false;
                            }
                            // Otherwise insert_semi is preserved (Go: insertSemi = s.insertSemi).
                            return Token {
                                tok: Tok::Comment,
                                pos,
                                lit: &self.src[start..self.offset],
                            };
                        }
                        self.switch2(Tok::Quo, Tok::QuoAssign)
                    }
                    '%' => self.switch2(Tok::Rem, Tok::RemAssign),
                    '^' => self.switch2(Tok::Xor, Tok::XorAssign),
                    '<' => {
                        if self.ch == Some('-') {
                            self.next();
                            Tok::Arrow
                        } else {
                            self.switch4(Tok::Lss, Tok::Leq, '<', Tok::Shl, Tok::ShlAssign)
                        }
                    }
                    '>' => self.switch4(Tok::Gtr, Tok::Geq, '>', Tok::Shr, Tok::ShrAssign),
                    '=' => self.switch2(Tok::Assign, Tok::Eql),
                    '!' => self.switch2(Tok::Not, Tok::Neq),
                    '&' => {
                        if self.ch == Some('^') {
                            self.next();
                            self.switch2(Tok::AndNot, Tok::AndNotAssign)
                        } else {
                            self.switch3(Tok::And, Tok::AndAssign, '&', Tok::LAnd)
                        }
                    }
                    '|' => self.switch3(Tok::Or, Tok::OrAssign, '|', Tok::LOr),
                    '~' => Tok::Tilde,
                    _ => {
                        if ch != BOM {
                            if ch == '\u{201C}' || ch == '\u{201D}' {
                                self.error(
                                    start,
                                    format!("curly quotation mark '{ch}' (use neutral '\"')"),
                                );
                            } else {
                                self.error(start, format!("invalid character {}", sharp_u(ch)));
                            }
                        }
                        insert_semi = self.insert_semi;
                        Tok::Illegal
                    }
                };
                (tok, &self.src[start..self.offset])
            }
        };
        self.insert_semi = insert_semi;
        Token { tok, pos, lit }
    }
}

#[cfg(test)]
#[path = "lexer_tests.rs"]
mod tests;
