//! The staging side of a process's summary: its host MRs in CUDA pinned (or registered) host
//! memory, and the bytes copied between device and pinned host memory (`staged_bytes`).

use serde::Serialize;

use crate::p2p::{staged, StagedBytes, StagedCopies};

/// A host MR that lies in CUDA pinned (or CUDA registered) host memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StagingMr {
    pub id: u64,
    pub addr: u64,
    pub length: u64,
    /// The CUDA call seen (None: the kernel's map told, the memory predates the trace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_alloc: Option<crate::p2p::HostAlloc>,
    /// `cuda-pinned` or `cuda-registered`.
    pub origin: crate::p2p::HostOrigin,
    /// `call seen`, `kernel map` or `kernel pin`.
    pub evidence: Option<crate::p2p::OriginEvidence>,
    /// Bytes copied device -> host into this MR's memory (`cuMemcpyDtoH*`).
    pub staged_bytes_dtoh: u64,
    /// Bytes copied host -> device from it (`cuMemcpyHtoD*`).
    pub staged_bytes_htod: u64,
}

/// The staged bytes from the kernel's cumulative copy counters: `pinned` are the copies whose
/// host side lies in pinned memory the process is known to have, `all` every copy (those into a
/// staging MR's memory count whatever else is known). Sets each MR's own and returns the total.
pub fn staged_bytes(mrs: &mut [StagingMr], pinned: &[StagedCopies], all: &[StagedCopies]) -> StagedBytes {
    let in_mr =
        |c: &StagedCopies| mrs.iter().any(|m| c.host >= m.addr && c.host < m.addr.saturating_add(m.length));
    let mut total = StagedBytes::default();
    for c in all.iter().filter(|c| pinned.contains(c) || in_mr(c)) {
        total.add(c);
    }
    for m in mrs.iter_mut() {
        let b = staged::within(all, m.addr, m.length);
        (m.staged_bytes_dtoh, m.staged_bytes_htod) = (b.dtoh, b.htod);
    }
    total
}
