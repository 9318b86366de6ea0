//! Storage path: maps, globals and the small helpers its programs share (counters, records;
//! syscall arguments from `pt_regs` and the fd -> `struct file` walk are `kernel_read`'s).
//!
//! Every offset here is resolved by userspace from the running kernel's BTF (or a tracepoint's
//! format file) and patched in before load; `OFFSET_UNKNOWN` disables what needs it.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_pid_tgid,
        generated::{bpf_get_current_task_btf, bpf_task_pt_regs},
    },
    macros::map,
    maps::{ring_buf::RingBufEntry, Array, HashMap, LruHashMap},
};
use gdr_trace_common::{
    lost,
    storage::{FileIo, FileKey, FillKey, GdsArgs, GdsTally, PageFills, READ_SYSCALLS},
    AttachKind, EventHeader, EventKind, HookId, OFFSET_UNKNOWN,
};

use crate::{
    kernel_read::{current_regs, global},
    maps::{count_lost, EVENTS},
    record::fill_header,
};

/// POSIX I/O counters per (process, fd), created at a descriptor's first I/O.
#[map]
pub static FILE_IO: HashMap<FileKey, FileIo> = HashMap::with_max_entries(16384, 0);

/// Pages each process added to the page cache, per file.
#[map]
pub static PAGE_FILLS: HashMap<FillKey, PageFills> = HashMap::with_max_entries(16384, 0);

/// The cuFile call in flight on each thread (tid -> arguments and what happened inside). Each
/// tenant holds a bounded share of it (`gds_inflight`); a thread that exits inside a call takes
/// its entry with it (`forget_thread`).
#[map]
pub static GDS_INFLIGHT: HashMap<u32, GdsArgs> = HashMap::with_max_entries(GDS_INFLIGHT_ENTRIES, 0);

/// Room for this many cuFile calls in flight at once, all threads together.
const GDS_INFLIGHT_ENTRIES: u32 = 4096;

/// `GDS_INFLIGHT` entries per tenant: [made, removed] (`share`).
#[map]
static GDS_HELD: LruHashMap<u64, [u64; 2]> = LruHashMap::with_max_entries(4096, 0);

/// `GDS_INFLIGHT` with its per-tenant counts.
#[inline(always)]
pub fn gds_inflight() -> crate::share::Share<'static, u32, GdsArgs> {
    crate::share::Share { map: &GDS_INFLIGHT, held: &GDS_HELD, freed: None, entries: GDS_INFLIGHT_ENTRIES }
}

/// A thread exits: a cuFile call it left without returning goes with it (and from the count of
/// calls in flight).
#[inline(always)]
pub fn forget_thread(tid: u32) {
    if gds_inflight().remove(&tid) {
        if let Some(n) = GDS_ACTIVE.get_ptr_mut(0) {
            // SAFETY: a map value, updated atomically; adding 2^64 - 1 subtracts one.
            crate::maps::add(unsafe { &mut *n }, u64::MAX);
        }
    }
}

/// [0]: cuFile calls in flight on any thread. Lets the I/O hooks skip the per-thread lookup
/// while no cuFile call runs (the usual case).
#[map]
pub static GDS_ACTIVE: Array<u64> = Array::with_max_entries(1, 0);

/// Descriptors registered with cuFile (`cuFileHandleRegister` returned them), until closed:
/// their POSIX I/O on a thread with no cuFile call in flight (the library's worker threads) is
/// sent for userspace to attribute to the call that queued it. LRU: a process that dies with
/// them open leaves nothing behind for long.
#[map]
pub static GDS_FDS: LruHashMap<FileKey, u32> = LruHashMap::with_max_entries(4096, 0);

/// [0]: non-zero once any traced process registered a cuFile descriptor. Until then the POSIX
/// hot path never looks in `GDS_FDS` (a read loop stays on its per-CPU slot, no hash lookup).
#[map]
pub static GDS_FDS_ANY: Array<u64> = Array::with_max_entries(1, 0);

/// Whether `key` is a cuFile descriptor (`GDS_FDS`), one array read when there are none.
#[inline(always)]
pub fn is_gds_fd(key: &FileKey) -> bool {
    GDS_FDS_ANY.get(0).copied().unwrap_or(0) != 0 && GDS_FDS.get_ptr(key).is_some()
}

/// Entry arguments of kprobe/kretprobe pairs on nvidia-fs functions, by `stash_key`, kept for
/// every process (see `nvfs_async`). Each tenant holds a bounded share (`nvfs_args`): a
/// tenant's threads held inside nvidia-fs calls cannot push out another's; an entry goes at
/// the call's return, at the thread's next call of that function (a missed return), or with
/// the thread (`nvfs::forget_thread`).
#[map]
pub static NVFS_ARGS: HashMap<u64, [u64; 5]> = HashMap::with_max_entries(NVFS_ARGS_ENTRIES, 0);

const NVFS_ARGS_ENTRIES: u32 = 4096;

/// `NVFS_ARGS` entries per tenant: [made, removed] (`share`).
#[map]
static NVFS_HELD: LruHashMap<u64, [u64; 2]> = LruHashMap::with_max_entries(4096, 0);

/// `NVFS_ARGS` with its per-tenant counts.
#[inline(always)]
pub fn nvfs_args() -> crate::share::Share<'static, u64, [u64; 5]> {
    crate::share::Share { map: &NVFS_ARGS, held: &NVFS_HELD, freed: None, entries: NVFS_ARGS_ENTRIES }
}

