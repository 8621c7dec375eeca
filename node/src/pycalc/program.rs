//! The Python program text of a py_calc chunk and the conversion of its results (spec §7.7).
//!
//! Pure: no processes here. The text is generated the way Capillaries generates it, so every
//! literal quirk of §7.7 (float `%f`, naive string quoting, `TRUE`/`FALSE`, datetime as a
//! string, textual `r.`/`p.` replacement) is what the user code observes.

use std::fmt;
use std::fmt::Write as _;
use std::sync::Arc;

use plexus_core::decimal;
use plexus_core::gofmt;
use plexus_core::gotime;
use plexus_core::value::{AsCell, CellView, Type, Value};

/// The layout of datetime values handed to and returned by Python.
pub const PY_DATETIME_LAYOUT: &str = "2006-01-02T15:04:05.000-07:00";

/// A calculated field (`p.<name>`) of a py_calc node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CalcField {
    /// The p-field name, without the `p.` prefix.
    pub name: String,
    /// The declared result type.
    pub ty: Type,
    /// The Python expression exactly as written in the script (`r.`/`p.` not yet replaced).
    pub expression: String,
}

/// A reader field (`r.<name>`) the py_calc node reads; all of them are handed to Python.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReaderField {
    /// The field name, without the `r.` prefix.
    pub name: String,
    /// The column type.
    pub ty: Type,
}

/// Where in a row's computation a row failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailureSite {
    /// Assigning the literal of reader field `r.<name>` raised (e.g. the `TRUE` NameError quirk).
    Reader {
        /// The reader field name.
        name: String,
    },
    /// Computing p-field `p.<name>` raised.
    Calc {
        /// The p-field name.
        name: String,
        /// Its expression as written in the script.
        expression: String,
    },
    /// Serialising the row's results to JSON raised (e.g. a value JSON cannot represent).
    Serialize,
    /// Python produced a result the declared type does not accept, or invalid JSON.
    Convert {
        /// The p-field name; empty when the row's JSON as a whole was invalid.
        name: String,
    },
    /// The failing line could not be attributed (a Python frame outside the row's statements).
    Unknown,
}

impl fmt::Display for FailureSite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Reader { name } => write!(f, "r.{name}"),
            Self::Calc { name, expression } => write!(f, "p.{name} = {expression}"),
            Self::Serialize => f.write_str("result serialisation"),
            Self::Convert { name } if name.is_empty() => f.write_str("result decoding"),
            Self::Convert { name } => write!(f, "result p.{name}"),
            Self::Unknown => f.write_str("unknown statement"),
        }
    }
}

/// One row of a chunk that failed; the other rows of the chunk are unaffected.
#[derive(Clone, Debug, PartialEq)]
pub struct RowFailure {
    /// Index of the row within the chunk.
    pub row: usize,
    /// The statement that failed.
    pub site: FailureSite,
    /// The last non-empty line of the Python traceback (`ZeroDivisionError: division by zero`),
    /// or the result-conversion problem.
    pub message: String,
    /// The row's reader values, so that the caller can name the row by its key fields.
    pub values: Vec<Value>,
    /// The innermost frames of the traceback in the formula files, innermost first (empty
    /// when the exception was not raised inside them).
    pub raised_at: Vec<SourceLine>,
}

/// A line of one of a node's formula files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceLine {
    /// The file's URL as the script names it.
    pub file: String,
    /// The line in that file (1-based).
    pub line: u32,
    /// The Python function the line is in (`<module>` at top level), when known.
    pub function: Option<String>,
}

impl SourceLine {
    /// The same line, inside `function`.
    pub fn in_function(mut self, function: &str) -> Self {
        self.function = Some(function.to_string());
        self
    }
}

impl fmt::Display for SourceLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)?;
        match &self.function {
            Some(func) if func != "<module>" => write!(f, " in {func}"),
            _ => Ok(()),
        }
    }
}

