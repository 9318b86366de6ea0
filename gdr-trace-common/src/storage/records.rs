//! The storage records sent one by one through the ring buffer: opens, closes (a descriptor's
//! final counters), cuFile calls and nvidia-fs ioctls / direct I/O; and the cuFile call state
//! kept between a uprobe and its uretprobe.

use super::counters::FileIo;
use crate::wire::EventHeader;

/// Room for a path from `openat` (longer ones are cut; userspace prefers /proc's full name).
pub const PATH_LEN: usize = 256;

/// How many read system calls [`globals::READ_SYSCALL_NRS`] lists.
pub const READ_SYSCALLS: usize = 5;

/// `openat` returned a descriptor for a regular file ([`crate::kinds::EventKind::FileOpen`]).
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

/// A counted descriptor was closed: its final counters ([`crate::kinds::EventKind::FileClose`]).
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
pub enum GdsOp {
    DriverOpen = 1,
    HandleRegister = 2,
    BufRegister = 3,
    Read = 4,
    Write = 5,
    ReadAsync = 6,
    BatchSubmit = 7,
    WriteAsync = 8,
    BatchSetUp = 9,
    BatchGetStatus = 10,
    BatchCancel = 11,
    BatchDestroy = 12,
    StreamRegister = 13,
    StreamDeregister = 14,
    HandleDeregister = 15,
    BufDeregister = 16,
    DriverClose = 17,
    DriverCloseV2 = 18,
}

impl GdsOp {
    pub const ALL: [GdsOp; 18] = [
        Self::DriverOpen,
        Self::HandleRegister,
        Self::BufRegister,
        Self::Read,
        Self::Write,
        Self::ReadAsync,
        Self::BatchSubmit,
        Self::WriteAsync,
        Self::BatchSetUp,
        Self::BatchGetStatus,
        Self::BatchCancel,
        Self::BatchDestroy,
        Self::StreamRegister,
        Self::StreamDeregister,
        Self::HandleDeregister,
        Self::BufDeregister,
        Self::DriverClose,
        Self::DriverCloseV2,
    ];

    pub const fn from_u32(v: u32) -> Option<Self> {
        // A match, not an index into ALL: the eBPF side must have no panic path.
        Some(match v {
            1 => Self::DriverOpen,
            2 => Self::HandleRegister,
            3 => Self::BufRegister,
            4 => Self::Read,
            5 => Self::Write,
            6 => Self::ReadAsync,
            7 => Self::BatchSubmit,
            8 => Self::WriteAsync,
            9 => Self::BatchSetUp,
            10 => Self::BatchGetStatus,
            11 => Self::BatchCancel,
            12 => Self::BatchDestroy,
            13 => Self::StreamRegister,
            14 => Self::StreamDeregister,
            15 => Self::HandleDeregister,
            16 => Self::BufDeregister,
            17 => Self::DriverClose,
            18 => Self::DriverCloseV2,
            _ => return None,
        })
    }

    /// Returns `ssize_t` (bytes, or a negative error) rather than `CUfileError_t`.
    pub const fn returns_ssize(self) -> bool {
        matches!(self, Self::Read | Self::Write)
    }

    /// Returns nothing (`void`): the return register means nothing.
    pub const fn returns_void(self) -> bool {
        matches!(self, Self::HandleDeregister | Self::BatchDestroy)
    }
}

/// What happened inside one cuFile call on its thread (kept in the kernel from the uprobe to
/// the uretprobe, then sent with the call).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
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
    /// The last nested POSIX I/O's result when it failed (-errno), else 0.
    #[cfg_attr(feature = "user", serde(default))]
    pub io_err: i32,
    /// The last nested POSIX I/O's user buffer (read/pread/write/pwrite's `buf`, the first
    /// iovec's base for the vector calls): where its bytes went to or came from. 0: none seen.
    #[cfg_attr(feature = "user", serde(default))]
    pub io_buf: u64,
}

