//! The benchmark's floor, an eBPF object of its own (never in gdr-trace's): programs that do
//! nothing, attached by `gdr-bench-floor` to the same hooks gdr-trace uses, so `cargo xtask
//! bench` can tell the hook mechanism's cost from the work gdr-trace's programs do.
//! - `bench_floor_tp`, `bench_floor_fexit`: the pread64 exit hook (tracepoint or fexit);
//! - `bench_floor_uprobe`: an empty uprobe, the floor of a per-call user probe (the byte
//!   counters on a provider's post_send, for instance).
#![no_std]
#![no_main]

mod runtime;

use aya_ebpf::{
    macros::{fexit, tracepoint, uprobe},
    programs::{FExitContext, ProbeContext, TracePointContext},
};

#[tracepoint]
pub fn bench_floor_tp(_ctx: TracePointContext) -> u32 {
    0
}

#[fexit]
pub fn bench_floor_fexit(_ctx: FExitContext) -> i32 {
    0
}

#[uprobe]
pub fn bench_floor_uprobe(_ctx: ProbeContext) -> u32 {
    0
}
