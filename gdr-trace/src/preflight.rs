//! Preflight: the machine's GPUDirect prerequisites, read from sysfs and procfs only.
//!
//! Everything here is a pure function of a root-relative tree (`--sysfs-root`, `--proc-root`), so
//! a captured tree (tests/fixtures/preflight/*) gives the same answers as the live machine.
//! Evidence paths are logical (`/sys/...`, `/proc/...`); the report names the roots they were
//! read under.
//!
//! Layout: [`fs`] reads the tree, [`pci`] builds the device tree and distance classes, [`acs`]
//! parses config space, [`gpu_pairs`] places GPU↔GPU pairs (with [`nvlink`] from NVML, the one
//! source outside the tree: asked only for the live /sys), [`iommu`], [`modules`] (peermem, dma-buf, driver versions), [`bar`] (BAR1,
//! link width), [`peer_mapping`] (nvidia.ko's PeerMappingOverride for GPU-initiated networking), [`gds`] (nvidia-fs, cufile.json), [`gds_mounts`] (cuFile's modes per mount) each turn facts into [`Finding`]s, [`report`]
//! renders them.

pub mod acs;
pub mod bar;
pub mod finding;
pub mod fs;
pub mod gds;
pub mod gds_mounts;
pub mod gpu_pairs;
pub mod iommu;
pub mod level;
pub mod modules;
pub mod nvlink;
pub mod options;
pub mod pci;
pub mod peer_mapping;
pub mod proc_gds;
pub mod report;
pub mod topology;

use std::path::Path;

pub use finding::{Evidence, Finding, Status};
pub use fs::{Fs, PreflightError};
pub use gpu_pairs::GpuPair;
pub use level::{GdrLevel, GdrLevelSetting, LevelSource};
pub use options::{CufileSource, Options};
pub use pci::{Distance, PciTree};
pub use report::{GpuInfo, NicInfo, PreflightReport};
pub use topology::PairInfo;

/// Runs every preflight check. An `Err` means the tree could not be read at all (exit 2).
pub fn run(opts: &Options) -> Result<PreflightReport, PreflightError> {
    let fs = Fs::new(&opts.sysfs_root, &opts.proc_root)?;
    let tree = pci::scan(&fs)?;
    let gpus = tree.gpus();
    let nics = tree.nics();
    let level = &opts.gdr_level;

    let pairs = topology::all_pairs(&gpus, &nics, level.level);
    let nvlink = nvlink_table(opts, &gpus);
    let gpu_pairs = gpu_pairs::all(&fs, &gpus, &nvlink);
    let modules = modules::read(&fs);
    let iommu_state = iommu::read(&fs);
    let cufile = gds::read_cufile(&opts.cufile)?;

    let mut findings = vec![
        topology::gpus_finding(&tree, &gpus),
        topology::nics_finding(&gpus, &nics),
        modules::driver_finding(&modules, &gpus),
    ];
    findings.extend(modules::gdr_memory_findings(&modules, &gpus, &nics));
    findings.push(modules::versions_finding(&modules, &gpus));
    findings.push(topology::topology_finding(&gpus, &pairs, level));
    findings.push(acs::finding(&fs, &gpus, &pairs));
    findings.push(gpu_pairs::finding(&fs, &gpu_pairs, &nvlink));
    findings.push(iommu::finding(&iommu_state, &gpus, &nics));
    findings.push(bar::bar1_finding(&fs, &gpus, &modules));
    findings.push(bar::link_finding(&gpus, &nics, &fs));
    findings.push(gds::finding(&fs, &modules, &cufile, &gpus));
    findings.push(gds_mounts::finding(&fs, &modules, !gpus.is_empty()));
    findings.push(peer_mapping::finding(&fs, &modules, &gpus, &nics));

    Ok(report::build(opts, &gpus, &nics, pairs, gpu_pairs, findings))
}

/// NVLink from NVML for the live machine; for a captured tree NVML would describe the wrong
/// machine, so there it is unknown.
fn nvlink_table(opts: &Options, gpus: &[&pci::PciDevice]) -> nvlink::NvlinkTable {
    if gpus.len() < 2 {
        return nvlink::NvlinkTable::unknown("fewer than two GPUs");
    }
    if opts.sysfs_root != Path::new("/sys") {
        return nvlink::NvlinkTable::unknown(format!(
            "not asked: {} is a captured tree and NVML describes this machine",
            opts.sysfs_root.display()
        ));
    }
    let bdfs: Vec<&str> = gpus.iter().map(|g| g.bdf.as_str()).collect();
    nvlink::probe(&bdfs)
}
