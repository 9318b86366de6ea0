//! GPU and NIC inventory, GPU–NIC pairs, and the `gpus`, `rdma-nics`, `topology` findings.

use serde::Serialize;

use super::finding::{ev, Evidence, Finding, Status};
use super::fs::sys_name;
use super::level::{GdrLevel, GdrLevelSetting};
use super::pci::{path_between, Distance, PathInfo, PciDevice, PciTree};

/// One GPU–RDMA-NIC pair.
#[derive(Debug, Clone, Serialize)]
pub struct PairInfo {
    /// GPU index in PCI bus order (nvidia-smi's order; CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID).
    pub gpu_index: usize,
    pub gpu: String,
    pub nic: String,
    /// The NIC's first RDMA device (`mlx5_0`).
    pub ib_device: String,
    #[serde(flatten)]
    pub path: PathInfo,
    /// Whether NCCL would use GDR at this distance under the effective level.
    pub nccl_gdr: Option<bool>,
    /// Whether this NIC is (one of) the nearest to this GPU.
    pub nearest: bool,
}

/// Every GPU × RDMA NIC pair, GPU-major, with `nearest` marked.
pub fn all_pairs(gpus: &[&PciDevice], nics: &[&PciDevice], level: GdrLevel) -> Vec<PairInfo> {
    let mut out = Vec::new();
    for (gi, g) in gpus.iter().enumerate() {
        let start = out.len();
        for n in nics.iter().filter(|n| n.is_rdma()) {
            let path = path_between(g, n);
            out.push(PairInfo {
                gpu_index: gi,
                gpu: g.bdf.clone(),
                nic: n.bdf.clone(),
                ib_device: n.nic_name(),
                nccl_gdr: level.allows(path.distance),
                path,
                nearest: false,
            });
        }
        let best = out[start..].iter().map(|p| p.path.distance).min();
        for p in &mut out[start..] {
            p.nearest = Some(p.path.distance) == best;
        }
    }
    out
}

/// The nearest pairs of each GPU (ties included), in GPU order.
pub fn nearest_pairs(pairs: &[PairInfo]) -> Vec<&PairInfo> {
    pairs.iter().filter(|p| p.nearest).collect()
}

fn class_name(class: u32) -> &'static str {
    match class >> 8 {
        0x0300 => "VGA controller",
        0x0302 => "3D controller",
        0x0200 => "Ethernet controller",
        0x0207 => "InfiniBand controller",
        _ => "device",
    }
}

fn describe(d: &PciDevice) -> String {
    let numa = d.numa_node.map_or("-1".to_string(), |n| n.to_string());
    let mut s = format!(
        "{:04x}:{:04x} {} (class 0x{:06x}), NUMA {numa}, driver {}",
        d.vendor,
        d.device,
        class_name(d.class),
        d.class,
        d.driver.as_deref().unwrap_or("none")
    );
    if let Some(m) = &d.model {
        s = format!("{m}; {s}");
    }
    if !d.ib_devices.is_empty() {
        s.push_str(&format!(", infiniband/{}", d.ib_devices.join(",")));
    }
    s
}

fn dev_evidence(d: &PciDevice) -> Evidence {
    ev(sys_name(&d.rel("class")), describe(d))
}

pub fn gpus_finding(tree: &PciTree, gpus: &[&PciDevice]) -> Finding {
    if gpus.is_empty() {
        return Finding::new(
            "gpus",
            Status::NotApplicable,
            "no NVIDIA GPU on this machine: GPUDirect RDMA and Storage do not apply",
        )
        .with(
            "/sys/bus/pci/devices",
            format!("{} PCI functions, none NVIDIA (10de) with a display/3D class", tree.devices.len()),
        );
    }
    let models: Vec<String> =
        gpus.iter().map(|g| g.model.clone().unwrap_or_else(|| format!("10de:{:04x}", g.device))).collect();
    let mut distinct = models.clone();
    distinct.dedup();
    Finding::new("gpus", Status::Pass, format!("{} NVIDIA GPU(s): {}", gpus.len(), distinct.join(", ")))
        .evidence(gpus.iter().map(|g| dev_evidence(g)).collect())
}

