//! Text → generic JSON value with Capillaries' decoding rules (spec §3.13), for scripts and
//! params alike.
//!
//! Its own module because both the loader and the template step decode text: the loader
//! decodes the substituted script, the template step decodes the params file; neither needs
//! the other for it.

use std::fmt;

use serde::de::{self, DeserializeSeed, Visitor};

/// Text format of a script or params file, decided by the URL suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptFormat {
    /// `.json`
    Json,
    /// `.yaml` (`.yml` is not accepted, like Capillaries)
    Yaml,
}

impl ScriptFormat {
    /// The format of `url` by its suffix, `None` for anything but `.json`/`.yaml`.
    pub fn from_url(url: &str) -> Option<Self> {
        if url.ends_with(".json") {
            Some(Self::Json)
        } else if url.ends_with(".yaml") {
            Some(Self::Yaml)
        } else {
            None
        }
    }
}

/// A JSON/YAML syntax (or YAML-to-JSON conversion) error with its position when known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SyntaxError {
    /// 1-based line, when the decoder reported one.
    pub line: Option<usize>,
    /// 1-based column, when the decoder reported one.
    pub column: Option<usize>,
    /// The decoder's message (it already mentions line and column when known).
    pub message: String,
}

/// Decodes JSON or YAML text into a generic JSON value with Capillaries' rules (spec §3.13):
/// JSON duplicate keys → last wins; YAML goes through a yaml.v3-like tree re-encoded as JSON.
pub fn text_to_json(text: &str, format: ScriptFormat) -> Result<serde_json::Value, SyntaxError> {
    match format {
        ScriptFormat::Json => serde_json::from_str(text).map_err(|e| SyntaxError {
            line: Some(e.line()),
            column: Some(e.column()),
            message: e.to_string(),
        }),
        ScriptFormat::Yaml => {
            let de = yaml_serde::Deserializer::from_str(text);
            YamlSeed { base: text }.deserialize(de).map_err(|e| {
                let loc = e.location();
                SyntaxError {
                    line: loc.as_ref().map(yaml_serde::Location::line),
                    column: loc.as_ref().map(yaml_serde::Location::column),
                    message: e.to_string(),
                }
            })
        }
    }
}

/// Deserializes one YAML node into a JSON value; `base` is the whole YAML text, used to tell
/// plain (unquoted) scalars from quoted ones.
#[derive(Clone, Copy)]
struct YamlSeed<'de> {
    /// The complete YAML input.
    base: &'de str,
}

impl<'de> DeserializeSeed<'de> for YamlSeed<'de> {
    type Value = serde_json::Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// 2^63 as f64: integral floats below it convert exactly to i64.
const I64_BOUND: f64 = 9_223_372_036_854_775_808.0;

/// A YAML float as Go's JSON encoder would write it: integral values print as integers, so
/// `10.0` becomes `10` (and is accepted for an int field); non-finite values are an error.
fn float_to_json<E: de::Error>(f: f64) -> Result<serde_json::Value, E> {
    if !f.is_finite() {
        return Err(E::custom(format!(
            "json: unsupported value: {f} (YAML .inf/.nan cannot be converted to JSON)"
        )));
    }
    if f.fract() == 0.0 && f.abs() < I64_BOUND {
        #[allow(clippy::cast_possible_truncation)]
        let i = f as i64;
        return Ok(serde_json::Value::from(i));
    }
    serde_json::Number::from_f64(f)
        .map(serde_json::Value::Number)
        .ok_or_else(|| E::custom(format!("json: unsupported value: {f}")))
}

impl<'de> YamlSeed<'de> {
    /// True when `s` is a slice of the input that is not enclosed in quotes and not preceded by
    /// an explicit tag, i.e. a plain scalar that yaml.v3 would resolve.
    fn is_plain(&self, s: &str) -> bool {
        // yaml_serde hands out slices of the input for scalars without escapes; their offset
        // tells us what surrounds them in the text.
        let start = (s.as_ptr() as usize).wrapping_sub(self.base.as_ptr() as usize);
        let Some(end) = start.checked_add(s.len()) else {
            return false;
        };
        let b = self.base.as_bytes();
        if end > b.len() {
            return false;
        }
        let before = start.checked_sub(1).and_then(|k| b.get(k)).copied();
        let after = b.get(end).copied();
        if matches!(before, Some(q @ (b'"' | b'\'')) if after == Some(q)) {
            return false;
        }
        let prefix = self.base.get(..start).unwrap_or("");
        let last_token = prefix
            .trim_end_matches([' ', '\t'])
            .rsplit([' ', '\t', '\n'])
            .next();
        !last_token.is_some_and(|t| t.starts_with('!'))
    }
}

