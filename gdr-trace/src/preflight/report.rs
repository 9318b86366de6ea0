//! The preflight report: its JSON shape and its tables for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use comfy_table::Cell;
use serde::Serialize;

use super::finding::{Finding, Status};
use super::gpu_pairs::{self, GpuPair};
use super::level::GdrLevelSetting;
use super::options::Options;
use super::pci::PciDevice;
pub use super::topology::PairInfo;
use crate::term;

/// JSON schema id; bump on incompatible changes.
pub const SCHEMA: &str = "gdr-trace.check/1";

#[derive(Debug, Clone, Serialize)]
pub struct GpuInfo {
    pub index: usize,
    pub bdf: String,
    /// `10de:2330`
    pub id: String,
    pub model: Option<String>,
    pub numa_node: Option<u32>,
    pub host_bridge: Option<String>,
    pub bridges: Vec<String>,
    pub driver: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NicInfo {
    pub bdf: String,
    pub id: String,
    pub ib_devices: Vec<String>,
    pub net_devices: Vec<String>,
    pub rdma: bool,
    pub numa_node: Option<u32>,
    pub host_bridge: Option<String>,
    pub bridges: Vec<String>,
    pub driver: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PreflightReport {
    pub schema: &'static str,
    pub sysfs_root: String,
    pub proc_root: String,
    pub nccl_net_gdr_level: GdrLevelSetting,
    /// The worst finding status (`not-applicable` when nothing applies).
    pub status: Status,
    /// 1 when a finding failed, else 0 (what `check` exits with).
    pub exit_code: u8,
    /// Findings per status.
    pub counts: BTreeMap<&'static str, usize>,
    pub gpus: Vec<GpuInfo>,
    pub nics: Vec<NicInfo>,
    /// Every GPU × RDMA NIC pair, GPU-major.
    pub pairs: Vec<PairInfo>,
    /// Every GPU × GPU pair (GPUDirect P2P), lower index first.
    pub gpu_pairs: Vec<GpuPair>,
    pub findings: Vec<Finding>,
}

impl PreflightReport {
    pub fn finding(&self, id: &str) -> Option<&Finding> {
        self.findings.iter().find(|f| f.id == id)
    }

    /// The pairs of one GPU, nearest first.
    pub fn pairs_of_gpu(&self, index: usize) -> Vec<&PairInfo> {
        let mut v: Vec<&PairInfo> = self.pairs.iter().filter(|p| p.gpu_index == index).collect();
        v.sort_by_key(|p| p.path.distance);
        v
    }

    /// The NIC owning an RDMA device name.
    pub fn nic_by_ib(&self, ib: &str) -> Option<&NicInfo> {
        self.nics.iter().find(|n| n.ib_devices.iter().any(|d| d == ib))
    }
}

pub fn build(
    opts: &Options,
    gpus: &[&PciDevice],
    nics: &[&PciDevice],
    pairs: Vec<PairInfo>,
    gpu_pairs: Vec<GpuPair>,
    findings: Vec<Finding>,
) -> PreflightReport {
    let status = findings.iter().fold(Status::NotApplicable, |s, f| s.worst(f.status));
    let mut counts = BTreeMap::new();
    for s in [Status::Pass, Status::Warn, Status::Fail, Status::NotApplicable, Status::Unknown] {
        counts.insert(s.as_str(), findings.iter().filter(|f| f.status == s).count());
    }
    PreflightReport {
        schema: SCHEMA,
        sysfs_root: opts.sysfs_root.display().to_string(),
        proc_root: opts.proc_root.display().to_string(),
        nccl_net_gdr_level: opts.gdr_level.clone(),
        status,
        exit_code: u8::from(status == Status::Fail),
        counts,
        gpus: gpus
            .iter()
            .enumerate()
            .map(|(index, g)| GpuInfo {
                index,
                bdf: g.bdf.clone(),
                id: format!("{:04x}:{:04x}", g.vendor, g.device),
                model: g.model.clone(),
                numa_node: g.numa_node,
                host_bridge: g.host_bridge.clone(),
                bridges: g.bridges.clone(),
                driver: g.driver.clone(),
            })
            .collect(),
        nics: nics
            .iter()
            .map(|n| NicInfo {
                bdf: n.bdf.clone(),
                id: format!("{:04x}:{:04x}", n.vendor, n.device),
                ib_devices: n.ib_devices.clone(),
                net_devices: n.net_devices.clone(),
                rdma: n.is_rdma(),
                numa_node: n.numa_node,
                host_bridge: n.host_bridge.clone(),
                bridges: n.bridges.clone(),
                driver: n.driver.clone(),
            })
            .collect(),
        pairs,
        gpu_pairs,
        findings,
    }
}

fn numa(n: Option<u32>) -> String {
    n.map_or("-1".to_string(), |n| n.to_string())
}

/// GPU × NIC distance matrix (like `nvidia-smi topo -m`), `*` marking each GPU's nearest NIC.
pub fn render_matrix(r: &PreflightReport) -> Option<String> {
    let rdma: Vec<&NicInfo> = r.nics.iter().filter(|n| n.rdma).collect();
    if r.gpus.is_empty() || rdma.is_empty() {
        return None;
    }
    let mut t = crate::term::table();
    let mut header = vec![Cell::new("GPU"), Cell::new("PCI"), Cell::new("NUMA")];
    header.extend(rdma.iter().map(|n| Cell::new(n.ib_devices.first().cloned().unwrap_or_default())));
    header.push(Cell::new("NCCL GDR"));
    t.set_header(header);
    for g in &r.gpus {
        let mut row =
            vec![Cell::new(format!("GPU {}", g.index)), Cell::new(&g.bdf), Cell::new(numa(g.numa_node))];
        let mut gdr = String::from("-");
        for n in &rdma {
            let Some(p) = r.pairs.iter().find(|p| p.gpu_index == g.index && p.nic == n.bdf) else {
                row.push(Cell::new("?"));
                continue;
            };
            let mark = if p.nearest { "*" } else { "" };
            row.push(Cell::new(format!("{}{mark}", p.path.distance)));
            if p.nearest && gdr == "-" {
                gdr = match p.nccl_gdr {
                    Some(true) => format!("yes ({})", p.ib_device),
                    Some(false) => format!("NO ({} is {})", p.ib_device, p.path.distance),
                    None => "unknown".to_string(),
                };
            }
        }
        row.push(Cell::new(gdr));
        t.add_row(row);
    }
    let nics: Vec<String> = rdma
        .iter()
        .map(|n| format!("{}={} NUMA {}", n.ib_devices.join(","), n.bdf, numa(n.numa_node)))
        .collect();
    Some(format!(
        "{}\n{}\n",
        crate::term::render(&t),
        term::wrap(&format!("NICs: {}", nics.join("; ")), "    ")
    ))
}

/// The findings table; with `verbose`, each finding's evidence under it.
pub fn render_findings(r: &PreflightReport, verbose: bool) -> String {
    let mut t = crate::term::table();
    t.set_header(vec!["check", "status", "finding"]);
    for f in &r.findings {
        let mut text = f.summary.clone();
        if let Some(h) = &f.hint {
            let _ = write!(text, "\nfix: {h}");
        }
        if verbose {
            for e in &f.evidence {
                let _ = write!(text, "\n  {} = {}", e.path, e.value);
            }
        }
        t.add_row(vec![Cell::new(&f.id), Cell::new(f.status.as_str()), Cell::new(text)]);
    }
    crate::term::render(&t)
}

/// The whole human report.
pub fn render(r: &PreflightReport, verbose: bool) -> String {
    // Lines outside the tables are wrapped to the width too.
    let para = |s: String| format!("{}\n", term::wrap(&s, "    "));
    let mut out = para(format!(
        "gdr-trace check: sysfs {}, procfs {}, {}",
        r.sysfs_root,
        r.proc_root,
        r.nccl_net_gdr_level.describe()
    ));
    if let Some(note) = &r.nccl_net_gdr_level.note {
        out.push_str(&para(format!("note: {note}")));
    }
    if r.gpus.is_empty() {
        out.push_str("No NVIDIA GPU on this machine: GPUDirect checks do not apply.\n");
    }
    if let Some(m) = render_matrix(r) {
        out.push('\n');
        out.push_str(&para("GPU <-> RDMA NIC distance (PIX < PXB < PHB < NODE < SYS; * = nearest)".into()));
        out.push_str(&m);
    }
    let gpus: Vec<(usize, &str)> = r.gpus.iter().map(|g| (g.index, g.bdf.as_str())).collect();
    let nvml = r.finding("gpu-p2p").and_then(|f| f.evidence.iter().find(|e| e.path == "NVML"));
    if let Some(m) = gpu_pairs::render_matrix(&gpus, &r.gpu_pairs, nvml.map_or("", |e| e.value.as_str())) {
        out.push('\n');
        out.push_str(&para(
            "GPU <-> GPU P2P (PIX < PXB < PHB < NODE < SYS; ! = ACS redirects P2P, ? = ACS unknown, NV = NVLink)"
                .into(),
        ));
        out.push_str(&m);
    }
    out.push('\n');
    out.push_str(&render_findings(r, verbose));
    let c = &r.counts;
    let _ = writeln!(
        out,
        "\n{} checks: {} pass, {} warn, {} fail, {} unknown, {} not-applicable -> exit {}",
        r.findings.len(),
        c["pass"],
        c["warn"],
        c["fail"],
        c["unknown"],
        c["not-applicable"],
        r.exit_code
    );
    out
}
