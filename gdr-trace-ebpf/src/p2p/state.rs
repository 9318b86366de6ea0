//! What the kernel keeps of libcuda's state so GPU↔GPU copies are classified and counted here,
//! never sent one by one: each context's device, each thread's current context (one level of
//! push remembered), enabled peer access, device allocations, and the copy counters per
//! (process, device pair, verdict) that userspace reads at each summary.

use core::intrinsics::{atomic_xadd, AtomicOrdering};

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::map,
    maps::{HashMap, LruHashMap, PerCpuArray},
};
use gdr_trace_common::{
    lost,
    p2p::{verdict, AllocTable, CtxKey, CudaStash, P2pCount, P2pKey, PeerKey, DEVICE_UNKNOWN, MAX_ALLOCS},
    HookId,
};

use crate::maps::{count_lost, stash_key};

/// Entry arguments of a libcuda call in flight, by (hook, thread). LRU, and a thread's entries
/// go when it exits (`forget_thread`): a call left by siglongjmp or a thread exit never blocks
/// a new one.
#[map]
pub static CU_STASH: LruHashMap<u64, CudaStash> = LruHashMap::with_max_entries(16384, 0);
#[map]
pub static CU_CTX_DEV: HashMap<CtxKey, u32> = HashMap::with_max_entries(4096, 0);
/// `pid_tgid` -> the thread's current context (per thread: LRU, forgotten at thread exit).
#[map]
pub static CU_CUR_CTX: LruHashMap<u64, u64> = LruHashMap::with_max_entries(16384, 0);
/// `pid_tgid` -> the context current before the last push.
#[map]
pub static CU_PREV_CTX: LruHashMap<u64, u64> = LruHashMap::with_max_entries(16384, 0);

/// The hooks whose entry stashes in `CU_STASH` (the control calls, `p2p.rs`'s `cuda_call!`).
const CU_STASH_HOOKS: [HookId; 21] = [
    HookId::CuCtxCreate,
    HookId::CuCtxCreateV3,
    HookId::CuCtxCreateV4,
    HookId::CuDevicePrimaryCtxRetain,
    HookId::CuCtxEnablePeerAccess,
    HookId::CuCtxDisablePeerAccess,
    HookId::CuDeviceCanAccessPeer,
    HookId::CuMemAlloc,
    HookId::CuMemFree,
    HookId::CuIpcGetMemHandle,
    HookId::CuIpcOpenMemHandle,
    HookId::CuIpcCloseMemHandle,
    HookId::CuMemExportToShareableHandle,
    HookId::CuMemImportFromShareableHandle,
    HookId::CuMemMap,
    HookId::CuMemSetAccess,
    HookId::CuMemHostAlloc,
    HookId::CuMemAllocHost,
    HookId::CuMemHostRegister,
    HookId::CuMemFreeHost,
    HookId::CuMemHostUnregister,
];

/// A thread exits: its current contexts and the libcuda calls it left without returning go.
#[inline(always)]
pub fn forget_thread(pid_tgid: u64) {
    let _ = CU_CUR_CTX.remove(&pid_tgid);
    let _ = CU_PREV_CTX.remove(&pid_tgid);
    for hook in CU_STASH_HOOKS {
        let _ = CU_STASH.remove(&stash_key(hook as u32, pid_tgid as u32));
    }
}
#[map]
pub static CU_PEER: HashMap<PeerKey, u32> = HashMap::with_max_entries(4096, 0);
#[map]
pub static CU_ALLOCS: HashMap<u32, AllocTable> = HashMap::with_max_entries(1024, 0);
/// Never written: the zeroed table a new process's entry starts from.
#[map]
static CU_ALLOCS_ZERO: PerCpuArray<AllocTable> = PerCpuArray::with_max_entries(1, 0);
#[map]
pub static P2P_COPIES: HashMap<P2pKey, P2pCount> = HashMap::with_max_entries(4096, 0);

#[inline(always)]
pub fn ctx_device(tgid: u32, ctx: u64) -> u32 {
    // SAFETY: map lookups; values are copied out.
    unsafe { CU_CTX_DEV.get(&CtxKey { tgid, _pad0: 0, ctx }) }.copied().unwrap_or(DEVICE_UNKNOWN)
}

#[inline(always)]
pub fn current_ctx(pid_tgid: u64) -> u64 {
    unsafe { CU_CUR_CTX.get(&pid_tgid) }.copied().unwrap_or(0)
}

#[inline(always)]
pub fn current_device(pid_tgid: u64) -> u32 {
    ctx_device((pid_tgid >> 32) as u32, current_ctx(pid_tgid))
}

#[inline(always)]
pub fn set_current(pid_tgid: u64, ctx: u64) {
    if ctx == 0 {
        let _ = CU_CUR_CTX.remove(&pid_tgid);
    } else {
        let _ = CU_CUR_CTX.insert(&pid_tgid, &ctx, 0);
    }
}

