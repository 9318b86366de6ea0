//! libibverbs, from userspace (uprobes): the second source of truth, and the only one where
//! the kernel refuses kernel hooks.
//!
//! match-proto:rdma-core:libibverbs/verbs.h:
//!   struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
//!   struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
//!   int ibv_dereg_mr(struct ibv_mr *mr)
//! ABI (stable since IBVERBS_1.1): ibv_pd.context @0, ibv_context.device @0, ibv_device.name @24;
//! ibv_mr.pd @8, .addr @16, .length @24.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user, bpf_probe_read_user_str_bytes},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use gdr_trace_common::{lost, AttachKind, EventKind, HookId, MrArgs, MrEvent};

use crate::{
    filter::current_traced,
    maps::{count_lost, stash_key, USER_ARGS},
    record::send_mr,
};

const IBV_DEVICE_NAME_OFF: u64 = 24;
const IBV_MR_PD_OFF: u64 = 8;
const IBV_MR_ADDR_OFF: u64 = 16;
const IBV_MR_LENGTH_OFF: u64 = 24;

#[uprobe]
pub fn mr_uprobe_ibv_reg_mr(ctx: ProbeContext) -> u32 {
    let addr = ctx.arg(1).unwrap_or(0);
    let args = MrArgs {
        dev_or_pd: ctx.arg(0).unwrap_or(0),
        addr,
        length: ctx.arg(2).unwrap_or(0),
        iova: addr,
        access: ctx.arg::<i32>(3).unwrap_or(0) as u32,
        _pad0: 0,
    };
    stash(HookId::IbvRegMr, &args);
    0
}

#[uprobe]
pub fn mr_uprobe_ibv_reg_mr_iova2(ctx: ProbeContext) -> u32 {
    let args = MrArgs {
        dev_or_pd: ctx.arg(0).unwrap_or(0),
        addr: ctx.arg(1).unwrap_or(0),
        length: ctx.arg(2).unwrap_or(0),
        iova: ctx.arg(3).unwrap_or(0),
        access: ctx.arg::<u32>(4).unwrap_or(0),
        _pad0: 0,
    };
    stash(HookId::IbvRegMrIova2, &args);
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

#[uprobe]
pub fn mr_uprobe_ibv_dereg_mr(ctx: ProbeContext) -> u32 {
    let mr: u64 = ctx.arg(0).unwrap_or(0);
    if mr == 0 {
        return 0;
    }
    // SAFETY: user pointers read with probe_read (faults are errors, not crashes).
    let (pd, addr, length) = unsafe {
        (
            bpf_probe_read_user((mr + IBV_MR_PD_OFF) as *const u64).unwrap_or(0),
            bpf_probe_read_user((mr + IBV_MR_ADDR_OFF) as *const u64).unwrap_or(0),
            bpf_probe_read_user((mr + IBV_MR_LENGTH_OFF) as *const u64).unwrap_or(0),
        )
    };
    // For a dereg, `iova` carries the `struct ibv_mr *` being released.
    let args = MrArgs { dev_or_pd: pd, addr, length, iova: mr, access: 0, _pad0: 0 };
    stash(HookId::IbvDeregMr, &args);
    0
}

#[uretprobe]
pub fn mr_uretprobe_ibv_dereg_mr(ctx: RetProbeContext) -> u32 {
    let Some(args) = take(HookId::IbvDeregMr) else { return 0 };
    let ret = ctx.ret::<i32>();
    send_mr(EventKind::UserMrDeregister, HookId::IbvDeregMr, AttachKind::Uretprobe, |ev| {
        fill(ev, &args);
        ev.handle = args.iova;
        ev.iova = args.addr;
        // ibv_dereg_mr returns 0 or a positive errno.
        ev.ret = -(ret as i64);
    });
    0
}

#[inline(always)]
fn stash(hook: HookId, args: &MrArgs) {
    if current_traced().is_none() {
        return;
    }
    let key = stash_key(hook as u32, bpf_get_current_pid_tgid() as u32);
    if USER_ARGS.insert(&key, args, 0).is_err() {
        count_lost(lost::STASH_FULL);
    }
}

#[inline(always)]
fn take(hook: HookId) -> Option<MrArgs> {
    let key = stash_key(hook as u32, bpf_get_current_pid_tgid() as u32);
    // SAFETY: plain data copied out before removal.
    let args = unsafe { USER_ARGS.get(&key) }.copied();
    match args {
        Some(a) => {
            let _ = USER_ARGS.remove(&key);
            Some(a)
        }
        None => {
            if current_traced().is_some() {
                count_lost(lost::STASH_MISS);
            }
            None
        }
    }
}

#[inline(always)]
fn reg_returned(hook: HookId, mr: u64) {
    let Some(args) = take(hook) else { return };
    send_mr(EventKind::UserMrRegister, hook, AttachKind::Uretprobe, |ev| {
        fill(ev, &args);
        ev.handle = mr;
        ev.iova = args.iova;
        ev.access = args.access;
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
