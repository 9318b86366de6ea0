//! Storage path, io_uring side: reads and writes submitted through a ring are not system calls,
//! so the syscall hooks never see them. Three `io_uring:` tracepoints follow each request by the
//! kernel's request pointer: `io_uring_submit_req` (a traced process submitted a read or write:
//! remember it), `io_uring_file_get` (the descriptor it names) and `io_uring_complete` (its
//! result: counted on that descriptor like a read or write, in the same per-(process, fd)
//! counters). Requests on registered (fixed) files never pass `io_uring_file_get`; their bytes
//! are counted per process in `URING_LOOSE`, so nothing goes missing silently.
//!
//! Field offsets come from the tracepoints' format files (they moved between kernels; 5.x has no
//! `req` in `io_uring_complete`: then nothing here runs and `probes` says why).
//!
//! match-proto:v6.1:include/trace/events/io_uring.h: io_uring_submit_req(struct io_kiocb *req)
//! match-proto:v6.1:include/trace/events/io_uring.h: io_uring_file_get(struct io_kiocb *req, int fd)
//! match-proto:v6.1:include/trace/events/io_uring.h: io_uring_complete(void *ctx, void *req, u64 user_data, int res, unsigned cflags, u64 extra1, u64 extra2)

use aya_ebpf::{
    macros::{map, tracepoint},
    maps::{HashMap, LruHashMap},
    programs::TracePointContext,
};
use gdr_trace_common::{
    storage::{uring, FileKey, UringLoose, UringReq},
    OFFSET_UNKNOWN,
};

use crate::{
    filter::current_traced,
    kernel_read::global,
    maps::add,
    storage::batch::{count, Op},
    storage::file_io::first_io,
    storage::maps::{get_or_insert, FILE_IO},
};

/// Reads and writes in flight, by request pointer. LRU: a request whose completion we never
/// see (ring torn down) ages out instead of filling the map.
#[map]
static URING_REQS: LruHashMap<u64, UringReq> = LruHashMap::with_max_entries(8192, 0);

/// Per process: io_uring I/O on registered files (no descriptor to count it on).
#[map]
pub static URING_LOOSE: HashMap<u32, UringLoose> = HashMap::with_max_entries(1024, 0);

#[unsafe(no_mangle)]
static URING_SUBMIT_REQ_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static URING_SUBMIT_OPCODE_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static URING_FILE_REQ_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static URING_FILE_FD_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static URING_DONE_REQ_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static URING_DONE_RES_OFF: u32 = OFFSET_UNKNOWN;

/// A field of the tracepoint record at a loader-patched offset (None: unknown or unreadable).
#[inline(always)]
fn field<T: Copy>(ctx: &TracePointContext, off: &u32) -> Option<T> {
    let off = global(off);
    if off == OFFSET_UNKNOWN {
        return None;
    }
    // SAFETY: an offset from the tracepoint's format file; read_at goes through probe_read.
    unsafe { ctx.read_at::<T>(off as usize) }.ok()
}

/// A traced process submitted a request: remember reads and writes.
#[tracepoint]
pub fn uring_tp_submit_req(ctx: TracePointContext) -> u32 {
    let Some(tgid) = current_traced() else { return 0 };
    let Some(opcode) = field::<u8>(&ctx, &URING_SUBMIT_OPCODE_OFF) else { return 0 };
    let Some(write) = uring::is_write(opcode) else { return 0 };
    let Some(req) = field::<u64>(&ctx, &URING_SUBMIT_REQ_OFF) else { return 0 };
    let r = UringReq { tgid, fd: -1, write: u32::from(write), _pad0: 0 };
    let _ = URING_REQS.insert(&req, &r, 0);
    0
}

/// The request's descriptor. Runs in the submitting process (or its io_uring worker threads,
/// which share its descriptor table), so this is where an unseen descriptor is looked up.
#[tracepoint]
pub fn uring_tp_file_get(ctx: TracePointContext) -> u32 {
    let Some(req) = field::<u64>(&ctx, &URING_FILE_REQ_OFF) else { return 0 };
    let Some(r) = URING_REQS.get_ptr_mut(&req) else { return 0 };
    let Some(fd) = field::<i32>(&ctx, &URING_FILE_FD_OFF) else { return 0 };
    // SAFETY: a map value, alive while the program runs.
    let r = unsafe { &mut *r };
    r.fd = fd;
    let key = FileKey { tgid: r.tgid, fd: fd as u32 };
    if fd >= 0 && FILE_IO.get_ptr(&key).is_none() {
        let _ = first_io(&key, 1);
    }
    0
}

/// The request finished: count its result on its descriptor, or per process when it had none.
#[tracepoint]
pub fn uring_tp_complete(ctx: TracePointContext) -> u32 {
    let Some(req) = field::<u64>(&ctx, &URING_DONE_REQ_OFF) else { return 0 };
    // SAFETY: a plain value copied out at once.
    let Some(r) = (unsafe { URING_REQS.get(&req) }).copied() else { return 0 };
    let _ = URING_REQS.remove(&req);
    let res = field::<i32>(&ctx, &URING_DONE_RES_OFF).unwrap_or(0) as i64;
    let write = r.write != 0;
    if r.fd >= 0 {
        let key = FileKey { tgid: r.tgid, fd: r.fd as u32 };
        count(&key, Op { write, ret: res, pos: None, uring: true }, || FILE_IO.get_ptr_mut(key));
        return 0;
    }
    if res <= 0 {
        return 0;
    }
    if let Some(l) = get_or_insert(&URING_LOOSE, &r.tgid, &UringLoose::default()) {
        // SAFETY: a map value, alive while the program runs.
        let l = unsafe { &mut *l };
        let (calls, bytes) =
            if write { (&mut l.writes, &mut l.bytes_written) } else { (&mut l.reads, &mut l.bytes_read) };
        add(calls, 1);
        add(bytes, res as u64);
    }
    0
}
