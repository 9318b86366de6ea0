//! GPU↔GPU copies and CUDA host memory (the P2P family; userspace: `gdr-trace/src/p2p/`):
//! libcuda's control calls and copies (`cuda`), what the kernel keeps of libcuda's state
//! (`state`), nvidia.ko's pinned host memory (`nv_host`), and copies staged through host
//! memory (`staged`).

pub mod cuda;
pub mod nv_host;
pub mod staged;
pub mod state;
