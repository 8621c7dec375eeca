//! plexus-node: the Plexus peer daemon library (file formats, storage, processors, transport).

pub mod files;
