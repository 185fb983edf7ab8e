pub(crate) mod admission;
pub(crate) mod agenda;
pub(crate) mod controller;
pub(crate) mod executor;
pub(crate) mod worker;
