//! NVLink between GPUs, from NVML (libnvidia-ml, loaded at run time through nvml-wrapper).
//!
//! The one part of preflight that does not read the sysfs/procfs tree: NVML describes the machine
//! it runs on, so it is asked only when `check` reads the live /sys. Everywhere else — a captured
//! tree, a machine without the NVIDIA driver (no libnvidia-ml.so.1), NVML failing to initialise —
//! NVLink is "unknown" with the reason, never an error.

use std::collections::BTreeMap;

use nvml_wrapper::enum_wrappers::device::{P2pCapabilitiesIndex, P2pStatus};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use serde::Serialize;

/// NVLink between one GPU pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Nvlink {
    /// NVML says the pair can do P2P over NVLink (directly or through NVSwitch).
    Yes,
    /// NVML answered: no NVLink P2P between them.
    No,
    /// NVML not available or did not answer (see [`NvlinkTable::reason`]).
    Unknown,
}

impl Nvlink {
    pub fn as_str(self) -> &'static str {
        match self {
            Nvlink::Yes => "yes",
            Nvlink::No => "no",
            Nvlink::Unknown => "unknown",
        }
    }
}

/// What NVML said about one pair: NVLink P2P, and the active links that end at the peer GPU
/// itself (0 through NVSwitch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvlinkPair {
    pub nvlink: Nvlink,
    pub links: Option<u32>,
}

/// NVLink for every GPU pair NVML knows, keyed by the pair's PCI addresses (lower first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NvlinkTable {
    pub pairs: BTreeMap<(String, String), NvlinkPair>,
    /// Where the answers came from, or why there are none.
    pub reason: String,
}

impl NvlinkTable {
    /// No NVLink information, and why.
    pub fn unknown(reason: impl Into<String>) -> Self {
        Self { pairs: BTreeMap::new(), reason: reason.into() }
    }

    /// NVLink between two GPUs by PCI address (either order); unknown when NVML did not say.
    pub fn get(&self, a: &str, b: &str) -> NvlinkPair {
        let key = if a <= b { (a.to_string(), b.to_string()) } else { (b.to_string(), a.to_string()) };
        self.pairs.get(&key).copied().unwrap_or(NvlinkPair { nvlink: Nvlink::Unknown, links: None })
    }

    pub fn insert(&mut self, a: &str, b: &str, pair: NvlinkPair) {
        let key = if a <= b { (a.to_string(), b.to_string()) } else { (b.to_string(), a.to_string()) };
        self.pairs.insert(key, pair);
    }
}

/// NVML's bus id (`00000000:18:00.0`, upper-case hex) as sysfs names the function
/// (`0000:18:00.0`).
pub fn normalize_bus_id(nvml: &str) -> String {
    let lower = nvml.trim().to_ascii_lowercase();
    match lower.split_once(':') {
        Some((dom, rest)) => match u32::from_str_radix(dom, 16) {
            Ok(d) => format!("{d:04x}:{rest}"),
            Err(_) => lower,
        },
        None => lower,
    }
}

/// NVLink links a device can have (NVML_NVLINK_MAX_LINKS in nvml.h, 18 since Hopper). NVML
/// answers InvalidArg past the device's own count, which ends the walk.
const MAX_LINKS: u32 = 18;

/// Asks NVML about every pair of `gpus` (PCI addresses as sysfs names them).
pub fn probe(gpus: &[&str]) -> NvlinkTable {
    let nvml = match Nvml::init() {
        Ok(n) => n,
        Err(NvmlError::LibloadingError(e)) => {
            return NvlinkTable::unknown(format!("libnvidia-ml.so.1 not loadable ({e})"));
        }
        Err(e) => return NvlinkTable::unknown(format!("NVML did not initialise ({e})")),
    };
    let count = match nvml.device_count() {
        Ok(c) => c,
        Err(e) => return NvlinkTable::unknown(format!("NVML device count failed ({e})")),
    };
    let mut devices = BTreeMap::new();
    for i in 0..count {
        let Ok(d) = nvml.device_by_index(i) else { continue };
        let Ok(pci) = d.pci_info() else { continue };
        devices.insert(normalize_bus_id(&pci.bus_id), d);
    }
    let version = nvml.sys_driver_version().unwrap_or_else(|_| "?".into());
    let mut table = NvlinkTable::unknown(format!("NVML (driver {version}), {} GPU(s)", devices.len()));
    for (i, a) in gpus.iter().enumerate() {
        for b in &gpus[i + 1..] {
            let (Some(da), Some(db)) = (devices.get(*a), devices.get(*b)) else { continue };
            let nvlink = match da.p2p_status(db, P2pCapabilitiesIndex::NvLink) {
                Ok(P2pStatus::Ok) => Nvlink::Yes,
                Ok(_) | Err(NvmlError::NotSupported) => Nvlink::No,
                Err(_) => Nvlink::Unknown,
            };
            let mut links = 0;
            for l in 0..MAX_LINKS {
                let link = da.link_wrapper_for(l);
                match link.is_active() {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(_) => break,
                }
                if link.remote_pci_info().is_ok_and(|p| normalize_bus_id(&p.bus_id) == **b) {
                    links += 1;
                }
            }
            let links = (nvlink == Nvlink::Yes).then_some(links);
            table.insert(a, b, NvlinkPair { nvlink, links });
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_read_as_sysfs_names_them() {
        assert_eq!(normalize_bus_id("00000000:1B:00.0"), "0000:1b:00.0");
        assert_eq!(normalize_bus_id("00000001:CA:00.0"), "0001:ca:00.0");
        assert_eq!(normalize_bus_id("0000:18:00.0"), "0000:18:00.0");
    }

    #[test]
    fn pairs_are_looked_up_in_either_order() {
        let mut t = NvlinkTable::unknown("test");
        t.insert("0000:9a:00.0", "0000:18:00.0", NvlinkPair { nvlink: Nvlink::Yes, links: Some(4) });
        assert_eq!(t.get("0000:18:00.0", "0000:9a:00.0").links, Some(4));
        assert_eq!(t.get("0000:9a:00.0", "0000:18:00.0").nvlink, Nvlink::Yes);
        assert_eq!(t.get("0000:18:00.0", "0000:3a:00.0").nvlink, Nvlink::Unknown);
    }

    /// Every machine this project builds on lacks libnvidia-ml: the probe says so and goes on.
    /// (On a GPU machine NVML answers, and addresses no machine has get no pair.)
    #[test]
    fn a_machine_without_nvml_is_unknown_not_an_error() {
        let t = probe(&["ffff:ff:1f.6", "ffff:ff:1f.7"]);
        assert!(t.pairs.is_empty(), "{t:?}");
        assert!(
            t.reason.starts_with("libnvidia-ml.so.1 not loadable (") || t.reason.starts_with("NVML"),
            "{}",
            t.reason
        );
        assert_eq!(t.get("ffff:ff:1f.6", "ffff:ff:1f.7").nvlink, Nvlink::Unknown);
    }
}
