//! The verb each traced thread is in (`PIN_VERB`), for every family that sees the kernel pin
//! user memory: the queue family's verb hooks (`queues::verbs`) write it, the registration
//! hooks (`mr::rdma_core`, `mr::gpu`) read it into each pin record's `purpose`.

use aya_ebpf::{helpers::bpf_get_current_pid_tgid, macros::map, maps::LruHashMap};
use gdr_trace_common::queues::{PinVerb, DOORBELL};

/// tid -> `purpose` word (verb | DOORBELL) while the thread is inside a hooked verb. LRU: a
/// return that was missed (kretprobe maxactive) leaves an entry that new threads evict, and the
/// thread's next verb overwrites it.
#[map]
pub static PIN_VERB: LruHashMap<u32, u32> = LruHashMap::with_max_entries(8192, 0);

#[inline(always)]
fn tid() -> u32 {
    bpf_get_current_pid_tgid() as u32
}

/// The current thread entered `verb`: what it pins until it leaves is for that verb.
#[inline(always)]
pub fn enter(verb: PinVerb) {
    let _ = PIN_VERB.insert(&tid(), &(verb as u32), 0);
}

/// The current thread left its verb.
#[inline(always)]
pub fn leave() {
    let _ = PIN_VERB.remove(&tid());
}

/// The current thread entered (`on`) or left a driver's doorbell-record mapping, inside its verb.
#[inline(always)]
pub fn doorbell(on: bool) {
    let t = tid();
    // SAFETY: plain data copied out.
    let now = unsafe { PIN_VERB.get(&t) }.copied().unwrap_or(0);
    let next = if on { now | DOORBELL } else { now & !DOORBELL };
    let _ = PIN_VERB.insert(&t, &next, 0);
}

/// The `purpose` word of a pin made now on this thread (0: in no hooked verb).
#[inline(always)]
pub fn current() -> u32 {
    // SAFETY: plain data copied out.
    unsafe { PIN_VERB.get(&tid()) }.copied().unwrap_or(0)
}
