//! Storage (the GDS family; userspace: `gdr-trace/src/storage/`): POSIX I/O and page-cache fills
//! (`file_io`, `batch`, `uring`), each tenant's share of the file table (`file_budget`),
//! nvidia-fs in the kernel (`nvfs`, `nvfs_async`), libcufile from userspace (`cufile`,
//! `cufile_ret`), and the maps and helpers they share (`maps`).

pub mod batch;
pub mod cufile;
pub mod cufile_ret;
pub mod file_budget;
pub mod file_io;
pub mod maps;
pub mod nvfs;
pub mod nvfs_async;
pub mod uring;
