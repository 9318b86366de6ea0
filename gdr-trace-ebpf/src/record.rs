//! Filling and sending records. Records are filled in place in the ring buffer (no large stack
//! copies: the verifier rejects byte-wise copies of spilled registers on older kernels).

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_get_current_uid_gid, bpf_ktime_get_ns,
        generated::bpf_get_current_comm,
    },
    EbpfContext,
};
use gdr_trace_common::{lost, AttachKind, EventHeader, EventKind, HookId, MrEvent, COMM_LEN};

use crate::maps::{count_lost, EVENTS};

#[inline(always)]
pub fn fill_header(h: &mut EventHeader, kind: EventKind, hook: HookId, attach: AttachKind) {
    let pid_tgid = bpf_get_current_pid_tgid();
    h.kind = kind as u32;
    h.hook = hook as u32;
    h.attach = attach as u32;
    h.pid = (pid_tgid >> 32) as u32;
    h.tid = pid_tgid as u32;
    h.uid = bpf_get_current_uid_gid() as u32;
    // SAFETY: helpers writing into memory we own.
    unsafe {
        h.cgroup_id = bpf_get_current_cgroup_id();
        h.ts_ns = bpf_ktime_get_ns();
        bpf_get_current_comm(h.comm.as_mut_ptr().cast(), COMM_LEN as u32);
    }
}

/// Reserves an MR record, fills the header, lets `fill` write the payload, sends it; counts it
/// as lost when the ring buffer is full or its user is over budget.
#[inline(always)]
pub fn send_mr(kind: EventKind, hook: HookId, attach: AttachKind, fill: impl FnOnce(&mut MrEvent)) {
    if !crate::budget::admit() {
        return;
    }
    let Some(mut entry) = EVENTS.reserve::<MrEvent>(0) else {
        count_lost(lost::RINGBUF_FULL);
        return;
    };
    // SAFETY: the reservation is sized for MrEvent; every field is written below.
    let ev = unsafe { &mut *entry.as_mut_ptr() };
    ev.addr = 0;
    ev.length = 0;
    ev.iova = 0;
    ev.handle = 0;
    ev.ret = 0;
    ev.aux = 0;
    ev.access = 0;
    ev.lkey = 0;
    ev.dev = 0;
    ev.purpose = 0;
    ev.uverbs_dev = 0;
    ev._pad1 = 0;
    ev.device[0] = 0;
    ev.label[0] = 0;
    ev.bytes_out = 0;
    ev.bytes_in = 0;
    ev.ops = 0;
    ev.wr_seen = 0;
    fill_header(&mut ev.hdr, kind, hook, attach);
    fill(ev);
    entry.submit(0);
}

/// Argument `n` of a tracing (fentry/fexit) program as a plain number. Reading the context
/// directly would give the verifier a typed kernel pointer, which it won't let us copy around.
#[inline(always)]
pub fn tracing_arg<C: EbpfContext>(ctx: &C, n: usize) -> u64 {
    // The context of a tracing program is an array of u64 arguments (read without a branch).
    crate::kernel_read::read_kernel_or_zero::<u64>(ctx.as_ptr() as u64 + 8 * n as u64)
}
