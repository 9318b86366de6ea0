//! PCIe config space: the PCI Express capability (port type) and the ACS extended capability.
//!
//! Layout (PCIe base spec): standard header 0x00-0x3f; capability list from the pointer at 0x34
//! (id at +0, next at +1; PCI Express capability id 0x10, its Capabilities register at +2 holds the
//! device/port type in bits 7:4). Extended capabilities start at 0x100, each with a 32-bit header
//! `id[15:0] | version[19:16] | next[31:20]`; ACS is id 0x000D, its Capability register at +4 and
//! Control register at +6. Without CAP_SYS_ADMIN the kernel returns only the first 64 bytes.

use std::collections::BTreeSet;

use serde::Serialize;

use super::finding::{ev, Evidence, Finding, Status};
use super::fs::{sys_name, Fs};
use super::pci::PciDevice;
use super::topology::PairInfo;

pub const EXT_CAP_ACS: u16 = 0x000d;
pub const CAP_PCIE: u8 = 0x10;

pub const ACS_SV: u16 = 0x01;
pub const ACS_TB: u16 = 0x02;
pub const ACS_RR: u16 = 0x04;
pub const ACS_CR: u16 = 0x08;
pub const ACS_UF: u16 = 0x10;
pub const ACS_EC: u16 = 0x20;
pub const ACS_DT: u16 = 0x40;

const BITS: [(u16, &str); 7] = [
    (ACS_SV, "SV"),
    (ACS_TB, "TB"),
    (ACS_RR, "RR"),
    (ACS_CR, "CR"),
    (ACS_UF, "UF"),
    (ACS_EC, "EC"),
    (ACS_DT, "DT"),
];

/// Names of the ACS bits set in `v` (`SV RR CR UF`).
pub fn bit_names(v: u16) -> String {
    let names: Vec<&str> = BITS.iter().filter(|(b, _)| v & b != 0).map(|(_, n)| *n).collect();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(" ")
    }
}

/// What the config space says about ACS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcsRead {
    /// Only the 64-byte header was readable (not root): unknown.
    NeedsRoot {
        readable: usize,
    },
    /// No extended config space (conventional PCI, or a 256-byte config): no ACS.
    NoExtendedSpace {
        readable: usize,
    },
    /// Extended space readable, no ACS capability in the chain.
    Absent,
    Present {
        offset: u16,
        cap: u16,
        ctl: u16,
    },
}

fn u16_at(cfg: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*cfg.get(off)?, *cfg.get(off + 1)?]))
}

fn u32_at(cfg: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes([*cfg.get(off)?, *cfg.get(off + 1)?, *cfg.get(off + 2)?, *cfg.get(off + 3)?]))
}

/// Walks the extended capability chain from 0x100 for `id`. Stops on a zero/all-ones header, a
/// pointer back into the standard space, a loop, or the end of what was read.
pub fn find_ext_cap(cfg: &[u8], id: u16) -> Option<u16> {
    let mut off = 0x100usize;
    let mut seen = BTreeSet::new();
    while off >= 0x100 && seen.insert(off) {
        let hdr = u32_at(cfg, off)?;
        if hdr == 0 || hdr == 0xffff_ffff {
            return None;
        }
        if (hdr & 0xffff) as u16 == id {
            return Some(off as u16);
        }
        off = ((hdr >> 20) & 0xffc) as usize;
    }
    None
}

/// Parses ACS from raw config bytes.
pub fn read_acs(cfg: &[u8]) -> AcsRead {
    if cfg.len() <= 64 {
        return AcsRead::NeedsRoot { readable: cfg.len() };
    }
    if cfg.len() <= 0x100 {
        return AcsRead::NoExtendedSpace { readable: cfg.len() };
    }
    match find_ext_cap(cfg, EXT_CAP_ACS) {
        None => AcsRead::Absent,
        Some(off) => match (u16_at(cfg, off as usize + 4), u16_at(cfg, off as usize + 6)) {
            (Some(cap), Some(ctl)) => AcsRead::Present { offset: off, cap, ctl },
            _ => AcsRead::Absent,
        },
    }
}

/// PCIe device/port type from the PCI Express capability (needs more than the 64-byte header).
pub fn port_type(cfg: &[u8]) -> Option<&'static str> {
    let status = u16_at(cfg, 0x06)?;
    if status & 0x10 == 0 {
        return None;
    }
    let mut ptr = (*cfg.get(0x34)? & 0xfc) as usize;
    let mut seen = BTreeSet::new();
    while ptr >= 0x40 && seen.insert(ptr) {
        if *cfg.get(ptr)? == CAP_PCIE {
            let caps = u16_at(cfg, ptr + 2)?;
            return Some(match (caps >> 4) & 0xf {
                0 => "endpoint",
                1 => "legacy endpoint",
                4 => "root port",
                5 => "switch upstream port",
                6 => "switch downstream port",
                7 => "PCIe-to-PCI bridge",
                8 => "PCI-to-PCIe bridge",
                9 => "integrated endpoint",
                10 => "event collector",
                _ => "unknown port type",
            });
        }
        ptr = (*cfg.get(ptr + 1)? & 0xfc) as usize;
    }
    None
}