#[inline(always)]
pub fn push_current(pid_tgid: u64, ctx: u64) {
    let _ = CU_PREV_CTX.insert(&pid_tgid, &current_ctx(pid_tgid), 0);
    set_current(pid_tgid, ctx);
}

#[inline(always)]
pub fn pop_current(pid_tgid: u64) {
    let prev = unsafe { CU_PREV_CTX.get(&pid_tgid) }.copied().unwrap_or(0);
    let _ = CU_PREV_CTX.remove(&pid_tgid);
    set_current(pid_tgid, prev);
}

#[inline(always)]
pub fn set_peer(tgid: u32, device: u32, peer: u32, enabled: bool) {
    if device == DEVICE_UNKNOWN || peer == DEVICE_UNKNOWN {
        return;
    }
    let key = PeerKey { tgid, device, peer, _pad0: 0 };
    if enabled {
        let _ = CU_PEER.insert(&key, &1, 0);
    } else {
        let _ = CU_PEER.remove(&key);
    }
}

#[inline(always)]
fn peer_enabled(tgid: u32, a: u32, b: u32) -> bool {
    let k1 = PeerKey { tgid, device: a, peer: b, _pad0: 0 };
    let k2 = PeerKey { tgid, device: b, peer: a, _pad0: 0 };
    unsafe { CU_PEER.get(&k1).is_some() || CU_PEER.get(&k2).is_some() }
}

/// Counts one copy of `bytes` from `src` to `dst` (devices) for process `tgid`.
#[inline(always)]
pub fn count_copy(tgid: u32, src: u32, dst: u32, bytes: u64) {
    let v = if src == DEVICE_UNKNOWN || dst == DEVICE_UNKNOWN {
        verdict::UNKNOWN
    } else if peer_enabled(tgid, src, dst) {
        verdict::DIRECT
    } else {
        verdict::STAGED
    };
    let key = P2pKey { tgid, src_device: src, dst_device: dst, verdict: v };
    if let Some(c) = P2P_COPIES.get_ptr_mut(&key) {
        // SAFETY: a map value, alive while the program runs; other CPUs add too (atomic).
        unsafe {
            atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&mut (*c).calls, 1);
            atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&mut (*c).bytes, bytes);
        }
        return;
    }
    let first = P2pCount { calls: 1, bytes };
    if P2P_COPIES.insert(&key, &first, BPF_NOEXIST as u64).is_err() {
        // Another CPU inserted it meanwhile, or the map is full.
        match P2P_COPIES.get_ptr_mut(&key) {
            Some(c) => unsafe {
                atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&mut (*c).calls, 1);
                atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&mut (*c).bytes, bytes);
            },
            None => count_lost(lost::STORAGE_MAP_FULL),
        }
    }
}

/// The device of the allocation holding `ptr`, if one was seen.
#[inline(always)]
pub fn alloc_device(tgid: u32, ptr: u64) -> u32 {
    let Some(t) = (unsafe { CU_ALLOCS.get(&tgid) }) else { return DEVICE_UNKNOWN };
    for i in 0..MAX_ALLOCS {
        let b = t.base[i];
        if b != 0 && ptr >= b && ptr - b < t.size[i] {
            return t.device[i];
        }
    }
    DEVICE_UNKNOWN
}

/// The size of the allocation starting at `ptr` (0 if unknown).
#[inline(always)]
pub fn alloc_size(tgid: u32, ptr: u64) -> u64 {
    let Some(t) = (unsafe { CU_ALLOCS.get(&tgid) }) else { return 0 };
    for i in 0..MAX_ALLOCS {
        if t.base[i] == ptr {
            return t.size[i];
        }
    }
    0
}

#[inline(always)]
pub fn alloc_add(tgid: u32, base: u64, size: u64, device: u32) {
    if unsafe { CU_ALLOCS.get(&tgid) }.is_none() {
        let Some(zero) = CU_ALLOCS_ZERO.get_ptr(0) else { return };
        // SAFETY: a map value of the right type (never written, so all zero).
        let _ = CU_ALLOCS.insert(&tgid, unsafe { &*zero }, BPF_NOEXIST as u64);
    }
    let Some(t) = CU_ALLOCS.get_ptr_mut(&tgid) else { return };
    // SAFETY: a map value, alive while the program runs.
    let t = unsafe { &mut *t };
    for i in 0..MAX_ALLOCS {
        if t.base[i] == 0 {
            t.base[i] = base;
            t.size[i] = size;
            t.device[i] = device;
            return;
        }
    }
    count_lost(lost::STORAGE_MAP_FULL);
}

#[inline(always)]
pub fn alloc_forget(tgid: u32, base: u64) {
    let Some(t) = CU_ALLOCS.get_ptr_mut(&tgid) else { return };
    let t = unsafe { &mut *t };
    for i in 0..MAX_ALLOCS {
        if t.base[i] == base {
            t.base[i] = 0;
            t.size[i] = 0;
            return;
        }
    }
}
