//! Each tenant's share of a node-wide table that tenants fill (calls in flight per thread:
//! `USER_ARGS`, `GDS_INFLIGHT`, `NVFS_ARGS`; the byte maps `BYTES`, `RECV_POSTED`; each
//! process's provider functions, `PROVIDER_OPS`), tracing the whole node: while a table is
//! less than half full every call goes in; past half, a tenant (`tenant::tenant`) already
//! holding an eighth of it gets no more. Its new calls then go without their evidence (a lost
//! `over_budget` record each, charged to it), never another tenant's: the tables are plain
//! hash maps, so an entry stays until its call returns, its thread exits, or the thread's next
//! call replaces it — no tenant's churn can evict another's call in flight (an LRU map's can).
//! The kernel counts the entries each tenant makes and removes, per table (`held`: tenant ->
//! [made, removed]); where userspace removes entries too (those of exited processes) it counts
//! them per tenant in a map of its own (`freed`: written by userspace only, so no
//! read-modify-write races the kernel's atomic adds). A coalition of tenants holds at most half
//! the table plus an eighth per member: eight uids together can fill it (docs/security.md).

use aya_ebpf::{
    bindings::{BPF_EXIST, BPF_NOEXIST},
    maps::{HashMap, LruHashMap},
};
use gdr_trace_common::lost;

use crate::{maps::count_lost, tenant};

use gdr_trace_common::ALL_TENANTS as ALL;

/// A shared table, its per-tenant counts, and its size.
pub struct Share<'a, K, V> {
    pub map: &'a HashMap<K, V>,
    pub held: &'a LruHashMap<u64, [u64; 2]>,
    /// Tenant -> entries userspace removed, where it removes any.
    pub freed: Option<&'a LruHashMap<u64, u64>>,
    pub entries: u32,
}

impl<K, V> Share<'_, K, V> {
    /// Entries `key` (a tenant, or `ALL`) holds now.
    #[inline(always)]
    fn held_by(&self, key: u64) -> u64 {
        // SAFETY: plain values copied out.
        let [made, removed] = unsafe { self.held.get(&key) }.copied().unwrap_or([0, 0]);
        // SAFETY: as above.
        let freed = self.freed.and_then(|f| unsafe { f.get(&key) }.copied()).unwrap_or(0);
        made.saturating_sub(removed).saturating_sub(freed)
    }

    /// Whether `tenant` may add an entry now (always, when tenants are held to no budget).
    #[inline(always)]
    pub fn admit(&self, tenant: u64) -> bool {
        !tenant::on()
            || self.held_by(ALL) < u64::from(self.entries / 2)
            || self.held_by(tenant) < u64::from(self.entries / 8)
    }

    /// `tenant` made an entry (`removed` false), or one of its entries went.
    #[inline(always)]
    pub fn counted(&self, tenant: u64, removed: bool) {
        crate::maps::count_entry(self.held, [tenant, ALL], removed);
    }

    /// Puts this thread's call under `key`: replacing what the thread's earlier call left there
    /// (it never returned), else as a new entry within the tenant's share. False when it was
    /// not kept (over the share: `over_budget`; the table full: `stash_full`).
    #[inline(always)]
    pub fn put(&self, key: &K, value: &V) -> bool {
        if !tenant::on() {
            let kept = self.map.insert(key, value, 0).is_ok();
            if !kept {
                count_lost(lost::STASH_FULL);
            }
            return kept;
        }
        if self.map.insert(key, value, BPF_EXIST as u64).is_ok() {
            return true;
        }
        let tenant = tenant::tenant();
        if !self.admit(tenant) {
            count_lost(lost::OVER_BUDGET);
            return false;
        }
        if self.map.insert(key, value, BPF_NOEXIST as u64).is_err() {
            count_lost(lost::STASH_FULL);
            return false;
        }
        self.counted(tenant, false);
        true
    }

    /// Removes `key` (its call returned, or its thread exited), out of the current tenant's
    /// share (the thread's own: it made the entry). Whether there was one.
    #[inline(always)]
    pub fn remove(&self, key: &K) -> bool {
        let gone = self.map.remove(key).is_ok();
        if gone && tenant::on() {
            self.counted(tenant::tenant(), true);
        }
        gone
    }
}
