//! Stopping fast. Releasing a tracepoint's or probe's perf event makes the kernel wait for an
//! RCU grace period under a global mutex (30-100 ms each on the build machine, one after
//! another): a tracer with some thirty hooks took about 3 s to exit after its last record.
//!
//! Once the trace has ended and its final records are written, the hooks are shared out to a
//! few child processes that hold only the descriptors that keep them attached (perf events and
//! BPF links), wait for this process to exit, and exit together: the kernel detaches them as
//! those children end, while gdr-trace has already returned to its caller. Each child holds no other
//! descriptor (not stdout: a pipeline reading gdr-trace ends when gdr-trace does). Nothing is
//! left behind: the hooks write into maps nobody reads for the second or two the child lives,
//! and are gone when it is. Imports nothing of ours.

use std::{fs::File, os::fd::AsRawFd};

/// Kinds of descriptor whose release detaches a hook.
const DETACHING: [&str; 2] = ["anon_inode:[perf_event]", "anon_inode:bpf_link"];

/// This process's descriptors that keep a hook attached.
fn detaching_fds() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return vec![] };
    dir.flatten()
        .filter_map(|e| {
            let fd: i32 = e.file_name().to_str()?.parse().ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            DETACHING.iter().any(|k| target.as_os_str() == *k).then_some(fd)
        })
        .collect()
}

/// Children the hooks are shared out to: each exits releasing its share, at the same time as
/// the others, so that grace periods the kernel does not serialize (fentry trampolines, BPF
/// links) overlap instead of following one another.
const TEARDOWN_CHILDREN: usize = 8;

/// Hands the hooks to children that release them after this process exits (see the module
/// docs); a share that cannot be handed is released here, in parallel. Call it once, at the end.
pub fn release_hooks() {
    let keep = detaching_fds();
    for share in keep.chunks(keep.len().div_ceil(TEARDOWN_CHILDREN).max(1)) {
        if !hand_to_child(share) {
            release_in_parallel(share);
        }
    }
}

fn hand_to_child(keep: &[i32]) -> bool {
    let mut p = [0i32; 2];
    // SAFETY: pipe2 fills two descriptors.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return false;
    }
    let (r, w) = (p[0], p[1]);
    // Every descriptor number the child must close, found before fork (after fork only
    // async-signal-safe calls are allowed).
    let close: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .filter(|fd| *fd != r && !keep.contains(fd))
                .collect()
        })
        .unwrap_or_default();
    // SAFETY: the child only calls close, read and _exit (async-signal-safe) before exiting.
    match unsafe { libc::fork() } {
        -1 => {
            // SAFETY: closing the pipe we made.
            unsafe {
                libc::close(r);
                libc::close(w);
            }
            false
        }
        0 => {
            // SAFETY: async-signal-safe calls only; the child never returns.
            unsafe {
                for &fd in &close {
                    libc::close(fd);
                }
                let mut b = 0u8;
                // Returns 0 when gdr-trace (the only writer) has exited.
                while libc::read(r, (&mut b as *mut u8).cast(), 1) > 0 {}
                libc::_exit(0)
            }
        }
        _ => {
            // SAFETY: our copy of the read end; the write end stays open until we exit.
            unsafe { libc::close(r) };
            true
        }
    }
}

/// Releases the descriptors from one thread each, at once; each is replaced by /dev/null
/// (`dup2`), so the number stays valid for its owner's later close.
fn release_in_parallel(fds: &[i32]) {
    release_in_threads(fds, fds.len());
}

/// Threads the library follower releases its hooks from at its end ([`release_all_here`]):
/// links released together share grace periods (9,968 copies' 19,936 uprobe_multi links took
/// 22 s from 64 threads here, 5.6 s from 256, 16 minutes one after another).
pub const FOLLOWER_RELEASE_THREADS: usize = 256;

/// Each releasing thread's stack: it only calls dup2.
const RELEASE_STACK: usize = 64 << 10;

/// Releases every hook this process holds from up to `threads` threads at once, in place (the
/// library follower's end: thousands of uprobe_multi links, whose grace periods overlap when
/// released together).
pub fn release_all_here(threads: usize) {
    release_in_threads(&detaching_fds(), threads);
}

/// `fds` shared out to up to `threads` threads, each replacing its share by /dev/null (`dup2`)
/// one after another.
fn release_in_threads(fds: &[i32], threads: usize) {
    let Ok(null) = File::open("/dev/null") else { return };
    let null = null.as_raw_fd();
    std::thread::scope(|s| {
        for share in fds.chunks(fds.len().div_ceil(threads.max(1)).max(1)) {
            let release = move || {
                for &fd in share {
                    // SAFETY: dup2 onto a descriptor this process owns.
                    unsafe { libc::dup2(null, fd) };
                }
            };
            // A thread that cannot start leaves its share to this one.
            let builder = std::thread::Builder::new().stack_size(RELEASE_STACK);
            if builder.spawn_scoped(s, release).is_err() {
                release();
            }
        }
    });
}
