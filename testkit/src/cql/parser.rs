//! Tokenizer and recursive-descent parser for the CQL subset the double implements.
//!
//! Anything outside the subset is a parse error (reported as a 0x2000 syntax error), so a
//! statement the double does not understand is refused instead of half-executed.

use super::types::Literal;

/// A parse failure: the message goes into the syntax-error frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseError(pub(crate) String);

type PResult<T> = Result<T, ParseError>;

fn err<T>(msg: impl Into<String>) -> PResult<T> {
    Err(ParseError(msg.into()))
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    /// Identifier or keyword; `quoted` identifiers keep their case.
    Ident {
        text: String,
        quoted: bool,
    },
    Str(String),
    Number(String),
    Hex(Vec<u8>),
    Sym(&'static str),
}

const SYMS: [&str; 17] = [
    "<=", ">=", "!=", "(", ")", ",", ";", ".", "=", "<", ">", "*", "{", "}", "?", ":", "[",
];

fn tokenize(s: &str) -> PResult<Vec<Tok>> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'-' && b.get(i + 1) == Some(&b'-') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'\'' {
            let mut v = Vec::new();
            i += 1;
            loop {
                match b.get(i) {
                    None => return err("unterminated string literal"),
                    Some(b'\'') if b.get(i + 1) == Some(&b'\'') => {
                        v.push(b'\'');
                        i += 2;
                    }
                    Some(b'\'') => {
                        i += 1;
                        break;
                    }
                    Some(&x) => {
                        v.push(x);
                        i += 1;
                    }
                }
            }
            match String::from_utf8(v) {
                Ok(v) => out.push(Tok::Str(v)),
                Err(_) => return err("string literal is not UTF-8"),
            }
        } else if c == b'"' {
            let mut v = Vec::new();
            i += 1;
            loop {
                match b.get(i) {
                    None => return err("unterminated quoted identifier"),
                    Some(b'"') if b.get(i + 1) == Some(&b'"') => {
                        v.push(b'"');
                        i += 2;
                    }
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(&x) => {
                        v.push(x);
                        i += 1;
                    }
                }
            }
            match String::from_utf8(v) {
                Ok(text) => out.push(Tok::Ident { text, quoted: true }),
                Err(_) => return err("quoted identifier is not UTF-8"),
            }
        } else if c == b'0' && matches!(b.get(i + 1), Some(b'x' | b'X')) {
            let start = i + 2;
            let mut j = start;
            while j < b.len() && b[j].is_ascii_hexdigit() {
                j += 1;
            }
            let hex = &s[start..j];
            if !hex.len().is_multiple_of(2) {
                return err("odd number of hex digits in blob literal");
            }
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|k| u8::from_str_radix(&hex[k..k + 2], 16))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| ParseError("bad blob literal".into()))?;
            out.push(Tok::Hex(bytes));
            i = j;
        } else if c.is_ascii_digit()
            || (c == b'-'
                && b.get(i + 1).is_some_and(u8::is_ascii_digit)
                && !matches!(out.last(), Some(Tok::Ident { .. } | Tok::Number(_))))
        {
            let start = i;
            i += 1;
            while i < b.len() {
                let x = b[i];
                let exp_sign = matches!(x, b'+' | b'-') && matches!(b[i - 1], b'e' | b'E');
                if x.is_ascii_digit() || x == b'.' || x == b'e' || x == b'E' || exp_sign {
                    i += 1;
                } else {
                    break;
                }
            }
            out.push(Tok::Number(s[start..i].to_string()));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$') {
                i += 1;
            }
            out.push(Tok::Ident {
                text: s[start..i].to_ascii_lowercase(),
                quoted: false,
            });
        } else if let Some(sym) = SYMS.iter().find(|sym| s[i..].starts_with(**sym)) {
            out.push(Tok::Sym(sym));
            i += sym.len();
        } else {
            return err(format!(
                "unexpected character {:?}",
                s[i..].chars().next().unwrap_or('?')
            ));
        }
    }
    Ok(out)
}

/// A keyspace-qualified (or not) table name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QualName {
    /// Explicit keyspace, if written.
    pub(crate) keyspace: Option<String>,
    /// Table name.
    pub(crate) name: String,
}

