//! Go RE2 patterns on the Rust `regex` crate (spec §5.7 `re.MatchString`).
//!
//! The syntaxes are nearly the same; the differences that change results are rewritten:
//! Go's `\w \W \d \D \s \S \b \B` are ASCII-only (Rust's are Unicode), Go reads `\Q…\E`
//! literally, Go treats a `{` that does not start a repetition as a literal, and inside a
//! class Go treats `[`, `&&`, `--` and `~~` literally where Rust would nest or combine classes.
//! `.` and literal non-ASCII text keep working on UTF-8 text.

use regex::{Regex, RegexBuilder};

use super::error::EvalError;

const WORD: &str = "0-9A-Za-z_";
const DIGIT: &str = "0-9";
// Go's \s is [\t\n\f\r ] (no \v).
const SPACE: &str = r"\t\n\x0C\r ";

/// Builds the regex of a Go pattern; errors carry the pattern and the compiler's message.
pub(crate) fn build(pattern: &str) -> Result<Regex, EvalError> {
    let translated = translate(pattern).map_err(|detail| EvalError::Regex {
        pattern: pattern.into(),
        detail: detail.into(),
    })?;
    RegexBuilder::new(&translated)
        .octal(true)
        .build()
        .map_err(|e| EvalError::Regex {
            pattern: pattern.into(),
            detail: e.to_string().into(),
        })
}

/// Whether `s` (just after a `{`) is a valid repetition body `n}`, `n,}` or `n,m}`.
fn is_repetition(s: &str) -> bool {
    let Some(end) = s.find('}') else {
        return false;
    };
    let body = &s[..end];
    let (a, b) = match body.split_once(',') {
        Some((a, b)) => (a, Some(b)),
        None => (body, None),
    };
    !a.is_empty()
        && a.bytes().all(|c| c.is_ascii_digit())
        && b.is_none_or(|b| b.bytes().all(|c| c.is_ascii_digit()))
}

