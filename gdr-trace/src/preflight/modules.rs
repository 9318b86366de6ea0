//! Kernel modules: the NVIDIA driver, nvidia-peermem, MLNX_OFED's peer-memory API, the DMA-BUF
//! path, and their versions.

use super::finding::{ev, Evidence, Finding, Status};
use super::fs::{proc_name, sys_name, Fs};
use super::pci::PciDevice;

/// The paths NCCL itself probes (access()) to decide that peer memory works.
pub const NCCL_PEERMEM_PATHS: [&str; 3] = [
    "kernel/mm/memory_peers/nv_mem/version",
    "kernel/mm/memory_peers/nv_mem_nc/version",
    "module/nvidia_peermem/version",
];

/// One MLNX_OFED peer-memory client (/sys/kernel/mm/memory_peers/<name>).
#[derive(Debug, Clone)]
pub struct MemoryPeer {
    pub name: String,
    pub fields: Vec<(String, String)>,
}

/// What sysfs/procfs say about the modules.
#[derive(Debug, Clone, Default)]
pub struct Modules {
    pub nvidia_loaded: bool,
    pub nvidia_version: Option<String>,
    /// First line of /proc/driver/nvidia/version.
    pub nvrm: Option<String>,
    pub peermem_loaded: bool,
    pub peermem_version: Option<String>,
    pub peermem_params: Vec<(String, String)>,
    pub memory_peers_dir: bool,
    pub memory_peers: Vec<MemoryPeer>,
    /// NCCL's probe paths and whether each exists.
    pub nccl_paths: Vec<(String, bool)>,
    pub kernel_release: Option<String>,
    /// `version` files of the RDMA stack's modules (MLNX_OFED sets them; inbox modules don't).
    pub rdma_versions: Vec<(String, String)>,
    pub nvidia_fs_loaded: bool,
    pub nvidia_fs_version: Option<String>,
    /// The NVIDIA driver branch and the nvidia-peermem flow expected there (docs/drivers.md).
    pub driver: Option<crate::drivers::Detected>,
}

impl Modules {
    /// `Some(true)` for the open kernel module, `Some(false)` for the proprietary one.
    pub fn open_module(&self) -> Option<bool> {
        let l = self.nvrm.as_deref()?;
        if l.contains("Open Kernel Module") {
            Some(true)
        } else if l.contains("Kernel Module") {
            Some(false)
        } else {
            None
        }
    }

    /// Whether the DMA-BUF GDR path is possible: kernel >= 5.12, open module, driver >= 515.
    /// `None` when something needed is unknown. Also returns the reasons, for evidence.
    pub fn dmabuf_possible(&self) -> (Option<bool>, Vec<Evidence>) {
        let kernel = self.kernel_release.as_deref().and_then(major_minor);
        let driver = self.nvidia_version.as_deref().and_then(|v| v.split('.').next()?.parse::<u32>().ok());
        let open = self.open_module();
        let evidence = vec![
            ev(
                proc_name("sys/kernel/osrelease"),
                self.kernel_release.clone().unwrap_or_else(|| "missing".into()),
            ),
            ev(proc_name("driver/nvidia/version"), self.nvrm.clone().unwrap_or_else(|| "missing".into())),
        ];
        let parts = [kernel.map(|k| k >= (5, 12)), open, driver.map(|d| d >= 515)];
        let verdict = if parts.contains(&Some(false)) {
            Some(false)
        } else if parts.contains(&None) {
            None
        } else {
            Some(true)
        };
        (verdict, evidence)
    }
}

