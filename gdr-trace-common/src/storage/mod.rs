//! Storage-path wire types: what the kernel keeps per (process, fd), and the records it sends
//! one by one (opens, closes, cuFile calls, nvidia-fs ioctls and direct I/O).
//!
//! POSIX I/O is never sent call by call: the syscall hooks add to [`FileIo`] in the
//! `FILE_IO` map, page-cache fills to `PAGE_FILLS`; userspace reads both maps. Only opens,
//! closes (the final counters of a descriptor), cuFile calls and nvidia-fs calls are records.

mod abi;
#[cfg(feature = "user")]
pub mod decode;

use crate::{EventHeader, EventKind};

/// Room for a path from `openat` (longer ones are cut; userspace prefers /proc's full name).
pub const PATH_LEN: usize = 256;
/// Read-size histogram buckets: bucket 0 is < 1 KiB, bucket `i` is [2^(i+9), 2^(i+10)) bytes,
/// the last one everything from 16 MiB up.
pub const SIZE_BUCKETS: usize = 16;
/// Bucket `i` (i >= 1) starts at `1 << (i + SIZE_BUCKET_SHIFT)` bytes.
pub const SIZE_BUCKET_SHIFT: u32 = 9;
/// cuFile batch entries read per `cuFileBatchIOSubmit` / nvidia-fs `BATCH_IO` (more are counted,
/// not itemised).
pub const MAX_BATCH: u32 = 16;

/// The histogram bucket of an I/O of `n` bytes.
#[inline(always)]
pub const fn size_bucket(n: u64) -> usize {
    // floor(log2(n)) without a loop (the BPF side uses it too).
    let mut v = n;
    let mut log = 0u32;
    if v >= 1 << 32 {
        v >>= 32;
        log += 32;
    }
    if v >= 1 << 16 {
        v >>= 16;
        log += 16;
    }
    if v >= 1 << 8 {
        v >>= 8;
        log += 8;
    }
    if v >= 1 << 4 {
        v >>= 4;
        log += 4;
    }
    if v >= 1 << 2 {
        v >>= 2;
        log += 2;
    }
    if v >= 1 << 1 {
        log += 1;
    }
    if log <= SIZE_BUCKET_SHIFT {
        0
    } else if log - SIZE_BUCKET_SHIFT >= SIZE_BUCKETS as u32 {
        SIZE_BUCKETS - 1
    } else {
        (log - SIZE_BUCKET_SHIFT) as usize
    }
}

/// POSIX I/O counters of one descriptor.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FileIoStats {
    pub reads: u64,
    pub bytes_read: u64,
    /// Reads that started where the previous read of this descriptor ended (`read`/`readv`
    /// always do: they use the file position).
    pub seq_reads: u64,
    pub read_errors: u64,
    pub writes: u64,
    pub bytes_written: u64,
    /// Of the reads, those completed through io_uring (not system calls; their file position is
    /// not known, so they are neither sequential nor random).
    pub uring_reads: u64,
    /// Where the next sequential positional read would start (kernel bookkeeping).
    pub next_offset: i64,
    /// Successful reads by size (see [`size_bucket`]).
    pub read_hist: [u64; SIZE_BUCKETS],
}

/// Key of `FILE_IO`: one open descriptor of one process.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FileKey {
    pub tgid: u32,
    pub fd: u32,
}

/// Value of `FILE_IO`: what the descriptor is (read once, from its `struct file`, at its first
/// I/O) and its counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FileIo {
    pub ino: u64,
    /// Kernel `dev_t` of the filesystem (major << 20 | minor).
    pub dev: u32,
    /// `file->f_flags` (O_DIRECT is there).
    pub f_flags: u32,
    /// `inode->i_mode` (S_IFREG: a regular file).
    pub mode: u32,
    /// 1: counted (a regular file, or the file could not be read: counted anyway); 0: ignored.
    pub counted: u32,
    pub stats: FileIoStats,
}

