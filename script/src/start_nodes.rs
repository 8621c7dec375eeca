//! Start-node lists as operators type them (`-start_nodes=a,b,` with a trailing comma, spaces
//! after commas): empty entries and surrounding spaces are dropped with a warning; an unknown
//! name is an error naming it and the script's nodes closest to it.

use plexus_core::plan::Plan;

/// How many close names an unknown-node error suggests.
const SUGGESTIONS: usize = 3;

/// A cleaned start-node list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StartNodes {
    /// The node names, in the order given, without duplicates.
    pub names: Vec<String>,
    /// What was dropped or trimmed, one line each, for the operator.
    pub warnings: Vec<String>,
}

/// A start node the script does not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownNode {
    /// The name as given.
    pub name: String,
    /// The script's nodes closest to it (edit distance), closest first.
    pub closest: Vec<String>,
}

/// Why a start-node list cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StartNodeError {
    /// Names that are not nodes of the script.
    #[error("{}", describe_unknown(.0))]
    Unknown(Vec<UnknownNode>),
    /// Entries were given but all of them were empty.
    #[error("the start node list {given:?} names no node")]
    NoneNamed {
        /// The list as given.
        given: String,
    },
}

fn describe_unknown(unknown: &[UnknownNode]) -> String {
    let parts: Vec<String> = unknown
        .iter()
        .map(|u| {
            if u.closest.is_empty() {
                format!("{:?}", u.name)
            } else {
                format!("{:?} (closest: {})", u.name, u.closest.join(", "))
            }
        })
        .collect();
    format!("start nodes not found in the script: {}", parts.join("; "))
}

/// The start nodes of a run given none: every node that reads files.
pub fn file_readers(plan: &Plan) -> Vec<String> {
    plan.nodes
        .iter()
        .filter(|n| matches!(n.reader, plexus_core::plan::Reader::File(_)))
        .map(|n| n.name.clone())
        .collect()
}

/// Cleans `given` (each entry may itself hold commas) against the nodes of `plan`. An empty
/// `given` stays empty (the caller's default applies).
pub fn resolve(plan: &Plan, given: &[String]) -> Result<StartNodes, StartNodeError> {
    let mut out = StartNodes::default();
    let joined = given.join(",");
    if given.is_empty() {
        return Ok(out);
    }
    let mut empty = 0usize;
    let mut unknown = Vec::new();
    for raw in joined.split(',') {
        let name = raw.trim();
        if name.is_empty() {
            empty += 1;
            continue;
        }
        if name != raw {
            out.warnings
                .push(format!("start node {raw:?}: surrounding spaces ignored"));
        }
        if out.names.iter().any(|n| n == name) {
            out.warnings
                .push(format!("start node {name:?} given twice; once is enough"));
            continue;
        }
        if plan.node(name).is_none() {
            unknown.push(UnknownNode {
                name: name.to_string(),
                closest: closest(plan, name),
            });
            continue;
        }
        out.names.push(name.to_string());
    }
    if empty > 0 {
        out.warnings.push(format!(
            "start nodes {joined:?}: {empty} empty {} ignored",
            if empty == 1 { "entry" } else { "entries" }
        ));
    }
    if !unknown.is_empty() {
        return Err(StartNodeError::Unknown(unknown));
    }
    if out.names.is_empty() {
        return Err(StartNodeError::NoneNamed { given: joined });
    }
    Ok(out)
}

/// The script's nodes nearest to `name`, closest first (ties by name), at most a few.
fn closest(plan: &Plan, name: &str) -> Vec<String> {
    let lower = name.to_ascii_lowercase();
    let mut scored: Vec<(usize, &str)> = plan
        .nodes
        .iter()
        .map(|n| {
            (
                edit_distance(&lower, &n.name.to_ascii_lowercase()),
                n.name.as_str(),
            )
        })
        .collect();
    scored.sort_unstable();
    scored
        .into_iter()
        .take(SUGGESTIONS)
        .map(|(_, n)| n.to_string())
        .collect()
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::edit_distance;

    #[test]
    fn edit_distance_counts_single_char_edits() {
        assert_eq!(edit_distance("read_orders", "read_orders"), 0);
        assert_eq!(edit_distance("read_order", "read_orders"), 1);
        assert_eq!(edit_distance("raed_orders", "read_orders"), 2);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