/// A value position in a statement: a bind marker or a literal.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Term {
    /// `?` with its 0-based index among the statement's markers.
    Bind(usize),
    /// A literal.
    Lit(Literal),
}

/// Comparison operator of a relation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// `=`.
    Eq,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

/// Values of an `IN` relation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum InValues {
    /// `IN (a, b, …)`.
    List(Vec<Term>),
    /// `IN ?` bound to a list.
    Bind(usize),
}

/// One `WHERE` relation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Relation {
    /// `col op term`.
    Cmp {
        /// Column name.
        column: String,
        /// Operator.
        op: Op,
        /// Right-hand side.
        term: Term,
    },
    /// `col IN …`.
    In {
        /// Column name.
        column: String,
        /// Values.
        values: InValues,
    },
    /// `token(cols) op term`.
    Token {
        /// Columns inside `token(…)`.
        columns: Vec<String>,
        /// Operator.
        op: Op,
        /// Right-hand side.
        term: Term,
    },
}

/// One item of a `SELECT` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Selector {
    /// A column, with an optional `AS` alias.
    Column {
        /// Column name.
        name: String,
        /// Alias.
        alias: Option<String>,
    },
    /// `token(cols)`.
    Token(Vec<String>),
    /// `count(*)` / `count(1)`.
    CountStar,
}

/// A `SELECT` statement.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Select {
    /// Table.
    pub(crate) table: QualName,
    /// `None` for `*`.
    pub(crate) selectors: Option<Vec<Selector>>,
    /// Conjunction of relations.
    pub(crate) relations: Vec<Relation>,
    /// `LIMIT`.
    pub(crate) limit: Option<Term>,
    /// `ALLOW FILTERING`.
    pub(crate) allow_filtering: bool,
}

/// An `INSERT` statement.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Insert {
    /// Table.
    pub(crate) table: QualName,
    /// Column names.
    pub(crate) columns: Vec<String>,
    /// One value per column.
    pub(crate) values: Vec<Term>,
    /// `IF NOT EXISTS`.
    pub(crate) if_not_exists: bool,
    /// `USING TTL`.
    pub(crate) ttl: Option<Term>,
}

/// A `DELETE` statement (whole rows only).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Delete {
    /// Table.
    pub(crate) table: QualName,
    /// Conjunction of relations.
    pub(crate) relations: Vec<Relation>,
}

/// A column definition of `CREATE TABLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ColumnSpec {
    /// Name.
    pub(crate) name: String,
    /// Type as written.
    pub(crate) ty: String,
}

/// A `CREATE TABLE` statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CreateTable {
    /// Table.
    pub(crate) table: QualName,
    /// `IF NOT EXISTS`.
    pub(crate) if_not_exists: bool,
    /// Columns in written order.
    pub(crate) columns: Vec<ColumnSpec>,
    /// Partition key columns.
    pub(crate) partition_key: Vec<String>,
    /// Clustering columns.
    pub(crate) clustering: Vec<String>,
    /// Clustering columns declared `DESC` in `CLUSTERING ORDER BY`.
    pub(crate) desc: Vec<String>,
}

/// A parsed statement.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Statement {
    /// `CREATE KEYSPACE`.
    CreateKeyspace {
        /// Name.
        name: String,
        /// `IF NOT EXISTS`.
        if_not_exists: bool,
        /// The `replication` map, values as strings.
        replication: Vec<(String, String)>,
        /// `durable_writes`.
        durable_writes: bool,
    },
    /// `DROP KEYSPACE`.
    DropKeyspace {
        /// Name.
        name: String,
        /// `IF EXISTS`.
        if_exists: bool,
    },
    /// `CREATE TABLE`.
    CreateTable(CreateTable),
    /// `DROP TABLE`.
    DropTable {
        /// Table.
        table: QualName,
        /// `IF EXISTS`.
        if_exists: bool,
    },
    /// `TRUNCATE`.
    Truncate(QualName),
    /// `USE`.
    Use(String),
    /// `INSERT`.
    Insert(Insert),
    /// `SELECT`.
    Select(Select),
    /// `DELETE`.
    Delete(Delete),
    /// `BEGIN [UNLOGGED] BATCH … APPLY BATCH` in a query string.
    Batch(Vec<Self>),
}

