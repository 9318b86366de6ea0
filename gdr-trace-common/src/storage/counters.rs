//! What the kernel keeps per process and descriptor or file (the `FILE_IO`, `IO_BATCH`,
//! `PAGE_FILLS`, `URING_*` maps): POSIX I/O counters with a read-size histogram, page-cache
//! fills, io_uring requests in flight. Userspace reads the maps; nothing here is sent call by call.

/// Read-size histogram buckets: bucket 0 is < 1 KiB, bucket `i` is [2^(i+9), 2^(i+10)) bytes,
/// the last one everything from 16 MiB up.
pub const SIZE_BUCKETS: usize = 16;
/// Bucket `i` (i >= 1) starts at `1 << (i + SIZE_BUCKET_SHIFT)` bytes.
pub const SIZE_BUCKET_SHIFT: u32 = 9;

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
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
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
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
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
    /// Who the entry is charged to (the uid, or for root `ROOT_CGROUP | cgroup id`): its
    /// tenant's tracked-file budget (`maps::TRACKED_FILES`) gets it back when it goes.
    #[cfg_attr(feature = "user", serde(default))]
    pub tenant: u64,
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
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
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
        Self { ino: 0, dev: 0, f_flags: 0, mode: 0, counted: 0, stats: FileIoStats::zeroed(), tenant: 0 }
    }
}
