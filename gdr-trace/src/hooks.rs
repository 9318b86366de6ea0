//! THE hook table: every function gdr-trace hooks, what its records prove (role) and which
//! path it watches, where it lives, which eBPF programs hook it, what it feeds, and whether
//! tracing can go on without it. The attach strategy (`loader::attach`), `gdr-trace probes`,
//! the start-up warnings and the correlation (by role) all come from this table; so do the
//! tracer's own programs (fork follower, fentry capability probe). Adding a hook is one row
//! here plus one eBPF function in `gdr-trace-ebpf` (`hooks/tests.rs` checks the two agree).

use gdr_trace_common::HookId;

use crate::drivers::Branches;

mod bytes;
mod call;
mod cufile;
mod gpu;
#[cfg(test)]
mod kernels_tests;
mod nv_host;
mod p2p;
mod programs;
mod queues;
mod role;
mod storage;
#[cfg(test)]
mod tests;
mod tracer;

pub use call::{Call, CudaOp, Shape};
pub use cufile::{NotHooked, CUFILE_NOT_HOOKED};
pub use programs::{Library, ProgramKind, Programs};
pub use role::{Path, Role};

#[derive(Debug, Clone, Copy)]
pub struct Hook {
    pub id: HookId,
    /// What its records prove: what analysis matches on.
    pub role: Role,
    pub path: Path,
    /// Kernel symbol or library function.
    pub function: &'static str,
    /// Where it is usually found (documentation; the real place is looked up at attach time).
    pub usual_home: &'static str,
    pub programs: Programs,
    /// What its records feed.
    pub feeds: &'static str,
    /// NVIDIA's functions: the driver branches that have it (`drivers::NVIDIA_BRANCHES`).
    pub nvidia: Option<Branches>,
    /// A library call's operation (cuFile, libcuda): what its records are.
    pub call: Call,
}

impl Hook {
    pub const fn is_kernel(&self) -> bool {
        !self.programs.is_user()
    }

    /// The kernel symbols it attaches to: its function, or each of a symbol set's.
    pub fn symbols(&self) -> Vec<&'static str> {
        match self.programs {
            Programs::KernelSymbols { symbols, .. } => symbols.to_vec(),
            _ => vec![self.function],
        }
    }

    /// An NVIDIA function that these driver branches have.
    pub const fn nvidia(self, branches: Branches) -> Hook {
        Hook { nvidia: Some(branches), ..self }
    }

    /// A library call whose records are this operation.
    pub const fn op(self, call: Call) -> Hook {
        Hook { call, ..self }
    }
}

/// Shorthand for a row. Every hook is optional: tracing goes on without any one of them, with
/// the reason it is missing (any one source of a fact is enough).
const fn row(
    id: HookId,
    role: Role,
    path: Path,
    function: &'static str,
    usual_home: &'static str,
    programs: Programs,
    feeds: &'static str,
) -> Hook {
    Hook { id, role, path, function, usual_home, programs, feeds, nvidia: None, call: Call::None }
}

