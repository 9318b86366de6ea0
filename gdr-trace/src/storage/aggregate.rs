//! Per-process storage reports: bytes by verdict, files, read sizes, hints. Built from the
//! state on demand (every summary interval and at the end).

use std::collections::BTreeMap;

use gdr_trace_common::storage::{SIZE_BUCKETS, SIZE_BUCKET_SHIFT};
use serde::{Deserialize, Serialize};

use super::{
    classify::{classify_file, hit_ratio, StorageVerdict},
    gds_mode::GdsMode,
    gds_report::{self, FileIn},
    hints,
    state::{FileRef, ProcState, StorageState},
};
use crate::events::storage::Counters;

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

fn hist_map(h: &[u64; SIZE_BUCKETS]) -> BTreeMap<String, u64> {
    h.iter().enumerate().filter(|(_, &n)| n > 0).map(|(i, &n)| (bucket_label(i), n)).collect()
}

pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as u64
    } else {
        4096
    }
}

fn dev_name(dev: u32) -> String {
    format!("{}:{}", dev >> 20, dev & 0xfffff)
}

fn file_report(pid: u32, comm: &str, fref: &FileRef, f: &super::state::FileState, page: u64) -> FileReport {
    let c: Counters = f.counters();
    let posix = c.bytes_read + c.bytes_written;
    let d = f.direct();
    let direct_bytes = d.bytes_read + d.bytes_written;
    let verdict = if posix == 0 && (f.nvfs_bytes > 0 || f.gds_bytes.contains_key(&StorageVerdict::GdsNvfs)) {
        StorageVerdict::GdsNvfs
    } else if posix == 0 {
        classify_file(f.id.f_flags)
    } else if direct_bytes >= posix {
        StorageVerdict::Direct
    } else {
        StorageVerdict::PageCache
    };
    // Reads through the page cache, for the hit ratio (direct reads neither hit nor fill).
    let cached_read = c.bytes_read.saturating_sub(d.bytes_read);
    let hit_fills = read_fills(&c, f);
    let (dev, ino) = match fref {
        FileRef::Inode { dev, ino } => (*dev, *ino),
        FileRef::Fd(_) => (f.id.dev, f.id.ino),
    };
    let path = f.path.clone().unwrap_or_else(|| match fref {
        FileRef::Inode { .. } => format!("dev {} inode {ino}", dev_name(dev)),
        FileRef::Fd(fd) => format!("fd {fd}"),
    });
    FileReport {
        pid,
        comm: comm.to_string(),
        path,
        dev: dev_name(dev),
        ino,
        reads: c.reads,
        bytes_read: c.bytes_read,
        seq_reads: c.seq_reads,
        read_errors: c.read_errors,
        writes: c.writes,
        bytes_written: c.bytes_written,
        io_uring_reads: c.uring_reads,
        direct: verdict == StorageVerdict::Direct,
        direct_bytes,
        direct_calls: d.reads + d.writes,
        pages_filled: f.pages_filled,
        read_pages_filled: f.read_pages_filled,
        cache_hit_ratio: hit_ratio(cached_read, hit_fills, page),
        cached_read,
        hit_fills,
        read_size_hist: hist_map(&c.read_hist),
        gds_bytes: f.gds_bytes.clone(),
        nvfs_bytes: f.nvfs_bytes,
        verdict,
        gds_mode: None,
        compat_reason: Vec::new(),
    }
}

/// Pages filled by reads. The kernel tells fills inside read system calls from the rest
/// (buffered writes of new pages, faults); io_uring reads fill outside any read system call, so
/// for a file read through io_uring and never written, every fill counts as a read's.
fn read_fills(c: &Counters, f: &super::state::FileState) -> u64 {
    if c.uring_reads > 0 && c.writes == 0 {
        f.pages_filled.max(f.read_pages_filled)
    } else {
        f.read_pages_filled
    }
}

