//! libcufile (GPUDirect Storage's userspace API), from uprobes: each call's arguments are kept
//! per thread from entry to return, the I/O hooks add what happened inside (nvidia-fs ioctls,
//! or POSIX reads and writes: compatibility mode), and the return sends one record.
//!
//! match-proto:cuda:cufile.h:
//!   CUfileError_t cuFileDriverOpen(void)
//!   CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr)
//!   CUfileError_t cuFileBufRegister(const void *bufPtr_base, size_t length, int flags)
//!   ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size, off_t file_offset, off_t bufPtr_offset)
//!   ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size, off_t file_offset, off_t bufPtr_offset)
//!   CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p, off_t *file_offset_p,
//!                                 off_t *bufPtr_offset_p, ssize_t *bytes_read_p, CUstream_t stream)
//!   CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr, CUfileIOParams_t *iocbp, unsigned int flags)
//! CUfileError_t is { CUfileOpError err; CUresult cu_err; }: 8 bytes, returned in one register.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use gdr_trace_common::{
    lost,
    storage::{cufile, GdsArgs, GdsEvent, GdsOp, GdsTally, MAX_BATCH},
    AttachKind, EventKind, HookId,
};

use crate::{
    filter::current_traced,
    maps::count_lost,
    storage_maps::{send, GDS_ACTIVE, GDS_INFLIGHT},
};

#[inline(always)]
fn user<T: Copy + Default>(addr: u64) -> T {
    if addr == 0 {
        return T::default();
    }
    // SAFETY: a user pointer read with probe_read (a fault is an error).
    unsafe { bpf_probe_read_user(addr as *const T) }.unwrap_or_default()
}

fn args(op: GdsOp) -> GdsArgs {
    GdsArgs {
        op: op as u32,
        fd: -1,
        tally: GdsTally { io_fd: -1, ..GdsTally::default() },
        ..GdsArgs::default()
    }
}

#[inline(always)]
fn arg(ctx: &ProbeContext, n: usize) -> u64 {
    ctx.arg(n).unwrap_or(0)
}

#[uprobe]
pub fn gds_uprobe_cufile_driver_open(_ctx: ProbeContext) -> u32 {
    enter(&args(GdsOp::DriverOpen));
    0
}

#[uprobe]
pub fn gds_uprobe_cufile_handle_register(ctx: ProbeContext) -> u32 {
    let mut a = args(GdsOp::HandleRegister);
    // `handle` holds the CUfileHandle_t* until the call fills it.
    a.handle = arg(&ctx, 0);
    a.fd = user::<i32>(arg(&ctx, 1) + cufile::DESCR_FD);
    enter(&a);
    0
}

#[uprobe]
pub fn gds_uprobe_cufile_buf_register(ctx: ProbeContext) -> u32 {
    let mut a = args(GdsOp::BufRegister);
    a.buf = arg(&ctx, 0);
    a.length = arg(&ctx, 1);
    enter(&a);
    0
}

#[inline(always)]
fn rw(ctx: &ProbeContext, op: GdsOp) {
    let mut a = args(op);
    a.handle = arg(ctx, 0);
    a.buf = arg(ctx, 1);
    a.length = arg(ctx, 2);
    a.file_offset = arg(ctx, 3) as i64;
    a.buf_offset = arg(ctx, 4) as i64;
    enter(&a);
}

#[uprobe]
pub fn gds_uprobe_cufile_read(ctx: ProbeContext) -> u32 {
    rw(&ctx, GdsOp::Read);
    0
}

#[uprobe]
pub fn gds_uprobe_cufile_write(ctx: ProbeContext) -> u32 {
    rw(&ctx, GdsOp::Write);
    0
}

#[uprobe]
pub fn gds_uprobe_cufile_read_async(ctx: ProbeContext) -> u32 {
    let mut a = args(GdsOp::ReadAsync);
    a.handle = arg(&ctx, 0);
    a.buf = arg(&ctx, 1);
    a.length = user(arg(&ctx, 2));
    a.file_offset = user(arg(&ctx, 3));
    a.buf_offset = user(arg(&ctx, 4));
    enter(&a);
    0
}

