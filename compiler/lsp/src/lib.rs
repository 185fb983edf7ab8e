//! The Amp language server (work in progress).
