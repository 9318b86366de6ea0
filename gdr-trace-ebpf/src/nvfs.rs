//! nvidia-fs (GPUDirect Storage's kernel driver): its ioctls, decoded from their user
//! argument, and its direct I/O. The ioctls come from the driver's own `nvfs_ioctl` (kprobe,
//! or fexit where the module has BTF), or from the `ioctl` system call where the driver can't be
//! hooked (`storage.rs`); `nvfs_direct_io` is the driver moving the bytes.
//!
//! match-proto:gds-nvidia-fs:src/nvfs-core.c:
//!   static long nvfs_ioctl(struct file *file, unsigned int ioctl_num, unsigned long ioctl_param)
//!   static ssize_t nvfs_direct_io(int op, struct file *filp, char __user *buf, size_t len, loff_t ppos, nvfs_io_t *nvfsio)
//! Argument layouts: `gdr_trace_common::storage::nvfs` (nvfs-core.h, packed structs).

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{fexit, kprobe, kretprobe},
    programs::{FExitContext, ProbeContext, RetProbeContext},
};
use gdr_trace_common::{
    lost,
    storage::{nvfs, NvfsEvent, MAX_BATCH},
    AttachKind, EventKind, HookId,
};

use crate::{
    filter::current_traced,
    maps::{count_lost, stash_key},
    record::tracing_arg,
    storage_maps::{gds_in_flight, gds_tally, send, NVFS_ARGS},
};

#[inline(always)]
fn user<T: Copy + Default>(addr: u64) -> T {
    // SAFETY: a user pointer read with probe_read (a fault is an error).
    unsafe { bpf_probe_read_user(addr as *const T) }.unwrap_or_default()
}

/// One decoded `nvfs_ioctl_ioargs` (READ/WRITE, or a BATCH_IO entry).
#[derive(Clone, Copy, Default)]
struct IoArgs {
    cpuvaddr: u64,
    offset: i64,
    size: u64,
    io_ret: i64,
    fd: i32,
    op: u32,
}

#[inline(always)]
fn ioargs(p: u64) -> IoArgs {
    let flags: u8 = user(p + nvfs::IOARGS_FLAGS);
    IoArgs {
        cpuvaddr: user(p + nvfs::IOARGS_CPUVADDR),
        offset: user(p + nvfs::IOARGS_OFFSET),
        size: user(p + nvfs::IOARGS_SIZE),
        io_ret: user(p + nvfs::IOARGS_RETURN),
        fd: user(p + nvfs::IOARGS_FD),
        // optype: bits 4..6 of the bitfield byte.
        op: ((flags >> 4) & 7) as u32,
    }
}

/// An nvidia-fs ioctl returned: a record per I/O (each BATCH_IO entry is one), and the tally of
/// the cuFile call around it.
#[inline(always)]
pub fn nvfs_ioctl_done(cmd: u32, arg: u64, ret: i64, hook: HookId, attach: AttachKind) {
    // Once, before the batch loop (see `gds_in_flight`): false on a worker thread of the library.
    let in_call = gds_in_flight();
    match cmd {
        nvfs::READ | nvfs::WRITE => {
            let a = ioargs(arg);
            let op = u32::from(cmd == nvfs::WRITE);
            send_io(cmd, ret, &a, op, (0, 0), in_call, hook, attach);
            tally(&a);
        }
        nvfs::BATCH_IO => {
            let n: u64 = user(arg + nvfs::BATCH_NENTS);
            let entries: u64 = user(arg + nvfs::BATCH_ENTRIES);
            for i in 0..MAX_BATCH {
                if i as u64 >= n {
                    break;
                }
                let a = ioargs(entries + i as u64 * nvfs::IOARGS_LEN);
                send_io(cmd, ret, &a, a.op, (i, n as u32), in_call, hook, attach);
                tally(&a);
            }
        }
        _ => {
            let map = cmd == nvfs::MAP;
            send::<NvfsEvent>(EventKind::NvfsIoctl, hook, attach, |ev| {
                ev.cmd = cmd;
                ev.fd = -1;
                ev.ret = ret;
                ev.io_ret = 0;
                ev.offset = 0;
                ev.size = if map { user(arg + nvfs::MAP_SIZE) } else { 0 };
                ev.cpuvaddr = if map { user(arg + nvfs::MAP_CPUVADDR) } else { 0 };
                ev.gpuvaddr = if map { user(arg + nvfs::MAP_GPUVADDR) } else { 0 };
                ev.batch_index = 0;
                ev.batch_count = 0;
                ev.op = 0;
                ev.in_call = u32::from(map && in_call);
            });
            if map {
                gds_tally(|t| t.nvfs_calls += 1);
            }
        }
    }
}

