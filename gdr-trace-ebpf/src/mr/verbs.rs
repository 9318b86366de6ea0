//! libibverbs, from userspace (uprobes): the second source of truth, and the only one where
//! the kernel refuses kernel hooks.
//!
//! match-proto:rdma-core:libibverbs/verbs.h:
//!   struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
//!   struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
//!   struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access)
//!   int ibv_dereg_mr(struct ibv_mr *mr)
//! ABI (stable since IBVERBS_1.1): ibv_pd.context @0, ibv_context.device @0, ibv_device.name @24;
//! ibv_mr.pd @8, .addr @16, .length @24, .lkey @36.

use aya_ebpf::{
    helpers::{bpf_probe_read_user, bpf_probe_read_user_str_bytes},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use gdr_trace_common::{AttachKind, DeregArgs, EventKind, HookId, MrArgs, MrEvent};

use crate::{
    filter::current_traced,
    record::send_mr,
    stash::{stash_user, take_user},
};

const IBV_DEVICE_NAME_OFF: u64 = 24;
const IBV_MR_PD_OFF: u64 = 8;
const IBV_MR_ADDR_OFF: u64 = 16;
const IBV_MR_LENGTH_OFF: u64 = 24;
const IBV_MR_LKEY_OFF: u64 = 36;

#[inline(always)]
fn arg(ctx: &ProbeContext, n: usize) -> u64 {
    ctx.arg::<u64>(n).unwrap_or(0)
}

#[inline(always)]
fn stash_if_traced(hook: HookId, args: &MrArgs) {
    if current_traced().is_some() {
        stash_user(hook as u32, args);
    }
}

#[uprobe]
pub fn mr_uprobe_ibv_reg_mr(ctx: ProbeContext) -> u32 {
    let (pd, addr, length, access) = (arg(&ctx, 0), arg(&ctx, 1), arg(&ctx, 2), arg(&ctx, 3) as u32);
    let args = MrArgs { dev_or_pd: pd, addr, length, iova: addr, aux: 0, access, _pad0: 0 };
    stash_if_traced(HookId::IbvRegMr, &args);
    0
}

#[uprobe]
pub fn mr_uprobe_ibv_reg_mr_iova2(ctx: ProbeContext) -> u32 {
    let (pd, addr, length, iova, access) =
        (arg(&ctx, 0), arg(&ctx, 1), arg(&ctx, 2), arg(&ctx, 3), arg(&ctx, 4));
    let args = MrArgs { dev_or_pd: pd, addr, length, iova, aux: 0, access: access as u32, _pad0: 0 };
    stash_if_traced(HookId::IbvRegMrIova2, &args);
    0
}

/// `aux` = the dma-buf fd (-1 for NCCL's support probe).
#[uprobe]
pub fn mr_uprobe_ibv_reg_dmabuf_mr(ctx: ProbeContext) -> u32 {
    let (pd, offset, length, iova) = (arg(&ctx, 0), arg(&ctx, 1), arg(&ctx, 2), arg(&ctx, 3));
    let fd = arg(&ctx, 4) as i32 as i64 as u64;
    let args =
        MrArgs { dev_or_pd: pd, addr: offset, length, iova, aux: fd, access: arg(&ctx, 5) as u32, _pad0: 0 };
    stash_if_traced(HookId::IbvRegDmabufMr, &args);
    0
}

#[uretprobe]
pub fn mr_uretprobe_ibv_reg_mr(ctx: RetProbeContext) -> u32 {
    reg_returned(HookId::IbvRegMr, ctx.ret::<u64>());
    0
}

#[uretprobe]
pub fn mr_uretprobe_ibv_reg_mr_iova2(ctx: RetProbeContext) -> u32 {
    reg_returned(HookId::IbvRegMrIova2, ctx.ret::<u64>());
    0
}

#[uretprobe]
pub fn mr_uretprobe_ibv_reg_dmabuf_mr(ctx: RetProbeContext) -> u32 {
    reg_returned(HookId::IbvRegDmabufMr, ctx.ret::<u64>());
    0
}

#[uprobe]
pub fn mr_uprobe_ibv_dereg_mr(ctx: ProbeContext) -> u32 {
    let mr = arg(&ctx, 0);
    if mr == 0 {
        return 0;
    }
    use crate::kernel_read::read_user_or_zero as user;
    let (pd, addr, length): (u64, u64, u64) =
        (user(mr + IBV_MR_PD_OFF), user(mr + IBV_MR_ADDR_OFF), user(mr + IBV_MR_LENGTH_OFF));
    let lkey: u32 = user(mr + IBV_MR_LKEY_OFF);
    // The device tag now: `ibv_mr.context` is gone once the MR is freed.
    let dev = crate::mr::bytes::dev_of(mr);
    let args = MrArgs::dereg(DeregArgs { pd, addr, length, mr, lkey, dev });
    stash_if_traced(HookId::IbvDeregMr, &args);
    0
}

#[uretprobe]
pub fn mr_uretprobe_ibv_dereg_mr(ctx: RetProbeContext) -> u32 {
    let Some(args) = take_user(HookId::IbvDeregMr as u32) else { return 0 };
    let d = args.as_dereg();
    let ret = ctx.ret::<i32>();
    send_mr(EventKind::UserMrDeregister, HookId::IbvDeregMr, AttachKind::Uretprobe, |ev| {
        // Address, length and device name (through `ibv_mr.pd`).
        fill(ev, &args);
        ev.handle = d.mr;
        ev.iova = d.addr;
        // ibv_dereg_mr returns 0 or a positive errno.
        ev.ret = -(ret as i64);
        ev.lkey = d.lkey;
        ev.dev = d.dev;
        ev.aux = 0;
        if ret == 0 {
            crate::mr::bytes::take_mr(ev);
        }
    });
    0
}

#[inline(always)]
fn reg_returned(hook: HookId, mr: u64) {
    let Some(args) = take_user(hook as u32) else { return };
    let (lkey, dev) = match crate::filter::current_traced() {
        Some(tgid) if mr != 0 => crate::mr::bytes::registered(tgid, mr),
        _ => (0, 0),
    };
    send_mr(EventKind::UserMrRegister, hook, AttachKind::Uretprobe, |ev| {
        fill(ev, &args);
        ev.lkey = lkey;
        ev.dev = dev;
        ev.handle = mr;
        ev.iova = args.iova;
        ev.access = args.access;
        ev.aux = args.aux;
        // NULL: failed; errno lives in TLS, out of reach here.
        ev.ret = if mr == 0 { -1 } else { 0 };
    });
}

#[inline(always)]
fn fill(ev: &mut MrEvent, args: &MrArgs) {
    ev.addr = args.addr;
    ev.length = args.length;
    read_device_name(args.dev_or_pd, &mut ev.device);
}

/// pd -> context -> device -> name.
#[inline(always)]
fn read_device_name(pd: u64, out: &mut [u8]) {
    if pd == 0 {
        return;
    }
    // SAFETY: user pointers read with probe_read (faults are errors, not crashes).
    unsafe {
        let Ok(context) = bpf_probe_read_user(pd as *const u64) else { return };
        let Ok(device) = bpf_probe_read_user(context as *const u64) else { return };
        let _ = bpf_probe_read_user_str_bytes((device + IBV_DEVICE_NAME_OFF) as *const u8, out);
    }
}
