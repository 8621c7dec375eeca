//! planner: loads Capillaries scripts and params, validates them and compiles a Plan.
#![warn(missing_docs)]
