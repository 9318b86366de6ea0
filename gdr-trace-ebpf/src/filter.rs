//! Which processes are traced: all, or the attached one and the children it forks after attach
//! (followed in the kernel by `lifecycle.rs`, so a short-lived child is never missed).

use aya_ebpf::helpers::bpf_get_current_pid_tgid;

use crate::maps::{SELF_PIDS, TRACKED};

/// 1 when only `TRACKED` processes are traced (`gdr-trace attach`).
#[unsafe(no_mangle)]
static FILTER_PIDS: u32 = 0;

/// gdr-trace's own tgid: never traced (its reads of /proc and its output are not the
/// workload's file I/O).
#[unsafe(no_mangle)]
static SELF_TGID: u32 = 0;

#[inline(always)]
pub fn filtering() -> bool {
    // SAFETY: a read-only global patched by the loader.
    unsafe { core::ptr::read_volatile(&FILTER_PIDS) != 0 }
}

/// Whether the current process is traced. Returns its tgid when it is.
#[inline(always)]
pub fn current_traced() -> Option<u32> {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: a read-only global patched by the loader.
    if tgid == unsafe { core::ptr::read_volatile(&SELF_TGID) } || own(tgid) {
        return None;
    }
    if !filtering() {
        return Some(tgid);
    }
    // SAFETY: value is a plain u8.
    unsafe { TRACKED.get(&tgid) }.map(|_| tgid)
}

/// One of gdr-trace's other processes (`SELF_PIDS`; array lookups are inlined: cheap).
#[inline(always)]
fn own(tgid: u32) -> bool {
    // Unrolled (`SELF_SLOTS` is 2): no loop for the verifier.
    let is = |i: u32| SELF_PIDS.get(i).is_some_and(|&p| p != 0 && p == tgid);
    is(0) || is(1)
}
