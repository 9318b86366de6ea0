//! gdr-trace's eBPF programs. One file per concern; each entry point is thin and delegates to
//! a `try_*` body shared by its fentry/fexit and kprobe/kretprobe variants.
//!
//! Userspace (`gdr-trace/src/hooks.rs`) holds the hook table that names every program here
//! and decides how each is attached.
#![no_std]
#![no_main]
// Atomic adds on map values (`storage_maps::add`): `AtomicU64::fetch_add` is not offered on BPF.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod budget;
mod bytes;
mod capability;
mod cufile;
mod cufile_ret;
mod file_budget;
mod filter;
mod gpu;
mod gpu_dmabuf;
mod libmap;
mod lifecycle;
mod maps;
mod nv_host;
mod nvfs;
mod nvfs_async;
mod p2p;
mod p2p_state;
mod rdma_core;
mod record;
mod runtime;
mod staged;
mod stash;
mod storage;
mod storage_batch;
mod storage_maps;
mod uring;
mod verbs;
mod wr_api;
