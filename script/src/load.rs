//! The script loading pipeline (spec §3.1); the JSON/YAML decoding rules are in [`crate::decode`].
//!
//! fetch script (+ params) → file type by suffix → template parameters on the raw text →
//! text → generic JSON value (YAML through a yaml.v3-like conversion) → [`Script`] with a
//! path-aware error → fetch the Python and tag-criteria files the script refers to.
//! The 1-minute script cache of Capillaries (performance only) is not reproduced.

use std::collections::BTreeMap;
use std::fmt;

pub use crate::decode::{ScriptFormat, SyntaxError, text_to_json};
use crate::script::Script;
use crate::source::{Fetch, SourceError};
use crate::template::{Params, TemplateError, apply_template};

/// Node type whose custom processor needs files fetched at load time.
const CUSTOM_TFM_NODE: &str = "table_custom_tfm_table";
/// Custom processor that runs Python files.
const PY_CALC: &str = "py_calc";
/// Custom processor whose criteria may come from a URL.
const TAG_AND_DENORMALIZE: &str = "tag_and_denormalize";

/// What a fetched file is, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileRole {
    /// The script file.
    Script,
    /// The params file.
    Params,
    /// A `p.python_code_urls` file.
    PythonCode,
    /// A `p.tag_criteria_url` file.
    TagCriteria,
}

impl fmt::Display for FileRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Script => "script",
            Self::Params => "params",
            Self::PythonCode => "python code",
            Self::TagCriteria => "tag criteria",
        })
    }
}

/// A failure to load a script; every variant names the file, and the node or field path.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The script or params URL does not end in `.json` or `.yaml`.
    #[error("{role} {url}: cannot detect file type, expected a .json or .yaml suffix")]
    UnknownFormat {
        /// Which file.
        role: FileRole,
        /// Its URL.
        url: String,
    },
    /// A file could not be fetched.
    #[error("{}{role}: {source}", node.as_deref().map(|n| format!("node {n}: ")).unwrap_or_default())]
    Fetch {
        /// Which file.
        role: FileRole,
        /// The node that refers to it (Python/tag-criteria files).
        node: Option<String>,
        /// Why fetching failed (names the URL).
        #[source]
        source: SourceError,
    },
    /// Template parameter substitution failed.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The (substituted) script text is not valid JSON/YAML.
    #[error("script {file}: {source}")]
    Syntax {
        /// Script URL.
        file: String,
        /// Position and message.
        #[source]
        source: SyntaxError,
    },
    /// The script text decodes but does not fit the script model.
    #[error("script {file}: {path}: {message}")]
    Decode {
        /// Script URL.
        file: String,
        /// Field path, e.g. `nodes.read_orders.r.expected_batches_total` (`.` for the root).
        path: String,
        /// What was wrong, e.g. `invalid type: string "10", expected i64`.
        message: String,
    },
    /// A tag-criteria file is not a JSON object of tag → expression.
    #[error("node {node}: tag criteria {url}: {message}")]
    TagCriteria {
        /// Node that refers to the file.
        node: String,
        /// The criteria URL.
        url: String,
        /// What was wrong.
        message: String,
    },
}

/// A decoded script with everything fetched at load time.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedScript {
    /// The decoded script (not validated yet).
    pub script: Script,
    /// Script URL (or the origin label given to [`load_script_text`]).
    pub script_url: String,
    /// Params URL, if any.
    pub params_url: Option<String>,
    /// Script text after template substitution.
    pub text: String,
    /// Per node: the decoded `p.tag_criteria_url` JSON map (tag → expression), not templated.
    pub tag_criteria: BTreeMap<String, BTreeMap<String, String>>,
    /// Per node: the `p.python_code_urls` sources concatenated, each followed by a newline.
    pub python_code: BTreeMap<String, String>,
    /// py_calc node name → lines each of its Python files contributes to `python_code`.
    pub python_code_lines: BTreeMap<String, Vec<u32>>,
}

