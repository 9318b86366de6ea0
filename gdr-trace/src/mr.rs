//! The memory-registration family: what each MR of each process is and what moved through it.
//! Records of one registration from several hooks are joined into one (`correlate`), given a
//! verdict (`classify`) and summed per process (`aggregate`), with the bytes each MR's work
//! requests moved (`bytes`). Pure analysis, as its siblings `storage` and `p2p`: typed events
//! in, reports out; no BPF, no /proc.

pub mod aggregate;
pub mod bytes;
pub mod classify;
pub mod correlate;
