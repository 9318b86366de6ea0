//! The PCI device tree as sysfs lays it out, device classes, and GPU–NIC distance classes.
//!
//! `/sys/bus/pci/devices/<BDF>` links to `/sys/devices/pci<dom>:<bus>/<root port>/.../<BDF>`:
//! the components between the host bridge (`pci0000:17`) and the device are the PCI bridges
//! above it (root port, switch upstream port, switch downstream port, ...).

use std::collections::BTreeMap;

use serde::Serialize;

use super::fs::{parse_hex, sys_name, Fs, PreflightError};

pub const VENDOR_NVIDIA: u16 = 0x10de;
pub const VENDOR_MELLANOX: u16 = 0x15b3;

/// PCIe distance classes, as `nvidia-smi topo -m` names them, nearest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Distance {
    /// At most one PCIe bridge (switch) between them.
    #[serde(rename = "PIX")]
    Pix,
    /// Several bridges, no host bridge.
    #[serde(rename = "PXB")]
    Pxb,
    /// Through the host bridge (CPU root complex).
    #[serde(rename = "PHB")]
    Phb,
    /// Between host bridges within one NUMA node.
    #[serde(rename = "NODE")]
    Node,
    /// Across NUMA nodes (the inter-socket link).
    #[serde(rename = "SYS")]
    Sys,
    /// The tree does not say (a device directory that is not a link into /sys/devices).
    #[serde(rename = "unknown")]
    Unknown,
}

