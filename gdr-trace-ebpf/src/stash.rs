//! Entry arguments kept for a call's return probe (`KERNEL_ARGS`, `USER_ARGS`), per thread, and
//! what a thread left in flight when it exits.

use aya_ebpf::{macros::map, maps::LruHashMap};
use gdr_trace_common::{lost, HookId, MrArgs};

use crate::{
    filter::current_traced,
    maps::{count_lost, stash_key, USER_ARGS, USER_STASH_ENTRIES},
    share::Share,
};

/// `USER_ARGS` entries per tenant: [made, removed] (`share`).
#[map]
pub static STASH_HELD: LruHashMap<u64, [u64; 2]> = LruHashMap::with_max_entries(4096, 0);

/// `USER_ARGS` with its per-tenant counts.
#[inline(always)]
fn user_args() -> Share<'static, u64, MrArgs> {
    Share { map: &USER_ARGS, held: &STASH_HELD, freed: None, entries: USER_STASH_ENTRIES }
}

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
    let got = unsafe { map.get(&key) }.copied();
    if got.is_some() {
        let _ = map.remove(&key);
    } else {
        missed();
    }
    got
}

#[inline(always)]
fn missed() {
    if current_traced().is_some() {
        count_lost(lost::STASH_MISS);
    }
}

/// `stash` into `USER_ARGS`, within the tenant's share (`share`): a tenant over it loses this
/// call's evidence, counted as its own `over_budget` loss.
#[inline(always)]
pub fn stash_user(hook: u32, args: &MrArgs) {
    let key = stash_key(hook, aya_ebpf::helpers::bpf_get_current_pid_tgid() as u32);
    user_args().put(&key, args);
}

/// `take` from `USER_ARGS` (the entry leaves its tenant's share).
#[inline(always)]
pub fn take_user(hook: u32) -> Option<MrArgs> {
    let key = stash_key(hook, aya_ebpf::helpers::bpf_get_current_pid_tgid() as u32);
    // SAFETY: plain data copied out before removal.
    let got = unsafe { USER_ARGS.get(&key) }.copied();
    if got.is_some() {
        removed_user(key);
    } else {
        missed();
    }
    got
}

/// Removes `key` from `USER_ARGS`, out of the current tenant's share.
#[inline(always)]
fn removed_user(key: u64) {
    user_args().remove(&key);
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
        removed_user(stash_key(hook as u32, tid));
    }
}
