//! The GPUDirect Storage mode of a cuFile call (or of a file), and the reasons cuFile fell back
//! to compatibility mode. Pure: the facts come in (`gds_facts` reads them from /proc).
//!
//! Sources (read 2026-12-04):
//! - cufile.h `CUfileP2PFlags`: CUFILE_P2PDMA (PCI P2PDMA), CUFILE_NVFS (nvidia-fs),
//!   CUFILE_DMABUF, CUFILE_C2C (Grace), CUFILE_NVIDIA_PEERMEM (IBM Spectrum Scale, WekaFS only).
//! - GDS API reference, "cuFile Compatibility Mode": `allow_compat_mode` (default true),
//!   `force_compat_mode` (default false: all I/O through POSIX), `gds_rdma_write_support`,
//!   `posix_unaligned_writes` (writes not 4 KiB aligned go POSIX), `lustre:posix_gds_min_kb`
//!   (I/O of 1..N KiB go POSIX even with allow_compat_mode false), `weka:rdma_write_support`
//!   (false: WekaFS writes go POSIX); nvidia_fs.ko not loaded: all I/O in compatibility mode.
//! - GDS release notes, "Filesystem Classification Matrix": TMPFS, OverlayFS, ZFS, BTRFS are
//!   "developer friendly" (compatibility mode only); "Filesystems such as TMPFS do not support
//!   O_DIRECT". ramfs and squashfs have no O_DIRECT path either (no direct_IO in the kernel).
//! - "GDS Support for NVMe drives using Linux PCI P2PDMA" and the troubleshooting guide's
//!   "NVMe P2PDMA" chapter: `properties.use_pci_p2pdma: true`, no nvidia-fs, kernel >= 6.2 with
//!   PCI P2PDMA compiled in (`p2pdma_pgmap_ops` in /proc/kallsyms), NVMe only (no RAID0,
//!   multipath or NVMe-oF). The data moves by O_DIRECT I/O whose destination is GPU memory.

use serde::{Deserialize, Serialize};

/// Which path a cuFile call's bytes took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum GdsMode {
    /// nvidia-fs ioctls were issued: NVMe/RDMA DMA into GPU memory through nvidia-fs.
    GdsNvfs,
    /// O_DIRECT I/O whose destination is GPU memory (upstream PCI P2PDMA; nvidia-fs sees nothing).
    GdsP2pdma,
    /// POSIX I/O into a host bounce buffer, then a copy to the GPU.
    GdsCompat,
    /// The evidence to tell is not there.
    #[default]
    Unknown,
}

impl GdsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::GdsNvfs => "gds-nvfs",
            Self::GdsP2pdma => "gds-p2pdma",
            Self::GdsCompat => "gds-compat",
            Self::Unknown => "unknown",
        }
    }
}

/// What was seen of a call's (or a file's) cuFile I/O.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoEvidence {
    /// nvidia-fs READ/WRITE/BATCH/MAP ioctls issued for it.
    pub nvfs_calls: u64,
    /// POSIX read/write calls issued for it (cuFile's own, or its worker threads').
    pub posix_calls: u64,
    /// The descriptor the POSIX I/O used was opened O_DIRECT; None: not known.
    pub o_direct: Option<bool>,
    /// The POSIX I/O's destination lies in GPU memory (a /dev/nvidiaN mapping); Some(false): in
    /// host memory; None: not known.
    pub dest_gpu: Option<bool>,
    /// The kernel can do PCI P2PDMA (>= 6.2 with CONFIG_PCI_P2PDMA); Some(false): it cannot, so
    /// no O_DIRECT I/O can land in GPU memory (user GPU memory has struct pages for the block
    /// layer to pin only as P2PDMA pages); None: not known.
    pub p2pdma_possible: Option<bool>,
    /// Every POSIX I/O it issued failed: nothing landed anywhere.
    pub failed: bool,
}

