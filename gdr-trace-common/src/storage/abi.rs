//! The ABI facts the storage programs read: nvidia-fs ioctl numbers and argument layouts,
//! cuFile struct offsets, and the names of the storage globals and maps.

/// Filesystems whose files are not storage (include/uapi/linux/magic.h): their reads are the
/// kernel answering from memory (procfs, sysfs, cgroups, tracing, BPF, pipes, sockets, anon
/// inodes), never page-cache I/O of a device. The storage programs neither count nor report them.
pub const PSEUDO_FS: [u64; 16] = [
    0x9fa0,      // PROC_SUPER_MAGIC
    0x6265_6572, // SYSFS_MAGIC
    0x0027_e0eb, // CGROUP_SUPER_MAGIC
    0x6367_7270, // CGROUP2_SUPER_MAGIC
    0x6462_6720, // DEBUGFS_MAGIC
    0x7472_6163, // TRACEFS_MAGIC
    0x7363_6673, // SECURITYFS_MAGIC
    0xcafe_4a11, // BPF_FS_MAGIC
    0x6165_676c, // PSTOREFS_MAGIC
    0x6265_6570, // CONFIGFS_MAGIC
    0x1cd1,      // DEVPTS_SUPER_MAGIC
    0x6e73_6673, // NSFS_MAGIC
    0xde5e_81e4, // EFIVARFS_MAGIC
    0x5049_5045, // PIPEFS_MAGIC
    0x534f_434b, // SOCKFS_MAGIC
    0x0904_1934, // ANON_INODE_FS_MAGIC
];

/// The kernel's filesystem names of the same (`/proc/self/mountinfo`), for userspace.
pub const PSEUDO_FS_NAMES: [&str; 16] = [
    "proc",
    "sysfs",
    "cgroup",
    "cgroup2",
    "debugfs",
    "tracefs",
    "securityfs",
    "bpf",
    "pstore",
    "configfs",
    "devpts",
    "nsfs",
    "efivarfs",
    "pipefs",
    "sockfs",
    "anon_inodefs",
];

/// Descriptors `FILE_IO` holds, over every process of the node.
pub const FILE_IO_ENTRIES: u32 = 16384;
/// Tracing the whole node, once `FILE_IO` is half full, a tenant holding this many entries gets
/// no more (its new descriptors go uncounted, each a lost `over_budget` record): one user
/// holding opens cannot leave the others no room.
pub const FILES_PER_TENANT: u64 = FILE_IO_ENTRIES as u64 / 4;

/// nvidia-fs ioctl numbers (gds-nvidia-fs `nvfs-core.h`: `_IOW('t', n, int)`).
pub mod nvfs {
    pub const REMOVE: u32 = 0x4004_7401;
    pub const READ: u32 = 0x4004_7402;
    pub const MAP: u32 = 0x4004_7403;
    pub const WRITE: u32 = 0x4004_7404;
    pub const SET_RDMA_REG_INFO: u32 = 0x4004_7405;
    pub const GET_RDMA_REG_INFO: u32 = 0x4004_7406;
    pub const CLEAR_RDMA_REG_INFO: u32 = 0x4004_7407;
    pub const BATCH_IO: u32 = 0x4004_7408;

    /// `nvfs_ioctl_ioargs` (packed): cpuvaddr, offset, size, end_fence, ioctl_return, file_args
    /// (32 bytes), fd, bitfield byte (optype in bits 4..6).
    pub const IOARGS_CPUVADDR: u64 = 0;
    pub const IOARGS_OFFSET: u64 = 8;
    pub const IOARGS_SIZE: u64 = 16;
    pub const IOARGS_RETURN: u64 = 32;
    pub const IOARGS_FD: u64 = 72;
    pub const IOARGS_FLAGS: u64 = 76;
    pub const IOARGS_LEN: u64 = 80;
    /// `nvfs_ioctl_map_s`: size, pdevinfo, cpuvaddr, gpuvaddr.
    pub const MAP_SIZE: u64 = 0;
    pub const MAP_CPUVADDR: u64 = 16;
    pub const MAP_GPUVADDR: u64 = 24;
    /// `nvfs_ioctl_batch_ioargs`: ctx_id, nents, io_entries.
    pub const BATCH_NENTS: u64 = 8;
    pub const BATCH_ENTRIES: u64 = 16;

