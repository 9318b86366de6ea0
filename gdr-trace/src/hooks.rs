//! THE hook table: every function gdr-trace hooks, where it lives, which eBPF programs hook
//! it, what it feeds, and whether tracing can go on without it. The attach strategy
//! (`loader::attach`), `gdr-trace probes` and the start-up warnings all come from this table.
//! Adding a hook is one row here plus one eBPF function in `gdr-trace-ebpf`.

use gdr_trace_common::HookId;

/// A userspace library hooked with uprobes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Library {
    Ibverbs,
    Cuda,
    /// GPUDirect Storage's userspace library.
    Cufile,
}

impl Library {
    /// The soname looked up on the system when no process is attached.
    pub const fn soname(self) -> &'static str {
        match self {
            Self::Ibverbs => "libibverbs.so.1",
            Self::Cuda => "libcuda.so.1",
            Self::Cufile => "libcufile.so.0",
        }
    }
    /// Prefix matched against the file names in /proc/PID/maps.
    pub const fn map_prefix(self) -> &'static str {
        match self {
            Self::Ibverbs => "libibverbs.so",
            Self::Cuda => "libcuda.so",
            Self::Cufile => "libcufile.so",
        }
    }
}

/// Which eBPF programs implement a hook, by program (function) name in `gdr-trace-ebpf`.
#[derive(Debug, Clone, Copy)]
pub enum Programs {
    /// A kernel function: BTF programs (fentry and/or fexit, all or none) where the kernel
    /// allows them, else probe programs (kprobe and/or kretprobe).
    Kernel {
        fentry: Option<&'static str>,
        fexit: Option<&'static str>,
        kprobe: Option<&'static str>,
        kretprobe: Option<&'static str>,
    },
    /// A userspace function with arguments and return value: uprobe + uretprobe.
    UserReturn { lib: Library, uprobe: &'static str, uretprobe: &'static str },
    /// System calls, hooked at exit (arguments and result in one program): fexit on each call's
    /// kernel entry point (`__x64_sys_<name>`, fires only for that call), else its
    /// `syscalls:sys_exit_<name>` tracepoint. `names`, `fexit`, `tracepoint` run in parallel.
    Syscalls {
        names: &'static [&'static str],
        fexit: &'static [&'static str],
        tracepoint: &'static [&'static str],
    },
    /// A kernel tracepoint.
    Tracepoint { category: &'static str, name: &'static str, program: &'static str },
}