pub fn nics_finding(gpus: &[&PciDevice], nics: &[&PciDevice]) -> Finding {
    let evidence: Vec<Evidence> = nics.iter().map(|n| dev_evidence(n)).collect();
    let rdma: Vec<&&PciDevice> = nics.iter().filter(|n| n.is_rdma()).collect();
    let names: Vec<String> = rdma.iter().map(|n| n.nic_name()).collect();
    let unbound: Vec<&str> = nics.iter().filter(|n| !n.is_rdma()).map(|n| n.bdf.as_str()).collect();
    let f = if gpus.is_empty() {
        let summary = if rdma.is_empty() {
            "no NVIDIA GPU, and no RDMA NIC".to_string()
        } else {
            format!("{} RDMA NIC(s) ({}), but no NVIDIA GPU", rdma.len(), names.join(", "))
        };
        Finding::new("rdma-nics", Status::NotApplicable, summary)
    } else if rdma.is_empty() && unbound.is_empty() {
        Finding::new(
            "rdma-nics",
            Status::NotApplicable,
            "no RDMA-capable NIC: GPUDirect RDMA does not apply (GPUDirect Storage may)",
        )
    } else if !unbound.is_empty() {
        Finding::new(
            "rdma-nics",
            Status::Warn,
            format!(
                "{} RDMA NIC(s) [{}]; {} Mellanox function(s) without an RDMA device: {}",
                rdma.len(),
                names.join(", "),
                unbound.len(),
                unbound.join(", ")
            ),
        )
        .hint("load the RDMA driver (modprobe mlx5_ib) so the function gets an infiniband/ entry")
    } else {
        Finding::new("rdma-nics", Status::Pass, format!("{} RDMA NIC(s): {}", rdma.len(), names.join(", ")))
    };
    f.evidence(evidence)
}

pub fn topology_finding(gpus: &[&PciDevice], pairs: &[PairInfo], level: &GdrLevelSetting) -> Finding {
    if gpus.is_empty() || pairs.is_empty() {
        let why = if gpus.is_empty() { "no NVIDIA GPU" } else { "no RDMA NIC" };
        return Finding::new("topology", Status::NotApplicable, format!("{why}: no GPU–NIC pair to place"));
    }
    let mut status = Status::Pass;
    let mut evidence = Vec::new();
    let mut far = Vec::new();
    for (gi, g) in gpus.iter().enumerate() {
        let near: Vec<&PairInfo> = pairs.iter().filter(|p| p.gpu_index == gi && p.nearest).collect();
        let Some(best) = near.first() else { continue };
        let d = best.path.distance;
        let verdict = match best.nccl_gdr {
            Some(true) => "NCCL uses GDR",
            Some(false) => {
                status = status.worst(Status::Fail);
                far.push(format!("GPU {gi} ({}) nearest {} is {d}", g.bdf, best.ib_device));
                "NCCL will NOT use GDR"
            }
            None => {
                status = status.worst(Status::Unknown);
                "distance unknown"
            }
        };
        let names: Vec<&str> = near.iter().map(|p| p.ib_device.as_str()).collect();
        let via = best.path.common_bridge.as_ref().map_or(String::new(), |b| format!(" below {b}"));
        evidence.push((
            best.nccl_gdr == Some(true),
            ev(
                sys_name(&format!("bus/pci/devices/{}", g.bdf)),
                format!("GPU {gi} -> {} ({d}{via}, NUMA {}): {verdict}", names.join("/"), numa(g)),
            ),
        ));
    }
    // GPUs NCCL would not use GDR for come first.
    evidence.sort_by_key(|(ok, _)| *ok);
    let evidence: Vec<Evidence> = evidence.into_iter().map(|(_, e)| e).collect();
    let lvl = level.level;
    let summary = match status {
        Status::Pass => format!(
            "every GPU has an RDMA NIC within {lvl} (nearest: {})",
            worst_nearest(pairs).map_or("?", |d| d.as_str())
        ),
        Status::Fail => format!(
            "{} of {} GPU(s) have no RDMA NIC within {lvl}: {}",
            far.len(),
            gpus.len(),
            far.join("; ")
        ),
        _ => "GPU–NIC distance could not be determined from this tree".to_string(),
    };
    let mut f = Finding::new("topology", status, summary).evidence(evidence);
    if let Some(note) = &level.note {
        f.evidence.push(ev("env NCCL_NET_GDR_LEVEL", note.clone()));
    }
    match status {
        Status::Fail => f.hint(format!(
            "NCCL stages these GPUs' traffic through host memory ({}). Put GPU and NIC under one PCIe \
             switch, or raise NCCL_NET_GDR_LEVEL only after `gdr-trace doctor`'s ib_write_bw A/B shows \
             P2P across the CPU is fast",
            level.describe()
        )),
        Status::Unknown => f.hint("capture /sys/bus/pci/devices as symlinks (cp -a), not copies"),
        _ => f,
    }
}

fn numa(d: &PciDevice) -> String {
    d.numa_node.map_or("-1".to_string(), |n| n.to_string())
}

fn worst_nearest(pairs: &[PairInfo]) -> Option<Distance> {
    pairs.iter().filter(|p| p.nearest).map(|p| p.path.distance).max()
}
