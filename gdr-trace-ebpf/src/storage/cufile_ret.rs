//! The return side of the cuFile uprobes (`cufile`): what the call filled in is read back, and
//! one record is sent (one per entry of a batch submit).

use aya_ebpf::{helpers::bpf_get_current_pid_tgid, macros::uretprobe, programs::RetProbeContext};
use gdr_trace_common::{
    storage::{cufile, FileKey, GdsArgs, GdsEvent, GdsOp, MAX_BATCH},
    AttachKind, EventKind, HookId,
};

use crate::{
    storage::cufile::user,
    storage::maps::{gds_inflight, send, GDS_ACTIVE, GDS_FDS, GDS_FDS_ANY, GDS_INFLIGHT},
};

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
    gds_uretprobe_cufile_driver_close => CuFileDriverClose,
    gds_uretprobe_cufile_driver_close_v2 => CuFileDriverCloseV2,
    gds_uretprobe_cufile_handle_register => CuFileHandleRegister,
    gds_uretprobe_cufile_handle_deregister => CuFileHandleDeregister,
    gds_uretprobe_cufile_buf_register => CuFileBufRegister,
    gds_uretprobe_cufile_buf_deregister => CuFileBufDeregister,
    gds_uretprobe_cufile_read => CuFileRead,
    gds_uretprobe_cufile_write => CuFileWrite,
    gds_uretprobe_cufile_read_async => CuFileReadAsync,
    gds_uretprobe_cufile_write_async => CuFileWriteAsync,
    gds_uretprobe_cufile_batch_io_set_up => CuFileBatchIoSetUp,
    gds_uretprobe_cufile_batch_io_submit => CuFileBatchIoSubmit,
    gds_uretprobe_cufile_batch_io_get_status => CuFileBatchIoGetStatus,
    gds_uretprobe_cufile_batch_io_cancel => CuFileBatchIoCancel,
    gds_uretprobe_cufile_batch_io_destroy => CuFileBatchIoDestroy,
    gds_uretprobe_cufile_stream_register => CuFileStreamRegister,
    gds_uretprobe_cufile_stream_deregister => CuFileStreamDeregister,
}

#[inline(always)]
fn leave(hook: HookId, rax: u64) {
    let tid = bpf_get_current_pid_tgid() as u32;
    let Some(p) = GDS_INFLIGHT.get_ptr_mut(tid) else { return };
    // SAFETY: this thread's own entry.
    let slot = unsafe { &mut *p };
    if slot.depth > 0 {
        // A call nested in the one in flight returned: the outer one reports.
        slot.depth -= 1;
        return;
    }
    // SAFETY: copied out before removal.
    let mut a = unsafe { *p };
    gds_inflight().remove(&tid);
    if let Some(n) = GDS_ACTIVE.get_ptr_mut(0) {
        // SAFETY: a map value, updated atomically; adding 2^64 - 1 subtracts one.
        crate::maps::add(unsafe { &mut *n }, u64::MAX);
    }
    let op = a.op;
    // The hook that fired is the outermost call's (a tail call returns through both at once).
    let hook = if op == GdsOp::DriverClose as u32 { HookId::CuFileDriverClose } else { hook };
    let (ret, cu_err) = if op == GdsOp::Read as u32 || op == GdsOp::Write as u32 {
        (rax as i64, 0)
    } else if op == GdsOp::HandleDeregister as u32 || op == GdsOp::BatchDestroy as u32 {
        (0, 0)
    } else {
        // CUfileError_t: err in the low half, cu_err in the high half.
        (rax as u32 as i32 as i64, (rax >> 32) as u32 as i32)
    };
    if op == GdsOp::HandleRegister as u32 {
        a.handle = user(a.out_ptr);
        if ret == 0 && a.fd >= 0 {
            // Its I/O from the library's worker threads is sent from now on (`storage::worker_io`).
            let key = FileKey { tgid: a.entry_tgid, fd: a.fd as u32 };
            let _ = GDS_FDS.insert(&key, &1, 0);
            if let Some(any) = GDS_FDS_ANY.get_ptr_mut(0) {
                // SAFETY: a map value; any non-zero value will do, so a plain store is enough.
                unsafe { *any = 1 };
            }
        }
    } else if op == GdsOp::BatchSetUp as u32 {
        a.batch_id = user(a.out_ptr);
    } else if op == GdsOp::BatchGetStatus as u32 {
        completions(&mut a);
    }
    if op != GdsOp::BatchSubmit as u32 {
        send_call(hook, &a, ret, cu_err, 0, 0);
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
        send_call(hook, &a, ret, cu_err, i, opcode);
    }
}

/// BatchIOGetStatus: how many entries it returned (`*nr`), the bytes of those complete, and
/// how many report a failure (the first `MAX_BATCH` are read).
#[inline(always)]
fn completions(a: &mut GdsArgs) {
    let n: u32 = user(a.out_ptr);
    a.batch_count = n;
    a.length = 0;
    a.failed = 0;
    for i in 0..MAX_BATCH {
        if i >= n {
            break;
        }
        let e = a.batch_ptr + i as u64 * cufile::IOEVENTS_SIZE;
        let status: u32 = user(e + cufile::IOEVENTS_STATUS);
        if status == cufile::STATUS_COMPLETE {
            a.length += user::<u64>(e + cufile::IOEVENTS_RET);
        } else {
            a.failed += 1;
        }
    }
}

#[inline(always)]
fn send_call(hook: HookId, a: &GdsArgs, ret: i64, cu_err: i32, index: u32, opcode: u32) {
    send::<GdsEvent>(EventKind::GdsCall, hook, AttachKind::Uretprobe, |ev| {
        ev.args = *a;
        ev.ret = ret;
        ev.cu_err = cu_err;
        ev.batch_index = index;
        ev.batch_opcode = opcode;
    });
}
