mod chain;
pub(crate) mod copies;
mod epilogue;
mod fuse;
pub(crate) mod program;
pub(crate) mod replicas;
