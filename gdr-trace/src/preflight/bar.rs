//! BAR1 (the window through which a NIC reaches GPU memory) and PCIe link width.
//!
//! `/sys/bus/pci/devices/X/resource` has one line per resource, `start end flags` in hex; line N
//! is BARN (a 64-bit BAR takes two BAR slots, so a GPU's BAR1 is line 1 and line 2 is zero).
//! `resourceN_resize` exists for resizable BARs: a hex mask, bit n = 2^(n+20) bytes supported.

use super::finding::{ev, Finding, Status};
use super::fs::{sys_name, Fs};
use super::modules::Modules;
use super::pci::PciDevice;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// Sizes of each resource line (0 for an unused one). Malformed lines give `None`.
pub fn parse_resource(text: &str) -> Vec<Option<u64>> {
    text.lines()
        .map(|l| {
            let mut it =
                l.split_whitespace().map(|t| u64::from_str_radix(t.trim_start_matches("0x"), 16).ok());
            let (start, end) = (it.next()??, it.next()??);
            Some(if end > start { end - start + 1 } else { 0 })
        })
        .collect()
}

/// Memory of GPUs whose PCI device id says it (the H100/A100 SXM and PCIe parts); others unknown.
pub fn known_memory(device: u16) -> Option<u64> {
    match device {
        0x2330 | 0x2331 => Some(80 * GIB), // H100 SXM5 / PCIe 80GB
        0x20b0 | 0x20f1 => Some(40 * GIB), // A100 SXM4 / PCIe 40GB
        0x20b2 | 0x20b5 => Some(80 * GIB), // A100 SXM4 / PCIe 80GB
        _ => None,
    }
}

pub fn human(bytes: u64) -> String {
    if bytes >= GIB && bytes.is_multiple_of(GIB) {
        format!("{} GiB", bytes / GIB)
    } else if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else {
        format!("{} MiB", bytes / MIB)
    }
}

pub fn bar1_finding(fs: &Fs, gpus: &[&PciDevice], m: &Modules) -> Finding {
    if gpus.is_empty() {
        return Finding::new("bar1", Status::NotApplicable, "no NVIDIA GPU");
    }
    let mut status = Status::Pass;
    let mut evidence = Vec::new();
    let mut small = Vec::new();
    let mut sizes = Vec::new();
    for (i, g) in gpus.iter().enumerate() {
        let rel = g.rel("resource");
        let Some(text) = fs.sys_opt(&rel) else {
            status = status.worst(Status::Unknown);
            evidence.push(ev(sys_name(&rel), "unreadable"));
            continue;
        };
        let Some(Some(bar1)) = parse_resource(&text).get(1).copied() else {
            status = status.worst(Status::Unknown);
            evidence.push(ev(sys_name(&rel), "no BAR1 line"));
            continue;
        };
        let mem = known_memory(g.device);
        let resize = fs.sys_opt(&g.rel("resource1_resize"));
        let mut line = format!("GPU {i} BAR1 {}", human(bar1));
        if let Some(mem) = mem {
            line.push_str(&format!(" for {} of memory", human(mem)));
        }
        line.push_str(&match &resize {
            Some(mask) => format!("; resizable BAR (resource1_resize {mask})"),
            None => "; not resizable".to_string(),
        });
        let too_small = match mem {
            Some(mem) => bar1 < mem,
            None => bar1 < GIB,
        };
        if too_small {
            status = status.worst(Status::Warn);
            small.push(format!("GPU {i} ({}) {}", g.bdf, human(bar1)));
        }
        sizes.push(bar1);
        evidence.push(ev(sys_name(&rel), line));
    }
    if let Some(v) = &m.nvidia_version {
        evidence.push(ev(sys_name("module/nvidia/version"), v.clone()));
    }
    let f = Finding::new(
        "bar1",
        status,
        match status {
            Status::Warn => format!(
                "small BAR1: {}; only that much GPU memory can be mapped for the NIC at once",
                small.join(", ")
            ),
            Status::Pass => format!(
                "BAR1 {} on every GPU: GPU memory can be exposed to the NIC",
                sizes.iter().min().map_or("?".into(), |s| human(*s))
            ),
            _ => "BAR1 size could not be read for every GPU".to_string(),
        },
    )
    .evidence(evidence);
    if status == Status::Warn {
        f.hint("enable Resizable BAR / 'Above 4G decoding' in the BIOS (or switch the GPU's BAR1 mode); large NCCL buffers otherwise fail to register or fall back to host memory")
    } else {
        f
    }
}

/// Negotiated link width below the maximum on a GPU or RDMA NIC (speed is not judged: idle GPUs
/// drop their link speed to save power).
pub fn link_finding(gpus: &[&PciDevice], nics: &[&PciDevice], fs: &Fs) -> Finding {
    if gpus.is_empty() {
        return Finding::new("link", Status::NotApplicable, "no NVIDIA GPU");
    }
    let mut evidence = Vec::new();
    let mut narrow = Vec::new();
    let mut seen = 0;
    for d in gpus.iter().chain(nics.iter().filter(|n| n.is_rdma())) {
        let read = |f: &str| fs.sys_opt(&d.rel(f));
        let (Some(cw), Some(mw)) = (read("current_link_width"), read("max_link_width")) else {
            continue;
        };
        seen += 1;
        let speed = read("current_link_speed").unwrap_or_default();
        let max_speed = read("max_link_speed").unwrap_or_default();
        let line = format!("x{cw} of x{mw}, {speed} (max {max_speed})");
        if cw.parse::<u32>().ok() < mw.parse::<u32>().ok() {
            narrow.push(format!("{} x{cw}/x{mw}", d.bdf));
        }
        evidence.push(ev(sys_name(&d.rel("current_link_width")), line));
    }
    let f = if seen == 0 {
        Finding::new("link", Status::Unknown, "no link width files (current_link_width) in this tree")
    } else if narrow.is_empty() {
        Finding::new("link", Status::Pass, format!("{seen} GPU/NIC link(s) at full width"))
    } else {
        Finding::new(
            "link",
            Status::Warn,
            format!("link narrower than the device supports: {}", narrow.join(", ")),
        )
        .hint("reseat the card or check the slot/riser: a narrow link caps GPUDirect bandwidth")
    };
    f.evidence(evidence)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_lines_give_sizes() {
        let text = "0x0000000090000000 0x0000000090ffffff 0x0000000000040200\n\
                    0x0000200000000000 0x0000201fffffffff 0x000000000014220c\n\
                    0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                    garbage\n";
        let s = parse_resource(text);
        assert_eq!(s[0], Some(16 * MIB));
        assert_eq!(s[1], Some(128 * GIB));
        assert_eq!(s[2], Some(0));
        assert_eq!(s[3], None);
        assert_eq!(human(256 * MIB), "256 MiB");
        assert_eq!(human(128 * GIB), "128 GiB");
    }
}
