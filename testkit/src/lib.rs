//! Test-only helpers shared by Plexus crates; never a product feature.
pub mod cql;
