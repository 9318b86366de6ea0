//! What the correlator hands on: one registration, release, GPU pin or GPU free, whichever
//! hooks saw it.

use crate::events::{purpose::Purpose, Context, Source};

/// Peer-memory evidence gathered for one registration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerEvidence {
    /// `ib_peer_umem_get` succeeded: pinning failed and a peer client took the range.
    pub entered: bool,
    /// A client claimed the range: its acquire returned 1, or its get_pages ran (ib_core calls
    /// get_pages only on the client whose acquire said "mine").
    pub claimed: bool,
    /// The acquire that returned 1, as a source ("kprobe:nv_mem_acquire_nc"): which flow of
    /// nvidia-peermem took the range (docs/drivers.md).
    pub claim: Option<Source>,
    /// The claiming client by name (`nv_mem`, `nv_mem_nc`): from which get_pages ran and
    /// nvidia-peermem's mode. None when either is unknown.
    pub client: Option<String>,
    /// The registration holds GPU pages: the client's get_pages succeeded, or an
    /// `nvidia_p2p_get_pages*` pin was not given back inside the registration.
    pub gpu_pages: bool,
    /// Pins given back inside the registration: the acquire's trial pin, not the registration's
    /// (`nv_mem_acquire`: `nvidia_p2p_get_pages` + `nvidia_p2p_put_pages`; `nv_mem_acquire_nc`:
    /// `nvidia_p2p_get_pages_persistent` + `nvidia_p2p_put_pages_persistent`).
    pub trial_pins: u32,
    /// Free-callback data passed to `nvidia_p2p_get_pages`, to recognise a later free.
    pub p2p_data: Vec<u64>,
}

/// A memory registration as one unit, whichever hooks saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registration {
    /// Sequence number, unique within one trace.
    pub id: u64,
    pub ctx: Context,
    pub addr: u64,
    pub length: u64,
    pub iova: u64,
    pub access: u32,
    pub device: Option<String>,
    /// `device` is the kernel's (`ib_device.name`), not read from the caller's memory.
    pub device_from_kernel: bool,
    pub sources: Vec<Source>,
    pub failed: bool,
    pub errno: Option<i32>,
    /// The kernel pinned user pages for it (`ib_umem_get`/`ib_umem_get_peer` succeeded).
    pub kernel_pinned: bool,
    /// `struct ib_umem *` (kernel) and `struct ibv_mr *` (userspace), for joining releases.
    pub umem: Option<u64>,
    pub mr: Option<u64>,
    /// `ibv_mr.lkey` (userspace hook): the key work requests name it by, with its device
    /// context `dev` (`gdr_trace_common::mr::bytes::dev_tag`).
    pub lkey: Option<u32>,
    pub dev: u32,
    pub peer: PeerEvidence,
    /// A dma-buf registration: its fd (-1: NCCL's support probe) and exporter, when read.
    pub dmabuf_fd: Option<i64>,
    pub exporter: Option<String>,
    /// The GPU virtual address behind a dma-buf, from `cuMemGetHandleForAddressRange`.
    pub gpu_va: Option<u64>,
    /// A host MR inside a CUDA pinned host allocation: how CUDA pinned it.
    pub host_alloc: Option<crate::p2p::HostAlloc>,
    /// A host MR: where its memory came from, and what says so (None: not a host MR).
    pub host_origin: Option<crate::p2p::HostMrOrigin>,
    /// The verb the kernel pinned it in, as its kernel record says (`queues::pin_use` tells a
    /// registration from a queue's memory by it).
    pub purpose: Purpose,
}

/// A release, joined to its registration when that was seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Release {
    pub ctx: Context,
    /// The registration released (None if it was registered before tracing began).
    pub registration: Option<u64>,
    pub addr: u64,
    pub length: u64,
    pub device: Option<String>,
    pub sources: Vec<Source>,
    pub umem: Option<u64>,
    pub mr: Option<u64>,
    /// `ibv_mr.lkey` of the MR released (userspace hook), and its device context.
    pub lkey: Option<u32>,
    pub dev: u32,
    /// Work requests' bytes counted against it until it went (userspace hook).
    pub wr_bytes: Option<gdr_trace_common::mr::bytes::ByteCount>,
    /// A host MR's origin as its registration said (set when the release is joined to it).
    pub host_origin: Option<crate::p2p::HostMrOrigin>,
    /// The kernel's release record: the verb the umem was pinned in.
    pub purpose: Purpose,
}

/// GPU pages pinned for P2P outside any registration: GPUDirect Storage (nvidia-fs) or another
/// kernel caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuPin {
    pub ctx: Context,
    pub source: Source,
    pub gpu_va: u64,
    pub length: u64,
    pub ret: i64,
}

/// GPU memory freed while a registration still used it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuFreed {
    pub ctx: Context,
    pub registration: Option<u64>,
    pub source: Source,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Joined {
    Registered(Registration),
    Released(Release),
    GpuPin(GpuPin),
    GpuFreed(GpuFreed),
}

/// What a release needs to know of its registration.
#[derive(Debug, Clone)]
pub(super) struct Live {
    pub id: u64,
    pub addr: u64,
    pub length: u64,
    pub device: Option<String>,
    /// In `by_umem`: the registration's `struct ibv_mr *`, once libibverbs' return was seen.
    pub mr: Option<u64>,
}

impl Live {
    pub fn of(r: &Registration) -> Self {
        Self { id: r.id, addr: r.addr, length: r.length, device: r.device.clone(), mr: r.mr }
    }
}

/// Adds a source once.
pub(super) fn push_source(sources: &mut Vec<Source>, s: Source) {
    if !sources.contains(&s) {
        sources.push(s);
    }
}
