//! Giving freed heap back to the system.

/// Returns the allocator's free memory to the system: glibc keeps freed heap resident at its
/// high mark unless asked. Called after start-up (aya's BTF parse) and after every summary tick
/// (the interval's reports and exited processes). musl (the static release build) has no
/// `malloc_trim`; there it does nothing.
pub fn trim() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of the allocator's own heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}
