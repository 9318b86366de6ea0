//! The maps work-request bytes are counted in, each held to per-tenant shares (`share`): the
//! counts (`BYTES`), the receives posted and not completed yet (`RECV_POSTED`), and each
//! process's provider functions (`PROVIDER_OPS`). None is an LRU: one tenant's churn never
//! evicts another's counts or posted receives; past half full a tenant holding an eighth gets
//! no new entry, and what that loses is its own (a lost `over_budget`, charged to it).
//! Entries go when their MR is released or their receive completes (here), when their process
//! exits (`PROVIDER_OPS` here; `BYTES` and `RECV_POSTED` by userspace, which gives the tenant
//! its entries back in `BYTES_FREED` / `RECV_FREED`).

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::map,
    maps::{HashMap, LruHashMap},
};
use gdr_trace_common::{
    lost,
    mr::bytes::{ByteCount, ByteKey, ProviderOps, RecvKey, RecvPosted},
};

use crate::{
    maps::{add, count_lost},
    share::Share,
    tenant,
};

const BYTES_ENTRIES: u32 = 65536;
const RECV_ENTRIES: u32 = 65536;
const OPS_ENTRIES: u32 = 4096;

/// Bytes and work requests per (tgid, lkey, device context). An entry is never evicted unseen
/// (a refused one is a counted loss); userspace removes those of released MRs and exited
/// processes once read.
#[map]
pub static BYTES: HashMap<ByteKey, ByteCount> = HashMap::with_max_entries(BYTES_ENTRIES, 0);
#[map]
static BYTES_HELD: LruHashMap<u64, [u64; 2]> = LruHashMap::with_max_entries(4096, 0);
#[map]
static BYTES_FREED: LruHashMap<u64, u64> = LruHashMap::with_max_entries(4096, 0);

/// Posted receives, to join their completions: (tgid, wr_id) -> the `BYTES` key of the first
/// SGE, and how many receives under that wr_id are outstanding.
#[map]
static RECV_POSTED: HashMap<RecvKey, RecvPosted> = HashMap::with_max_entries(RECV_ENTRIES, 0);
#[map]
static RECV_HELD: LruHashMap<u64, [u64; 2]> = LruHashMap::with_max_entries(4096, 0);
#[map]
static RECV_FREED: LruHashMap<u64, u64> = LruHashMap::with_max_entries(4096, 0);

/// Each process's provider functions (tgid -> ops), for userspace to hook; gone at its exit.
#[map]
pub(crate) static PROVIDER_OPS: HashMap<u32, ProviderOps> = HashMap::with_max_entries(OPS_ENTRIES, 0);
#[map]
static OPS_HELD: LruHashMap<u64, [u64; 2]> = LruHashMap::with_max_entries(4096, 0);

#[inline(always)]
fn bytes_share() -> Share<'static, ByteKey, ByteCount> {
    Share { map: &BYTES, held: &BYTES_HELD, freed: Some(&BYTES_FREED), entries: BYTES_ENTRIES }
}

#[inline(always)]
fn recv_share() -> Share<'static, RecvKey, RecvPosted> {
    Share { map: &RECV_POSTED, held: &RECV_HELD, freed: Some(&RECV_FREED), entries: RECV_ENTRIES }
}

#[inline(always)]
fn ops_share() -> Share<'static, u32, ProviderOps> {
    Share { map: &PROVIDER_OPS, held: &OPS_HELD, freed: None, entries: OPS_ENTRIES }
}

#[inline(always)]
fn add_counts(v: &mut ByteCount, out: u64, inn: u64, ops: u64) {
    add(&mut v.bytes_out, out);
    add(&mut v.bytes_in, inn);
    add(&mut v.ops, ops);
}

/// Adds to `key`'s counts, making its entry within the current tenant's share.
#[inline(always)]
pub(crate) fn count(key: ByteKey, out: u64, inn: u64, ops: u64) {
    if let Some(v) = BYTES.get_ptr_mut(&key) {
        // SAFETY: a map value, alive while the program runs.
        add_counts(unsafe { &mut *v }, out, inn, ops);
        return;
    }
    let tenant = tenant::tenant();
    let share = bytes_share();
    if !share.admit(tenant) {
        count_lost(lost::OVER_BUDGET);
        return;
    }
    let v = ByteCount { bytes_out: out, bytes_in: inn, ops, tenant };
    // BPF_NOEXIST: another CPU may have made it meanwhile; then add to that one.
    if BYTES.insert(&key, &v, BPF_NOEXIST as u64).is_ok() {
        share.counted(tenant, false);
        return;
    }
    match BYTES.get_ptr_mut(&key) {
        // SAFETY: as above.
        Some(p) => add_counts(unsafe { &mut *p }, out, inn, ops),
        None => count_lost(lost::BYTES_MAP_FULL),
    }
}

/// A deregistered MR's counts, out of the map (its lkey may be given to the next MR).
#[inline(always)]
pub(crate) fn take(key: &ByteKey) -> Option<ByteCount> {
    // SAFETY: plain data copied out before removal.
    let c = unsafe { BYTES.get(key) }.copied()?;
    if BYTES.remove(key).is_ok() {
        bytes_share().counted(c.tenant, true);
    }
    Some(c)
}

/// A receive posted under `key` whose bytes go to `at`.
#[inline(always)]
pub(crate) fn posted(key: &RecvKey, at: ByteKey) {
    if let Some(v) = RECV_POSTED.get_ptr_mut(key) {
        // SAFETY: a map value, alive while the program runs; a wr_id reused at once by two
        // threads of one process may lose one of their counts (its completion is then unjoined).
        let v = unsafe { &mut *v };
        v.at = at;
        v.outstanding = v.outstanding.saturating_add(1);
        return;
    }
    let tenant = tenant::tenant();
    let _ = recv_share().put(key, &RecvPosted { at, outstanding: 1, tenant });
}

/// A receive posted under `key` completed: where its bytes go (None: not seen posted).
#[inline(always)]
pub(crate) fn completed(key: &RecvKey) -> Option<ByteKey> {
    let v = RECV_POSTED.get_ptr_mut(key)?;
    // SAFETY: as above.
    let v = unsafe { &mut *v };
    let at = v.at;
    if v.outstanding > 1 {
        v.outstanding -= 1;
    } else {
        let tenant = v.tenant;
        if RECV_POSTED.remove(key).is_ok() {
            recv_share().counted(tenant, true);
        }
    }
    Some(at)
}

/// The process's provider functions, told to userspace when they changed (a new entry within
/// the tenant's share).
#[inline(always)]
pub(crate) fn publish(tgid: u32, old: Option<ProviderOps>, ops: &ProviderOps) {
    if old.is_some_and(|o| o == *ops) {
        return;
    }
    if ops_share().put(&tgid, ops) {
        crate::libmap::tell(tgid);
    }
}

/// A traced process exits: its provider functions go.
#[inline(always)]
pub fn forget_process(tgid: u32) {
    ops_share().remove(&tgid);
}
