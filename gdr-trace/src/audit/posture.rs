//! The machine's peer-to-peer posture, rated for several tenants: `check`'s ACS and IOMMU facts
//! (`crate::preflight`) read the other way round. ACS off on the switch ports between GPUs and
//! NICs, and an IOMMU that is off or in passthrough, are what GPUDirect RDMA wants; they are
//! also what lets one tenant's device reach another tenant's memory. A single-tenant machine
//! trades that knowingly; a multi-tenant or virtualized one must not.

use serde::{Deserialize, Serialize};

use super::severity::Severity;
use crate::preflight::{self, iommu, Fs, Options, PreflightReport, Status};

/// One thing read, and what it said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub path: String,
    pub value: String,
}

/// A posture fact, with its severity on a single-tenant and on a multi-tenant machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostureItem {
    pub id: String,
    pub single_tenant: Severity,
    pub multi_tenant: Severity,
    pub summary: String,
    pub evidence: Vec<Evidence>,
    pub hint: Option<String>,
}

/// The machine posture (kept in recordings' headers, so `report` rates what was recorded).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Posture {
    pub items: Vec<PostureItem>,
}

impl Posture {
    /// Whether it leaves peer-to-peer between devices unchecked (ACS off on a P2P path, IOMMU
    /// off or passthrough).
    pub fn p2p_open(&self) -> bool {
        self.items.iter().any(|i| matches!(i.id.as_str(), "acs-disabled" | "iommu-off" | "iommu-passthrough"))
    }

    /// Reads the posture from sysfs/procfs (the live machine, or a captured tree).
    pub fn read(opts: &Options) -> Posture {
        let report = match preflight::run(opts) {
            Ok(r) => r,
            Err(e) => {
                return Posture {
                    items: vec![item(
                        "posture-unknown",
                        Severity::Low,
                        Severity::Low,
                        format!("{e}"),
                        vec![],
                    )],
                }
            }
        };
        let state = Fs::new(&opts.sysfs_root, &opts.proc_root).map(|fs| iommu::read(&fs)).ok();
        from_report(&report, state.as_ref())
    }
}

fn item(
    id: &str,
    single: Severity,
    multi: Severity,
    summary: String,
    evidence: Vec<Evidence>,
) -> PostureItem {
    PostureItem {
        id: id.to_string(),
        single_tenant: single,
        multi_tenant: multi,
        summary,
        evidence,
        hint: None,
    }
}

/// Rates a preflight report (pure; `iommu` is the IOMMU state it was made from).
pub fn from_report(report: &PreflightReport, iommu: Option<&iommu::IommuState>) -> Posture {
    let mut items = Vec::new();
    if report.gpus.is_empty() {
        return Posture { items };
    }
    if let Some(acs) = report.finding("acs") {
        let evidence: Vec<Evidence> =
            acs.evidence.iter().map(|e| Evidence { path: e.path.clone(), value: e.value.clone() }).collect();
        let ports: std::collections::BTreeSet<&str> = report
            .pairs
            .iter()
            .filter(|p| p.nearest)
            .flat_map(|p| p.path.ports.iter().map(String::as_str))
            .collect();
        let on_path = !ports.is_empty();
        let it = match acs.status {
            Status::Pass if on_path => Some(
                item(
                    "acs-disabled",
                    Severity::Medium,
                    Severity::High,
                    format!(
                        "ACS leaves peer-to-peer open on {} switch port(s) between GPUs and NICs: devices \
                         behind one switch reach each other's memory without the IOMMU seeing it",
                        ports.len()
                    ),
                    evidence,
                )
                .hinted(
                    "right for GPUDirect on a single-tenant machine; in multi-tenant or virtualized \
                     machines keep ACS on (and use ATS on the NIC)",
                ),
            ),
            Status::Fail | Status::Warn => Some(item(
                "acs-enabled",
                Severity::Info,
                Severity::Info,
                format!("ACS redirects or blocks peer-to-peer: devices are isolated ({})", acs.summary),
                evidence,
            )),
            Status::Unknown => Some(
                item("acs-unknown", Severity::Low, Severity::Medium, acs.summary.clone(), evidence)
                    .hinted("run as root: ACS lives in the extended config space"),
            ),
            _ => None,
        };
        items.extend(it);
    }
    if let Some(st) = iommu {
        items.push(iommu_item(report, st));
    }
    items.extend(report.finding("peer-mapping").and_then(peer_mapping_item));
    Posture { items }
}

