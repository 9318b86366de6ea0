//! GPU↔GPU pairs (GPUDirect P2P): the PCIe distance class of each pair (the same
//! [`path_between`] as GPU–NIC pairs), ACS on the ports between them ([`acs::path_state`]),
//! NVLink from NVML, the `gpu-p2p` finding and the GPU × GPU matrix.
//!
//! Why it matters: without a direct path CUDA stages peer copies (`cuMemcpyPeer`) through host
//! memory, and NCCL uses its SHM transport (host memory) instead of P2P/IPC or P2P/CUMEM. NCCL's
//! default `NCCL_P2P_LEVEL` is PXB: pairs that meet only at a host bridge or farther (PHB, NODE,
//! SYS) get SHM unless NVLink connects them.

use comfy_table::Cell;
use serde::Serialize;

use super::acs::{self, AcsState};
use super::finding::{ev, Evidence, Finding, Status};
use super::fs::{sys_name, Fs};
use super::nvlink::{Nvlink, NvlinkTable};
use super::pci::{path_between, Distance, PathInfo, PciDevice};

/// One pair of GPUs, lower PCI address first.
#[derive(Debug, Clone, Serialize)]
pub struct GpuPair {
    /// PCI address of the first GPU.
    pub gpu_a: String,
    pub gpu_b: String,
    /// GPU indices in PCI bus order (nvidia-smi's, and NCCL's `[nvmlDev]`).
    pub gpu_a_index: usize,
    pub gpu_b_index: usize,
    #[serde(flatten)]
    pub path: PathInfo,
    /// ACS on the ports just below the lowest common bridge.
    pub acs: AcsState,
    pub nvlink: Nvlink,
    /// Active NVLinks that end at the other GPU (0 through NVSwitch), when NVLink is `yes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvlink_links: Option<u32>,
}

/// How P2P between a pair goes, judged from distance, ACS and NVLink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Route {
    /// NVLink, or PCIe below a switch with ACS leaving P2P alone.
    Direct,
    /// Not determinable (ACS unreadable, a tree without links).
    Unknown,
    /// ACS egress control on the ports between them.
    Egress,
    /// Meets only at the root complex or farther (PHB, NODE, SYS).
    AcrossCpu,
    /// ACS redirects P2P to the root complex.
    Redirected,
}

impl GpuPair {
    pub fn route(&self) -> Route {
        if self.nvlink == Nvlink::Yes {
            return Route::Direct;
        }
        match (self.path.distance, self.acs) {
            (Distance::Unknown, _) => Route::Unknown,
            (Distance::Phb | Distance::Node | Distance::Sys, _) => Route::AcrossCpu,
            (_, AcsState::Redirect) => Route::Redirected,
            (_, AcsState::EgressControl) => Route::Egress,
            (_, AcsState::Unknown) => Route::Unknown,
            _ => Route::Direct,
        }
    }

    /// Whether this pair is `a`/`b` in either order.
    pub fn is(&self, a: &str, b: &str) -> bool {
        (self.gpu_a == a && self.gpu_b == b) || (self.gpu_a == b && self.gpu_b == a)
    }

    /// `PIX, ACS off, NVLink unknown`
    pub fn describe(&self) -> String {
        let nv = match self.nvlink_links {
            Some(n) if n > 0 => format!("NVLink yes ({n} link(s))"),
            Some(_) => "NVLink yes (through NVSwitch)".to_string(),
            None => format!("NVLink {}", self.nvlink.as_str()),
        };
        format!("{}, ACS {}, {nv}", self.path.distance, self.acs)
    }

    /// The place P2P between them crosses, for a pair that is not direct.
    fn crossing(&self) -> String {
        match self.route() {
            Route::Redirected => {
                format!("the root complex (ACS redirect on {})", self.path.ports.join(", "))
            }
            Route::AcrossCpu => format!("the CPU ({})", self.path.distance),
            Route::Egress => format!("ports with ACS egress control ({})", self.path.ports.join(", ")),
            _ => "an unknown path".to_string(),
        }
    }
}

/// Every pair of `gpus` (bus order), with ACS read from `fs` and NVLink from `nvlink`.
pub fn all(fs: &Fs, gpus: &[&PciDevice], nvlink: &NvlinkTable) -> Vec<GpuPair> {
    let mut out = Vec::new();
    for (i, a) in gpus.iter().enumerate() {
        for (j, b) in gpus.iter().enumerate().skip(i + 1) {
            let path = path_between(a, b);
            let (acs, _) = acs::path_state(fs, &path.ports);
            let nv = nvlink.get(&a.bdf, &b.bdf);
            out.push(GpuPair {
                gpu_a: a.bdf.clone(),
                gpu_b: b.bdf.clone(),
                gpu_a_index: i,
                gpu_b_index: j,
                path,
                acs,
                nvlink: nv.nvlink,
                nvlink_links: nv.links,
            });
        }
    }
    out
}

