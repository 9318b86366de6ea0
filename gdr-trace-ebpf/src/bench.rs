//! The benchmark's floor: programs that do nothing, attached (by `gdr-bench-floor`, never by
//! gdr-trace) to the same hook and through the same loader as gdr-trace's pread program, so
//! `cargo xtask bench` can tell the hook mechanism's cost from the work gdr-trace does.

use aya_ebpf::{
    macros::{fexit, tracepoint},
    programs::{FExitContext, TracePointContext},
};

#[tracepoint]
pub fn bench_floor_tp(_ctx: TracePointContext) -> u32 {
    0
}

#[fexit]
pub fn bench_floor_fexit(_ctx: FExitContext) -> i32 {
    0
}