impl Programs {
    /// Needs arguments and the return value: fexit, or kprobe + kretprobe.
    pub const fn kernel_return(fexit: &'static str, kprobe: &'static str, kretprobe: &'static str) -> Self {
        Self::Kernel { fentry: None, fexit: Some(fexit), kprobe: Some(kprobe), kretprobe: Some(kretprobe) }
    }
    /// Needs arguments only: fentry, or kprobe.
    pub const fn kernel_entry(fentry: &'static str, kprobe: &'static str) -> Self {
        Self::Kernel { fentry: Some(fentry), fexit: None, kprobe: Some(kprobe), kretprobe: None }
    }
    /// Marks the call in progress at entry and reports at return.
    pub const fn kernel_both(
        fentry: &'static str,
        fexit: &'static str,
        kprobe: &'static str,
        kretprobe: &'static str,
    ) -> Self {
        Self::Kernel {
            fentry: Some(fentry),
            fexit: Some(fexit),
            kprobe: Some(kprobe),
            kretprobe: Some(kretprobe),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Hook {
    pub id: HookId,
    /// Kernel symbol or library function.
    pub function: &'static str,
    /// Where it is usually found (documentation; the real place is looked up at attach time).
    pub usual_home: &'static str,
    pub programs: Programs,
    /// What its records feed.
    pub feeds: &'static str,
    /// Tracing goes on without it (every hook is optional today: any one source is enough).
    pub optional: bool,
}

impl Hook {
    pub const fn is_kernel(&self) -> bool {
        !matches!(self.programs, Programs::UserReturn { .. })
    }
}

/// Shorthand for a row: every hook is optional (any one source is enough to trace).
const fn row(
    id: HookId,
    function: &'static str,
    usual_home: &'static str,
    programs: Programs,
    feeds: &'static str,
) -> Hook {
    Hook { id, function, usual_home, programs, feeds, optional: true }
}

pub const HOOKS: &[Hook] = &[
    // ---- RDMA core and libibverbs ----
    row(
        HookId::IbUmemGet,
        "ib_umem_get",
        "ib_uverbs (Debian 6.1/6.12), ib_core elsewhere",
        Programs::kernel_return("mr_fexit_ib_umem_get", "mr_kprobe_ib_umem_get", "mr_kretprobe_ib_umem_get"),
        "mr_register: pinned user pages (verdict host), errno on failure, device",
    ),
    row(
        HookId::IbUmemRelease,
        "ib_umem_release",
        "ib_uverbs / ib_core",
        Programs::kernel_entry("mr_fentry_ib_umem_release", "mr_kprobe_ib_umem_release"),
        "mr_release of every kind of umem: live pinned bytes per process",
    ),
    row(
        HookId::IbvRegMr,
        "ibv_reg_mr",
        "libibverbs.so.1",
        Programs::UserReturn {
            lib: Library::Ibverbs,
            uprobe: "mr_uprobe_ibv_reg_mr",
            uretprobe: "mr_uretprobe_ibv_reg_mr",
        },
        "mr_register from userspace (second source; the only one if kernel hooks fail)",
    ),
    row(
        HookId::IbvRegMrIova2,
        "ibv_reg_mr_iova2",
        "libibverbs.so.1",
        Programs::UserReturn {
            lib: Library::Ibverbs,
            uprobe: "mr_uprobe_ibv_reg_mr_iova2",
            uretprobe: "mr_uretprobe_ibv_reg_mr_iova2",
        },
        "mr_register from userspace (NCCL's relaxed-ordering path)",
    ),
    row(
        HookId::IbvDeregMr,
        "ibv_dereg_mr",
        "libibverbs.so.1",
        Programs::UserReturn {
            lib: Library::Ibverbs,
            uprobe: "mr_uprobe_ibv_dereg_mr",
            uretprobe: "mr_uretprobe_ibv_dereg_mr",
        },
        "mr_release from userspace",
    ),
    // ---- GPU memory: peer memory (MLNX_OFED + nvidia-peermem) and NVIDIA P2P ----
    row(
        HookId::IbUmemGetPeer,
        "ib_umem_get_peer",
        "ib_core (MLNX_OFED / DOCA-OFED only)",
        Programs::kernel_both(
            "mr_fentry_ib_umem_get_peer",
            "mr_fexit_ib_umem_get_peer",
            "mr_kprobe_ib_umem_get_peer",
            "mr_kretprobe_ib_umem_get_peer",
        ),
        "mr_register on peer-memory kernels; marks the registration in progress for the evidence below",
    ),
    row(
        HookId::IbPeerUmemGet,
        "ib_peer_umem_get",
        "ib_core (MLNX_OFED)",
        Programs::kernel_return(
            "mr_fexit_ib_peer_umem_get",
            "mr_kprobe_ib_peer_umem_get",
            "mr_kretprobe_ib_peer_umem_get",
        ),
        "evidence: pinning failed and the peer-memory path was entered",
    ),
    row(
        HookId::NvMemAcquire,
        "nv_mem_acquire",
        "nvidia-peermem",
        Programs::kernel_return(
            "mr_fexit_nv_mem_acquire",
            "mr_kprobe_nv_mem_acquire",
            "mr_kretprobe_nv_mem_acquire",
        ),
        "evidence: nvidia-peermem claimed the range as GPU memory (returns 1)",
    ),
    row(
        HookId::NvMemAcquireNc,
        "nv_mem_acquire_nc",
        "nvidia-peermem",
        Programs::kernel_return(
            "mr_fexit_nv_mem_acquire_nc",
            "mr_kprobe_nv_mem_acquire_nc",
            "mr_kretprobe_nv_mem_acquire_nc",
        ),
        "evidence: as nv_mem_acquire (persistent API / no-invalidation client)",
    ),
    row(
        HookId::NvMemGetPages,
        "nv_mem_get_pages",
        "nvidia-peermem",
        Programs::kernel_return(
            "mr_fexit_nv_mem_get_pages",
            "mr_kprobe_nv_mem_get_pages",
            "mr_kretprobe_nv_mem_get_pages",
        ),
        "evidence: the client pinned the GPU pages (7 arguments: fentry needs kernel >= 6.3)",
    ),
    row(
        HookId::NvMemGetPagesNc,
        "nv_mem_get_pages_nc",
        "nvidia-peermem",
        Programs::kernel_return(
            "mr_fexit_nv_mem_get_pages_nc",
            "mr_kprobe_nv_mem_get_pages_nc",
            "mr_kretprobe_nv_mem_get_pages_nc",
        ),
        "evidence: as nv_mem_get_pages",
    ),
    row(
        HookId::NvidiaP2pGetPages,
        "nvidia_p2p_get_pages",
        "nvidia.ko",
        Programs::kernel_return(
            "mr_fexit_nvidia_p2p_get_pages",
            "mr_kprobe_nvidia_p2p_get_pages",
            "mr_kretprobe_nvidia_p2p_get_pages",
        ),
        "evidence: GPU pages pinned for P2P (legacy API); outside a registration: GDS or other",
    ),
    row(
        HookId::NvidiaP2pGetPagesPersistent,
        "nvidia_p2p_get_pages_persistent",
        "nvidia.ko",
        Programs::kernel_return(
            "mr_fexit_nvidia_p2p_get_pages_persistent",
            "mr_kprobe_nvidia_p2p_get_pages_persistent",
            "mr_kretprobe_nvidia_p2p_get_pages_persistent",
        ),
        "evidence: GPU pages pinned for P2P (persistent API); outside a registration: GDS or other",
    ),
    row(
        HookId::NvidiaP2pPutPages,
        "nvidia_p2p_put_pages",
        "nvidia.ko",
        Programs::kernel_entry("mr_fentry_nvidia_p2p_put_pages", "mr_kprobe_nvidia_p2p_put_pages"),
        "evidence: GPU pages unpinned",
    ),
    row(
        HookId::NvidiaP2pPutPagesPersistent,
        "nvidia_p2p_put_pages_persistent",
        "nvidia.ko",
        Programs::kernel_entry(
            "mr_fentry_nvidia_p2p_put_pages_persistent",
            "mr_kprobe_nvidia_p2p_put_pages_persistent",
        ),
        "evidence: GPU pages unpinned (persistent API)",
    ),
    row(
        HookId::NvGetP2pFreeCallback,
        "nv_get_p2p_free_callback",
        "nvidia-peermem",
        Programs::kernel_entry("mr_fentry_nv_get_p2p_free_callback", "mr_kprobe_nv_get_p2p_free_callback"),
        "gpu_freed: GPU memory freed under a live registration",
    ),
    // ---- GPU memory: dma-buf ----
    row(
        HookId::IbUmemDmabufGetPinned,
        "ib_umem_dmabuf_get_pinned",
        "ib_uverbs / ib_core (5.18+)",
        Programs::kernel_return(
            "mr_fexit_ib_umem_dmabuf_get_pinned",
            "mr_kprobe_ib_umem_dmabuf_get_pinned",
            "mr_kretprobe_ib_umem_dmabuf_get_pinned",
        ),
        "mr_register of a dma-buf: exporter (nv_dmabuf/nvidia = GPU), fd, offset, size",
    ),
    row(
        HookId::IbUmemDmabufGet,
        "ib_umem_dmabuf_get",
        "ib_uverbs / ib_core (5.12+)",
        Programs::kernel_return(
            "mr_fexit_ib_umem_dmabuf_get",
            "mr_kprobe_ib_umem_dmabuf_get",
            "mr_kretprobe_ib_umem_dmabuf_get",
        ),
        "mr_register of a dma-buf (non-pinned importers; inside _pinned on older kernels)",
    ),
    row(
        HookId::IbUmemDmabufGetPinnedWithDmaDevice,
        "ib_umem_dmabuf_get_pinned_with_dma_device",
        "ib_uverbs / ib_core (6.10+; often inlined)",
        Programs::kernel_return(
            "mr_fexit_ib_umem_dmabuf_get_pinned_with_dma_device",
            "mr_kprobe_ib_umem_dmabuf_get_pinned_with_dma_device",
            "mr_kretprobe_ib_umem_dmabuf_get_pinned_with_dma_device",
        ),
        "mr_register of a dma-buf (newer kernels' variant)",
    ),
    row(
        HookId::IbvRegDmabufMr,
        "ibv_reg_dmabuf_mr",
        "libibverbs.so.1",
        Programs::UserReturn {
            lib: Library::Ibverbs,
            uprobe: "mr_uprobe_ibv_reg_dmabuf_mr",
            uretprobe: "mr_uretprobe_ibv_reg_dmabuf_mr",
        },
        "mr_register of a dma-buf from userspace; fd -1 is NCCL's support probe (verdict probe)",
    ),
    row(
        HookId::CuMemGetHandleForAddressRange,
        "cuMemGetHandleForAddressRange",
        "libcuda.so.1",
        Programs::UserReturn {
            lib: Library::Cuda,
            uprobe: "mr_uprobe_cu_mem_get_handle_for_address_range",
            uretprobe: "mr_uretprobe_cu_mem_get_handle_for_address_range",
        },
        "gpu_va of a dma-buf MR: CUDA exported this GPU range as that fd",
    ),
    // ---- storage (issue 5): cuFile, nvidia-fs, POSIX I/O, page cache (HookId 20..=39) ----
    row(
        HookId::CuFileDriverOpen,
        "cuFileDriverOpen",
        "libcufile.so.0",
        cufile("gds_uprobe_cufile_driver_open", "gds_uretprobe_cufile_driver_open"),
        "gds_io: cuFile opened (POSIX or nvidia-fs behind it: see the I/O)",
    ),
    row(
        HookId::CuFileHandleRegister,
        "cuFileHandleRegister",
        "libcufile.so.0",
        cufile("gds_uprobe_cufile_handle_register", "gds_uretprobe_cufile_handle_register"),
        "gds_io: the fd behind each CUfileHandle_t",
    ),
    row(
        HookId::CuFileBufRegister,
        "cuFileBufRegister",
        "libcufile.so.0",
        cufile("gds_uprobe_cufile_buf_register", "gds_uretprobe_cufile_buf_register"),
        "gds_io: GPU buffer registration (nvidia-fs MAP or nothing)",
    ),
    row(
        HookId::CuFileRead,
        "cuFileRead",
        "libcufile.so.0",
        cufile("gds_uprobe_cufile_read", "gds_uretprobe_cufile_read"),
        "gds_io: gds-nvfs or gds-compat per read",
    ),
    row(
        HookId::CuFileWrite,
        "cuFileWrite",
        "libcufile.so.0",
        cufile("gds_uprobe_cufile_write", "gds_uretprobe_cufile_write"),
        "gds_io: gds-nvfs or gds-compat per write",
    ),
    row(
        HookId::CuFileReadAsync,
        "cuFileReadAsync",
        "libcufile.so.0",
        cufile("gds_uprobe_cufile_read_async", "gds_uretprobe_cufile_read_async"),
        "gds_io: stream-ordered reads (I/O done on the calling thread is classified)",
    ),
    row(
        HookId::CuFileBatchIoSubmit,
        "cuFileBatchIOSubmit",
        "libcufile.so.0",
        cufile("gds_uprobe_cufile_batch_io_submit", "gds_uretprobe_cufile_batch_io_submit"),
        "gds_io: one per batch entry (I/O done inside the submit call is classified)",
    ),
    row(
        HookId::NvfsIoctl,
        "nvfs_ioctl",
        "nvidia_fs (no BTF: kprobe)",
        Programs::kernel_return(
            "nvfs_fexit_nvfs_ioctl",
            "nvfs_kprobe_nvfs_ioctl",
            "nvfs_kretprobe_nvfs_ioctl",
        ),
        "nvfs_io: READ/WRITE/MAP/BATCH_IO decoded (gds-nvfs evidence)",
    ),
    row(
        HookId::NvfsDirectIo,
        "nvfs_direct_io",
        "nvidia_fs (no BTF: kprobe)",
        Programs::kernel_return(
            "nvfs_fexit_nvfs_direct_io",
            "nvfs_kprobe_nvfs_direct_io",
            "nvfs_kretprobe_nvfs_direct_io",
        ),
        "nvfs_direct_io: bytes the driver moved (DMA evidence)",
    ),
    row(
        HookId::SysIoctl,
        "ioctl",
        "syscall",
        Programs::Syscalls {
            names: &["ioctl"],
            fexit: &["nvfs_fexit_ioctl"],
            tracepoint: &["nvfs_tp_ioctl"],
        },
        "nvfs_io from the ioctl system call, only where nvfs_ioctl can't be hooked",
    ),
    row(
        HookId::SysOpenat,
        "openat",
        "syscall",
        Programs::Syscalls {
            names: &["openat"],
            fexit: &["open_fexit_openat"],
            tracepoint: &["open_tp_openat"],
        },
        "paths and open flags (O_DIRECT) of regular files",
    ),
    row(
        HookId::SysClose,
        "close",
        "syscall",
        Programs::Syscalls {
            names: &["close"],
            fexit: &["close_fexit_close"],
            tracepoint: &["close_tp_close"],
        },
        "a descriptor's final POSIX counters",
    ),
    row(
        HookId::PageCacheFill,
        "mm_filemap_add_to_page_cache",
        "tracepoint filemap",
        Programs::Tracepoint {
            category: "filemap",
            name: "mm_filemap_add_to_page_cache",
            program: "fill_tp_mm_filemap_add_to_page_cache",
        },
        "pages filled per process and file (page-cache hit ratio)",
    ),
    row(
        HookId::SysRead,
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
    row(
        HookId::SysWrite,
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
];

/// A cuFile uprobe + uretprobe pair.
const fn cufile(uprobe: &'static str, uretprobe: &'static str) -> Programs {
    Programs::UserReturn { lib: Library::Cufile, uprobe, uretprobe }
}

/// The process filter's fork follower (attached only by `attach`).
pub const FORK_TRACKER: (&str, &str, &str) = ("track_sched_process_fork", "sched", "sched_process_fork");

pub fn by_id(id: HookId) -> &'static Hook {
    HOOKS.iter().find(|h| h.id == id).expect("every HookId has a row in HOOKS")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hook_id_has_one_row() {
        for id in HookId::ALL {
            assert_eq!(HOOKS.iter().filter(|h| h.id == *id).count(), 1, "{id:?}");
        }
    }
}
