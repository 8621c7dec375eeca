//! A port of the expression part of Go's `go/parser` (`parser.ParseExpr`), producing [`Ast`]
//! with Go's precedence and Go's error messages (spec §5.2).
//!
//! Error recovery differs from Go in one respect: parsing stops at the first parser error (Go
//! recovers and goes on, but discards further errors on the same line, so single-line
//! expressions report the same thing); the rest of the input is still scanned so that later
//! scanner errors are counted in "(and N more errors)".

use serde::Deserialize;

use super::ast::{Ast, Expr, UnsupportedKind};
use super::error::ParseError;
use super::lexer::{Lexer, Pos, Tok, Token};
use super::ops::{BinaryOp, UnaryOp};

/// Maximum of Go's nesting counter (which also counts the operators of a flat `a + b + …`
/// run). Go allows 100 000; the trees here are walked recursively (display, field references,
/// drop), so the limit is lower.
const MAX_NEST: u32 = 1000;

/// Maximum recursion depth of the parser itself (parentheses, unary operators, call
/// arguments, types), kept small enough for a 2 MiB thread stack even in debug builds. Real
/// expressions nest a few levels deep. Exceeding it gives Go's nesting error message.
const MAX_DEPTH: u32 = 200;

/// Parsing stopped at a recorded error.
struct Stop;

type PResult<T> = Result<T, Stop>;

struct Parser<'s> {
    src: &'s str,
    lex: Lexer<'s>,
    tok: Token<'s>,
    /// End offset of the last consumed token (for the text of unsupported forms).
    last_end: usize,
    error: Option<(Pos, String)>,
    /// True when the run must not scan further (nesting bail-out).
    bailed: bool,
    nest: u32,
    depth: u32,
    expr_lev: i32,
    in_rhs: bool,
}

/// Parses one Capillaries expression (Go's `parser.ParseExpr`).
pub fn parse(src: &str) -> Result<Ast, ParseError> {
    let mut p = Parser::new(src);
    let res = p.parse_top();
    if res.is_err() && !p.bailed {
        // Go keeps scanning while it recovers; count the scanner errors still ahead.
        while !matches!(p.tok.tok, Tok::Eof) {
            p.tok = p.lex.scan();
        }
    }
    let mut errors: Vec<(Pos, String)> = std::mem::take(&mut p.lex.errors)
        .into_iter()
        .map(|e| (e.pos, e.msg))
        .collect();
    if let Some(e) = p.error.take() {
        errors.push(e);
    }
    errors.sort_by(|a, b| (a.0.line, a.0.col, &a.1).cmp(&(b.0.line, b.0.col, &b.1)));
    match (res, errors.first()) {
        (Ok(root), None) => Ok(Ast { root }),
        (_, Some((pos, msg))) => Err(ParseError {
            line: pos.line,
            column: pos.col,
            message: msg.clone(),
            more: errors.len() - 1,
        }),
        // A stop always records an error; keep a message rather than panic if that ever breaks.
        (Err(Stop), None) => Err(ParseError {
            line: 1,
            column: 1,
            message: "parse error".to_owned(),
            more: 0,
        }),
    }
}

fn unparen(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(x) => unparen(x),
        _ => e,
    }
}

impl<'s> Parser<'s> {
    fn new(src: &'s str) -> Self {
        let mut lex = Lexer::new(src);
        let tok = Self::scan_skip_comments(&mut lex);
        Self {
            src,
            lex,
            tok,
            last_end: 0,
            error: None,
            bailed: false,
            nest: 0,
            depth: 0,
            expr_lev: 0,
            in_rhs: false,
        }
    }

