//! planner: loads Capillaries scripts and params, validates them and compiles a Plan.
#![warn(missing_docs)]

pub mod load;
pub mod script;
pub mod source;
pub mod template;
