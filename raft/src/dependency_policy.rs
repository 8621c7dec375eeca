//! Dependency policy evaluation (spec §3.12, §9.6): which run a dependency is read from, and
//! whether a node may run at all.

use std::collections::HashMap;
use std::sync::Mutex;

use plexus_core::expr::{Alias, Compiled, Rounding, Scope, Vars, prepare};
use plexus_core::key::{IndexDef, build_key};
use plexus_core::plan::{DependencyCmd, DependencyPolicy};
use plexus_core::value::{Type, Value};

use crate::status::{NodeBatchStatus, RunStatus};

/// The `nrs` fields in their [`Scope::dependency_policy`] slot order, with their types.
const NRS_FIELDS: [(&str, Type); 4] = [
    ("run_id", Type::Int),
    ("run_is_current", Type::Bool),
    ("run_status", Type::Int),
    ("node_status", Type::Int),
];

/// One dependency event: the state of a dependency node in one run that included it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeRunEvent {
    /// The run.
    pub run_id: u32,
    /// Whether it is the run being processed.
    pub run_is_current: bool,
    /// Status of that run (stop > complete > start).
    pub run_status: RunStatus,
    /// Status of the dependency node in that run.
    pub node_status: NodeBatchStatus,
}

impl NodeRunEvent {
    /// The `nrs` values in slot order.
    fn values(&self) -> [Value; 4] {
        [
            Value::Int(i64::from(self.run_id)),
            Value::Bool(self.run_is_current),
            Value::Int(self.run_status.code()),
            Value::Int(self.node_status.code()),
        ]
    }
}

/// The outcome of evaluating a policy over the events of one dependency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyMatch {
    /// The command of the first matching rule.
    pub cmd: DependencyCmd,
    /// The run of the event that matched: the run whose table is read.
    pub run_id: u32,
    /// Index of the matching rule, for comments.
    pub rule: usize,
}

/// A policy whose rules are prepared for the `nrs` scope.
#[derive(Clone, Debug)]
pub struct ResolvedPolicy {
    order: IndexDef,
    rules: Vec<(DependencyCmd, Compiled)>,
    decided: Decisions,
}

/// What a policy decided, by the events it decided on. A decision depends on nothing else
/// (the rules read the `nrs` fields and `wfmodel` constants), and the ledger asks again for
/// every ready node at every claim: in the simulator's table-reader runs the rules' evaluation
/// and the events' sort keys were about 40 % of the ledger's apply time.
#[derive(Debug, Default)]
struct Decisions(Mutex<HashMap<Vec<NodeRunEvent>, Decision>>);

/// What [`ResolvedPolicy::decide`] returns.
type Decision = Result<Option<PolicyMatch>, PolicyError>;

/// Distinct event lists a policy remembers before it forgets them all (a keyspace of many
/// runs makes many).
const MAX_DECISIONS: usize = 4096;

impl Clone for Decisions {
    /// A copy starts empty: the memo is derived, never state.
    fn clone(&self) -> Self {
        Self::default()
    }
}

/// Why a policy cannot be compiled or evaluated.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PolicyError {
    /// `event_priority_order` names something other than the four `nrs` fields.
    #[error("event_priority_order component `{field}` is not an nrs field of that type")]
    BadOrderField {
        /// The offending component field.
        field: String,
    },
    /// A rule does not compile for the `nrs` scope.
    #[error("rule {rule}: {reason}")]
    Compile {
        /// Rule index.
        rule: usize,
        /// The compiler's message.
        reason: String,
    },
    /// A rule failed to evaluate (or did not return a bool).
    #[error("rule {rule} failed to evaluate: {reason}")]
    Eval {
        /// Rule index.
        rule: usize,
        /// The evaluator's message.
        reason: String,
    },
    /// The sort key of an event could not be built.
    #[error("event_priority_order key: {reason}")]
    Key {
        /// The key builder's message.
        reason: String,
    },
}

impl ResolvedPolicy {
    /// Resolves a policy (its rules parsed and prepared) and runs the load-time check: every
    /// rule evaluates to a bool on all-zero/false `nrs` values (spec §3.12).
    pub fn resolve(policy: &DependencyPolicy) -> Result<Self, PolicyError> {
        for c in &policy.event_priority_order.components {
            if !NRS_FIELDS.iter().any(|(n, t)| *n == c.field && *t == c.ty) {
                return Err(PolicyError::BadOrderField {
                    field: c.field.clone(),
                });
            }
        }
        let scope = Scope::dependency_policy();
        let mut rules = Vec::with_capacity(policy.rules.len());
        for (i, r) in policy.rules.iter().enumerate() {
            let c = prepare(&r.expr.ast, &scope).map_err(|e| PolicyError::Compile {
                rule: i,
                reason: e.to_string(),
            })?;
            rules.push((r.cmd, c));
        }
        let p = Self {
            order: policy.event_priority_order.clone(),
            rules,
            decided: Decisions::default(),
        };
        let zero = NodeRunEvent {
            run_id: 0,
            run_is_current: false,
            run_status: RunStatus::None,
            node_status: NodeBatchStatus::None,
        };
        for i in 0..p.rules.len() {
            p.rule_matches(i, &zero)?;
        }
        Ok(p)
    }

