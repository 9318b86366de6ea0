//! Storage path, POSIX side: the read/write system calls, `openat`, `close`, `ioctl` (for
//! nvidia-fs) and page-cache fills.
//!
//! Each system call has two programs with one body: fexit on its kernel entry point
//! (`__x64_sys_pread64(const struct pt_regs *regs)`: fires only for that call) and, where the
//! kernel refuses fexit, its `syscalls:sys_exit_<name>` tracepoint (then the arguments come
//! from the task's saved registers). Both run at exit, so one program sees arguments and result.
//!
//! Reads and writes are counted per process and fd — in a per-CPU slot first
//! (`batch`), then in `FILE_IO` — never sent one by one.
//!
//! match-proto:v6.1:fs/read_write.c: ssize_t ksys_pread64(unsigned int fd, char __user *buf, size_t count, loff_t pos)
//! match-proto:v6.1:include/trace/events/filemap.h: mm_filemap_add_to_page_cache(struct folio *folio)

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user, bpf_probe_read_user_str_bytes},
    macros::{fexit, tracepoint},
    programs::{FExitContext, TracePointContext},
    EbpfContext,
};
use gdr_trace_common::{
    lost,
    storage::{
        nvfs, FileCloseEvent, FileIo, FileIoStats, FileKey, FileOpenEvent, FillKey, NvfsEvent, PageFills,
    },
    AttachKind, EventKind, HookId, OFFSET_UNKNOWN,
};

use crate::{
    filter::current_traced,
    kernel_read::{file_facts, global, regs_arg, walk_known, FileFacts},
    maps::{add, count_lost},
    record::tracing_arg,
    storage::batch::{count, fold_all_cpus, Op},
    storage::file_budget,
    storage::maps::{
        current_regs_tgid, gds_tally, get_or_insert, in_read_syscall, is_gds_fd, send, sys_exit_ret, FILE_IO,
        FILL_DEV_OFF, FILL_INO_OFF, FILL_ORDER_OFF, GDS_FDS, PAGE_FILLS,
    },
};

/// What a read/write system call is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Io {
    /// read, readv: at the file position.
    Read,
    /// pread64, preadv, preadv2: at argument 3 (preadv2 with -1: the file position).
    Pread,
    Write,
    Pwrite,
}

/// One fexit program and one tracepoint program per system call, sharing `$body`.
macro_rules! syscall_exit {
    ($fexit:ident, $tp:ident, $body:expr) => {
        #[fexit]
        pub fn $fexit(ctx: FExitContext) -> i32 {
            // __x64_sys_*(const struct pt_regs *regs): the return value follows the argument.
            let regs: *const u8 = ctx.arg(0);
            let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
            ($body)(regs, tgid, tracing_arg(&ctx, 1) as i64, AttachKind::Fexit);
            0
        }

        #[tracepoint]
        pub fn $tp(ctx: TracePointContext) -> u32 {
            let ret = sys_exit_ret(ctx.as_ptr() as *const u8);
            let (regs, tgid) = current_regs_tgid();
            ($body)(regs, tgid, ret, AttachKind::Tracepoint);
            0
        }
    };
}

syscall_exit!(io_fexit_read, io_tp_read, |r, t, ret, a| posix_io(Io::Read, false, r, t, ret, a));
syscall_exit!(io_fexit_pread64, io_tp_pread64, |r, t, ret, a| posix_io(Io::Pread, false, r, t, ret, a));
syscall_exit!(io_fexit_readv, io_tp_readv, |r, t, ret, a| posix_io(Io::Read, true, r, t, ret, a));
syscall_exit!(io_fexit_preadv, io_tp_preadv, |r, t, ret, a| posix_io(Io::Pread, true, r, t, ret, a));
syscall_exit!(io_fexit_preadv2, io_tp_preadv2, |r, t, ret, a| posix_io(Io::Pread, true, r, t, ret, a));
syscall_exit!(io_fexit_write, io_tp_write, |r, t, ret, a| posix_io(Io::Write, false, r, t, ret, a));
syscall_exit!(io_fexit_pwrite64, io_tp_pwrite64, |r, t, ret, a| posix_io(Io::Pwrite, false, r, t, ret, a));
syscall_exit!(io_fexit_writev, io_tp_writev, |r, t, ret, a| posix_io(Io::Write, true, r, t, ret, a));
syscall_exit!(io_fexit_pwritev, io_tp_pwritev, |r, t, ret, a| posix_io(Io::Pwrite, true, r, t, ret, a));
syscall_exit!(io_fexit_pwritev2, io_tp_pwritev2, |r, t, ret, a| posix_io(Io::Pwrite, true, r, t, ret, a));
syscall_exit!(open_fexit_openat, open_tp_openat, |r, t, ret, a| openat_done(r, t, ret, a, false));
syscall_exit!(open_fexit_openat2, open_tp_openat2, |r, t, ret, a| openat_done(r, t, ret, a, true));
syscall_exit!(close_fexit_close, close_tp_close, close_done);
syscall_exit!(nvfs_fexit_ioctl, nvfs_tp_ioctl, ioctl_done);

