//! The compact binary encoding of a table row for storage and the wire.
