//! The verb each traced thread is in (`PIN_VERB`), for every family that sees the kernel pin
//! user memory: the queue family's verb hooks (`queues::verbs`) write it, the registration
//! hooks (`mr::rdma_core`, `mr::gpu`) read it into each pin record's `purpose`, with the device
//! number of the uverbs file the verb came through (`/dev/infiniband/uverbsN`: the RDMA device
//! by sysfs, where no BTF names `struct ib_device`).

use aya_ebpf::{helpers::bpf_get_current_pid_tgid, macros::map, maps::LruHashMap};
use gdr_trace_common::queues::{PinVerb, DOORBELL};

use crate::kernel_read::{current_regs, rdev_of, regs_arg};

/// tid -> `purpose` word (verb | DOORBELL) in the low half, the uverbs file's device number in
/// the high half, while the thread is inside a hooked verb. LRU: a return that was missed
/// (kretprobe maxactive) leaves an entry that new threads evict, and the thread's next verb
/// overwrites it.
#[map]
pub static PIN_VERB: LruHashMap<u32, u64> = LruHashMap::with_max_entries(8192, 0);

#[inline(always)]
fn tid() -> u32 {
    bpf_get_current_pid_tgid() as u32
}

/// The current thread entered `verb`: what it pins until it leaves is for that verb. Every verb
/// is a write() or an ioctl() on the uverbs file, its descriptor the system call's first
/// argument: its device number says which RDMA device.
#[inline(always)]
pub fn enter(verb: PinVerb) {
    let rdev = regs_arg(current_regs(), 0).map_or(0, rdev_of);
    let _ = PIN_VERB.insert(&tid(), &((u64::from(rdev) << 32) | verb as u64), 0);
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
    let next = if on { now | u64::from(DOORBELL) } else { now & !u64::from(DOORBELL) };
    let _ = PIN_VERB.insert(&t, &next, 0);
}

/// The `purpose` word of a pin made now on this thread (0: in no hooked verb) and the uverbs
/// file's device number (0: unknown).
#[inline(always)]
pub fn current() -> (u32, u32) {
    // SAFETY: plain data copied out.
    let v = unsafe { PIN_VERB.get(&tid()) }.copied().unwrap_or(0);
    (v as u32, (v >> 32) as u32)
}
