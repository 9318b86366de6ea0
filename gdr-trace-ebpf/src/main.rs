//! gdr-trace's eBPF programs. One file per concern; each entry point is thin and delegates to
//! a `try_*` body shared by its fentry/fexit and kprobe/kretprobe variants.
//!
//! Userspace (`gdr-trace/src/hooks.rs`) holds the hook table that names every program here
//! and decides how each is attached.
#![no_std]
#![no_main]

mod capability;
mod cuda;
mod filter;
mod gpu;
mod maps;
mod rdma_core;
mod record;
mod verbs;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// GPL: the tracing helpers used here (probe_read_kernel, get_current_*) are GPL-only.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
