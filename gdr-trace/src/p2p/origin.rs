//! Where a host MR's memory came from: CUDA pinned host memory (`cuMemHostAlloc`), host memory
//! CUDA pinned in place (`cuMemHostRegister`), or other memory, and what says so: the CUDA call
//! seen, or the kernel's own map of the process, which also tells of allocations made before
//! the trace began.
//!
//! The kernel map: nvidia.ko maps CUDA pinned host memory into a process through its control
//! node. NVIDIA/open-gpu-kernel-modules kernel-open/nvidia/nv-mmap.c (535.288.01 ... 595.45.04):
//! `nvidia_mmap_helper` maps BAR memory on `/dev/nvidiaN` and, on the control node ("Nvidia
//! control node(nvidiactrl) maps system memory"), calls `nvidia_mmap_sysmem`, which
//! `vm_insert_page`s each page of the allocation. So the VMA holding a host MR is a mapping of
//! `/dev/nvidiactl` exactly when the MR lies in CUDA pinned host memory. Memory pinned by
//! `cuMemHostRegister` (`os_lock_user_pages`, kernel-open/nvidia/os-mlock.c) stays an ordinary
//! anonymous mapping: the map can't tell it, only the call (or the pin) seen while tracing.

use serde::{Deserialize, Serialize};

use super::HostAlloc;

/// The device node nvidia.ko maps system memory through (character device 195:255).
pub const NVIDIA_CONTROL_NODE: &str = "/dev/nvidiactl";

/// Where a host MR's memory came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostOrigin {
    /// CUDA pinned host memory (`cuMemHostAlloc`, `cuMemAllocHost`): system memory of nvidia.ko.
    CudaPinned,
    /// Host memory pinned in place by CUDA (`cuMemHostRegister`, nvidia.ko's `os_lock_user_pages`).
    CudaRegistered,
    /// Neither, as far as the calls seen and the kernel's map tell.
    Other,
}

impl HostOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CudaPinned => "cuda-pinned",
            Self::CudaRegistered => "cuda-registered",
            Self::Other => "other",
        }
    }
}

/// What tells a host MR's origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OriginEvidence {
    /// The `cuMemHostAlloc` / `cuMemHostRegister` call was seen (libcuda uprobes).
    #[serde(rename = "call seen")]
    CallSeen,
    /// The MR lies in a mapping of nvidia.ko's control node (/proc/PID/maps): CUDA pinned
    /// memory, whenever it was allocated.
    #[serde(rename = "kernel map")]
    KernelMap,
    /// nvidia.ko pinned the pages (`os_lock_user_pages`) while traced.
    #[serde(rename = "kernel pin")]
    KernelPin,
}

impl OriginEvidence {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CallSeen => "call seen",
            Self::KernelMap => "kernel map",
            Self::KernelPin => "kernel pin",
        }
    }
}

/// A host MR's origin and its evidence (None: `other`, nothing says otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct HostMrOrigin {
    pub origin: HostOrigin,
    pub evidence: Option<OriginEvidence>,
}

impl HostMrOrigin {
    pub const OTHER: Self = Self { origin: HostOrigin::Other, evidence: None };

    /// From a CUDA call seen, else from the kernel's map (`in_kernel_map`).
    pub fn of(call: Option<HostAlloc>, in_kernel_map: bool) -> Self {
        match (call, in_kernel_map) {
            (Some(HostAlloc::CuMemHostAlloc), _) => {
                Self { origin: HostOrigin::CudaPinned, evidence: Some(OriginEvidence::CallSeen) }
            }
            (Some(HostAlloc::CuMemHostRegister), _) => {
                Self { origin: HostOrigin::CudaRegistered, evidence: Some(OriginEvidence::CallSeen) }
            }
            (None, true) => {
                Self { origin: HostOrigin::CudaPinned, evidence: Some(OriginEvidence::KernelMap) }
            }
            (None, false) => Self::OTHER,
        }
    }

    /// CUDA pinned or registered: a staging buffer.
    pub fn is_cuda(self) -> bool {
        self.origin != HostOrigin::Other
    }
}

/// The address ranges `[start, end)` of a process's mappings of nvidia.ko's control node, from
/// the text of /proc/PID/maps, by the node's name as the process sees it (the "dev" column is
/// the filesystem's, devtmpfs, not the node's 195:255).
pub fn control_node_ranges(maps: &str) -> Vec<(u64, u64)> {
    maps.lines()
        .filter_map(crate::procfs::parse_maps_line)
        .filter(|e| e.path == NVIDIA_CONTROL_NODE)
        .filter_map(|e| {
            let (s, t) = e.range.split_once('-')?;
            Some((u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(t, 16).ok()?))
        })
        .collect()
}

/// Whether `[addr, addr + length)` lies inside one of `ranges`.
pub fn covered(ranges: &[(u64, u64)], addr: u64, length: u64) -> bool {
    let Some(end) = addr.checked_add(length) else { return false };
    ranges.iter().any(|&(s, e)| addr >= s && end <= e)
}

#[cfg(test)]
mod tests {
    use super::*;

    // /proc/PID/maps of a process with CUDA pinned memory (devtmpfs is 00:05).
    const MAPS: &str = "\
55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0 [heap]
7f1000000000-7f1000400000 rw-s 00000000 00:05 1035 /dev/nvidiactl
7f1000400000-7f1000500000 rw-s 00000000 00:05 1036 /dev/nvidia0
7f2000000000-7f2000100000 rw-p 00000000 00:00 0
7f3000000000-7f3000010000 r-xp 00000000 08:01 99 /usr/lib/x86_64-linux-gnu/libcuda.so.1
";

    #[test]
    fn the_control_node_mappings_are_the_pinned_host_memory() {
        let r = control_node_ranges(MAPS);
        assert_eq!(r, vec![(0x7f10_0000_0000, 0x7f10_0040_0000)], "only /dev/nvidiactl, not nvidia0");
        assert!(covered(&r, 0x7f10_0010_0000, 1 << 20), "a slice inside");
        assert!(covered(&r, 0x7f10_0000_0000, 4 << 20), "the whole mapping");
        assert!(!covered(&r, 0x7f10_0030_0000, 2 << 20), "running past its end");
        assert!(!covered(&r, 0x7f20_0000_0000, 4096), "anonymous memory");
        assert!(!covered(&r, u64::MAX - 1, 4096), "no overflow");
    }

    #[test]
    fn the_call_seen_wins_then_the_kernel_map_then_other() {
        use HostOrigin::*;
        use OriginEvidence::*;
        let o = |c, m| {
            let h = HostMrOrigin::of(c, m);
            (h.origin, h.evidence)
        };
        assert_eq!(o(Some(HostAlloc::CuMemHostAlloc), false), (CudaPinned, Some(CallSeen)));
        assert_eq!(o(Some(HostAlloc::CuMemHostRegister), false), (CudaRegistered, Some(CallSeen)));
        assert_eq!(o(Some(HostAlloc::CuMemHostAlloc), true), (CudaPinned, Some(CallSeen)));
        assert_eq!(o(None, true), (CudaPinned, Some(KernelMap)));
        assert_eq!(o(None, false), (Other, None));
        let v = serde_json::to_value(HostMrOrigin::of(None, true)).unwrap();
        assert_eq!((v["origin"].as_str(), v["evidence"].as_str()), (Some("cuda-pinned"), Some("kernel map")));
    }
}