/// nvidia.ko's PeerMappingOverride: set, any process may map a device's I/O memory (a NIC's
/// doorbell page, another tenant's device) into the GPU; what GPU-handled IBGDA needs.
fn peer_mapping_item(f: &crate::preflight::Finding) -> Option<PostureItem> {
    let evidence: Vec<Evidence> =
        f.evidence.iter().map(|e| Evidence { path: e.path.clone(), value: e.value.clone() }).collect();
    let it = match f.status {
        Status::Pass => item(
            "peer-mapping-override",
            Severity::Low,
            Severity::High,
            "nvidia.ko's PeerMappingOverride is set: any process, not only CAP_SYS_ADMIN, may map PCIe I/O memory              (NIC doorbell pages, other devices' BARs) into a GPU"
                .into(),
            evidence,
        )
        .hinted(
            "needed for GPU-handled IBGDA / GPU-initiated networking; on a shared machine a tenant's GPU can then              reach devices mapped into its address space: keep it off where tenants share a node",
        ),
        Status::Warn | Status::NotApplicable if f.summary.contains("not set") => item(
            "peer-mapping-default",
            Severity::Info,
            Severity::Info,
            "nvidia.ko's PeerMappingOverride is not set: only CAP_SYS_ADMIN processes map I/O memory into a GPU".into(),
            evidence,
        ),
        _ => return None,
    };
    Some(it)
}

fn iommu_item(report: &PreflightReport, st: &iommu::IommuState) -> PostureItem {
    let ours: Vec<&str> = report
        .gpus
        .iter()
        .map(|g| g.bdf.as_str())
        .chain(report.nics.iter().filter(|n| n.rdma).map(|n| n.bdf.as_str()))
        .collect();
    let mut evidence = vec![Evidence { path: "/proc/cmdline".into(), value: st.cmdline_options().join(" ") }];
    let mut kinds = Vec::new();
    for g in st.groups.iter().filter(|g| g.devices.iter().any(|d| ours.contains(&d.as_str()))) {
        let kind = g.kind.clone().unwrap_or_else(|| "(no type file)".into());
        evidence
            .push(Evidence { path: format!("/sys/kernel/iommu_groups/{}/type", g.id), value: kind.clone() });
        kinds.push(kind);
    }
    let pt = st.cmdline_options().iter().any(|o| o == "iommu=pt" || o == "iommu.passthrough=1");
    let hint = "right for GPUDirect on bare metal with one tenant; give tenants' devices translated \
                IOMMU domains (or VMs with ATS) on shared machines";
    if !st.active() {
        item(
            "iommu-off",
            Severity::Medium,
            Severity::High,
            "IOMMU off: every device can DMA anywhere".into(),
            evidence,
        )
        .hinted(hint)
    } else if kinds.iter().any(|k| k == "DMA" || k == "DMA-FQ") {
        item(
            "iommu-translating",
            Severity::Info,
            Severity::Info,
            "the IOMMU translates DMA for the GPU/NIC groups: devices are confined to their mappings".into(),
            evidence,
        )
    } else if kinds.iter().any(|k| k == "identity") || pt {
        item(
            "iommu-passthrough",
            Severity::Medium,
            Severity::High,
            "IOMMU in passthrough (identity) for the GPUs and NICs: their DMA is not confined".into(),
            evidence,
        )
        .hinted(hint)
    } else {
        item(
            "iommu-unknown",
            Severity::Low,
            Severity::Medium,
            "IOMMU on, mode of the GPU/NIC groups unknown".into(),
            evidence,
        )
    }
}

impl PostureItem {
    fn hinted(mut self, hint: &str) -> Self {
        self.hint = Some(hint.to_string());
        self
    }
}
