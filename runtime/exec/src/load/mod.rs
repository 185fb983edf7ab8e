mod chain;
mod fuse;
pub(crate) mod program;
pub(crate) mod replicas;