impl Distance {
    pub fn as_str(self) -> &'static str {
        match self {
            Distance::Pix => "PIX",
            Distance::Pxb => "PXB",
            Distance::Phb => "PHB",
            Distance::Node => "NODE",
            Distance::Sys => "SYS",
            Distance::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Distance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One PCI function.
#[derive(Debug, Clone, Serialize)]
pub struct PciDevice {
    pub bdf: String,
    pub vendor: u16,
    pub device: u16,
    pub class: u32,
    /// `None` when numa_node is -1 or absent.
    pub numa_node: Option<u32>,
    /// `pci0000:17`, or `None` when the device entry is not a link into /sys/devices.
    pub host_bridge: Option<String>,
    /// PCI bridges above the device, root port first.
    pub bridges: Vec<String>,
    pub driver: Option<String>,
    /// RDMA devices (`infiniband/<name>`).
    pub ib_devices: Vec<String>,
    /// Network interfaces (`net/<name>`).
    pub net_devices: Vec<String>,
    /// For NVIDIA GPUs: "Model:" from /proc/driver/nvidia/gpus/<BDF>/information.
    pub model: Option<String>,
}

impl PciDevice {
    pub fn is_gpu(&self) -> bool {
        self.vendor == VENDOR_NVIDIA && matches!(self.class >> 8, 0x0300 | 0x0302)
    }

    /// A NIC: anything with an RDMA device, or a Mellanox network/InfiniBand function.
    pub fn is_nic(&self) -> bool {
        !self.ib_devices.is_empty() || (self.vendor == VENDOR_MELLANOX && self.class >> 16 == 0x02)
    }

    pub fn is_rdma(&self) -> bool {
        !self.ib_devices.is_empty()
    }

    /// `bus/pci/devices/<BDF>/<file>`, for reads and evidence.
    pub fn rel(&self, file: &str) -> String {
        format!("bus/pci/devices/{}/{file}", self.bdf)
    }

    /// First RDMA device name, else the BDF (for tables).
    pub fn nic_name(&self) -> String {
        self.ib_devices.first().cloned().unwrap_or_else(|| self.bdf.clone())
    }
}

/// Every PCI function, by BDF.
#[derive(Debug, Clone, Default)]
pub struct PciTree {
    pub devices: BTreeMap<String, PciDevice>,
}

impl PciTree {
    /// NVIDIA GPUs in PCI bus order (nvidia-smi's index order).
    pub fn gpus(&self) -> Vec<&PciDevice> {
        self.sorted(|d| d.is_gpu())
    }

    /// NICs (RDMA-capable or Mellanox) in PCI bus order.
    pub fn nics(&self) -> Vec<&PciDevice> {
        self.sorted(|d| d.is_nic())
    }

    fn sorted(&self, pred: impl Fn(&PciDevice) -> bool) -> Vec<&PciDevice> {
        let mut v: Vec<&PciDevice> = self.devices.values().filter(|d| pred(d)).collect();
        v.sort_by_key(|d| bdf_key(&d.bdf));
        v
    }
}

/// How two devices are connected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathInfo {
    pub distance: Distance,
    /// The lowest bridge both are below, if any.
    pub common_bridge: Option<String>,
    /// The ports just below the common bridge on each side: where ACS redirection decides
    /// whether a peer-to-peer request turns upstream instead of crossing over.
    pub ports: Vec<String>,
    /// Every bridge on the path (each side, up to and including the common bridge).
    pub bridges: Vec<String>,
}

/// The distance class between `a` and `b`.
pub fn path_between(a: &PciDevice, b: &PciDevice) -> PathInfo {
    let unknown =
        PathInfo { distance: Distance::Unknown, common_bridge: None, ports: vec![], bridges: vec![] };
    let (Some(ha), Some(hb)) = (&a.host_bridge, &b.host_bridge) else {
        return unknown;
    };
    if ha != hb {
        let distance = if a.numa_node == b.numa_node { Distance::Node } else { Distance::Sys };
        let bridges = a.bridges.iter().chain(b.bridges.iter()).cloned().collect();
        return PathInfo { distance, common_bridge: None, ports: vec![], bridges };
    }
    let c = a.bridges.iter().zip(&b.bridges).take_while(|(x, y)| x == y).count();
    let mut bridges: Vec<String> = a.bridges[c..].to_vec();
    if c == 0 {
        bridges.extend(b.bridges.iter().cloned());
        return PathInfo { distance: Distance::Phb, common_bridge: None, ports: vec![], bridges };
    }
    let common = a.bridges[c - 1].clone();
    bridges.push(common.clone());
    bridges.extend(b.bridges[c..].iter().cloned());
    let below = (a.bridges.len() - c).max(b.bridges.len() - c);
    let distance = if below <= 1 { Distance::Pix } else { Distance::Pxb };
    let ports = [a.bridges.get(c), b.bridges.get(c)].into_iter().flatten().cloned().collect();
    PathInfo { distance, common_bridge: Some(common), ports, bridges }
}

/// Reads every function under bus/pci/devices. A missing bus/pci means no PCI devices.
pub fn scan(fs: &Fs) -> Result<PciTree, PreflightError> {
    let mut tree = PciTree::default();
    for bdf in fs.list_sys("bus/pci/devices") {
        let dev = read_device(fs, &bdf)?;
        tree.devices.insert(bdf, dev);
    }
    // RDMA devices whose sysfs parent is not the PCI function itself (an auxiliary device
    // below it): attach them to the nearest PCI function above.
    for ib in fs.list_sys("class/infiniband") {
        let Some(real) = fs.resolve_sys_link(&format!("class/infiniband/{ib}")) else {
            continue;
        };
        let Some(bdf) = real.split('/').rev().find(|c| is_bdf(c)) else {
            continue;
        };
        if let Some(dev) = tree.devices.get_mut(bdf) {
            if !dev.ib_devices.contains(&ib) {
                dev.ib_devices.push(ib);
                dev.ib_devices.sort();
            }
        }
    }
    Ok(tree)
}

fn read_device(fs: &Fs, bdf: &str) -> Result<PciDevice, PreflightError> {
    let base = format!("bus/pci/devices/{bdf}");
    let hex = |file: &str| -> Result<u32, PreflightError> {
        let rel = format!("{base}/{file}");
        let value = fs.read_sys(&rel)?.ok_or_else(|| PreflightError::Malformed {
            path: sys_name(&rel),
            expected: "a hex number (the file is missing)",
            value: String::new(),
        })?;
        parse_hex(&sys_name(&rel), &value)
    };
    let vendor = hex("vendor")? as u16;
    let device = hex("device")? as u16;
    let class = hex("class")?;
    let numa_rel = format!("{base}/numa_node");
    let numa_node = match fs.read_sys(&numa_rel)? {
        None => None,
        Some(v) => {
            let n: i64 = v.parse().map_err(|_| PreflightError::Malformed {
                path: sys_name(&numa_rel),
                expected: "a NUMA node number or -1",
                value: v.clone(),
            })?;
            u32::try_from(n).ok()
        }
    };
    let (host_bridge, bridges) = match fs.resolve_sys_link(&base) {
        Some(real) => ancestry(&real),
        None => (None, Vec::new()),
    };
    let model = if vendor == VENDOR_NVIDIA {
        fs.proc_opt(&format!("driver/nvidia/gpus/{bdf}/information")).and_then(|info| {
            info.lines().find_map(|l| l.strip_prefix("Model:").map(|m| m.trim().to_string()))
        })
    } else {
        None
    };
    Ok(PciDevice {
        bdf: bdf.to_string(),
        vendor,
        device,
        class,
        numa_node,
        host_bridge,
        bridges,
        driver: fs.link_name(&format!("{base}/driver")),
        ib_devices: fs.list_sys(&format!("{base}/infiniband")),
        net_devices: fs.list_sys(&format!("{base}/net")),
        model,
    })
}

/// Host bridge and bridges from a resolved path like
/// `devices/pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0`.
/// With nested domains (VMD: `.../0000:00:0e.0/pci10000:e0/10000:e0:06.0/...`) the innermost
/// host bridge counts.
pub fn ancestry(real: &str) -> (Option<String>, Vec<String>) {
    let comps: Vec<&str> = real.split('/').collect();
    let Some(hb_idx) = comps.iter().rposition(|c| is_host_bridge(c)) else {
        return (None, Vec::new());
    };
    let below: Vec<String> =
        comps[hb_idx + 1..].iter().filter(|c| is_bdf(c)).map(|c| c.to_string()).collect();
    let bridges = below.split_last().map(|(_, rest)| rest.to_vec()).unwrap_or_default();
    (Some(comps[hb_idx].to_string()), bridges)
}

fn is_host_bridge(c: &str) -> bool {
    c.strip_prefix("pci").is_some_and(|rest| {
        let mut parts = rest.split(':');
        let ok =
            |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.chars().all(|ch| ch.is_ascii_hexdigit()));
        ok(parts.next()) && ok(parts.next()) && parts.next().is_none()
    })
}

