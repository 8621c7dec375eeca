//! What an expression may reference: the aliases and typed fields of its context (spec §5.1),
//! and the per-row values handed to evaluation.

use serde::{Deserialize, Serialize};

use super::error::ExprError;
use crate::value::{Type, Value};

/// A field alias of spec §5.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Alias {
    /// `r.*`: reader fields.
    R,
    /// `l.*`: lookup table fields.
    L,
    /// `p.*`: custom processor fields.
    P,
    /// `w.*`: the row being written (having).
    W,
    /// `nrs.*`: node-run status of dependency policy rules.
    Nrs,
}

impl Alias {
    /// All aliases, in index order.
    pub const ALL: [Self; 5] = [Self::R, Self::L, Self::P, Self::W, Self::Nrs];

    /// The alias as written in expressions.
    pub fn name(self) -> &'static str {
        match self {
            Self::R => "r",
            Self::L => "l",
            Self::P => "p",
            Self::W => "w",
            Self::Nrs => "nrs",
        }
    }

    /// Parses an alias name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// The fields each allowed alias offers, in order, and whether `wfmodel.*` constants exist.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Scope {
    aliases: [Option<Vec<(String, Type)>>; 5],
    wfmodel: bool,
}

impl Scope {
    /// An empty scope: no alias allowed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Allows `alias` with these fields (the index of a field is its slot in [`Vars`]).
    pub fn with_alias<I, S>(mut self, alias: Alias, fields: I) -> Self
    where
        I: IntoIterator<Item = (S, Type)>,
        S: Into<String>,
    {
        self.aliases[alias.index()] =
            Some(fields.into_iter().map(|(n, t)| (n.into(), t)).collect());
        self
    }

    /// Enables the `wfmodel.*` constants (dependency policy rules, spec §3.12).
    pub fn with_wfmodel(mut self) -> Self {
        self.wfmodel = true;
        self
    }

    /// The scope of dependency policy rules: `nrs.run_id`, `nrs.run_is_current`,
    /// `nrs.run_status`, `nrs.node_status` (slots 0..4) and the `wfmodel.*` constants.
    pub fn dependency_policy() -> Self {
        Self::new()
            .with_alias(
                Alias::Nrs,
                [
                    ("run_id", Type::Int),
                    ("run_is_current", Type::Bool),
                    ("run_status", Type::Int),
                    ("node_status", Type::Int),
                ],
            )
            .with_wfmodel()
    }

    /// The fields of an alias, `None` when the alias is not allowed.
    pub fn fields(&self, alias: Alias) -> Option<&[(String, Type)]> {
        self.aliases[alias.index()].as_deref()
    }

    /// Whether the `wfmodel.*` constants are available.
    pub fn has_wfmodel(&self) -> bool {
        self.wfmodel
    }

    /// Resolves `alias.field` to its alias, slot and type.
    pub fn resolve(&self, alias: &str, field: &str) -> Result<(Alias, usize, Type), ExprError> {
        let prohibited = || ExprError::ProhibitedField {
            alias: alias.to_owned(),
            field: field.to_owned(),
        };
        let a = Alias::from_name(alias).ok_or_else(prohibited)?;
        let fields = self.fields(a).ok_or_else(prohibited)?;
        let idx =
            fields
                .iter()
                .position(|(n, _)| n == field)
                .ok_or_else(|| ExprError::UnknownField {
                    alias: alias.to_owned(),
                    field: field.to_owned(),
                })?;
        Ok((a, idx, fields[idx].1))
    }
}

/// The values of one evaluation: for each alias, the row's values in [`Scope`] field order.
#[derive(Clone, Copy, Debug, Default)]
pub struct Vars<'a> {
    slices: [&'a [Value]; 5],
}

impl<'a> Vars<'a> {
    /// No values for any alias.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the values of `alias` (builder form).
    pub fn with(mut self, alias: Alias, values: &'a [Value]) -> Self {
        self.slices[alias.index()] = values;
        self
    }

    /// Sets the values of `alias`.
    pub fn set(&mut self, alias: Alias, values: &'a [Value]) {
        self.slices[alias.index()] = values;
    }

    /// The values of `alias`.
    pub fn get(&self, alias: Alias) -> &'a [Value] {
        self.slices[alias.index()]
    }

    #[inline]
    pub(crate) fn slot(&self, alias: u8, idx: u32) -> Option<&'a Value> {
        self.slices
            .get(usize::from(alias))
            .and_then(|s| s.get(idx as usize))
    }
}
