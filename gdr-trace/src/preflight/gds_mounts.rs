//! `gds-mounts`: each mounted filesystem (/proc/self/mountinfo under the proc root) with the
//! modes cuFile can use on it — nvfs (nvidia-fs), p2pdma (upstream PCI P2PDMA), compat (POSIX
//! through a host bounce buffer) — and why. The decisions are `storage::gds_mode`'s.
//!
//! Kernel PCI P2PDMA (NVIDIA "GDS Support for NVMe drives using Linux PCI P2PDMA" and the
//! troubleshooting guide's "NVMe P2PDMA" chapter): kernel >= 6.2 built with
//! CONFIG_PCI_P2PDMA, NVMe only (no RAID0, multipath, NVMe-oF), and `use_pci_p2pdma` in
//! cufile.json. The config is read from /boot/config-RELEASE (beside the proc root: /boot for
//! /proc, TREE/boot for TREE/proc), else /proc/config.gz, else the `p2pdma_pgmap_ops` symbol in
//! /proc/kallsyms; none of them: unknown. Debian's 6.1 and 6.12 kernels (the test VM's) are
//! built with "# CONFIG_PCI_P2PDMA is not set".

use super::finding::{ev, Finding, Status};
use super::fs::{proc_name, Fs};
use super::modules::Modules;
use crate::parse::mountinfo::{parse_mountinfo, Mount};
use crate::storage::gds_mode::{fs_support, FsSupport};
pub use crate::storage::kernel_p2pdma::{config_p2pdma, release_at_least, KernelP2pdma};

/// Whether the kernel under `fs`'s /proc can do PCI P2PDMA, and the evidence.
pub fn kernel_p2pdma(fs: &Fs) -> KernelP2pdma {
    super::proc_gds::read_kernel(&fs.proc(""))
}

/// Filesystems with no files to read (left out of the list, counted).
const PSEUDO: [&str; 20] = [
    "proc",
    "sysfs",
    "cgroup",
    "cgroup2",
    "devpts",
    "devtmpfs",
    "mqueue",
    "bpf",
    "tracefs",
    "debugfs",
    "securityfs",
    "pstore",
    "configfs",
    "fusectl",
    "hugetlbfs",
    "autofs",
    "binfmt_misc",
    "efivarfs",
    "nsfs",
    "rpc_pipefs",
];

/// The modes cuFile can use on one mount, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountModes {
    pub mount: Mount,
    /// "nvfs", "p2pdma", "compat"; or only "compat-only".
    pub modes: Vec<&'static str>,
    pub why: Vec<String>,
}

impl MountModes {
    pub fn direct(&self) -> bool {
        self.modes.iter().any(|m| *m == "nvfs" || *m == "p2pdma")
    }
}

pub fn mount_modes(m: &Mount, nvfs: bool, peermem: bool, p2p: &KernelP2pdma) -> MountModes {
    let mut modes = Vec::new();
    let mut why = Vec::new();
    let nvfs_note = |why: &mut Vec<String>| why.push("nvfs: nvidia-fs not loaded".to_string());
    match fs_support(&m.fstype) {
        FsSupport::LocalNvme => {
            let nvme = m.source.starts_with("/dev/nvme");
            if !nvme && !m.source.starts_with("/dev/md") {
                why.push(format!("{} is not an NVMe device (GDS needs NVMe or NVMe-oF)", m.source));
            } else {
                if nvfs {
                    modes.push("nvfs");
                } else {
                    nvfs_note(&mut why);
                }
                match (nvme, p2p.usable()) {
                    (false, _) => why.push("p2pdma: not over RAID (md)".into()),
                    (true, Some(true)) => {
                        modes.push("p2pdma");
                        why.push(format!("p2pdma: {} (with use_pci_p2pdma in cufile.json)", p2p.why()));
                    }
                    (true, Some(false)) => why.push(format!("p2pdma: {}", p2p.why())),
                    (true, None) => why.push(format!("p2pdma unknown: {}", p2p.why())),
                }
            }
        }
        FsSupport::KernelRdma => {
            if nvfs {
                modes.push("nvfs");
                why.push(format!("{}: kernel RDMA through nvidia-fs", m.fstype));
            } else {
                nvfs_note(&mut why);
            }
        }
        FsSupport::PeermemOrDmabuf => {
            if nvfs && peermem {
                modes.push("nvfs");
            }
            why.push(format!("{}: its own RDMA, with nvidia-peermem or dma-buf", m.fstype));
        }
        FsSupport::CompatOnly => why.push(match m.fstype.as_str() {
            "tmpfs" | "ramfs" => format!("{}: memory-backed, no O_DIRECT", m.fstype),
            "squashfs" => "squashfs: compressed and read-only, no O_DIRECT".into(),
            "overlay" => "overlay: compatibility mode only (GDS filesystem matrix)".into(),
            other => format!("{other}: not a filesystem GDS supports"),
        }),
    }
    if modes.is_empty() {
        modes.push("compat-only");
    } else {
        modes.push("compat");
    }
    MountModes { mount: m.clone(), modes, why }
}

/// The finding; `has_gpu`: an NVIDIA GPU was found (else not applicable, the list still given).
pub fn finding(fs: &Fs, m: &Modules, has_gpu: bool) -> Finding {
    let p2p = kernel_p2pdma(fs);
    let Some(text) = fs.proc_opt("self/mountinfo") else {
        let status = if has_gpu { Status::Unknown } else { Status::NotApplicable };
        return Finding::new("gds-mounts", status, "no /proc/self/mountinfo: mounts not known")
            .with("kernel P2PDMA", p2p.why());
    };
    let mounts = parse_mountinfo(&text);
    let data: Vec<&Mount> = mounts.iter().filter(|x| !PSEUDO.contains(&x.fstype.as_str())).collect();
    let rows: Vec<MountModes> =
        data.iter().map(|x| mount_modes(x, m.nvidia_fs_loaded, m.peermem_loaded, &p2p)).collect();
    let direct = rows.iter().filter(|r| r.direct()).count();
    let mut evidence = vec![ev("kernel P2PDMA", p2p.why())];
    for r in &rows {
        let x = &r.mount;
        evidence.push(ev(
            format!("{} {}", proc_name("self/mountinfo"), x.mount_point),
            format!("{} on {}: {} ({})", x.fstype, x.source, r.modes.join(", "), r.why.join("; ")),
        ));
    }
    let summary = format!(
        "{} mounted filesystem(s) ({} pseudo left out): {direct} with a direct path, {} compatibility mode only",
        rows.len(),
        mounts.len() - rows.len(),
        rows.len() - direct
    );
    let f = if !has_gpu {
        Finding::new("gds-mounts", Status::NotApplicable, format!("no NVIDIA GPU; {summary}"))
    } else if direct > 0 {
        Finding::new("gds-mounts", Status::Pass, summary)
    } else {
        Finding::new("gds-mounts", Status::Warn, format!("{summary}: every cuFile read here goes through compatibility mode"))
            .hint("put the data on ext4/XFS on NVMe (or a GDS-enabled distributed filesystem) with nvidia-fs loaded, or a kernel >= 6.2 with CONFIG_PCI_P2PDMA and use_pci_p2pdma")
    };
    f.evidence(evidence)
}

#[cfg(test)]
mod tests;