impl<'de> Visitor<'de> for YamlSeed<'de> {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value convertible to JSON")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(serde_json::Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(serde_json::Value::from(v))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Self::Value, E> {
        // Beyond 64 bits yaml.v3 falls back to float64.
        #[allow(clippy::cast_precision_loss)]
        float_to_json(v as f64)
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Self::Value, E> {
        #[allow(clippy::cast_precision_loss)]
        float_to_json(v as f64)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        float_to_json(v)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        // Owned strings come from quoted scalars with escapes or block scalars: never resolved.
        Ok(serde_json::Value::String(v.to_string()))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        if self.is_plain(v) {
            resolve_plain(v)
        } else {
            Ok(serde_json::Value::String(v.to_string()))
        }
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            items.push(item);
        }
        Ok(serde_json::Value::Array(items))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key_seed(self)? {
            let serde_json::Value::String(key) = key else {
                // Go: yaml.v3 builds map[interface{}]interface{} that encoding/json rejects.
                return Err(de::Error::custom(format!(
                    "json: unsupported type: mapping key {key} is not a string (quote it)"
                )));
            };
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!(
                    "mapping key {key:?} already defined"
                )));
            }
            let value = map.next_value_seed(self)?;
            out.insert(key, value);
        }
        Ok(serde_json::Value::Object(out))
    }
}

/// Resolves a plain scalar that yaml_serde left as a string the way yaml.v3 would: timestamps
/// become RFC 3339 strings, `1_000` and legacy octal `010` become integers.
fn resolve_plain<E: de::Error>(s: &str) -> Result<serde_json::Value, E> {
    let first = s.as_bytes().first().copied().unwrap_or(b' ');
    if !(first.is_ascii_digit() || first == b'+' || first == b'-' || first == b'.') {
        return Ok(serde_json::Value::String(s.to_string()));
    }
    if let Some(ts) = timestamp::parse_yaml_timestamp(s) {
        return Ok(serde_json::Value::String(ts));
    }
    let plain = s.replace('_', "");
    if let Some(i) = go_parse_int(&plain) {
        return Ok(serde_json::Value::from(i));
    }
    if let Some(u) = go_parse_uint(&plain) {
        return Ok(serde_json::Value::from(u));
    }
    if is_yaml_style_float(&plain)
        && let Ok(f) = plain.parse::<f64>()
    {
        return float_to_json(f);
    }
    Ok(serde_json::Value::String(s.to_string()))
}

/// Splits Go `strconv.ParseInt(s, 0, …)` input into (negative, radix, digits).
fn go_int_parts(s: &str) -> Option<(bool, u32, &str)> {
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.get(..2).map(str::to_ascii_lowercase);
    let (radix, digits) = match lower.as_deref() {
        Some("0x") => (16, &body[2..]),
        Some("0o") => (8, &body[2..]),
        Some("0b") => (2, &body[2..]),
        _ if body.len() > 1 && body.starts_with('0') => (8, &body[1..]),
        _ => (10, body),
    };
    // from_str_radix accepts a sign; Go does not after the prefix.
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    Some((neg, radix, digits))
}

/// Go `strconv.ParseInt(s, 0, 64)`.
fn go_parse_int(s: &str) -> Option<i64> {
    let (neg, radix, digits) = go_int_parts(s)?;
    let mag = u64::from_str_radix(digits, radix).ok()?;
    if neg {
        0i64.checked_sub_unsigned(mag)
    } else {
        i64::try_from(mag).ok()
    }
}

/// Go `strconv.ParseUint(s, 0, 64)`.
fn go_parse_uint(s: &str) -> Option<u64> {
    if s.starts_with(['+', '-']) {
        return None;
    }
    let (_, radix, digits) = go_int_parts(s)?;
    u64::from_str_radix(digits, radix).ok()
}

/// yaml.v3's `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`.
fn is_yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let st = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - st
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

pub(crate) mod timestamp;

#[cfg(test)]
mod tests;
