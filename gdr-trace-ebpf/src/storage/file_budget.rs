//! Each tenant's share of `FILE_IO`, the node-wide table of descriptors being counted: while
//! it is less than half full every new descriptor goes in; past half, a tenant (`tenant::tenant`)
//! already holding `FILES_PER_TENANT` entries gets no more, its new descriptors go uncounted
//! (their I/O a lost `over_budget` record each), so one user holding opens cannot leave the
//! others' files uncounted. The kernel counts the entries it makes and removes per tenant
//! (`TRACKED_FILES`), userspace those of exited processes it removes (`TRACKED_FREED`, written
//! by userspace only: no read-modify-write races with the kernel's atomic adds).

use aya_ebpf::{macros::map, maps::LruHashMap};
use gdr_trace_common::{
    storage::{FILES_PER_TENANT, FILE_IO_ENTRIES},
    ALL_TENANTS,
};

use crate::tenant;

/// Tenant -> [entries made, entries the kernel removed]; `ALL_TENANTS`: every tenant's.
#[map]
pub static TRACKED_FILES: LruHashMap<u64, [u64; 2]> = LruHashMap::with_max_entries(4096, 0);

/// Tenant -> entries userspace removed (exited processes'), written by userspace only.
#[map]
pub static TRACKED_FREED: LruHashMap<u64, u64> = LruHashMap::with_max_entries(4096, 0);

/// Entries `key` holds now.
#[inline(always)]
fn held(key: u64) -> u64 {
    // SAFETY: plain values copied out.
    let [made, removed] = unsafe { TRACKED_FILES.get(&key) }.copied().unwrap_or([0, 0]);
    // SAFETY: as above.
    let freed = unsafe { TRACKED_FREED.get(&key) }.copied().unwrap_or(0);
    made.saturating_sub(removed).saturating_sub(freed)
}

/// The tenant a new `FILE_IO` entry is charged to; None when it is over its share (the caller
/// counts what that loses).
#[inline(always)]
pub fn admit() -> Option<u64> {
    let t = tenant::tenant();
    if !tenant::on() || held(ALL_TENANTS) < u64::from(FILE_IO_ENTRIES / 2) || held(t) < FILES_PER_TENANT {
        return Some(t);
    }
    None
}

/// An entry of `tenant` was made (`removed` false) or removed by the kernel.
#[inline(always)]
pub fn tracked(tenant: u64, removed: bool) {
    crate::maps::count_entry(&TRACKED_FILES, [tenant, ALL_TENANTS], removed);
}
