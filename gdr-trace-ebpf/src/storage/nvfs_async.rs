//! nvidia-fs async I/O. A READ/WRITE or BATCH_IO entry with `sync` = 0 is queued: its
//! `nvfs_direct_io` returns -EIOCBQUEUED and the bytes are known only when the filesystem calls
//! the kiocb's `ki_complete`, `nvfs_io_complete`, on its completion context (block softirq or
//! the direct-I/O workqueue, not the submitting process); the driver never writes them into the
//! ioctl's argument (gds-nvidia-fs v2.17.0..v2.28.4, src/nvfs-core.c, src/nvfs-batch.c).
//!
//! So each chunk is recorded when `nvfs_direct_io` starts (keyed by the `struct file` and file
//! position, which `nvfs_io_complete` finds again in its kiocb), with the submitter's header,
//! and the completion sends it with the bytes. LRU: a tenant issuing I/O it never completes
//! can't fill it; a completion whose record is gone is counted (`lost::NVFS_ASYNC_MISS`).
//!
//! match-proto:gds-nvidia-fs:src/nvfs-core.c:
//!   static void nvfs_io_complete(struct kiocb *kiocb, long res)             (kernels 5.16+)
//!   static void nvfs_io_complete(struct kiocb *kiocb, long res, long res2)  (before 5.16)
//! `res` is the second argument in both: the kprobe reads the same registers either way; which
//! one the kernel has is read from its BTF (`struct kiocb`'s `ki_complete`) and reported.

use aya_ebpf::{
    helpers::bpf_ktime_get_ns,
    macros::{fentry, kprobe, map},
    maps::LruHashMap,
    programs::{FEntryContext, ProbeContext},
};
use gdr_trace_common::{
    lost, storage::NvfsEvent, AttachKind, EventHeader, EventKind, HookId, OFFSET_UNKNOWN,
};

use crate::{
    kernel_read::{facts_of_file, global, read_kernel},
    maps::{count_lost, EVENTS},
    record::{fill_header, tracing_arg},
};

/// -EIOCBQUEUED (include/linux/errno.h): the I/O was queued.
pub const EIOCBQUEUED: i64 = -529;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct AsyncKey {
    file: u64,
    pos: i64,
}

/// One chunk in flight: who submitted it and what.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AsyncIo {
    hdr: EventHeader,
    buf: u64,
    len: u64,
    op: u32,
    traced: u32,
}

/// `nvfs_direct_io` chunks started and not yet returned or completed, by (file, position).
#[map]
pub static NVFS_ASYNC: LruHashMap<AsyncKey, AsyncIo> = LruHashMap::with_max_entries(4096, 0);

#[unsafe(no_mangle)]
static KIOCB_FILP_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static KIOCB_POS_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static KIOCB_COMPLETE_OFF: u32 = OFFSET_UNKNOWN;

/// `nvfs_direct_io(op, filp, buf, len, ppos, nvfsio)` is starting a chunk (any process: the
/// record is removed when it returns, or when it completes).
#[inline(always)]
pub fn started(op: u64, file: u64, buf: u64, len: u64, pos: u64, traced: bool) {
    let mut io = AsyncIo { hdr: EventHeader::default(), buf, len, op: op as u32, traced: u32::from(traced) };
    fill_header(&mut io.hdr, EventKind::NvfsComplete, HookId::NvfsIoComplete, AttachKind::Kprobe);
    let _ = NVFS_ASYNC.insert(&AsyncKey { file, pos: pos as i64 }, &io, 0);
}

/// `nvfs_direct_io` returned `ret`: whether its bytes are to be counted here. A queued chunk
/// (-EIOCBQUEUED) stays recorded for its completion; a chunk that finished inline has had its
/// `nvfs_io_complete` already: sync (no `ki_complete`, skipped there) its record is still here
/// and its bytes are this return's; async completed inline, the completion took them.
#[inline(always)]
pub fn returned(file: u64, pos: u64, ret: i64) -> bool {
    if ret == EIOCBQUEUED {
        return false;
    }
    NVFS_ASYNC.remove(&AsyncKey { file, pos: pos as i64 }).is_ok() || ret < 0
}

/// Where the module has BTF (it is static, but in the module's BTF like any function).
#[fentry]
pub fn nvfs_fentry_nvfs_io_complete(ctx: FEntryContext) -> i32 {
    let _ = completed(tracing_arg(&ctx, 0), tracing_arg(&ctx, 1) as i64);
    0
}

#[kprobe]
pub fn nvfs_kprobe_nvfs_io_complete(ctx: ProbeContext) -> u32 {
    let kiocb: u64 = ctx.arg(0).unwrap_or(0);
    let res: i64 = ctx.arg(1).unwrap_or(0);
    let _ = completed(kiocb, res);
    0
}

#[inline(always)]
fn completed(kiocb: u64, res: i64) -> Option<()> {
    let offs = [global(&KIOCB_FILP_OFF), global(&KIOCB_POS_OFF), global(&KIOCB_COMPLETE_OFF)];
    if kiocb == 0 || offs.iter().any(|&o| o == OFFSET_UNKNOWN) {
        return None;
    }
    // A sync kiocb has no ki_complete (is_sync_kiocb): nvfs_io_ret called this inline and
    // nvfs_direct_io's return has the bytes.
    let complete: u64 = read_kernel(kiocb + offs[2] as u64)?;
    if complete == 0 {
        return None;
    }
    let file: u64 = read_kernel(kiocb + offs[0] as u64)?;
    let pos: i64 = read_kernel(kiocb + offs[1] as u64)?;
    // iomap (ext4, xfs) and the block-device direct I/O advance ki_pos by the bytes done before
    // calling ki_complete; a filesystem that doesn't leaves it at the start.
    let mut key = AsyncKey { file, pos: if res > 0 { pos - res } else { pos } };
    // SAFETY: plain data copied out before removal.
    let mut found = unsafe { NVFS_ASYNC.get(&key) }.copied();
    if found.is_none() && res > 0 {
        key.pos = pos;
        // SAFETY: as above.
        found = unsafe { NVFS_ASYNC.get(&key) }.copied();
    }
    let Some(io) = found else {
        count_lost(lost::NVFS_ASYNC_MISS);
        return None;
    };
    // Whoever removes it reports it (nvfs_direct_io's return may race this on another CPU).
    if NVFS_ASYNC.remove(&key).is_err() || io.traced == 0 {
        return None;
    }
    if !crate::budget::admit() {
        return None;
    }
    let Some(mut entry) = EVENTS.reserve::<NvfsEvent>(0) else {
        count_lost(lost::RINGBUF_FULL);
        return None;
    };
    // SAFETY: the reservation is sized for NvfsEvent; every field is written.
    let ev = unsafe { &mut *entry.as_mut_ptr() };
    ev.hdr = io.hdr;
    // SAFETY: a helper with no preconditions.
    ev.hdr.ts_ns = unsafe { bpf_ktime_get_ns() };
    ev.cmd = 0;
    ev.fd = -1;
    ev.ret = res;
    ev.io_ret = res;
    ev.offset = key.pos;
    ev.size = io.len;
    ev.cpuvaddr = io.buf;
    ev.gpuvaddr = 0;
    ev.batch_index = 0;
    ev.batch_count = 0;
    ev.op = io.op;
    ev.in_call = 0;
    ev.async_io = 1;
    let facts = facts_of_file(file);
    ev.dev = facts.map_or(0, |f| f.dev);
    ev.ino = facts.map_or(0, |f| f.ino);
    entry.submit(0);
    Some(())
}