fn proc_report(pid: u32, p: &ProcState, page: u64) -> Option<ProcReport> {
    let mut files: Vec<FileReport> = p
        .files
        .iter()
        .map(|(r, f)| file_report(pid, &p.comm, r, f, page))
        .filter(|f| {
            f.reads + f.writes + f.read_errors + f.pages_filled + f.nvfs_bytes > 0 || !f.gds_bytes.is_empty()
        })
        .collect();
    let l = p.uring_loose;
    let loose = UringUnattributed {
        reads: l.reads,
        bytes_read: l.bytes_read,
        writes: l.writes,
        bytes_written: l.bytes_written,
    };
    // The folded files, as one (not listed: only in the totals).
    let folded = (p.folded.files > 0)
        .then(|| file_report(pid, &p.comm, &FileRef::Fd(u32::MAX), &p.folded.totals, page));
    if files.is_empty()
        && folded.is_none()
        && p.gds.calls == 0
        && p.gds.nvfs_ios == 0
        && loose == UringUnattributed::default()
    {
        return None;
    }
    files.sort_by(|a, b| {
        let size = |f: &FileReport| f.bytes_read + f.bytes_written + f.gds_bytes.values().sum::<u64>();
        size(b).cmp(&size(a)).then_with(|| a.path.cmp(&b.path))
    });
    let mut by: BTreeMap<StorageVerdict, VerdictBytes> = BTreeMap::new();
    for (v, (calls, bytes)) in &p.gds.by_verdict {
        let e = by.entry(*v).or_default();
        e.calls += calls;
        e.bytes += bytes;
    }
    let mut hist = [0u64; SIZE_BUCKETS];
    let (mut reads, mut seq, mut bytes_read, mut filled, mut read_filled, mut cached_read) =
        (0, 0, 0, 0, 0, 0);
    let (mut hit_fills, mut uring_reads) = (0, 0);
    for f in files.iter().chain(folded.iter()) {
        let posix = f.bytes_read + f.bytes_written;
        let direct = (f.direct_bytes.min(posix), f.direct_calls);
        let cached = (posix - direct.0, (f.reads + f.writes).saturating_sub(direct.1));
        for (v, (bytes, calls)) in [(StorageVerdict::PageCache, cached), (StorageVerdict::Direct, direct)] {
            if bytes > 0 {
                let e = by.entry(v).or_default();
                e.calls += calls;
                e.bytes += bytes;
            }
        }
        reads += f.reads;
        seq += f.seq_reads;
        bytes_read += f.bytes_read;
        filled += f.pages_filled;
        read_filled += f.read_pages_filled;
        hit_fills += f.hit_fills;
        uring_reads += f.io_uring_reads;
        cached_read += f.cached_read;
    }
    for f in p.files.values().map(|f| &**f).chain(std::iter::once(&p.folded.totals)) {
        for (h, n) in hist.iter_mut().zip(f.counters().read_hist) {
            *h += n;
        }
    }
    let mut r = ProcReport {
        pid,
        comm: p.comm.clone(),
        exited: p.exited,
        archived: false,
        bytes_by_verdict: by,
        cufile_calls: p.gds.calls,
        cufile_driver_opens: p.gds.driver_opens,
        cufile_unclassified: p.gds.unclassified,
        cufile_worker_unattributed: VerdictBytes {
            calls: p.gds.worker.unattributed.0,
            bytes: p.gds.worker.unattributed.1,
        },
        cufile_compat_not_direct: p.gds.compat_not_direct.iter().cloned().collect(),
        nvfs_ios: p.gds.nvfs_ios,
        nvfs_dma_bytes: p.gds.dma_bytes,
        io_uring_unattributed: loose,
        bytes_read,
        reads,
        seq_reads: seq,
        pages_filled: filled,
        read_pages_filled: read_filled,
        cache_hit_ratio: hit_ratio(cached_read, hit_fills, page),
        io_uring_reads: uring_reads,
        read_size_hist: hist_map(&hist),
        files,
        files_folded: p.folded.files,
        gds_mode: None,
        compat_reason: Vec::new(),
        cached_read,
        hit_fills,
        hints: vec![],
    };
    r.hints = hints::hints(&r, &hist);
    annotate_gds(&mut r, p.gds_facts.as_deref());
    Some(r)
}

/// `gds_mode` and `compat_reason` on the process and its files, and the hints that say why.
fn annotate_gds(r: &mut ProcReport, facts: Option<&super::gds_facts::ProcGdsFacts>) {
    fn file(f: &FileReport) -> FileIn<'_> {
        let posix = f.bytes_read + f.bytes_written;
        FileIn::new(&f.path, &f.dev, f.nvfs_bytes, &f.gds_bytes, posix, f.direct_bytes, f.bytes_written > 0)
    }
    let ins: Vec<_> = r.files.iter().map(file).collect();
    let has = |v| r.bytes_by_verdict.get(&v).is_some_and(|b| b.calls > 0);
    let a = gds_report::annotate(&ins, has(StorageVerdict::GdsCompat), has(StorageVerdict::GdsNvfs), facts);
    for (f, (mode, why)) in r.files.iter_mut().zip(a.files) {
        (f.gds_mode, f.compat_reason) = (mode, why);
    }
    (r.gds_mode, r.compat_reason) = (a.gds_mode, a.compat_reason);
    r.hints.extend(a.hints);
}

pub fn report(state: &StorageState) -> StorageReport {
    let page = page_size();
    StorageReport { procs: state.procs.iter().filter_map(|(pid, p)| proc_report(*pid, p, page)).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_labels() {
        let labels: Vec<String> = (0..SIZE_BUCKETS).map(bucket_label).collect();
        assert_eq!(labels[0], "<1KiB");
        assert_eq!(labels[3], "4KiB");
        assert_eq!(labels[11], "1MiB");
        assert_eq!(labels[15], "16MiB+");
        assert_eq!(dev_name((8 << 20) | 1), "8:1");
    }
}
