//! The storage path's rows of the hook table (`Path::Storage`) below libcufile (its rows:
//! `hooks::cufile`): nvidia-fs, POSIX I/O system calls, the page cache and io_uring. How
//! Syscalls and Tracepoint rows attach: `loader::storage_attach`.

use gdr_trace_common::HookId;

use super::{row, Hook, Path, Programs, Role};

pub const STORAGE: &[Hook] = &[
    // NVIDIA/gds-nvidia-fs src/nvfs-core.c (2.x): the file_operations' unlocked_ioctl.
    row(
        HookId::NvfsIoctl,
        Role::NvfsCall,
        Path::Storage,
        "nvfs_ioctl",
        "nvidia_fs (no BTF: kprobe)",
        Programs::kernel_both(
            "nvfs_fentry_nvfs_ioctl",
            "nvfs_fexit_nvfs_ioctl",
            "nvfs_kprobe_nvfs_ioctl",
            "nvfs_kretprobe_nvfs_ioctl",
        ),
        "nvfs_io: READ/WRITE/MAP/BATCH_IO decoded (gds-nvfs evidence); async requests' starts for their completions",
    ),
    // NVIDIA/gds-nvidia-fs src/nvfs-core.c (v2.17.0..v2.28.4): static with one call site, so a
    // build may inline it away (the probes then report it missing; nvfs_ioctl still gives
    // gds-nvfs, and async completions can't be attributed: counted as nvfs_async_miss).
    row(
        HookId::NvfsDirectIo,
        Role::NvfsCall,
        Path::Storage,
        "nvfs_direct_io",
        "nvidia_fs (no BTF: kprobe)",
        Programs::kernel_both(
            "nvfs_fentry_nvfs_direct_io",
            "nvfs_fexit_nvfs_direct_io",
            "nvfs_kprobe_nvfs_direct_io",
            "nvfs_kretprobe_nvfs_direct_io",
        ),
        "nvfs_direct_io: bytes of a sync chunk; an async one recorded (-EIOCBQUEUED) for its completion",
    ),
    // NVIDIA/gds-nvidia-fs src/nvfs-core.c (v2.17.0..v2.28.4): static, address-taken (the
    // kiocb's ki_complete), (kiocb, res) on 5.16+ and (kiocb, res, res2) before: res is the
    // second argument in both. Runs on the filesystem's completion context. Entry only: the
    // bytes are its argument.
    row(
        HookId::NvfsIoComplete,
        Role::NvfsCall,
        Path::Storage,
        "nvfs_io_complete",
        "nvidia_fs (no BTF: kprobe)",
        Programs::kernel_entry("nvfs_fentry_nvfs_io_complete", "nvfs_kprobe_nvfs_io_complete"),
        "nvfs_io_complete: the bytes of async and batch I/O, which the driver reports nowhere else",
    ),
    // torvalds/linux: the ioctl system call (all versions).
    row(
        HookId::SysIoctl,
        Role::NvfsCall,
        Path::Storage,
        "ioctl",
        "syscall",
        Programs::Syscalls {
            names: &["ioctl"],
            fexit: &["nvfs_fexit_ioctl"],
            tracepoint: &["nvfs_tp_ioctl"],
        },
        "nvfs_io from the ioctl system call, only where nvfs_ioctl can't be hooked",
    ),
    // torvalds/linux: openat / openat2 system calls (openat2 5.6+).
    row(
        HookId::SysOpenat,
        Role::FileOpen,
        Path::Storage,
        "openat, openat2",
        "syscall",
        Programs::Syscalls {
            names: &["openat", "openat2"],
            fexit: &["open_fexit_openat", "open_fexit_openat2"],
            tracepoint: &["open_tp_openat", "open_tp_openat2"],
        },
        "paths and open flags (O_DIRECT) of regular files",
    ),
    // torvalds/linux: the close system call.
    row(
        HookId::SysClose,
        Role::FileClose,
        Path::Storage,
        "close",
        "syscall",
        Programs::Syscalls {
            names: &["close"],
            fexit: &["close_fexit_close"],
            tracepoint: &["close_tp_close"],
        },
        "a descriptor's final POSIX counters",
    ),
    // torvalds/linux include/trace/events/filemap.h (4.14+).
    row(
        HookId::PageCacheFill,
        Role::PageCacheFill,
        Path::Storage,
        "mm_filemap_add_to_page_cache",
        "tracepoint filemap",
        Programs::Tracepoint {
            category: "filemap",
            name: "mm_filemap_add_to_page_cache",
            program: "fill_tp_mm_filemap_add_to_page_cache",
        },
        "pages filled per process and file (page-cache hit ratio)",
    ),
    // torvalds/linux: read, pread64, readv, preadv, preadv2 system calls.
    row(
        HookId::SysRead,
        Role::PosixCounter,
        Path::Storage,
        "read, pread64, readv, preadv, preadv2",
        "syscall",
        Programs::Syscalls {
            names: &["read", "pread64", "readv", "preadv", "preadv2"],
            fexit: &[
                "io_fexit_read",
                "io_fexit_pread64",
                "io_fexit_readv",
                "io_fexit_preadv",
                "io_fexit_preadv2",
            ],
            tracepoint: &["io_tp_read", "io_tp_pread64", "io_tp_readv", "io_tp_preadv", "io_tp_preadv2"],
        },
        "file_io_summary: reads, bytes, sizes, sequential share (counted in the kernel)",
    ),
    // torvalds/linux: write, pwrite64, writev, pwritev, pwritev2 system calls.
    row(
        HookId::SysWrite,
        Role::PosixCounter,
        Path::Storage,
        "write, pwrite64, writev, pwritev, pwritev2",
        "syscall",
        Programs::Syscalls {
            names: &["write", "pwrite64", "writev", "pwritev", "pwritev2"],
            fexit: &[
                "io_fexit_write",
                "io_fexit_pwrite64",
                "io_fexit_writev",
                "io_fexit_pwritev",
                "io_fexit_pwritev2",
            ],
            tracepoint: &["io_tp_write", "io_tp_pwrite64", "io_tp_writev", "io_tp_pwritev", "io_tp_pwritev2"],
        },
        "file_io_summary: writes, bytes (counted in the kernel)",
    ),
    // torvalds/linux include/trace/events/io_uring.h (submit_req 5.19+, file_get 5.5+,
    // complete 5.5+).
    uring(
        HookId::IoUringSubmit,
        "io_uring_submit_req",
        "uring_tp_submit_req",
        "io_uring reads and writes of traced processes (not system calls: the syscall hooks miss them)",
    ),
    uring(
        HookId::IoUringFileGet,
        "io_uring_file_get",
        "uring_tp_file_get",
        "the descriptor of each io_uring request (registered files have none: counted per process)",
    ),
    uring(
        HookId::IoUringComplete,
        "io_uring_complete",
        "uring_tp_complete",
        "io_uring results, counted per (process, fd) with the system calls' I/O",
    ),
];

/// An `io_uring:` tracepoint row.
const fn uring(id: HookId, name: &'static str, program: &'static str, purpose: &'static str) -> Hook {
    row(
        id,
        Role::UringCounter,
        Path::Storage,
        name,
        "tracepoint io_uring",
        Programs::Tracepoint { category: "io_uring", name, program },
        purpose,
    )
}
