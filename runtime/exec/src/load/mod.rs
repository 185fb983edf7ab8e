mod chain;
mod copies;
mod fuse;
pub(crate) mod program;
pub(crate) mod replicas;
