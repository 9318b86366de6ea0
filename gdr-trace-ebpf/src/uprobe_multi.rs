//! One program for every library hook of a copy the follower finds after start, on kernels with
//! uprobe_multi links (Linux 6.6+): a copy is then two links (its entry offsets, its return
//! offsets) instead of one perf event per offset, so releasing it waits for two grace periods,
//! outside the kernel's trace-event mutex, not for one per uprobe under it. Each offset's attach
//! cookie is the `LIB_HOOKS` slot of the hook program that offset runs; userspace loads those
//! programs for uprobe_multi and fills the slots (`gdr-trace/src/loader/uprobe_multi.rs`).

use aya_ebpf::{
    helpers::generated::bpf_get_attach_cookie,
    macros::{map, uprobe},
    maps::ProgramArray,
    programs::ProbeContext,
    EbpfContext,
};
use gdr_trace_common::MULTI_SLOTS;

/// slot -> hook program, the slot being an offset's attach cookie.
#[map]
static LIB_HOOKS: ProgramArray = ProgramArray::with_max_entries(MULTI_SLOTS, 0);

/// Runs the hook program of this offset. An empty slot runs nothing (the tracer's end).
#[uprobe]
pub fn lib_multi_dispatch(ctx: ProbeContext) -> u32 {
    // SAFETY: the helper reads the attach cookie of the running link from the context.
    let slot = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    // SAFETY: the context is this program's own; a tail call that fails returns here.
    unsafe { LIB_HOOKS.tail_call(&ctx, slot) };
    0
}