/// The mode, from evidence only. A direct path is never called compat: POSIX I/O counts as
/// compatibility mode only when its destination is known to be host memory, or when it went
/// through the page cache (not O_DIRECT: it cannot land in GPU memory by DMA). O_DIRECT I/O
/// with no evidence of where it landed is unknown, not compat (it may be P2PDMA), unless the
/// kernel cannot do P2PDMA at all: then it landed in host memory.
pub fn decide_mode(e: &IoEvidence) -> GdsMode {
    if e.nvfs_calls > 0 {
        return GdsMode::GdsNvfs;
    }
    if e.posix_calls == 0 {
        return GdsMode::Unknown;
    }
    if e.failed && e.dest_gpu != Some(false) {
        // Nothing landed, and not in a known bounce buffer: it may have been a P2PDMA attempt
        // (O_DIRECT into GPU memory) the kernel refused. Neither a P2PDMA transfer nor compat.
        return GdsMode::Unknown;
    }
    match (e.o_direct, e.dest_gpu) {
        (Some(true), Some(true)) => GdsMode::GdsP2pdma,
        (Some(false), _) => GdsMode::GdsCompat,
        (_, Some(false)) => GdsMode::GdsCompat,
        (_, None) if e.p2pdma_possible == Some(false) => GdsMode::GdsCompat,
        _ => GdsMode::Unknown,
    }
}

/// How cuFile can use a filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsSupport {
    /// Local block filesystems GDS supports (ext4 ordered mode, XFS) on NVMe: nvidia-fs, or
    /// PCI P2PDMA where the kernel has it.
    LocalNvme,
    /// Distributed filesystems whose kernel client does RDMA through nvidia-fs (NFS over RDMA,
    /// Lustre/EXAScaler, BeeGFS).
    KernelRdma,
    /// IBM Spectrum Scale (GPFS) and WekaFS: their own RDMA, with nvidia-peermem or dma-buf.
    PeermemOrDmabuf,
    /// No direct path: cuFile can only use compatibility mode here.
    CompatOnly,
}

/// The support class of a filesystem type as /proc/PID/mountinfo names it.
pub fn fs_support(fstype: &str) -> FsSupport {
    // Fuse mounts name "fuse.<name>"; overlay may appear as "overlay" or "overlayfs".
    match fstype {
        "ext4" | "xfs" => FsSupport::LocalNvme,
        "nfs" | "nfs4" | "lustre" | "beegfs" => FsSupport::KernelRdma,
        "gpfs" | "wekafs" => FsSupport::PeermemOrDmabuf,
        _ => FsSupport::CompatOnly,
    }
}

/// The filesystem name of a superblock magic (statfs f_type; include/uapi/linux/magic.h and the
/// vendors' own), for the types the reasons distinguish. A magic can name several types
/// (devtmpfs is TMPFS_MAGIC, ext2/3 share EXT4's): mountinfo's type is preferred when known.
pub fn fs_from_magic(magic: u64) -> Option<&'static str> {
    Some(match magic {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x0102_1994 => "tmpfs",
        0x8584_58f6 => "ramfs",
        0x794c_7630 => "overlay",
        0x7371_7368 => "squashfs",
        0x6969 => "nfs",
        0x0BD0_0BD0 => "lustre",
        0x1983_0326 => "beegfs",
        0x4750_4653 => "gpfs",
        0x9123_683E => "btrfs",
        0x2FC1_2FC1 => "zfs",
        _ => return None,
    })
}

/// The cuFile configuration as the process sees it (cufile.json then `CUFILE_*` overrides);
/// each value with where it came from ("/etc/cufile.json", "CUFILE_FORCE_COMPAT_MODE").
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EffectiveConfig {
    pub force_compat_mode: Option<(bool, String)>,
    pub allow_compat_mode: Option<(bool, String)>,
    pub use_pci_p2pdma: Option<(bool, String)>,
    pub gds_rdma_write_support: Option<(bool, String)>,
    pub posix_unaligned_writes: Option<(bool, String)>,
    /// `fs.lustre.posix_gds_min_kb`.
    pub lustre_posix_gds_min_kb: Option<(u64, String)>,
    /// `fs.weka.rdma_write_support`.
    pub weka_rdma_write_support: Option<(bool, String)>,
}

