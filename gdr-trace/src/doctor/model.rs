//! What `doctor` reports: the live evidence it weighs, problems, steps, A/B tests.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::preflight::Distance;

pub use crate::units::human_bytes;

/// Verdicts (see PRODUCT.md) that mean "GPU memory went to the NIC".
pub const GPU_VERDICTS: [&str; 2] = ["gpu-peermem", "gpu-dmabuf"];
/// The verdict that means "pinned host pages": host staging for a GPU process.
pub const HOST_VERDICT: &str = "host";
pub const FAILED_VERDICT: &str = "failed";

/// Driver-level evidence for one process over a window: what the live tracer saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LiveEvidence {
    pub pid: u32,
    pub duration_s: f64,
    pub comm: Option<String>,
    /// Memory registrations, summed per (RDMA device, verdict).
    pub registrations: Vec<LiveTotal>,
    /// File I/O bytes per verdict (`gds-nvfs`, `gds-compat`, `page-cache`, `direct`).
    pub io_bytes_by_verdict: BTreeMap<String, u64>,
    /// Host MRs inside CUDA pinned host allocations: the evidence of host staging.
    pub staging_mrs: Vec<StagingMr>,
    /// GPU↔GPU copies per device pair and verdict (`p2p-direct`, `p2p-staged`).
    pub p2p_pairs: Vec<crate::p2p::P2pPair>,
    /// Imports of GPU memory from other processes (CUDA IPC, cuMem handles).
    pub gpu_imports: Vec<GpuImport>,
    /// When the process maps libcufile: its compatibility-mode reasons (`gds_live`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cufile: Option<CufileEvidence>,
    /// Its queue memory and GPU-initiated networking, when it pinned any (`gin_live`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queues: Option<crate::queues::ProcReport>,
    /// What this host's hooks cannot tell (`crate::untold`): its verdicts are not evidence.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub untold: Vec<crate::untold::Untold>,
}

/// What doctor found about a process that maps libcufile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CufileEvidence {
    /// The libcufile it maps.
    pub library: String,
    /// The cufile.json it reads (inside its root), if any.
    pub config_file: Option<String>,
    pub config_error: Option<String>,
    /// Reasons that hold for every cuFile call of the process (configuration, nvidia-fs).
    pub compat_reason: Vec<String>,
    pub why: Vec<String>,
    /// Open regular files on filesystems with no GPUDirect path: "path (fstype)".
    pub compat_only_files: Vec<String>,
}

/// A host MR in CUDA pinned host memory, as doctor cites it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StagingMr {
    pub device: Option<String>,
    pub length: u64,
    /// `cuMemHostAlloc` or `cuMemHostRegister`.
    pub host_alloc: &'static str,
}

/// An import of GPU memory, as doctor cites it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuImport {
    pub op: String,
    pub exporter_pid: Option<u32>,
    pub ok: bool,
}

/// Registrations of one verdict on one device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveTotal {
    /// The RDMA device (`mlx5_0`), when the tracer knew it.
    pub device: Option<String>,
    /// A verdict name: `gpu-peermem`, `gpu-dmabuf`, `dmabuf-other`, `host`, `odp`, `failed`.
    pub verdict: String,
    pub count: u64,
    pub bytes: u64,
}

impl LiveEvidence {
    pub fn new(pid: u32, duration_s: f64) -> Self {
        Self { pid, duration_s, ..Default::default() }
    }

    /// Adds `count` registrations totalling `bytes` (call once per registration with count 1,
    /// or once per aggregate row).
    pub fn add(&mut self, device: Option<&str>, verdict: &str, count: u64, bytes: u64) {
        let dev = device.map(str::to_string);
        if let Some(t) = self.registrations.iter_mut().find(|t| t.device == dev && t.verdict == verdict) {
            t.count += count;
            t.bytes += bytes;
        } else {
            self.registrations.push(LiveTotal { device: dev, verdict: verdict.to_string(), count, bytes });
        }
    }

    fn on<'a>(&'a self, device: Option<&'a str>) -> impl Iterator<Item = &'a LiveTotal> + 'a {
        self.registrations.iter().filter(move |t| device.is_none() || t.device.as_deref() == device)
    }

    /// Bytes per verdict, on one device or (`None`) on all.
    pub fn bytes_by_verdict(&self, device: Option<&str>) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for t in self.on(device) {
            *m.entry(t.verdict.clone()).or_insert(0) += t.bytes;
        }
        m
    }

    pub fn gpu_bytes(&self, device: Option<&str>) -> u64 {
        self.on(device).filter(|t| GPU_VERDICTS.contains(&t.verdict.as_str())).map(|t| t.bytes).sum()
    }

    pub fn host_bytes(&self, device: Option<&str>) -> u64 {
        self.on(device).filter(|t| t.verdict == HOST_VERDICT).map(|t| t.bytes).sum()
    }

    pub fn count(&self, verdict: Option<&str>) -> u64 {
        self.registrations.iter().filter(|t| verdict.is_none_or(|v| t.verdict == v)).map(|t| t.count).sum()
    }

    /// Whether any total names its device (so per-HCA comparisons are possible).
    pub fn has_devices(&self) -> bool {
        self.registrations.iter().any(|t| t.device.is_some())
    }
}

/// How bad a problem is; the ranking key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// What the driver did contradicts what NCCL says, or no RDMA at all.
    Critical,
    /// GPUDirect is (or will be) off for some traffic.
    High,
    /// Degrades or risks degrading; worth a look.
    Medium,
    /// Context.
    Info,
}

/// The troubleshooting steps, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    Live,
    NcclLog,
    Topology,
    Acs,
    Iommu,
    GpuP2p,
    Bandwidth,
    Other,
}

impl Step {
    pub fn title(self) -> &'static str {
        match self {
            Step::Live => "driver-level evidence",
            Step::NcclLog => "NCCL log and GDR prerequisites",
            Step::Topology => "topology",
            Step::Acs => "ACS",
            Step::Iommu => "IOMMU",
            Step::GpuP2p => "GPU↔GPU P2P",
            Step::Bandwidth => "confirm by bandwidth (A/B)",
            Step::Other => "other checks",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    pub severity: Severity,
    pub step: Step,
    pub title: String,
    pub evidence: Vec<String>,
    pub fix: Option<String>,
}

/// What one step found, for the walkthrough.
#[derive(Debug, Clone, Serialize)]
pub struct StepReport {
    pub step: Step,
    pub lines: Vec<String>,
}

/// The A/B pair: the same transfer from GPU memory (A) and host memory (B).
#[derive(Debug, Clone, Serialize)]
pub struct AbTest {
    pub gpu_index: usize,
    pub gpu: String,
    pub ib_device: String,
    pub distance: Distance,
    pub why: String,
    /// Run on this node (server side).
    pub gpu_server: String,
    /// Run on the peer node, pointing at this one.
    pub gpu_client: String,
    pub host_server: String,
    pub host_client: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Diagnosis {
    /// Ranked: most severe first, then in troubleshooting order.
    pub problems: Vec<Problem>,
    pub steps: Vec<StepReport>,
    pub ab_tests: Vec<AbTest>,
    /// 1 when a critical or high problem was found, else 0.
    pub exit_code: u8,
}
