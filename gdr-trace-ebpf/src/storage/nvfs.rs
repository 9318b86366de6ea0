//! nvidia-fs (GPUDirect Storage's kernel driver): its ioctls, decoded from their user
//! argument, and its direct I/O. The ioctls come from the driver's own `nvfs_ioctl` (kprobe,
//! or fexit where the module has BTF), or from the `ioctl` system call where the driver can't be
//! hooked (`storage.rs`); `nvfs_direct_io` is the driver moving the bytes of a sync chunk, and
//! starting an async one (whose bytes come to `nvfs_io_complete`: `nvfs_async.rs`). What the
//! driver writes back: READ/WRITE the whole argument with `ioctl_return` (bytes, 0 for a queued
//! async I/O, or -errno); BATCH_IO only the 24-byte header, never an entry's `ioctl_return`.
//!
//! match-proto:gds-nvidia-fs:src/nvfs-core.c:
//!   static long nvfs_ioctl(struct file *file, unsigned int ioctl_num, unsigned long ioctl_param)
//!   static ssize_t nvfs_direct_io(int op, struct file *filp, char __user *buf, size_t len, loff_t ppos, nvfs_io_t *nvfsio)
//! Argument layouts: `gdr_trace_common::storage::nvfs` (nvfs-core.h, packed structs).

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use gdr_trace_common::{
    lost,
    storage::{nvfs, NvfsEvent, MAX_BATCH},
    AttachKind, EventKind, HookId,
};

use crate::{
    budget::{admit, admit_n},
    filter::current_traced,
    kernel_read::file_of,
    maps::{count_lost, stash_key},
    record::tracing_arg,
    storage::maps::{emit, gds_in_flight, gds_tally, nvfs_args, send, NVFS_ARGS},
    storage::nvfs_async::{returned, started, EIOCBQUEUED},
};

#[inline(always)]
fn user<T: Copy + Default>(addr: u64) -> T {
    crate::kernel_read::read_user_or_zero(addr)
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
    /// `sync` = 0: queued; the bytes come with the completion.
    async_io: bool,
}

/// `with_return`: READ/WRITE, whose argument the driver copies back with `ioctl_return`; a
/// BATCH_IO entry's is never written (what is there is the caller's).
#[inline(always)]
fn ioargs(p: u64, with_return: bool) -> IoArgs {
    let flags: u8 = user(p + nvfs::IOARGS_FLAGS);
    IoArgs {
        cpuvaddr: user(p + nvfs::IOARGS_CPUVADDR),
        offset: user(p + nvfs::IOARGS_OFFSET),
        size: user(p + nvfs::IOARGS_SIZE),
        io_ret: if with_return { user(p + nvfs::IOARGS_RETURN) } else { 0 },
        fd: user(p + nvfs::IOARGS_FD),
        // sync: bit 0 of the bitfield byte; optype: bits 4..6.
        async_io: flags & 1 == 0,
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
            let a = ioargs(arg, true);
            let op = u32::from(cmd == nvfs::WRITE);
            if admit() {
                send_io(cmd, ret, &a, op, (0, 0), in_call, hook, attach);
            }
            // An async request's bytes are its completion's (`nvfs_async`), even when the
            // filesystem finished it inline: nvfs_io_ret completed it there AND nvfs_io_start_op
            // returned the bytes as `ioctl_return` (gds-nvidia-fs v2.28.4 nvfs-core.c L892,
            // L2190): counted once, from the completion.
            tally(1, if a.async_io { 0 } else { a.io_ret }, a.fd);
        }
        nvfs::BATCH_IO => {
            let n: u64 = user(arg + nvfs::BATCH_NENTS);
            let entries: u64 = user(arg + nvfs::BATCH_ENTRIES);
            // The entries read (at most MAX_BATCH). One budget decision and one tally for the
            // batch, outside the loop: per entry, they took 6.1's verifier past its million
            // instructions (the kretprobe was refused).
            let count = n.min(u64::from(MAX_BATCH));
            let admitted = admit_n(count);
            let mut fd = -1;
            for i in 0..MAX_BATCH {
                if i as u64 >= n {
                    break;
                }
                let a = ioargs(entries + i as u64 * nvfs::IOARGS_LEN, false);
                if admitted {
                    send_io(cmd, ret, &a, a.op, (i, n as u32), in_call, hook, attach);
                }
                fd = a.fd;
            }
            // An entry's `ioctl_return` is never written back: its bytes come with its direct I/O.
            if count > 0 {
                tally(count as u32, 0, fd);
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
                ev.async_io = 0;
                ev.dev = 0;
                ev.ino = 0;
            });
            if map {
                gds_tally(|t| t.nvfs_calls += 1);
            }
        }
    }
}

