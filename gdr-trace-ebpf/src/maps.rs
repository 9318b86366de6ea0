//! Maps shared by every program. Names are the ones in `gdr_trace_common::maps`.

use core::intrinsics::{atomic_xadd, AtomicOrdering};

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use gdr_trace_common::{lost, LiveUmem, MrArgs, RINGBUF_BYTES, SELF_SLOTS};

/// Every record for userspace.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(RINGBUF_BYTES, 0);

/// Processes being traced when `FILTER_PIDS` is set (tgid -> 1). Userspace seeds it with the
/// attached PID; `lifecycle::track_sched_process_fork` adds children.
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
/// A thread can leave a user call without returning (siglongjmp, exit mid-call): its entry is
/// replaced by its next call of that function and goes when it exits (`forget_thread`). A plain
/// hash map, not an LRU one: nothing is evicted, so one tenant's calls cannot push another's
/// out; each tenant's share of it is bounded instead (`share`).
#[map]
pub static USER_ARGS: HashMap<u64, MrArgs> = HashMap::with_max_entries(USER_STASH_ENTRIES, 0);

/// Room for this many calls in flight at once, all threads together.
pub const USER_STASH_ENTRIES: u32 = 32768;

/// umems registered by traced processes, so `ib_umem_release` can be attributed and sized
/// even when it runs in another context.
#[map]
pub static LIVE_UMEMS: HashMap<u64, LiveUmem> = HashMap::with_max_entries(65536, 0);

#[inline(always)]
pub fn count_lost(slot: u32) {
    count_lost_n(slot, 1);
}

/// Counts `n` records lost for the reason in `slot`.
#[inline(always)]
pub fn count_lost_n(slot: u32, n: u64) {
    if let Some(p) = LOST.get_ptr_mut(slot) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU.
        unsafe { *p += n };
    }
    if slot == lost::RINGBUF_FULL || slot == lost::OVER_BUDGET {
        charge_loss(n);
    }
}

#[inline(always)]
pub fn stash_key(hook: u32, tid: u32) -> u64 {
    ((hook as u64) << 32) | tid as u64
}

/// `*p += v`, atomically (threads of one process share a descriptor's counters).
#[inline(always)]
pub fn add(p: &mut u64, v: u64) {
    // SAFETY: p points into a map value that lives while the program runs. The result is
    // unused, so this is BPF's plain atomic add (no fetch), which every kernel accepts.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(p, v) };
}

/// Records each tenant lost, tracing the whole node: ring buffer full, over its budget or its
/// share of a shared table (`lost::RINGBUF_FULL`, `lost::OVER_BUDGET`), charged to the tenant
/// whose record or evidence it was. An LRU map: a flood of tenants evicts old counts.
#[map]
pub static LOST_BY_TENANT: LruHashMap<u64, u64> = LruHashMap::with_max_entries(4096, 0);

/// `n` records of the current tenant lost.
#[inline(always)]
pub fn charge_loss(n: u64) {
    if !crate::tenant::on() {
        return;
    }
    let key = crate::tenant::tenant();
    add_or_make(&LOST_BY_TENANT, key, n);
}

/// Adds `n` to `map[key]`, making the entry when there is none. Another CPU may make it
/// between the lookup and the insert (EEXIST): then the count goes to the entry it made.
#[inline(always)]
fn add_or_make(map: &LruHashMap<u64, u64>, key: u64, n: u64) {
    if let Some(v) = map.get_ptr_mut(&key) {
        // SAFETY: a map value, alive while the program runs.
        return add(unsafe { &mut *v }, n);
    }
    if map.insert(&key, &n, aya_ebpf::bindings::BPF_NOEXIST as u64).is_err() {
        if let Some(v) = map.get_ptr_mut(&key) {
            // SAFETY: as above.
            add(unsafe { &mut *v }, n);
        }
    }
}

/// An entry was made (`removed` false) or removed: counted in `map` (key -> [made, removed])
/// under each of `keys` (its tenant, and the key summing every tenant), while tenants are held
/// to budgets.
#[inline(always)]
pub fn count_entry(map: &LruHashMap<u64, [u64; 2]>, keys: [u64; 2], removed: bool) {
    if !crate::tenant::on() {
        return;
    }
    let i = usize::from(removed);
    for key in keys {
        match map.get_ptr_mut(&key) {
            // SAFETY: a map value, alive while the program runs.
            Some(v) => add(unsafe { &mut (*v)[i] }, 1),
            None => {
                let mut v = [0u64; 2];
                v[i] = 1;
                // EEXIST: another CPU made it meanwhile; the count goes to that one (a lost
                // removal would hold the tenant one entry short of its share for good).
                if map.insert(&key, &v, aya_ebpf::bindings::BPF_NOEXIST as u64).is_err() {
                    if let Some(v) = map.get_ptr_mut(&key) {
                        // SAFETY: as above.
                        add(unsafe { &mut (*v)[i] }, 1);
                    }
                }
            }
        }
    }
}
