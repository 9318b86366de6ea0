//! The hot path of POSIX I/O counting: a per-CPU write-combining slot in front of `FILE_IO`
//! (see `gdr_trace_common::storage::IoBatch`). A loop of reads on one descriptor costs one
//! per-CPU array access per call — no hash lookup, no atomic instruction; the hash entry is
//! touched only when the CPU moves to another descriptor, or the descriptor closes.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::generated::{bpf_loop, bpf_map_lookup_percpu_elem},
    macros::map,
    maps::PerCpuArray,
};
use gdr_trace_common::storage::{size_bucket, FileIo, FileIoStats, FileKey, IoBatch, SIZE_BUCKETS};

use crate::{maps::add, storage::maps::FILE_IO};

/// One slot per CPU.
#[map]
pub static IO_BATCH: PerCpuArray<IoBatch> = PerCpuArray::with_max_entries(1, 0);

/// Upper bound on CPUs visited when a descriptor closes (the loop ends at the first CPU the
/// kernel doesn't have).
const MAX_CPUS: u32 = 1024;

/// What one read or write did.
#[derive(Clone, Copy)]
pub struct Op {
    pub write: bool,
    pub ret: i64,
    /// File position of a positional read (pread64, preadv, preadv2 with a position).
    pub pos: Option<i64>,
    /// Completed through io_uring: counted as such, position unknown (neither sequential nor
    /// moving the sequential position).
    pub uring: bool,
}

/// Counts `op` on `key`. `entry` finds (or creates) the descriptor's FILE_IO entry when the slot
/// holds another descriptor; None: not traced / not a descriptor, nothing counted.
#[inline(always)]
pub fn count(key: &FileKey, op: Op, entry: impl FnOnce() -> Option<*mut FileIo>) {
    let Some(b) = IO_BATCH.get_ptr_mut(0) else { return };
    // SAFETY: this CPU's slot; programs don't nest on one CPU for these hooks.
    let b = unsafe { &mut *b };
    if b.key != *key {
        // Untraced processes and non-descriptors leave the slot alone.
        let Some(e) = entry() else { return };
        flush(b);
        // SAFETY: a map value, alive while the program runs.
        let e = unsafe { &*e };
        b.key = *key;
        b.counted = e.counted;
        b.stats.next_offset = e.stats.next_offset;
    }
    if b.counted == 0 {
        return;
    }
    let s = &mut b.stats;
    let ret = op.ret;
    if op.write {
        if ret > 0 {
            s.writes += 1;
            s.bytes_written += ret as u64;
        }
        return;
    }
    if ret < 0 {
        s.read_errors += 1;
        return;
    }
    if ret == 0 {
        return;
    }
    s.reads += 1;
    s.bytes_read += ret as u64;
    if op.uring {
        s.uring_reads += 1;
    }
    s.read_hist[size_bucket(ret as u64) & (SIZE_BUCKETS - 1)] += 1;
    match op.pos {
        _ if op.uring => {}
        Some(off) => {
            if off == s.next_offset {
                s.seq_reads += 1;
            }
            s.next_offset = off + ret;
        }
        None => s.seq_reads += 1,
    }
}

/// Adds a slot's counts to its FILE_IO entry (atomically: other CPUs flush there too) and
/// empties it. An entry that is gone (descriptor closed, process forgotten) drops them.
#[inline(always)]
fn flush(b: &mut IoBatch) {
    if b.key.tgid == 0 || b.counted == 0 {
        return;
    }
    if let Some(e) = FILE_IO.get_ptr_mut(b.key) {
        // SAFETY: a map value, alive while the program runs.
        let t = unsafe { &mut (*e).stats };
        let s = &b.stats;
        for (dst, src) in [
            (&mut t.reads, s.reads),
            (&mut t.bytes_read, s.bytes_read),
            (&mut t.seq_reads, s.seq_reads),
            (&mut t.read_errors, s.read_errors),
            (&mut t.writes, s.writes),
            (&mut t.bytes_written, s.bytes_written),
            (&mut t.uring_reads, s.uring_reads),
        ] {
            if src != 0 {
                add(dst, src);
            }
        }
        for i in 0..SIZE_BUCKETS {
            if s.read_hist[i] != 0 {
                add(&mut t.read_hist[i], s.read_hist[i]);
            }
        }
        t.next_offset = s.next_offset;
    }
    let next = b.stats.next_offset;
    b.stats = FileIoStats::zeroed();
    b.stats.next_offset = next;
}

/// Folds every CPU's slot that holds `key` into FILE_IO and empties it: before a descriptor's
/// final counters are read (close), or its number is reused. With `bpf_loop` (5.17+) the
/// verifier checks the per-CPU step once, however many CPUs the machine has.
#[inline(always)]
pub fn fold_all_cpus(key: &FileKey) {
    let mut k = *key;
    // SAFETY: bpf_loop with a callback of the required signature and a pointer to our stack.
    unsafe { bpf_loop(MAX_CPUS, fold_cpu as *mut c_void, &mut k as *mut FileKey as *mut c_void, 0) };
}

/// One CPU's slot: folded into FILE_IO if it holds `*ctx`. Returns 1 (stop) past the last CPU.
#[inline(never)]
extern "C" fn fold_cpu(cpu: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: ctx is the FileKey on fold_all_cpus' stack.
    let key = unsafe { *(ctx as *const FileKey) };
    let zero = 0u32;
    // SAFETY: a helper reading another CPU's slot of a per-CPU array; NULL past the last CPU.
    let p = unsafe {
        bpf_map_lookup_percpu_elem(&IO_BATCH as *const _ as *mut _, &zero as *const u32 as *const _, cpu)
    } as *mut IoBatch;
    if p.is_null() {
        return 1;
    }
    // SAFETY: a map value, alive while the program runs. Another CPU could be counting into
    // its slot right now only if a thread still uses a descriptor being closed.
    let b = unsafe { &mut *p };
    if b.key == key {
        flush(b);
        b.key = FileKey::default();
    }
    0
}
