//! Template parameters and the params file (spec §3.2), applied to the raw script text.
//!
//! The steps run exactly in the order of the spec, because the order is observable:
//! 1. `{name}` → `{name|string}` for *any* brace-enclosed identifier (quirk 1: a regex quantifier
//!    `{2}` becomes `{2|string}` and then fails as unresolved; `{2,3}` is untouched);
//! 2. `{ name | type }` → `{name|type}`;
//! 3. `number`/`bool` references must be a whole quoted string (`"{n|number}"`);
//! 4. one left-to-right replacement pass (inserted values are never rescanned);
//! 5. any remaining `{x|string}`, `{x|number}`, `{x|bool}` is an error, except the reserved
//!    [`RESERVED_BATCH_IDX`] and — superset of Capillaries, quirk 3 — [`RESERVED_RUN_ID`].

use std::collections::BTreeMap;

use crate::decode::{ScriptFormat, SyntaxError, text_to_json};

/// The reserved batch-index placeholder as it appears after substitution; replaced at write time.
pub const RESERVED_BATCH_IDX: &str = "{batch_idx|string}";

/// The reserved run-id placeholder as it appears after substitution; replaced at write time.
pub const RESERVED_RUN_ID: &str = "{run_id|string}";

/// Names exempt from the unresolved check.
const RESERVED_NAMES: [&str; 2] = ["batch_idx", "run_id"];

/// A template-parameter failure; every variant names the script and/or params file.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The params file is not valid JSON/YAML.
    #[error("params {params}: {source}")]
    ParamsSyntax {
        /// Params file URL.
        params: String,
        /// Where and why decoding failed.
        #[source]
        source: SyntaxError,
    },
    /// The params file is not a JSON/YAML object (name → value map).
    #[error("params {params}: expected an object of parameter name -> value, found {found}")]
    ParamsNotObject {
        /// Params file URL.
        params: String,
        /// The JSON kind found instead.
        found: &'static str,
    },
    /// A parameter's value is an object, null, a non-string list, etc.
    #[error("params {params}: parameter {name}: unsupported parameter type {found}")]
    UnsupportedParamType {
        /// Params file URL.
        params: String,
        /// Parameter name.
        name: String,
        /// Description of the offending value.
        found: String,
    },
    /// A number parameter that cannot be printed (infinite/NaN, possible via YAML).
    #[error("params {params}: parameter {name}: number {value} is not finite")]
    NonFiniteNumber {
        /// Params file URL.
        params: String,
        /// Parameter name.
        name: String,
        /// The value as Rust prints it.
        value: f64,
    },
    /// `{x|number}`/`{x|bool}` not written as a whole quoted string.
    #[error(
        "script {script}: cannot parse number/bool script parameter references, the following parameter references should not have extra characters between curly braces and double quotes: {}",
        refs.join(", ")
    )]
    Placement {
        /// Script URL.
        script: String,
        /// Offending references, each prefixed with its line number.
        refs: Vec<String>,
    },
    /// References left over after substitution (or with no params file at all).
    #[error(
        "script {script}: unresolved parameter references {} ({}); make sure that type in the script matches the type of the parameter",
        refs.join(", "),
        params.as_deref().map_or_else(|| "no params file given".to_string(), |p| format!("params {p}"))
    )]
    Unresolved {
        /// Script URL.
        script: String,
        /// Params file URL, if any.
        params: Option<String>,
        /// The unresolved references, in order of first appearance, without duplicates.
        refs: Vec<String>,
    },
}

/// A decoded template parameter value.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    /// Replaces `{name|string}` verbatim (newlines become `\n`).
    String(String),
    /// Replaces `"{name|number}"`; JSON/YAML numbers are floating point as in Go.
    Number(f64),
    /// Replaces `"{name|bool}"`.
    Bool(bool),
    /// Replaces `"{name|stringlist}"` by `["a","b"]` (elements not escaped).
    StringList(Vec<String>),
}

/// The decoded params file: parameter name → value, plus its URL for error messages.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Params {
    /// Params file URL (or any label), used in error messages.
    pub origin: String,
    /// Parameter values by name.
    pub values: BTreeMap<String, ParamValue>,
}

/// JSON kind name used in messages.
fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

impl Params {
    /// Decodes params text (JSON or YAML, YAML going through the JSON conversion of §3.13).
    pub fn from_text(
        text: &str,
        format: ScriptFormat,
        origin: &str,
    ) -> Result<Self, TemplateError> {
        let value = text_to_json(text, format).map_err(|source| TemplateError::ParamsSyntax {
            params: origin.to_string(),
            source,
        })?;
        Self::from_json_value(&value, origin)
    }

