//! Traced processes coming and going: forks of a traced process join the traced set (`attach`),
//! and an exiting task leaves it, with the user calls it left in flight; a traced process's
//! exit is told to userspace.

use aya_ebpf::{helpers::bpf_get_current_pid_tgid, macros::tracepoint, programs::TracePointContext};

use gdr_trace_common::{lost, AttachKind, EventHeader, EventKind, HookId};

use crate::{
    filter::{current_traced, filtering},
    maps::{count_lost, EVENTS, TRACKED},
    record::fill_header,
};

/// Offset of `child_pid` in the `sched_process_fork` record, read by userspace from the
/// tracepoint's format file.
#[unsafe(no_mangle)]
static FORK_CHILD_PID_OFF: u32 = 44;

#[tracepoint(category = "sched", name = "sched_process_fork")]
pub fn track_sched_process_fork(ctx: TracePointContext) -> u32 {
    if filtering() {
        let _ = try_track_fork(&ctx);
    }
    0
}

fn try_track_fork(ctx: &TracePointContext) -> Result<(), i64> {
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: u8 value.
    if unsafe { TRACKED.get(&parent) }.is_none() {
        return Ok(());
    }
    // SAFETY: read-only global.
    let off = unsafe { core::ptr::read_volatile(&FORK_CHILD_PID_OFF) } as usize;
    // SAFETY: the offset comes from the tracepoint's own format file.
    let child: i32 = unsafe { ctx.read_at(off) }.map_err(|e| e as i64)?;
    // A new thread's tid is inserted too; it never matches a tgid lookup, and it leaves with
    // the thread (below). A full map means an untraced child: counted as a loss, not ignored.
    TRACKED.insert(&(child as u32), &1, 0).map_err(|e| {
        count_lost(lost::TRACKED_FULL);
        e as i64
    })
}

/// A traced task exits: its entry goes (pids are reused; the map is bounded), and so do the
/// calls it left in flight (a thread may exit inside a hooked user call). When it is a
/// traced process's thread-group leader, userspace is told (a header-only record), so that
/// what it keeps per process can go too.
#[tracepoint(category = "sched", name = "sched_process_exit")]
pub fn untrack_sched_process_exit(_ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let (tgid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    let traced = current_traced().is_some();
    if traced {
        crate::stash::forget_thread(tid);
        crate::storage::maps::forget_thread(tid);
        crate::p2p::state::forget_thread(pid_tgid);
    }
    // nvidia-fs calls are kept for every thread, traced or not (storage::nvfs).
    crate::storage::nvfs::forget_thread(tid);
    if tgid == tid && traced {
        crate::mr::byte_maps::forget_process(tgid);
        match EVENTS.reserve::<EventHeader>(0) {
            Some(mut entry) => {
                // SAFETY: the reservation is sized for the header; fill_header writes every field.
                fill_header(
                    unsafe { &mut *entry.as_mut_ptr() },
                    EventKind::ProcessExit,
                    HookId::SchedProcessExit,
                    AttachKind::Tracepoint,
                );
                entry.submit(0);
            }
            None => count_lost(lost::RINGBUF_FULL),
        }
    }
    if filtering() {
        let _ = TRACKED.remove(&tid);
    }
    0
}
