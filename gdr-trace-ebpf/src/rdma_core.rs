//! Kernel RDMA core: `ib_umem_get` (every user MR that pins pages) and `ib_umem_release`.
//!
//! match-proto:v6.1:drivers/infiniband/core/umem.c:
//!   struct ib_umem *ib_umem_get(struct ib_device *device, unsigned long addr, size_t size, int access)
//!   void ib_umem_release(struct ib_umem *umem)

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel_str_bytes},
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use gdr_trace_common::{lost, AttachKind, EventKind, HookId, LiveUmem, MrArgs, OFFSET_UNKNOWN};

use crate::{
    filter::current_traced,
    maps::{count_lost, KERNEL_ARGS, LIVE_UMEMS},
    record::{send_mr, tracing_arg},
};

/// Offset of `name` in `struct ib_device`, resolved from the running kernel's BTF.
#[unsafe(no_mangle)]
static IB_DEVICE_NAME_OFF: u32 = OFFSET_UNKNOWN;

#[fexit(function = "ib_umem_get")]
pub fn mr_fexit_ib_umem_get(ctx: FExitContext) -> i32 {
    let args = MrArgs {
        dev_or_pd: tracing_arg(&ctx, 0),
        addr: tracing_arg(&ctx, 1),
        length: tracing_arg(&ctx, 2),
        iova: tracing_arg(&ctx, 1),
        access: tracing_arg(&ctx, 3) as u32,
        _pad0: 0,
    };
    // The return value follows the 4 parameters (works before bpf_get_func_ret, 5.17).
    umem_get_returned(&args, tracing_arg(&ctx, 4), AttachKind::Fexit);
    0
}

#[kprobe]
pub fn mr_kprobe_ib_umem_get(ctx: ProbeContext) -> u32 {
    if current_traced().is_none() {
        return 0;
    }
    let args = MrArgs {
        dev_or_pd: ctx.arg(0).unwrap_or(0),
        addr: ctx.arg(1).unwrap_or(0),
        length: ctx.arg(2).unwrap_or(0),
        iova: ctx.arg(1).unwrap_or(0),
        access: ctx.arg::<i32>(3).unwrap_or(0) as u32,
        _pad0: 0,
    };
    if KERNEL_ARGS.insert(&bpf_get_current_pid_tgid(), &args, 0).is_err() {
        count_lost(lost::STASH_FULL);
    }
    0
}

#[kretprobe]
pub fn mr_kretprobe_ib_umem_get(ctx: RetProbeContext) -> u32 {
    let key = bpf_get_current_pid_tgid();
    // SAFETY: MrArgs is plain data; copied out before removal.
    let Some(args) = (unsafe { KERNEL_ARGS.get(&key) }).copied() else {
        if current_traced().is_some() {
            count_lost(lost::STASH_MISS);
        }
        return 0;
    };
    let _ = KERNEL_ARGS.remove(&key);
    umem_get_returned(&args, ctx.ret::<u64>(), AttachKind::Kretprobe);
    0
}

#[inline(always)]
fn umem_get_returned(args: &MrArgs, ret: u64, attach: AttachKind) {
    let Some(tgid) = current_traced() else { return };
    let r = ret as i64;
    let failed = (-4095..0).contains(&r);
    if !failed {
        let live = LiveUmem { pid: tgid, _pad0: 0, length: args.length };
        let _ = LIVE_UMEMS.insert(&ret, &live, 0);
    }
    send_mr(EventKind::KernelMrRegister, HookId::IbUmemGet, attach, |ev| {
        ev.addr = args.addr;
        ev.length = args.length;
        ev.iova = args.iova;
        ev.access = args.access;
        if failed {
            ev.ret = r;
        } else {
            ev.handle = ret;
        }
        read_device_name(args.dev_or_pd, &mut ev.device);
    });
}

#[inline(always)]
fn read_device_name(dev: u64, out: &mut [u8]) {
    // SAFETY: read-only global patched by the loader.
    let off = unsafe { core::ptr::read_volatile(&IB_DEVICE_NAME_OFF) };
    if off == OFFSET_UNKNOWN || dev == 0 {
        return;
    }
    // SAFETY: probe_read tolerates bad pointers (returns an error).
    let _ = unsafe { bpf_probe_read_kernel_str_bytes((dev + off as u64) as *const u8, out) };
}

#[fentry(function = "ib_umem_release")]
pub fn mr_fentry_ib_umem_release(ctx: FEntryContext) -> i32 {
    umem_released(tracing_arg(&ctx, 0), AttachKind::Fentry);
    0
}

#[kprobe]
pub fn mr_kprobe_ib_umem_release(ctx: ProbeContext) -> u32 {
    umem_released(ctx.arg(0).unwrap_or(0), AttachKind::Kprobe);
    0
}

/// Only umems seen at registration are reported: that is what makes the release attributable
/// (it may run from another context, e.g. when the owner's file is closed).
#[inline(always)]
fn umem_released(umem: u64, attach: AttachKind) {
    if umem == 0 {
        return;
    }
    // SAFETY: plain data copied out before removal.
    let Some(live) = (unsafe { LIVE_UMEMS.get(&umem) }).copied() else { return };
    let _ = LIVE_UMEMS.remove(&umem);
    send_mr(EventKind::KernelMrRelease, HookId::IbUmemRelease, attach, |ev| {
        ev.handle = umem;
        ev.length = live.length;
    });
}
