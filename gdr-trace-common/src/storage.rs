//! Storage-path wire types: what the kernel keeps per (process, fd) (`counters`), and the records
//! it sends one by one (`records`: opens, closes, cuFile calls, nvidia-fs ioctls and direct I/O).
//!
//! POSIX I/O is never sent call by call: the syscall hooks add to [`FileIo`] in the
//! `FILE_IO` map, page-cache fills to `PAGE_FILLS`; userspace reads both maps. Only opens,
//! closes (the final counters of a descriptor), cuFile calls and nvidia-fs calls are records.

mod abi;
mod counters;
#[cfg(feature = "user")]
pub mod decode;
pub mod records;

pub use abi::{
    cufile, globals, maps, nvfs, uring, FILES_PER_TENANT, FILE_IO_ENTRIES, PSEUDO_FS, PSEUDO_FS_NAMES,
};
pub use counters::*;
pub use records::*;

/// cuFile batch entries read per `cuFileBatchIOSubmit` / nvidia-fs `BATCH_IO` (more are counted,
/// not itemised).
pub const MAX_BATCH: u32 = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets() {
        assert_eq!(size_bucket(0), 0);
        assert_eq!(size_bucket(1), 0);
        assert_eq!(size_bucket(1023), 0);
        assert_eq!(size_bucket(1024), 1);
        assert_eq!(size_bucket(4095), 2);
        assert_eq!(size_bucket(4096), 3);
        assert_eq!(size_bucket(1 << 20), 11);
        assert_eq!(size_bucket((1 << 20) + 1), 11);
        assert_eq!(size_bucket(1 << 24), 15);
        assert_eq!(size_bucket(u64::MAX), 15);
    }

    #[test]
    fn gds_ops_round_trip() {
        for (i, op) in GdsOp::ALL.iter().enumerate() {
            assert_eq!(*op as u32, i as u32 + 1);
            assert_eq!(GdsOp::from_u32(*op as u32), Some(*op));
        }
        assert_eq!(GdsOp::from_u32(0), None);
        assert_eq!(GdsOp::from_u32(GdsOp::ALL.len() as u32 + 1), None);
    }

    #[test]
    fn nvfs_numbers() {
        assert!(nvfs::is_nvfs(nvfs::READ) && nvfs::is_nvfs(nvfs::BATCH_IO));
        assert!(!nvfs::is_nvfs(0x4004_7409) && !nvfs::is_nvfs(0x5401));
        assert_eq!(nvfs::name(nvfs::MAP), "MAP");
    }
}