    pub const fn name(cmd: u32) -> &'static str {
        match cmd {
            REMOVE => "REMOVE",
            READ => "READ",
            MAP => "MAP",
            WRITE => "WRITE",
            SET_RDMA_REG_INFO => "SET_RDMA_REG_INFO",
            GET_RDMA_REG_INFO => "GET_RDMA_REG_INFO",
            CLEAR_RDMA_REG_INFO => "CLEAR_RDMA_REG_INFO",
            BATCH_IO => "BATCH_IO",
            _ => "?",
        }
    }

    pub const fn is_nvfs(cmd: u32) -> bool {
        cmd >= REMOVE && cmd <= BATCH_IO
    }
}

/// cuFile ABI (cufile.h): `CUfileDescr_t.handle.fd`, `CUfileIOParams_t` fields.
pub mod cufile {
    pub const DESCR_FD: u64 = 8;
    pub const IOPARAMS_SIZE: u64 = 64;
    pub const IOPARAMS_BUF: u64 = 8;
    pub const IOPARAMS_FILE_OFFSET: u64 = 16;
    pub const IOPARAMS_BUF_OFFSET: u64 = 24;
    pub const IOPARAMS_LEN: u64 = 32;
    pub const IOPARAMS_FH: u64 = 40;
    pub const IOPARAMS_OPCODE: u64 = 48;
    /// `CUfileIOEvents_t`: cookie, status, ret.
    pub const IOEVENTS_SIZE: u64 = 24;
    pub const IOEVENTS_STATUS: u64 = 8;
    pub const IOEVENTS_RET: u64 = 16;
    /// `CUfileStatus_t` of a completed entry.
    pub const STATUS_COMPLETE: u32 = 0x10;
}

