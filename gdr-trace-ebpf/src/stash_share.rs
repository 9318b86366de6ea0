//! Each tenant's share of `USER_ARGS`, the node-wide table of user calls in flight, tracing the
//! whole node: while it is less than half full every call goes in; past half, a tenant
//! (`tenant::tenant`) already holding `USER_CALLS_PER_TENANT` entries gets no more. Its new
//! calls then go without their uprobe evidence (a lost `over_budget` record each, charged to
//! it), never another tenant's: `USER_ARGS` is a plain hash map, so an entry stays until its
//! call returns, its thread exits, or the thread's next call of the same function replaces
//! it — no tenant's churn can evict another's call in flight (an LRU map's can). The kernel
//! counts the entries each tenant makes and removes (`STASH_HELD`).

use aya_ebpf::{macros::map, maps::LruHashMap};

/// Calls in flight one tenant may hold once the table is half full.
pub const USER_CALLS_PER_TENANT: u64 = crate::maps::USER_STASH_ENTRIES as u64 / 8;
/// The `STASH_HELD` key that sums every tenant (no uid or cgroup id is it).
const ALL: u64 = u64::MAX;

/// Tenant -> [entries made, entries removed]; `ALL`: every tenant's.
#[map]
pub static STASH_HELD: LruHashMap<u64, [u64; 2]> = LruHashMap::with_max_entries(4096, 0);

/// Entries `key` holds now.
#[inline(always)]
fn held(key: u64) -> u64 {
    // SAFETY: plain values copied out.
    let [made, removed] = unsafe { STASH_HELD.get(&key) }.copied().unwrap_or([0, 0]);
    made.saturating_sub(removed)
}

/// Whether `tenant` may add a call in flight now.
#[inline(always)]
pub fn admit(tenant: u64) -> bool {
    held(ALL) < u64::from(crate::maps::USER_STASH_ENTRIES / 2) || held(tenant) < USER_CALLS_PER_TENANT
}

/// An entry of `tenant` was made (`removed` false) or removed.
#[inline(always)]
pub fn counted(tenant: u64, removed: bool) {
    crate::maps::count_entry(&STASH_HELD, [tenant, ALL], removed);
}