/// How one port's ACS affects P2P, and its evidence line.
fn judge(cfg: &std::io::Result<Vec<u8>>) -> (Status, String) {
    let cfg = match cfg {
        Ok(c) => c,
        Err(e) => return (Status::Unknown, format!("config unreadable ({e}): ACS unknown — needs root")),
    };
    let kind = port_type(cfg).map_or(String::new(), |k| format!("{k}, "));
    match read_acs(cfg) {
        AcsRead::NeedsRoot { readable } => {
            (Status::Unknown, format!("only {readable} bytes of config readable: ACS unknown — needs root"))
        }
        AcsRead::NoExtendedSpace { readable } => {
            (Status::Pass, format!("{kind}{readable}-byte config, no extended space: no ACS"))
        }
        AcsRead::Absent => (Status::Pass, format!("{kind}no ACS capability")),
        AcsRead::Present { offset, cap, ctl } => {
            let mut line =
                format!("{kind}ACS@0x{offset:03x} cap 0x{cap:04x} ctl 0x{ctl:04x} [{}]", bit_names(ctl));
            let status = if ctl & (ACS_RR | ACS_CR) != 0 {
                line.push_str(": redirects peer-to-peer to the root complex");
                Status::Fail
            } else if ctl & ACS_EC != 0 {
                line.push_str(": egress control may block peer-to-peer");
                Status::Warn
            } else {
                Status::Pass
            };
            (status, line)
        }
    }
}

/// What ACS does to peer-to-peer on one device pair's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AcsState {
    /// No redirect or egress control on the ports that decide the path.
    Off,
    /// Request or Completion Redirect (RR/CR): P2P goes up to the root complex.
    Redirect,
    /// Egress control (EC) set: P2P may be blocked.
    EgressControl,
    /// Config space not readable far enough (not root), or a port without config.
    Unknown,
    /// The pair meets only at the root complex (PHB, NODE, SYS): no switch port between them.
    NotOnPath,
}

impl AcsState {
    pub fn as_str(self) -> &'static str {
        match self {
            AcsState::Off => "off",
            AcsState::Redirect => "redirect",
            AcsState::EgressControl => "egress-control",
            AcsState::Unknown => "unknown",
            AcsState::NotOnPath => "not-on-path",
        }
    }
}

impl std::fmt::Display for AcsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// ACS on `ports` (a pair's [`PathInfo::ports`](super::pci::PathInfo), the ports just below the
/// lowest common bridge), judged as [`finding`] judges them, with one evidence line per port.
pub fn path_state(fs: &Fs, ports: &[String]) -> (AcsState, Vec<Evidence>) {
    if ports.is_empty() {
        return (AcsState::NotOnPath, Vec::new());
    }
    let mut status = Status::Pass;
    let mut evidence = Vec::new();
    for port in ports {
        let rel = format!("bus/pci/devices/{port}/config");
        let (s, line) = judge(&fs.read_sys_bytes(&rel));
        status = status.worst(s);
        evidence.push(ev(sys_name(&rel), line));
    }
    let state = match status {
        Status::Fail => AcsState::Redirect,
        Status::Warn => AcsState::EgressControl,
        Status::Pass | Status::NotApplicable => AcsState::Off,
        Status::Unknown => AcsState::Unknown,
    };
    (state, evidence)
}