/// Everything known about one cuFile I/O (or one file's), for its fallback reasons.
#[derive(Debug, Clone, Default)]
pub struct FallbackFacts<'a> {
    /// Filesystem type of the file (mountinfo or superblock magic).
    pub fs_type: Option<&'a str>,
    pub config: Option<&'a EffectiveConfig>,
    /// nvidia_fs loaded (/sys/module/nvidia_fs) and its device visible to the process.
    pub nvidia_fs: Option<bool>,
    /// The kernel can do PCI P2PDMA, and the evidence (`storage::kernel_p2pdma::KernelP2pdma`).
    pub kernel_p2pdma: Option<(bool, &'a str)>,
    /// The I/O's O_DIRECT transfer into (or out of) GPU memory failed with this errno.
    pub p2pdma_failed: Option<i32>,
    pub o_direct: Option<bool>,
    pub is_write: bool,
    /// Size and file offset of the I/O (smallest seen, for a file).
    pub size: Option<u64>,
    pub offset: Option<u64>,
}

/// Why cuFile used (or would use) compatibility mode. Several can apply.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum CompatReason {
    /// The file's filesystem has no direct path (tmpfs, ramfs, overlay, squashfs, btrfs ...).
    Filesystem(String),
    /// `force_compat_mode` true, from this source (file path or environment variable).
    ForceCompatMode(String),
    /// nvidia-fs not loaded (or its device not in the process's namespace), and P2PDMA not on.
    NvidiaFsAbsent,
    /// No nvidia-fs, and the kernel cannot do PCI P2PDMA (the evidence: config file or symbol).
    KernelNoP2pdma(String),
    /// cuFile's O_DIRECT I/O to or from GPU memory (PCI P2PDMA) failed: the error's name, and
    /// what the kernel's P2PDMA is.
    P2pdmaFailed(String, String),
    /// The descriptor was not opened O_DIRECT.
    NotODirect,
    /// `lustre.posix_gds_min_kb`: I/O of at most this many KiB go POSIX.
    BelowMinSize(u64),
    /// `posix_unaligned_writes`: a write not aligned to 4 KiB.
    UnalignedWrite,
    /// Writes with RDMA write support off (`gds_rdma_write_support` or `weka.rdma_write_support`).
    RdmaWritesOff(String),
}

impl CompatReason {
    /// The stable JSON string (`compat_reason`).
    pub fn id(&self) -> String {
        match self {
            Self::Filesystem(fs) => format!("filesystem:{fs}"),
            Self::ForceCompatMode(_) => "force-compat-mode".into(),
            Self::NvidiaFsAbsent => "nvidia-fs-absent".into(),
            Self::KernelNoP2pdma(_) => "kernel-no-p2pdma".into(),
            Self::P2pdmaFailed(err, _) => format!("p2pdma-failed:{err}"),
            Self::NotODirect => "not-o-direct".into(),
            Self::BelowMinSize(kb) => format!("below-posix-gds-min-kb:{kb}"),
            Self::UnalignedWrite => "unaligned-write".into(),
            Self::RdmaWritesOff(_) => "rdma-writes-off".into(),
        }
    }