    /// Builds params from an already decoded generic value; every parameter is type-checked,
    /// used or not, as Capillaries builds its replacer from all of them.
    pub fn from_json_value(value: &serde_json::Value, origin: &str) -> Result<Self, TemplateError> {
        let serde_json::Value::Object(map) = value else {
            return Err(TemplateError::ParamsNotObject {
                params: origin.to_string(),
                found: kind_of(value),
            });
        };
        let unsupported = |name: &str, found: String| TemplateError::UnsupportedParamType {
            params: origin.to_string(),
            name: name.to_string(),
            found,
        };
        let mut values = BTreeMap::new();
        for (name, v) in map {
            let pv = match v {
                serde_json::Value::String(s) => ParamValue::String(s.clone()),
                // JSON numbers are float64 in Go; as_f64 is lossy for huge integers, like Go.
                serde_json::Value::Number(n) => {
                    ParamValue::Number(n.as_f64().ok_or_else(|| unsupported(name, n.to_string()))?)
                }
                serde_json::Value::Bool(b) => ParamValue::Bool(*b),
                // Decision (quirk 4): an empty list is substituted as `[]` instead of crashing.
                serde_json::Value::Array(items) if items.is_empty() => {
                    ParamValue::StringList(Vec::new())
                }
                serde_json::Value::Array(items) if items[0].is_string() => {
                    let mut list = Vec::with_capacity(items.len());
                    for (i, item) in items.iter().enumerate() {
                        match item.as_str() {
                            Some(s) => list.push(s.to_string()),
                            None => {
                                return Err(unsupported(
                                    name,
                                    format!(
                                        "(string list element {i} is a {}, expected a string)",
                                        kind_of(item)
                                    ),
                                ));
                            }
                        }
                    }
                    ParamValue::StringList(list)
                }
                serde_json::Value::Array(items) => {
                    return Err(unsupported(
                        name,
                        format!("(array of {})", kind_of(&items[0])),
                    ));
                }
                other => return Err(unsupported(name, format!("({})", kind_of(other)))),
            };
            if let ParamValue::Number(f) = pv
                && !f.is_finite()
            {
                return Err(TemplateError::NonFiniteNumber {
                    params: origin.to_string(),
                    name: name.clone(),
                    value: f,
                });
            }
            values.insert(name.clone(), pv);
        }
        Ok(Self {
            origin: origin.to_string(),
            values,
        })
    }
}

/// The four parameter types of the template syntax.
const PARAM_TYPES: [&str; 4] = ["string", "number", "bool", "stringlist"];

/// True for the bytes of a parameter name (`[a-zA-Z0-9_]`).
fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Advances past ASCII spaces (only `' '`, like the Go regexes' `[ ]*`).
fn skip_spaces(b: &[u8], mut i: usize) -> usize {
    while b.get(i) == Some(&b' ') {
        i += 1;
    }
    i
}

/// Advances past a parameter name; returns the end index, or `None` when empty.
fn scan_name(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    while b.get(i).is_some_and(|&c| is_name_byte(c)) {
        i += 1;
    }
    (i > start).then_some(i)
}

/// Matches `{ name }` at `i` (which holds `{`); returns (name, index after `}`).
fn match_bare(text: &str, i: usize) -> Option<(&str, usize)> {
    let b = text.as_bytes();
    let ns = skip_spaces(b, i + 1);
    let ne = scan_name(b, ns)?;
    let close = skip_spaces(b, ne);
    (b.get(close) == Some(&b'}')).then(|| (&text[ns..ne], close + 1))
}

/// Matches `{ name | type }` at `i`; returns (name, type, index after `}`).
fn match_typed_spaced(text: &str, i: usize) -> Option<(&str, &'static str, usize)> {
    let b = text.as_bytes();
    let ns = skip_spaces(b, i + 1);
    let ne = scan_name(b, ns)?;
    let bar = skip_spaces(b, ne);
    if b.get(bar) != Some(&b'|') {
        return None;
    }
    let ts = skip_spaces(b, bar + 1);
    let mut te = ts;
    while b.get(te).is_some_and(u8::is_ascii_lowercase) {
        te += 1;
    }
    let ty = PARAM_TYPES.iter().find(|t| **t == &text[ts..te])?;
    let close = skip_spaces(b, te);
    (b.get(close) == Some(&b'}')).then(|| (&text[ns..ne], *ty, close + 1))
}

/// Matches a normalised `{name|type}` at `i`; returns (name, type, index after `}`).
fn match_typed(text: &str, i: usize) -> Option<(&str, &'static str, usize)> {
    let b = text.as_bytes();
    if b.get(i) != Some(&b'{') {
        return None;
    }
    let ne = scan_name(b, i + 1)?;
    if b.get(ne) != Some(&b'|') {
        return None;
    }
    let mut te = ne + 1;
    while b.get(te).is_some_and(u8::is_ascii_lowercase) {
        te += 1;
    }
    let ty = PARAM_TYPES.iter().find(|t| **t == &text[ne + 1..te])?;
    (b.get(te) == Some(&b'}')).then(|| (&text[i + 1..ne], *ty, te + 1))
}

/// Rewrites every `{` match of `matcher` via `emit`, copying everything else verbatim, in one
/// non-overlapping left-to-right pass (Go `Regexp.ReplaceAllString` semantics).
fn rewrite(text: &str, mut step: impl FnMut(&str, usize, &mut String) -> Option<usize>) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut copied = 0;
    let mut i = 0;
    let b = text.as_bytes();
    while i < b.len() {
        if b[i] == b'{' || b[i] == b'"' {
            let mut piece = String::new();
            if let Some(end) = step(text, i, &mut piece) {
                out.push_str(&text[copied..i]);
                out.push_str(&piece);
                i = end;
                copied = end;
                continue;
            }
        }
        i += 1;
    }
    out.push_str(&text[copied..]);
    out
}

