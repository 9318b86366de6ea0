//! Copies between device memory and host memory (`cuMemcpyDtoH*`, `cuMemcpyHtoD*`), counted
//! here per (process, direction, host address), never sent one by one: userspace reads the map
//! at each summary and adds up the bytes that went through CUDA pinned host buffers (staging).

use core::intrinsics::{atomic_xadd, AtomicOrdering};

use aya_ebpf::{bindings::BPF_NOEXIST, macros::map, maps::HashMap};
use gdr_trace_common::{
    lost,
    p2p::{P2pCount, StagedKey},
};

use crate::maps::count_lost;

/// Host buffers a copy named, per process and direction. A full map loses the copies of new
/// buffers (counted as `STORAGE_MAP_FULL`); those of buffers already in it still count.
#[map]
pub static STAGED_COPIES: HashMap<StagedKey, P2pCount> = HashMap::with_max_entries(8192, 0);

#[inline(always)]
fn add(c: *mut P2pCount, bytes: u64) {
    // SAFETY: a map value, alive while the program runs; other CPUs add too (atomic).
    unsafe {
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&mut (*c).calls, 1);
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&mut (*c).bytes, bytes);
    }
}

/// One copy of `bytes` in direction `dir` whose host side starts at `host`.
#[inline(always)]
pub fn count_staged(tgid: u32, dir: u32, host: u64, bytes: u64) {
    let key = StagedKey { tgid, dir, host };
    if let Some(c) = STAGED_COPIES.get_ptr_mut(&key) {
        return add(c, bytes);
    }
    let first = P2pCount { calls: 1, bytes };
    if STAGED_COPIES.insert(&key, &first, BPF_NOEXIST as u64).is_err() {
        // Another CPU inserted it meanwhile, or the map is full.
        match STAGED_COPIES.get_ptr_mut(&key) {
            Some(c) => add(c, bytes),
            None => count_lost(lost::STORAGE_MAP_FULL),
        }
    }
}
