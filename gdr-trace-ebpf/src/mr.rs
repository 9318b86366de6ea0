//! Registrations (the MR family; userspace: `gdr-trace/src/mr/`): libibverbs' registration calls
//! (`verbs`), the kernel RDMA core's umems (`rdma_core`), the GPU path of peer memory and
//! nvidia.ko's P2P API (`gpu`), libcuda's dma-buf export (`gpu_dmabuf`), and the bytes work
//! requests move through each MR (`bytes`, `wr_api`).

pub mod byte_maps;
pub mod bytes;
pub mod gpu;
pub mod gpu_dmabuf;
pub mod rdma_core;
pub mod verbs;
pub mod wr_api;
