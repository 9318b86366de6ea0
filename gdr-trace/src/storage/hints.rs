//! Plain-language hints from a process's storage report: is cuFile really using GPUDirect
//! Storage, and does the I/O pattern suit GDS at all (it helps large sequential reads; small
//! random re-reads are often better served by a page cache that is working).

use gdr_trace_common::storage::SIZE_BUCKETS;

use super::{
    classify::StorageVerdict,
    report::{bucket_label, ProcReport},
};
use crate::units::human_bytes;

/// Reads below this bucket (128 KiB) are "small".
const SMALL_BELOW: usize = 8;
/// Reads from this bucket (1 MiB) up are "large".
const LARGE_FROM: usize = 11;
/// Below this much read through the page cache (or this many reads) the pattern says nothing
/// worth a hint (a program reading its shared libraries).
const PATTERN_MIN_BYTES: u64 = 256 << 10;
const PATTERN_MIN_READS: u64 = 64;

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

fn bytes_of(r: &ProcReport, v: StorageVerdict) -> u64 {
    r.bytes_by_verdict.get(&v).map_or(0, |b| b.bytes)
}

/// The most frequent read-size bucket and the share of reads in `range`.
fn dominant(hist: &[u64; SIZE_BUCKETS], range: std::ops::Range<usize>) -> (usize, f64) {
    let total: u64 = hist.iter().sum();
    let top = (0..SIZE_BUCKETS).max_by_key(|&i| (hist[i], std::cmp::Reverse(i))).unwrap_or(0);
    let share = if total == 0 { 0.0 } else { hist[range].iter().sum::<u64>() as f64 / total as f64 };
    (top, share)
}

