//! Affected nodes of a run (spec §9.2): which script nodes a run with given start nodes runs.

use std::collections::{BTreeMap, BTreeSet};

use plexus_core::plan::{Plan, StartPolicy};

/// The nodes a run started with `start_nodes` affects, in the plan's topological order.
///
/// A node B is a child of A when B reads A's table or looks up in it (`depends_on`). First the
/// "manual set" is computed over every descendant of the start nodes: a child is in it when it
/// is `manual` itself, or when one of its (walked) parents is in it and that parent is not a
/// start node. Affected = the start nodes plus everything reachable from them through children
/// outside the manual set. Unknown start node names are ignored (the caller validates them).
pub fn affected_nodes(plan: &Plan, start_nodes: &[String]) -> Vec<String> {
    let start: BTreeSet<&str> = start_nodes.iter().map(String::as_str).collect();
    let mut children: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for n in &plan.nodes {
        for dep in &n.depends_on {
            children
                .entry(dep.as_str())
                .or_default()
                .push(n.name.as_str());
        }
    }

    // Every node reachable from a start node (the walk of the manual-set computation).
    let mut walked: BTreeSet<&str> = BTreeSet::new();
    let mut stack: Vec<&str> = start.iter().copied().collect();
    while let Some(n) = stack.pop() {
        if walked.insert(n) {
            stack.extend(children.get(n).into_iter().flatten().copied());
        }
    }

    // Plan nodes are topologically ordered, so every parent is classified before its children.
    let mut manual: BTreeSet<&str> = BTreeSet::new();
    for n in &plan.nodes {
        let walked_parents: Vec<&str> = n
            .depends_on
            .iter()
            .map(String::as_str)
            .filter(|p| walked.contains(p))
            .collect();
        if walked_parents.is_empty() {
            continue;
        }
        let inherited = walked_parents
            .iter()
            .any(|p| manual.contains(p) && !start.contains(p));
        if n.start_policy == StartPolicy::Manual || inherited {
            manual.insert(n.name.as_str());
        }
    }

    let mut affected: BTreeSet<&str> = start.clone();
    let mut stack: Vec<&str> = start.iter().copied().collect();
    while let Some(n) = stack.pop() {
        for &c in children.get(n).into_iter().flatten() {
            if !manual.contains(c) && affected.insert(c) {
                stack.push(c);
            }
        }
    }
    plan.nodes
        .iter()
        .filter(|n| affected.contains(n.name.as_str()))
        .map(|n| n.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_plans::{LOOKUP_NODES, PlanBuilder, lookup_plan, tag_plan};

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn lookup_one_affects_all_ten_nodes() {
        let plan = lookup_plan(StartPolicy::Auto);
        let a = affected_nodes(&plan, &names(&["read_orders", "read_order_items"]));
        assert_eq!(a, names(&LOOKUP_NODES));
    }

    #[test]
    fn lookup_multi_runs_two_then_eight() {
        let plan = lookup_plan(StartPolicy::Manual);
        let run1 = affected_nodes(&plan, &names(&["read_orders", "read_order_items"]));
        assert_eq!(run1, names(&["read_orders", "read_order_items"]));
        let run2 = affected_nodes(&plan, &names(&LOOKUP_NODES[2..6]));
        assert_eq!(run2, names(&LOOKUP_NODES[2..]));
    }

    #[test]
    fn tag_and_denormalize_multi_with_manual_totals() {
        let plan = tag_plan(StartPolicy::Manual);
        let run1 = affected_nodes(&plan, &names(&["read_tags", "read_products"]));
        assert_eq!(
            run1,
            names(&[
                "read_tags",
                "read_products",
                "tag_products",
                "file_tagged_products_for_operator_review"
            ])
        );
        let run2 = affected_nodes(&plan, &names(&["tag_totals"]));
        assert_eq!(run2, names(&["tag_totals", "file_tag_totals"]));
        // With "one" params everything runs.
        let one = affected_nodes(&tag_plan(StartPolicy::Auto), &run1);
        assert_eq!(one.len(), 6);
    }

    #[test]
    fn manual_set_propagates_through_non_start_parents() {
        // a → b (manual) → d ← c ← a: d has an auto parent c, but its other parent b is in the
        // manual set and not a start node, so d is in the manual set and not affected.
        let plan = PlanBuilder::new()
            .file("a", "ta", 1)
            .table("b", "ta", Some("tb"), 1, StartPolicy::Manual)
            .table("c", "ta", Some("tc"), 1, StartPolicy::Auto)
            .lookup("d", "tc", "tb", "td", 1, StartPolicy::Auto)
            .table("e", "td", None, 1, StartPolicy::Auto)
            .build();
        assert_eq!(affected_nodes(&plan, &names(&["a"])), names(&["a", "c"]));
        // b as a start node: its manual-ness no longer propagates, d and e run.
        assert_eq!(
            affected_nodes(&plan, &names(&["a", "b"])),
            names(&["a", "b", "c", "d", "e"])
        );
        // A manual start node runs and its auto descendants with it.
        assert_eq!(
            affected_nodes(&plan, &names(&["b"])),
            names(&["b", "d", "e"])
        );
    }

    #[test]
    fn manual_start_node_below_another_start_node() {
        // a → b (manual) → c: starting a and b runs c too (b is a start node).
        let plan = PlanBuilder::new()
            .file("a", "ta", 1)
            .table("b", "ta", Some("tb"), 1, StartPolicy::Manual)
            .table("c", "tb", None, 1, StartPolicy::Auto)
            .build();
        assert_eq!(
            affected_nodes(&plan, &names(&["a", "b"])),
            names(&["a", "b", "c"])
        );
        assert_eq!(affected_nodes(&plan, &names(&["a"])), names(&["a"]));
    }
}
