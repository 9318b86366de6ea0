//! Per-process storage reports: bytes by verdict, files, read sizes, hints. Built from the
//! state on demand (every summary interval and at the end).

use std::collections::BTreeMap;

use super::{
    classify::{classify_file, hit_ratio, StorageVerdict},
    gds_report::{self, FileIn},
    hints,
    state::{FileRef, ProcState, StorageState},
};
use crate::events::storage::Counters;
use gdr_trace_common::storage::SIZE_BUCKETS;

pub use super::report::*;

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
