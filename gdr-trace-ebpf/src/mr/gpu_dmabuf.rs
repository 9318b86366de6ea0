//! libcuda, from userspace: `cuMemGetHandleForAddressRange` exports GPU memory as a dma-buf
//! fd (what NCCL registers with `ibv_reg_dmabuf_mr`), tying a dma-buf MR back to its GPU VA.
//!
//! match-proto:cuda.h: CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr dptr,
//!     size_t size, CUmemRangeHandleType handleType, unsigned long long flags)

use aya_ebpf::{
    helpers::bpf_probe_read_user,
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use gdr_trace_common::{AttachKind, EventKind, HookId, MrArgs};

use crate::{
    filter::current_traced,
    record::send_mr,
    stash::{stash_user, take_user},
};

const HOOK: HookId = HookId::CuMemGetHandleForAddressRange;

#[uprobe]
pub fn mr_uprobe_cu_mem_get_handle_for_address_range(ctx: ProbeContext) -> u32 {
    if current_traced().is_none() {
        return 0;
    }
    let arg = |n| ctx.arg::<u64>(n).unwrap_or(0);
    // `aux` carries the out-pointer until the return; `access` the handle type.
    let args = MrArgs {
        dev_or_pd: 0,
        addr: arg(1),
        length: arg(2),
        iova: arg(1),
        aux: arg(0),
        access: arg(3) as u32,
        _pad0: 0,
    };
    stash_user(HOOK as u32, &args);
    0
}

#[uretprobe]
pub fn mr_uretprobe_cu_mem_get_handle_for_address_range(ctx: RetProbeContext) -> u32 {
    let Some(args) = take_user(HOOK as u32) else { return 0 };
    let result = ctx.ret::<u32>();
    // SAFETY: the caller's out-parameter, read with probe_read.
    let fd =
        if result == 0 { unsafe { bpf_probe_read_user(args.aux as *const i32) }.unwrap_or(-1) } else { -1 };
    send_mr(EventKind::UserGpuExport, HOOK, AttachKind::Uretprobe, |ev| {
        ev.addr = args.addr;
        ev.length = args.length;
        ev.access = args.access;
        ev.aux = fd as i64 as u64;
        // CUresult: 0 = CUDA_SUCCESS.
        ev.ret = -(result as i64);
    });
    0
}