impl RowFailure {
    /// The per-row message Capillaries puts in the batch error: `3:cannot calculate data points;…;`.
    pub fn capillaries_message(&self) -> String {
        format!(
            "{}:cannot calculate data points;{};",
            self.row, self.message
        )
    }
}

impl fmt::Display for RowFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "row {} ({}): {}", self.row, self.site, self.message)?;
        if let Some((first, rest)) = self.raised_at.split_first() {
            write!(f, " (raised at {first}")?;
            for frame in rest {
                write!(f, ", called from {frame}")?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// The outcome of one row: the p-field values in [`PyProgram::calc_fields`] order, or a failure.
pub type RowOutcome = Result<Vec<Value>, RowFailure>;

/// A reader value that has no Python literal (Go's "unexpected field type").
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UnsupportedValue {
    pub(crate) row: usize,
    pub(crate) field: String,
    pub(crate) go_type: &'static str,
}

/// What a chunk is sent as. A row whose values Python would read from their literals exactly
/// as given travels as data; any other row travels as its Capillaries program text, so the
/// quirks of its literals (spec §7.7) still happen in Python.
#[derive(Debug)]
pub(crate) struct Chunk {
    /// A JSON array with one item per row: either an array of the row's reader values, where a
    /// number is its Python literal (which is valid JSON) and a text is `[n]`, the next `n`
    /// bytes of [`Chunk::texts`]; or a string, the row's program, whose line 1 is its `try:`.
    pub(crate) rows: String,
    /// The text values of the data rows, one after the other in row order.
    pub(crate) texts: String,
}

impl Chunk {
    /// A chunk of no rows: the worker loads the code and computes nothing.
    pub(crate) fn no_rows() -> Self {
        Self {
            rows: "[]".into(),
            texts: String::new(),
        }
    }
}

/// Everything about a py_calc node that is fixed across its chunks: the code and the fields.
///
/// Capillaries repeats the p-field statements in every row of the program. Here they are
/// compiled once per worker into a function `__plexus_calc_<hash>` of the user namespace,
/// declaring the `p_` names `global`, so that they still are module globals assigned in the
/// same order; only the reader values change per row, as data where Python reads the literal
/// as the value itself, else as Capillaries' assignments, which carry the quirks of spec §14
/// #38 (see [`Chunk`]). Compiling the repeated statements dominated the cost of a chunk (4×
/// throughput). The one observable difference:
/// an expression calling `locals()`, `vars()` or `dir()` without arguments sees the function
/// scope instead of the module's.
#[derive(Debug)]
pub struct PyProgram {
    code: Arc<str>,
    code_hash: String,
    readers: Vec<ReaderField>,
    fields: Vec<CalcField>,
    /// The name of the p-field function, unique per field set.
    calc_name: String,
    /// The source of the p-field function.
    calc_source: String,
    /// Line (1-based, in `calc_source`) of each p-field statement, then of the result line.
    calc_lines: Vec<u32>,
    /// The files the code came from and how many lines each contributes, in order.
    origins: Vec<(String, u32)>,
}

impl PyProgram {
    /// Builds the program of a node from its `python_code_urls` sources (each followed by a
    /// newline, as Capillaries concatenates them), its p-fields in computation order and the
    /// reader fields it reads, in the order the rows hold them.
    pub fn new<S: AsRef<str>>(
        sources: &[S],
        fields: Vec<CalcField>,
        readers: Vec<ReaderField>,
    ) -> Self {
        let mut code = String::new();
        for s in sources {
            code.push_str(s.as_ref());
            code.push('\n');
        }
        let code_hash = blake3::hash(code.as_bytes()).to_hex().to_string();

        let mut result_dict = String::from("{");
        for (i, f) in fields.iter().enumerate() {
            if i > 0 {
                result_dict.push(',');
            }
            // A JSON string literal is a valid Python string literal.
            let key = serde_json::Value::String(f.name.clone()).to_string();
            let _ = write!(result_dict, "{key}:p_{}", f.name);
        }
        result_dict.push('}');

        // The body is built first: the function name hashes it.
        let mut body = String::new();
        let mut calc_lines = Vec::with_capacity(fields.len() + 1);
        // Line 1 is the `def`.
        let mut line = 2u32;
        if !fields.is_empty() {
            body.push_str("  global ");
            for (i, f) in fields.iter().enumerate() {
                if i > 0 {
                    body.push_str(", ");
                }
                let _ = write!(body, "p_{}", f.name);
            }
            body.push('\n');
            line += 1;
        }
        body.push_str("  try:\n");
        line += 1;
        for f in &fields {
            calc_lines.push(line);
            let expr = substitute_aliases(&f.expression);
            line += 1 + count_newlines(&expr);
            let _ = writeln!(body, "    p_{} = {}", f.name, expr);
        }
        calc_lines.push(line);
        let _ = write!(
            body,
            "    __plexus_row_ok(__plexus_i, {result_dict})\n  except:\n    \
             __plexus_row_fail(__plexus_i, 1)\n"
        );
        let digest = blake3::hash(body.as_bytes()).to_hex();
        let calc_name = format!("__plexus_calc_{}", &digest.as_str()[..16]);
        let calc_source = format!("def {calc_name}(__plexus_i):\n{body}");

        Self {
            code: Arc::from(code),
            code_hash,
            readers,
            fields,
            calc_name,
            calc_source,
            calc_lines,
            origins: Vec::new(),
        }
    }

    /// Names the files the code came from: each URL with the number of lines it contributes
    /// (the planner's `PyCalc::code_lines`), so Python's line numbers map to file and line.
    pub fn with_origins(mut self, origins: Vec<(String, u32)>) -> Self {
        self.origins = origins;
        self
    }

    /// The formula files the code came from, in order.
    pub fn files(&self) -> Vec<&str> {
        self.origins.iter().map(|(f, _)| f.as_str()).collect()
    }

    /// The file and line of line `line` (1-based) of [`Self::code`], when the origins say it.
    pub fn source_line(&self, line: u32) -> Option<SourceLine> {
        let mut rest = line.checked_sub(1)?;
        for (file, lines) in &self.origins {
            if rest < *lines {
                return Some(SourceLine {
                    file: file.clone(),
                    line: rest + 1,
                    function: None,
                });
            }
            rest -= lines;
        }
        None
    }

    /// The concatenated user code.
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The blake3 hex digest of [`Self::code`]; workers cache loaded code under it.
    pub fn code_hash(&self) -> &str {
        &self.code_hash
    }

    /// The p-fields in computation order.
    pub fn calc_fields(&self) -> &[CalcField] {
        &self.fields
    }

    /// The reader fields, in row order.
    pub fn reader_fields(&self) -> &[ReaderField] {
        &self.readers
    }

    /// The name of the p-field function in the user namespace.
    pub(crate) fn calc_name(&self) -> &str {
        &self.calc_name
    }

    /// The source of the p-field function: the p-field statements of a Capillaries row block,
    /// with `r.`/`p.` replaced, inside one `try:` recording the row's result or traceback.
    pub(crate) fn calc_source(&self) -> &str {
        &self.calc_source
    }

    /// Encodes a chunk (see [`Chunk`]). Compiling the literals of every row was most of what
    /// the worker spent outside the formulas: a value that is the same as data (a number, a
    /// finite float, a datetime or a string Python reads back unchanged) is sent as data. A
    /// row with any other value keeps Capillaries' text, in its own `try:` as every Capillaries
    /// row has: a name such as `TRUE` raises, a backslash may start an escape or end the
    /// literal early, and a line break makes the chunk a syntax error. Rows must have one
    /// value per reader field (checked by the caller).
    pub(crate) fn chunk<C: AsCell>(&self, rows: &[Vec<C>]) -> Result<Chunk, UnsupportedValue> {
        // Sized up front: a `string_agg` input makes the texts tens of MB, and growing them
        // would copy them again.
        let text_bytes = rows
            .iter()
            .flatten()
            .map(|c| match c.cell() {
                CellView::Value(Value::Time(_)) => PY_DATETIME_LAYOUT.len(),
                c => c.text().map_or(0, str::len),
            })
            .sum();
        let mut chunk = Chunk {
            rows: String::with_capacity(rows.len() * (self.readers.len() * 8 + 4)),
            texts: String::with_capacity(text_bytes),
        };
        chunk.rows.push('[');
        for (i, row) in rows.iter().enumerate() {
            if i > 0 {
                chunk.rows.push(',');
            }
            if row.iter().all(|c| is_data(c.cell())) {
                write_data_row(&mut chunk, row);
                continue;
            }
            let mut program = String::from("try:\n");
            for (field, value) in self.readers.iter().zip(row) {
                let _ = write!(program, "  r_{} = ", field.name);
                let value = value.cell().to_value();
                write_literal(&mut program, &value).map_err(|go_type| UnsupportedValue {
                    row: i,
                    field: field.name.clone(),
                    go_type,
                })?;
                program.push('\n');
            }
            let _ = writeln!(
                program,
                "  {}({i})\nexcept:\n  __plexus_row_fail({i}, 0)",
                self.calc_name
            );
            let _ = write!(chunk.rows, "{}", serde_json::Value::String(program));
        }
        chunk.rows.push(']');
        Ok(chunk)
    }

    /// Attributes a failing line to the statement it belongs to: `in_calc` for a line of the
    /// p-field function, otherwise a line of a row's program (see [`Chunk::rows`]).
    pub(crate) fn failure_site(&self, in_calc: bool, lineno: u32) -> FailureSite {
        if in_calc {
            let idx = self.calc_lines.partition_point(|&l| l <= lineno);
            return match idx.checked_sub(1) {
                None => FailureSite::Unknown,
                Some(i) => match self.fields.get(i) {
                    Some(f) => FailureSite::Calc {
                        name: f.name.clone(),
                        expression: f.expression.clone(),
                    },
                    None => FailureSite::Serialize,
                },
            };
        }
        // Line 1 is the row's `try:`, then one line per reader assignment.
        lineno
            .checked_sub(2)
            .and_then(|idx| usize::try_from(idx).ok())
            .and_then(|idx| self.readers.get(idx))
            .map_or(FailureSite::Unknown, |r| FailureSite::Reader {
                name: r.name.clone(),
            })
    }

    /// Decodes the JSON object Python printed for a row into the declared p-field types.
    pub(crate) fn convert_results(&self, json: &str) -> Result<Vec<Value>, (FailureSite, String)> {
        let map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(json).map_err(|e| {
                (
                    FailureSite::Convert {
                        name: String::new(),
                    },
                    format!("cannot decode python results {json}: {e}"),
                )
            })?;
        self.fields
            .iter()
            .map(|f| {
                let site = || FailureSite::Convert {
                    name: f.name.clone(),
                };
                let v = map
                    .get(&f.name)
                    .ok_or_else(|| (site(), format!("no result for p.{}", f.name)))?;
                convert_value(v, f.ty).map_err(|m| (site(), format!("p.{}: {m}", f.name)))
            })
            .collect()
    }
}

/// Appends a row whose values all pass [`is_data`] to `chunk`.
fn write_data_row<C: AsCell>(chunk: &mut Chunk, row: &[C]) {
    chunk.rows.push('[');
    for (j, cell) in row.iter().enumerate() {
        if j > 0 {
            chunk.rows.push(',');
        }
        let start = chunk.texts.len();
        let cell = cell.cell();
        match (cell.text(), cell) {
            (Some(s), _) => chunk.texts.push_str(s),
            (None, CellView::Value(Value::Time(t))) => {
                gotime::format_into(&mut chunk.texts, t, PY_DATETIME_LAYOUT);
            }
            // Numbers: the literal is the JSON number, which Python reads the same way.
            (None, number) => {
                let _ = write_literal(&mut chunk.rows, &number.to_value());
                continue;
            }
        }
        let _ = write!(chunk.rows, "[{}]", chunk.texts.len() - start);
    }
    chunk.rows.push(']');
}

/// True when Python reads `v` from its literal exactly as [`Chunk`] sends it as data: a number,
/// a finite float (`%f` prints NaN and ±Inf as names), a datetime (a string literal without
/// escapes), or a string without a backslash, a line break or a NUL (every `'` is escaped;
/// those four are the characters whose literal is not the string itself, checked over every
/// code point by the `t20_pycalc` data test).
fn is_data(c: CellView<'_>) -> bool {
    match (c.text(), c) {
        (Some(s), _) => !s.contains(['\\', '\n', '\r', '\0']),
        (None, CellView::Value(Value::Int(_) | Value::Decimal(_) | Value::Time(_))) => true,
        (None, CellView::Value(Value::Float(f))) => f.is_finite(),
        _ => false,
    }
}

/// Converts one JSON result to the declared type (spec §7.7 result-conversion table).
fn convert_value(v: &serde_json::Value, ty: Type) -> Result<Value, String> {
    use serde_json::Value as J;
    let wrong = || format!("cannot convert python value {v} to {ty}");
    match (ty, v) {
        (Type::String, J::String(s)) => Ok(Value::str(s)),
        (Type::Bool, J::Bool(b)) => Ok(Value::Bool(*b)),
        (Type::Int, J::Number(n)) => Ok(Value::Int(go_float_to_int(json_f64(n)?))),
        (Type::Float, J::Number(n)) => Ok(Value::Float(json_f64(n)?)),
        (Type::Decimal2, J::Number(n)) => decimal::from_f64(json_f64(n)?)
            .map(|d| Value::Decimal(decimal::round2(d)))
            .map_err(|e| e.to_string()),
        (Type::DateTime, J::String(s)) => gotime::parse(PY_DATETIME_LAYOUT, s)
            .map(Value::Time)
            .map_err(|e| e.to_string()),
        _ => Err(wrong()),
    }
}

/// A JSON number as Go's decoder into `any` sees it: always a float64.
fn json_f64(n: &serde_json::Number) -> Result<f64, String> {
    match n.as_f64() {
        Some(f) if f.is_finite() => Ok(f),
        _ => Err(format!("number {n} is out of range of float64")),
    }
}

/// Go's `int64(f)` on amd64: truncation toward zero, and the "integer indefinite" value
/// (`math.MinInt64`) when `f` is out of range, where Rust's `as` would saturate.
fn go_float_to_int(f: f64) -> i64 {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if (-LIMIT..LIMIT).contains(&f) {
        f as i64
    } else {
        i64::MIN
    }
}

/// Replaces every `r.` by `r_` and `p.` by `p_`, wherever they occur (spec §14 #39 quirk:
/// also inside string literals and at the end of other identifiers).
pub fn substitute_aliases(expression: &str) -> String {
    expression.replace("r.", "r_").replace("p.", "p_")
}

/// Appends the Python literal Capillaries assigns for a reader value (spec §7.7 table);
/// `Err` carries the Go type name of a value that has none.
pub fn write_literal(out: &mut String, value: &Value) -> Result<(), &'static str> {
    match value {
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        // Quirk (spec §14 #38): `%f`, so only 6 decimals reach Python.
        Value::Float(f) => gofmt::sprintf_into(out, "%f", &[Value::Float(*f)]),
        // Quirk (spec §14 #38): only `'` is escaped; backslashes start Python escapes.
        Value::Str(s) => {
            out.push('\'');
            for c in s.chars() {
                if c == '\'' {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('\'');
        }
        // Quirk (spec §14 #38): not Python; the row fails with a NameError.
        Value::Bool(b) => out.push_str(if *b { "TRUE" } else { "FALSE" }),
        Value::Decimal(d) => decimal::canonical_into(out, d),
        Value::Time(t) => {
            out.push('"');
            gotime::format_into(out, t, PY_DATETIME_LAYOUT);
            out.push('"');
        }
        other => return Err(other.go_type_name()),
    }
    Ok(())
}

/// Number of `\n` in `s`, as a line count.
fn count_newlines(s: &str) -> u32 {
    u32::try_from(s.bytes().filter(|&b| b == b'\n').count()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_core::value::Time;
    use rust_decimal::Decimal;

    fn lit(v: Value) -> String {
        let mut s = String::new();
        write_literal(&mut s, &v).map(|()| s).unwrap_or_default()
    }

    #[test]
    fn literals_follow_capillaries() {
        assert_eq!(lit(Value::Int(-42)), "-42");
        assert_eq!(lit(Value::Float(0.0000001)), "0.000000");
        assert_eq!(lit(Value::Float(12.5)), "12.500000");
        assert_eq!(lit(Value::str("it's")), r"'it\'s'");
        assert_eq!(lit(Value::str(r"a\nb")), r"'a\nb'");
        assert_eq!(lit(Value::Bool(true)), "TRUE");
        assert_eq!(lit(Value::Bool(false)), "FALSE");
        assert_eq!(lit(Value::Decimal(Decimal::new(1200, 2))), "12");
        assert_eq!(lit(Value::Decimal(Decimal::new(-50, 2))), "-0.5");
        assert_eq!(lit(Value::Decimal(Decimal::new(10178, 2))), "101.78");
        let t = Time::from_unix_millis(1_580_417_001_000);
        assert_eq!(lit(Value::Time(t)), "\"2020-01-30T20:43:21.000+00:00\"");
        let mut s = String::new();
        assert_eq!(write_literal(&mut s, &Value::GoInt(1)), Err("int"));
    }

    #[test]
    fn alias_substitution_is_textual() {
        assert_eq!(
            substitute_aliases(r#"f(r.x, "Dr. No", p.y)"#),
            r#"f(r_x, "Dr_ No", p_y)"#
        );
        assert_eq!(substitute_aliases("top.x"), "top_x");
    }

    fn program() -> PyProgram {
        PyProgram::new(
            &["def f(x):\n    return x"],
            vec![
                CalcField {
                    name: "a".into(),
                    ty: Type::Int,
                    expression: "f(r.x)".into(),
                },
                CalcField {
                    name: "b".into(),
                    ty: Type::Float,
                    expression: "f(\n  p.a)".into(),
                },
            ],
            vec![
                ReaderField {
                    name: "x".into(),
                    ty: Type::Int,
                },
                ReaderField {
                    name: "s".into(),
                    ty: Type::String,
                },
            ],
        )
    }

    #[test]
    fn calc_function_shape_and_sites() {
        let p = program();
        assert_eq!(p.code(), "def f(x):\n    return x\n");
        let name = p.calc_name();
        assert!(name.starts_with("__plexus_calc_"));
        let expected = format!(
            "def {name}(__plexus_i):\n  global p_a, p_b\n  try:\n    p_a = f(r_x)\n    \
             p_b = f(\n  p_a)\n    __plexus_row_ok(__plexus_i, {{\"a\":p_a,\"b\":p_b}})\n  \
             except:\n    __plexus_row_fail(__plexus_i, 1)\n"
        );
        assert_eq!(p.calc_source(), expected);
        let site = |l| p.failure_site(true, l);
        assert!(matches!(site(4), FailureSite::Calc { name, .. } if name == "a"));
        assert!(matches!(site(5), FailureSite::Calc { name, .. } if name == "b"));
        assert!(matches!(site(6), FailureSite::Calc { name, .. } if name == "b"));
        assert_eq!(site(7), FailureSite::Serialize);
        assert_eq!(site(3), FailureSite::Unknown);
    }

    #[test]
    fn chunks_send_data_rows_as_data_and_other_rows_as_programs() {
        let p = program();
        let t = Time::from_unix_millis(1_580_417_001_000);
        let rows = vec![
            vec![Value::Int(1), Value::str("a'é")],
            vec![Value::Int(2), Value::str(r"b\")],
            vec![Value::Float(0.5), Value::Time(t)],
            vec![Value::Decimal(Decimal::new(1200, 2)), Value::str("")],
            vec![Value::Bool(true), Value::str("c")],
        ];
        let chunk = p
            .chunk(&rows)
            .map_err(|e| e.field)
            .unwrap_or_else(|f| panic!("{f}"));
        let name = p.calc_name();
        let program = |i: usize, x: &str, s: &str| {
            serde_json::Value::String(format!(
                "try:\n  r_x = {x}\n  r_s = {s}\n  {name}({i})\nexcept:\n  __plexus_row_fail({i}, 0)\n"
            ))
        };
        let expected = format!(
            "[[1,[4]],{},[0.500000,[29]],[12,[0]],{}]",
            program(1, "2", r"'b\'"),
            program(4, "TRUE", "'c'")
        );
        assert_eq!(chunk.rows, expected);
        assert_eq!(chunk.texts, "a'é2020-01-30T20:43:21.000+00:00");
        // Strings borrowed from where they were read make the same chunk.
        let borrowed: Vec<Vec<CellView<'_>>> = rows
            .iter()
            .map(|r| {
                r.iter()
                    .map(|v| match v {
                        Value::Str(s) => CellView::Str(s),
                        v => CellView::Value(v),
                    })
                    .collect()
            })
            .collect();
        let again = p
            .chunk(&borrowed)
            .map_err(|e| e.field)
            .unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(
            (again.rows, again.texts),
            (chunk.rows.clone(), chunk.texts.clone())
        );
        let site = |l| p.failure_site(false, l);
        assert_eq!(site(2), FailureSite::Reader { name: "x".into() });
        assert_eq!(site(3), FailureSite::Reader { name: "s".into() });
        assert_eq!(site(4), FailureSite::Unknown);
        assert_eq!(site(1), FailureSite::Unknown);
        assert_eq!(site(0), FailureSite::Unknown);
        for v in [
            Value::Bool(true),
            Value::Float(f64::NAN),
            Value::str(r"\n"),
            Value::str("a\nb"),
            Value::str("a\rb"),
            Value::str("a\0b"),
        ] {
            assert!(!is_data(CellView::Value(&v)), "{v:?}");
        }
        let unsupported = p.chunk(&[vec![Value::Int(1), Value::GoInt(2)]]);
        assert_eq!(
            unsupported.map(|_| ()).map_err(|e| e.field),
            Err("s".into())
        );
    }

    #[test]
    fn result_conversion() {
        let p = program();
        let ok = p.convert_results(r#"{"a": -7.9, "b": 2}"#);
        assert_eq!(ok, Ok(vec![Value::Int(-7), Value::Float(2.0)]));
        assert!(p.convert_results(r#"{"a": 1}"#).is_err());
        assert!(p.convert_results(r#"{"a": NaN, "b": 1}"#).is_err());
        assert!(p.convert_results(r#"{"a": "1", "b": 1}"#).is_err());
        assert_eq!(go_float_to_int(1e30), i64::MIN);
        let d = convert_value(&serde_json::json!(12.438888888888888), Type::Decimal2);
        assert_eq!(d, Ok(Value::Decimal(Decimal::new(1244, 2))));
        let d = convert_value(&serde_json::json!(0.125), Type::Decimal2);
        assert_eq!(d, Ok(Value::Decimal(Decimal::new(13, 2))));
        let t = convert_value(
            &serde_json::json!("2020-02-03T23:59:59.999+00:00"),
            Type::DateTime,
        );
        assert_eq!(
            t,
            Ok(Value::Time(Time::from_unix_millis(1_580_774_399_999)))
        );
        let z = convert_value(
            &serde_json::json!("2020-02-03T23:59:59.999Z"),
            Type::DateTime,
        );
        assert!(z.is_err());
    }
}
