//! What every eBPF object of this crate needs (gdr-trace's and the benchmark floor's): a panic
//! handler (never reached: the verifier admits no panic path) and the license section.

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// GPL: the tracing helpers used here (probe_read_kernel, get_current_*) are GPL-only.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
