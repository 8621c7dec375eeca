//! Index and order definitions and the key encoding that orders and matches rows (spec §6).
//!
//! A key is a byte string: the concatenation of one encoded part per index component. Keys
//! compare byte-wise, and lookups and distinct processing match on key *equality*, so every byte
//! produced here must be exactly what Capillaries' Go `BuildKey` produces, quirks included.
//!
//! Layout, one concern per module, each used one way only:
//! * `def`: what an index definition is (components, modifiers, kinds), its canonical text and
//!   the errors of this module;
//! * `parse`: the definition and order-expression text, parsed with Go's tokenizer rules;
//! * `encode`: a row's values turned into key bytes exactly as Go's `BuildKey` does.

mod def;
mod encode;
mod parse;

pub use def::{
    CaseMode, DEFAULT_STRING_LEN, IndexDef, IndexKind, KeyComponent, KeyError, MAX_STRING_LEN,
    MIN_STRING_LEN, SortDir,
};
pub use encode::{
    build_key, build_key_into, build_order_key_into, orders_compactly, split_trimmed_key,
    trimmed_key_into, trimmed_key_matches, without_trailing_spaces,
};
pub(crate) use encode::{decimal_to_f64, value_kind};
pub use parse::{parse_index_def, parse_order_expr};

#[cfg(test)]
mod tests;