/// Global knobs for the storage programs (set by userspace before load).
pub mod globals {
    /// u32 offsets in `struct pt_regs` of syscall arguments 0..=3 (at syscall exit).
    pub const REGS_ARG0_OFF: &str = "REGS_ARG0_OFF";
    pub const REGS_ARG1_OFF: &str = "REGS_ARG1_OFF";
    pub const REGS_ARG2_OFF: &str = "REGS_ARG2_OFF";
    pub const REGS_ARG3_OFF: &str = "REGS_ARG3_OFF";
    /// u32 offset in `struct pt_regs` of the system call number (`orig_ax`, arm64 `syscallno`).
    pub const REGS_NR_OFF: &str = "REGS_NR_OFF";
    /// u32 offset of `tgid` in `struct task_struct`.
    pub const TASK_TGID_OFF: &str = "TASK_TGID_OFF";
    /// [u32; super::READ_SYSCALLS]: numbers of read, pread64, readv, preadv, preadv2 on this ABI.
    pub const READ_SYSCALL_NRS: &str = "READ_SYSCALL_NRS";
    /// u32 offset of `ret` in `syscalls:sys_exit_*` records.
    pub const SYS_EXIT_RET_OFF: &str = "SYS_EXIT_RET_OFF";
    /// `filemap:mm_filemap_add_to_page_cache` field offsets (order: `OFFSET_UNKNOWN` if absent).
    pub const FILL_INO_OFF: &str = "FILL_INO_OFF";
    pub const FILL_DEV_OFF: &str = "FILL_DEV_OFF";
    pub const FILL_ORDER_OFF: &str = "FILL_ORDER_OFF";
    /// The fd -> file walk: task_struct.files, files_struct.fdt, fdtable.{max_fds,fd},
    /// file.{f_flags,f_inode}, inode.{i_mode,i_ino,i_sb}, super_block.s_dev.
    pub const TASK_FILES_OFF: &str = "TASK_FILES_OFF";
    pub const FILES_FDT_OFF: &str = "FILES_FDT_OFF";
    pub const FDT_MAX_FDS_OFF: &str = "FDT_MAX_FDS_OFF";
    pub const FDT_FD_OFF: &str = "FDT_FD_OFF";
    pub const FILE_FLAGS_OFF: &str = "FILE_FLAGS_OFF";
    pub const FILE_INODE_OFF: &str = "FILE_INODE_OFF";
    /// `file.private_data` and `inode.i_rdev` (read by the pin hooks: a dma-buf's exporter, the
    /// uverbs device a verb came through).
    pub const FILE_PRIVATE_DATA_OFF: &str = "FILE_PRIVATE_DATA_OFF";
    pub const INODE_RDEV_OFF: &str = "INODE_RDEV_OFF";
    pub const INODE_MODE_OFF: &str = "INODE_MODE_OFF";
    pub const INODE_INO_OFF: &str = "INODE_INO_OFF";
    pub const INODE_SB_OFF: &str = "INODE_SB_OFF";
    pub const SB_DEV_OFF: &str = "SB_DEV_OFF";
    /// `super_block.s_magic`: which filesystem (synthetic ones are not storage, `PSEUDO_FS`).
    pub const SB_MAGIC_OFF: &str = "SB_MAGIC_OFF";
    /// io_uring tracepoint field offsets: `req` and `opcode` of `io_uring_submit_req`, `req` and
    /// `fd` of `io_uring_file_get`, `req` and `res` of `io_uring_complete`.
    pub const URING_SUBMIT_REQ_OFF: &str = "URING_SUBMIT_REQ_OFF";
    pub const URING_SUBMIT_OPCODE_OFF: &str = "URING_SUBMIT_OPCODE_OFF";
    pub const URING_FILE_REQ_OFF: &str = "URING_FILE_REQ_OFF";
    pub const URING_FILE_FD_OFF: &str = "URING_FILE_FD_OFF";
    pub const URING_DONE_REQ_OFF: &str = "URING_DONE_REQ_OFF";
    pub const URING_DONE_RES_OFF: &str = "URING_DONE_RES_OFF";
    /// `struct kiocb`: `ki_filp`, `ki_pos`, `ki_complete` (what `nvfs_io_complete` is given).
    pub const KIOCB_FILP_OFF: &str = "KIOCB_FILP_OFF";
    pub const KIOCB_POS_OFF: &str = "KIOCB_POS_OFF";
    pub const KIOCB_COMPLETE_OFF: &str = "KIOCB_COMPLETE_OFF";
}

/// Names of the storage maps userspace reads.
pub mod maps {
    pub const FILE_IO: &str = "FILE_IO";
    /// Entries each tenant put into `FILE_IO` and the kernel took out: tenant -> [in, out].
    pub const TRACKED_FILES: &str = "TRACKED_FILES";
    /// Entries of each tenant userspace took out of `FILE_IO` (exited processes'): tenant ->
    /// count, written by userspace only. The key [`crate::ALL_TENANTS`] counts every tenant's.
    pub const TRACKED_FREED: &str = "TRACKED_FREED";
    pub const PAGE_FILLS: &str = "PAGE_FILLS";
    pub const IO_BATCH: &str = "IO_BATCH";
    pub const URING_LOOSE: &str = "URING_LOOSE";
}

/// io_uring opcodes that read or write a file (`include/uapi/linux/io_uring.h`; stable ABI).
pub mod uring {
    pub const READV: u8 = 1;
    pub const WRITEV: u8 = 2;
    pub const READ_FIXED: u8 = 4;
    pub const WRITE_FIXED: u8 = 5;
    pub const READ: u8 = 22;
    pub const WRITE: u8 = 23;

    /// Some(false) for a read, Some(true) for a write, None for anything else.
    pub const fn is_write(opcode: u8) -> Option<bool> {
        match opcode {
            READV | READ_FIXED | READ => Some(false),
            WRITEV | WRITE_FIXED | WRITE => Some(true),
            _ => None,
        }
    }
}