    /// One sentence for the hints.
    pub fn explain(&self) -> String {
        match self {
            Self::Filesystem(fs) => format!("the file is on {fs}, which has no GPUDirect path (compatibility mode only)"),
            Self::ForceCompatMode(src) => format!("force_compat_mode is true ({src})"),
            Self::NvidiaFsAbsent => "nvidia-fs is not loaded (or /dev/nvidia-fs* is not in the process's namespace) and PCI P2PDMA is not on".into(),
            Self::KernelNoP2pdma(why) => format!("p2pdma not possible: {why}"),
            Self::P2pdmaFailed(err, why) => {
                format!("cuFile's O_DIRECT I/O with GPU memory (PCI P2PDMA) failed with {err}: {why}")
            }
            Self::NotODirect => "the file was not opened O_DIRECT".into(),
            Self::BelowMinSize(kb) => format!("I/O of {kb} KiB or less goes through POSIX (lustre posix_gds_min_kb)"),
            Self::UnalignedWrite => "a write not aligned to 4 KiB goes through POSIX (posix_unaligned_writes)".into(),
            Self::RdmaWritesOff(src) => format!("RDMA writes are off ({src})"),
        }
    }
}

/// Every reason that applies (in a stable order); empty when none is known.
pub fn compat_reasons(f: &FallbackFacts) -> Vec<CompatReason> {
    let mut r = Vec::new();
    let support = f.fs_type.map(fs_support);
    if let (Some(fs), Some(FsSupport::CompatOnly)) = (f.fs_type, support) {
        r.push(CompatReason::Filesystem(fs.to_string()));
    }
    let cfg = f.config.cloned().unwrap_or_default();
    if let Some((true, src)) = &cfg.force_compat_mode {
        r.push(CompatReason::ForceCompatMode(src.clone()));
    }
    let p2pdma_on = matches!(cfg.use_pci_p2pdma, Some((true, _)));
    if f.nvidia_fs == Some(false) && !p2pdma_on {
        r.push(CompatReason::NvidiaFsAbsent);
    }
    if let (Some(false), Some((false, why))) = (f.nvidia_fs, f.kernel_p2pdma) {
        r.push(CompatReason::KernelNoP2pdma(why.to_string()));
    }
    if let Some(errno) = f.p2pdma_failed {
        let why = match f.kernel_p2pdma {
            Some((false, why)) => format!("p2pdma not possible: {why}"),
            Some((true, why)) => format!("the kernel has P2PDMA ({why}); the device or its driver refused"),
            None => "the kernel's P2PDMA not known".to_string(),
        };
        r.push(CompatReason::P2pdmaFailed(errno_name(errno), why));
    }
    if f.o_direct == Some(false) {
        r.push(CompatReason::NotODirect);
    }
    if let (Some((kb, _)), Some("lustre"), Some(size)) = (&cfg.lustre_posix_gds_min_kb, f.fs_type, f.size) {
        if *kb > 0 && size <= kb * 1024 {
            r.push(CompatReason::BelowMinSize(*kb));
        }
    }
    if f.is_write {
        let unaligned = f.size.is_some_and(|s| s % 4096 != 0) || f.offset.is_some_and(|o| o % 4096 != 0);
        if unaligned && matches!(cfg.posix_unaligned_writes, Some((true, _))) {
            r.push(CompatReason::UnalignedWrite);
        }
        if let Some((false, src)) = &cfg.gds_rdma_write_support {
            r.push(CompatReason::RdmaWritesOff(format!("gds_rdma_write_support false in {src}")));
        } else if f.fs_type == Some("wekafs") && !matches!(cfg.weka_rdma_write_support, Some((true, _))) {
            // weka.rdma_write_support defaults to false: WekaFS writes go POSIX unless enabled.
            r.push(CompatReason::RdmaWritesOff("weka rdma_write_support not true".into()));
        }
    }
    r
}

/// "EFAULT" for 14 (or -14): the names of the errors an O_DIRECT transfer gives, else "errno N".
pub fn errno_name(errno: i32) -> String {
    match errno.abs() {
        14 => "EFAULT".into(),
        22 => "EINVAL".into(),
        5 => "EIO".into(),
        121 => "EREMOTEIO".into(),
        95 => "EOPNOTSUPP".into(),
        n => format!("errno {n}"),
    }
}

/// The JSON `compat_reason` strings.
pub fn reason_ids(r: &[CompatReason]) -> Vec<String> {
    r.iter().map(CompatReason::id).collect()
}

#[cfg(test)]
mod tests;