/// A CPU's write-combining slot in front of `FILE_IO` (the `IO_BATCH` per-CPU array): the
/// counts of the descriptor this CPU last did I/O on, not yet added to its `FILE_IO` entry.
/// A read or write on the same descriptor only touches this slot (no hash lookup, no atomic);
/// switching descriptor, or closing one, folds the slot into `FILE_IO`. Userspace adds the
/// slots to what it reads from `FILE_IO`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IoBatch {
    /// The descriptor the counts belong to; tgid 0: empty.
    pub key: FileKey,
    /// Whether that descriptor is counted (a regular file).
    pub counted: u32,
    pub _pad0: u32,
    /// Counts not yet in `FILE_IO` (`next_offset`: the running sequential position).
    pub stats: FileIoStats,
}

/// An io_uring read or write of a traced process between submission and completion (value of
/// `URING_REQS`, keyed by the kernel's request pointer).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UringReq {
    pub tgid: u32,
    /// The descriptor, once `io_uring_file_get` named it; -1: a registered (fixed) file, which
    /// that tracepoint doesn't cover.
    pub fd: i32,
    /// 1: a write.
    pub write: u32,
    pub _pad0: u32,
}

/// io_uring reads and writes of one process that could not be tied to a file (registered
/// files): value of `URING_LOOSE`, keyed by tgid.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UringLoose {
    pub reads: u64,
    pub bytes_read: u64,
    pub writes: u64,
    pub bytes_written: u64,
}

/// Key of `PAGE_FILLS`: pages one process added to the page cache for one file.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FillKey {
    pub tgid: u32,
    pub dev: u32,
    pub ino: u64,
}

/// Value of `PAGE_FILLS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PageFills {
    /// Every page added (reads and their readahead, buffered writes of new pages, faults).
    pub pages: u64,
    /// Those added while the task was in a read system call: what the hit ratio weighs.
    pub read_pages: u64,
}

/// How many read system calls [`globals::READ_SYSCALL_NRS`] lists.
pub const READ_SYSCALLS: usize = 5;

/// `openat` returned a descriptor for a regular file ([`EventKind::FileOpen`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileOpenEvent {
    pub hdr: EventHeader,
    pub fd: i32,
    /// The `dirfd` argument (`AT_FDCWD` = -100 for a path relative to the working directory).
    pub dirfd: i32,
    pub open_flags: u32,
    pub f_flags: u32,
    pub ino: u64,
    pub dev: u32,
    pub mode: u32,
    /// As passed to `openat`, NUL-padded.
    pub path: [u8; PATH_LEN],
}

/// A counted descriptor was closed: its final counters ([`EventKind::FileClose`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileCloseEvent {
    pub hdr: EventHeader,
    pub fd: i32,
    pub _pad0: u32,
    pub file: FileIo,
}

/// Which cuFile call a [`GdsEvent`] is.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GdsOp {
    DriverOpen = 1,
    HandleRegister = 2,
    BufRegister = 3,
    Read = 4,
    Write = 5,
    ReadAsync = 6,
    BatchSubmit = 7,
}

impl GdsOp {
    pub const fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::DriverOpen,
            2 => Self::HandleRegister,
            3 => Self::BufRegister,
            4 => Self::Read,
            5 => Self::Write,
            6 => Self::ReadAsync,
            7 => Self::BatchSubmit,
            _ => return None,
        })
    }
}

/// What happened inside one cuFile call on its thread (kept in the kernel from the uprobe to
/// the uretprobe, then sent with the call).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct GdsTally {
    /// nvidia-fs READ/WRITE/BATCH_IO/MAP ioctls issued.
    pub nvfs_calls: u32,
    /// POSIX read/write family calls on any file.
    pub posix_calls: u32,
    /// Bytes nvidia-fs reported done (`ioctl_return`).
    pub nvfs_bytes: u64,
    /// Bytes `nvfs_direct_io` moved (driver-level DMA evidence).
    pub dma_bytes: u64,
    pub posix_bytes: u64,
    /// The last file descriptor nested I/O used (-1: none).
    pub io_fd: i32,
    pub _pad0: u32,
}

