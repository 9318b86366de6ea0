//! Kernel RDMA core: `ib_umem_get` (every user MR that pins pages), the dma-buf umem getters,
//! and `ib_umem_release` for every kind of umem.
//!
//! match-proto:v6.1:drivers/infiniband/core/umem.c:
//!   struct ib_umem *ib_umem_get(struct ib_device *device, unsigned long addr, size_t size, int access)
//!   void ib_umem_release(struct ib_umem *umem)
//! match-proto:v6.1:drivers/infiniband/core/umem_dmabuf.c:
//!   struct ib_umem_dmabuf *ib_umem_dmabuf_get(struct ib_device *device, unsigned long offset,
//!       size_t size, int fd, int access, const struct dma_buf_attach_ops *ops)
//!   struct ib_umem_dmabuf *ib_umem_dmabuf_get_pinned(struct ib_device *device, unsigned long offset,
//!       size_t size, int fd, int access)
//! match-proto:v6.12:...: ib_umem_dmabuf_get_pinned_with_dma_device(struct ib_device *device,
//!       struct device *dma_device, unsigned long offset, size_t size, int fd, int access)

use aya_ebpf::{
    helpers::bpf_probe_read_kernel_str_bytes,
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use gdr_trace_common::{AttachKind, EventKind, HookId, LiveUmem, MrArgs, OFFSET_UNKNOWN};

use crate::{
    filter::current_traced,
    kernel_read::{global, private_data_of, read_kernel},
    maps::{KERNEL_ARGS, LIVE_UMEMS},
    pin_verb,
    record::{send_mr, tracing_arg},
    stash::{stash, take},
};

/// Offset of `name` in `struct ib_device`, resolved from the running kernel's BTF.
#[unsafe(no_mangle)]
static IB_DEVICE_NAME_OFF: u32 = OFFSET_UNKNOWN;
/// `ib_umem_dmabuf.attach`, `dma_buf_attachment.dmabuf`, `dma_buf.exp_name`.
#[unsafe(no_mangle)]
static UMEM_DMABUF_ATTACH_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static ATTACHMENT_DMABUF_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static DMABUF_EXP_NAME_OFF: u32 = OFFSET_UNKNOWN;
/// `ib_umem.address` and `ib_umem.length`: where a pin hook that takes no address (7.2's
/// descriptor and attribute getters) learns what it pinned.
#[unsafe(no_mangle)]
static UMEM_ADDRESS_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static UMEM_LENGTH_OFF: u32 = OFFSET_UNKNOWN;

/// Where a pin hook's arguments are: `NONE` for one it does not take (the pin's address and
/// length are then read from the umem it returns).
#[derive(Clone, Copy)]
struct Layout {
    addr: usize,
    len: usize,
    access: usize,
    fd: usize,
}

const NONE: usize = usize::MAX;

const fn l(addr: usize, len: usize, access: usize, fd: usize) -> Layout {
    Layout { addr, len, access, fd }
}

/// Argument layout of each pin hook (the device is always argument 0).
#[inline(always)]
const fn layout(hook: HookId) -> Layout {
    match hook {
        HookId::IbUmemDmabufGet
        | HookId::IbUmemDmabufGetPinned
        | HookId::IbUmemDmabufGetPinnedRevocableAndLock => l(1, 2, 4, 3),
        HookId::IbUmemDmabufGetPinnedWithDmaDevice => l(2, 3, 5, 4),
        // 7.2: (dev, attrs, attr_id, addr, size, access) and its kin.
        HookId::IbUmemGetAttrOrVa => l(3, 4, 5, NONE),
        HookId::IbUmemGetAttr => l(NONE, 3, 4, NONE),
        HookId::IbUmemGetCqBuf => l(NONE, 2, 3, NONE),
        HookId::IbUmemGetCqBufOrVa => l(2, 3, 4, NONE),
        HookId::IbUmemGetDesc => l(NONE, NONE, 2, NONE),
        // ib_umem_get, ib_umem_get_va, ib_umem_get_peer: (dev, addr, size, access[, flags]).
        _ => l(1, 2, 3, NONE),
    }
}

/// A pin hook's arguments by its layout.
#[inline(always)]
fn args_from(get: impl Fn(usize) -> u64, hook: HookId) -> MrArgs {
    let l = layout(hook);
    let at = |i: usize| if i == NONE { 0 } else { get(i) };
    MrArgs {
        dev_or_pd: get(0),
        addr: at(l.addr),
        length: at(l.len),
        iova: at(l.addr),
        aux: if l.fd == NONE { 0 } else { get(l.fd) as i32 as i64 as u64 },
        access: at(l.access) as u32,
        _pad0: 0,
    }
}

/// fexit body shared by every registration hook: arguments, then the return value after them.
#[inline(always)]
pub fn registration_fexit(ctx: &FExitContext, hook: HookId, nargs: usize) {
    let args = args_from(|i| tracing_arg(ctx, i), hook);
    registration_returned(hook, &args, tracing_arg(ctx, nargs), AttachKind::Fexit);
}

/// kprobe body shared by every registration hook: stash the arguments for the kretprobe.
#[inline(always)]
pub fn registration_kprobe(ctx: &ProbeContext, hook: HookId) {
    if current_traced().is_none() {
        return;
    }
    let args = args_from(|i| ctx.arg::<u64>(i).unwrap_or(0), hook);
    stash(&KERNEL_ARGS, hook as u32, &args);
}

#[inline(always)]
pub fn registration_kretprobe(ctx: &RetProbeContext, hook: HookId) {
    if let Some(args) = take(&KERNEL_ARGS, hook as u32) {
        registration_returned(hook, &args, ctx.ret::<u64>(), AttachKind::Kretprobe);
    }
}

/// A registration hook returned `ret` (a umem pointer or an ERR_PTR).
#[inline(always)]
pub fn registration_returned(hook: HookId, args: &MrArgs, ret: u64, attach: AttachKind) {
    let Some(tgid) = current_traced() else { return };
    let r = ret as i64;
    let failed = (-4095..0).contains(&r);
    let mut args = *args;
    let l = layout(hook);
    if !failed && (l.addr == NONE || l.len == NONE) {
        // The buffer came in a descriptor or an attribute: the umem says where and how long.
        (args.addr, args.iova) = (umem_field(ret, &UMEM_ADDRESS_OFF), umem_field(ret, &UMEM_ADDRESS_OFF));
        args.length = umem_field(ret, &UMEM_LENGTH_OFF);
    }
    // The verb this pin was made in: a registration's, or a queue's (its ring, doorbell record).
    let (purpose, uverbs_dev) = pin_verb::current();
    if !failed {
        let live = LiveUmem { pid: tgid, purpose, length: args.length };
        let _ = LIVE_UMEMS.insert(&ret, &live, 0);
    }
    let dmabuf = l.fd != NONE;
    send_mr(EventKind::KernelMrRegister, hook, attach, |ev| {
        ev.addr = args.addr;
        ev.length = args.length;
        ev.iova = args.iova;
        ev.access = args.access;
        ev.aux = args.aux;
        ev.purpose = purpose;
        ev.uverbs_dev = uverbs_dev;
        if failed {
            ev.ret = r;
        } else {
            ev.handle = ret;
            if dmabuf && !read_exporter(ret, &mut ev.label) {
                // No BTF for ib_core's umem (MLNX_OFED's DKMS builds): the dma-buf the
                // registration's fd names, through vmlinux types alone.
                exporter_by_fd(args.aux, &mut ev.label);
            }
        }
        read_device_name(args.dev_or_pd, &mut ev.device);
    });
}

/// A `u64` field of the `struct ib_umem` at `umem` (0 when its offset is unknown).
#[inline(always)]
fn umem_field(umem: u64, off: &u32) -> u64 {
    let off = global(off);
    if off == OFFSET_UNKNOWN {
        return 0;
    }
    crate::kernel_read::read_kernel_or_zero::<u64>(umem + off as u64)
}

#[inline(always)]
fn read_device_name(dev: u64, out: &mut [u8]) {
    let off = global(&IB_DEVICE_NAME_OFF);
    if off == OFFSET_UNKNOWN || dev == 0 {
        return;
    }
    // SAFETY: probe_read tolerates bad pointers (returns an error).
    let _ = unsafe { bpf_probe_read_kernel_str_bytes((dev + off as u64) as *const u8, out) };
}

/// `((struct ib_umem_dmabuf *)umem)->attach->dmabuf->exp_name`, when BTF gave the offsets:
/// whether it could be read.
#[inline(always)]
fn read_exporter(umem: u64, out: &mut [u8]) -> bool {
    let (a, d) = (global(&UMEM_DMABUF_ATTACH_OFF), global(&ATTACHMENT_DMABUF_OFF));
    if a == OFFSET_UNKNOWN || d == OFFSET_UNKNOWN {
        return false;
    }
    let Some(attach) = read_kernel::<u64>(umem + a as u64) else { return false };
    let Some(dmabuf) = read_kernel::<u64>(attach + d as u64) else { return false };
    exp_name(dmabuf, out)
}

/// The exporter of the dma-buf open at `fd` in the registering process: `file->private_data`
/// is its `struct dma_buf` (the registration succeeded, so the fd was one).
#[inline(always)]
fn exporter_by_fd(fd: u64, out: &mut [u8]) {
    if (fd as i64) < 0 {
        return;
    }
    let dmabuf = private_data_of(fd);
    if dmabuf != 0 {
        exp_name(dmabuf, out);
    }
}

/// `dma_buf.exp_name` into `out`.
#[inline(always)]
fn exp_name(dmabuf: u64, out: &mut [u8]) -> bool {
    let n = global(&DMABUF_EXP_NAME_OFF);
    if n == OFFSET_UNKNOWN {
        return false;
    }
    let Some(name) = read_kernel::<u64>(dmabuf + n as u64) else { return false };
    // SAFETY: probe_read tolerates bad pointers (returns an error).
    unsafe { bpf_probe_read_kernel_str_bytes(name as *const u8, out) }.is_ok()
}

/// Pin hooks: `ib_umem_get`, and those of kernels past 6.12 (torvalds/linux drivers/infiniband/core/umem.c and
/// umem_dmabuf.c, the RDMA pulls for 7.1 and 7.2): the same bodies, their own argument layouts.
macro_rules! pin_hook {
    ($hook:ident, $func:literal, $nargs:literal, $fexit:ident, $kprobe:ident, $kretprobe:ident) => {
        #[fexit(function = $func)]
        pub fn $fexit(ctx: FExitContext) -> i32 {
            registration_fexit(&ctx, HookId::$hook, $nargs);
            0
        }

        #[kprobe]
        pub fn $kprobe(ctx: ProbeContext) -> u32 {
            registration_kprobe(&ctx, HookId::$hook);
            0
        }

        #[kretprobe]
        pub fn $kretprobe(ctx: RetProbeContext) -> u32 {
            registration_kretprobe(&ctx, HookId::$hook);
            0
        }
    };
}

// torvalds/linux drivers/infiniband/core/umem.c: every pin up to 7.1.
pin_hook!(IbUmemGet, "ib_umem_get", 4, mr_fexit_ib_umem_get, mr_kprobe_ib_umem_get, mr_kretprobe_ib_umem_get);
pin_hook!(
    IbUmemGetVa,
    "ib_umem_get_va",
    4,
    mr_fexit_ib_umem_get_va,
    mr_kprobe_ib_umem_get_va,
    mr_kretprobe_ib_umem_get_va
);
pin_hook!(
    IbUmemGetAttrOrVa,
    "ib_umem_get_attr_or_va",
    6,
    mr_fexit_ib_umem_get_attr_or_va,
    mr_kprobe_ib_umem_get_attr_or_va,
    mr_kretprobe_ib_umem_get_attr_or_va
);
pin_hook!(
    IbUmemGetAttr,
    "ib_umem_get_attr",
    5,
    mr_fexit_ib_umem_get_attr,
    mr_kprobe_ib_umem_get_attr,
    mr_kretprobe_ib_umem_get_attr
);
pin_hook!(
    IbUmemGetCqBuf,
    "ib_umem_get_cq_buf",
    4,
    mr_fexit_ib_umem_get_cq_buf,
    mr_kprobe_ib_umem_get_cq_buf,
    mr_kretprobe_ib_umem_get_cq_buf
);
pin_hook!(
    IbUmemGetCqBufOrVa,
    "ib_umem_get_cq_buf_or_va",
    5,
    mr_fexit_ib_umem_get_cq_buf_or_va,
    mr_kprobe_ib_umem_get_cq_buf_or_va,
    mr_kretprobe_ib_umem_get_cq_buf_or_va
);
pin_hook!(
    IbUmemGetDesc,
    "ib_umem_get_desc",
    3,
    mr_fexit_ib_umem_get_desc,
    mr_kprobe_ib_umem_get_desc,
    mr_kretprobe_ib_umem_get_desc
);
pin_hook!(
    IbUmemDmabufGetPinnedRevocableAndLock,
    "ib_umem_dmabuf_get_pinned_revocable_and_lock",
    5,
    mr_fexit_ib_umem_dmabuf_get_pinned_revocable_and_lock,
    mr_kprobe_ib_umem_dmabuf_get_pinned_revocable_and_lock,
    mr_kretprobe_ib_umem_dmabuf_get_pinned_revocable_and_lock
);

#[fexit(function = "ib_umem_dmabuf_get_pinned")]
pub fn mr_fexit_ib_umem_dmabuf_get_pinned(ctx: FExitContext) -> i32 {
    registration_fexit(&ctx, HookId::IbUmemDmabufGetPinned, 5);
    0
}

#[kprobe]
pub fn mr_kprobe_ib_umem_dmabuf_get_pinned(ctx: ProbeContext) -> u32 {
    registration_kprobe(&ctx, HookId::IbUmemDmabufGetPinned);
    0
}

#[kretprobe]
pub fn mr_kretprobe_ib_umem_dmabuf_get_pinned(ctx: RetProbeContext) -> u32 {
    registration_kretprobe(&ctx, HookId::IbUmemDmabufGetPinned);
    0
}

#[fexit(function = "ib_umem_dmabuf_get")]
pub fn mr_fexit_ib_umem_dmabuf_get(ctx: FExitContext) -> i32 {
    registration_fexit(&ctx, HookId::IbUmemDmabufGet, 6);
    0
}

#[kprobe]
pub fn mr_kprobe_ib_umem_dmabuf_get(ctx: ProbeContext) -> u32 {
    registration_kprobe(&ctx, HookId::IbUmemDmabufGet);
    0
}

#[kretprobe]
pub fn mr_kretprobe_ib_umem_dmabuf_get(ctx: RetProbeContext) -> u32 {
    registration_kretprobe(&ctx, HookId::IbUmemDmabufGet);
    0
}

#[fexit(function = "ib_umem_dmabuf_get_pinned_with_dma_device")]
pub fn mr_fexit_ib_umem_dmabuf_get_pinned_with_dma_device(ctx: FExitContext) -> i32 {
    registration_fexit(&ctx, HookId::IbUmemDmabufGetPinnedWithDmaDevice, 6);
    0
}

#[kprobe]
pub fn mr_kprobe_ib_umem_dmabuf_get_pinned_with_dma_device(ctx: ProbeContext) -> u32 {
    registration_kprobe(&ctx, HookId::IbUmemDmabufGetPinnedWithDmaDevice);
    0
}

#[kretprobe]
pub fn mr_kretprobe_ib_umem_dmabuf_get_pinned_with_dma_device(ctx: RetProbeContext) -> u32 {
    registration_kretprobe(&ctx, HookId::IbUmemDmabufGetPinnedWithDmaDevice);
    0
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
        ev.purpose = live.purpose;
    });
}
