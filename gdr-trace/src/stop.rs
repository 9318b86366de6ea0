//! How a trace is asked to stop, from the first instruction of a tracing command to its last:
//! SIGINT, SIGTERM and SIGHUP (a service manager, Kubernetes, a closed terminal), or its output
//! going away (`gdr-trace watch | head -1`). `install` runs before anything else a tracing
//! command does, so a signal during start-up (BTF, attach) is never the default action that
//! kills the process between two attaches: it is remembered, and the trace loop ends as soon as
//! it starts, with its final summary and exit 0. A second signal while already stopping takes
//! its default action (a stuck stop can still be interrupted). Imports nothing of ours.

use std::{
    fs::File,
    io::Read,
    os::fd::{FromRawFd, OwnedFd},
    sync::{
        atomic::{AtomicI32, Ordering},
        OnceLock,
    },
};

/// Why the trace was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Interrupted,
    Terminated,
    HungUp,
    /// Writing the output failed with EPIPE: its reader is gone.
    OutputClosed,
    /// A gate (`attach --expect`) has its answer.
    Decided,
}

/// What `STOP` holds when the output closed (signals are stored by number).
const OUTPUT_CLOSED: i32 = -1;
/// What `STOP` holds when a gate decided.
const DECIDED: i32 = -2;

/// 0 until a stop is requested; then the signal number, or `OUTPUT_CLOSED`.
static STOP: AtomicI32 = AtomicI32::new(0);
/// The write end of the wake-up pipe (-1 before `install`), written by the signal handler.
static WAKE_WR: AtomicI32 = AtomicI32::new(-1);
/// The read end, polled by the trace loop.
static WAKE_RD: OnceLock<Option<OwnedFd>> = OnceLock::new();

/// Installs the handlers for SIGINT, SIGTERM and SIGHUP and ignores SIGPIPE (a write to a
/// closed pipe then fails with EPIPE, which the sinks report through [`output_closed`]).
/// Idempotent; call it first thing in a command that traces.
pub fn install() {
    WAKE_RD.get_or_init(|| {
        let mut p = [-1i32; 2];
        // SAFETY: pipe2 fills two descriptors.
        let piped = unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } == 0;
        if piped {
            WAKE_WR.store(p[1], Ordering::SeqCst);
        }
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: the action only uses atomics and async-signal-safe calls (write, signal,
            // raise).
            let r = unsafe { signal_hook_registry::register(sig, move || on_signal(sig)) };
            if let Err(e) = r {
                tracing::warn!("cannot handle signal {sig}: {e}");
            }
        }
        // SAFETY: setting a disposition; no handler involved.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        // SAFETY: p[0] is a fresh descriptor this process owns.
        piped.then(|| unsafe { OwnedFd::from_raw_fd(p[0]) })
    });
}

/// The signal action: remember the first stop; a second signal takes its default action.
fn on_signal(sig: i32) {
    match STOP.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => wake(),
        Err(prev) if prev > 0 => {
            // SAFETY: async-signal-safe calls; the signal is blocked until this handler returns.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
        }
        Err(_) => wake(),
    }
}

fn wake() {
    let fd = WAKE_WR.load(Ordering::SeqCst);
    if fd >= 0 {
        let b = 1u8;
        // SAFETY: a one-byte write to our own non-blocking pipe; a full pipe already wakes.
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
}

/// The output's reader is gone (EPIPE): stop the trace (a signal that came first wins).
pub fn output_closed() {
    if STOP.compare_exchange(0, OUTPUT_CLOSED, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
        wake();
    }
}

/// Whether stdout's reader is gone without a write to tell: a pipe whose read end is closed
/// reports POLLERR on the write end. The trace loop asks every 250 ms, so `watch --json | head -1`
/// on an idle node ends too, not only at its next record.
pub fn check_stdout() {
    let mut p = libc::pollfd { fd: 1, events: 0, revents: 0 };
    // SAFETY: poll(2) on one valid pollfd, without waiting.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    if n == 1 && p.revents & libc::POLLERR != 0 {
        output_closed();
    }
}

/// A gate has its answer: stop the trace (a signal that came first wins).
pub fn decided() {
    if STOP.compare_exchange(0, DECIDED, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
        wake();
    }
}

/// Whether a stop has been requested, and why.
pub fn requested() -> Option<Stop> {
    match STOP.load(Ordering::SeqCst) {
        0 => None,
        OUTPUT_CLOSED => Some(Stop::OutputClosed),
        DECIDED => Some(Stop::Decided),
        libc::SIGINT => Some(Stop::Interrupted),
        libc::SIGHUP => Some(Stop::HungUp),
        _ => Some(Stop::Terminated),
    }
}

/// Completes when a stop is requested (at once if one already was, during start-up).
pub async fn wait() -> Stop {
    install();
    let fd = WAKE_RD.get().and_then(Option::as_ref).and_then(|fd| fd.try_clone().ok()).and_then(|fd| {
        // SAFETY: the File owns the duplicated descriptor for as long as the AsyncFd lives.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(File::from(fd), tokio::io::Interest::READABLE)
        }
        .ok()
    });
    let Some(mut fd) = fd else {
        // No pipe (descriptors exhausted): look every 100 ms.
        loop {
            if let Some(s) = requested() {
                return s;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    loop {
        if let Some(s) = requested() {
            return s;
        }
        let Ok(mut guard) = fd.readable_mut().await else {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
        let mut buf = [0u8; 64];
        while matches!(guard.get_inner_mut().read(&mut buf), Ok(n) if n > 0) {}
        guard.clear_ready();
    }
}

/// Writes one line and flushes; a reader that went away (EPIPE) stops the trace. Other write
/// errors are ignored here (the output is best effort; the trace goes on).
pub fn write_line(out: &mut dyn std::io::Write, line: &str) {
    let r = writeln!(out, "{line}").and_then(|_| out.flush());
    if r.is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) {
        output_closed();
    }
}
