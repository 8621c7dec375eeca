//! Reading a request: path segments (percent-decoded), names, run ids, JSON bodies and query
//! parameters, each refusal a [`ConsoleError::BadRequest`] saying what to send instead.

use super::{ConsoleError, HttpRequest};

/// A whole-number query parameter (`?run=2`), if given.
pub(super) fn query_u32(req: &HttpRequest<'_>, name: &str) -> Result<Option<u32>, ConsoleError> {
    let Some(v) = req.query.and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
    }) else {
        return Ok(None);
    };
    v.parse()
        .map(Some)
        .map_err(|_| ConsoleError::BadRequest(format!("{name}={v:?} is not a whole number")))
}

/// A run id from the path.
pub(super) fn parse_run(s: &str) -> Result<u32, ConsoleError> {
    s.parse().map_err(|_| {
        ConsoleError::BadRequest(format!("run id {s:?} is not a number (runs are 1, 2, …)"))
    })
}

/// A JSON request body.
pub(super) fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ConsoleError> {
    serde_json::from_slice(body).map_err(|e| {
        ConsoleError::BadRequest(format!(
            "the request body is not the expected JSON: {e} (a start takes {{\"script_url\", \"params_url\", \"start_nodes\", \"description\"}})"
        ))
    })
}

/// Keyspace and node names as Capillaries' webapi accepts them: `[A-Za-z0-9_]+`.
pub(super) fn check_name(what: &str, s: &str) -> Result<(), ConsoleError> {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(())
    } else {
        Err(ConsoleError::BadRequest(format!(
            "{what} name {s:?} is invalid: use letters, digits and _"
        )))
    }
}

/// A path segment with its `%XX` escapes decoded.
pub(super) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(super) fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}