/// The `gpu-p2p` finding: fails where ACS redirects P2P between GPUs below one switch, warns
/// where a pair crosses the CPU without NVLink, unknown where ACS cannot be read.
pub fn finding(fs: &Fs, pairs: &[GpuPair], nvlink: &NvlinkTable) -> Finding {
    if pairs.is_empty() {
        return Finding::new("gpu-p2p", Status::NotApplicable, "fewer than two GPUs: no GPU↔GPU P2P");
    }
    let mut ranked: Vec<&GpuPair> = pairs.iter().collect();
    // Worst first: by route, then the farthest.
    ranked.sort_by_key(|p| std::cmp::Reverse((p.route(), p.path.distance)));
    let worst = ranked[0].route();
    let status = match worst {
        Route::Redirected => Status::Fail,
        Route::AcrossCpu | Route::Egress => Status::Warn,
        Route::Unknown => Status::Unknown,
        Route::Direct => Status::Pass,
    };
    let affected = pairs.iter().filter(|p| p.route() != Route::Direct).count();
    let mut evidence: Vec<Evidence> = Vec::new();
    for p in &ranked {
        evidence.push(ev(
            sys_name(&format!("bus/pci/devices/{}", p.gpu_a)),
            format!(
                "GPU {} ↔ GPU {} ({}): {}{}",
                p.gpu_a_index,
                p.gpu_b_index,
                p.gpu_b,
                p.describe(),
                p.path.common_bridge.as_ref().map_or(String::new(), |b| format!(" below {b}"))
            ),
        ));
        if p.route() == Route::Redirected || p.route() == Route::Egress {
            evidence.extend(acs::path_state(fs, &p.path.ports).1);
        }
    }
    evidence.push(ev("NVML", nvlink.reason.clone()));
    let summary = match status {
        Status::Pass => {
            let nv = pairs.iter().filter(|p| p.nvlink == Nvlink::Yes).count();
            format!(
                "all {} GPU pair(s) have a direct P2P path ({} over NVLink, the rest below a PCIe switch)",
                pairs.len(),
                nv
            )
        }
        Status::Unknown => format!(
            "GPU↔GPU P2P path unknown for {affected} of {} GPU pair(s): ACS unreadable (needs root) or the tree has no device links",
            pairs.len()
        ),
        _ => {
            let p = ranked[0];
            let unless = match p.nvlink {
                Nvlink::Unknown if worst == Route::AcrossCpu => " unless NVLink connects them (NVLink unknown)",
                _ => "",
            };
            format!(
                "GPU↔GPU P2P between {} and {} crosses {}: CUDA peer copies are staged through host memory / NCCL falls back to SHM{unless}; {affected} of {} GPU pair(s) without a direct path",
                p.gpu_a,
                p.gpu_b,
                p.crossing(),
                pairs.len()
            )
        }
    };
    let f = Finding::new("gpu-p2p", status, summary).evidence(evidence);
    match worst {
        Route::Redirected => f.hint(
            "clear ACS Request/Completion Redirect on the switch ports between the GPUs (bare metal: setpci -s <port> \
             ECAP_ACS+0x6.w=0000, or the BIOS option); in a VM ACS stays on and P2P needs ATS",
        ),
        Route::AcrossCpu | Route::Egress => f.hint(
            "put GPUs that exchange data below one PCIe switch or connect them with NVLink; NCCL_P2P_LEVEL=SYS makes \
             NCCL try P2P across the CPU — measure first (CUDA's p2pBandwidthLatencyTest, P2P=Enabled vs Disabled)",
        ),
        Route::Unknown => f.hint("run as root: the extended config space needs CAP_SYS_ADMIN"),
        Route::Direct => f,
    }
}

/// One matrix cell: `NV4` (NVLink), else the distance with `!` for ACS redirect, `?` for ACS
/// unknown.
fn cell(p: &GpuPair) -> String {
    if p.nvlink == Nvlink::Yes {
        return format!("NV{}", p.nvlink_links.filter(|n| *n > 0).map_or(String::new(), |n| n.to_string()));
    }
    let mark = match p.acs {
        AcsState::Redirect => "!",
        AcsState::EgressControl | AcsState::Unknown => "?",
        _ => "",
    };
    format!("{}{mark}", p.path.distance)
}

/// GPU × GPU matrix, like `nvidia-smi topo -m`'s GPU columns; `None` below two GPUs.
pub fn render_matrix(gpus: &[(usize, &str)], pairs: &[GpuPair], nvlink_reason: &str) -> Option<String> {
    if pairs.is_empty() {
        return None;
    }
    let mut t = crate::term::table();
    let mut header = vec![Cell::new("GPU"), Cell::new("PCI")];
    header.extend(gpus.iter().map(|(i, _)| Cell::new(format!("GPU {i}"))));
    t.set_header(header);
    for (i, bdf) in gpus {
        let mut row = vec![Cell::new(format!("GPU {i}")), Cell::new(bdf)];
        for (j, _) in gpus {
            let text = if i == j {
                "X".to_string()
            } else {
                pairs
                    .iter()
                    .find(|p| (p.gpu_a_index, p.gpu_b_index) == (*i.min(j), *i.max(j)))
                    .map_or("?".to_string(), cell)
            };
            row.push(Cell::new(text));
        }
        t.add_row(row);
    }
    let nv = if pairs.iter().any(|p| p.nvlink != Nvlink::Unknown) {
        format!("from {nvlink_reason}")
    } else {
        format!("unknown — {nvlink_reason}")
    };
    Some(format!("{}\n{}\n", crate::term::render(&t), crate::term::wrap(&format!("NVLink: {nv}"), "    ")))
}

#[cfg(test)]
mod tests;
