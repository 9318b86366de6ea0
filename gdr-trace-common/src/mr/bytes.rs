//! Bytes moved by work requests, counted in the kernel per (process, device context, lkey): the provider's
//! post_send / post_recv / post_srq_recv / poll_cq, hooked where the process's own
//! `ibv_context.ops` table points (the functions are not exported), and the extended
//! work-request API's SGE setters (`ibv_wr_set_sge` ...), where its `ibv_qp_ex` points. No record per work request:
//! userspace reads the `BYTES` map at each summary.

/// `BYTES` key: a process, the local key its scatter/gather entries named, and the device
/// context the key belongs to ([`dev_tag`]): an lkey is unique per device only, so a process
/// with MRs on two NICs can hold the same lkey twice.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
pub struct ByteKey {
    pub tgid: u32,
    pub lkey: u32,
    /// 0 in recordings made before it was kept (they join by lkey alone).
    #[cfg_attr(feature = "user", serde(default))]
    pub dev: u32,
}

/// A process's `struct ibv_context` (the device it opened), as a 32-bit tag: the address
/// folded, so no user pointer leaves the kernel. Read from the first field of `ibv_mr`,
/// `ibv_qp` (and `ibv_qp_ex`, which starts with it) and `ibv_srq`, all `context`.
pub const fn dev_tag(ctx: u64) -> u32 {
    (ctx ^ (ctx >> 32)) as u32
}

/// `BYTES` value. `bytes_out`: the NIC read them from this memory (sends, RDMA-write sources);
/// `bytes_in`: the NIC wrote them into it (receives as completed, RDMA-read destinations).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
pub struct ByteCount {
    pub bytes_out: u64,
    pub bytes_in: u64,
    /// Work requests (one per WR, not per SGE) that named this lkey first.
    pub ops: u64,
    /// Who the entry is charged to (the kernel's tenant: a uid, or for root a cgroup), for
    /// userspace to give it back when it removes the entry; in no output.
    #[cfg_attr(feature = "user", serde(skip))]
    pub tenant: u64,
}

/// A receive work request posted, remembered until its completion says how many bytes came:
/// (tgid, wr_id) -> the lkey of its first SGE.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvKey {
    pub tgid: u32,
    pub _pad0: u32,
    pub wr_id: u64,
}

/// `RECV_POSTED` value: where a posted receive's bytes go (its first SGE's `BYTES` key), how
/// many receives posted under this key are not completed yet (a program may reuse a wr_id),
/// and who the entry is charged to (see [`ByteCount::tenant`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RecvPosted {
    pub at: ByteKey,
    pub outstanding: u32,
    pub tenant: u64,
}

/// A process's provider functions, read from its `struct ibv_context` at each successful
/// `ibv_reg_mr*` (`ctx` = `mr->context`): userspace maps each to file + offset and hooks it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ProviderOps {
    pub ctx: u64,
    pub poll_cq: u64,
    pub post_srq_recv: u64,
    pub post_send: u64,
    pub post_recv: u64,
    /// The extended work-request functions (`ibv_wr_*`) of the process's last
    /// `ibv_qp_to_qp_ex` (0 until it calls it): `struct ibv_qp_ex` slots `QPX_*`.
    pub wr_rdma_read: u64,
    pub wr_set_sge: u64,
    pub wr_set_sge_list: u64,
    pub wr_set_inline_data: u64,
}

/// Sends with `IBV_SEND_INLINE`: the CPU copied the data into the WQE, no MR was read.
pub const LKEY_INLINE: u32 = u32::MAX;
/// Receive completions whose posted receive was not seen (posted before the hooks, or evicted).
pub const LKEY_UNJOINED: u32 = u32::MAX - 1;

/// `struct ibv_context_ops` inside `struct ibv_context` (rdma-core libibverbs/verbs.h, stable
/// ABI since IBVERBS_1.1): `ops` at 8, then one pointer per slot.
pub const IBV_CONTEXT_OPS_OFF: u64 = 8;
pub const OPS_POLL_CQ: u64 = 11;
pub const OPS_POST_SRQ_RECV: u64 = 20;
pub const OPS_POST_SEND: u64 = 25;
pub const OPS_POST_RECV: u64 = 26;

/// `struct ibv_qp_ex` (rdma-core libibverbs/verbs.h, IBVERBS_1.6; x86_64 offsets, checked
/// against the header with offsetof): the extended work-request API's function pointers, set
/// by the provider per QP. A slot here is `QPX | byte offset`, apart from the `OPS_*` slots.
pub const QPX: u64 = 1 << 32;
pub const QPX_RDMA_READ: u64 = QPX | 216;
pub const QPX_SET_SGE: u64 = QPX | 304;
pub const QPX_SET_SGE_LIST: u64 = QPX | 312;
pub const QPX_SET_INLINE_DATA: u64 = QPX | 288;

/// Map names (userspace).
pub mod maps {
    pub const BYTES: &str = "BYTES";
    /// Tenant -> `BYTES` entries userspace removed (exited processes'), written by it only.
    pub const BYTES_FREED: &str = "BYTES_FREED";
    pub const RECV_POSTED: &str = "RECV_POSTED";
    /// Tenant -> `RECV_POSTED` entries userspace removed, as `BYTES_FREED`.
    pub const RECV_FREED: &str = "RECV_FREED";
    pub const PROVIDER_OPS: &str = "PROVIDER_OPS";
}
