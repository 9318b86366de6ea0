//! Entry arguments kept for a call's return probe (`KERNEL_ARGS`, `USER_ARGS`), per thread, and
//! what a thread left in flight when it exits.

use aya_ebpf::maps::LruHashMap;
use gdr_trace_common::{lost, HookId, MrArgs};

use crate::{
    filter::current_traced,
    maps::{count_lost, stash_key, USER_ARGS},
};

/// The hooks that stash in `USER_ARGS`.
const USER_STASH_HOOKS: [HookId; 6] = [
    HookId::ProviderPollCq,
    HookId::IbvRegMr,
    HookId::IbvRegMrIova2,
    HookId::IbvRegDmabufMr,
    HookId::IbvDeregMr,
    HookId::CuMemGetHandleForAddressRange,
];

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
            if current_traced().is_some() {
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