    fn rule_matches(&self, i: usize, ev: &NodeRunEvent) -> Result<bool, PolicyError> {
        let values = ev.values();
        let vars = Vars::new().with(Alias::Nrs, &values);
        let Some((_, rule)) = self.rules.get(i) else {
            return Ok(false);
        };
        rule.eval_bool(&vars, Rounding::None)
            .map_err(|e| PolicyError::Eval {
                rule: i,
                reason: e.to_string(),
            })
    }

    fn sort_key(&self, ev: &NodeRunEvent) -> Result<Vec<u8>, PolicyError> {
        let values = ev.values();
        let mut parts = Vec::with_capacity(self.order.components.len());
        for c in &self.order.components {
            let slot = NRS_FIELDS
                .iter()
                .position(|(n, _)| *n == c.field)
                .ok_or_else(|| PolicyError::BadOrderField {
                    field: c.field.clone(),
                })?;
            parts.push(&values[slot]);
        }
        build_key(&self.order, &parts).map_err(|e| PolicyError::Key {
            reason: e.to_string(),
        })
    }

    /// Evaluates the policy over the events of one dependency (spec §9.6 steps 3-4): events
    /// sorted by the `event_priority_order` key, rules tried in order per event; the first
    /// matching rule decides. `None` means no event matched any rule (the caller waits).
    pub fn decide(&self, events: &[NodeRunEvent]) -> Result<Option<PolicyMatch>, PolicyError> {
        // A poisoned lock only loses the memo: decide afresh.
        if let Ok(memo) = self.decided.0.lock()
            && let Some(d) = memo.get(events)
        {
            return d.clone();
        }
        let d = self.decide_afresh(events);
        if let Ok(mut memo) = self.decided.0.lock() {
            if memo.len() >= MAX_DECISIONS {
                memo.clear();
            }
            memo.insert(events.to_vec(), d.clone());
        }
        d
    }