fn major_minor(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Reads module state; unreadable files count as absent.
pub fn read(fs: &Fs) -> Modules {
    let mut peers = Vec::new();
    for name in fs.list_sys("kernel/mm/memory_peers") {
        let dir = format!("kernel/mm/memory_peers/{name}");
        let fields = fs
            .list_sys(&dir)
            .into_iter()
            .filter_map(|f| Some((f.clone(), fs.sys_opt(&format!("{dir}/{f}"))?)))
            .collect();
        peers.push(MemoryPeer { name, fields });
    }
    let params: Vec<(String, String)> = fs
        .list_sys("module/nvidia_peermem/parameters")
        .into_iter()
        .filter_map(|p| Some((p.clone(), fs.sys_opt(&format!("module/nvidia_peermem/parameters/{p}"))?)))
        .collect();
    let pas = params
        .iter()
        .find(|(k, _)| k == "persistent_api_support")
        .and_then(|(_, v)| v.trim().parse::<i32>().ok());
    let rdma_versions = ["mlx5_core", "mlx5_ib", "ib_core", "mlx_compat"]
        .iter()
        .filter_map(|m| {
            let rel = format!("module/{m}/version");
            Some((sys_name(&rel), fs.sys_opt(&rel)?))
        })
        .collect();
    Modules {
        nvidia_loaded: fs.sys_exists("module/nvidia"),
        nvidia_version: fs.sys_opt("module/nvidia/version"),
        nvrm: fs
            .proc_opt("driver/nvidia/version")
            .and_then(|v| v.lines().next().map(|l| l.trim().to_string())),
        peermem_loaded: fs.sys_exists("module/nvidia_peermem"),
        peermem_version: fs.sys_opt("module/nvidia_peermem/version"),
        peermem_params: params,
        memory_peers_dir: fs.sys_exists("kernel/mm/memory_peers"),
        memory_peers: peers,
        nccl_paths: NCCL_PEERMEM_PATHS.iter().map(|p| (sys_name(p), fs.sys_exists(p))).collect(),
        kernel_release: fs.proc_opt("sys/kernel/osrelease"),
        rdma_versions,
        nvidia_fs_loaded: fs.sys_exists("module/nvidia_fs"),
        nvidia_fs_version: fs.sys_opt("module/nvidia_fs/version"),
        driver: Some(crate::drivers::detect(&fs.sys(""), &fs.proc(""), pas)),
    }
}

pub fn driver_finding(m: &Modules, gpus: &[&PciDevice]) -> Finding {
    let evidence = vec![
        ev(sys_name("module/nvidia/version"), m.nvidia_version.clone().unwrap_or_else(|| "missing".into())),
        ev(proc_name("driver/nvidia/version"), m.nvrm.clone().unwrap_or_else(|| "missing".into())),
    ];
    let f = if gpus.is_empty() {
        Finding::new("driver", Status::NotApplicable, "no NVIDIA GPU")
    } else if !m.nvidia_loaded {
        Finding::new("driver", Status::Fail, "the NVIDIA driver (nvidia.ko) is not loaded")
            .hint("install/load the NVIDIA driver (modprobe nvidia)")
    } else {
        let kind = match m.open_module() {
            Some(true) => " (open kernel module)",
            Some(false) => " (proprietary kernel module)",
            None => "",
        };
        Finding::new(
            "driver",
            Status::Pass,
            format!("NVIDIA driver {}{kind}", m.nvidia_version.as_deref().unwrap_or("(version unknown)")),
        )
    };
    f.evidence(evidence)
}

/// `peermem`, `memory-peers` and `dmabuf`.
pub fn gdr_memory_findings(m: &Modules, gpus: &[&PciDevice], nics: &[&PciDevice]) -> Vec<Finding> {
    if gpus.is_empty() || !nics.iter().any(|n| n.is_rdma()) {
        let why = if gpus.is_empty() { "no NVIDIA GPU" } else { "no RDMA NIC" };
        let mut peermem = Finding::new("peermem", Status::NotApplicable, why);
        if m.peermem_loaded {
            peermem = peermem.with(sys_name("module/nvidia_peermem"), "loaded");
        }
        return vec![
            peermem,
            Finding::new("memory-peers", Status::NotApplicable, why),
            Finding::new("dmabuf", Status::NotApplicable, why),
        ];
    }
    let (dmabuf, dmabuf_ev) = m.dmabuf_possible();

    let mut pev: Vec<Evidence> =
        m.nccl_paths.iter().map(|(p, e)| ev(p.clone(), if *e { "present" } else { "absent" })).collect();
    for (k, v) in &m.peermem_params {
        pev.push(ev(sys_name(&format!("module/nvidia_peermem/parameters/{k}")), v.clone()));
    }
    let nccl_sees = m.nccl_paths.iter().any(|(_, e)| *e);
    let peermem = if !m.peermem_loaded && nccl_sees {
        Finding::new(
            "peermem",
            Status::Pass,
            "peer-memory client nv_mem registered (legacy nv_peer_mem); NCCL will find it",
        )
    } else if m.peermem_loaded {
        let params: Vec<String> = m.peermem_params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Finding::new(
            "peermem",
            Status::Pass,
            format!(
                "nvidia-peermem {} loaded{}",
                m.peermem_version.as_deref().unwrap_or("(version unknown)"),
                if params.is_empty() { String::new() } else { format!(" ({})", params.join(", ")) }
            ),
        )
    } else if dmabuf == Some(true) {
        Finding::new("peermem", Status::Warn, "nvidia-peermem not loaded; NCCL >= 2.19 can use DMA-BUF instead")
            .hint("modprobe nvidia-peermem if the RDMA stack is MLNX_OFED and NCCL is older than 2.19 (or NCCL_DMABUF_ENABLE=0)")
    } else {
        Finding::new("peermem", Status::Fail, "nvidia-peermem not loaded and no DMA-BUF path: GPU memory cannot be registered with the NIC; NCCL stages through host memory")
            .hint("modprobe nvidia-peermem (needs MLNX_OFED/DOCA-OFED ib_core), or use the open kernel module with kernel >= 5.12 for DMA-BUF")
    };

    let mut mev = Vec::new();
    for p in &m.memory_peers {
        for (k, v) in &p.fields {
            mev.push(ev(sys_name(&format!("kernel/mm/memory_peers/{}/{k}", p.name)), v.clone()));
        }
    }
    let nv = m.memory_peers.iter().find(|p| p.name == "nv_mem");
    let memory_peers = match (m.memory_peers_dir, nv) {
        (_, Some(p)) => {
            let get = |k: &str| p.fields.iter().find(|(f, _)| f == k).map(|(_, v)| v.as_str()).unwrap_or("?");
            Finding::new(
                "memory-peers",
                Status::Pass,
                format!(
                    "peer-memory client nv_mem registered: {} MRs, {} registered so far",
                    get("num_alloc_mrs"),
                    get("num_reg_bytes")
                        .parse::<u64>()
                        .map_or("? bytes".to_string(), super::finding::human_bytes)
                ),
            )
        }
        (true, None) if m.peermem_loaded => Finding::new(
            "memory-peers",
            Status::Warn,
            "nvidia_peermem is loaded but no nv_mem client is registered with ib_core",
        )
        .hint("reload nvidia-peermem after the RDMA stack (an OFED upgrade unloads the client)"),
        (true, None) => Finding::new(
            "memory-peers",
            Status::NotApplicable,
            "peer-memory API present (MLNX_OFED ib_core), no nv_mem client",
        ),
        (false, None) => Finding::new(
            "memory-peers",
            Status::NotApplicable,
            "no /sys/kernel/mm/memory_peers: inbox RDMA core, no peer-memory API (DMA-BUF only)",
        ),
    }
    .evidence(mev);

    let dmabuf_f = match dmabuf {
        Some(true) => Finding::new(
            "dmabuf",
            Status::Pass,
            "DMA-BUF GPUDirect RDMA possible (kernel >= 5.12, open kernel module, driver >= 515)",
        ),
        Some(false) if m.peermem_loaded => Finding::new(
            "dmabuf",
            Status::NotApplicable,
            "DMA-BUF path not available, not needed: nvidia-peermem is loaded",
        ),
        Some(false) => Finding::new(
            "dmabuf",
            Status::Fail,
            "DMA-BUF path not available (needs kernel >= 5.12, the open kernel module, driver >= 515)",
        )
        .hint("switch to the NVIDIA open kernel module (and kernel >= 5.12), or load nvidia-peermem"),
        None => Finding::new(
            "dmabuf",
            Status::Unknown,
            "cannot tell whether the DMA-BUF path is possible (kernel or driver version unreadable)",
        ),
    }
    .evidence(dmabuf_ev);
    vec![peermem.evidence(pev), memory_peers, dmabuf_f]
}

pub fn versions_finding(m: &Modules, gpus: &[&PciDevice]) -> Finding {
    let mut evidence = vec![];
    let mut push = |p: String, v: &Option<String>| {
        if let Some(v) = v {
            evidence.push(ev(p, v.clone()));
        }
    };
    push(sys_name("module/nvidia/version"), &m.nvidia_version);
    push(sys_name("module/nvidia_peermem/version"), &m.peermem_version);
    push(sys_name("module/nvidia_fs/version"), &m.nvidia_fs_version);
    evidence.extend(m.rdma_versions.iter().map(|(p, v)| ev(p.clone(), v.clone())));
    let rdma = m
        .rdma_versions
        .iter()
        .find(|(p, _)| p.contains("mlx5_core"))
        .map_or("inbox RDMA stack (no module version)".to_string(), |(_, v)| {
            format!("MLNX_OFED mlx5_core {v}")
        });
    if gpus.is_empty() {
        return Finding::new("versions", Status::NotApplicable, "no NVIDIA GPU").evidence(evidence);
    }
    let branch = m.driver.as_ref().map(branch_note).unwrap_or_default();
    if let Some(d) = &m.driver {
        evidence.extend(d.expected.iter().map(|e| ev("expected peer flow", e.clone())));
        evidence.extend(d.reasons.iter().map(|r| ev("driver branch", r.clone())));
    }
    let f = match (&m.nvidia_version, &m.peermem_version) {
        (Some(d), Some(p)) if d != p => Finding::new(
            "versions",
            Status::Warn,
            format!("nvidia-peermem {p} does not match the driver {d}"),
        )
        .hint("install nvidia-peermem from the same driver package as nvidia.ko"),
        (d, _) => Finding::new(
            "versions",
            Status::Pass,
            format!("driver {}{branch}, {rdma}", d.as_deref().unwrap_or("?")),
        ),
    };
    f.evidence(evidence)
}

/// " (branch 580: nvidia-peermem's default client claims with nv_mem_acquire_nc)", or why the branch is unknown.
fn branch_note(d: &crate::drivers::Detected) -> String {
    let claim = |b: u32| {
        let row = crate::drivers::branch(b)?.0;
        let mut acquires: Vec<&str> = row.clients_default.iter().map(|c| c.acquire).collect();
        acquires.dedup();
        Some(acquires.join(" / "))
    };
    match d.branch {
        Some(b) => match claim(b) {
            Some(a) => format!(" (branch {b}: nvidia-peermem's default client claims with {a})"),
            None => format!(" (branch {b}: older than the driver matrix)"),
        },
        None => " (branch unknown: either nvidia-peermem flow may run)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_release_major_minor() {
        assert_eq!(major_minor("6.8.0-45-generic"), Some((6, 8)));
        assert_eq!(major_minor("5.4.0"), Some((5, 4)));
        assert_eq!(major_minor("garbage"), None);
    }

    #[test]
    fn dmabuf_needs_open_module_new_kernel_and_driver() {
        let mut m = Modules {
            kernel_release: Some("6.8.0".into()),
            nvidia_version: Some("560.35.03".into()),
            nvrm: Some(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build".into(),
            ),
            ..Default::default()
        };
        assert_eq!(m.dmabuf_possible().0, Some(true));
        m.nvrm = Some("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12".into());
        assert_eq!(m.dmabuf_possible().0, Some(false));
        m.nvrm = None;
        assert_eq!(m.dmabuf_possible().0, None);
        m.kernel_release = Some("5.4.0".into());
        assert_eq!(m.dmabuf_possible().0, Some(false));
    }
}
