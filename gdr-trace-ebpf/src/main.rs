//! gdr-trace's eBPF programs: one folder per evidence family (`mr/`, `storage/`, `p2p/`, `queues/`, as in
//! gdr-trace/src), shared pieces at the top, one file per concern; each entry point is thin and delegates to
//! a `try_*` body shared by its fentry/fexit and kprobe/kretprobe variants.
//!
//! Userspace (`gdr-trace/src/hooks.rs`) holds the hook table that names every program here
//! and decides how each is attached.
#![no_std]
#![no_main]
// Atomic adds on map values (`storage::maps::add`): `AtomicU64::fetch_add` is not offered on BPF.
#![feature(core_intrinsics)]
#![allow(internal_features)]

// Shared by every family: maps, records, the traced-process filter, budgets, stashes, kernel reads.
mod budget;
mod capability;
mod filter;
mod kernel_read;
mod libmap;
mod lifecycle;
mod maps;
mod pin_verb;
mod record;
mod runtime;
mod share;
mod stash;
mod tenant;
mod uprobe_multi;

// One folder per evidence family, as in gdr-trace/src: mr/, storage/, p2p/, queues/.
mod mr;
mod p2p;
mod queues;
mod storage;