/// Counts the I/O in the cuFile call in flight on this thread, if any.
#[inline(always)]
fn tally(a: &IoArgs) {
    gds_tally(|t| {
        t.nvfs_calls += 1;
        if a.io_ret > 0 {
            t.nvfs_bytes += a.io_ret as u64;
        }
        t.io_fd = a.fd;
    });
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn send_io(
    cmd: u32,
    ret: i64,
    a: &IoArgs,
    op: u32,
    (index, count): (u32, u32),
    in_call: bool,
    hook: HookId,
    attach: AttachKind,
) {
    send::<NvfsEvent>(EventKind::NvfsIoctl, hook, attach, |ev| {
        ev.cmd = cmd;
        ev.fd = a.fd;
        ev.ret = ret;
        ev.io_ret = a.io_ret;
        ev.offset = a.offset;
        ev.size = a.size;
        ev.cpuvaddr = a.cpuvaddr;
        ev.gpuvaddr = 0;
        ev.batch_index = index;
        ev.batch_count = count;
        ev.op = op;
        ev.in_call = u32::from(in_call);
    });
}

#[fexit]
pub fn nvfs_fexit_nvfs_ioctl(ctx: FExitContext) -> i32 {
    if current_traced().is_some() {
        let cmd = tracing_arg(&ctx, 1) as u32;
        nvfs_ioctl_done(
            cmd,
            tracing_arg(&ctx, 2),
            tracing_arg(&ctx, 3) as i64,
            HookId::NvfsIoctl,
            AttachKind::Fexit,
        );
    }
    0
}

#[kprobe]
pub fn nvfs_kprobe_nvfs_ioctl(ctx: ProbeContext) -> u32 {
    if current_traced().is_some() {
        let args = [ctx.arg::<u32>(1).unwrap_or(0) as u64, ctx.arg(2).unwrap_or(0), 0, 0];
        stash(HookId::NvfsIoctl, &args);
    }
    0
}

#[kretprobe]
pub fn nvfs_kretprobe_nvfs_ioctl(ctx: RetProbeContext) -> u32 {
    if let Some(a) = take(HookId::NvfsIoctl) {
        nvfs_ioctl_done(a[0] as u32, a[1], ctx.ret::<i64>(), HookId::NvfsIoctl, AttachKind::Kretprobe);
    }
    0
}

#[fexit]
pub fn nvfs_fexit_nvfs_direct_io(ctx: FExitContext) -> i32 {
    if current_traced().is_some() {
        let args = [tracing_arg(&ctx, 0), tracing_arg(&ctx, 2), tracing_arg(&ctx, 3), tracing_arg(&ctx, 4)];
        direct_io_done(&args, tracing_arg(&ctx, 6) as i64, AttachKind::Fexit);
    }
    0
}

#[kprobe]
pub fn nvfs_kprobe_nvfs_direct_io(ctx: ProbeContext) -> u32 {
    if current_traced().is_some() {
        let args = [
            ctx.arg::<i32>(0).unwrap_or(0) as u64,
            ctx.arg(2).unwrap_or(0),
            ctx.arg(3).unwrap_or(0),
            ctx.arg(4).unwrap_or(0),
        ];
        stash(HookId::NvfsDirectIo, &args);
    }
    0
}

#[kretprobe]
pub fn nvfs_kretprobe_nvfs_direct_io(ctx: RetProbeContext) -> u32 {
    if let Some(a) = take(HookId::NvfsDirectIo) {
        direct_io_done(&a, ctx.ret::<i64>(), AttachKind::Kretprobe);
    }
    0
}

/// args: op (READ 0 / WRITE 1), user buffer, length, file position.
#[inline(always)]
fn direct_io_done(args: &[u64; 4], ret: i64, attach: AttachKind) {
    let in_call = gds_in_flight();
    send::<NvfsEvent>(EventKind::NvfsDirectIo, HookId::NvfsDirectIo, attach, |ev| {
        ev.cmd = 0;
        ev.fd = -1;
        ev.ret = ret;
        ev.io_ret = ret;
        ev.offset = args[3] as i64;
        ev.size = args[2];
        ev.cpuvaddr = args[1];
        ev.gpuvaddr = 0;
        ev.batch_index = 0;
        ev.batch_count = 0;
        ev.op = args[0] as u32;
        ev.in_call = u32::from(in_call);
    });
    if ret > 0 {
        gds_tally(|t| t.dma_bytes += ret as u64);
    }
}

#[inline(always)]
fn stash(hook: HookId, args: &[u64; 4]) {
    let key = stash_key(hook as u32, bpf_get_current_pid_tgid() as u32);
    if NVFS_ARGS.insert(&key, args, 0).is_err() {
        count_lost(lost::STASH_FULL);
    }
}

#[inline(always)]
fn take(hook: HookId) -> Option<[u64; 4]> {
    let key = stash_key(hook as u32, bpf_get_current_pid_tgid() as u32);
    // SAFETY: plain data copied out before removal.
    let a = unsafe { NVFS_ARGS.get(&key) }.copied();
    if a.is_some() {
        let _ = NVFS_ARGS.remove(&key);
    } else if current_traced().is_some() {
        count_lost(lost::STASH_MISS);
    }
    a
}
