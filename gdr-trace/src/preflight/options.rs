//! What `check` reads (roots, cufile.json) and under which NCCL settings it judges.

use std::path::PathBuf;

use super::level::GdrLevelSetting;

/// Where cufile.json comes from.
#[derive(Debug, Clone)]
pub enum CufileSource {
    /// `--cufile-json PATH`: must exist.
    Explicit(PathBuf),
    /// The first of these that exists (cuFile's own order: `$CUFILE_ENV_PATH_JSON`, then
    /// `/etc/cufile.json`); none existing is fine.
    Search(Vec<PathBuf>),
}

impl CufileSource {
    /// cuFile's default lookup, from the environment.
    pub fn default_search() -> Self {
        let mut paths = Vec::new();
        if let Some(p) = std::env::var_os("CUFILE_ENV_PATH_JSON") {
            paths.push(PathBuf::from(p));
        }
        paths.push(PathBuf::from("/etc/cufile.json"));
        CufileSource::Search(paths)
    }
}

/// What `check` reads and under which NCCL settings it judges.
#[derive(Debug, Clone)]
pub struct Options {
    pub sysfs_root: PathBuf,
    pub proc_root: PathBuf,
    pub gdr_level: GdrLevelSetting,
    pub cufile: CufileSource,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            sysfs_root: PathBuf::from("/sys"),
            proc_root: PathBuf::from("/proc"),
            gdr_level: GdrLevelSetting::default(),
            cufile: CufileSource::Search(Vec::new()),
        }
    }
}