#[uprobe]
pub fn gds_uprobe_cufile_batch_io_submit(ctx: ProbeContext) -> u32 {
    let mut a = args(GdsOp::BatchSubmit);
    a.handle = arg(&ctx, 0);
    a.batch_count = arg(&ctx, 1) as u32;
    a.batch_ptr = arg(&ctx, 2);
    enter(&a);
    0
}

macro_rules! uretprobes {
    ($($name:ident => $hook:ident,)*) => {$(
        #[uretprobe]
        pub fn $name(ctx: RetProbeContext) -> u32 {
            leave(HookId::$hook, ctx.ret::<u64>());
            0
        }
    )*};
}

uretprobes! {
    gds_uretprobe_cufile_driver_open => CuFileDriverOpen,
    gds_uretprobe_cufile_handle_register => CuFileHandleRegister,
    gds_uretprobe_cufile_buf_register => CuFileBufRegister,
    gds_uretprobe_cufile_read => CuFileRead,
    gds_uretprobe_cufile_write => CuFileWrite,
    gds_uretprobe_cufile_read_async => CuFileReadAsync,
    gds_uretprobe_cufile_batch_io_submit => CuFileBatchIoSubmit,
}

#[inline(always)]
fn enter(a: &GdsArgs) {
    if current_traced().is_none() {
        return;
    }
    let tid = bpf_get_current_pid_tgid() as u32;
    if GDS_INFLIGHT.insert(tid, a, 0).is_err() {
        count_lost(lost::STORAGE_MAP_FULL);
        return;
    }
    if let Some(n) = GDS_ACTIVE.get_ptr_mut(0) {
        // SAFETY: a map value; updated atomically (other threads' calls start and end too).
        crate::storage_maps::add(unsafe { &mut *n }, 1);
    }
}

#[inline(always)]
fn leave(hook: HookId, rax: u64) {
    let tid = bpf_get_current_pid_tgid() as u32;
    let Some(p) = GDS_INFLIGHT.get_ptr_mut(tid) else { return };
    // SAFETY: this thread's entry, copied out before removal.
    let mut a = unsafe { *p };
    let _ = GDS_INFLIGHT.remove(tid);
    if let Some(n) = GDS_ACTIVE.get_ptr_mut(0) {
        // SAFETY: as in `enter`; adding 2^64 - 1 subtracts one.
        crate::storage_maps::add(unsafe { &mut *n }, u64::MAX);
    }
    let op = a.op;
    let ret = if op == GdsOp::Read as u32 || op == GdsOp::Write as u32 {
        rax as i64
    } else {
        // CUfileError_t.err, the low half.
        rax as u32 as i32 as i64
    };
    if op == GdsOp::HandleRegister as u32 {
        a.handle = user(a.handle);
    }
    if op != GdsOp::BatchSubmit as u32 {
        send_call(hook, &a, ret, 0, 0);
        return;
    }
    let base = a.batch_ptr;
    let n = a.batch_count;
    for i in 0..MAX_BATCH {
        if i >= n {
            break;
        }
        let e = base + i as u64 * cufile::IOPARAMS_SIZE;
        a.handle = user(e + cufile::IOPARAMS_FH);
        a.buf = user(e + cufile::IOPARAMS_BUF);
        a.file_offset = user(e + cufile::IOPARAMS_FILE_OFFSET);
        a.buf_offset = user(e + cufile::IOPARAMS_BUF_OFFSET);
        a.length = user(e + cufile::IOPARAMS_LEN);
        let opcode: u32 = user(e + cufile::IOPARAMS_OPCODE);
        send_call(hook, &a, ret, i, opcode);
    }
}

#[inline(always)]
fn send_call(hook: HookId, a: &GdsArgs, ret: i64, index: u32, opcode: u32) {
    send::<GdsEvent>(EventKind::GdsCall, hook, AttachKind::Uretprobe, |ev| {
        ev.args = *a;
        ev.ret = ret;
        ev.batch_index = index;
        ev.batch_opcode = opcode;
    });
}
