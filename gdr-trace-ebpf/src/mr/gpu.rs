//! The GPU path: MLNX_OFED peer memory (`ib_umem_get_peer` -> `ib_peer_umem_get` -> a client's
//! acquire/get_pages), nvidia-peermem's callbacks, and nvidia.ko's P2P API. Every call is
//! evidence for the registration in progress on the thread; `nvidia_p2p_*` outside one is
//! GPUDirect Storage (nvidia-fs) or another caller.
//!
//! match-proto:MLNX_OFED:drivers/infiniband/core/peer_mem.c / umem.c:
//!   struct ib_umem *ib_umem_get_peer(struct ib_device *, unsigned long addr, size_t size, int access, unsigned long peer_mem_flags)
//!   struct ib_umem *ib_peer_umem_get(struct ib_umem *old, int old_ret, unsigned long peer_mem_flags)
//! match-proto:open-gpu-kernel-modules 535.288.01-595.45.04:kernel-open/nvidia-peermem/nvidia-peermem.c
//! (`.acquire` of both clients up to 575.64.05; from 580.65.06 the persistent client's is
//! `nv_mem_acquire_nc`, whose trial pin is nvidia_p2p_get_pages_persistent + put_pages_persistent):
//!   int nv_mem_acquire(unsigned long addr, size_t size, void *peer_mem_private_data, char *peer_mem_name, void **client_context)
//!   int nv_mem_acquire_nc(unsigned long addr, size_t size, void *peer_mem_private_data, char *peer_mem_name, void **client_context)
//!   int nv_mem_get_pages[_nc](unsigned long addr, size_t size, int write, int force, struct sg_table *sg_head, void *client_context, u64 core_context)
//!   void nv_get_p2p_free_callback(void *data)
//! match-proto:open-gpu-kernel-modules:kernel-open/nvidia/nv-p2p.h:
//!   int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address, u64 length,
//!       struct nvidia_p2p_page_table **page_table, void (*free_callback)(void *data), void *data)
//!   int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length, struct nvidia_p2p_page_table **page_table, u32 flags)
//!   int nvidia_p2p_put_pages(u64 p2p_token, u32 va_space, u64 virtual_address, struct nvidia_p2p_page_table *page_table)
//!   int nvidia_p2p_put_pages_persistent(u64 virtual_address, struct nvidia_p2p_page_table *page_table, u32 flags)

use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use gdr_trace_common::{AttachKind, EventKind, HookId, MrArgs};

use crate::{
    filter::current_traced,
    maps::KERNEL_ARGS,
    mr::rdma_core::{registration_kprobe, registration_kretprobe, registration_returned},
    record::{send_mr, tracing_arg},
    stash::{clear, in_progress, stash, take},
};

// ---- ib_umem_get_peer: a registration; its entry marks "peer registration in progress" ----

#[fentry(function = "ib_umem_get_peer")]
pub fn mr_fentry_ib_umem_get_peer(ctx: FEntryContext) -> i32 {
    if current_traced().is_some() {
        stash(&KERNEL_ARGS, HookId::IbUmemGetPeer as u32, &peer_args(|i| tracing_arg(&ctx, i)));
    }
    0
}

#[fexit(function = "ib_umem_get_peer")]
pub fn mr_fexit_ib_umem_get_peer(ctx: FExitContext) -> i32 {
    clear(&KERNEL_ARGS, HookId::IbUmemGetPeer as u32);
    let args = peer_args(|i| tracing_arg(&ctx, i));
    registration_returned(HookId::IbUmemGetPeer, &args, tracing_arg(&ctx, 5), AttachKind::Fexit);
    0
}

#[kprobe]
pub fn mr_kprobe_ib_umem_get_peer(ctx: ProbeContext) -> u32 {
    registration_kprobe(&ctx, HookId::IbUmemGetPeer);
    0
}

#[kretprobe]
pub fn mr_kretprobe_ib_umem_get_peer(ctx: RetProbeContext) -> u32 {
    registration_kretprobe(&ctx, HookId::IbUmemGetPeer);
    0
}

#[inline(always)]
fn peer_args(get: impl Fn(usize) -> u64) -> MrArgs {
    MrArgs {
        dev_or_pd: get(0),
        addr: get(1),
        length: get(2),
        iova: get(1),
        aux: get(4),
        access: get(3) as u32,
        _pad0: 0,
    }
}

