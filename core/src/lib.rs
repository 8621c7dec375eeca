//! plexus-core: the values, types, expression language, keys and compiled Plan model shared by
//! every Plexus crate.
//!
//! This crate is sans-IO: it never opens files or sockets, spawns threads or reads the clock,
//! except `time.Now()` in the expression library, which Capillaries scripts may call.
#![warn(missing_docs)]

pub mod cell;
pub mod decimal;
pub mod envelope;
pub mod expr;
pub mod gofmt;
pub mod gotime;
pub mod key;
pub mod plan;
pub mod row;
pub mod task;
pub mod value;