    fn scan_skip_comments(lex: &mut Lexer<'s>) -> Token<'s> {
        loop {
            let t = lex.scan();
            if t.tok != Tok::Comment {
                return t;
            }
        }
    }

    fn next(&mut self) {
        self.last_end = self.tok.pos.offset + self.tok.lit.len();
        self.tok = Self::scan_skip_comments(&mut self.lex);
    }

    /// Records a parser error unless a scanner error is already on that line (Go's rule).
    fn error(&mut self, pos: Pos, msg: String) -> Stop {
        let same_line = self
            .lex
            .errors
            .last()
            .is_some_and(|e| e.pos.line == pos.line);
        if !same_line && self.error.is_none() {
            self.error = Some((pos, msg));
        }
        Stop
    }

    fn error_expected(&mut self, pos: Pos, what: &str) -> Stop {
        let mut msg = format!("expected {what}");
        if pos == self.tok.pos {
            if self.tok.tok == Tok::Semicolon && self.tok.lit == "\n" {
                msg.push_str(", found newline");
            } else if self.tok.tok.is_literal() {
                msg.push_str(", found ");
                msg.push_str(self.tok.lit);
            } else {
                msg.push_str(&format!(", found '{}'", self.tok.tok));
            }
        }
        self.error(pos, msg)
    }

    fn expect(&mut self, tok: Tok) -> PResult<()> {
        if self.tok.tok != tok {
            let pos = self.tok.pos;
            return Err(self.error_expected(pos, &format!("'{tok}'")));
        }
        self.next();
        Ok(())
    }

    fn expect_closing(&mut self, tok: Tok, context: &str) -> PResult<()> {
        if self.tok.tok != tok && self.tok.tok == Tok::Semicolon && self.tok.lit == "\n" {
            let pos = self.tok.pos;
            return Err(self.error(pos, format!("missing ',' before newline in {context}")));
        }
        self.expect(tok)
    }

    /// Go's `atComma`: true at a comma; an error when neither a comma nor `follow`.
    fn at_comma(&mut self, context: &str, follow: Tok) -> PResult<bool> {
        if self.tok.tok == Tok::Comma {
            return Ok(true);
        }
        if self.tok.tok != follow {
            let mut msg = "missing ','".to_owned();
            if self.tok.tok == Tok::Semicolon && self.tok.lit == "\n" {
                msg.push_str(" before newline");
            }
            let pos = self.tok.pos;
            return Err(self.error(pos, format!("{msg} in {context}")));
        }
        Ok(false)
    }

    fn inc_nest(&mut self) -> PResult<()> {
        self.nest += 1;
        if self.nest > MAX_NEST || self.depth > MAX_DEPTH {
            self.bailed = true;
            let pos = self.tok.pos;
            return Err(self.error(pos, "exceeded max nesting depth".to_owned()));
        }
        Ok(())
    }

    fn text_from(&self, start: usize) -> String {
        self.src
            .get(start..self.last_end.max(start))
            .unwrap_or_default()
            .to_owned()
    }

    fn unsupported(&self, kind: UnsupportedKind, start: usize, children: Vec<Expr>) -> Expr {
        Expr::Unsupported {
            kind,
            text: self.text_from(start),
            children,
        }
    }

    fn parse_top(&mut self) -> PResult<Expr> {
        let x = self.parse_rhs()?;
        if self.tok.tok == Tok::Semicolon && self.tok.lit == "\n" {
            self.next();
        }
        self.expect(Tok::Eof)?;
        Ok(x)
    }

    fn parse_rhs(&mut self) -> PResult<Expr> {
        let old = self.in_rhs;
        self.in_rhs = true;
        let x = self.parse_binary(None, 1);
        self.in_rhs = old;
        x
    }

    fn parse_expr(&mut self) -> PResult<Expr> {
        self.parse_binary(None, 1)
    }

    fn binary_op(tok: Tok) -> Option<BinaryOp> {
        Some(match tok {
            Tok::Add => BinaryOp::Add,
            Tok::Sub => BinaryOp::Sub,
            Tok::Mul => BinaryOp::Mul,
            Tok::Quo => BinaryOp::Quo,
            Tok::Rem => BinaryOp::Rem,
            Tok::And => BinaryOp::And,
            Tok::Or => BinaryOp::Or,
            Tok::Xor => BinaryOp::Xor,
            Tok::Shl => BinaryOp::Shl,
            Tok::Shr => BinaryOp::Shr,
            Tok::AndNot => BinaryOp::AndNot,
            Tok::LAnd => BinaryOp::LAnd,
            Tok::LOr => BinaryOp::LOr,
            Tok::Eql => BinaryOp::Eql,
            Tok::Neq => BinaryOp::Neq,
            Tok::Lss => BinaryOp::Lss,
            Tok::Leq => BinaryOp::Leq,
            Tok::Gtr => BinaryOp::Gtr,
            Tok::Geq => BinaryOp::Geq,
            _ => return None,
        })
    }

    fn parse_binary(&mut self, x: Option<Expr>, prec1: u8) -> PResult<Expr> {
        let mut x = match x {
            Some(x) => x,
            None => self.parse_unary()?,
        };
        let mut n = 0;
        loop {
            n += 1;
            self.inc_nest()?;
            // Go treats `=` as `==` on a right-hand side (then reports "expected '=='").
            let op_tok = if self.in_rhs && self.tok.tok == Tok::Assign {
                Tok::Eql
            } else {
                self.tok.tok
            };
            let prec = op_tok.precedence();
            if prec < prec1 {
                self.nest -= n;
                return Ok(x);
            }
            self.expect(op_tok)?;
            let y = self.parse_binary(None, prec + 1)?;
            let op = Self::binary_op(op_tok).ok_or(Stop)?;
            x = Expr::Binary {
                op,
                x: Box::new(x),
                y: Box::new(y),
            };
        }
    }

    fn parse_unary(&mut self) -> PResult<Expr> {
        self.depth += 1;
        self.inc_nest()?;
        let start = self.tok.pos.offset;
        let op = match self.tok.tok {
            Tok::Add => Some(UnaryOp::Plus),
            Tok::Sub => Some(UnaryOp::Neg),
            Tok::Not => Some(UnaryOp::Not),
            Tok::Xor => Some(UnaryOp::Xor),
            Tok::And => Some(UnaryOp::Addr),
            Tok::Tilde => Some(UnaryOp::Tilde),
            Tok::Arrow => Some(UnaryOp::Recv),
            Tok::Mul => Some(UnaryOp::Deref),
            _ => None,
        };
        let x = match op {
            Some(op) => {
                self.next();
                let x = self.parse_unary()?;
                match (op, &x) {
                    // `<-chan T` is a channel type, not a receive.
                    (
                        UnaryOp::Recv,
                        Expr::Unsupported {
                            kind: UnsupportedKind::Type,
                            text,
                            children,
                        },
                    ) if text.starts_with("chan") => {
                        let children = children.clone();
                        self.unsupported(UnsupportedKind::Type, start, children)
                    }
                    _ => Expr::Unary { op, x: Box::new(x) },
                }
            }
            None => self.parse_primary()?,
        };
        self.nest -= 1;
        self.depth -= 1;
        Ok(x)
    }

    fn parse_primary(&mut self) -> PResult<Expr> {
        let start = self.tok.pos.offset;
        let mut x = self.parse_operand()?;
        let mut n = 0;
        loop {
            n += 1;
            self.inc_nest()?;
            match self.tok.tok {
                Tok::Period => {
                    self.next();
                    match self.tok.tok {
                        Tok::Ident => {
                            let sel = self.tok.lit.to_owned();
                            self.next();
                            x = match x {
                                Expr::Ident(name) => Expr::Selector { x: name, sel },
                                other => Expr::BadSelector {
                                    x: Box::new(other),
                                    sel,
                                },
                            };
                        }
                        Tok::LParen => x = self.parse_type_assertion(x, start)?,
                        _ => {
                            let pos = self.tok.pos;
                            return Err(self.error_expected(pos, "selector or type assertion"));
                        }
                    }
                }
                Tok::LBrack => x = self.parse_index_or_slice(x, start)?,
                Tok::LParen => x = self.parse_call(x)?,
                Tok::LBrace => {
                    let t = unparen(&x);
                    let complit = match t {
                        Expr::Ident(_) | Expr::Selector { .. } | Expr::BadSelector { .. } => {
                            self.expr_lev >= 0
                        }
                        Expr::Unsupported {
                            kind: UnsupportedKind::Index,
                            ..
                        } => self.expr_lev >= 0,
                        Expr::Unsupported {
                            kind: UnsupportedKind::Type,
                            text,
                            ..
                        } => {
                            text.starts_with('[')
                                || text.starts_with("struct")
                                || text.starts_with("map")
                        }
                        _ => false,
                    };
                    if !complit {
                        self.nest -= n;
                        return Ok(x);
                    }
                    if !std::ptr::eq(t, &x) {
                        let inner = self.src[start..]
                            .find(|c: char| c != '(' && !c.is_whitespace())
                            .map_or(start, |i| start + i);
                        let pos = self.pos_of(inner);
                        return Err(self.error(
                            pos,
                            "cannot parenthesize type in composite literal".to_owned(),
                        ));
                    }
                    x = self.parse_literal_value(Some(x), start)?;
                }
                _ => {
                    self.nest -= n;
                    return Ok(x);
                }
            }
        }
    }

    fn pos_of(&self, offset: usize) -> Pos {
        let before = &self.src[..offset.min(self.src.len())];
        let line = 1 + before.bytes().filter(|&b| b == b'\n').count() as u32;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Pos {
            line,
            col: (offset - line_start + 1) as u32,
            offset,
        }
    }

    fn parse_operand(&mut self) -> PResult<Expr> {
        let t = self.tok;
        let x = match t.tok {
            Tok::Ident => Expr::Ident(t.lit.to_owned()),
            Tok::Int => Expr::Int(t.lit.to_owned()),
            Tok::Float => Expr::Float(t.lit.to_owned()),
            Tok::Imag => Expr::Imag(t.lit.to_owned()),
            Tok::Char => Expr::Char(t.lit.to_owned()),
            Tok::String => {
                let backquoted = t.lit.starts_with('`');
                // Go removes carriage returns from raw strings.
                let raw = if backquoted {
                    t.lit.replace('\r', "")
                } else {
                    t.lit.to_owned()
                };
                Expr::Str { raw, backquoted }
            }
            Tok::LParen => {
                self.next();
                self.expr_lev += 1;
                let x = self.parse_rhs()?;
                self.expr_lev -= 1;
                self.expect(Tok::RParen)?;
                return Ok(Expr::Paren(Box::new(x)));
            }
            Tok::Func => return self.parse_func_type_or_lit(),
            _ => {
                if let Some(typ) = self.try_ident_or_type()? {
                    return Ok(typ);
                }
                let pos = self.tok.pos;
                return Err(self.error_expected(pos, "operand"));
            }
        };
        self.next();
        Ok(x)
    }

    fn parse_ident(&mut self) -> PResult<String> {
        if self.tok.tok == Tok::Ident {
            let name = self.tok.lit.to_owned();
            self.next();
            return Ok(name);
        }
        self.expect(Tok::Ident)?;
        Ok("_".to_owned())
    }

    fn parse_type(&mut self) -> PResult<Expr> {
        match self.try_ident_or_type()? {
            Some(t) => Ok(t),
            None => {
                let pos = self.tok.pos;
                Err(self.error_expected(pos, "type"))
            }
        }
    }

    fn try_ident_or_type(&mut self) -> PResult<Option<Expr>> {
        self.depth += 1;
        self.inc_nest()?;
        let start = self.tok.pos.offset;
        let t = match self.tok.tok {
            Tok::Ident => {
                let name = self.parse_ident()?;
                let mut typ = if self.tok.tok == Tok::Period {
                    self.next();
                    let sel = self.parse_ident()?;
                    Expr::Selector { x: name, sel }
                } else {
                    Expr::Ident(name)
                };
                if self.tok.tok == Tok::LBrack {
                    typ = self.parse_type_instance(typ, start)?;
                }
                Some(typ)
            }
            Tok::LBrack => {
                self.next();
                Some(self.parse_array_type(start)?)
            }
            Tok::Struct | Tok::Interface => {
                self.next();
                self.expect(Tok::LBrace)?;
                let children = self.skip_balanced()?;
                self.expect(Tok::RBrace)?;
                Some(self.unsupported(UnsupportedKind::Type, start, children))
            }
            Tok::Mul => {
                self.next();
                let t = self.parse_type()?;
                Some(Expr::Unary {
                    op: UnaryOp::Deref,
                    x: Box::new(t),
                })
            }
            Tok::Func => {
                self.next();
                let children = self.parse_signature()?;
                Some(self.unsupported(UnsupportedKind::Type, start, children))
            }
            Tok::Map => {
                self.next();
                self.expect(Tok::LBrack)?;
                let k = self.parse_type()?;
                self.expect(Tok::RBrack)?;
                let v = self.parse_type()?;
                Some(self.unsupported(UnsupportedKind::Type, start, vec![k, v]))
            }
            Tok::Chan | Tok::Arrow => {
                if self.tok.tok == Tok::Chan {
                    self.next();
                    if self.tok.tok == Tok::Arrow {
                        self.next();
                    }
                } else {
                    self.next();
                    self.expect(Tok::Chan)?;
                }
                let v = self.parse_type()?;
                Some(self.unsupported(UnsupportedKind::Type, start, vec![v]))
            }
            Tok::LParen => {
                self.next();
                let t = self.parse_type()?;
                self.expect(Tok::RParen)?;
                Some(Expr::Paren(Box::new(t)))
            }
            _ => None,
        };
        self.nest -= 1;
        self.depth -= 1;
        Ok(t)
    }

    fn parse_type_instance(&mut self, typ: Expr, start: usize) -> PResult<Expr> {
        self.expect(Tok::LBrack)?;
        self.expr_lev += 1;
        let mut children = vec![typ];
        while self.tok.tok != Tok::RBrack && self.tok.tok != Tok::Eof {
            children.push(self.parse_type()?);
            if !self.at_comma("type argument list", Tok::RBrack)? {
                break;
            }
            self.next();
        }
        self.expr_lev -= 1;
        let closing = self.tok.pos;
        self.expect_closing(Tok::RBrack, "type argument list")?;
        if children.len() == 1 {
            return Err(self.error_expected(closing, "type argument list"));
        }
        Ok(self.unsupported(UnsupportedKind::Index, start, children))
    }

    fn parse_array_type(&mut self, start: usize) -> PResult<Expr> {
        let mut children = Vec::new();
        self.expr_lev += 1;
        if self.tok.tok == Tok::Ellipsis {
            self.next();
        } else if self.tok.tok != Tok::RBrack {
            children.push(self.parse_rhs()?);
        }
        self.expr_lev -= 1;
        if self.tok.tok == Tok::Comma {
            let pos = self.tok.pos;
            return Err(self.error(pos, "unexpected comma; expecting ]".to_owned()));
        }
        self.expect(Tok::RBrack)?;
        children.push(self.parse_type()?);
        Ok(self.unsupported(UnsupportedKind::Type, start, children))
    }

    /// Skips a bracketed token run whose opening token was consumed, stopping before the
    /// matching closing token; returns the identifiers seen (for the field-reference walk).
    fn skip_balanced(&mut self) -> PResult<Vec<Expr>> {
        let mut depth = 0usize;
        let mut idents = Vec::new();
        loop {
            match self.tok.tok {
                Tok::Eof => return Ok(idents),
                Tok::LBrace | Tok::LParen | Tok::LBrack => depth += 1,
                Tok::RBrace | Tok::RParen | Tok::RBrack => {
                    if depth == 0 {
                        return Ok(idents);
                    }
                    depth -= 1;
                }
                Tok::Ident => idents.push(Expr::Ident(self.tok.lit.to_owned())),
                _ => {}
            }
            self.next();
        }
    }

    /// `(params) results` of a func type or literal.
    fn parse_signature(&mut self) -> PResult<Vec<Expr>> {
        self.expect(Tok::LParen)?;
        let mut children = self.skip_balanced()?;
        self.expect(Tok::RParen)?;
        if self.tok.tok == Tok::LParen {
            self.next();
            children.extend(self.skip_balanced()?);
            self.expect(Tok::RParen)?;
        } else if let Some(t) = self.try_ident_or_type()? {
            children.push(t);
        }
        Ok(children)
    }

    fn parse_func_type_or_lit(&mut self) -> PResult<Expr> {
        let start = self.tok.pos.offset;
        self.next();
        let mut children = self.parse_signature()?;
        if self.tok.tok != Tok::LBrace {
            return Ok(self.unsupported(UnsupportedKind::Type, start, children));
        }
        self.next();
        self.expr_lev += 1;
        children.extend(self.skip_balanced()?);
        self.expr_lev -= 1;
        self.expect(Tok::RBrace)?;
        Ok(self.unsupported(UnsupportedKind::FuncLit, start, children))
    }

    fn parse_type_assertion(&mut self, x: Expr, start: usize) -> PResult<Expr> {
        self.expect(Tok::LParen)?;
        let mut children = vec![x];
        if self.tok.tok == Tok::Type {
            self.next();
        } else {
            children.push(self.parse_type()?);
        }
        self.expect(Tok::RParen)?;
        Ok(self.unsupported(UnsupportedKind::TypeAssert, start, children))
    }

    fn parse_index_or_slice(&mut self, x: Expr, start: usize) -> PResult<Expr> {
        self.expect(Tok::LBrack)?;
        if self.tok.tok == Tok::RBrack {
            let pos = self.tok.pos;
            return Err(self.error_expected(pos, "operand"));
        }
        self.expr_lev += 1;
        let mut children = vec![x];
        let mut index: [Option<Expr>; 3] = [None, None, None];
        let mut colons: [Option<Pos>; 2] = [None, None];
        let mut ncolons = 0;
        if self.tok.tok != Tok::Colon {
            index[0] = Some(self.parse_rhs()?);
        }
        match self.tok.tok {
            Tok::Colon => {
                while self.tok.tok == Tok::Colon && ncolons < 2 {
                    colons[ncolons] = Some(self.tok.pos);
                    ncolons += 1;
                    self.next();
                    if !matches!(self.tok.tok, Tok::Colon | Tok::RBrack | Tok::Eof) {
                        index[ncolons] = Some(self.parse_rhs()?);
                    }
                }
            }
            Tok::Comma => {
                while self.tok.tok == Tok::Comma {
                    self.next();
                    if self.tok.tok != Tok::RBrack && self.tok.tok != Tok::Eof {
                        children.push(self.parse_type()?);
                    }
                }
            }
            _ => {}
        }
        self.expr_lev -= 1;
        self.expect(Tok::RBrack)?;
        if ncolons == 2 {
            if index[1].is_none() {
                let pos = colons[0].unwrap_or_default();
                return Err(self.error(pos, "middle index required in 3-index slice".to_owned()));
            }
            if index[2].is_none() {
                let pos = colons[1].unwrap_or_default();
                return Err(self.error(pos, "final index required in 3-index slice".to_owned()));
            }
        }
        let kind = if ncolons > 0 {
            UnsupportedKind::Slice
        } else {
            UnsupportedKind::Index
        };
        let mut idx: Vec<Expr> = index.into_iter().flatten().collect();
        idx.append(&mut children.split_off(1));
        children.extend(idx);
        Ok(self.unsupported(kind, start, children))
    }

    fn parse_call(&mut self, fun: Expr) -> PResult<Expr> {
        self.expect(Tok::LParen)?;
        self.expr_lev += 1;
        let mut args = Vec::new();
        let mut ellipsis = false;
        while self.tok.tok != Tok::RParen && self.tok.tok != Tok::Eof && !ellipsis {
            args.push(self.parse_rhs()?);
            if self.tok.tok == Tok::Ellipsis {
                ellipsis = true;
                self.next();
            }
            if !self.at_comma("argument list", Tok::RParen)? {
                break;
            }
            self.next();
        }
        self.expr_lev -= 1;
        self.expect_closing(Tok::RParen, "argument list")?;
        Ok(match fun {
            Expr::Ident(func) => Expr::Call { func, args },
            Expr::Selector { x, sel } => Expr::Call {
                func: format!("{x}.{sel}"),
                args,
            },
            other => Expr::BadCall {
                fun: Box::new(other),
                args,
            },
        })
    }

    fn parse_literal_value(&mut self, typ: Option<Expr>, start: usize) -> PResult<Expr> {
        self.expect(Tok::LBrace)?;
        let mut children: Vec<Expr> = typ.into_iter().collect();
        self.expr_lev += 1;
        while self.tok.tok != Tok::RBrace && self.tok.tok != Tok::Eof {
            children.push(self.parse_element()?);
            if !self.at_comma("composite literal", Tok::RBrace)? {
                break;
            }
            self.next();
        }
        self.expr_lev -= 1;
        self.expect_closing(Tok::RBrace, "composite literal")?;
        Ok(self.unsupported(UnsupportedKind::CompositeLit, start, children))
    }

    fn parse_element(&mut self) -> PResult<Expr> {
        let start = self.tok.pos.offset;
        let x = self.parse_value()?;
        if self.tok.tok == Tok::Colon {
            self.next();
            let v = self.parse_value()?;
            return Ok(self.unsupported(UnsupportedKind::KeyValue, start, vec![x, v]));
        }
        Ok(x)
    }

    fn parse_value(&mut self) -> PResult<Expr> {
        if self.tok.tok == Tok::LBrace {
            let start = self.tok.pos.offset;
            return self.parse_literal_value(None, start);
        }
        self.parse_expr()
    }
}

impl<'de> Deserialize<'de> for Ast {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).map_err(serde::de::Error::custom)
    }
}