/// `0000:17:00.0` (domain may be longer, e.g. VMD's `10000`).
pub fn is_bdf(c: &str) -> bool {
    bdf_parts(c).is_some()
}

fn bdf_parts(c: &str) -> Option<(u32, u32, u32, u32)> {
    let (dom, rest) = c.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let h = |s: &str, max: usize| {
        if s.is_empty() || s.len() > max || !s.chars().all(|ch| ch.is_ascii_hexdigit()) {
            None
        } else {
            u32::from_str_radix(s, 16).ok()
        }
    };
    Some((h(dom, 8)?, h(bus, 2)?, h(dev, 2)?, h(func, 1)?))
}

/// Sort key in PCI bus order; unparsable names sort last, by name.
pub fn bdf_key(bdf: &str) -> (u8, (u32, u32, u32, u32), String) {
    match bdf_parts(bdf) {
        Some(p) => (0, p, String::new()),
        None => (1, (0, 0, 0, 0), bdf.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(bdf: &str, hb: &str, bridges: &[&str], numa: Option<u32>) -> PciDevice {
        PciDevice {
            bdf: bdf.into(),
            vendor: 0,
            device: 0,
            class: 0,
            numa_node: numa,
            host_bridge: Some(hb.into()),
            bridges: bridges.iter().map(|s| s.to_string()).collect(),
            driver: None,
            ib_devices: vec![],
            net_devices: vec![],
            model: None,
        }
    }

    #[test]
    fn ancestry_splits_host_bridge_and_bridges() {
        let (hb, br) = ancestry("devices/pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0");
        assert_eq!(hb.as_deref(), Some("pci0000:17"));
        assert_eq!(br, vec!["0000:17:01.0", "0000:18:00.0", "0000:19:00.0"]);
        let (hb, br) = ancestry("devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/10000:e1:00.0");
        assert_eq!(hb.as_deref(), Some("pci10000:e0"));
        assert_eq!(br, vec!["10000:e0:06.0"]);
        assert_eq!(ancestry("bus/pci/devices/0000:00:01.0"), (None, vec![]));
    }

    #[test]
    fn distance_classes() {
        let r = "0000:17:01.0";
        let u = "0000:18:00.0";
        let gpu = dev("0000:1a:00.0", "pci0000:17", &[r, u, "0000:19:00.0"], Some(0));
        let nic = dev("0000:1b:00.0", "pci0000:17", &[r, u, "0000:19:01.0"], Some(0));
        let p = path_between(&gpu, &nic);
        assert_eq!(p.distance, Distance::Pix);
        assert_eq!(p.common_bridge.as_deref(), Some(u));
        assert_eq!(p.ports, vec!["0000:19:00.0", "0000:19:01.0"]);
        // Two switch levels on one side.
        let deep = dev(
            "0000:1e:00.0",
            "pci0000:17",
            &[r, u, "0000:19:02.0", "0000:1c:00.0", "0000:1d:00.0"],
            Some(0),
        );
        assert_eq!(path_between(&deep, &nic).distance, Distance::Pxb);
        // Different root ports on one host bridge.
        let other_rp = dev("0000:20:00.0", "pci0000:17", &["0000:17:02.0"], Some(0));
        assert_eq!(path_between(&gpu, &other_rp).distance, Distance::Phb);
        // Different host bridges, same / other NUMA node.
        let node = dev("0000:38:00.0", "pci0000:37", &["0000:37:01.0"], Some(0));
        assert_eq!(path_between(&gpu, &node).distance, Distance::Node);
        let sys = dev("0000:98:00.0", "pci0000:97", &["0000:97:01.0"], Some(1));
        assert_eq!(path_between(&gpu, &sys).distance, Distance::Sys);
        let mut flat = gpu.clone();
        flat.host_bridge = None;
        assert_eq!(path_between(&flat, &nic).distance, Distance::Unknown);
    }

    #[test]
    fn bdf_parsing_and_order() {
        assert!(is_bdf("0000:1a:00.0"));
        assert!(is_bdf("10000:e0:06.0"));
        assert!(!is_bdf("pci0000:17"));
        assert!(!is_bdf("0000:1a:00"));
        assert!(bdf_key("0000:09:00.0") < bdf_key("0000:1a:00.0"));
        assert!(bdf_key("0000:ff:00.0") < bdf_key("0001:00:00.0"));
    }
}
