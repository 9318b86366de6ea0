//! Storage verdicts (PRODUCT.md): which path a cuFile call's bytes took, and how a file was read.

use gdr_trace_common::storage::{GdsOp, GdsTally};
use serde::Serialize;

use super::gds_mode::GdsMode;
use crate::events::{cufile_ops::moves_data, storage::GdsCall};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StorageVerdict {
    /// cuFile I/O through nvidia-fs: its ioctls were issued (direct DMA NVMe -> GPU).
    GdsNvfs,
    /// cuFile I/O done with POSIX reads/writes (compatibility mode: bounce buffer in host memory).
    GdsCompat,
    /// cuFile's O_DIRECT I/O landed in GPU memory (upstream PCI P2PDMA).
    GdsP2pdma,
    /// cuFile I/O whose path the evidence does not tell (`gds_mode` unknown: O_DIRECT without
    /// nvidia-fs where P2PDMA is possible and the destination was not seen).
    GdsUnknown,
    /// Plain I/O through the page cache.
    PageCache,
    /// Plain I/O with O_DIRECT.
    Direct,
}

impl StorageVerdict {
    pub const ALL: [StorageVerdict; 6] =
        [Self::GdsNvfs, Self::GdsCompat, Self::GdsP2pdma, Self::GdsUnknown, Self::PageCache, Self::Direct];

    /// A cuFile call's verdict is its mode (`gds_mode::decide_mode`): the two never disagree.
    pub fn of_mode(m: GdsMode) -> Self {
        match m {
            GdsMode::GdsNvfs => Self::GdsNvfs,
            GdsMode::GdsCompat => Self::GdsCompat,
            GdsMode::GdsP2pdma => Self::GdsP2pdma,
            GdsMode::Unknown => Self::GdsUnknown,
        }
    }

