//! planner: loads Capillaries scripts and params, validates them and compiles a [`Plan`].
//!
//! The planner is pure apart from fetching the script, params, Python and tag-criteria files
//! it is pointed at, and scanning large local input files to split them into batches
//! ([`build_plan`]): no threads, no clock, no store. Its only output is a Plan (or the full
//! list of what is wrong with the script); running a plan is the engine's job.
#![warn(missing_docs)]

pub mod capi;
pub mod cluster;
pub mod compile;
pub mod diagram;
pub mod field_order;
pub mod load;
pub mod progress;
pub mod pycalc;
pub mod run;
pub mod script;
pub mod serve;
pub mod source;
pub mod start_nodes;
pub mod table;
pub mod template;
pub mod toolbelt;

use std::collections::BTreeMap;
use std::fmt::Write as _;

use plexus_core::plan::{Plan, Reader, StartPolicy, Writer};

pub use compile::{Diagnostic, compile};
pub use load::{LoadError, LoadedScript, load_script};
pub use plexus_node::files::SplitSettings;

/// Why a script could not become a plan: it did not load, or it loaded but is invalid.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The script, params or a referenced file could not be fetched, substituted or decoded.
    #[error("{0}")]
    Load(#[from] LoadError),
    /// The script decoded but failed validation; every problem found is listed.
    #[error("script {script} is invalid: {}", .diagnostics.len())]
    Invalid {
        /// Script URL.
        script: String,
        /// Every problem found, each naming the node (or policy) and the field path.
        diagnostics: Vec<Diagnostic>,
    },
}

impl PlanError {
    /// The file the error is about, for the first line of a report.
    pub fn origin(&self) -> String {
        match self {
            Self::Load(_) => "cannot load script".to_string(),
            Self::Invalid { script, .. } => format!("script {script} is invalid"),
        }
    }

    /// One line per problem.
    pub fn lines(&self) -> Vec<String> {
        match self {
            Self::Load(e) => vec![e.to_string()],
            Self::Invalid { diagnostics, .. } => {
                diagnostics.iter().map(ToString::to_string).collect()
            }
        }
    }
}

/// An error and its causes joined by ": ", skipping a cause whose text the message already
/// holds: many errors print their source in their own message, and `{:#}` would say it twice
/// ("unknown run 7: unknown run 7").
pub fn error_text(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Loads, validates and compiles a script with its optional params file, then splits large
/// local input files into several batches (`PLEXUS_SPLIT_MIB`, see [`build_plan_with`]).
pub fn build_plan(script_url: &str, params_url: Option<&str>) -> Result<Plan, PlanError> {
    build_plan_with(script_url, params_url, &SplitSettings::from_env())
}

/// [`build_plan`] with explicit split settings ([`SplitSettings::off`]: one batch per URL, as
/// Capillaries does).
pub fn build_plan_with(
    script_url: &str,
    params_url: Option<&str>,
    split: &SplitSettings,
) -> Result<Plan, PlanError> {
    let loaded = load_script(script_url, params_url)?;
    let mut plan = compile(&loaded).map_err(|diagnostics| PlanError::Invalid {
        script: script_url.to_string(),
        diagnostics,
    })?;
    // Patterns become the files they match, and large files are split: both are part of the
    // plan (its batches and hash), so every peer reads the same files and parts; the files
    // are listed and probed here, once, where the script's URLs are resolved.
    plexus_node::files::expand_globs(&mut plan).map_err(|e| PlanError::Invalid {
        script: script_url.to_string(),
        diagnostics: vec![Diagnostic {
            subject: compile::Subject::Node(e.node),
            path: "r.urls".to_owned(),
            message: format!("{}: {}", e.pattern, e.reason),
        }],
    })?;
    plexus_node::files::split_inputs(&mut plan, split);
    Ok(plan)
}

/// The one-screen summary `planner validate` prints for a valid plan.
pub fn summary(plan: &Plan, script_url: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{script_url}: valid");
    let mut by_type: BTreeMap<&str, usize> = BTreeMap::new();
    for n in &plan.nodes {
        *by_type.entry(n.node_type.name()).or_default() += 1;
    }
    let types: Vec<String> = by_type.iter().map(|(t, c)| format!("{c} {t}")).collect();
    let _ = writeln!(out, "nodes: {} ({})", plan.nodes.len(), types.join(", "));
    let manual: Vec<&str> = plan
        .nodes
        .iter()
        .filter(|n| n.start_policy == StartPolicy::Manual)
        .map(|n| n.name.as_str())
        .collect();
    if !manual.is_empty() {
        let _ = writeln!(out, "manual nodes: {}", manual.join(", "));
    }
    let _ = writeln!(out, "tables: {}", plan.tables.len());
    for (name, t) in &plan.tables {
        let _ = writeln!(
            out,
            "  {name} ({} fields, by {})",
            t.fields.len(),
            t.created_by
        );
    }
    let idx: Vec<String> = plan
        .tables
        .values()
        .flat_map(|t| t.indexes.iter().map(|(n, d)| format!("{n} = {d}")))
        .collect();
    let _ = writeln!(out, "indexes: {}", idx.len());
    for i in idx {
        let _ = writeln!(out, "  {i}");
    }
    let files: Vec<String> = plan
        .nodes
        .iter()
        .filter_map(|n| match &n.writer {
            Writer::File(w) => Some(w.url_template.clone()),
            Writer::Table(_) => None,
        })
        .collect();
    let inputs: usize = plan
        .nodes
        .iter()
        .map(|n| match &n.reader {
            Reader::File(r) => r.urls.len(),
            Reader::Table(_) => 0,
        })
        .sum();
    let _ = writeln!(out, "input files: {inputs}, output files: {}", files.len());
    let _ = writeln!(out, "DAG depth: {}", plan.depth());
    let batches: u64 = plan.nodes.iter().map(|n| u64::from(n.batches)).sum();
    let _ = writeln!(out, "batches: {batches}");
    if let Ok(h) = plan.content_hash_hex() {
        let _ = writeln!(out, "plan hash: {}", &h[..16]);
    }
    out
}
