//! What a storage report is made of (per process, per file, bytes by verdict), apart from how
//! `aggregate.rs` builds it, so the hints and the sinks read it without importing the builder.

use std::collections::BTreeMap;

use gdr_trace_common::storage::{SIZE_BUCKETS, SIZE_BUCKET_SHIFT};
use serde::{Deserialize, Serialize};

use super::{classify::StorageVerdict, gds_mode::GdsMode};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileReport {
    pub pid: u32,
    pub comm: String,
    /// Absolute when it could be learnt; else as opened, or "dev MAJ:MIN inode N".
    pub path: String,
    pub dev: String,
    pub ino: u64,
    pub reads: u64,
    pub bytes_read: u64,
    /// Reads that continued where the previous one ended.
    pub seq_reads: u64,
    pub read_errors: u64,
    pub writes: u64,
    pub bytes_written: u64,
    /// Of the reads, those completed through io_uring (position unknown: not in `seq_reads`).
    pub io_uring_reads: u64,
    /// All its POSIX I/O went through descriptors opened O_DIRECT.
    pub direct: bool,
    /// Bytes read and written with O_DIRECT (the rest went through the page cache).
    pub direct_bytes: u64,
    /// Reads and writes with O_DIRECT.
    #[serde(skip)]
    pub direct_calls: u64,
    /// Pages this process added to the page cache for this file (reads, readahead, buffered
    /// writes of new pages, page faults).
    pub pages_filled: u64,
    /// Of those, the pages added inside its read system calls.
    pub read_pages_filled: u64,
    /// 1 - bytes filled by reads / bytes read through the page cache (None: nothing read).
    pub cache_hit_ratio: Option<f64>,
    /// Bytes read through the page cache (not O_DIRECT).
    #[serde(skip)]
    pub cached_read: u64,
    /// The pages counted as filled by reads for the hit ratio (see `read_fills`).
    #[serde(skip)]
    pub hit_fills: u64,
    /// Read sizes: bucket label -> reads ("4KiB" counts reads of 4-8 KiB).
    pub read_size_hist: BTreeMap<String, u64>,
    /// cuFile bytes on this file by verdict, and bytes nvidia-fs reported.
    pub gds_bytes: BTreeMap<StorageVerdict, u64>,
    pub nvfs_bytes: u64,
    /// page-cache (some POSIX I/O went through the page cache), direct (all of it O_DIRECT), or
    /// gds-nvfs (no POSIX I/O: only nvidia-fs touched it).
    pub verdict: StorageVerdict,
    /// cuFile's mode on this file (`gds_mode`); None: cuFile did not use it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gds_mode: Option<GdsMode>,
    /// Why cuFile fell back to compatibility mode on it (`gds_mode::CompatReason::id`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compat_reason: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct VerdictBytes {
    pub calls: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct UringUnattributed {
    pub reads: u64,
    pub bytes_read: u64,
    pub writes: u64,
    pub bytes_written: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcReport {
    pub pid: u32,
    pub comm: String,
    pub exited: bool,
    /// The final report of a process that exited, kept for the summaries after its state was
    /// dropped: already reported, its growth already counted (metrics skip it).
    #[serde(skip)]
    pub archived: bool,
    /// cuFile data bytes (gds-nvfs, gds-compat) and POSIX bytes read+written (page-cache,
    /// direct). cuFile's compatibility-mode I/O is in both: it *is* POSIX I/O.
    pub bytes_by_verdict: BTreeMap<StorageVerdict, VerdictBytes>,
    pub cufile_calls: u64,
    pub cufile_driver_opens: u64,
    /// Data-moving cuFile calls with no I/O seen, on their thread or by the library's workers.
    pub cufile_unclassified: u64,
    /// I/O of libcufile's worker threads on cuFile descriptors that no call took
    /// (`storage::attribute`): `calls` I/Os, `bytes`.
    #[serde(default)]
    pub cufile_worker_unattributed: VerdictBytes,
    /// Files cuFile read or wrote through POSIX on a descriptor without O_DIRECT.
    pub cufile_compat_not_direct: Vec<String>,
    pub nvfs_ios: u64,
    pub nvfs_dma_bytes: u64,
    /// io_uring reads and writes on registered (fixed) files: real I/O that no file is
    /// credited with (io_uring names no descriptor for them).
    pub io_uring_unattributed: UringUnattributed,
    pub bytes_read: u64,
    pub reads: u64,
    pub seq_reads: u64,
    /// Of the reads, those through io_uring (position unknown: neither sequential nor random).
    pub io_uring_reads: u64,
    pub pages_filled: u64,
    pub read_pages_filled: u64,
    pub cache_hit_ratio: Option<f64>,
    pub read_size_hist: BTreeMap<String, u64>,
    /// Files by bytes moved, most first.
    pub files: Vec<FileReport>,
    /// Closed files not listed in `files` (a running process keeps its largest closed files;
    /// the rest are summed): their bytes, reads and fills are in the totals above.
    #[serde(default)]
    pub files_folded: u64,
    /// cuFile's mode for most of its cuFile bytes; None without cuFile data I/O.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gds_mode: Option<GdsMode>,
    /// Every reason cuFile fell back to compatibility mode, over its files and configuration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compat_reason: Vec<String>,
    /// Bytes read through the page cache, and pages filled by reads, over every file (listed
    /// or folded): the cache-hit series.
    #[serde(skip)]
    pub cached_read: u64,
    #[serde(skip)]
    pub hit_fills: u64,
    pub hints: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StorageReport {
    pub procs: Vec<ProcReport>,
}

impl ProcReport {
    /// Whether it used cuFile or nvidia-fs: its files are what GDS is about, so every view
    /// lists them, not only `--files`.
    pub fn uses_gds(&self) -> bool {
        self.cufile_calls + self.nvfs_ios > 0
    }
}

impl StorageReport {
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }
}

/// The label of histogram bucket `i` (its lower bound): "<1KiB", "1KiB", ..., "16MiB+".
pub fn bucket_label(i: usize) -> String {
    if i == 0 {
        return "<1KiB".into();
    }
    let bytes = 1u64 << (i as u32 + SIZE_BUCKET_SHIFT);
    let s = if bytes >= 1 << 20 { format!("{}MiB", bytes >> 20) } else { format!("{}KiB", bytes >> 10) };
    if i == SIZE_BUCKETS - 1 {
        format!("{s}+")
    } else {
        s
    }
}
