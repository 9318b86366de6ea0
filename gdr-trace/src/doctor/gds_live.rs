//! `doctor` on a cuFile process: whether cuFile will fall back to compatibility mode, and why,
//! from the process as it sees itself (its cufile.json and environment through /proc/PID, its
//! mounts, nvidia-fs in its root) and the files it has open. The reasons are
//! `storage::gds_mode`'s; the live tracer's per-call modes are `watch`'s (`gds_io`).

use std::path::Path;

use super::builder::Builder;
use super::model::{CufileEvidence, LiveEvidence, Severity, Step};
use crate::{
    preflight::proc_gds::read_proc_facts,
    storage::{
        gds_facts::fstype_of_dev,
        gds_mode::{compat_reasons, fs_support, reason_ids, FallbackFacts, FsSupport},
    },
};

/// st_dev (glibc's encoding) -> (major, minor).
fn split_dev(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major as u32, minor as u32)
}

/// Reads the evidence of `pid` under `proc_root` and `sys_root`; None when it maps no libcufile.
pub fn read(proc_root: &Path, sys_root: &Path, pid: u32) -> Option<CufileEvidence> {
    let dir = proc_root.join(pid.to_string());
    let maps = std::fs::read_to_string(dir.join("maps")).ok()?;
    let library = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.rsplit('/').next().is_some_and(|n| n.starts_with("libcufile.so")))?
        .to_string();
    let facts = read_proc_facts(proc_root, sys_root, pid);
    let reasons = compat_reasons(&FallbackFacts {
        config: Some(&facts.config.effective),
        nvidia_fs: facts.nvidia_fs,
        kernel_p2pdma: facts.p2pdma(),
        ..Default::default()
    });
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir.join("fd")).into_iter().flatten().flatten() {
        let Ok(target) = std::fs::read_link(e.path()) else { continue };
        let Ok(md) = std::fs::metadata(e.path()) else { continue };
        if !md.is_file() {
            continue;
        }
        let (ma, mi) = split_dev(std::os::unix::fs::MetadataExt::dev(&md));
        if let Some(fs) = fstype_of_dev(&facts.mounts, ma, mi) {
            if fs_support(fs) == FsSupport::CompatOnly {
                files.push(format!("{} ({fs})", target.display()));
            }
        }
    }
    files.sort();
    files.dedup();
    Some(CufileEvidence {
        library,
        config_file: facts.config.file.clone(),
        config_error: facts.config.error.clone(),
        compat_reason: reason_ids(&reasons),
        why: reasons.iter().map(|r| r.explain()).collect(),
        compat_only_files: files,
    })
}

impl Builder {
    /// A compat-mode cuFile process, explained.
    pub(super) fn live_gds(&mut self, live: &LiveEvidence) {
        let Some(c) = &live.cufile else { return };
        let who = format!("PID {}", live.pid);
        let cfg = c.config_file.as_deref().unwrap_or("no cufile.json (cuFile defaults)");
        self.step(Step::Live, vec![format!("{who} maps {} and reads {cfg}", c.library)]);
        if let Some(e) = &c.config_error {
            let fix = Some("fix the file: cuFile ignores a cufile.json it cannot parse");
            self.problem(
                Severity::Medium,
                Step::Live,
                format!("{who}'s cuFile configuration: {e}"),
                vec![],
                fix,
            );
        }
        if !c.why.is_empty() {
            self.problem(
                Severity::High,
                Step::Live,
                format!("every cuFile call of {who} goes through compatibility mode: {}", c.why.join("; ")),
                c.compat_reason.clone(),
                Some("load nvidia-fs and expose /dev/nvidia-fs* to the process (or use PCI P2PDMA), and set force_compat_mode false"),
            );
        }
        if !c.compat_only_files.is_empty() {
            self.problem(
                Severity::Medium,
                Step::Live,
                format!("{who} has files open on filesystems with no GPUDirect path: cuFile I/O on them is compatibility mode"),
                c.compat_only_files.iter().take(8).cloned().collect(),
                Some("put the data on ext4/XFS on NVMe or a GDS-enabled distributed filesystem"),
            );
        }
    }
}

#[cfg(test)]
mod tests;
