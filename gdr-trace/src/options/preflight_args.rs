//! Where preflight reads from and what NCCL setting it judges with (`check`, `doctor`), and
//! running it as a command does.

use std::path::{Path, PathBuf};

use crate::exit::Fatal;
use crate::preflight::{self, CufileSource, GdrLevel, GdrLevelSetting, Options, PreflightReport};

/// Where to read from and what NCCL setting to judge with (shared by `check` and `doctor`).
#[derive(Debug, Clone, clap::Args)]
pub struct PreflightArgs {
    /// Read sysfs from this directory instead of /sys (e.g. a captured tree).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// Read procfs from this directory instead of /proc.
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    pub proc_root: PathBuf,
    /// Judge GPU–NIC pairs with this NCCL_NET_GDR_LEVEL (LOC, PIX, PXB, PHB, SYS or 0-4)
    /// [default: $NCCL_NET_GDR_LEVEL, else NCCL's PXB].
    #[arg(long, value_name = "LEVEL", value_parser = GdrLevel::parse)]
    pub nccl_gdr_level: Option<GdrLevel>,
    /// cufile.json to check [default: $CUFILE_ENV_PATH_JSON, else /etc/cufile.json; with a
    /// --sysfs-root other than /sys, <that root>/../etc/cufile.json].
    #[arg(long, value_name = "PATH")]
    pub cufile_json: Option<PathBuf>,
}

impl PreflightArgs {
    /// The options `preflight::run` takes, resolving the GDR level from flag or environment.
    pub fn options(&self) -> anyhow::Result<Options> {
        let env = std::env::var("NCCL_NET_GDR_LEVEL").ok();
        let gdr_level = GdrLevelSetting::resolve(self.nccl_gdr_level.map(GdrLevel::as_str), env.as_deref())
            .map_err(Fatal::cannot_run)?;
        let cufile = match &self.cufile_json {
            Some(p) => CufileSource::Explicit(p.clone()),
            None => default_cufile(&self.sysfs_root),
        };
        Ok(Options {
            sysfs_root: self.sysfs_root.clone(),
            proc_root: self.proc_root.clone(),
            gdr_level,
            cufile,
        })
    }
}

/// cuFile's lookup order on this machine (`CUFILE_ENV_PATH_JSON`, then /etc/cufile.json); for a
/// captured tree `X/sys`, only `X/etc/cufile.json`: this process's environment describes this
/// machine, not the captured one.
fn default_cufile(sysfs_root: &Path) -> CufileSource {
    let mut paths = Vec::new();
    if sysfs_root == Path::new("/sys") {
        if let Some(p) = std::env::var_os("CUFILE_ENV_PATH_JSON") {
            paths.push(PathBuf::from(p));
        }
        paths.push(PathBuf::from("/etc/cufile.json"));
    } else if let Some(parent) = sysfs_root.parent() {
        paths.push(parent.join("etc/cufile.json"));
    }
    CufileSource::Search(paths)
}

/// Runs preflight; a tree that cannot be read is a `Fatal` with exit code 2.
pub fn preflight_report(args: &PreflightArgs) -> anyhow::Result<PreflightReport> {
    let opts = args.options()?;
    preflight::run(&opts).map_err(|e| Fatal::cannot_run(format!("check: {e}")).into())
}
