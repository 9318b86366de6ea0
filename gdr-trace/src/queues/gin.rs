//! GPU-initiated networking, per process, from its queue pins and the mapping of the NIC's
//! doorbell page into the GPU. NVSHMEM's IBGDA (DeepEP v1), NCCL's GPU-initiated networking and
//! DOCA GPUNetIO put QP/CQ rings and doorbell records in GPU memory (DEVX UMEMs or the OFED peer
//! path, through nvidia-peermem or a dma-buf); with the GPU as the NIC handler they also map the
//! NIC's UAR (doorbell) page into the GPU, `cuMemHostRegister(uar, size,
//! CU_MEMHOSTREGISTER_IOMEMORY)`. When that mapping fails NVSHMEM 3.4.5+ goes on without a word
//! with a CPU thread ringing the doorbells ("CPU-assisted IBGDA", DeepEP #509).

use serde::Serialize;

use super::{ProcQueues, QueueKind};
use crate::{events::Source, units::human_bytes};

/// `CU_MEMHOSTREGISTER_IOMEMORY` (cuda.h): the range is I/O memory (a PCIe BAR such as a NIC's
/// UAR page), mapped for the GPU's access.
pub const CU_MEMHOSTREGISTER_IOMEMORY: u64 = 0x04;

/// Which GPU-initiated networking a process got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GinMode {
    /// Queues in GPU memory and the NIC's doorbell page mapped into the GPU: the GPU rings it.
    GpuHandled,
    /// Queues in GPU memory, the doorbell page not mapped into the GPU: a CPU thread rings it.
    CpuAssisted,
    /// Every queue in host memory: no GPU-initiated networking (a CPU proxy posts the work).
    HostQueues,
}

impl GinMode {
    pub const ALL: [GinMode; 3] = [Self::GpuHandled, Self::CpuAssisted, Self::HostQueues];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::GpuHandled => "gpu-handled",
            Self::CpuAssisted => "cpu-assisted",
            Self::HostQueues => "host-queues",
        }
    }
}

/// A `cuMemHostRegister` with `CU_MEMHOSTREGISTER_IOMEMORY`: I/O memory mapped into the GPU
/// (or not: `ret` is the CUresult).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IoMapping {
    pub addr: u64,
    pub length: u64,
    pub ret: i64,
    pub source: Source,
}

/// The verdict and what it rests on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gin {
    pub mode: GinMode,
    pub evidence: Vec<String>,
}

/// What a process's queues say (None: it pinned no queue memory). `mapping_visible`: whether
/// libcuda's `cuMemHostRegister` is hooked, so that no mapping seen means none was made.
pub fn decide(p: &ProcQueues, mapping_visible: bool) -> Option<Gin> {
    let queues: Vec<_> =
        p.tallies.iter().filter(|((k, _), t)| *k != QueueKind::Unknown && t.pins > 0).collect();
    if queues.is_empty() {
        return None;
    }
    let gpu: Vec<String> = queues
        .iter()
        .filter(|((_, m), _)| m.is_gpu())
        .map(|((k, m), t)| format!("{k} in {m}: {} ({})", t.pins, human_bytes(t.bytes)))
        .collect();
    if gpu.is_empty() {
        let n: u64 = queues.iter().map(|(_, t)| t.pins).sum();
        return Some(Gin {
            mode: GinMode::HostQueues,
            evidence: vec![format!("{n} queue pins, all in host memory")],
        });
    }
    let mut evidence = vec![format!("queue memory in the GPU: {}", gpu.join(", "))];
    let ok = p.io_mappings.iter().find(|m| m.ret == 0);
    let mode = match (ok, p.io_mappings.last()) {
        (Some(m), _) => {
            evidence.push(format!(
                "NIC doorbell page mapped into the GPU: {} I/O memory at {:#x} ({}) ok",
                m.source,
                m.addr,
                human_bytes(m.length)
            ));
            GinMode::GpuHandled
        }
        (None, Some(m)) => {
            evidence.push(format!(
                "NIC doorbell page not mapped into the GPU: {} I/O memory at {:#x} failed (CUresult {}): a CPU thread rings the doorbells",
                m.source, m.addr, m.ret
            ));
            GinMode::CpuAssisted
        }
        (None, None) if mapping_visible => {
            evidence.push("no I/O-memory mapping into the GPU (cuMemHostRegister IOMEMORY) seen: a CPU thread rings the doorbells".into());
            GinMode::CpuAssisted
        }
        (None, None) => {
            evidence.push(
                "the doorbell page's mapping into the GPU cannot be seen (libcuda's cuMemHostRegister not hooked): taken as not mapped".into(),
            );
            GinMode::CpuAssisted
        }
    };
    Some(Gin { mode, evidence })
}
