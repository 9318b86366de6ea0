//! Verdicts: what a registration is, from the evidence its hooks left (PRODUCT.md's table).

use serde::{Deserialize, Serialize};

use crate::mr::correlate::Registration;

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
    /// NCCL's dma-buf support probe (`ibv_reg_dmabuf_mr` with fd -1): not a failure.
    Probe,
    /// Seen only where the memory type can't be told (e.g. only the userspace hook attached).
    Unknown,
}

impl Verdict {
    pub const ALL: [Verdict; 8] = [
        Self::GpuPeermem,
        Self::GpuDmabuf,
        Self::DmabufOther,
        Self::Host,
        Self::Odp,
        Self::Failed,
        Self::Probe,
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
            Self::Probe => "probe",
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

/// dma-buf exporter names of NVIDIA's driver: `nv_dmabuf` since 580.65.06, the module name before.
pub const NVIDIA_EXPORTERS: [&str; 2] = ["nv_dmabuf", "nvidia"];

pub fn classify(reg: &Registration) -> Verdict {
    if reg.failed {
        return if reg.dmabuf_fd.is_some_and(|fd| fd < 0) { Verdict::Probe } else { Verdict::Failed };
    }
    if reg.access & ACCESS_ON_DEMAND != 0 {
        return Verdict::Odp;
    }
    if reg.dmabuf_fd.is_some() {
        return match reg.exporter.as_deref() {
            Some(e) if NVIDIA_EXPORTERS.contains(&e) => Verdict::GpuDmabuf,
            Some(_) => Verdict::DmabufOther,
            // Exporter not read (no BTF for the dma-buf structs, or only userspace saw it).
            None => Verdict::Unknown,
        };
    }
    if reg.peer.claimed && reg.peer.gpu_pages {
        // A peer client claimed the range and NVIDIA's P2P API pinned GPU pages for it.
        return Verdict::GpuPeermem;
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

    fn reg() -> Registration {
        Registration { id: 1, addr: 0x1000, length: 4096, access: 1, ..Default::default() }
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
    fn gpu_verdicts() {
        let mut r = reg();
        r.kernel_pinned = true;
        r.peer.claimed = true;
        assert_eq!(classify(&r), Verdict::Host, "claimed but no GPU pages pinned: not proven GPU");
        r.peer.gpu_pages = true;
        assert_eq!(classify(&r), Verdict::GpuPeermem);

        let mut d = reg();
        d.kernel_pinned = true;
        d.dmabuf_fd = Some(7);
        assert_eq!(classify(&d), Verdict::Unknown, "exporter unread");
        for (name, v) in [
            ("nv_dmabuf", Verdict::GpuDmabuf),
            ("nvidia", Verdict::GpuDmabuf),
            ("udmabuf", Verdict::DmabufOther),
        ] {
            d.exporter = Some(name.into());
            assert_eq!(classify(&d), v, "{name}");
        }
        let mut p = reg();
        p.dmabuf_fd = Some(-1);
        p.failed = true;
        assert_eq!(classify(&p), Verdict::Probe, "NCCL's probe is not a failure");
        p.dmabuf_fd = Some(5);
        assert_eq!(classify(&p), Verdict::Failed);
    }

    #[test]
    fn names_are_the_documented_ones() {
        let names: Vec<_> = Verdict::ALL.iter().map(|v| v.as_str()).collect();
        assert_eq!(
            names,
            ["gpu-peermem", "gpu-dmabuf", "dmabuf-other", "host", "odp", "failed", "probe", "unknown"]
        );
        assert_eq!(serde_json::to_string(&Verdict::GpuDmabuf).unwrap(), "\"gpu-dmabuf\"");
    }
}
