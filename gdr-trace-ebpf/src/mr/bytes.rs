//! Bytes moved by work requests, counted in the kernel per (process, lkey) (`BYTES`, in
//! `byte_maps` with the other maps they are counted through): no record per work request. The provider's functions are hooked where the process's own
//! `ibv_context.ops` points (userspace reads `PROVIDER_OPS`, filled here at each registration).
//!
//! match-proto:rdma-core:libibverbs/verbs.h (ABI stable since IBVERBS_1.1; x86_64 offsets):
//!   int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
//!   int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
//!   int (*post_srq_recv)(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
//!   int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
//! ibv_send_wr: wr_id @0, next @8, sg_list @16, num_sge @24, opcode @28, send_flags @32.
//! ibv_recv_wr: wr_id @0, next @8, sg_list @16, num_sge @24. ibv_sge (16 bytes): addr @0,
//! length @8, lkey @12. ibv_wc (48 bytes): wr_id @0, status @8, opcode @12, byte_len @20.
//! ibv_mr: context @0, lkey @36. ibv_context: ops @8 (`gdr_trace_common::mr::bytes::OPS_*`).
//! The extended WR API (`ibv_wr_*`): `wr_api.rs`.

use aya_ebpf::{
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use gdr_trace_common::{
    lost,
    mr::bytes::{
        dev_tag, ByteKey, ProviderOps, RecvKey, IBV_CONTEXT_OPS_OFF, LKEY_INLINE, LKEY_UNJOINED, OPS_POLL_CQ,
        OPS_POST_RECV, OPS_POST_SEND, OPS_POST_SRQ_RECV,
    },
    HookId, MrArgs,
};

use super::byte_maps::{completed, count, posted, publish, take, PROVIDER_OPS};
use crate::{
    filter::current_traced,
    maps::count_lost,
    stash::{stash_user, take_user},
};

/// Work requests walked per call, and SGEs per work request: longer chains are counted as
/// `lost::BYTES_TRUNCATED`.
const MAX_WRS: u32 = 16;
const MAX_SGES: u32 = 4;
/// Completions read per poll_cq return (perftest and UCX poll 16 at most).
const MAX_WCS: u32 = 32;

const IBV_SEND_INLINE: u32 = 1 << 3;
const IBV_WC_RECV: u32 = 1 << 7;
const IBV_WC_RECV_RDMA_WITH_IMM: u32 = IBV_WC_RECV + 1;

/// `*addr` in user memory, or zero (no branch on the outcome: see `kernel_read`).
#[inline(always)]
pub(crate) fn read<T: Copy + Default>(addr: u64) -> T {
    crate::kernel_read::read_user_or_zero(addr)
}

/// A registration returned `mr` for this traced process: its context's provider functions go
/// to `PROVIDER_OPS`, and userspace is told when they are new. Returns the MR's lkey and
/// device tag.
#[inline(always)]
pub fn registered(tgid: u32, mr: u64) -> (u32, u32) {
    let ctx = read(mr);
    context_ops(tgid, ctx);
    (read(mr + 36), dev_tag(ctx))
}

/// The device tag of a verbs object whose first field is its `struct ibv_context *` (`ibv_qp`,
/// `ibv_qp_ex`, `ibv_srq`, `ibv_mr`).
#[inline(always)]
pub(crate) fn dev_of(obj: u64) -> u32 {
    dev_tag(read(obj))
}

/// Nothing at entry: `ibv_open_device` is hooked for its return.
#[uprobe]
pub fn bytes_uprobe_ibv_open_device(_ctx: ProbeContext) -> u32 {
    0
}

/// `ibv_open_device` returned a context: its provider functions, long before the process's
/// first work request (a registration comes later, and a process attached to may never make
/// another).
#[uretprobe]
pub fn bytes_uretprobe_ibv_open_device(ctx: RetProbeContext) -> u32 {
    if let Some(tgid) = current_traced() {
        context_ops(tgid, ctx.ret::<u64>());
    }
    0
}

#[inline(always)]
fn context_ops(tgid: u32, ctx: u64) {
    if ctx == 0 {
        return;
    }
    let slot = |n: u64| read::<u64>(ctx + IBV_CONTEXT_OPS_OFF + 8 * n);
    // SAFETY: plain data, copied.
    let old = unsafe { PROVIDER_OPS.get(&tgid) }.copied();
    let ops = ProviderOps {
        ctx,
        poll_cq: slot(OPS_POLL_CQ),
        post_srq_recv: slot(OPS_POST_SRQ_RECV),
        post_send: slot(OPS_POST_SEND),
        post_recv: slot(OPS_POST_RECV),
        ..old.unwrap_or_default()
    };
    publish(tgid, old, &ops);
}

/// A deregistered MR's counts go into its release record and leave the map (its lkey may be
/// given to the next MR).
#[inline(always)]
pub fn take_mr(ev: &mut gdr_trace_common::MrEvent) {
    let key = ByteKey { tgid: ev.hdr.pid, lkey: ev.lkey, dev: ev.dev };
    if let Some(c) = take(&key) {
        ev.bytes_out = c.bytes_out;
        ev.bytes_in = c.bytes_in;
        ev.ops = c.ops;
        ev.wr_seen = 1;
    }
}

/// One work request's `n` SGEs at `sg` (at most `MAX_SGES` read; more are counted as
/// truncated): bytes in (the NIC writes them) or out, the request counted once, to its first
/// SGE; `inline`: the CPU copied the data into the request, no MR is read.
#[inline(always)]
pub(crate) fn count_sges(at: ByteKey, sg: u64, n: u64, inn: bool, inline: bool) {
    if n > MAX_SGES as u64 {
        count_lost(lost::BYTES_TRUNCATED);
    }
    for i in 0..MAX_SGES {
        if i as u64 >= n {
            break;
        }
        let sge = sg + 16 * i as u64;
        let len = read::<u32>(sge + 8) as u64;
        let lkey = if inline { LKEY_INLINE } else { read::<u32>(sge + 12) };
        count_dir(ByteKey { lkey, ..at }, len, u64::from(i == 0), inn);
    }
}

/// [`count`] in one direction.
#[inline(always)]
pub(crate) fn count_dir(key: ByteKey, len: u64, ops: u64, inn: bool) {
    if inn {
        count(key, 0, len, ops);
    } else {
        count(key, len, 0, ops);
    }
}

#[uprobe]
pub fn bytes_uprobe_post_send(ctx: ProbeContext) -> u32 {
    let Some(tgid) = current_traced() else { return 0 };
    let at = ByteKey { tgid, lkey: 0, dev: dev_of(ctx.arg::<u64>(0).unwrap_or(0)) };
    let mut wr: u64 = ctx.arg::<u64>(1).unwrap_or(0);
    for _ in 0..MAX_WRS {
        if wr == 0 {
            return 0;
        }
        let sg: u64 = read(wr + 16);
        let nsge: i32 = read(wr + 24);
        let opcode: u32 = read(wr + 28);
        let flags: u32 = read(wr + 32);
        // RDMA_WRITE(_WITH_IMM) 0/1, SEND(_WITH_IMM) 2/3, SEND_WITH_INV 9, TSO 10: the NIC
        // reads local memory; RDMA_READ 4: it writes local memory. Atomics, binds, invalidates:
        // no payload counted.
        let out = matches!(opcode, 0 | 1 | 2 | 3 | 9 | 10);
        if out || opcode == 4 {
            let inline = out && flags & IBV_SEND_INLINE != 0;
            count_sges(at, sg, nsge.max(0) as u64, !out, inline);
        }
        wr = read(wr + 8);
    }
    if wr != 0 {
        count_lost(lost::BYTES_TRUNCATED);
    }
    0
}

#[inline(always)]
fn posted_recv(ctx: &ProbeContext) {
    let Some(tgid) = current_traced() else { return };
    // The QP's or the SRQ's context: both are the object's first field.
    let dev = dev_of(ctx.arg::<u64>(0).unwrap_or(0));
    let mut wr: u64 = ctx.arg::<u64>(1).unwrap_or(0);
    for _ in 0..MAX_WRS {
        if wr == 0 {
            return;
        }
        let sg: u64 = read(wr + 16);
        let nsge: i32 = read(wr + 24);
        let lkey = if nsge > 0 { read::<u32>(sg + 12) } else { LKEY_UNJOINED };
        posted(&RecvKey { tgid, _pad0: 0, wr_id: read(wr) }, ByteKey { tgid, lkey, dev });
        wr = read(wr + 8);
    }
    if wr != 0 {
        count_lost(lost::BYTES_TRUNCATED);
    }
}

#[uprobe]
pub fn bytes_uprobe_post_recv(ctx: ProbeContext) -> u32 {
    posted_recv(&ctx);
    0
}

#[uprobe]
pub fn bytes_uprobe_post_srq_recv(ctx: ProbeContext) -> u32 {
    posted_recv(&ctx);
    0
}

#[uprobe]
pub fn bytes_uprobe_poll_cq(ctx: ProbeContext) -> u32 {
    if current_traced().is_some() {
        let wc = ctx.arg::<u64>(2).unwrap_or(0);
        let args = MrArgs { addr: wc, length: 0, iova: 0, dev_or_pd: 0, aux: 0, access: 0, _pad0: 0 };
        stash_user(HookId::ProviderPollCq as u32, &args);
    }
    0
}

/// Receive completions: `byte_len` bytes came into the receive's buffer (its first SGE's MR).
#[uretprobe]
pub fn bytes_uretprobe_poll_cq(ctx: RetProbeContext) -> u32 {
    let Some(tgid) = current_traced() else { return 0 };
    let Some(args) = take_user(HookId::ProviderPollCq as u32) else { return 0 };
    let n = ctx.ret::<i32>();
    if n <= 0 {
        return 0;
    }
    if n > MAX_WCS as i32 {
        count_lost(lost::BYTES_TRUNCATED);
    }
    for i in 0..MAX_WCS {
        if i as i32 >= n {
            break;
        }
        let wc = args.addr + 48 * i as u64;
        let status: u32 = read(wc + 8);
        let opcode: u32 = read(wc + 12);
        // A completion's opcode is defined only when it succeeded: a failed one (a flushed
        // receive, a failed send: which, it does not say) leaves its posted receive to its
        // process's exit. RECV and RECV_RDMA_WITH_IMM each consume a posted receive; only
        // RECV's bytes went to it (the other's where the peer's write addressed them).
        if status != 0 || (opcode != IBV_WC_RECV && opcode != IBV_WC_RECV_RDMA_WITH_IMM) {
            continue;
        }
        let at = completed(&RecvKey { tgid, _pad0: 0, wr_id: read(wc) });
        if opcode != IBV_WC_RECV {
            continue;
        }
        let at = at.unwrap_or(ByteKey { tgid, lkey: LKEY_UNJOINED, dev: 0 });
        count(at, 0, read::<u32>(wc + 20) as u64, 1);
    }
    0
}
