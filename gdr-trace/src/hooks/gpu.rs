//! The GPU peer-memory rows of the hook table: MLNX_OFED's peer-memory core, nvidia-peermem's
//! client callbacks and nvidia.ko's P2P API. NVIDIA's rows say which driver branches have the
//! function (`drivers::NVIDIA_BRANCHES`, docs/drivers.md, read in
//! NVIDIA/open-gpu-kernel-modules kernel-open/nvidia-peermem/nvidia-peermem.c and
//! kernel-open/nvidia/nv-p2p.c at 535.288.01 ... 595.45.04).

use gdr_trace_common::HookId;

use super::{row, Hook, Path, Programs, Role};
use crate::drivers::Branches;

/// nvidia-peermem 580.65.06 and later.
const FROM_580: Branches = Branches { first: 580 };

pub const PEERMEM: &[Hook] = &[
    // MLNX_OFED / DOCA-OFED drivers/infiniband/core/umem.c (5.x-24.x; not in mainline).
    row(
        HookId::IbUmemGetPeer,
        Role::PeerRegister,
        Path::Gpu,
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
    // MLNX_OFED / DOCA-OFED drivers/infiniband/core/peer_mem.c (5.x-24.x).
    row(
        HookId::IbPeerUmemGet,
        Role::PeerEntered,
        Path::Gpu,
        "ib_peer_umem_get",
        "ib_core (MLNX_OFED)",
        Programs::kernel_return(
            "mr_fexit_ib_peer_umem_get",
            "mr_kprobe_ib_peer_umem_get",
            "mr_kretprobe_ib_peer_umem_get",
        ),
        "evidence: pinning failed and the peer-memory path was entered",
    ),
    // nvidia-peermem.c (static; every branch): `.acquire` of both clients up to 575.64.05, of
    // the legacy client `nv_mem` only from 580.65.06. Its trial nvidia_p2p_get_pages +
    // nvidia_p2p_put_pages is not the registration's pin.
    row(
        HookId::NvMemAcquire,
        Role::PeerClient,
        Path::Gpu,
        "nv_mem_acquire",
        "nvidia-peermem",
        Programs::kernel_return(
            "mr_fexit_nv_mem_acquire",
            "mr_kprobe_nv_mem_acquire",
            "mr_kretprobe_nv_mem_acquire",
        ),
        "evidence: a peer client claimed the range as GPU memory (returns 1); either client up to 575, nv_mem from 580",
    )
    .nvidia(Branches::ALL),
    // nvidia-peermem.c (static; 580.65.06, 580.142, 590.48.01, 595.45.04; absent up to
    // 575.64.05): `.acquire` of the persistent client (`nv_mem` by default, `nv_mem_nc` in
    // legacy mode). Its trial nvidia_p2p_get_pages_persistent + put_pages_persistent is not
    // the registration's pin.
    row(
        HookId::NvMemAcquireNc,
        Role::PeerClientPersistent,
        Path::Gpu,
        "nv_mem_acquire_nc",
        "nvidia-peermem (driver 580+)",
        Programs::kernel_return(
            "mr_fexit_nv_mem_acquire_nc",
            "mr_kprobe_nv_mem_acquire_nc",
            "mr_kretprobe_nv_mem_acquire_nc",
        ),
        "evidence: the persistent client claimed the range as GPU memory (returns 1); names it with the mode",
    )
    .nvidia(FROM_580),
    // nvidia-peermem.c (static; every branch): get_pages of the invalidatable client `nv_mem`,
    // registered only with persistent_api_support=0 (560+) or always (535, 550). Calls
    // nvidia_p2p_get_pages with nv_get_p2p_free_callback.
    row(
        HookId::NvMemGetPages,
        Role::PeerPages,
        Path::Gpu,
        "nv_mem_get_pages",
        "nvidia-peermem",
        Programs::kernel_return(
            "mr_fexit_nv_mem_get_pages",
            "mr_kprobe_nv_mem_get_pages",
            "mr_kretprobe_nv_mem_get_pages",
        ),
        "evidence: the legacy client nv_mem pinned the GPU pages (7 arguments: fentry needs kernel >= 6.5)",
    )
    .nvidia(Branches::ALL),
    // nvidia-peermem.c (static; every branch): get_pages of the persistent client, named
    // `nv_mem` by default (560+) and `nv_mem_nc` with persistent_api_support=0 or before 560.
    // nvidia_p2p_get_pages_persistent.
    row(
        HookId::NvMemGetPagesNc,
        Role::PeerPagesPersistent,
        Path::Gpu,
        "nv_mem_get_pages_nc",
        "nvidia-peermem",
        Programs::kernel_return(
            "mr_fexit_nv_mem_get_pages_nc",
            "mr_kprobe_nv_mem_get_pages_nc",
            "mr_kretprobe_nv_mem_get_pages_nc",
        ),
        "evidence: the persistent client (nv_mem, or nv_mem_nc in legacy mode) pinned the GPU pages",
    )
    .nvidia(Branches::ALL),
    // nv-p2p.c, exported (nv-p2p.h; every branch). A NULL free callback is -EINVAL.
    row(
        HookId::NvidiaP2pGetPages,
        Role::GpuPinned,
        Path::Gpu,
        "nvidia_p2p_get_pages",
        "nvidia.ko",
        Programs::kernel_return(
            "mr_fexit_nvidia_p2p_get_pages",
            "mr_kprobe_nvidia_p2p_get_pages",
            "mr_kretprobe_nvidia_p2p_get_pages",
        ),
        "evidence: GPU pages pinned for P2P (legacy API); outside a registration: GDS or other",
    )
    .nvidia(Branches::ALL),
    // nv-p2p.c, exported (every branch): the pin of the persistent client, and from 580.65.06
    // also its acquire's trial pin.
    row(
        HookId::NvidiaP2pGetPagesPersistent,
        Role::GpuPinned,
        Path::Gpu,
        "nvidia_p2p_get_pages_persistent",
        "nvidia.ko",
        Programs::kernel_return(
            "mr_fexit_nvidia_p2p_get_pages_persistent",
            "mr_kprobe_nvidia_p2p_get_pages_persistent",
            "mr_kretprobe_nvidia_p2p_get_pages_persistent",
        ),
        "evidence: GPU pages pinned for P2P (persistent API); outside a registration: GDS or other",
    )
    .nvidia(Branches::ALL),
    // nv-p2p.c, exported (every branch).
    row(
        HookId::NvidiaP2pPutPages,
        Role::GpuUnpinned,
        Path::Gpu,
        "nvidia_p2p_put_pages",
        "nvidia.ko",
        Programs::kernel_entry("mr_fentry_nvidia_p2p_put_pages", "mr_kprobe_nvidia_p2p_put_pages"),
        "evidence: GPU pages unpinned",
    )
    .nvidia(Branches::ALL),
    // nv-p2p.c, exported (every branch).
    row(
        HookId::NvidiaP2pPutPagesPersistent,
        Role::GpuUnpinned,
        Path::Gpu,
        "nvidia_p2p_put_pages_persistent",
        "nvidia.ko",
        Programs::kernel_entry(
            "mr_fentry_nvidia_p2p_put_pages_persistent",
            "mr_kprobe_nvidia_p2p_put_pages_persistent",
        ),
        "evidence: GPU pages unpinned (persistent API)",
    )
    .nvidia(Branches::ALL),
    // nvidia-peermem.c (static; every branch): free callback of `nv_mem`'s pins (passed to
    // nvidia_p2p_get_pages, called by nvidia.ko).
    row(
        HookId::NvGetP2pFreeCallback,
        Role::GpuFreeCallback,
        Path::Gpu,
        "nv_get_p2p_free_callback",
        "nvidia-peermem",
        Programs::kernel_entry("mr_fentry_nv_get_p2p_free_callback", "mr_kprobe_nv_get_p2p_free_callback"),
        "gpu_freed: GPU memory freed under a live registration",
    )
    .nvidia(Branches::ALL),
];
