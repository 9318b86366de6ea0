//! Maps shared by every program. Names are the ones in `gdr_trace_common::maps`.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use gdr_trace_common::{lost, HookId, LiveUmem, MrArgs, RINGBUF_BYTES, SELF_SLOTS};

/// Every record for userspace.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(RINGBUF_BYTES, 0);

/// Processes being traced when `FILTER_PIDS` is set (tgid -> 1). Userspace seeds it with the
/// attached PID; `filter::sched_process_fork` adds children.
#[map]
pub static TRACKED: HashMap<u32, u8> = HashMap::with_max_entries(8192, 0);

/// gdr-trace's own processes besides itself (`SELF_TGID`): slot -> tgid, 0 when empty.
/// Userspace fills it when it forks the library follower (whose reads of /proc, BTF and
/// kallsyms are not a workload's file I/O).
#[map]
pub static SELF_PIDS: Array<u32> = Array::with_max_entries(SELF_SLOTS, 0);

/// Records that could not be delivered, by reason (`gdr_trace_common::lost`).
#[map]
pub static LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(lost::SLOTS, 0);

/// Entry arguments of an in-flight kernel call (kprobe -> kretprobe, and fentry -> fexit where
/// an entry marks "in progress"), keyed by `stash_key(hook, tid)`. LRU: an entry whose return
/// was missed (kretprobe maxactive) is evicted by new calls instead of filling the map.
#[map]
pub static KERNEL_ARGS: LruHashMap<u64, MrArgs> = LruHashMap::with_max_entries(4096, 0);

/// Entry arguments of an in-flight libibverbs call (uprobe -> uretprobe), keyed by
/// `stash_key(hook, tid)`: ibv_reg_mr may call ibv_reg_mr_iova2 on the same thread.
/// A thread can leave a user call without returning (siglongjmp, exit mid-call), so this is an
/// LRU map (a call that never returned is evicted by new ones, never blocks them) and a thread's
/// entries go when it exits (`forget_thread`).
#[map]
pub static USER_ARGS: LruHashMap<u64, MrArgs> = LruHashMap::with_max_entries(USER_STASH_ENTRIES, 0);

/// Room for this many calls in flight at once, all threads together.
pub const USER_STASH_ENTRIES: u32 = 16384;

/// The hooks that stash in `USER_ARGS`.
const USER_STASH_HOOKS: [HookId; 6] = [
    HookId::ProviderPollCq,
    HookId::IbvRegMr,
    HookId::IbvRegMrIova2,
    HookId::IbvRegDmabufMr,
    HookId::IbvDeregMr,
    HookId::CuMemGetHandleForAddressRange,
];

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

/// Stashes entry arguments of `hook` on this thread (for its return probe), replacing what an
/// earlier call of `hook` on this thread left (it never returned). An LRU map evicts the least
/// recently used entry rather than refusing; a refusal that still happens is counted.
#[inline(always)]
pub fn stash(map: &LruHashMap<u64, MrArgs>, hook: u32, args: &MrArgs) {
    let key = stash_key(hook, aya_ebpf::helpers::bpf_get_current_pid_tgid() as u32);
    if map.insert(&key, args, 0).is_err() {
        count_lost(lost::STASH_FULL);
    }
}

/// Takes the stashed entry arguments of `hook` on this thread. A traced thread's return with
/// nothing stashed is counted (probe attached mid-call, or the stash was full).
#[inline(always)]
pub fn take(map: &LruHashMap<u64, MrArgs>, hook: u32) -> Option<MrArgs> {
    let key = stash_key(hook, aya_ebpf::helpers::bpf_get_current_pid_tgid() as u32);
    // SAFETY: plain data copied out before removal.
    match unsafe { map.get(&key) }.copied() {
        Some(a) => {
            let _ = map.remove(&key);
            Some(a)
        }
        None => {
            if crate::filter::current_traced().is_some() {
                count_lost(lost::STASH_MISS);
            }
            None
        }
    }
}

/// Whether `hook`'s entry arguments are stashed on this thread: the call is in progress.
#[inline(always)]
pub fn in_progress(map: &LruHashMap<u64, MrArgs>, hook: u32) -> bool {
    let key = stash_key(hook, aya_ebpf::helpers::bpf_get_current_pid_tgid() as u32);
    // SAFETY: only presence is checked.
    unsafe { map.get(&key) }.is_some()
}

/// Forgets `hook`'s stash on this thread (an fexit whose fentry only marked the call).
#[inline(always)]
pub fn clear(map: &LruHashMap<u64, MrArgs>, hook: u32) {
    let key = stash_key(hook, aya_ebpf::helpers::bpf_get_current_pid_tgid() as u32);
    let _ = map.remove(&key);
}

/// A thread exits: the user calls it left without returning go with it.
#[inline(always)]
pub fn forget_thread(tid: u32) {
    for hook in USER_STASH_HOOKS {
        let _ = USER_ARGS.remove(&stash_key(hook as u32, tid));
    }
}
