mod chain;
pub(crate) mod copies;
mod fuse;
pub(crate) mod program;
pub(crate) mod replicas;
