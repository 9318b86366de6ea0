//! Verdicts: what a registration is, from the evidence its hooks left (PRODUCT.md's table).

use serde::{Deserialize, Serialize};

use crate::correlate::Registration;

/// ibv/ib access flag for on-demand paging.
const ACCESS_ON_DEMAND: u32 = 1 << 6;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// GPU memory through a peer-memory client (nvidia-peermem).
    GpuPeermem,
    /// GPU memory exported as a dma-buf by NVIDIA's driver.
    GpuDmabuf,
    /// A dma-buf from another exporter.
    DmabufOther,
    /// Pinned host pages.
    Host,
    /// On-demand paging.
    Odp,
    Failed,
    /// Seen only where the memory type can't be told (e.g. only the userspace hook attached).
    Unknown,
}

impl Verdict {
    pub const ALL: [Verdict; 7] = [
        Self::GpuPeermem,
        Self::GpuDmabuf,
        Self::DmabufOther,
        Self::Host,
        Self::Odp,
        Self::Failed,
        Self::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::GpuPeermem => "gpu-peermem",
            Self::GpuDmabuf => "gpu-dmabuf",
            Self::DmabufOther => "dmabuf-other",
            Self::Host => "host",
            Self::Odp => "odp",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
        }
    }

    pub fn is_gpu(self) -> bool {
        matches!(self, Self::GpuPeermem | Self::GpuDmabuf)
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub fn classify(reg: &Registration) -> Verdict {
    if reg.failed {
        return Verdict::Failed;
    }
    if reg.access & ACCESS_ON_DEMAND != 0 {
        return Verdict::Odp;
    }
    if reg.kernel_pinned {
        // ib_umem_get pinned the pages with pin_user_pages: host memory (a cudaMalloc address
        // fails there on upstream kernels).
        return Verdict::Host;
    }
    Verdict::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Context;

    fn reg() -> Registration {
        Registration {
            id: 1,
            ctx: Context { pid: 1, tid: 1, comm: "x".into(), uid: 0, cgroup_id: 0, ts_ns: 0 },
            addr: 0x1000,
            length: 4096,
            iova: 0x1000,
            access: 1,
            device: None,
            sources: vec![],
            failed: false,
            errno: None,
            kernel_pinned: false,
            umem: None,
            mr: None,
        }
    }

    #[test]
    fn verdicts_follow_the_evidence() {
        let mut r = reg();
        assert_eq!(classify(&r), Verdict::Unknown, "userspace-only: memory type unknown");
        r.kernel_pinned = true;
        assert_eq!(classify(&r), Verdict::Host);
        r.access |= ACCESS_ON_DEMAND;
        assert_eq!(classify(&r), Verdict::Odp);
        r.failed = true;
        assert_eq!(classify(&r), Verdict::Failed);
    }

    #[test]
    fn names_are_the_documented_ones() {
        let names: Vec<_> = Verdict::ALL.iter().map(|v| v.as_str()).collect();
        assert_eq!(names, ["gpu-peermem", "gpu-dmabuf", "dmabuf-other", "host", "odp", "failed", "unknown"]);
        assert_eq!(serde_json::to_string(&Verdict::GpuDmabuf).unwrap(), "\"gpu-dmabuf\"");
    }
}
