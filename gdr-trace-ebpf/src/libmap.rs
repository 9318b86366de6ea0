//! The library follower's kernel side: which process just mapped a file executable (a
//! library loaded at start or `dlopen`ed later), so userspace looks at that process's memory
//! map at once instead of waiting for its periodic /proc scan. Cheap by construction: the
//! entry program keeps only file-backed executable mappings of traced processes; the exit
//! program sends one header-only record per process until userspace has looked (`LIB_PENDING`
//! is the rate limit: userspace removes the entry *before* reading the map, so a mapping made
//! after that read is told again, and one made before it is in what it reads).

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{map, tracepoint},
    maps::{HashMap, LruHashMap},
    programs::TracePointContext,
};
use gdr_trace_common::{lost, AttachKind, EventHeader, EventKind, HookId};

use crate::{
    filter::current_traced,
    maps::{count_lost, EVENTS},
    record::fill_header,
};

/// Threads inside an executable file mmap (tid -> 1), from entry to exit. LRU: a thread killed
/// inside mmap leaves an entry that must not crowd out the live ones.
#[map]
static MMAP_EXEC: LruHashMap<u32, u8> = LruHashMap::with_max_entries(4096, 0);

/// Processes told about and not yet looked at (tgid -> 1); userspace removes them.
#[map]
static LIB_PENDING: HashMap<u32, u8> = HashMap::with_max_entries(4096, 0);

const PROT_EXEC: u64 = 4;
/// `struct syscall_trace_enter`: 8 bytes of common fields, `int __syscall_nr` (padded to 8),
/// then `unsigned long args[6]` (addr, len, prot, flags, fd, off). The loader checks these
/// against the tracepoint's format file before attaching.
const PROT_OFF: usize = 32;
const FD_OFF: usize = 48;
/// `struct syscall_trace_exit`: `long ret` after the common fields and the syscall number.
const RET_OFF: usize = 16;

#[tracepoint(category = "syscalls", name = "sys_enter_mmap")]
pub fn libs_sys_enter_mmap(ctx: TracePointContext) -> u32 {
    if current_traced().is_none() {
        return 0;
    }
    // SAFETY: offsets of the syscall enter record (checked by the loader).
    let (prot, fd) = unsafe { (ctx.read_at::<u64>(PROT_OFF), ctx.read_at::<i64>(FD_OFF)) };
    if prot.unwrap_or(0) & PROT_EXEC != 0 && fd.unwrap_or(-1) >= 0 {
        let tid = bpf_get_current_pid_tgid() as u32;
        let _ = MMAP_EXEC.insert(&tid, &1, 0);
    }
    0
}

/// Tells userspace to look at `tgid` (a library mapped, a provider's ops table found), once
/// until it has looked.
#[inline(always)]
pub fn tell(tgid: u32) {
    // BPF_NOEXIST: already pending means userspace will look anyway.
    if LIB_PENDING.insert(&tgid, &1, 1).is_err() {
        return;
    }
    if !crate::budget::admit() {
        // Over budget: the periodic scan finds it, as when the ring buffer is full.
        let _ = LIB_PENDING.remove(&tgid);
        return;
    }
    let Some(mut entry) = EVENTS.reserve::<EventHeader>(0) else {
        // Not told: the periodic scan finds it; leave no entry that would silence the next one.
        let _ = LIB_PENDING.remove(&tgid);
        count_lost(lost::RINGBUF_FULL);
        return;
    };
    // SAFETY: the reservation is sized for an EventHeader; fill_header writes every field.
    let h = unsafe { &mut *entry.as_mut_ptr() };
    fill_header(h, EventKind::LibraryMapped, HookId::SysExitMmap, AttachKind::Tracepoint);
    entry.submit(0);
}

#[tracepoint(category = "syscalls", name = "sys_exit_mmap")]
pub fn libs_sys_exit_mmap(ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    // SAFETY: plain u8 value.
    if unsafe { MMAP_EXEC.get(&tid) }.is_none() {
        return 0;
    }
    let _ = MMAP_EXEC.remove(&tid);
    // SAFETY: offset of the syscall exit record (checked by the loader).
    let ret = unsafe { ctx.read_at::<i64>(RET_OFF) }.unwrap_or(-1);
    // A failed mmap returns -errno (-4095..-1); an address is never in that range.
    if (-4095..0).contains(&ret) {
        return 0;
    }
    tell((pid_tgid >> 32) as u32);
    0
}
