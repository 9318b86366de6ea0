//! nvidia.ko's `PeerMappingOverride` registry key: what GPU-initiated networking with the GPU as
//! the NIC handler needs (NVSHMEM IBGDA, NCCL's GPU-initiated networking, DOCA GPUNetIO map the
//! NIC's doorbell page, I/O memory, into the GPU with `cuMemHostRegister(...IOMEMORY)`), and what
//! a security review wants to see: with it any process may map a PCIe device's I/O memory into
//! the GPU (NVIDIA/open-gpu-kernel-modules: `osCreateOsDescriptorFromIoMemory` refuses it to a
//! process without CAP_SYS_ADMIN unless the key is set; NVSHMEM then falls back to CPU-assisted
//! IBGDA without a word).
//!
//! The module's parameters are registered with permission 0 (no /sys/module/nvidia/parameters):
//! /proc/driver/nvidia/params is the one place they show, `RegistryDwords: "<string>"` the key
//! list as the administrator gave it (`nv_procfs_read_params`, kernel-open/nvidia/nv-procfs.c).

use super::finding::{ev, Finding, Status};
use super::fs::{proc_name, Fs};
use super::modules::Modules;
use super::pci::PciDevice;

const PARAMS: &str = "driver/nvidia/params";

/// `PeerMappingOverride` as the params file says it: Some(true/false), None when unreadable.
pub fn read(fs: &Fs) -> (Option<bool>, Option<String>) {
    let Some(params) = fs.proc_opt(PARAMS) else { return (None, None) };
    let dwords = params
        .lines()
        .find_map(|l| l.strip_prefix("RegistryDwords:"))
        .map(|v| v.trim().trim_matches('"').to_string());
    let on = dwords.as_deref().is_some_and(peer_mapping_override);
    (Some(on), dwords)
}

/// Whether a RegistryDwords string (`key=value;key=value`, as nvidia.ko parses it) sets
/// PeerMappingOverride to a non-zero value.
pub fn peer_mapping_override(dwords: &str) -> bool {
    dwords.split(';').filter_map(|kv| kv.split_once('=')).any(|(k, v)| {
        k.trim().eq_ignore_ascii_case("PeerMappingOverride") && parse_dword(v.trim()).is_some_and(|n| n != 0)
    })
}

fn parse_dword(v: &str) -> Option<u32> {
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => v.parse().ok(),
    }
}

/// `peer-mapping`: whether a process may map a NIC's doorbell page into the GPU.
pub fn finding(fs: &Fs, m: &Modules, gpus: &[&PciDevice], nics: &[&PciDevice]) -> Finding {
    if gpus.is_empty() || (!m.nvidia_loaded && fs.proc_opt("driver/nvidia/version").is_none()) {
        let why = if gpus.is_empty() { "no NVIDIA GPU" } else { "the NVIDIA driver is not loaded" };
        return Finding::new("peer-mapping", Status::NotApplicable, why);
    }
    let (on, dwords) = read(fs);
    let evidence = vec![ev(
        proc_name(PARAMS),
        dwords.as_ref().map_or_else(|| "missing".into(), |d| format!("RegistryDwords: \"{d}\"")),
    )];
    let rdma = nics.iter().any(|n| n.is_rdma());
    let f = match on {
        None => Finding::new(
            "peer-mapping",
            Status::Unknown,
            "nvidia.ko's registry keys are unreadable: whether GPU-initiated networking may map the NIC's doorbell into the GPU is unknown",
        ),
        Some(true) => Finding::new(
            "peer-mapping",
            Status::Pass,
            "PeerMappingOverride=1: any process may map I/O memory (a NIC's doorbell page) into the GPU, as GPU-handled IBGDA / GPU-initiated networking needs",
        ),
        Some(false) if rdma => Finding::new(
            "peer-mapping",
            Status::Warn,
            "PeerMappingOverride not set: a process without CAP_SYS_ADMIN cannot map the NIC's doorbell into the GPU, and NVSHMEM IBGDA / NCCL GPU-initiated networking fall back to CPU-assisted without a word",
        )
        .hint("for GPU-handled IBGDA set options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1;\" (modprobe.d) and reload nvidia.ko; `gdr-trace attach PID` shows which mode a job got"),
        Some(false) => Finding::new("peer-mapping", Status::NotApplicable, "no RDMA NIC (PeerMappingOverride not set)"),
    };
    f.evidence(evidence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_key_as_nvidia_ko_parses_it() {
        assert!(peer_mapping_override("PeerMappingOverride=1;"));
        assert!(peer_mapping_override("RMForceStaticBar1=1;PeerMappingOverride=0x1"));
        assert!(peer_mapping_override(" peermappingoverride = 1 "));
        assert!(!peer_mapping_override("PeerMappingOverride=0;"));
        assert!(!peer_mapping_override(""));
        assert!(!peer_mapping_override("PeerMappingOverrideX=1"));
    }
}