/// The hot path: the descriptor from the saved registers, then `batch::count`.
#[inline(always)]
fn posix_io(io: Io, vector: bool, regs: *const u8, tgid: u32, ret: i64, attach: AttachKind) {
    let Some(fd) = regs_arg(regs, 0) else { return };
    let key = FileKey { tgid, fd: fd as u32 };
    let pos = if io == Io::Pread { regs_arg(regs, 3).map(|o| o as i64).filter(|&o| o >= 0) } else { None };
    let op = Op { write: matches!(io, Io::Write | Io::Pwrite), ret, pos, uring: false };
    // The process filter first: an untraced process stops at one lookup (slots and FILE_IO
    // only ever hold traced processes, so a loop of the traced one never gets here).
    count(&key, op, || {
        current_traced()?;
        FILE_IO.get_ptr_mut(key).or_else(|| first_io(&key, ret))
    });
    let in_call = gds_tally(|t| {
        t.posix_calls += 1;
        if ret > 0 {
            t.posix_bytes += ret as u64;
        }
        t.io_fd = fd as i32;
        t.io_err = if ret < 0 { ret as i32 } else { 0 };
        // Where the bytes went (or came from): userspace tells GPU from host memory by the
        // process's mapping of this address (`gds_facts::dest_is_gpu`).
        let arg = regs_arg(regs, 1).unwrap_or(0);
        t.io_buf = if vector && arg != 0 {
            // SAFETY: bpf_probe_read_user of the first iovec's iov_base; a bad pointer reads 0.
            unsafe { bpf_probe_read_user(arg as *const u64) }.unwrap_or(0)
        } else {
            arg
        };
    });
    if !in_call && is_gds_fd(&key) {
        let at = match io {
            Io::Pread | Io::Pwrite => regs_arg(regs, 3).map_or(-1, |o| o as i64),
            Io::Read | Io::Write => -1,
        };
        worker_io(&key, &op, at, attach);
    }
}

/// POSIX I/O on a cuFile descriptor by a thread with no cuFile call in flight: the library's
/// worker threads doing what an async, batch or large call queued. One record each (only on
/// descriptors registered with cuFile): userspace attributes it to the call that queued it.
#[inline(always)]
fn worker_io(key: &FileKey, op: &Op, at: i64, attach: AttachKind) {
    let hook = if op.write { HookId::SysWrite } else { HookId::SysRead };
    send::<NvfsEvent>(EventKind::GdsWorkerIo, hook, attach, |ev| {
        ev.cmd = 0;
        ev.fd = key.fd as i32;
        ev.ret = op.ret;
        ev.io_ret = op.ret;
        ev.offset = at;
        ev.size = op.ret.max(0) as u64;
        ev.cpuvaddr = 0;
        ev.gpuvaddr = 0;
        ev.batch_index = 0;
        ev.batch_count = 0;
        ev.op = u32::from(op.write);
        ev.in_call = 0;
    });
}

/// A descriptor of a traced process seen for the first time (opened before the trace, or by a
/// call we don't hook): learn what it is, then count it if it is a regular file.
#[inline(always)]
pub fn first_io(key: &FileKey, ret: i64) -> Option<*mut FileIo> {
    if ret <= 0 {
        return None;
    }
    current_traced()?;
    // A tenant over its share of the table is refused before the descriptor walk.
    let Some(tenant) = file_budget::admit() else {
        count_lost(lost::OVER_BUDGET);
        return None;
    };
    let facts = file_facts(key.fd as u64);
    if facts.is_none() && walk_known() {
        return None; // not an open descriptor
    }
    track(key, facts, tenant);
    let p = FILE_IO.get_ptr_mut(key);
    if p.is_none() {
        count_lost(lost::STORAGE_MAP_FULL);
    }
    p
}

/// Makes `key`'s entry, charged to `tenant` (EEXIST: another CPU made it, charged there).
#[inline(always)]
fn track(key: &FileKey, facts: Option<FileFacts>, tenant: u64) {
    if FILE_IO.insert(key, &entry(facts, tenant), BPF_NOEXIST as u64).is_ok() {
        file_budget::tracked(tenant, false);
    }
}

#[inline(always)]
fn entry(facts: Option<FileFacts>, tenant: u64) -> FileIo {
    let f = facts.unwrap_or(FileFacts::UNKNOWN);
    FileIo {
        tenant,
        ino: f.ino,
        dev: f.dev,
        f_flags: f.f_flags,
        mode: f.mode,
        // Unknown files are counted: userspace tells them apart from /proc.
        counted: u32::from(facts.is_none_or(|f| f.is_storage())),
        stats: FileIoStats::zeroed(),
    }
}

