pub(crate) mod admission;
pub(crate) mod controller;
pub(crate) mod executor;
pub(crate) mod worker;
