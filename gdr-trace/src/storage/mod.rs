//! Storage path: which way each byte went — GPUDirect Storage through nvidia-fs, cuFile's
//! compatibility mode (POSIX into host memory), the page cache, or O_DIRECT — per process and
//! per file, live.
//!
//! The data line, as for registrations: hooks (`hooks.rs` storage block, `attach`) -> kernel
//! counter maps (POSIX I/O, page-cache fills: read by `live`) and ring-buffer records (opens,
//! closes, cuFile and nvidia-fs calls: `events`) -> `state` -> `classify` -> `aggregate` (with
//! `hints`) -> sinks (`gds_io`, `nvfs_io`, `storage_summary`).

pub mod aggregate;
pub mod attach;
pub mod classify;
pub mod events;
pub mod hints;
pub mod kernel;
pub mod live;
pub mod state;

use aya::Ebpf;
use gdr_trace_common::{
    decode::{decode, DecodeError, Record},
    EventKind,
};

use crate::sink::Sink;
use events::StorageEvent;
use state::StorageState;

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

/// Folds one storage event into the state and tells the sink what it is.
pub fn deliver(state: &mut StorageState, ev: StorageEvent, sink: &mut dyn Sink) {
    let nvfs = match &ev {
        StorageEvent::Nvfs(io) => Some(io.clone()),
        _ => None,
    };
    if let Some(io) = state.record(ev) {
        sink.gds_io(&io);
    }
    if let Some(io) = nvfs {
        let path = io.fd.and_then(|fd| state.fd_path(io.ctx.pid, fd));
        sink.nvfs_io(&io, path.as_deref());
    }
}

/// Reads the kernel's counters and hands the sink a report (every interval, and at the end).
pub fn summarize(ebpf: &mut Ebpf, state: &mut StorageState, sink: &mut dyn Sink, last: bool) {
    live::refresh(ebpf, state);
    sink.storage_summary(&aggregate::report(state), last);
}