/// openat / openat2 returned: a record with the path for regular files, and a fresh counter
/// entry. openat2's flags are the first field of its `struct open_how` argument.
#[inline(always)]
fn openat_done(regs: *const u8, _tgid: u32, ret: i64, attach: AttachKind, how: bool) {
    if ret < 0 {
        return;
    }
    let Some(tgid) = current_traced() else { return };
    let fd = ret as u32;
    let key = FileKey { tgid, fd };
    // A descriptor closed without close(2) (dup2 over it, exec): its counters end here.
    retire(&key, HookId::SysOpenat, attach);
    let facts = file_facts(fd as u64);
    if facts.is_some_and(|f| !f.is_storage()) {
        return;
    }
    if let Some(tenant) = file_budget::admit() {
        track(&key, facts, tenant);
    }
    let dirfd = regs_arg(regs, 0).unwrap_or(0);
    let path = regs_arg(regs, 1).unwrap_or(0);
    let arg2 = regs_arg(regs, 2).unwrap_or(0);
    let flags = if how {
        // SAFETY: a user pointer read with probe_read (a fault is an error).
        unsafe { bpf_probe_read_user(arg2 as *const u64) }.unwrap_or(0)
    } else {
        arg2
    };
    send::<FileOpenEvent>(EventKind::FileOpen, HookId::SysOpenat, attach, |ev| {
        ev.fd = fd as i32;
        ev.dirfd = dirfd as i32;
        ev.open_flags = flags as u32;
        let f = facts.unwrap_or(FileFacts { f_flags: flags as u32, ..FileFacts::UNKNOWN });
        ev.f_flags = f.f_flags;
        ev.ino = f.ino;
        ev.dev = f.dev;
        ev.mode = f.mode;
        ev.path[0] = 0;
        if path != 0 {
            // SAFETY: a user pointer read with probe_read (a fault is an error).
            let _ = unsafe { bpf_probe_read_user_str_bytes(path as *const u8, &mut ev.path) };
        }
    });
}

#[inline(always)]
fn close_done(regs: *const u8, tgid: u32, ret: i64, attach: AttachKind) {
    if ret != 0 {
        return;
    }
    let Some(fd) = regs_arg(regs, 0) else { return };
    let key = FileKey { tgid, fd: fd as u32 };
    if is_gds_fd(&key) {
        let _ = GDS_FDS.remove(&key);
    }
    retire(&key, HookId::SysClose, attach);
}

/// Sends a descriptor's final counters (if it did any I/O) and forgets it.
#[inline(always)]
fn retire(key: &FileKey, hook: HookId, attach: AttachKind) {
    if FILE_IO.get_ptr(key).is_none() {
        return;
    }
    fold_all_cpus(key);
    let Some(e) = FILE_IO.get_ptr(key) else { return };
    // SAFETY: a map value, alive while the program runs.
    let e = unsafe { &*e };
    let s = &e.stats;
    if e.counted != 0 && (s.reads | s.writes | s.read_errors) != 0 {
        send::<FileCloseEvent>(EventKind::FileClose, hook, attach, |ev| {
            ev.fd = key.fd as i32;
            ev._pad0 = 0;
            // SAFETY: both sides are plain FileIo memory (map value -> ring buffer).
            unsafe { core::ptr::copy_nonoverlapping(e, &mut ev.file, 1) };
        });
    }
    let tenant = e.tenant;
    if FILE_IO.remove(key).is_ok() {
        file_budget::tracked(tenant, true);
    }
}

#[inline(always)]
fn ioctl_done(regs: *const u8, _tgid: u32, ret: i64, attach: AttachKind) {
    let Some(cmd) = regs_arg(regs, 1) else { return };
    let cmd = cmd as u32;
    if !nvfs::is_nvfs(cmd) || current_traced().is_none() {
        return;
    }
    let arg = regs_arg(regs, 2).unwrap_or(0);
    crate::storage::nvfs::nvfs_ioctl_done(cmd, arg, ret, HookId::SysIoctl, attach);
}

/// `filemap:mm_filemap_add_to_page_cache`: a folio entered the page cache, in the context of
/// the task that caused it (a read, readahead, or a buffered write to a new page).
#[tracepoint]
pub fn fill_tp_mm_filemap_add_to_page_cache(ctx: TracePointContext) -> u32 {
    let Some(tgid) = current_traced() else { return 0 };
    let (ino_off, dev_off, order_off) =
        (global(&FILL_INO_OFF), global(&FILL_DEV_OFF), global(&FILL_ORDER_OFF));
    if ino_off == OFFSET_UNKNOWN || dev_off == OFFSET_UNKNOWN {
        return 0;
    }
    // SAFETY: offsets from the tracepoint's format file.
    let (ino, dev) = unsafe {
        (ctx.read_at::<u64>(ino_off as usize).unwrap_or(0), ctx.read_at::<u32>(dev_off as usize).unwrap_or(0))
    };
    let order = if order_off == OFFSET_UNKNOWN {
        0
    } else {
        // SAFETY: as above.
        unsafe { ctx.read_at::<u8>(order_off as usize) }.unwrap_or(0)
    };
    let key = FillKey { tgid, dev, ino };
    let pages = 1u64 << (order & 31);
    if let Some(p) = get_or_insert(&PAGE_FILLS, &key, &PageFills::default()) {
        // SAFETY: a map value, alive while the program runs.
        let p = unsafe { &mut *p };
        add(&mut p.pages, pages);
        if in_read_syscall() {
            add(&mut p.read_pages, pages);
        }
    }
    0
}
