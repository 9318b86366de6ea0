//! Storage path: which way each byte went — GPUDirect Storage through nvidia-fs, cuFile's
//! compatibility mode (POSIX into host memory), the page cache, or O_DIRECT — per process and
//! per file, live.
//!
//! The data line, as for registrations: hooks (`hooks.rs` storage block, `attach`) -> kernel
//! counter maps (POSIX I/O, page-cache fills: read by `live`) and ring-buffer records (opens,
//! closes, cuFile and nvidia-fs calls: `events`) -> `state` -> `classify` -> `aggregate` (with
//! `hints`) -> sinks (`gds_io`, `nvfs_io`, `storage_summary`).

pub mod aggregate;
pub mod classify;
pub mod events;
pub mod hints;
pub mod live;
pub mod state;

use gdr_trace_common::{
    decode::{decode, DecodeError, Record},
    EventKind,
};

use events::StorageEvent;

/// Whether a ring-buffer record is a storage record (EventKind 10..=19).
pub fn is_storage(bytes: &[u8]) -> bool {
    let kind = bytes.get(..4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    matches!(
        kind.and_then(EventKind::from_u32),
        Some(
            EventKind::FileOpen
                | EventKind::FileClose
                | EventKind::GdsCall
                | EventKind::NvfsIoctl
                | EventKind::NvfsDirectIo
        )
    )
}

/// Decodes a storage record and completes what /proc knows (absolute paths).
pub fn from_ring(bytes: &[u8]) -> Result<StorageEvent, DecodeError> {
    match decode(bytes)? {
        Record::Storage(s) => {
            let mut ev = events::from_record(&s);
            live::resolve(&mut ev);
            Ok(ev)
        }
        _ => Err(DecodeError::UnknownKind(u32::MAX)),
    }
}