/// Registrations: RDMA core and libibverbs (the peer-memory / P2P rows: `hooks/gpu.rs`).
const REGISTRATION: &[Hook] = &[
    // ---- RDMA core and libibverbs ----
    // torvalds/linux drivers/infiniband/core/umem.c (5.6+ signature; Debian 6.1, 6.12).
    row(
        HookId::IbUmemGet,
        Role::UmemPinned,
        Path::Rdma,
        "ib_umem_get",
        "ib_uverbs (Debian 6.1/6.12), ib_core elsewhere",
        Programs::kernel_return("mr_fexit_ib_umem_get", "mr_kprobe_ib_umem_get", "mr_kretprobe_ib_umem_get"),
        "mr_register: pinned user pages (verdict host), errno on failure, device",
    ),
    // Kernels past 6.12 pin through other names (torvalds/linux drivers/infiniband/core/umem.c
    // in the RDMA pull for 7.2, Jiri Pirko's umem series): no `ib_umem_get` symbol there. Each
    // row says the release it appeared in; `probes` says which this kernel has. Nested calls of
    // one pin join into one registration (the same umem).
    pin_row(
        HookId::IbUmemGetVa,
        "ib_umem_get_va",
        "7.2 series (ib_umem_get renamed; a static inline over ib_umem_get_attr_or_va in the 7.2 release)",
        ["mr_fexit_ib_umem_get_va", "mr_kprobe_ib_umem_get_va", "mr_kretprobe_ib_umem_get_va"],
    ),
    pin_row(
        HookId::IbUmemGetAttrOrVa,
        "ib_umem_get_attr_or_va",
        "7.2+, ib_core: (dev, attrs, attr_id, addr, size, access); ib_umem_get_va's body",
        [
            "mr_fexit_ib_umem_get_attr_or_va",
            "mr_kprobe_ib_umem_get_attr_or_va",
            "mr_kretprobe_ib_umem_get_attr_or_va",
        ],
    ),
    pin_row(
        HookId::IbUmemGetAttr,
        "ib_umem_get_attr",
        "7.2+, ib_core: (dev, attrs, attr_id, size, access), a buffer described by a uverbs attribute",
        ["mr_fexit_ib_umem_get_attr", "mr_kprobe_ib_umem_get_attr", "mr_kretprobe_ib_umem_get_attr"],
    ),
    pin_row(
        HookId::IbUmemGetCqBuf,
        "ib_umem_get_cq_buf",
        "7.2+, ib_core: a CQ's buffer from CQ_CREATE's attributes",
        ["mr_fexit_ib_umem_get_cq_buf", "mr_kprobe_ib_umem_get_cq_buf", "mr_kretprobe_ib_umem_get_cq_buf"],
    ),
    pin_row(
        HookId::IbUmemGetCqBufOrVa,
        "ib_umem_get_cq_buf_or_va",
        "7.2+, ib_core: a CQ's buffer, from its attributes or the driver's address (mlx5 create_cq_user)",
        [
            "mr_fexit_ib_umem_get_cq_buf_or_va",
            "mr_kprobe_ib_umem_get_cq_buf_or_va",
            "mr_kretprobe_ib_umem_get_cq_buf_or_va",
        ],
    ),
    pin_row(
        HookId::IbUmemGetDesc,
        "ib_umem_get_desc",
        "7.2+, ib_core: (dev, desc, access), where every 7.2 pin goes (VA or dma-buf); may be inlined into its callers",
        ["mr_fexit_ib_umem_get_desc", "mr_kprobe_ib_umem_get_desc", "mr_kretprobe_ib_umem_get_desc"],
    ),
    // torvalds/linux drivers/infiniband/core/umem.c (all versions).
    row(
        HookId::IbUmemRelease,
        Role::UmemReleased,
        Path::Rdma,
        "ib_umem_release",
        "ib_uverbs / ib_core",
        Programs::kernel_entry("mr_fentry_ib_umem_release", "mr_kprobe_ib_umem_release"),
        "mr_release of every kind of umem: live pinned bytes per process",
    ),
    // linux-rdma/rdma-core libibverbs/verbs.c (libibverbs.so.1, IBVERBS_1.1; a macro over
    // ibv_reg_mr_iova2 in headers since v29, still exported).
    row(
        HookId::IbvRegMr,
        Role::UserRegister,
        Path::Rdma,
        "ibv_reg_mr",
        "libibverbs.so.1",
        Programs::UserReturn {
            lib: Library::Ibverbs,
            uprobe: "mr_uprobe_ibv_reg_mr",
            uretprobe: "mr_uretprobe_ibv_reg_mr",
        },
        "mr_register from userspace (second source; the only one if kernel hooks fail)",
    ),
    // linux-rdma/rdma-core libibverbs/verbs.c (IBVERBS_1.8, v24+).
    row(
        HookId::IbvRegMrIova2,
        Role::UserRegister,
        Path::Rdma,
        "ibv_reg_mr_iova2",
        "libibverbs.so.1",
        Programs::UserReturn {
            lib: Library::Ibverbs,
            uprobe: "mr_uprobe_ibv_reg_mr_iova2",
            uretprobe: "mr_uretprobe_ibv_reg_mr_iova2",
        },
        "mr_register from userspace (NCCL's relaxed-ordering path)",
    ),
    // linux-rdma/rdma-core libibverbs/verbs.c (IBVERBS_1.1).
    row(
        HookId::IbvDeregMr,
        Role::UserDeregister,
        Path::Rdma,
        "ibv_dereg_mr",
        "libibverbs.so.1",
        Programs::UserReturn {
            lib: Library::Ibverbs,
            uprobe: "mr_uprobe_ibv_dereg_mr",
            uretprobe: "mr_uretprobe_ibv_dereg_mr",
        },
        "mr_release from userspace",
    ),
];