/// Arguments of an in-flight cuFile call, stashed at its uprobe.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct GdsArgs {
    pub op: u32,
    /// From `CUfileDescr_t` (HandleRegister), else -1.
    pub fd: i32,
    /// `CUfileHandle_t` (for a batch entry: the entry's).
    pub handle: u64,
    pub buf: u64,
    /// Bytes asked for; BatchIOGetStatus: bytes its completed entries report.
    pub length: u64,
    pub file_offset: i64,
    pub buf_offset: i64,
    /// Batch: the `CUfileIOParams_t *` (Submit) or `CUfileIOEvents_t *` (GetStatus) array.
    pub batch_ptr: u64,
    /// Entries: `nr` of SetUp and Submit, `min_nr` of GetStatus at entry, then what it returned.
    pub batch_count: u32,
    /// The `flags` argument (BufRegister, BatchIOSubmit, StreamRegister).
    pub flags: u32,
    /// `CUfileBatchHandle_t` of the batch calls.
    pub batch_id: u64,
    /// `CUstream` (ReadAsync/WriteAsync, StreamRegister/Deregister).
    pub stream: u64,
    /// What the call fills in, read back at its return: `CUfileHandle_t *` (HandleRegister),
    /// `CUfileBatchHandle_t *` (BatchIOSetUp), `unsigned *nr` (BatchIOGetStatus).
    pub out_ptr: u64,
    /// The probed function's address in the process: userspace finds which library copy
    /// (mapping) it is in.
    pub func_ip: u64,
    /// Stack pointer, return address and time at entry, and calls of the library nested in
    /// this one (a tail call, or an exported function the library calls itself): the kernel
    /// side sends only the outermost call.
    pub entry_sp: u64,
    pub entry_ret: u64,
    pub entry_ns: u64,
    pub depth: u32,
    /// BatchIOGetStatus: completed entries that report a failure.
    pub failed: u32,
    /// The calling process (a slot left by a process that died in a call is not its thread's).
    pub entry_tgid: u32,
    pub _pad0: u32,
    pub tally: GdsTally,
}

/// A cuFile call returned ([`crate::kinds::EventKind::GdsCall`]). A batch submit sends one per entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct GdsEvent {
    pub hdr: EventHeader,
    pub args: GdsArgs,
    /// `ssize_t` for Read/Write, `CUfileError_t.err` for the others (0 = success), 0 for void.
    pub ret: i64,
    pub batch_index: u32,
    /// For a batch entry: its `CUfileOpcode_t` (0 read, 1 write).
    pub batch_opcode: u32,
    /// `CUfileError_t.cu_err`: the CUDA driver's `CUresult` (with `CU_FILE_CUDA_DRIVER_ERROR`).
    pub cu_err: i32,
    pub _pad0: u32,
}

/// An nvidia-fs ioctl ([`crate::kinds::EventKind::NvfsIoctl`]), one `nvfs_direct_io` chunk
/// ([`crate::kinds::EventKind::NvfsDirectIo`]), or a POSIX read/write on a cuFile descriptor done by a thread
/// with no cuFile call in flight ([`crate::kinds::EventKind::GdsWorkerIo`]: cmd 0, `ret` = bytes or -errno,
/// `offset` -1 when the call has no position): the library's worker threads.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct NvfsEvent {
    pub hdr: EventHeader,
    /// The ioctl number (0 for direct I/O).
    pub cmd: u32,
    /// The target file's descriptor from the ioctl argument; -1 when not there/not readable.
    pub fd: i32,
    /// What the ioctl returned (0 or -errno); for direct I/O, bytes or -errno.
    pub ret: i64,
    /// `ioctl_return` of READ/WRITE (bytes or -errno) read back from the argument; 0 for a
    /// BATCH_IO entry (the driver copies back only the batch header, never an entry).
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
    /// 1: counted in the cuFile call in flight on this thread (its tally has it); 0: no call
    /// was in flight here (a worker thread of the library): userspace attributes it.
    pub in_call: u32,
    /// 1: a READ/WRITE/BATCH_IO entry submitted async (`ioargs.sync` = 0): the driver reports
    /// its bytes only to `nvfs_io_complete` (an [`crate::kinds::EventKind::NvfsComplete`] record), never in
    /// the ioctl's argument.
    pub async_io: u32,
    /// A completion: the file's device and inode (its descriptor is not known there); else 0.
    pub dev: u32,
    pub ino: u64,
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