/// Parses one statement; returns it and the number of `?` markers it contains.
pub(crate) fn parse(text: &str) -> PResult<(Statement, usize)> {
    let toks = tokenize(text)?;
    let mut p = Parser {
        toks,
        pos: 0,
        binds: 0,
    };
    let st = p.statement()?;
    while p.eat_sym(";") {}
    if p.pos < p.toks.len() {
        return err(format!(
            "unexpected input after the statement at {}",
            p.describe()
        ));
    }
    Ok((st, p.binds))
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
    binds: usize,
}

impl Parser {
    fn describe(&self) -> String {
        match self.toks.get(self.pos) {
            None => "end of input".into(),
            Some(Tok::Ident { text, .. }) => format!("'{text}'"),
            Some(Tok::Str(s)) => format!("string '{s}'"),
            Some(Tok::Number(n)) => format!("number {n}"),
            Some(Tok::Hex(_)) => "blob literal".into(),
            Some(Tok::Sym(s)) => format!("'{s}'"),
        }
    }

    fn peek_kw(&self, kw: &str) -> bool {
        matches!(self.toks.get(self.pos), Some(Tok::Ident { text, quoted: false }) if text == kw)
    }

    fn peek_kw_at(&self, off: usize, kw: &str) -> bool {
        matches!(self.toks.get(self.pos + off), Some(Tok::Ident { text, quoted: false }) if text == kw)
    }