/// 1-based line number of byte offset `pos`.
fn line_of(text: &str, pos: usize) -> usize {
    text.as_bytes()[..pos]
        .iter()
        .filter(|&&c| c == b'\n')
        .count()
        + 1
}

/// Formats a number parameter like Capillaries: integral → `%d`, otherwise Go `%f`.
fn format_number(f: f64) -> String {
    // 2^63: beyond it Go's int64 conversion is not exact, so it prints with %f.
    const I64_BOUND: f64 = 9_223_372_036_854_775_808.0;
    if f.fract() == 0.0 && f.abs() < I64_BOUND {
        #[allow(clippy::cast_possible_truncation)]
        let i = f as i64;
        i.to_string()
    } else {
        format!("{f:.6}")
    }
}

/// Applies template parameters to the raw script text (spec §3.2); `script` names the script
/// file in errors.
pub fn apply_template(
    text: &str,
    script: &str,
    params: Option<&Params>,
) -> Result<String, TemplateError> {
    // Step 1: `{name}` → `{name|string}` (also regex quantifiers: quirk 1, replicated).
    let text = rewrite(text, |t, i, out| {
        if t.as_bytes()[i] != b'{' {
            return None;
        }
        let (name, end) = match_bare(t, i)?;
        out.push_str(&format!("{{{name}|string}}"));
        Some(end)
    });
    // Step 2: remove spaces inside typed references.
    let text = rewrite(&text, |t, i, out| {
        if t.as_bytes()[i] != b'{' {
            return None;
        }
        let (name, ty, end) = match_typed_spaced(t, i)?;
        out.push_str(&format!("{{{name}|{ty}}}"));
        Some(end)
    });
    // Step 3: number/bool references must be a whole quoted string.
    let b = text.as_bytes();
    let mut bad = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if let Some((_, ty, end)) = match_typed(&text, i)
            && (ty == "number" || ty == "bool")
        {
            let quoted_before = i > 0 && b[i - 1] == b'"';
            let quoted_after = b.get(end) == Some(&b'"');
            if !(quoted_before && quoted_after) {
                bad.push(format!("line {}: {}", line_of(&text, i), &text[i..end]));
            }
            i = end;
        } else {
            i += 1;
        }
    }
    if !bad.is_empty() {
        return Err(TemplateError::Placement {
            script: script.to_string(),
            refs: bad,
        });
    }
    // Step 4: one left-to-right pass; inserted values are not scanned again.
    let text = match params {
        None => text,
        Some(params) => rewrite(&text, |t, i, out| {
            let quoted = t.as_bytes()[i] == b'"';
            let start = if quoted { i + 1 } else { i };
            let (name, ty, end) = match_typed(t, start)?;
            let value = params.values.get(name)?;
            match (quoted, ty, value) {
                (_, "string", ParamValue::String(s)) => {
                    // A `"` before a string reference is ordinary text: keep it.
                    if quoted {
                        out.push('"');
                    }
                    out.push_str(&s.replace('\n', "\\n"));
                    Some(end)
                }
                (true, "number" | "bool" | "stringlist", _)
                    if t.as_bytes().get(end) != Some(&b'"') =>
                {
                    None
                }
                (true, "number", ParamValue::Number(f)) => {
                    out.push_str(&format_number(*f));
                    Some(end + 1)
                }
                (true, "bool", ParamValue::Bool(v)) => {
                    out.push_str(if *v { "true" } else { "false" });
                    Some(end + 1)
                }
                (true, "stringlist", ParamValue::StringList(items)) => {
                    let quoted: Vec<String> = items.iter().map(|s| format!("\"{s}\"")).collect();
                    out.push_str(&format!("[{}]", quoted.join(",")));
                    Some(end + 1)
                }
                _ => None,
            }
        }),
    };
    // Step 5: unresolved references (stringlist is not checked, as in Capillaries).
    let mut unresolved: Vec<String> = Vec::new();
    let mut i = 0;
    while i < text.len() {
        if let Some((name, ty, end)) = match_typed(&text, i) {
            let checked = matches!(ty, "string" | "number" | "bool");
            let reserved = ty == "string" && RESERVED_NAMES.contains(&name);
            let r = &text[i..end];
            if checked && !reserved && !unresolved.iter().any(|u| u == r) {
                unresolved.push(r.to_string());
            }
            i = end;
        } else {
            i += 1;
        }
    }
    if !unresolved.is_empty() {
        return Err(TemplateError::Unresolved {
            script: script.to_string(),
            params: params.map(|p| p.origin.clone()),
            refs: unresolved,
        });
    }
    Ok(text)
}

#[cfg(test)]
mod tests;
