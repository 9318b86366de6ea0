//! The kernel's counters at one summary tick, one part per evidence family: what `trace` reads
//! from the BPF maps (recordings carry it) and `Pipeline::summary_tick` hands to each family.
//! Its JSON is flat (the families' fields side by side), as recordings have always had it.

use gdr_trace_common::mr::bytes::{ByteCount, ByteKey};
use serde::{Deserialize, Serialize};

use crate::{
    p2p::{P2pCopies, PeerEnabled, StagedCopies},
    storage::state::Snapshot,
};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Storage: files, page fills, io_uring, and the processes they name (`comms`, `gone`).
    #[serde(flatten)]
    pub storage: Snapshot,
    /// GPU↔GPU copies counted in the kernel, cumulative.
    #[serde(default)]
    pub p2p: Vec<P2pCopies>,
    /// Peer access enabled, as the kernel holds it now.
    #[serde(default)]
    pub peer_access: Vec<PeerEnabled>,
    /// Device <-> host copies counted in the kernel by host address, cumulative.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub staged: Vec<StagedCopies>,
    /// Work requests' bytes per (process, device, lkey) as the kernel counts them, cumulative.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bytes: Vec<(ByteKey, ByteCount)>,
}

/// Storage counters alone (tests, and readings with no other family's maps).
impl From<Snapshot> for Counters {
    fn from(storage: Snapshot) -> Self {
        Self { storage, ..Self::default() }
    }
}
