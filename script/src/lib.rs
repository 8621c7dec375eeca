//! plexus-script: loads Capillaries scripts and params, validates them and compiles a [`Plan`].
//!
//! The compiler is pure apart from two things the embedder injects: a [`Fetch`] for the bytes
//! behind the script, params, Python and tag-criteria URLs, and an [`InputFiles`] that expands
//! `r.urls` patterns and splits large input files into batches ([`build_plan`]). It has no
//! threads, no clock, no store and no network of its own; `plexus-node` gives it its file-access
//! layer. Its only output is a Plan (or the full list of what is wrong with the script); running
//! a plan is the node's job.
#![warn(missing_docs)]

pub mod compile;
pub mod decode;
pub mod diagram;
pub mod field_order;
pub mod load;
pub mod py_calc_check;
pub mod script;
pub mod source;
pub mod start_nodes;
pub mod template;

use plexus_core::plan::Plan;

pub use compile::{Diagnostic, compile};
pub use load::{LoadError, LoadedScript, load_script};
pub use source::{Fetch, LocalFiles, SourceError};

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

/// A `r.urls` pattern that could not be expanded into the files it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternProblem {
    /// The reader node.
    pub node: String,
    /// The pattern as written (credentials redacted).
    pub pattern: String,
    /// What went wrong.
    pub reason: String,
}

/// What the compiler needs to know about a plan's input files, injected because it means
/// listing directories and buckets and probing file sizes (the node's file-access layer).
pub trait InputFiles {
    /// Replaces every `r.urls` pattern (`dir/*.csv`) by the files it matches.
    fn expand_patterns(&self, plan: &mut Plan) -> Result<(), PatternProblem>;
    /// Splits large input files into several batches each.
    fn split_inputs(&self, plan: &mut Plan);
}

/// An [`InputFiles`] that leaves URLs as written: no pattern expansion, one batch per URL (as
/// Capillaries does).
#[derive(Debug, Clone, Copy, Default)]
pub struct InputsAsWritten;

impl InputFiles for InputsAsWritten {
    fn expand_patterns(&self, _plan: &mut Plan) -> Result<(), PatternProblem> {
        Ok(())
    }

    fn split_inputs(&self, _plan: &mut Plan) {}
}

/// Loads, validates and compiles a script with its optional params file, then expands input
/// patterns and splits large input files through `inputs`.
pub fn build_plan(
    fetch: &dyn Fetch,
    inputs: &dyn InputFiles,
    script_url: &str,
    params_url: Option<&str>,
) -> Result<Plan, PlanError> {
    let loaded = load_script(fetch, script_url, params_url)?;
    let mut plan = compile(&loaded).map_err(|diagnostics| PlanError::Invalid {
        script: script_url.to_string(),
        diagnostics,
    })?;
    // Patterns become the files they match, and large files are split: both are part of the
    // plan (its batches and hash), so every peer reads the same files and parts; the files
    // are listed and probed here, once, where the script's URLs are resolved.
    inputs
        .expand_patterns(&mut plan)
        .map_err(|e| PlanError::Invalid {
            script: script_url.to_string(),
            diagnostics: vec![Diagnostic {
                subject: compile::Subject::Node(e.node),
                path: "r.urls".to_owned(),
                message: format!("{}: {}", e.pattern, e.reason),
            }],
        })?;
    inputs.split_inputs(&mut plan);
    Ok(plan)
}