/// ACS on the bridges of each GPU's nearest-NIC path. RR/CR on the ports just below the common
/// switch fail; EC warns; SV, UF, TB, DT are recorded only (they do not reroute P2P).
pub fn finding(fs: &Fs, gpus: &[&PciDevice], pairs: &[PairInfo]) -> Finding {
    if gpus.is_empty() || pairs.is_empty() {
        return Finding::new("acs", Status::NotApplicable, "no GPU–NIC pair: ACS does not matter here");
    }
    let nearest: Vec<&PairInfo> = pairs.iter().filter(|p| p.nearest).collect();
    let judged: BTreeSet<&str> =
        nearest.iter().flat_map(|p| p.path.ports.iter().map(String::as_str)).collect();
    let mut shown = BTreeSet::new();
    let mut status = Status::Pass;
    let mut evidence = Vec::new();
    let mut redirecting = Vec::new();
    for p in &nearest {
        for bridge in &p.path.bridges {
            if !shown.insert(bridge.clone()) {
                continue;
            }
            let rel = format!("bus/pci/devices/{bridge}/config");
            let (s, line) = judge(&fs.read_sys_bytes(&rel));
            if judged.contains(bridge.as_str()) {
                status = status.worst(s);
                if s == Status::Fail {
                    redirecting.push((bridge.clone(), format!("GPU {} ↔ {}", p.gpu_index, p.ib_device)));
                }
                evidence.push((s != Status::Fail, ev(sys_name(&rel), line)));
            } else {
                evidence.push((
                    true,
                    ev(sys_name(&rel), format!("{line} (not between the pair: informational)")),
                ));
            }
        }
    }
    // Redirecting ports first.
    evidence.sort_by_key(|(benign, _)| *benign);
    let evidence: Vec<_> = evidence.into_iter().map(|(_, e)| e).collect();
    let summary = match status {
        _ if judged.is_empty() => {
            "nearest GPU–NIC pairs meet only at the root complex: ACS does not change their path".to_string()
        }
        Status::Pass => {
            format!("ACS leaves peer-to-peer alone on {} switch port(s) between GPUs and NICs", judged.len())
        }
        Status::Fail => {
            let pairs: BTreeSet<&str> = redirecting.iter().map(|(_, p)| p.as_str()).collect();
            format!(
                "ACS redirect (RR/CR) on {} port(s) between {} GPU–NIC pair(s), e.g. {} ({})",
                redirecting.len(),
                pairs.len(),
                redirecting[0].0,
                redirecting[0].1
            )
        }
        Status::Warn => "ACS egress control set on a port between a GPU and its NIC".to_string(),
        _ => "ACS unknown — needs root (only 64 bytes of config space are readable)".to_string(),
    };
    let f = Finding::new("acs", status, summary).evidence(evidence);
    match status {
        Status::Fail | Status::Warn => f.hint(
            "P2P requests go up to the root complex instead of across the switch. On bare metal clear \
             ACS on these ports (setpci -s <port> ECAP_ACS+0x6.w=0000, or the BIOS option); in a VM \
             keep ACS and enable ATS on the NIC instead",
        ),
        Status::Unknown => f.hint("run as root: the extended config space needs CAP_SYS_ADMIN"),
        _ => f,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg_with_chain(chain: &[(usize, u16, usize)], acs_ctl: u16) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        for &(off, id, next) in chain {
            let hdr = id as u32 | (1 << 16) | ((next as u32) << 20);
            c[off..off + 4].copy_from_slice(&hdr.to_le_bytes());
            if id == EXT_CAP_ACS {
                c[off + 4..off + 6].copy_from_slice(&0x7fu16.to_le_bytes());
                c[off + 6..off + 8].copy_from_slice(&acs_ctl.to_le_bytes());
            }
        }
        c
    }

    #[test]
    fn walks_the_chain_to_acs() {
        let c =
            cfg_with_chain(&[(0x100, 0x0001, 0x1c0), (0x1c0, 0x0019, 0x220), (0x220, EXT_CAP_ACS, 0)], 0x1d);
        assert_eq!(read_acs(&c), AcsRead::Present { offset: 0x220, cap: 0x7f, ctl: 0x1d });
        assert_eq!(bit_names(0x1d), "SV RR CR UF");
    }

    #[test]
    fn short_missing_and_looping_configs() {
        assert_eq!(read_acs(&[0u8; 64]), AcsRead::NeedsRoot { readable: 64 });
        assert_eq!(read_acs(&[0u8; 256]), AcsRead::NoExtendedSpace { readable: 256 });
        assert_eq!(read_acs(&[0u8; 4096]), AcsRead::Absent);
        let looped = cfg_with_chain(&[(0x100, 0x0001, 0x140), (0x140, 0x0002, 0x100)], 0);
        assert_eq!(read_acs(&looped), AcsRead::Absent);
        let back = cfg_with_chain(&[(0x100, 0x0001, 0x40)], 0);
        assert_eq!(read_acs(&back), AcsRead::Absent);
        // Chain pointing past what was read.
        let mut trunc = cfg_with_chain(&[(0x100, 0x0001, 0xffc)], 0);
        trunc.truncate(0x200);
        assert_eq!(read_acs(&trunc), AcsRead::Absent);
    }

    #[test]
    fn port_type_from_pcie_capability() {
        let mut c = vec![0u8; 256];
        c[0x06] = 0x10;
        c[0x34] = 0x40;
        c[0x40] = 0x01; // power management
        c[0x41] = 0x60;
        c[0x60] = CAP_PCIE;
        c[0x62..0x64].copy_from_slice(&(0x0002u16 | (6 << 4)).to_le_bytes());
        assert_eq!(port_type(&c), Some("switch downstream port"));
        assert_eq!(port_type(&c[..64]), None);
    }
}
