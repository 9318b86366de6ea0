//! The records the eBPF programs write to the `EVENTS` ring buffer.

pub const COMM_LEN: usize = 16;
/// `IB_DEVICE_NAME_MAX` in the kernel, `IBV_SYSFS_NAME_MAX` in libibverbs.
pub const DEVICE_NAME_LEN: usize = 64;
/// Room for a dma-buf exporter name (`nv_dmabuf`, `nvidia`, ...).
pub const LABEL_LEN: usize = 32;

/// Common to every record. 56 bytes, no implicit padding.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EventHeader {
    /// [`EventKind`] as a number.
    pub kind: u32,
    /// [`crate::HookId`] as a number.
    pub hook: u32,
    /// [`crate::AttachKind`] as a number.
    pub attach: u32,
    /// Thread-group id (what users call the PID).
    pub pid: u32,
    pub tid: u32,
    pub uid: u32,
    pub cgroup_id: u64,
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC.
    pub ts_ns: u64,
    pub comm: [u8; COMM_LEN],
}

impl EventHeader {
    pub const fn zeroed() -> Self {
        Self {
            kind: 0,
            hook: 0,
            attach: 0,
            pid: 0,
            tid: 0,
            uid: 0,
            cgroup_id: 0,
            ts_ns: 0,
            comm: [0; COMM_LEN],
        }
    }
}

/// Global knobs set by userspace before load (`EbpfLoader::set_global`).
pub mod globals {
    /// u32: 1 = only processes in `TRACKED` (and their children) are traced.
    pub const FILTER_PIDS: &str = "FILTER_PIDS";
    /// u32: gdr-trace's own tgid, never traced.
    pub const SELF_TGID: &str = "SELF_TGID";
    /// u32: byte offset of `name` in `struct ib_device`, or `u32::MAX` when unknown (no BTF).
    pub const IB_DEVICE_NAME_OFF: &str = "IB_DEVICE_NAME_OFF";
    /// u32: byte offset of `child_pid` in the `sched_process_fork` tracepoint record.
    pub const FORK_CHILD_PID_OFF: &str = "FORK_CHILD_PID_OFF";
    /// u32 offsets for the dma-buf exporter chain `ib_umem_dmabuf.attach->dmabuf->exp_name`
    /// and `dma_buf.size` (`OFFSET_UNKNOWN` without BTF).
    pub const UMEM_DMABUF_ATTACH_OFF: &str = "UMEM_DMABUF_ATTACH_OFF";
    pub const ATTACHMENT_DMABUF_OFF: &str = "ATTACHMENT_DMABUF_OFF";
    pub const DMABUF_EXP_NAME_OFF: &str = "DMABUF_EXP_NAME_OFF";
    /// u32 offsets of `ib_umem.address` and `ib_umem.length` (`OFFSET_UNKNOWN` without BTF).
    pub const UMEM_ADDRESS_OFF: &str = "UMEM_ADDRESS_OFF";
    pub const UMEM_LENGTH_OFF: &str = "UMEM_LENGTH_OFF";
    /// u64: records a second each tenant (uid; cgroup for root) may send (0: no budget).
    pub const EVENTS_PER_UID_S: &str = "EVENTS_PER_UID_S";
}

/// Names of the maps userspace touches.
pub mod maps {
    pub const EVENTS: &str = "EVENTS";
    pub const TRACKED: &str = "TRACKED";
    pub const LOST: &str = "LOST";
    /// Processes told about (tgid -> 1) and not yet looked at by userspace: the library
    /// follower's in-kernel rate limit (one record per process until userspace removes it).
    pub const LIB_PENDING: &str = "LIB_PENDING";
    /// gdr-trace's own processes besides itself (the library follower): slot -> tgid (0:
    /// empty), never traced.
    pub const SELF_PIDS: &str = "SELF_PIDS";
    /// tenant (uid, or [`crate::ROOT_CGROUP`] | cgroup id for uid 0) -> [`crate::UidBucket`]:
    /// each tenant's record budget (LRU).
    pub const UID_BUDGET: &str = "UID_BUDGET";
    /// tenant (as `UID_BUDGET`) -> records it lost, tracing the whole node: the ring buffer
    /// full, over its budget, or over its share of the user-call stash (LRU).
    pub const LOST_BY_TENANT: &str = "LOST_BY_TENANT";
    /// slot -> program: the library hooks that `lib_multi_dispatch` tail-calls, a slot being
    /// the attach cookie of each offset of a uprobe_multi link (`MULTI_SLOTS` of them).
    pub const LIB_HOOKS: &str = "LIB_HOOKS";
}

/// Slots of `LIB_HOOKS`: room for every library hook program (entry and return), with spare.
pub const MULTI_SLOTS: u32 = 256;

/// The `UID_BUDGET` key of a root process: this bit and its cgroup id.
pub const ROOT_CGROUP: u64 = 1 << 63;
/// The per-tenant count key that sums every tenant (no uid or cgroup id is it): the share
/// tables' `held` and freed counts, `TRACKED_FILES` and `TRACKED_FREED`.
pub const ALL_TENANTS: u64 = u64::MAX;

/// One tenant's record budget (`UID_BUDGET`): tokens left and when they were last refilled (the
/// records dropped for want of one are counted in `LOST`, `lost::OVER_BUDGET`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct UidBucket {
    pub tokens: u64,
    pub last_ns: u64,
}

#[cfg(feature = "user")]
// SAFETY: plain old data, every bit pattern valid.
unsafe impl aya::Pod for UidBucket {}

/// Slots of `SELF_PIDS`: 0 is the library follower, 1 the provider lookup at start.
pub const SELF_SLOTS: u32 = 2;
/// The `SELF_PIDS` slot of the library follower.
pub const SELF_SLOT_FOLLOWER: u32 = 0;
/// The `SELF_PIDS` slot of the child that looks up the system's RDMA providers at start.
pub const SELF_SLOT_PROVIDER_OPS: u32 = 1;

/// Offset sentinel for "could not be resolved from BTF".
pub const OFFSET_UNKNOWN: u32 = u32::MAX;

/// Size of the `EVENTS` ring buffer in bytes (power of two, multiple of the page size).
pub const RINGBUF_BYTES: u32 = 1 << 20;
