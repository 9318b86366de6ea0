//! The facts `gds_mode` decides on, as the traced process sees them (read by
//! `preflight::proc_gds`): its environment (/proc/PID/environ), the cufile.json it would read (`CUFILE_ENV_PATH_JSON`, else
//! /etc/cufile.json) through its own root (/proc/PID/root: its mount namespace, so a container's
//! private /etc/cufile.json, not the host's), its mounts (/proc/PID/mountinfo) and its mappings
//! (/proc/PID/maps: is an I/O's destination GPU memory?).
//!
//! Sources: GDS configuration guide "GPUDirect Storage Parameters" (CUFILE_ENV_PATH_JSON names
//! an alternate cufile.json; /etc/cufile.json is the default); troubleshooting guide
//! "Environment Variables Used by GPUDirect Storage" (CUFILE_FORCE_COMPAT_MODE overrides
//! force_compat_mode); cuda-python's `cufile.BoolConfigParameter` (CUFileBoolConfigParameter_t:
//! PROPERTIES_ALLOW_COMPAT_MODE, FORCE_COMPAT_MODE, USE_PCIP2PDMA), whose environment names
//! CUFILE_ALLOW_COMPAT_MODE and CUFILE_USE_PCIP2PDMA appear in MagnumIO GDS sample
//! instructions and users' P2PDMA set-ups. cufile.json is JSON with comments.

use serde_json::Value;

use super::gds_mode::EffectiveConfig;
pub use crate::parse::mountinfo::{fstype_of_dev, parse_mountinfo, Mount};

/// The environment variables that override cufile.json keys, with the key each sets.
pub const ENV_OVERRIDES: [(&str, &str); 3] = [
    ("CUFILE_FORCE_COMPAT_MODE", "force_compat_mode"),
    ("CUFILE_ALLOW_COMPAT_MODE", "allow_compat_mode"),
    ("CUFILE_USE_PCIP2PDMA", "use_pci_p2pdma"),
];

/// The process's cuFile configuration: which file, what it said, and the effective values.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcConfig {
    /// The path as the process names it (inside its root), if one exists there.
    pub file: Option<String>,
    /// Why the file could not be used (unreadable, not JSON even without comments).
    pub error: Option<String>,
    pub effective: EffectiveConfig,
}

/// `NAME=value` pairs of a NUL-separated environ block.
pub fn parse_environ(raw: &[u8]) -> Vec<(String, String)> {
    raw.split(|b| *b == 0)
        .filter_map(|kv| {
            let s = String::from_utf8_lossy(kv);
            let (k, v) = s.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

pub fn env_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

pub fn from_json(v: &Value, src: &str) -> EffectiveConfig {
    let b = |p: &str| v.pointer(p).and_then(Value::as_bool).map(|b| (b, src.to_string()));
    EffectiveConfig {
        force_compat_mode: b("/properties/force_compat_mode"),
        allow_compat_mode: b("/properties/allow_compat_mode"),
        use_pci_p2pdma: b("/properties/use_pci_p2pdma"),
        gds_rdma_write_support: b("/properties/gds_rdma_write_support"),
        posix_unaligned_writes: b("/properties/posix_unaligned_writes"),
        lustre_posix_gds_min_kb: v
            .pointer("/fs/lustre/posix_gds_min_kb")
            .and_then(Value::as_u64)
            .map(|n| (n, src.to_string())),
        weka_rdma_write_support: b("/fs/weka/rdma_write_support"),
    }
}

/// Where a user address lies, from /proc/PID/maps: Some(true) in a GPU memory mapping
/// (`/dev/nvidiaN`: the device's memory mapped into the process), Some(false) in any other
/// mapping (anonymous or file-backed: host memory), None when no mapping holds it, or it is in
/// /dev/nvidiactl or /dev/nvidia-uvm (managed memory may be host- or device-resident: no
/// evidence either way).
pub fn dest_is_gpu(maps: &str, addr: u64) -> Option<bool> {
    for l in maps.lines() {
        let mut f = l.split_whitespace();
        let Some((a, b)) = f.next().and_then(|r| r.split_once('-')) else { continue };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else { continue };
        if addr < start || addr >= end {
            continue;
        }
        let path = f.nth(4).unwrap_or("");
        let dev = path.strip_prefix("/dev/nvidia");
        return match dev {
            Some(n) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => Some(true),
            Some(_) => None,
            None => Some(false),
        };
    }
    None
}

/// What /proc and /sys said about a cuFile process, read once (its configuration does not
/// change after cuFile initialised; its mounts rarely do).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcGdsFacts {
    pub config: ProcConfig,
    pub mounts: Vec<Mount>,
    /// nvidia_fs loaded and a /dev/nvidia-fs* node in the process's root (None: not known).
    pub nvidia_fs: Option<bool>,
    /// The kernel can do PCI P2PDMA (>= 6.2 with CONFIG_PCI_P2PDMA), and the evidence; None:
    /// not known (recordings made before this was read have none).
    #[serde(default)]
    pub kernel_p2pdma: Option<(bool, String)>,
}

impl ProcGdsFacts {
    /// `kernel_p2pdma` as `gds_mode::FallbackFacts` takes it.
    pub fn p2pdma(&self) -> Option<(bool, &str)> {
        self.kernel_p2pdma.as_ref().map(|(y, why)| (*y, why.as_str()))
    }
}