/// Counts `calls` I/Os (`io_ret` bytes, last on `fd`) in the cuFile call in flight on this
/// thread, if any.
#[inline(always)]
fn tally(calls: u32, io_ret: i64, fd: i32) {
    gds_tally(|t| {
        t.nvfs_calls += calls;
        if io_ret > 0 {
            t.nvfs_bytes += io_ret as u64;
        }
        t.io_fd = fd;
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
    emit::<NvfsEvent>(EventKind::NvfsIoctl, hook, attach, |ev| {
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
        ev.async_io = u32::from(a.async_io);
        ev.dev = 0;
        ev.ino = 0;
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
        let (cmd, arg) = (ctx.arg::<u32>(1).unwrap_or(0), ctx.arg::<u64>(2).unwrap_or(0));
        stash(HookId::NvfsIoctl, &[cmd as u64, arg, 0, 0, 0]);
        async_started(cmd, arg);
    }
    0
}

/// fexit's entry side: only what the return cannot see (async requests starting).
#[fentry]
pub fn nvfs_fentry_nvfs_ioctl(ctx: FEntryContext) -> i32 {
    if current_traced().is_some() {
        async_started(tracing_arg(&ctx, 1) as u32, tracing_arg(&ctx, 2));
    }
    0
}

/// The async requests an ioctl is about to start (READ/WRITE or BATCH_IO entries with `sync` =
/// 0), recorded for their completion as `nvfs_direct_io` would record each (the same key: the
/// descriptor's `struct file` and the file offset). A build of nvidia-fs that inlines
/// `nvfs_direct_io` (static, one call site) leaves this the only start its completions find.
#[inline(always)]
fn async_started(cmd: u32, arg: u64) {
    let start = |a: &IoArgs, op: u32| {
        if a.async_io {
            if let Some(file) = file_of(a.fd as u64) {
                started(u64::from(op), file, a.cpuvaddr, a.size, a.offset as u64, true);
            }
        }
    };
    match cmd {
        nvfs::READ | nvfs::WRITE => start(&ioargs(arg, false), u32::from(cmd == nvfs::WRITE)),
        nvfs::BATCH_IO => {
            let n: u64 = user(arg + nvfs::BATCH_NENTS);
            let entries: u64 = user(arg + nvfs::BATCH_ENTRIES);
            for i in 0..MAX_BATCH {
                if i as u64 >= n {
                    break;
                }
                let a = ioargs(entries + i as u64 * nvfs::IOARGS_LEN, false);
                start(&a, a.op);
            }
        }
        _ => {}
    }
}

#[kretprobe]
pub fn nvfs_kretprobe_nvfs_ioctl(ctx: RetProbeContext) -> u32 {
    if let Some(a) = take(HookId::NvfsIoctl) {
        nvfs_ioctl_done(a[0] as u32, a[1], ctx.ret::<i64>(), HookId::NvfsIoctl, AttachKind::Kretprobe);
    }
    0
}

#[fentry]
pub fn nvfs_fentry_nvfs_direct_io(ctx: FEntryContext) -> i32 {
    let traced = current_traced().is_some();
    started(
        tracing_arg(&ctx, 0),
        tracing_arg(&ctx, 1),
        tracing_arg(&ctx, 2),
        tracing_arg(&ctx, 3),
        tracing_arg(&ctx, 4),
        traced,
    );
    0
}

#[fexit]
pub fn nvfs_fexit_nvfs_direct_io(ctx: FExitContext) -> i32 {
    let ret = tracing_arg(&ctx, 6) as i64;
    let count = returned(tracing_arg(&ctx, 1), tracing_arg(&ctx, 4), ret);
    if current_traced().is_some() && (count || ret == EIOCBQUEUED) {
        let args =
            [tracing_arg(&ctx, 0), tracing_arg(&ctx, 2), tracing_arg(&ctx, 3), tracing_arg(&ctx, 4), 0];
        direct_io_done(&args, ret, AttachKind::Fexit);
    }
    0
}

/// Every process's chunk is recorded (its record must go when it returns, traced or not).
#[kprobe]
pub fn nvfs_kprobe_nvfs_direct_io(ctx: ProbeContext) -> u32 {
    let args = [
        ctx.arg::<i32>(0).unwrap_or(0) as u64,
        ctx.arg(2).unwrap_or(0),
        ctx.arg(3).unwrap_or(0),
        ctx.arg(4).unwrap_or(0),
        ctx.arg(1).unwrap_or(0),
    ];
    started(args[0], args[4], args[1], args[2], args[3], current_traced().is_some());
    stash(HookId::NvfsDirectIo, &args);
    0
}

#[kretprobe]
pub fn nvfs_kretprobe_nvfs_direct_io(ctx: RetProbeContext) -> u32 {
    if let Some(a) = take(HookId::NvfsDirectIo) {
        let ret = ctx.ret::<i64>();
        let count = returned(a[4], a[3], ret);
        if current_traced().is_some() && (count || ret == EIOCBQUEUED) {
            direct_io_done(&a, ret, AttachKind::Kretprobe);
        }
    }
    0
}

/// args: op (READ 0 / WRITE 1), user buffer, length, file position, (file).
#[inline(always)]
fn direct_io_done(args: &[u64; 5], ret: i64, attach: AttachKind) {
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
        ev.async_io = u32::from(ret == EIOCBQUEUED);
        ev.dev = 0;
        ev.ino = 0;
    });
    if ret > 0 {
        gds_tally(|t| t.dma_bytes += ret as u64);
    }
}

#[inline(always)]
fn stash(hook: HookId, args: &[u64; 5]) {
    let key = stash_key(hook as u32, bpf_get_current_pid_tgid() as u32);
    // A refusal is counted by the share (over_budget, stash_full).
    let _ = nvfs_args().put(&key, args);
}

#[inline(always)]
fn take(hook: HookId) -> Option<[u64; 5]> {
    let key = stash_key(hook as u32, bpf_get_current_pid_tgid() as u32);
    // SAFETY: plain data copied out before removal.
    let a = unsafe { NVFS_ARGS.get(&key) }.copied();
    if a.is_some() {
        nvfs_args().remove(&key);
    } else if current_traced().is_some() {
        count_lost(lost::STASH_MISS);
    }
    a
}

/// A thread exits: the nvidia-fs calls it left without a return seen go with it.
#[inline(always)]
pub fn forget_thread(tid: u32) {
    for hook in [HookId::NvfsIoctl, HookId::NvfsDirectIo] {
        nvfs_args().remove(&stash_key(hook as u32, tid));
    }
}
