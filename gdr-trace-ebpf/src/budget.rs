//! Each tenant's share of the ring buffer: a token bucket per user (`EVENTS_PER_UID_S` records
//! a second, at most one second's worth saved up), consulted before a record is reserved. While
//! the ring buffer is less than half full every record goes in (a busy tenant on a quiet ring
//! loses nothing); past half, a tenant over budget loses its own records (counted:
//! `lost::OVER_BUDGET`), never another's: one tenant's flood cannot fill the ring buffer the
//! others' registrations go through. The
//! tenant is the uid; for uid 0 it is the cgroup, since containers commonly all run as root
//! (making cgroups takes a privilege they lack unless delegated). The buckets are an LRU map,
//! so a flood of tenants evicts old buckets (a new bucket starts full), never blocks one.

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::map, maps::LruHashMap};
use gdr_trace_common::{lost, UidBucket};

use crate::{
    maps::{count_lost_n, EVENTS},
    tenant::{tenant, EVENTS_PER_UID_S},
};

/// `bpf_ringbuf_query`'s BPF_RB_AVAIL_DATA: bytes written and not yet read.
const BPF_RB_AVAIL_DATA: u64 = 0;

#[map]
pub static UID_BUDGET: LruHashMap<u64, UidBucket> = LruHashMap::with_max_entries(4096, 0);

/// Whether the current user may send one more record now (and takes its token).
#[inline(always)]
pub fn admit() -> bool {
    admit_n(1)
}

/// Whether the current user may send `cost` more records now (a batch, decided once before its
/// loop: a decision per record inside the loop multiplies what 6.1's verifier explores past its
/// limit); takes their tokens. A cost above the budget is capped at one second's worth.
#[inline(always)]
pub fn admit_n(cost: u64) -> bool {
    // SAFETY: a read-only global patched by the loader.
    let rate = unsafe { core::ptr::read_volatile(&EVENTS_PER_UID_S) };
    if rate == 0 {
        return true;
    }
    let key = tenant();
    // SAFETY: a plain helper.
    let now = unsafe { bpf_ktime_get_ns() };
    let burst = rate;
    let cost = cost.clamp(1, burst);
    let Some(b) = UID_BUDGET.get_ptr_mut(&key) else {
        let fresh = UidBucket { tokens: burst - cost, last_ns: now };
        let _ = UID_BUDGET.insert(&key, &fresh, 0);
        return true;
    };
    // SAFETY: a value of the map, updated in place (a race between CPUs costs a token or two).
    let b = unsafe { &mut *b };
    // Whole tokens earned since the last refill; the time of a fraction is kept for later.
    let elapsed = now.saturating_sub(b.last_ns).min(1_000_000_000);
    let earned = elapsed * rate / 1_000_000_000;
    if earned > 0 {
        b.tokens = (b.tokens + earned).min(burst);
        b.last_ns = now;
    }
    if b.tokens >= cost {
        b.tokens -= cost;
        return true;
    }
    if EVENTS.query(BPF_RB_AVAIL_DATA) < u64::from(gdr_trace_common::RINGBUF_BYTES / 2) {
        return true;
    }
    count_lost_n(lost::OVER_BUDGET, cost);
    false
}
