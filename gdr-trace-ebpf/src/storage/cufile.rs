//! libcufile (GPUDirect Storage's userspace API), from uprobes: each call's arguments are kept
//! per thread from entry to return, the I/O hooks add what happened inside (nvidia-fs ioctls,
//! or POSIX reads and writes: compatibility mode), and the return sends one record
//! (`cufile_ret`). What the library's worker threads do for a call (async, batch, large I/O)
//! happens on no thread with a call in flight: the I/O hooks send it on its own (`in_call` 0,
//! `GdsWorkerIo`) and userspace attributes it (`storage::attribute`).
//!
//! match-proto:cuda:cufile.h:
//!   CUfileError_t cuFileDriverOpen(void)
//!   CUfileError_t cuFileDriverClose(void)
//!   CUfileError_t cuFileDriverClose_v2(void)
//!   CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr)
//!   void cuFileHandleDeregister(CUfileHandle_t fh)
//!   CUfileError_t cuFileBufRegister(const void *bufPtr_base, size_t length, int flags)
//!   CUfileError_t cuFileBufDeregister(const void *bufPtr_base)
//!   ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size, off_t file_offset, off_t bufPtr_offset)
//!   ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size, off_t file_offset, off_t bufPtr_offset)
//!   CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p, off_t *file_offset_p,
//!                                 off_t *bufPtr_offset_p, ssize_t *bytes_read_p, CUstream stream)
//!   CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p, off_t *file_offset_p,
//!                                  off_t *bufPtr_offset_p, ssize_t *bytes_written_p, CUstream stream)
//!   CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t *batch_idp, unsigned nr)
//!   CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr, CUfileIOParams_t *iocbp, unsigned int flags)
//!   CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch_idp, unsigned min_nr, unsigned *nr,
//!                                        CUfileIOEvents_t *iocbp, struct timespec *timeout)
//!   CUfileError_t cuFileBatchIOCancel(CUfileBatchHandle_t batch_idp)
//!   void cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp)
//!   CUfileError_t cuFileStreamRegister(CUstream stream, unsigned flags)
//!   CUfileError_t cuFileStreamDeregister(CUstream stream)
//! CUfileError_t is { CUfileOpError err; CUresult cu_err; }: 8 bytes, returned in one register.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::uprobe,
    programs::ProbeContext,
};
use gdr_trace_common::storage::{cufile, GdsArgs, GdsOp, GdsTally};

use crate::{
    filter::current_traced,
    storage::maps::{gds_inflight, GDS_ACTIVE, GDS_INFLIGHT},
};

/// A tail call (`cuFileDriverClose` jumps to `cuFileDriverClose_v2`) enters the second function
/// at the first one's stack pointer within this long; later, an entry left there is stale.
const TAIL_CALL_NS: u64 = 50_000_000;
/// A call nested deeper in one in flight comes within this long of its start; an older entry is
/// one whose return was never seen (its thread died in the call).
const NESTED_NS: u64 = 30_000_000_000;

