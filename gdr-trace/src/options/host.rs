//! Where process and machine facts come from (`audit`, `record`, `serve`), and the exit code
//! findings give under `--fail-on` (`audit`, `report`).

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use crate::{
    audit::{identity, Posture, Severity},
    exit, preflight,
};

/// Where process and machine facts come from (shared by `audit`, `record` and `serve`).
#[derive(Debug, Clone, clap::Args)]
pub struct HostArgs {
    /// User names from this passwd file (a DaemonSet mounts the host's).
    #[arg(long, value_name = "FILE", default_value = "/etc/passwd")]
    pub passwd: PathBuf,
    /// Rate the P2P posture (ACS, IOMMU) from this sysfs tree.
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// ... and this procfs tree.
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    pub proc_root: PathBuf,
}

impl HostArgs {
    pub fn posture(&self) -> Posture {
        let opts = preflight::Options {
            sysfs_root: self.sysfs_root.clone(),
            proc_root: self.proc_root.clone(),
            ..Default::default()
        };
        Posture::read(&opts)
    }

    pub fn resolver(&self) -> identity::Resolver {
        identity::Resolver::new(&self.passwd)
    }

    /// Signs that this machine runs containers (runtime sockets, Kubernetes cgroups).
    pub fn container_host_markers(&self) -> Vec<String> {
        identity::container_host_markers(Path::new("/"))
    }
}

/// The exit code for the worst finding under `--fail-on`.
pub fn exit_for(worst: Option<Severity>, fail_on: Option<Severity>) -> ExitCode {
    match (worst, fail_on) {
        (Some(w), Some(f)) if w >= f => ExitCode::from(exit::FINDING),
        _ => ExitCode::from(exit::OK),
    }
}