    /// [`Self::decide`] without the memo.
    fn decide_afresh(&self, events: &[NodeRunEvent]) -> Result<Option<PolicyMatch>, PolicyError> {
        let mut keyed = Vec::with_capacity(events.len());
        for ev in events {
            keyed.push((self.sort_key(ev)?, ev));
        }
        // Capillaries' sort is not stable; a stable sort over events in run-id order keeps
        // equal keys deterministic (the default order never produces equal keys).
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, ev) in keyed {
            for (i, (cmd, _)) in self.rules.iter().enumerate() {
                if self.rule_matches(i, ev)? {
                    return Ok(Some(PolicyMatch {
                        cmd: *cmd,
                        run_id: ev.run_id,
                        rule: i,
                    }));
                }
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_plans::{default_policy, policy};

    fn ev(run_id: u32, current: bool, rs: RunStatus, ns: NodeBatchStatus) -> NodeRunEvent {
        NodeRunEvent {
            run_id,
            run_is_current: current,
            run_status: rs,
            node_status: ns,
        }
    }

    /// The remembered decisions are the ones made afresh: every list of up to three events
    /// over a few runs and every status, asked twice (the second time from the memo), under
    /// the default policy and one whose rules read every field.
    #[test]
    fn remembered_decisions_are_the_fresh_ones() {
        use NodeBatchStatus as N;
        use RunStatus as R;
        let mut all = Vec::new();
        for run_id in 1..=3 {
            for current in [false, true] {
                for rs in [R::None, R::Start, R::Complete, R::Stop] {
                    for ns in [N::None, N::Start, N::Success, N::Fail, N::StopReceived] {
                        all.push(ev(run_id, current, rs, ns));
                    }
                }
            }
        }
        let every_field = policy(
            "run_is_current(desc),run_status(asc),node_status(desc),run_id(desc)",
            &[
                (
                    "nogo",
                    "nrs.run_is_current && nrs.node_status == wfmodel.NodeBatchFail",
                ),
                (
                    "wait",
                    "nrs.run_id > 2 && nrs.run_status == wfmodel.RunStart",
                ),
                ("go", "nrs.node_status == wfmodel.NodeBatchSuccess"),
            ],
        );
        let policies = [
            ResolvedPolicy::resolve(&default_policy()).unwrap(),
            ResolvedPolicy::resolve(&every_field).unwrap(),
        ];
        let mut lists: Vec<Vec<NodeRunEvent>> = all.iter().map(|e| vec![*e]).collect();
        for (i, a) in all.iter().enumerate().step_by(7) {
            for b in all.iter().skip(i % 5).step_by(11) {
                lists.push(vec![*a, *b]);
                lists.push(vec![*b, *a, all[(i * 3) % all.len()]]);
            }
        }
        for p in &policies {
            for round in 0..2 {
                for events in &lists {
                    assert_eq!(
                        p.decide(events),
                        p.decide_afresh(events),
                        "round {round}: {events:?}"
                    );
                }
            }
            assert!(p.decided.0.lock().unwrap().len() <= MAX_DECISIONS);
        }
    }

    fn decide(events: &[NodeRunEvent]) -> Option<(DependencyCmd, u32, usize)> {
        let p = ResolvedPolicy::resolve(&default_policy()).unwrap();
        p.decide(events).unwrap().map(|m| (m.cmd, m.run_id, m.rule))
    }

    use DependencyCmd::{Go, Nogo, Wait};
    use NodeBatchStatus as N;
    use RunStatus as R;

    #[test]
    fn current_run_first() {
        // The current run's success wins over a newer completed run.
        let e = [
            ev(1, true, R::Start, N::Success),
            ev(2, false, R::Complete, N::Success),
        ];
        assert_eq!(decide(&e), Some((Go, 1, 0)));
        assert_eq!(
            decide(&[ev(3, true, R::Start, N::None)]),
            Some((Wait, 3, 1))
        );
        assert_eq!(
            decide(&[ev(3, true, R::Start, N::Start)]),
            Some((Wait, 3, 2))
        );
        assert_eq!(
            decide(&[ev(3, true, R::Start, N::Fail)]),
            Some((Nogo, 3, 3))
        );
    }

    #[test]
    fn newest_other_run_decides() {
        let e = [
            ev(1, false, R::Complete, N::Success),
            ev(2, false, R::Complete, N::Fail),
            ev(3, true, R::Start, N::None),
        ];
        // The current run's event comes first and says wait (rule 1).
        assert_eq!(decide(&e), Some((Wait, 3, 1)));
        let e = [
            ev(1, false, R::Complete, N::Success),
            ev(2, false, R::Complete, N::Fail),
        ];
        assert_eq!(decide(&e), Some((Nogo, 2, 8)));
        let e = [
            ev(1, false, R::Complete, N::Success),
            ev(2, false, R::Stop, N::Success),
        ];
        assert_eq!(decide(&e), Some((Nogo, 2, 9)));
        let e = [
            ev(1, false, R::Complete, N::Success),
            ev(2, false, R::Start, N::Start),
        ];
        assert_eq!(decide(&e), Some((Wait, 2, 6)));
    }

    #[test]
    fn unmatched_events_are_skipped() {
        // A complete run where the node never ran (exec_node) matches no rule: older run wins.
        let e = [
            ev(1, false, R::Complete, N::Success),
            ev(2, false, R::Complete, N::None),
            ev(3, false, R::Complete, N::StopReceived),
        ];
        assert_eq!(decide(&e), Some((Go, 1, 7)));
        assert_eq!(decide(&[ev(2, false, R::Complete, N::None)]), None);
        assert_eq!(decide(&[]), None);
    }

    #[test]
    fn custom_order_is_honoured() {
        // Oldest run first.
        let p = policy(
            "run_id(asc)",
            &[("go", "nrs.node_status == wfmodel.NodeBatchSuccess")],
        );
        let p = ResolvedPolicy::resolve(&p).unwrap();
        let e = [
            ev(2, false, R::Complete, N::Success),
            ev(1, false, R::Complete, N::Success),
        ];
        assert_eq!(p.decide(&e).unwrap().map(|m| m.run_id), Some(1));
    }

    #[test]
    fn bad_policies_are_rejected() {
        let p = policy("run_id(asc)", &[("go", "nrs.run_id")]);
        assert!(matches!(
            ResolvedPolicy::resolve(&p),
            Err(PolicyError::Eval { rule: 0, .. })
        ));
        let p = policy("run_id(asc)", &[("go", "r.x == 1")]);
        assert!(matches!(
            ResolvedPolicy::resolve(&p),
            Err(PolicyError::Compile { rule: 0, .. })
        ));
    }
}