    fn eat_kw(&mut self, kw: &str) -> bool {
        if self.peek_kw(kw) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_kw(&mut self, kw: &str) -> PResult<()> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            err(format!(
                "expected {} but found {}",
                kw.to_uppercase(),
                self.describe()
            ))
        }
    }

    fn peek_sym(&self, s: &str) -> bool {
        matches!(self.toks.get(self.pos), Some(Tok::Sym(x)) if *x == s)
    }

    fn eat_sym(&mut self, s: &str) -> bool {
        if self.peek_sym(s) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_sym(&mut self, s: &str) -> PResult<()> {
        if self.eat_sym(s) {
            Ok(())
        } else {
            err(format!("expected '{s}' but found {}", self.describe()))
        }
    }

    fn ident(&mut self) -> PResult<String> {
        match self.toks.get(self.pos) {
            Some(Tok::Ident { text, .. }) => {
                let t = text.clone();
                self.pos += 1;
                Ok(t)
            }
            _ => err(format!(
                "expected an identifier but found {}",
                self.describe()
            )),
        }
    }

    fn qual_name(&mut self) -> PResult<QualName> {
        let first = self.ident()?;
        if self.eat_sym(".") {
            let name = self.ident()?;
            Ok(QualName {
                keyspace: Some(first),
                name,
            })
        } else {
            Ok(QualName {
                keyspace: None,
                name: first,
            })
        }
    }

    fn if_not_exists(&mut self) -> PResult<bool> {
        if self.peek_kw("if") && self.peek_kw_at(1, "not") {
            self.pos += 2;
            self.expect_kw("exists")?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    fn if_exists(&mut self) -> PResult<bool> {
        if self.eat_kw("if") {
            self.expect_kw("exists")?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    fn literal(&mut self) -> PResult<Literal> {
        let lit = match self.toks.get(self.pos) {
            Some(Tok::Str(s)) => Literal::Str(s.clone()),
            Some(Tok::Number(n)) => Literal::Number(n.clone()),
            Some(Tok::Hex(h)) => Literal::Hex(h.clone()),
            Some(Tok::Ident {
                text,
                quoted: false,
            }) if text == "true" || text == "false" => Literal::Bool(text == "true"),
            Some(Tok::Ident {
                text,
                quoted: false,
            }) if text == "null" => Literal::Null,
            _ => return err(format!("expected a literal but found {}", self.describe())),
        };
        self.pos += 1;
        Ok(lit)
    }

    fn term(&mut self) -> PResult<Term> {
        if self.eat_sym("?") {
            let i = self.binds;
            self.binds += 1;
            return Ok(Term::Bind(i));
        }
        if self.peek_sym(":") {
            return err("named bind markers (:name) are not supported by the CQL double");
        }
        Ok(Term::Lit(self.literal()?))
    }

    fn statement(&mut self) -> PResult<Statement> {
        if self.eat_kw("select") {
            return Ok(Statement::Select(self.select()?));
        }
        if self.eat_kw("insert") {
            return Ok(Statement::Insert(self.insert()?));
        }
        if self.eat_kw("delete") {
            return Ok(Statement::Delete(self.delete()?));
        }
        if self.eat_kw("use") {
            return Ok(Statement::Use(self.ident()?));
        }
        if self.eat_kw("truncate") {
            self.eat_kw("table");
            return Ok(Statement::Truncate(self.qual_name()?));
        }
        if self.eat_kw("begin") {
            return self.batch();
        }
        if self.eat_kw("create") {
            if self.eat_kw("keyspace") {
                return self.create_keyspace();
            }
            if self.eat_kw("table") || self.eat_kw("columnfamily") {
                return Ok(Statement::CreateTable(self.create_table()?));
            }
            return err(format!(
                "CREATE {} is not supported by the CQL double",
                self.describe()
            ));
        }
        if self.eat_kw("drop") {
            if self.eat_kw("keyspace") {
                let if_exists = self.if_exists()?;
                let name = self.ident()?;
                return Ok(Statement::DropKeyspace { name, if_exists });
            }
            if self.eat_kw("table") || self.eat_kw("columnfamily") {
                let if_exists = self.if_exists()?;
                let table = self.qual_name()?;
                return Ok(Statement::DropTable { table, if_exists });
            }
            return err(format!(
                "DROP {} is not supported by the CQL double",
                self.describe()
            ));
        }
        err(format!(
            "statement starting with {} is not supported by the CQL double",
            self.describe()
        ))
    }

    fn select(&mut self) -> PResult<Select> {
        if self.peek_kw("json") || self.peek_kw("distinct") {
            return err(format!(
                "SELECT {} is not supported by the CQL double",
                self.describe()
            ));
        }
        let selectors = if self.eat_sym("*") {
            None
        } else {
            let mut v = vec![self.selector()?];
            while self.eat_sym(",") {
                v.push(self.selector()?);
            }
            Some(v)
        };
        self.expect_kw("from")?;
        let table = self.qual_name()?;
        let relations = if self.eat_kw("where") {
            self.relations()?
        } else {
            Vec::new()
        };
        if self.peek_kw("order") || self.peek_kw("group") || self.peek_kw("per") {
            return err(format!(
                "{} in SELECT is not supported by the CQL double",
                self.describe()
            ));
        }
        let limit = if self.eat_kw("limit") {
            Some(self.term()?)
        } else {
            None
        };
        let allow_filtering = if self.eat_kw("allow") {
            self.expect_kw("filtering")?;
            true
        } else {
            false
        };
        Ok(Select {
            table,
            selectors,
            relations,
            limit,
            allow_filtering,
        })
    }

    fn selector(&mut self) -> PResult<Selector> {
        let name = self.ident()?;
        if self.eat_sym("(") {
            let sel = match name.as_str() {
                "count" => {
                    if !self.eat_sym("*") {
                        match self.literal()? {
                            Literal::Number(n) if n == "1" => {}
                            _ => return err("only count(*) and count(1) are supported"),
                        }
                    }
                    Selector::CountStar
                }
                "token" => Selector::Token(self.ident_list_rest()?),
                other => {
                    return err(format!(
                        "function {other}() in a selector is not supported by the CQL double"
                    ));
                }
            };
            if matches!(sel, Selector::CountStar) {
                self.expect_sym(")")?;
            }
            if self.eat_kw("as") {
                // Aliases on computed selectors only rename; the double keeps default names.
                self.ident()?;
            }
            return Ok(sel);
        }
        let alias = if self.eat_kw("as") {
            Some(self.ident()?)
        } else {
            None
        };
        Ok(Selector::Column { name, alias })
    }

    /// Reads `a, b, c)` after an opening parenthesis.
    fn ident_list_rest(&mut self) -> PResult<Vec<String>> {
        let mut v = vec![self.ident()?];
        while self.eat_sym(",") {
            v.push(self.ident()?);
        }
        self.expect_sym(")")?;
        Ok(v)
    }

    fn op(&mut self) -> PResult<Op> {
        let op = match self.toks.get(self.pos) {
            Some(Tok::Sym("=")) => Op::Eq,
            Some(Tok::Sym("<")) => Op::Lt,
            Some(Tok::Sym("<=")) => Op::Le,
            Some(Tok::Sym(">")) => Op::Gt,
            Some(Tok::Sym(">=")) => Op::Ge,
            _ => {
                return err(format!(
                    "operator {} is not supported by the CQL double",
                    self.describe()
                ));
            }
        };
        self.pos += 1;
        Ok(op)
    }

    fn relations(&mut self) -> PResult<Vec<Relation>> {
        let mut v = vec![self.relation()?];
        while self.eat_kw("and") {
            v.push(self.relation()?);
        }
        Ok(v)
    }

    fn relation(&mut self) -> PResult<Relation> {
        if self.peek_sym("(") {
            return err("multi-column relations are not supported by the CQL double");
        }
        let name = self.ident()?;
        if name == "token" && self.eat_sym("(") {
            let columns = self.ident_list_rest()?;
            let op = self.op()?;
            if op == Op::Eq {
                return err("token(...) = is not supported by the CQL double; use a range");
            }
            let term = self.term()?;
            return Ok(Relation::Token { columns, op, term });
        }
        if self.eat_kw("in") {
            if self.eat_sym("(") {
                let mut terms = Vec::new();
                if !self.eat_sym(")") {
                    terms.push(self.term()?);
                    while self.eat_sym(",") {
                        terms.push(self.term()?);
                    }
                    self.expect_sym(")")?;
                }
                return Ok(Relation::In {
                    column: name,
                    values: InValues::List(terms),
                });
            }
            let Term::Bind(i) = self.term()? else {
                return err("IN expects a parenthesized list or a bind marker");
            };
            return Ok(Relation::In {
                column: name,
                values: InValues::Bind(i),
            });
        }
        let op = self.op()?;
        let term = self.term()?;
        Ok(Relation::Cmp {
            column: name,
            op,
            term,
        })
    }

    fn insert(&mut self) -> PResult<Insert> {
        self.expect_kw("into")?;
        let table = self.qual_name()?;
        if self.peek_kw("json") {
            return err("INSERT JSON is not supported by the CQL double");
        }
        self.expect_sym("(")?;
        let columns = self.ident_list_rest()?;
        self.expect_kw("values")?;
        self.expect_sym("(")?;
        let mut values = vec![self.term()?];
        while self.eat_sym(",") {
            values.push(self.term()?);
        }
        self.expect_sym(")")?;
        let if_not_exists = self.if_not_exists()?;
        let mut ttl = None;
        if self.eat_kw("using") {
            loop {
                if self.eat_kw("ttl") {
                    ttl = Some(self.term()?);
                } else if self.peek_kw("timestamp") {
                    return err("USING TIMESTAMP is not supported by the CQL double");
                } else {
                    return err(format!(
                        "USING {} is not supported by the CQL double",
                        self.describe()
                    ));
                }
                if !self.eat_kw("and") {
                    break;
                }
            }
        }
        if self.peek_kw("if") {
            return err("IF NOT EXISTS must come before USING");
        }
        Ok(Insert {
            table,
            columns,
            values,
            if_not_exists,
            ttl,
        })
    }

    fn delete(&mut self) -> PResult<Delete> {
        if !self.eat_kw("from") {
            return err("DELETE of individual columns is not supported by the CQL double");
        }
        let table = self.qual_name()?;
        if self.peek_kw("using") {
            return err("DELETE ... USING is not supported by the CQL double");
        }
        self.expect_kw("where")?;
        let relations = self.relations()?;
        if self.peek_kw("if") {
            return err("conditional DELETE is not supported by the CQL double");
        }
        Ok(Delete { table, relations })
    }

    fn batch(&mut self) -> PResult<Statement> {
        if !self.eat_kw("unlogged") {
            self.eat_kw("logged");
        }
        if self.peek_kw("counter") {
            return err("counter batches are not supported by the CQL double");
        }
        self.expect_kw("batch")?;
        if self.peek_kw("using") {
            return err("BATCH ... USING is not supported by the CQL double");
        }
        let mut stmts = Vec::new();
        loop {
            while self.eat_sym(";") {}
            if self.eat_kw("apply") {
                self.expect_kw("batch")?;
                break;
            }
            if self.eat_kw("insert") {
                stmts.push(Statement::Insert(self.insert()?));
            } else if self.eat_kw("delete") {
                stmts.push(Statement::Delete(self.delete()?));
            } else {
                return err(format!(
                    "only INSERT and DELETE are supported inside a batch, found {}",
                    self.describe()
                ));
            }
        }
        Ok(Statement::Batch(stmts))
    }

    fn create_keyspace(&mut self) -> PResult<Statement> {
        let if_not_exists = self.if_not_exists()?;
        let name = self.ident()?;
        self.expect_kw("with")?;
        let mut replication = None;
        let mut durable_writes = true;
        loop {
            let opt = self.ident()?;
            self.expect_sym("=")?;
            match opt.as_str() {
                "replication" => replication = Some(self.string_map()?),
                "durable_writes" => match self.literal()? {
                    Literal::Bool(b) => durable_writes = b,
                    _ => return err("durable_writes expects true or false"),
                },
                other => return err(format!("unknown keyspace property {other}")),
            }
            if !self.eat_kw("and") {
                break;
            }
        }
        let Some(replication) = replication else {
            return err("CREATE KEYSPACE requires a replication map");
        };
        Ok(Statement::CreateKeyspace {
            name,
            if_not_exists,
            replication,
            durable_writes,
        })
    }

    fn string_map(&mut self) -> PResult<Vec<(String, String)>> {
        self.expect_sym("{")?;
        let mut out = Vec::new();
        if self.eat_sym("}") {
            return Ok(out);
        }
        loop {
            let k = match self.literal()? {
                Literal::Str(s) => s,
                _ => return err("map keys must be strings"),
            };
            self.expect_sym(":")?;
            let v = match self.literal()? {
                Literal::Str(s) | Literal::Number(s) => s,
                Literal::Bool(b) => b.to_string(),
                _ => return err("map values must be strings or numbers"),
            };
            out.push((k, v));
            if !self.eat_sym(",") {
                break;
            }
        }
        self.expect_sym("}")?;
        Ok(out)
    }

    fn type_name(&mut self) -> PResult<String> {
        let t = self.ident()?;
        if self.peek_sym("<") {
            return err(format!(
                "collection type {t}<...> is not supported by the CQL double"
            ));
        }
        Ok(t)
    }

    fn create_table(&mut self) -> PResult<CreateTable> {
        let if_not_exists = self.if_not_exists()?;
        let table = self.qual_name()?;
        self.expect_sym("(")?;
        let mut columns = Vec::new();
        let mut partition_key = Vec::new();
        let mut clustering = Vec::new();
        loop {
            if self.peek_kw("primary") && self.peek_kw_at(1, "key") {
                self.pos += 2;
                if !partition_key.is_empty() {
                    return err("multiple PRIMARY KEY definitions");
                }
                self.expect_sym("(")?;
                if self.eat_sym("(") {
                    partition_key = self.ident_list_rest()?;
                } else {
                    partition_key.push(self.ident()?);
                }
                while self.eat_sym(",") {
                    clustering.push(self.ident()?);
                }
                self.expect_sym(")")?;
            } else {
                let name = self.ident()?;
                let ty = self.type_name()?;
                if self.peek_kw("static") {
                    return err("static columns are not supported by the CQL double");
                }
                if self.peek_kw("primary") {
                    self.pos += 1;
                    self.expect_kw("key")?;
                    if !partition_key.is_empty() {
                        return err("multiple PRIMARY KEY definitions");
                    }
                    partition_key.push(name.clone());
                }
                columns.push(ColumnSpec { name, ty });
            }
            if !self.eat_sym(",") {
                break;
            }
        }
        self.expect_sym(")")?;
        let mut desc = Vec::new();
        if self.eat_kw("with") {
            loop {
                if self.eat_kw("clustering") {
                    self.expect_kw("order")?;
                    self.expect_kw("by")?;
                    self.expect_sym("(")?;
                    loop {
                        let c = self.ident()?;
                        if self.eat_kw("desc") {
                            desc.push(c);
                        } else {
                            self.eat_kw("asc");
                        }
                        if !self.eat_sym(",") {
                            break;
                        }
                    }
                    self.expect_sym(")")?;
                } else if self.eat_kw("compact") {
                    return err("COMPACT STORAGE is not supported by the CQL double");
                } else {
                    // Table options (compaction, comment, gc_grace_seconds, …) have no
                    // observable effect in the double, so they are parsed and dropped.
                    let name = self.ident()?;
                    self.expect_sym("=")?;
                    if self.peek_sym("{") {
                        self.string_map()?;
                    } else {
                        let value = self.literal()?;
                        // A default TTL would change what reads return; refuse rather than ignore.
                        if name == "default_time_to_live"
                            && !matches!(&value, Literal::Number(n) if n == "0")
                        {
                            return err(
                                "default_time_to_live is not supported by the CQL double; use USING TTL",
                            );
                        }
                    }
                }
                if !self.eat_kw("and") {
                    break;
                }
            }
        }
        if partition_key.is_empty() {
            return err("CREATE TABLE needs a PRIMARY KEY");
        }
        Ok(CreateTable {
            table,
            if_not_exists,
            columns,
            partition_key,
            clustering,
            desc,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_driver_metadata_queries() {
        let (st, n) = parse(
            "SELECT keyspace_name, table_name, column_name, kind, position, type FROM system_schema.columns where keyspace_name in ?",
        )
        .unwrap();
        assert_eq!(n, 1);
        let Statement::Select(s) = st else { panic!() };
        assert_eq!(s.table.keyspace.as_deref(), Some("system_schema"));
        assert_eq!(s.selectors.unwrap().len(), 6);
        let (st, _) = parse("SELECT host_id, rpc_address, data_center, rack, tokens, cluster_name FROM system.local WHERE key='local'").unwrap();
        let Statement::Select(s) = st else { panic!() };
        assert_eq!(
            s.relations,
            vec![Relation::Cmp {
                column: "key".into(),
                op: Op::Eq,
                term: Term::Lit(Literal::Str("local".into()))
            }]
        );
    }

    #[test]
    fn parses_ddl_and_dml() {
        let (st, _) = parse(
            "CREATE TABLE IF NOT EXISTS ks.t (a bigint, b text, c double, PRIMARY KEY ((a), b)) WITH CLUSTERING ORDER BY (b DESC) AND comment = 'x' AND compaction = {'class': 'X'};",
        )
        .unwrap();
        let Statement::CreateTable(ct) = st else {
            panic!()
        };
        assert_eq!(ct.partition_key, vec!["a"]);
        assert_eq!(ct.clustering, vec!["b"]);
        assert_eq!(ct.desc, vec!["b"]);
        let (st, n) =
            parse("INSERT INTO t (a, b) VALUES (?, ?) IF NOT EXISTS USING TTL 10").unwrap();
        assert_eq!(n, 2);
        assert!(matches!(
            st,
            Statement::Insert(Insert {
                if_not_exists: true,
                ttl: Some(_),
                ..
            })
        ));
        let (st, n) =
            parse("SELECT * FROM t WHERE token(a) >= ? AND token(a) <= ? LIMIT 5 ALLOW FILTERING")
                .unwrap();
        assert_eq!(n, 2);
        let Statement::Select(s) = st else { panic!() };
        assert!(s.allow_filtering);
        assert_eq!(s.relations.len(), 2);
        assert!(parse("UPDATE t SET a = 1 WHERE b = 2").is_err());
        assert!(parse("SELECT * FROM t WHERE a = 1 USING TIMEOUT 5ms").is_err());
        assert!(parse("SELECT a FROM t WHERE a = -1").is_ok());
    }
}