pub fn hints(r: &ProcReport, hist: &[u64; SIZE_BUCKETS]) -> Vec<String> {
    let mut out = Vec::new();
    let nvfs = bytes_of(r, StorageVerdict::GdsNvfs);
    let compat = bytes_of(r, StorageVerdict::GdsCompat);
    let p2pdma = bytes_of(r, StorageVerdict::GdsP2pdma);
    let unknown = bytes_of(r, StorageVerdict::GdsUnknown);
    let cufile = nvfs + compat + p2pdma + unknown;
    if p2pdma > 0 {
        out.push(format!(
            "{} of cuFile's {} went by PCI P2PDMA: O_DIRECT I/O straight into GPU memory, without nvidia-fs",
            pct(p2pdma as f64 / cufile as f64),
            human_bytes(cufile)
        ));
    }
    if unknown > 0 {
        out.push(format!(
            "{} of cuFile's {} took a path not told: O_DIRECT POSIX I/O without nvidia-fs, where it landed \
             not seen and PCI P2PDMA not ruled out",
            pct(unknown as f64 / cufile as f64),
            human_bytes(cufile)
        ));
    }
    if compat > 0 {
        let share = compat as f64 / cufile as f64;
        let mut h = if compat == cufile {
            format!(
                "cuFile is in compatibility mode: 100% of {} went through POSIX pread/pwrite into host memory, \
                 not GPUDirect Storage",
                human_bytes(cufile)
            )
        } else {
            format!(
                "{} of cuFile's {} went through POSIX pread/pwrite (compatibility mode){}",
                pct(share),
                human_bytes(cufile),
                if nvfs + compat == cufile { ", the rest through nvidia-fs" } else { "" }
            )
        };
        if r.nvfs_ios == 0 {
            h.push_str(" (no nvidia-fs ioctl at all: nvidia-fs not loaded or no /dev/nvidia-fs*, or compat mode forced)");
        }
        if !r.cufile_compat_not_direct.is_empty() {
            h.push_str(&format!(
                "; not opened with O_DIRECT, which GDS requires: {}",
                r.cufile_compat_not_direct.join(", ")
            ));
        }
        out.push(h);
    } else if nvfs > 0 && nvfs == cufile {
        let mut h =
            format!("all cuFile I/O ({}) went through nvidia-fs (GPUDirect Storage)", human_bytes(nvfs));
        if r.nvfs_dma_bytes > 0 {
            h.push_str(&format!("; the driver's direct I/O moved {}", human_bytes(r.nvfs_dma_bytes)));
        }
        out.push(h);
    }
    if r.cufile_unclassified > 0 {
        out.push(format!(
            "{} cuFile data calls did their I/O on other threads (asynchronous): not classified",
            r.cufile_unclassified
        ));
    }
    let page_cache_read = r.files.iter().filter(|f| !f.direct).map(|f| f.bytes_read).sum::<u64>();
    // Reads whose position is known (io_uring's isn't): the pattern is judged on those.
    let placed = r.reads.saturating_sub(r.io_uring_reads);
    if placed < PATTERN_MIN_READS || page_cache_read < PATTERN_MIN_BYTES {
        return out;
    }
    let random = 1.0 - r.seq_reads as f64 / placed as f64;
    let hit = r.cache_hit_ratio.unwrap_or(0.0);
    let (top, small) = dominant(hist, 0..SMALL_BELOW);
    let (_, large) = dominant(hist, LARGE_FROM..SIZE_BUCKETS);
    if small >= 0.8 && random >= 0.5 && hit >= 0.9 {
        out.push(format!(
            "{} random reads with {} cache hits: GDS would bypass a cache that is working",
            bucket_label(top),
            pct(hit)
        ));
    } else if large >= 0.8 && random <= 0.2 && hit < 0.5 {
        out.push(format!(
            "{} sequential reads through the page cache with {} cache hits ({} read): large streaming reads \
             are what GDS speeds up (cuFile on O_DIRECT files)",
            bucket_label(top),
            pct(hit),
            human_bytes(page_cache_read)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::storage::aggregate::{FileReport, VerdictBytes};

    fn report(
        by: &[(StorageVerdict, u64)],
        reads: u64,
        seq: u64,
        hit: Option<f64>,
        nvfs_ios: u64,
    ) -> ProcReport {
        ProcReport {
            pid: 1,
            comm: "x".into(),
            exited: false,
            archived: false,
            bytes_by_verdict: by.iter().map(|(v, b)| (*v, VerdictBytes { calls: 1, bytes: *b })).collect(),
            cufile_calls: 0,
            cufile_driver_opens: 0,
            cufile_unclassified: 0,
            cufile_worker_unattributed: VerdictBytes::default(),
            cufile_compat_not_direct: by
                .iter()
                .any(|(v, _)| *v == StorageVerdict::GdsCompat)
                .then(|| "/d/f".to_string())
                .into_iter()
                .collect(),
            nvfs_ios,
            nvfs_dma_bytes: 0,
            io_uring_unattributed: Default::default(),
            bytes_read: reads * 4096,
            reads,
            seq_reads: seq,
            io_uring_reads: 0,
            pages_filled: 0,
            read_pages_filled: 0,
            cache_hit_ratio: hit,
            read_size_hist: BTreeMap::new(),
            files: vec![FileReport {
                pid: 1,
                comm: "x".into(),
                path: "/d/f".into(),
                dev: "8:1".into(),
                ino: 1,
                reads,
                bytes_read: reads * 4096,
                seq_reads: seq,
                read_errors: 0,
                writes: 0,
                bytes_written: 0,
                io_uring_reads: 0,
                direct: false,
                direct_bytes: 0,
                direct_calls: 0,
                pages_filled: 0,
                read_pages_filled: 0,
                cache_hit_ratio: hit,
                cached_read: reads * 4096,
                hit_fills: 0,
                read_size_hist: BTreeMap::new(),
                gds_bytes: by.iter().copied().filter(|(v, _)| *v == StorageVerdict::GdsCompat).collect(),
                nvfs_bytes: 0,
                verdict: StorageVerdict::PageCache,
                gds_mode: None,
                compat_reason: vec![],
            }],
            gds_mode: None,
            compat_reason: vec![],
            files_folded: 0,
            cached_read: reads * 4096,
            hit_fills: 0,
            hints: vec![],
        }
    }

    #[test]
    fn compat_mode_is_called_out_with_the_file_lacking_o_direct() {
        let r = report(&[(StorageVerdict::GdsCompat, 12 << 30)], 0, 0, None, 0);
        let h = hints(&r, &[0; SIZE_BUCKETS]);
        assert!(
            h[0].starts_with("cuFile is in compatibility mode: 100% of 12.0 GiB went through POSIX pread"),
            "{h:?}"
        );
        assert!(h[0].contains("no nvidia-fs ioctl") && h[0].contains("/d/f"), "{h:?}");
    }

    #[test]
    fn all_nvfs() {
        let r = report(&[(StorageVerdict::GdsNvfs, 1 << 20)], 0, 0, None, 1);
        assert_eq!(
            hints(&r, &[0; SIZE_BUCKETS]),
            ["all cuFile I/O (1.0 MiB) went through nvidia-fs (GPUDirect Storage)"]
        );
    }

    #[test]
    fn small_random_cached_reads_and_large_cold_streams() {
        let mut hist = [0u64; SIZE_BUCKETS];
        hist[3] = 100;
        let r = report(&[], 100, 5, Some(0.95), 0);
        assert_eq!(
            hints(&r, &hist),
            ["4KiB random reads with 95% cache hits: GDS would bypass a cache that is working"]
        );
        let mut hist = [0u64; SIZE_BUCKETS];
        hist[11] = 10;
        let r = report(&[], 10, 10, Some(0.0), 0);
        assert!(hints(&r, &hist).is_empty(), "10 reads say nothing");
        let r = report(&[], 100, 100, Some(0.0), 0);
        let h = hints(&r, &hist);
        assert!(h[0].starts_with("1MiB sequential reads through the page cache with 0% cache hits"), "{h:?}");
        let r = report(&[], 100, 100, Some(1.0), 0);
        assert!(hints(&r, &hist).is_empty(), "warm sequential reads: nothing to say");
        let mut hist = [0u64; SIZE_BUCKETS];
        hist[0] = 50;
        let r = report(&[], 50, 0, Some(1.0), 0);
        assert!(hints(&r, &hist).is_empty(), "a few small reads (a program's libraries) say nothing");
    }
}
