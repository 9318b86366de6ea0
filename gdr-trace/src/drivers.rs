//! NVIDIA's GPUDirect RDMA stack, branch by branch, as data: what nvidia-peermem and nvidia.ko
//! do on each driver branch that runs in the field, read from NVIDIA's own sources
//! (NVIDIA/open-gpu-kernel-modules at the release tag of each row). `probes` and `check` name
//! the branch a machine runs ([`detect`]) and the flow expected there; the hook table's rows
//! say which branches have each function ([`Branches`]). docs/drivers.md is this table for
//! people, with the citations.
//!
//! Facts common to every row (kernel-open/nvidia/nv-p2p.c at each tag below):
//! `nvidia_p2p_get_pages` with a NULL free callback returns -EINVAL (the persistent API is the
//! only NULL-callback form); `nvidia_p2p_free_page_table` and `nvidia_p2p_free_dma_mapping`
//! are no-ops returning 0 (nvidia.ko frees the table itself after the free callback).

mod detect;
mod matrix;

pub use detect::{detect, Detected, Reading};
pub use matrix::*;

#[cfg(test)]
mod tests;
