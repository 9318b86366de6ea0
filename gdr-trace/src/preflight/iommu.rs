//! IOMMU: units (/sys/class/iommu), group types (/sys/kernel/iommu_groups/N/type), the kernel
//! command line, and whether that suits bare-metal GPUDirect RDMA.

use std::collections::{BTreeMap, BTreeSet};

use super::finding::{ev, Finding, Status};
use super::fs::{proc_name, sys_name, Fs};
use super::pci::{bdf_key, PciDevice};

/// One IOMMU group.
#[derive(Debug, Clone)]
pub struct Group {
    pub id: String,
    /// `identity` (passthrough), `DMA`, `DMA-FQ`, `blocked`, `unmanaged`...; `None` before 5.11.
    pub kind: Option<String>,
    pub devices: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct IommuState {
    pub units: Vec<String>,
    pub groups: Vec<Group>,
    pub cmdline: Option<String>,
}

impl IommuState {
    pub fn active(&self) -> bool {
        !self.units.is_empty() || !self.groups.is_empty()
    }

    /// The IOMMU options on the kernel command line.
    pub fn cmdline_options(&self) -> Vec<String> {
        self.cmdline
            .as_deref()
            .unwrap_or("")
            .split_whitespace()
            .filter(|t| {
                ["iommu=", "intel_iommu=", "amd_iommu=", "iommu.passthrough=", "iommu.strict="]
                    .iter()
                    .any(|p| t.starts_with(p))
            })
            .map(str::to_string)
            .collect()
    }

    fn cmdline_passthrough(&self) -> bool {
        self.cmdline_options().iter().any(|t| t == "iommu=pt" || t == "iommu.passthrough=1")
    }
}

pub fn read(fs: &Fs) -> IommuState {
    let mut groups: Vec<Group> = fs
        .list_sys("kernel/iommu_groups")
        .into_iter()
        .map(|id| Group {
            kind: fs.sys_opt(&format!("kernel/iommu_groups/{id}/type")),
            devices: fs.list_sys(&format!("kernel/iommu_groups/{id}/devices")),
            id,
        })
        .collect();
    groups.sort_by_key(|g| (g.id.parse::<u64>().unwrap_or(u64::MAX), g.id.clone()));
    IommuState { units: fs.list_sys("class/iommu"), groups, cmdline: fs.proc_opt("cmdline") }
}

pub fn finding(st: &IommuState, gpus: &[&PciDevice], nics: &[&PciDevice]) -> Finding {
    let opts = st.cmdline_options();
    let mut evidence = vec![
        ev(
            sys_name("class/iommu"),
            if st.units.is_empty() { "no IOMMU units".to_string() } else { st.units.join(" ") },
        ),
        ev(
            proc_name("cmdline"),
            if opts.is_empty() { "no IOMMU options".to_string() } else { opts.join(" ") },
        ),
    ];
    let state = if st.active() {
        format!("IOMMU on ({} unit(s), {} group(s))", st.units.len(), st.groups.len())
    } else {
        "IOMMU off".to_string()
    };
    if gpus.is_empty() {
        return Finding::new("iommu", Status::NotApplicable, format!("no NVIDIA GPU ({state})"))
            .evidence(evidence);
    }
    // Which group holds each GPU / RDMA NIC.
    let mut label: BTreeMap<&str, String> = BTreeMap::new();
    for (i, g) in gpus.iter().enumerate() {
        label.insert(g.bdf.as_str(), format!("GPU {i}"));
    }
    for n in nics.iter().filter(|n| n.is_rdma()) {
        label.insert(n.bdf.as_str(), n.nic_name());
    }
    let mut translated = Vec::new();
    let mut other = Vec::new();
    let mut untyped = 0;
    let mut identity = 0;
    for g in &st.groups {
        let mut members: Vec<&String> = g.devices.iter().filter(|d| label.contains_key(d.as_str())).collect();
        if members.is_empty() {
            continue;
        }
        members.sort_by_key(|d| bdf_key(d));
        let names: Vec<String> = members.iter().map(|d| format!("{d} {}", label[d.as_str()])).collect();
        let kind = g.kind.clone().unwrap_or_else(|| "(no type file)".to_string());
        evidence.push(ev(
            sys_name(&format!("kernel/iommu_groups/{}/type", g.id)),
            format!("{kind}: {}", names.join(", ")),
        ));
        match g.kind.as_deref() {
            Some("identity") => identity += 1,
            Some("DMA") | Some("DMA-FQ") => translated.push((g.id.clone(), kind.clone())),
            Some(_) => other.push(format!("group {} ({kind})", g.id)),
            None => untyped += 1,
        }
    }
    let f = if !st.active() {
        Finding::new("iommu", Status::Pass, "IOMMU off: the NIC reaches GPU BARs at their bus addresses")
    } else if !translated.is_empty() {
        Finding::new(
            "iommu",
            Status::Fail,
            format!(
                "IOMMU translates DMA for {} GPU/NIC group(s) ({}): peer-to-peer DMA between GPU and NIC is remapped or blocked",
                translated.len(),
                translated.iter().map(|(_, k)| k.as_str()).collect::<BTreeSet<_>>().into_iter().collect::<Vec<_>>().join(", ")
            ),
        )
        .hint("on bare metal boot with iommu=pt (intel_iommu=on iommu=pt / amd_iommu=on iommu=pt) or disable the IOMMU; inside a VM follow the platform's GPUDirect guide (ATS, ACS)")
    } else if !other.is_empty() {
        Finding::new(
            "iommu",
            Status::Warn,
            format!("GPU/NIC groups in unusual IOMMU modes: {} (bound to VFIO?)", other.join(", ")),
        )
    } else if untyped > 0 && !st.cmdline_passthrough() {
        Finding::new(
            "iommu",
            Status::Unknown,
            "IOMMU on, group types not exposed (kernel < 5.11) and no iommu=pt on the command line",
        )
        .hint("add iommu=pt to the kernel command line for GPUDirect RDMA")
    } else if identity + untyped == 0 {
        Finding::new("iommu", Status::Pass, format!("{state}; no GPU or RDMA NIC is in an IOMMU group"))
    } else {
        Finding::new(
            "iommu",
            Status::Pass,
            format!("IOMMU in passthrough (identity) for all {} GPU/NIC group(s)", identity + untyped),
        )
    };
    f.evidence(evidence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmdline_options_are_picked_out() {
        let st = IommuState {
            cmdline: Some("BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt quiet".into()),
            ..Default::default()
        };
        assert_eq!(st.cmdline_options(), vec!["intel_iommu=on", "iommu=pt"]);
        assert!(st.cmdline_passthrough());
        assert!(!st.active());
    }
}