/// Loads a script and its optional params file by URL (spec §3.1).
pub fn load_script(
    fetch: &dyn Fetch,
    script_url: &str,
    params_url: Option<&str>,
) -> Result<LoadedScript, LoadError> {
    let format = ScriptFormat::from_url(script_url).ok_or_else(|| LoadError::UnknownFormat {
        role: FileRole::Script,
        url: script_url.to_string(),
    })?;
    let params = match params_url {
        None => None,
        Some(url) => {
            let pformat = ScriptFormat::from_url(url).ok_or_else(|| LoadError::UnknownFormat {
                role: FileRole::Params,
                url: url.to_string(),
            })?;
            let bytes = fetch.fetch(url).map_err(|source| LoadError::Fetch {
                role: FileRole::Params,
                node: None,
                source,
            })?;
            Some(Params::from_text(
                &String::from_utf8_lossy(&bytes),
                pformat,
                url,
            )?)
        }
    };
    let bytes = fetch.fetch(script_url).map_err(|source| LoadError::Fetch {
        role: FileRole::Script,
        node: None,
        source,
    })?;
    // Go works on bytes and JSON decoding replaces invalid UTF-8 by U+FFFD; lossy does the same.
    let text = String::from_utf8_lossy(&bytes);
    load_script_text(fetch, &text, format, script_url, params.as_ref())
}

/// Runs the pipeline from already fetched script text; `origin` names the script in errors.
/// Python and tag-criteria files referenced by the script are still fetched.
pub fn load_script_text(
    fetch: &dyn Fetch,
    text: &str,
    format: ScriptFormat,
    origin: &str,
    params: Option<&Params>,
) -> Result<LoadedScript, LoadError> {
    let text = apply_template(text, origin, params)?;
    let script = decode_script(&text, format, origin)?;
    let mut tag_criteria = BTreeMap::new();
    let mut python_code = BTreeMap::new();
    let mut python_code_lines = BTreeMap::new();
    for (name, node) in &script.nodes {
        // Only a custom-transform node uses `p`; on other node types it is ignored, like in Go.
        let Some(p) = node
            .p
            .as_ref()
            .filter(|_| node.node_type == CUSTOM_TFM_NODE)
        else {
            continue;
        };
        if node.custom_proc_type == PY_CALC && !p.python_code_urls.is_empty() {
            let mut code = String::new();
            let mut lines = Vec::new();
            for url in &p.python_code_urls {
                let bytes = fetch.fetch(url).map_err(|source| LoadError::Fetch {
                    role: FileRole::PythonCode,
                    node: Some(name.clone()),
                    source,
                })?;
                let text = String::from_utf8_lossy(&bytes);
                code.push_str(&text);
                code.push('\n');
                let count = text.matches('\n').count() + 1;
                lines.push(u32::try_from(count).unwrap_or(u32::MAX));
            }
            python_code.insert(name.clone(), code);
            python_code_lines.insert(name.clone(), lines);
        }
        if node.custom_proc_type == TAG_AND_DENORMALIZE && !p.tag_criteria_url.is_empty() {
            let criteria = fetch_tag_criteria(fetch, name, &p.tag_criteria_url)?;
            tag_criteria.insert(name.clone(), criteria);
        }
    }
    Ok(LoadedScript {
        script,
        script_url: origin.to_string(),
        params_url: params.map(|p| p.origin.clone()),
        text,
        tag_criteria,
        python_code,
        python_code_lines,
    })
}

/// Fetches and decodes a tag-criteria file: always JSON (whatever the script format), never
/// templated, duplicate keys last wins.
fn fetch_tag_criteria(
    fetch: &dyn Fetch,
    node: &str,
    url: &str,
) -> Result<BTreeMap<String, String>, LoadError> {
    let bytes = fetch.fetch(url).map_err(|source| LoadError::Fetch {
        role: FileRole::TagCriteria,
        node: Some(node.to_string()),
        source,
    })?;
    let err = |message: String| LoadError::TagCriteria {
        node: node.to_string(),
        url: url.to_string(),
        message,
    };
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| err(e.to_string()))?;
    let path_err = |e: serde_path_to_error::Error<serde_json::Error>| {
        err(format!("{}: {}", e.path(), e.inner()))
    };
    serde_path_to_error::deserialize(value).map_err(path_err)
}

/// Decodes substituted script text into the script model; errors name the file and field path.
pub fn decode_script(text: &str, format: ScriptFormat, origin: &str) -> Result<Script, LoadError> {
    let value = text_to_json(text, format).map_err(|source| LoadError::Syntax {
        file: origin.to_string(),
        source,
    })?;
    if let Some((path, message)) = crate::script::find_positional_struct(&value) {
        return Err(LoadError::Decode {
            file: origin.to_string(),
            path,
            message,
        });
    }
    serde_path_to_error::deserialize(value).map_err(|e| LoadError::Decode {
        file: origin.to_string(),
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })
}
