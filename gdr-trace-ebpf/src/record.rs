//! Filling and sending records.

use aya_ebpf::helpers::{
    bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
    bpf_get_current_uid_gid, bpf_ktime_get_ns,
};
use gdr_trace_common::{lost, AttachKind, EventHeader, EventKind, HookId, MrEvent};

use crate::maps::{count_lost, EVENTS};

#[inline(always)]
pub fn header(kind: EventKind, hook: HookId, attach: AttachKind) -> EventHeader {
    let pid_tgid = bpf_get_current_pid_tgid();
    EventHeader {
        kind: kind as u32,
        hook: hook as u32,
        attach: attach as u32,
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        uid: bpf_get_current_uid_gid() as u32,
        // SAFETY: helpers without arguments.
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
        ts_ns: unsafe { bpf_ktime_get_ns() },
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
    }
}

/// Sends an MR record; counts it as lost when the ring buffer is full.
#[inline(always)]
pub fn send_mr(ev: &MrEvent) {
    match EVENTS.reserve::<MrEvent>(0) {
        Some(mut entry) => {
            entry.write(*ev);
            entry.submit(0);
        }
        None => count_lost(lost::RINGBUF_FULL),
    }
}