/// Arguments of an in-flight cuFile call, stashed at its uprobe.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct GdsArgs {
    pub op: u32,
    /// From `CUfileDescr_t` (HandleRegister), else -1.
    pub fd: i32,
    /// `CUfileHandle_t`, or for HandleRegister the `CUfileHandle_t *` it fills.
    pub handle: u64,
    pub buf: u64,
    pub length: u64,
    pub file_offset: i64,
    pub buf_offset: i64,
    /// Batch: the `CUfileIOParams_t *` array and its length.
    pub batch_ptr: u64,
    pub batch_count: u32,
    pub _pad0: u32,
    pub tally: GdsTally,
}

/// A cuFile call returned ([`EventKind::GdsCall`]). A batch submit sends one per entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdsEvent {
    pub hdr: EventHeader,
    pub args: GdsArgs,
    /// `ssize_t` for Read/Write, `CUfileError_t.err` for the others (0 = success).
    pub ret: i64,
    pub batch_index: u32,
    /// For a batch entry: its `CUfileOpcode_t` (0 read, 1 write).
    pub batch_opcode: u32,
}

/// An nvidia-fs ioctl ([`EventKind::NvfsIoctl`]) or one `nvfs_direct_io` chunk
/// ([`EventKind::NvfsDirectIo`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NvfsEvent {
    pub hdr: EventHeader,
    /// The ioctl number (0 for direct I/O).
    pub cmd: u32,
    /// The target file's descriptor from the ioctl argument; -1 when not there/not readable.
    pub fd: i32,
    /// What the ioctl returned (0 or -errno); for direct I/O, bytes or -errno.
    pub ret: i64,
    /// `ioctl_return` of READ/WRITE (bytes or -errno) read back from the argument.
    pub io_ret: i64,
    pub offset: i64,
    pub size: u64,
    pub cpuvaddr: u64,
    /// MAP: the GPU buffer.
    pub gpuvaddr: u64,
    pub batch_index: u32,
    pub batch_count: u32,
    /// READ 0 / WRITE 1.
    pub op: u32,
    pub _pad0: u32,
}

pub use abi::{cufile, globals, maps, nvfs, uring};

/// Decoded storage records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageRecord {
    Open(FileOpenEvent),
    Close(FileCloseEvent),
    Gds(GdsEvent),
    Nvfs(EventKind, NvfsEvent),
}

impl FileOpenEvent {
    pub const fn zeroed() -> Self {
        Self {
            hdr: EventHeader::zeroed(),
            fd: 0,
            dirfd: 0,
            open_flags: 0,
            f_flags: 0,
            ino: 0,
            dev: 0,
            mode: 0,
            path: [0; PATH_LEN],
        }
    }
}

impl FileIoStats {
    pub const fn zeroed() -> Self {
        Self {
            reads: 0,
            bytes_read: 0,
            seq_reads: 0,
            read_errors: 0,
            writes: 0,
            bytes_written: 0,
            uring_reads: 0,
            next_offset: 0,
            read_hist: [0; SIZE_BUCKETS],
        }
    }
}

#[cfg(feature = "user")]
impl FileIoStats {
    /// Adds another descriptor's (or CPU slot's) counts; `next_offset` is kernel bookkeeping and
    /// stays as it is.
    pub fn add(&mut self, o: &Self) {
        self.reads += o.reads;
        self.bytes_read += o.bytes_read;
        self.seq_reads += o.seq_reads;
        self.read_errors += o.read_errors;
        self.writes += o.writes;
        self.bytes_written += o.bytes_written;
        self.uring_reads += o.uring_reads;
        for (a, b) in self.read_hist.iter_mut().zip(o.read_hist) {
            *a += b;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.reads == 0 && self.writes == 0 && self.read_errors == 0
    }
}

impl FileIo {
    pub const fn zeroed() -> Self {
        Self { ino: 0, dev: 0, f_flags: 0, mode: 0, counted: 0, stats: FileIoStats::zeroed() }
    }
}

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
    fn nvfs_numbers() {
        assert!(nvfs::is_nvfs(nvfs::READ) && nvfs::is_nvfs(nvfs::BATCH_IO));
        assert!(!nvfs::is_nvfs(0x4004_7409) && !nvfs::is_nvfs(0x5401));
        assert_eq!(nvfs::name(nvfs::MAP), "MAP");
    }
}