/// Rewrites a Go pattern into an equivalent Rust `regex` pattern; errors for what Go rejects
/// and Rust would accept (stacked repetition operators such as `a**`).
pub(crate) fn translate(p: &str) -> Result<String, String> {
    let mut out = String::with_capacity(p.len() + 16);
    let chars: Vec<char> = p.chars().collect();
    let mut i = 0;
    // Inside a class: position of the first member (to allow a literal leading `]`).
    let mut class_start: Option<usize> = None;
    // Whether the previous item was a repetition operator (Go rejects `a**`, `a*{2}`, …).
    let mut last_repeat = false;
    while i < chars.len() {
        let c = chars[i];
        let in_class = class_start.is_some();
        if !in_class {
            let rep_len = match c {
                '*' | '+' | '?' => 1,
                '{' => {
                    let rest: String = chars[i + 1..].iter().collect();
                    if is_repetition(&rest) {
                        rest.find('}').map_or(0, |e| rest[..=e].chars().count() + 1)
                    } else {
                        0
                    }
                }
                _ => 0,
            };
            if rep_len > 0 {
                if last_repeat {
                    return Err("invalid nested repetition operator".to_owned());
                }
                out.extend(&chars[i..i + rep_len]);
                i += rep_len;
                if chars.get(i) == Some(&'?') {
                    out.push('?');
                    i += 1;
                }
                last_repeat = true;
                continue;
            }
            last_repeat = false;
        }
        match c {
            '\\' if i + 1 < chars.len() => {
                let e = chars[i + 1];
                i += 2;
                match (e, in_class) {
                    ('w', false) => out.push_str(&format!("[{WORD}]")),
                    ('W', false) => out.push_str(&format!("[^{WORD}]")),
                    ('d', false) => out.push_str(&format!("[{DIGIT}]")),
                    ('D', false) => out.push_str(&format!("[^{DIGIT}]")),
                    ('s', false) => out.push_str(&format!("[{SPACE}]")),
                    ('S', false) => out.push_str(&format!("[^{SPACE}]")),
                    ('w', true) => out.push_str(WORD),
                    ('W', true) => out.push_str(&format!("[^{WORD}]")),
                    ('d', true) => out.push_str(DIGIT),
                    ('D', true) => out.push_str(&format!("[^{DIGIT}]")),
                    ('s', true) => out.push_str(SPACE),
                    ('S', true) => out.push_str(&format!("[^{SPACE}]")),
                    ('b', false) => out.push_str(r"(?-u:\b)"),
                    ('B', false) => out.push_str(r"(?-u:\B)"),
                    ('Q', _) => {
                        let rest: String = chars[i..].iter().collect();
                        let (lit, consumed) = match rest.find(r"\E") {
                            Some(end) => (&rest[..end], end + 2),
                            None => (rest.as_str(), rest.len()),
                        };
                        for ch in lit.chars() {
                            if in_class {
                                out.push('\\');
                                out.push(ch);
                            } else {
                                out.push_str(&regex::escape(&ch.to_string()));
                            }
                        }
                        i += rest[..consumed].chars().count();
                    }
                    ('p' | 'P' | 'x', _) if chars.get(i) == Some(&'{') => {
                        out.push('\\');
                        out.push(e);
                        while i < chars.len() {
                            out.push(chars[i]);
                            i += 1;
                            if chars[i - 1] == '}' {
                                break;
                            }
                        }
                    }
                    _ => {
                        out.push('\\');
                        out.push(e);
                    }
                }
                continue;
            }
            '[' if !in_class => {
                out.push('[');
                i += 1;
                if chars.get(i) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
                class_start = Some(i);
                continue;
            }
            '[' if chars.get(i + 1) == Some(&':') => {
                // POSIX class `[:alpha:]`: same meaning (ASCII) in both engines.
                let rest: String = chars[i..].iter().collect();
                if let Some(end) = rest.find(":]") {
                    out.push_str(&rest[..end + 2]);
                    i += rest[..end + 2].chars().count();
                } else {
                    out.push_str(r"\[");
                    i += 1;
                }
                continue;
            }
            '[' => out.push_str(r"\["),
            ']' if in_class => {
                if class_start == Some(i) {
                    out.push_str(r"\]");
                } else {
                    out.push(']');
                    class_start = None;
                }
            }
            '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            '-' if in_class && chars.get(i + 1) == Some(&'-') => {
                // Go reads `a--` as a range ending in `-`; Rust would read `--` as difference.
                out.push_str(r"-\-");
                i += 2;
                continue;
            }
            '{' if !in_class => out.push_str(r"\{"),
            '}' if !in_class => out.push_str(r"\}"),
            _ => out.push(c),
        }
        i += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        build(p)
            .map(|r| r.is_match(s))
            .unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    #[test]
    fn ascii_classes() {
        assert!(!m(r"\w", "é"));
        assert!(m(r"^\W$", "é"));
        assert!(m(r"^.$", "é"));
        assert!(m("é", "café"));
        assert!(!m(r"^[\w ,]*$", "Boys shoés"));
        assert!(m(r"[\w ,]*Boys[\w ,]*", "Boys shoes, size 10"));
        assert!(!m(r"\d", "٣"));
        assert!(!m(r"\s", "\u{a0}"));
        assert!(!m(r"\s", "\u{b}"));
        assert!(m(r"\bcafé", "x café"));
        // ASCII \b: é is not a word character, so there is a boundary between f and é.
        assert!(m(r"caf\b", "café"));
        assert!(m(r"[^\d]", "a"));
        assert!(m(r"^[\D]+$", "ab"));
    }

    #[test]
    fn go_literals() {
        assert!(m(r"a{", "a{"));
        assert!(m(r"a{2}", "aa"));
        assert!(m(r"a{x}", "a{x}"));
        assert!(m(r"\Q.*\E", ".*"));
        assert!(!m(r"\Q.*\E", "ab"));
        assert!(m(r"[a&&b]", "&"));
        assert!(m(r"[[]", "["));
        assert!(m(r"[]a]", "]"));
        assert!(m(r"[[:alpha:]]", "x"));
        assert!(m(r"\p{Greek}", "α"));
        assert!(m(r"\x{41}", "A"));
        assert!(m(r#""k":"Occasion""#, r#"{"k":"Occasion"}"#));
    }

    #[test]
    fn invalid() {
        assert!(build("(").is_err());
        assert!(build("a**").is_err());
        assert!(build("a*{2}").is_err());
        assert!(build("a*?").is_ok());
        assert!(build("a{2}?").is_ok());
    }
}