// ---- evidence: calls whose return value says what happened ----

/// Sends a GPU-path evidence record; `aux` = 1 when a peer registration is in progress here.
#[inline(always)]
fn evidence(hook: HookId, attach: AttachKind, addr: u64, length: u64, ret: i64, data: u64) {
    if current_traced().is_none() {
        return;
    }
    let inside = in_progress(&KERNEL_ARGS, HookId::IbUmemGetPeer as u32);
    send_mr(EventKind::KernelGpuEvidence, hook, attach, |ev| {
        ev.addr = addr;
        ev.length = length;
        ev.ret = ret;
        ev.handle = data;
        ev.aux = u64::from(inside);
    });
}

/// The 7th argument at a kprobe (x86-64: on the stack, above the return address).
#[inline(always)]
fn kprobe_arg7(ctx: &ProbeContext) -> u64 {
    #[cfg(bpf_target_arch = "x86_64")]
    {
        // SAFETY: pt_regs of this probe; the stack read goes through probe_read.
        unsafe {
            let sp = (*ctx.regs).rsp;
            aya_ebpf::helpers::bpf_probe_read_kernel((sp + 8) as *const u64).unwrap_or(0)
        }
    }
    #[cfg(not(bpf_target_arch = "x86_64"))]
    {
        let _ = ctx;
        0
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RetKind {
    /// An int: 0 or -errno (acquire: 1 = "this memory is mine").
    Int,
    /// A pointer or ERR_PTR: 0 for a pointer, -errno for an error.
    Ptr,
}

#[inline(always)]
fn ret_value(raw: u64, kind: RetKind) -> i64 {
    match kind {
        RetKind::Int => raw as i32 as i64,
        RetKind::Ptr => {
            let r = raw as i64;
            if (-4095..0).contains(&r) {
                r
            } else {
                0
            }
        }
    }
}

/// fexit + kprobe + kretprobe for a function whose evidence is (addr, length, data) and an
/// int return value following `$nargs` arguments.
macro_rules! evidence_return_hook {
    ($fexit:ident, $kprobe:ident, $kretprobe:ident, $func:literal, $hook:expr, $nargs:literal,
     addr = $a:literal, len = $l:literal, data = $d:tt, ret = $r:ident) => {
        #[fexit(function = $func)]
        pub fn $fexit(ctx: FExitContext) -> i32 {
            let data = evidence_return_hook!(@fexit_data ctx, $d);
            let ret = ret_value(tracing_arg(&ctx, $nargs), RetKind::$r);
            evidence($hook, AttachKind::Fexit, tracing_arg(&ctx, $a), tracing_arg(&ctx, $l), ret, data);
            0
        }

        #[kprobe]
        pub fn $kprobe(ctx: ProbeContext) -> u32 {
            if current_traced().is_none() {
                return 0;
            }
            let addr = ctx.arg::<u64>($a).unwrap_or(0);
            let args = MrArgs {
                dev_or_pd: 0,
                addr,
                length: ctx.arg::<u64>($l).unwrap_or(0),
                iova: addr,
                aux: evidence_return_hook!(@kprobe_data ctx, $d),
                access: 0,
                _pad0: 0,
            };
            stash(&KERNEL_ARGS, $hook as u32, &args);
            0
        }

        #[kretprobe]
        pub fn $kretprobe(ctx: RetProbeContext) -> u32 {
            if let Some(a) = take(&KERNEL_ARGS, $hook as u32) {
                let ret = ret_value(ctx.ret::<u64>(), RetKind::$r);
                evidence($hook, AttachKind::Kretprobe, a.addr, a.length, ret, a.aux);
            }
            0
        }
    };
    (@fexit_data $ctx:ident, none) => { 0 };
    (@fexit_data $ctx:ident, $d:literal) => { tracing_arg(&$ctx, $d) };
    (@kprobe_data $ctx:ident, none) => { 0 };
    (@kprobe_data $ctx:ident, 6) => { kprobe_arg7(&$ctx) };
}

evidence_return_hook!(
    mr_fexit_ib_peer_umem_get,
    mr_kprobe_ib_peer_umem_get,
    mr_kretprobe_ib_peer_umem_get,
    "ib_peer_umem_get",
    HookId::IbPeerUmemGet,
    3,
    addr = 1,
    len = 2,
    data = none,
    ret = Ptr
);
evidence_return_hook!(
    mr_fexit_nv_mem_acquire,
    mr_kprobe_nv_mem_acquire,
    mr_kretprobe_nv_mem_acquire,
    "nv_mem_acquire",
    HookId::NvMemAcquire,
    5,
    addr = 0,
    len = 1,
    data = none,
    ret = Int
);
evidence_return_hook!(
    mr_fexit_nv_mem_acquire_nc,
    mr_kprobe_nv_mem_acquire_nc,
    mr_kretprobe_nv_mem_acquire_nc,
    "nv_mem_acquire_nc",
    HookId::NvMemAcquireNc,
    5,
    addr = 0,
    len = 1,
    data = none,
    ret = Int
);
evidence_return_hook!(
    mr_fexit_nv_mem_get_pages,
    mr_kprobe_nv_mem_get_pages,
    mr_kretprobe_nv_mem_get_pages,
    "nv_mem_get_pages",
    HookId::NvMemGetPages,
    7,
    addr = 0,
    len = 1,
    data = none,
    ret = Int
);
evidence_return_hook!(
    mr_fexit_nv_mem_get_pages_nc,
    mr_kprobe_nv_mem_get_pages_nc,
    mr_kretprobe_nv_mem_get_pages_nc,
    "nv_mem_get_pages_nc",
    HookId::NvMemGetPagesNc,
    7,
    addr = 0,
    len = 1,
    data = none,
    ret = Int
);
evidence_return_hook!(
    mr_fexit_nvidia_p2p_get_pages,
    mr_kprobe_nvidia_p2p_get_pages,
    mr_kretprobe_nvidia_p2p_get_pages,
    "nvidia_p2p_get_pages",
    HookId::NvidiaP2pGetPages,
    7,
    addr = 2,
    len = 3,
    data = 6,
    ret = Int
);
evidence_return_hook!(
    mr_fexit_nvidia_p2p_get_pages_persistent,
    mr_kprobe_nvidia_p2p_get_pages_persistent,
    mr_kretprobe_nvidia_p2p_get_pages_persistent,
    "nvidia_p2p_get_pages_persistent",
    HookId::NvidiaP2pGetPagesPersistent,
    4,
    addr = 0,
    len = 1,
    data = none,
    ret = Int
);

// ---- evidence: entry only ----

#[fentry(function = "nvidia_p2p_put_pages")]
pub fn mr_fentry_nvidia_p2p_put_pages(ctx: FEntryContext) -> i32 {
    evidence(HookId::NvidiaP2pPutPages, AttachKind::Fentry, tracing_arg(&ctx, 2), 0, 0, 0);
    0
}

#[kprobe]
pub fn mr_kprobe_nvidia_p2p_put_pages(ctx: ProbeContext) -> u32 {
    evidence(HookId::NvidiaP2pPutPages, AttachKind::Kprobe, ctx.arg::<u64>(2).unwrap_or(0), 0, 0, 0);
    0
}

#[fentry(function = "nvidia_p2p_put_pages_persistent")]
pub fn mr_fentry_nvidia_p2p_put_pages_persistent(ctx: FEntryContext) -> i32 {
    evidence(HookId::NvidiaP2pPutPagesPersistent, AttachKind::Fentry, tracing_arg(&ctx, 0), 0, 0, 0);
    0
}

#[kprobe]
pub fn mr_kprobe_nvidia_p2p_put_pages_persistent(ctx: ProbeContext) -> u32 {
    let va = ctx.arg::<u64>(0).unwrap_or(0);
    evidence(HookId::NvidiaP2pPutPagesPersistent, AttachKind::Kprobe, va, 0, 0, 0);
    0
}

/// GPU memory freed under a live registration: nvidia.ko calls the client's free callback.
#[inline(always)]
fn freed(data: u64, attach: AttachKind) {
    send_mr(EventKind::KernelGpuFreed, HookId::NvGetP2pFreeCallback, attach, |ev| ev.handle = data);
}

#[fentry(function = "nv_get_p2p_free_callback")]
pub fn mr_fentry_nv_get_p2p_free_callback(ctx: FEntryContext) -> i32 {
    freed(tracing_arg(&ctx, 0), AttachKind::Fentry);
    0
}

#[kprobe]
pub fn mr_kprobe_nv_get_p2p_free_callback(ctx: ProbeContext) -> u32 {
    freed(ctx.arg::<u64>(0).unwrap_or(0), AttachKind::Kprobe);
    0
}
