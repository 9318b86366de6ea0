//! Parsers of text other programs write, with no dependency on the rest of the crate, so that
//! the storage analysis, the preflight and the live layer read them the same way: JSON with
//! comments (cufile.json), `/proc/PID/mountinfo`.

pub mod jsonc;
pub mod mountinfo;
