//! A console's start request → the plan and start nodes to run: the script compiled through
//! `plexus-script` with the node's file access, limited to the console's file roots; errors are
//! told to a web client without the values read from the files.

use plexus_script::start_nodes;

use super::{CompiledStart, ConsoleError, StartRequest};
use crate::files::SplitSettings;
use crate::script_files::{NodeFetch, NodeInputs};

/// Loads and validates the script and the start nodes exactly as `planner run` and
/// `planner submit` do: the plan, the cleaned start nodes (every file reader when none is
/// given) and their warnings; every error as [`ConsoleError::Invalid`].
pub fn compile_start(req: &StartRequest) -> Result<CompiledStart, ConsoleError> {
    let params = req.params_url.as_deref().filter(|p| !p.trim().is_empty());
    let inputs = NodeInputs {
        split: SplitSettings::from_env(),
    };
    let fetch = NodeFetch::within(&req.file_roots);
    let plan =
        plexus_script::build_plan(&fetch, &inputs, req.script_url.trim(), params).map_err(|e| {
            // The answer goes to a web client: errors name the file and the place, never a value
            // read from the file.
            let errors: Vec<String> = e.lines().iter().map(|l| scrub_values(l)).collect();
            ConsoleError::Invalid {
                message: format!(
                    "the run was not started: {}: {} error{}",
                    e.origin(),
                    errors.len(),
                    if errors.len() == 1 { "" } else { "s" }
                ),
                errors,
            }
        })?;
    let start = start_nodes::resolve(&plan, &req.start_nodes.entries()).map_err(|e| {
        ConsoleError::Invalid {
            message: "the run was not started: the start nodes are unusable".to_owned(),
            errors: vec![e.to_string()],
        }
    })?;
    let start_nodes = if start.names.is_empty() {
        start_nodes::file_readers(&plan)
    } else {
        start.names
    };
    Ok(CompiledStart {
        plan,
        start_nodes,
        warnings: start.warnings,
    })
}

/// `line` without the values serde quotes from a file (`invalid type: string "hunter2"` →
/// `invalid type: a string`): a script or params file may hold secrets, and the console's
/// client need not be the file's owner.
pub fn scrub_values(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    loop {
        let next = ["invalid type: ", "invalid value: ", "unknown variant "]
            .iter()
            .filter_map(|m| rest.find(m).map(|i| (i, *m)))
            .min_by_key(|(i, _)| *i);
        let Some((i, marker)) = next else {
            out.push_str(rest);
            return out;
        };
        out.push_str(&rest[..i + marker.len()]);
        let tail = &rest[i + marker.len()..];
        // The value runs up to ", expected" (serde's wording), else to the end of the line.
        let end = tail.find(", expected").unwrap_or(tail.len());
        let value = &tail[..end];
        let kind = value.split([' ', '`', '"']).next().unwrap_or_default();
        out.push_str(match (marker, kind) {
            ("unknown variant ", _) => "(value not shown)",
            (_, "string") => "a string (value not shown)",
            (_, "integer") => "an integer (value not shown)",
            (_, "floating") => "a number (value not shown)",
            (_, "boolean") => "a boolean (value not shown)",
            (_, "character") => "a character (value not shown)",
            (_, "map") => "a map",
            (_, "sequence") => "a sequence",
            (_, "null" | "unit") => "null",
            _ => "(value not shown)",
        });
        rest = &tail[end..];
    }
}

#[cfg(test)]
mod tests {
    use plexus_script::source::{Fetch, SourceError};

    use crate::console::FileRoots;
    use crate::script_files::NodeFetch;

    #[test]
    fn fetches_inside_a_console_request_stay_below_its_roots()
    -> Result<(), Box<dyn std::error::Error>> {
        let inside = tempfile::tempdir()?;
        let outside = tempfile::tempdir()?;
        let good = std::fs::canonicalize(inside.path())?.join("code.py");
        let bad = outside.path().join("secret.py");
        std::fs::write(&good, b"ok")?;
        std::fs::write(&bad, b"secret")?;
        let mut roots = FileRoots::default();
        roots.add(&inside.path().display().to_string())?;
        let (g, b) = (good.display().to_string(), bad.display().to_string());
        let fetch = NodeFetch::within(&roots);
        assert_eq!(fetch.fetch(&g)?, b"ok");
        let err = fetch.fetch(&b).expect_err("outside the roots");
        assert!(matches!(err, SourceError::Fetcher(_)), "{err}");
        assert!(!err.to_string().contains("secret\""), "{err}");
        assert!(fetch.fetch("http://127.0.0.1:9/x.py").is_err());
        // Outside a console request (planner run), nothing changes.
        assert_eq!(NodeFetch::default().fetch(&b)?, b"secret");
        Ok(())
    }
}