#[inline(always)]
pub fn user<T: Copy + Default>(addr: u64) -> T {
    if addr == 0 {
        return T::default();
    }
    crate::kernel_read::read_user_or_zero(addr)
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

/// (instruction pointer, stack pointer) at the probe: the function's address and where its
/// return address lies.
#[inline(always)]
fn regs(ctx: &ProbeContext) -> (u64, u64) {
    #[cfg(bpf_target_arch = "x86_64")]
    {
        // SAFETY: pt_regs of this probe.
        unsafe { ((*ctx.regs).rip, (*ctx.regs).rsp) }
    }
    #[cfg(not(bpf_target_arch = "x86_64"))]
    {
        let _ = ctx;
        (0, 0)
    }
}

/// The 7th argument (x86-64: on the stack, above the return address).
#[inline(always)]
fn arg7(sp: u64) -> u64 {
    if sp == 0 {
        0
    } else {
        user(sp + 8)
    }
}

/// Calls that take nothing but their op, or one pointer-sized argument kept in one field.
macro_rules! simple {
    ($($name:ident => $op:ident $(, $field:ident)?;)*) => {$(
        #[uprobe]
        pub fn $name(ctx: ProbeContext) -> u32 {
            #[allow(unused_mut)]
            let mut a = args(GdsOp::$op);
            $(a.$field = arg(&ctx, 0);)?
            enter(&ctx, a);
            0
        }
    )*};
}

simple! {
    gds_uprobe_cufile_driver_open => DriverOpen;
    gds_uprobe_cufile_driver_close => DriverClose;
    gds_uprobe_cufile_driver_close_v2 => DriverCloseV2;
    gds_uprobe_cufile_handle_deregister => HandleDeregister, handle;
    gds_uprobe_cufile_buf_deregister => BufDeregister, buf;
    gds_uprobe_cufile_batch_io_cancel => BatchCancel, batch_id;
    gds_uprobe_cufile_batch_io_destroy => BatchDestroy, batch_id;
    gds_uprobe_cufile_stream_deregister => StreamDeregister, stream;
}

#[uprobe]
pub fn gds_uprobe_cufile_handle_register(ctx: ProbeContext) -> u32 {
    let mut a = args(GdsOp::HandleRegister);
    a.out_ptr = arg(&ctx, 0);
    a.fd = user::<i32>(arg(&ctx, 1) + cufile::DESCR_FD);
    enter(&ctx, a);
    0
}

#[uprobe]
pub fn gds_uprobe_cufile_buf_register(ctx: ProbeContext) -> u32 {
    let mut a = args(GdsOp::BufRegister);
    a.buf = arg(&ctx, 0);
    a.length = arg(&ctx, 1);
    a.flags = arg(&ctx, 2) as u32;
    enter(&ctx, a);
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
    enter(ctx, a);
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

/// The stream-ordered calls pass size and offsets by pointer, the stream 7th.
#[inline(always)]
fn rw_async(ctx: &ProbeContext, op: GdsOp) {
    let mut a = args(op);
    a.handle = arg(ctx, 0);
    a.buf = arg(ctx, 1);
    a.length = user(arg(ctx, 2));
    a.file_offset = user(arg(ctx, 3));
    a.buf_offset = user(arg(ctx, 4));
    a.stream = arg7(regs(ctx).1);
    enter(ctx, a);
}

#[uprobe]
pub fn gds_uprobe_cufile_read_async(ctx: ProbeContext) -> u32 {
    rw_async(&ctx, GdsOp::ReadAsync);
    0
}

#[uprobe]
pub fn gds_uprobe_cufile_write_async(ctx: ProbeContext) -> u32 {
    rw_async(&ctx, GdsOp::WriteAsync);
    0
}

#[uprobe]
pub fn gds_uprobe_cufile_batch_io_set_up(ctx: ProbeContext) -> u32 {
    let mut a = args(GdsOp::BatchSetUp);
    a.out_ptr = arg(&ctx, 0);
    a.batch_count = arg(&ctx, 1) as u32;
    enter(&ctx, a);
    0
}

#[uprobe]
pub fn gds_uprobe_cufile_batch_io_submit(ctx: ProbeContext) -> u32 {
    let mut a = args(GdsOp::BatchSubmit);
    a.batch_id = arg(&ctx, 0);
    a.batch_count = arg(&ctx, 1) as u32;
    a.batch_ptr = arg(&ctx, 2);
    a.flags = arg(&ctx, 3) as u32;
    enter(&ctx, a);
    0
}

#[uprobe]
pub fn gds_uprobe_cufile_batch_io_get_status(ctx: ProbeContext) -> u32 {
    let mut a = args(GdsOp::BatchGetStatus);
    a.batch_id = arg(&ctx, 0);
    a.batch_count = arg(&ctx, 1) as u32;
    a.out_ptr = arg(&ctx, 2);
    a.batch_ptr = arg(&ctx, 3);
    a.length = 0;
    enter(&ctx, a);
    0
}

#[uprobe]
pub fn gds_uprobe_cufile_stream_register(ctx: ProbeContext) -> u32 {
    let mut a = args(GdsOp::StreamRegister);
    a.stream = arg(&ctx, 0);
    a.flags = arg(&ctx, 1) as u32;
    enter(&ctx, a);
    0
}

/// Keeps the call's arguments for its return. A call of the library from inside one already in
/// flight on this thread (deeper on the stack, or a tail call: same stack pointer, return
/// address already the uretprobe's) only deepens it: the outermost call is the one the
/// application made. Anything else in the slot is stale (its return was never seen).
#[inline(always)]
fn enter(ctx: &ProbeContext, mut a: GdsArgs) {
    if current_traced().is_none() {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    a.entry_tgid = (pid_tgid >> 32) as u32;
    let (ip, sp) = regs(ctx);
    a.func_ip = ip;
    a.entry_sp = sp;
    a.entry_ret = if sp == 0 { 0 } else { user(sp) };
    // SAFETY: a helper without arguments.
    a.entry_ns = unsafe { bpf_ktime_get_ns() };
    if let Some(p) = GDS_INFLIGHT.get_ptr_mut(tid) {
        // SAFETY: this thread's own entry; no other thread writes it.
        let outer = unsafe { &mut *p };
        let age = a.entry_ns.wrapping_sub(outer.entry_ns);
        let same = outer.entry_tgid == a.entry_tgid && sp != 0;
        let deeper = same && sp < outer.entry_sp && age < NESTED_NS;
        let tail = same && sp == outer.entry_sp && a.entry_ret != outer.entry_ret && age < TAIL_CALL_NS;
        if deeper || tail {
            outer.depth += 1;
            return;
        }
        // Stale: replaced below; it no longer counts as in flight.
        if let Some(n) = GDS_ACTIVE.get_ptr_mut(0) {
            // SAFETY: as in `cufile_ret::leave`.
            crate::maps::add(unsafe { &mut *n }, u64::MAX);
        }
    }
    // A stale entry of this thread is replaced (already uncounted above); a new one is within
    // the tenant's share (its loss counted there).
    if !gds_inflight().put(&tid, &a) {
        return;
    }
    if let Some(n) = GDS_ACTIVE.get_ptr_mut(0) {
        // SAFETY: a map value; updated atomically (other threads' calls start and end too).
        crate::maps::add(unsafe { &mut *n }, 1);
    }
}