/// A pin hook of a later kernel: `ib_umem_get`'s role and feed, its own programs.
const fn pin_row(id: HookId, function: &'static str, usual_home: &'static str, p: [&'static str; 3]) -> Hook {
    row(
        id,
        Role::UmemPinned,
        Path::Rdma,
        function,
        usual_home,
        Programs::kernel_return(p[0], p[1], p[2]),
        "mr_register / queue_pin: pinned user pages, as ib_umem_get on earlier kernels",
    )
}

/// Registrations, continued: dma-buf and CUDA's export of GPU memory.
const DMABUF: &[Hook] = &[
    // ---- GPU memory: dma-buf ----
    // torvalds/linux drivers/infiniband/core/umem_dmabuf.c (5.16+: "RDMA/umem: Allow pinned
    // dmabuf umem usage", with EFA's dma-buf MRs).
    row(
        HookId::IbUmemDmabufGetPinned,
        Role::DmabufRegister,
        Path::Gpu,
        "ib_umem_dmabuf_get_pinned",
        "ib_uverbs / ib_core (5.16+)",
        Programs::kernel_return(
            "mr_fexit_ib_umem_dmabuf_get_pinned",
            "mr_kprobe_ib_umem_dmabuf_get_pinned",
            "mr_kretprobe_ib_umem_dmabuf_get_pinned",
        ),
        "mr_register of a dma-buf: exporter (nv_dmabuf/nvidia = GPU), fd, offset, size",
    ),
    // torvalds/linux drivers/infiniband/core/umem_dmabuf.c (5.12+).
    row(
        HookId::IbUmemDmabufGet,
        Role::DmabufRegister,
        Path::Gpu,
        "ib_umem_dmabuf_get",
        "ib_uverbs / ib_core (5.12+)",
        Programs::kernel_return(
            "mr_fexit_ib_umem_dmabuf_get",
            "mr_kprobe_ib_umem_dmabuf_get",
            "mr_kretprobe_ib_umem_dmabuf_get",
        ),
        "mr_register of a dma-buf (non-pinned importers; inside _pinned on older kernels)",
    ),
    // torvalds/linux drivers/infiniband/core/umem_dmabuf.c (6.12+: mlx5's data-direct series;
    // inlined on Debian 6.12).
    row(
        HookId::IbUmemDmabufGetPinnedWithDmaDevice,
        Role::DmabufRegister,
        Path::Gpu,
        "ib_umem_dmabuf_get_pinned_with_dma_device",
        "ib_uverbs / ib_core (6.12+; often inlined)",
        Programs::kernel_return(
            "mr_fexit_ib_umem_dmabuf_get_pinned_with_dma_device",
            "mr_kprobe_ib_umem_dmabuf_get_pinned_with_dma_device",
            "mr_kretprobe_ib_umem_dmabuf_get_pinned_with_dma_device",
        ),
        "mr_register of a dma-buf (newer kernels' variant)",
    ),
    // torvalds/linux drivers/infiniband/core/umem_dmabuf.c (7.1+: revocable pinned dma-bufs,
    // irdma and erdma; backported to 6.12.y and 6.18.y). Its static `_and_lock` sibling, which
    // ib_umem_dmabuf_get_pinned wraps from 7.1, is left to that row.
    row(
        HookId::IbUmemDmabufGetPinnedRevocableAndLock,
        Role::DmabufRegister,
        Path::Gpu,
        "ib_umem_dmabuf_get_pinned_revocable_and_lock",
        "ib_core (7.1+; 6.12.y and 6.18.y stable)",
        Programs::kernel_return(
            "mr_fexit_ib_umem_dmabuf_get_pinned_revocable_and_lock",
            "mr_kprobe_ib_umem_dmabuf_get_pinned_revocable_and_lock",
            "mr_kretprobe_ib_umem_dmabuf_get_pinned_revocable_and_lock",
        ),
        "mr_register of a revocable dma-buf (irdma, erdma): exporter, fd, offset, size",
    ),
    // linux-rdma/rdma-core libibverbs/verbs.c (IBVERBS_1.12, v34+).
    row(
        HookId::IbvRegDmabufMr,
        Role::DmabufRegister,
        Path::Gpu,
        "ibv_reg_dmabuf_mr",
        "libibverbs.so.1",
        Programs::UserReturn {
            lib: Library::Ibverbs,
            uprobe: "mr_uprobe_ibv_reg_dmabuf_mr",
            uretprobe: "mr_uretprobe_ibv_reg_dmabuf_mr",
        },
        "mr_register of a dma-buf from userspace; fd -1 is NCCL's support probe (verdict probe)",
    ),
    // CUDA driver API, libcuda.so.1 (cuda.h, CUDA 11.7+).
    row(
        HookId::CuMemGetHandleForAddressRange,
        Role::GpuExport,
        Path::Gpu,
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

/// The whole table: registration hooks (peer memory: `hooks/gpu.rs`), libcuda's (`hooks/p2p.rs`), the storage path's
/// (`hooks/storage.rs`), the tracer's.
pub const HOOKS: &[Hook] = &concat::<
    {
        REGISTRATION.len()
            + gpu::PEERMEM.len()
            + DMABUF.len()
            + bytes::BYTES.len()
            + p2p::CUDA.len()
            + nv_host::NV_HOST.len()
            + queues::QUEUES.len()
            + cufile::CUFILE.len()
            + storage::STORAGE.len()
            + tracer::TRACER.len()
    },
>(&[
    REGISTRATION,
    gpu::PEERMEM,
    DMABUF,
    bytes::BYTES,
    p2p::CUDA,
    nv_host::NV_HOST,
    queues::QUEUES,
    cufile::CUFILE,
    storage::STORAGE,
    tracer::TRACER,
]);

const fn concat<const N: usize>(parts: &[&[Hook]]) -> [Hook; N] {
    let mut out = [parts[0][0]; N];
    let (mut p, mut i) = (0, 0);
    while p < parts.len() {
        let mut j = 0;
        while j < parts[p].len() {
            out[i] = parts[p][j];
            i += 1;
            j += 1;
        }
        p += 1;
    }
    assert!(i == N);
    out
}

pub fn by_id(id: HookId) -> &'static Hook {
    HOOKS.iter().find(|h| h.id == id).expect("every HookId has a row in HOOKS")
}

/// The one row with this role (the tracer's own programs).
pub fn by_role(role: Role) -> &'static Hook {
    HOOKS.iter().find(|h| h.role == role).expect("a row with this role")
}

/// The row of a hooked function, by the name records carry ("ib_umem_get").
pub fn by_function(function: &str) -> Option<&'static Hook> {
    HOOKS.iter().find(|h| h.function == function)
}
