//! THE hook table: every function gdr-trace hooks, where it lives, which eBPF programs hook
//! it, what it feeds, and whether tracing can go on without it. The attach strategy
//! (`loader::attach`), `gdr-trace probes` and the start-up warnings all come from this table.
//! Adding a hook is one row here plus one eBPF function in `gdr-trace-ebpf`.

use gdr_trace_common::HookId;

mod storage;

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

/// Registrations: RDMA core, libibverbs, the GPU peer-memory / P2P / dma-buf paths, CUDA.
const REGISTRATION: &[Hook] = &[
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
];

/// The whole table: registration hooks, then the storage path's (`hooks/storage.rs`).
pub const HOOKS: &[Hook] =
    &concat::<{ REGISTRATION.len() + storage::STORAGE.len() }>(REGISTRATION, storage::STORAGE);

const fn concat<const N: usize>(a: &[Hook], b: &[Hook]) -> [Hook; N] {
    assert!(a.len() + b.len() == N);
    let mut out = [a[0]; N];
    let mut i = 0;
    while i < N {
        out[i] = if i < a.len() { a[i] } else { b[i - a.len()] };
        i += 1;
    }
    out
}

/// The process filter's fork follower (attached only by `attach`).
pub const FORK_TRACKER: (&str, &str, &str) = ("track_sched_process_fork", "sched", "sched_process_fork");
/// Forgets traced tasks as they exit (`TRACKED` stays bounded by the live ones).
pub const EXIT_UNTRACKER: (&str, &str, &str) = ("untrack_sched_process_exit", "sched", "sched_process_exit");

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
