//! plexus-node: the node process library (executors, storage, the py_calc Python worker pool).

pub mod pycalc;