    /// The mode a cuFile verdict stands for (None: not a cuFile verdict).
    pub fn mode(self) -> Option<GdsMode> {
        Some(match self {
            Self::GdsNvfs => GdsMode::GdsNvfs,
            Self::GdsCompat => GdsMode::GdsCompat,
            Self::GdsP2pdma => GdsMode::GdsP2pdma,
            Self::GdsUnknown => GdsMode::Unknown,
            Self::PageCache | Self::Direct => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::GdsNvfs => "gds-nvfs",
            Self::GdsCompat => "gds-compat",
            Self::GdsP2pdma => "gds-p2pdma",
            Self::GdsUnknown => "gds-unknown",
            Self::PageCache => "page-cache",
            Self::Direct => "direct",
        }
    }
}

impl std::fmt::Display for StorageVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a cuFile call's bytes did: the I/O on its own thread during the call, plus what
/// libcufile's worker threads did for it (`storage::attribute` adds that to the tally). None for
/// calls that move no data (driver open and close, handle and stream (de)registration, batch
/// set-up, cancel and destroy, buffer deregistration) and for calls whose I/O was not seen. A
/// batch's status poll has a verdict when I/O ran inside it (its bytes count at the submit).
pub fn classify_gds(call: &GdsCall) -> Option<StorageVerdict> {
    match call.op {
        GdsOp::BufRegister => classify_tally(&call.tally).or_else(|| {
            // A buffer registration that issued no nvidia-fs MAP stays a host bounce buffer.
            (call.ret == 0).then_some(StorageVerdict::GdsCompat)
        }),
        GdsOp::BatchGetStatus => classify_tally(&call.tally),
        op if moves_data(op) => classify_tally(&call.tally),
        _ => None,
    }
}

pub fn classify_tally(t: &GdsTally) -> Option<StorageVerdict> {
    if t.nvfs_calls > 0 {
        Some(StorageVerdict::GdsNvfs)
    } else if t.posix_calls > 0 {
        Some(StorageVerdict::GdsCompat)
    } else {
        None
    }
}

/// `O_DIRECT` on this machine's ABI (x86-64 0o40000, arm64 0o200000).
pub const O_DIRECT: u32 = libc::O_DIRECT as u32;

/// How a file's POSIX I/O went: O_DIRECT or the page cache.
pub fn classify_file(f_flags: u32) -> StorageVerdict {
    if f_flags & O_DIRECT != 0 {
        StorageVerdict::Direct
    } else {
        StorageVerdict::PageCache
    }
}

/// Share of the bytes read that the page cache already held: 1 - (bytes filled / bytes read),
/// clamped to [0, 1]. None before anything was read.
pub fn hit_ratio(bytes_read: u64, pages_filled: u64, page_size: u64) -> Option<f64> {
    if bytes_read == 0 {
        return None;
    }
    let filled = pages_filled.saturating_mul(page_size) as f64;
    Some((1.0 - filled / bytes_read as f64).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Context;

    fn call(op: GdsOp, nvfs: u32, posix: u32) -> GdsCall {
        GdsCall {
            ctx: Context { pid: 1, tid: 1, comm: "x".into(), uid: 0, cgroup_id: 0, ts_ns: 0 },
            op,
            source: "uprobe:cuFileRead".into(),
            fd: Some(3),
            handle: 1,
            buf: 0,
            length: 4096,
            file_offset: 0,
            buf_offset: 0,
            ret: 0,
            tally: GdsTally { nvfs_calls: nvfs, posix_calls: posix, ..GdsTally::default() },
            batch: None,
            detail: Default::default(),
        }
    }

    #[test]
    fn gds_verdicts_follow_the_nested_io() {
        assert_eq!(classify_gds(&call(GdsOp::Read, 1, 0)), Some(StorageVerdict::GdsNvfs));
        assert_eq!(classify_gds(&call(GdsOp::Read, 0, 1)), Some(StorageVerdict::GdsCompat));
        assert_eq!(classify_gds(&call(GdsOp::Read, 0, 0)), None, "no I/O seen: no verdict");
        assert_eq!(classify_gds(&call(GdsOp::HandleRegister, 0, 0)), None);
        assert_eq!(classify_gds(&call(GdsOp::BufRegister, 1, 0)), Some(StorageVerdict::GdsNvfs));
        assert_eq!(classify_gds(&call(GdsOp::BufRegister, 0, 0)), Some(StorageVerdict::GdsCompat));
        for op in [GdsOp::WriteAsync, GdsOp::ReadAsync, GdsOp::BatchSubmit, GdsOp::BatchGetStatus] {
            assert_eq!(classify_gds(&call(op, 2, 0)), Some(StorageVerdict::GdsNvfs), "{op:?}");
            assert_eq!(classify_gds(&call(op, 0, 3)), Some(StorageVerdict::GdsCompat), "{op:?}");
        }
        // The library's own I/O inside calls that move no file data is no verdict.
        for op in [
            GdsOp::DriverOpen,
            GdsOp::DriverClose,
            GdsOp::DriverCloseV2,
            GdsOp::HandleDeregister,
            GdsOp::BufDeregister,
            GdsOp::BatchSetUp,
            GdsOp::BatchCancel,
            GdsOp::BatchDestroy,
            GdsOp::StreamRegister,
            GdsOp::StreamDeregister,
        ] {
            assert_eq!(classify_gds(&call(op, 1, 1)), None, "{op:?}");
        }
    }

    #[test]
    fn files_and_hit_ratio() {
        assert_eq!(classify_file(O_DIRECT | 2), StorageVerdict::Direct);
        assert_eq!(classify_file(0), StorageVerdict::PageCache);
        assert_eq!(hit_ratio(0, 0, 4096), None);
        assert_eq!(hit_ratio(1 << 20, 256, 4096), Some(0.0));
        assert_eq!(hit_ratio(1 << 20, 0, 4096), Some(1.0));
        assert_eq!(hit_ratio(4 << 20, 256, 4096), Some(0.75));
        assert_eq!(hit_ratio(4096, 32, 4096), Some(0.0), "readahead beyond what was read clamps to 0");
        let names: Vec<_> = StorageVerdict::ALL.iter().map(|v| v.as_str()).collect();
        assert_eq!(names, ["gds-nvfs", "gds-compat", "gds-p2pdma", "gds-unknown", "page-cache", "direct"]);
        for v in StorageVerdict::ALL {
            // Every cuFile verdict is a mode and back; the file verdicts are none.
            assert_eq!(v.mode().map(StorageVerdict::of_mode), v.mode().map(|_| v), "{v:?}");
            assert_eq!(v.mode().map(|m| m.as_str()).is_some(), v.as_str().starts_with("gds-"), "{v:?}");
        }
        assert_eq!(serde_json::to_string(&StorageVerdict::GdsCompat).unwrap(), "\"gds-compat\"");
    }
}
