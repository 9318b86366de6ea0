//! Storage path: which way each byte went — GPUDirect Storage through nvidia-fs, cuFile's
//! compatibility mode (POSIX into host memory), the page cache, or O_DIRECT — per process and
//! per file, live.
//!
//! The data line, as for registrations: hooks (`hooks/storage.rs`, attached by
//! `loader::storage_attach`) -> kernel counter maps (POSIX I/O, page-cache fills: read by
//! `trace::storage_live` at each tick) and ring-buffer records (opens, closes, cuFile and
//! nvidia-fs calls: decoded once by `events`, completed from /proc by
//! `trace::storage_live::StorageLive::enrich`) -> `state` -> `classify`
//! -> `aggregate` (with `hints`) -> sinks (`gds_io`, `nvfs_io`, `storage_summary`).

pub mod aggregate;
pub mod archive;
pub mod attribute;
pub mod classify;
pub mod file;
pub mod fold;
pub mod folded;
pub mod gds_facts;
pub mod gds_mode;
pub mod gds_report;
pub mod hints;
pub mod kernel_p2pdma;
pub mod mounts;
pub mod report;
pub mod snapshot;
pub mod state;