#[unsafe(no_mangle)]
static REGS_NR_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
static READ_SYSCALL_NRS: [u32; READ_SYSCALLS] = [u32::MAX; READ_SYSCALLS];
#[unsafe(no_mangle)]
static SYS_EXIT_RET_OFF: u32 = 16;
#[unsafe(no_mangle)]
pub static FILL_INO_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
pub static FILL_DEV_OFF: u32 = OFFSET_UNKNOWN;
#[unsafe(no_mangle)]
pub static FILL_ORDER_OFF: u32 = OFFSET_UNKNOWN;

#[unsafe(no_mangle)]
static TASK_TGID_OFF: u32 = OFFSET_UNKNOWN;

/// The current task's saved registers and its tgid: two helper calls, the tgid a BTF-checked
/// load from the task (no third helper).
#[inline(always)]
pub fn current_regs_tgid() -> (*const u8, u32) {
    // SAFETY: helpers with no preconditions; loads at a load-time constant offset of a
    // BTF-typed task pointer (fault-guarded).
    unsafe {
        let task = bpf_get_current_task_btf() as *const u8;
        let off = global(&TASK_TGID_OFF);
        let tgid = if off == OFFSET_UNKNOWN {
            (bpf_get_current_pid_tgid() >> 32) as u32
        } else {
            core::ptr::read_volatile(task.add(off as usize) as *const i32) as u32
        };
        (bpf_task_pt_regs(task as *mut _) as *const u8, tgid)
    }
}

/// Whether the current task is inside a read system call (from its saved registers).
#[inline(always)]
pub fn in_read_syscall() -> bool {
    let off = global(&REGS_NR_OFF);
    if off == OFFSET_UNKNOWN {
        return false;
    }
    // SAFETY: as in `regs_arg`.
    let nr = unsafe { core::ptr::read_volatile(current_regs().add(off as usize) as *const u64) };
    // SAFETY: a read-only global patched by the loader.
    let nrs = unsafe { core::ptr::read_volatile(&READ_SYSCALL_NRS) };
    nrs.iter().any(|&n| n as u64 == nr)
}

/// The return value of a `syscalls:sys_exit_*` tracepoint. The verifier allows only a
/// constant offset for a direct context load, so the usual layout (`ret` at 16, as the format
/// file said) is read directly and any other through a helper.
#[inline(always)]
pub fn sys_exit_ret(ctx: *const u8) -> i64 {
    let off = global(&SYS_EXIT_RET_OFF);
    if off == 16 {
        // SAFETY: the format file put `long ret` at 16; the record holds it (8-byte aligned).
        unsafe { core::ptr::read_volatile(ctx.add(16) as *const i64) }
    } else {
        crate::kernel_read::read_kernel_or_zero::<i64>(ctx as u64 + off as u64)
    }
}

/// Adds to what the cuFile call in flight on this thread did, if there is one; false when there
/// is none (the I/O of a worker thread, or no cuFile at all).
#[inline(always)]
pub fn gds_tally(f: impl FnOnce(&mut GdsTally)) -> bool {
    // SAFETY: plain u64 in an array map.
    let active = GDS_ACTIVE.get(0).copied().unwrap_or(0);
    if active == 0 {
        return false;
    }
    let tid = bpf_get_current_pid_tgid() as u32;
    if let Some(a) = GDS_INFLIGHT.get_ptr_mut(tid) {
        // SAFETY: this thread's own entry; no other thread writes it.
        f(unsafe { &mut (*a).tally });
        return true;
    }
    false
}

/// Whether a cuFile call is in flight on this thread (its I/O is counted in it). Asked once per
/// hook run, before any loop: a value that differs per path inside a loop multiplies the states
/// older verifiers (6.1) explore.
#[inline(always)]
pub fn gds_in_flight() -> bool {
    // SAFETY: plain u64 in an array map.
    let active = GDS_ACTIVE.get(0).copied().unwrap_or(0);
    active != 0 && GDS_INFLIGHT.get_ptr(bpf_get_current_pid_tgid() as u32).is_some()
}

/// Inserts `value` under `key` unless present, then returns the entry. None: the map is full
/// (counted as lost).
#[inline(always)]
pub fn get_or_insert<K, V>(map: &HashMap<K, V>, key: &K, value: &V) -> Option<*mut V> {
    if let Some(p) = map.get_ptr_mut(key) {
        return Some(p);
    }
    // EEXIST: another CPU inserted it meanwhile, fine.
    let _ = map.insert(key, value, BPF_NOEXIST as u64);
    let p = map.get_ptr_mut(key);
    if p.is_none() {
        count_lost(lost::STORAGE_MAP_FULL);
    }
    p
}

/// Reserves a record of type `T` (a `#[repr(C)]` storage record: its first field is the
/// `EventHeader`), fills the header and lets `fill` write the payload; counts it as lost when
/// the ring buffer is full.
#[inline(always)]
pub fn send<T: 'static>(kind: EventKind, hook: HookId, attach: AttachKind, fill: impl FnOnce(&mut T)) {
    if crate::budget::admit() {
        emit(kind, hook, attach, fill);
    }
}

/// [`send`] for a record whose budget was already taken (`budget::admit_n`, once per batch).
#[inline(always)]
pub fn emit<T: 'static>(kind: EventKind, hook: HookId, attach: AttachKind, fill: impl FnOnce(&mut T)) {
    let Some(mut entry): Option<RingBufEntry<T>> = EVENTS.reserve::<T>(0) else {
        count_lost(lost::RINGBUF_FULL);
        return;
    };
    let ev = entry.as_mut_ptr();
    // SAFETY: the reservation is sized for T, which starts with its header (repr(C)); `fill`
    // writes every payload field.
    unsafe {
        fill_header(&mut *(ev as *mut EventHeader), kind, hook, attach);
        fill(&mut *ev);
    }
    entry.submit(0);
}
