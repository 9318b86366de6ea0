//! Maps shared by every program. Names are the ones in `gdr_trace_common::maps`.

use aya_ebpf::{
    macros::map,
    maps::{HashMap, PerCpuArray, RingBuf},
};
use gdr_trace_common::{lost, LiveUmem, MrArgs, RINGBUF_BYTES};

/// Every record for userspace.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(RINGBUF_BYTES, 0);

/// Processes being traced when `FILTER_PIDS` is set (tgid -> 1). Userspace seeds it with the
/// attached PID; `filter::sched_process_fork` adds children.
#[map]
pub static TRACKED: HashMap<u32, u8> = HashMap::with_max_entries(8192, 0);

/// Records that could not be delivered, by reason (`gdr_trace_common::lost`).
#[map]
pub static LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(lost::SLOTS, 0);

/// Entry arguments of an in-flight kernel call (kprobe -> kretprobe), keyed by pid_tgid.
#[map]
pub static KERNEL_ARGS: HashMap<u64, MrArgs> = HashMap::with_max_entries(4096, 0);

/// Entry arguments of an in-flight libibverbs call (uprobe -> uretprobe), keyed by
/// `stash_key(hook, tid)`: ibv_reg_mr may call ibv_reg_mr_iova2 on the same thread.
#[map]
pub static USER_ARGS: HashMap<u64, MrArgs> = HashMap::with_max_entries(4096, 0);

/// umems registered by traced processes, so `ib_umem_release` can be attributed and sized
/// even when it runs in another context.
#[map]
pub static LIVE_UMEMS: HashMap<u64, LiveUmem> = HashMap::with_max_entries(65536, 0);

#[inline(always)]
pub fn count_lost(slot: u32) {
    if let Some(p) = LOST.get_ptr_mut(slot) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU.
        unsafe { *p += 1 };
    }
}

#[inline(always)]
pub fn stash_key(hook: u32, tid: u32) -> u64 {
    ((hook as u64) << 32) | tid as u64
}
