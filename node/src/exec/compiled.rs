//! The compiled parts that several processors share: a table reader ([`TableInput`]), a
//! lookup ([`LookupStage`]), a table writer ([`TableOut`], the common write pipeline) and a
//! file writer ([`FileOut`]). Built by `prepare.rs` once per plan node.

use plexus_core::cell::CellError;
use plexus_core::expr::{Accumulator, Compiled};
use plexus_core::key::IndexDef;
use plexus_core::plan::{FileWriter, JoinType};
use plexus_core::value::{Type, Value};

use crate::store::WriteMode;

/// A table reader, ready to scan.
#[derive(Debug)]
pub(crate) struct TableInput {
    pub(crate) table: String,
    pub(crate) types: Vec<Type>,
    /// Its field names, in row order.
    pub(crate) names: Vec<String>,
    pub(crate) page_size: usize,
}

/// A compiled lookup (spec §7.4).
#[derive(Debug)]
pub(crate) struct LookupStage {
    /// The right table name.
    pub(crate) table: String,
    /// Its row layout.
    pub(crate) types: Vec<Type>,
    /// Its field names, in row order.
    pub(crate) names: Vec<String>,
    /// The index looked up.
    pub(crate) index_name: String,
    pub(crate) index: IndexDef,
    /// Positions in the left row of the `join_on` fields, in index component order.
    pub(crate) join_pos: Vec<usize>,
    /// Positions in the right row of the index components, in component order (hash join).
    pub(crate) index_pos: Vec<usize>,
    pub(crate) join_type: JoinType,
    pub(crate) group: bool,
    pub(crate) filter: Option<Compiled>,
    pub(crate) idx_batch: usize,
    pub(crate) right_batch: usize,
}

/// A compiled table writer: the common write pipeline of spec §7.1.
#[derive(Debug)]
pub(crate) struct TableOut {
    pub(crate) fields: Vec<OutField>,
    pub(crate) types: Vec<Type>,
    pub(crate) having: Option<Compiled>,
    /// Indexes in name order (the order of [`TableSpec::indexes`] and of row keys).
    pub(crate) indexes: Vec<OutIndex>,
    pub(crate) mode: WriteMode,
}

/// One writer field.
#[derive(Debug)]
pub(crate) struct OutField {
    pub(crate) name: String,
    pub(crate) ty: Type,
    pub(crate) expr: Compiled,
    /// The expression reads an `l.*` field (spec §7.4 defaults of non-grouped left joins).
    pub(crate) refs_lookup: bool,
    /// A fresh accumulator when the expression is a root aggregate.
    pub(crate) agg: Option<Accumulator>,
    /// The lookup default: `default_value` parsed per spec §4.2, or the zero value. A parse
    /// error is kept and fails a batch only when the default is needed.
    pub(crate) default: Result<Value, CellError>,
}

/// One index of the written table.
#[derive(Debug)]
pub(crate) struct OutIndex {
    pub(crate) name: String,
    pub(crate) def: IndexDef,
    /// Positions of the components in the written row.
    pub(crate) pos: Vec<usize>,
}

/// A compiled file writer (spec §7.6).
#[derive(Debug)]
pub(crate) struct FileOut {
    pub(crate) writer: FileWriter,
    pub(crate) columns: Vec<(String, Type, Compiled)>,
    pub(crate) having: Option<Compiled>,
}
