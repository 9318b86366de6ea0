//! Bytes of work requests built with the extended WR API (IBVERBS_1.6): the provider's
//! functions in the QP's `struct ibv_qp_ex`, learned at `ibv_qp_to_qp_ex`
//! (`gdr_trace_common::mr::bytes::QPX_*`), counted into `BYTES` as `bytes.rs` counts posts.
//!
//! match-proto:rdma-core:libibverbs/verbs.h (x86_64):
//!   void (*wr_rdma_read)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr)
//!   void (*wr_set_sge)(struct ibv_qp_ex *qp, uint32_t lkey, uint64_t addr, uint32_t length)
//!   void (*wr_set_sge_list)(struct ibv_qp_ex *qp, size_t num_sge, const struct ibv_sge *sg_list)
//!   void (*wr_set_inline_data)(struct ibv_qp_ex *qp, void *addr, size_t length)
//! A work request is one opcode setter (`wr_send`, `wr_rdma_write`, `wr_rdma_read` ...) then one
//! data setter; only `wr_rdma_read` is hooked among the former (the others all read the SGE).

use aya_ebpf::{
    macros::{map, uprobe, uretprobe},
    maps::LruHashMap,
    programs::{ProbeContext, RetProbeContext},
};
use gdr_trace_common::mr::bytes::{
    ByteKey, ProviderOps, LKEY_INLINE, QPX_RDMA_READ, QPX_SET_INLINE_DATA, QPX_SET_SGE, QPX_SET_SGE_LIST,
};

use crate::{
    filter::current_traced,
    mr::{
        byte_maps::{count, publish, PROVIDER_OPS},
        bytes::{count_dir, count_sges, dev_of, read},
    },
};

/// Nothing at entry: `ibv_qp_to_qp_ex` is hooked for its return.
#[uprobe]
pub fn bytes_uprobe_ibv_qp_to_qp_ex(_ctx: ProbeContext) -> u32 {
    0
}

/// `ibv_qp_to_qp_ex` returned the QP's extended form: the provider's `ibv_wr_*` functions
/// (one set per provider, the same for every QP of a kind), for userspace to hook.
#[uretprobe]
pub fn bytes_uretprobe_ibv_qp_to_qp_ex(ctx: RetProbeContext) -> u32 {
    let Some(tgid) = current_traced() else { return 0 };
    let qpx: u64 = ctx.ret::<u64>();
    if qpx == 0 {
        return 0;
    }
    let slot = |s: u64| read::<u64>(qpx + (s & 0xffff_ffff));
    // SAFETY: plain data, copied.
    let old = unsafe { PROVIDER_OPS.get(&tgid) }.copied();
    let ops = ProviderOps {
        wr_rdma_read: slot(QPX_RDMA_READ),
        wr_set_sge: slot(QPX_SET_SGE),
        wr_set_sge_list: slot(QPX_SET_SGE_LIST),
        wr_set_inline_data: slot(QPX_SET_INLINE_DATA),
        ..old.unwrap_or_default()
    };
    publish(tgid, old, &ops);
    0
}

/// A work request being built with `ibv_wr_*` on a QP.
#[repr(C)]
#[derive(Clone, Copy)]
struct QpKey {
    tgid: u32,
    _pad0: u32,
    qpx: u64,
}

/// QPs whose work request being built is an RDMA read (`ibv_wr_rdma_read`): its SGE is where
/// the NIC writes. Every other opcode with an SGE (write, send, their immediates) reads it.
/// Taken by the SGE setter; LRU, so a QP that never sets one cannot fill it.
#[map]
static QPX_READING: LruHashMap<QpKey, u8> = LruHashMap::with_max_entries(4096, 0);

#[uprobe]
pub fn bytes_uprobe_wr_rdma_read(ctx: ProbeContext) -> u32 {
    if let Some(tgid) = current_traced() {
        let key = QpKey { tgid, _pad0: 0, qpx: ctx.arg::<u64>(0).unwrap_or(0) };
        let _ = QPX_READING.insert(&key, &1, 0);
    }
    0
}

/// Whether the work request being built on `qpx` is an RDMA read (and forgets it).
#[inline(always)]
fn reading(tgid: u32, qpx: u64) -> bool {
    let key = QpKey { tgid, _pad0: 0, qpx };
    // SAFETY: plain u8.
    let r = unsafe { QPX_READING.get(&key) }.is_some();
    if r {
        let _ = QPX_READING.remove(&key);
    }
    r
}

/// `wr_set_sge(qp, lkey, addr, length)`: the work request's one SGE.
#[uprobe]
pub fn bytes_uprobe_wr_set_sge(ctx: ProbeContext) -> u32 {
    let Some(tgid) = current_traced() else { return 0 };
    let qpx = ctx.arg::<u64>(0).unwrap_or(0);
    let inn = reading(tgid, qpx);
    let lkey = ctx.arg::<u32>(1).unwrap_or(0);
    let len = ctx.arg::<u32>(3).unwrap_or(0) as u64;
    count_dir(ByteKey { tgid, lkey, dev: dev_of(qpx) }, len, 1, inn);
    0
}

/// `wr_set_sge_list(qp, num_sge, sg_list)`: the work request counts once, to its first SGE.
#[uprobe]
pub fn bytes_uprobe_wr_set_sge_list(ctx: ProbeContext) -> u32 {
    let Some(tgid) = current_traced() else { return 0 };
    let qpx = ctx.arg::<u64>(0).unwrap_or(0);
    let inn = reading(tgid, qpx);
    let n = ctx.arg::<u64>(1).unwrap_or(0);
    let sg = ctx.arg::<u64>(2).unwrap_or(0);
    count_sges(ByteKey { tgid, lkey: 0, dev: dev_of(qpx) }, sg, n, inn, false);
    0
}

/// `wr_set_inline_data(qp, addr, length)`: the CPU copies the data into the WQE.
#[uprobe]
pub fn bytes_uprobe_wr_set_inline_data(ctx: ProbeContext) -> u32 {
    let Some(tgid) = current_traced() else { return 0 };
    let _ = reading(tgid, ctx.arg::<u64>(0).unwrap_or(0));
    let key = ByteKey { tgid, lkey: LKEY_INLINE, dev: 0 };
    count(key, ctx.arg::<u64>(2).unwrap_or(0), 0, 1);
    0
}
