//! gdr-trace's own processes besides the tracer (the library follower, the provider lookup at
//! start), named to the kernel programs so that their I/O is never reported as a workload's.

use aya::Ebpf;

/// Tells the kernel programs that `pid` is one of gdr-trace's own processes (`SELF_PIDS` slot
/// `slot`; 0: none there).
pub fn own_process(ebpf: &mut Ebpf, slot: u32, pid: u32) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let map = ebpf.map_mut(gdr_trace_common::maps::SELF_PIDS).context("SELF_PIDS map missing")?;
    let mut own: aya::maps::Array<_, u32> = aya::maps::Array::try_from(map)?;
    own.set(slot, pid, 0)?;
    Ok(())
}

/// [`own_process`] through the map itself (a handle of its own, on another thread).
pub fn own_process_in(map: aya::maps::Map, slot: u32, pid: u32) -> anyhow::Result<()> {
    let mut own: aya::maps::Array<_, u32> = aya::maps::Array::try_from(map)?;
    own.set(slot, pid, 0)?;
    Ok(())
}
