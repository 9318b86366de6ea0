//! The library follower's own process (`gdr-trace follow-libraries`, exec'd by the tracer's
//! starting thread, `follow_remote`): told where to start on its stdin, a socket, then which
//! processes mapped a file executable; answers with the copies it attached, failed on or let go.

use std::{
    io::{Read, Write},
    os::{
        fd::{FromRawFd, OwnedFd},
        unix::net::UnixStream,
    },
    time::Duration,
};

use super::{
    follow::Follower,
    follow_remote::{Start, READY},
    prog_fds::ProgFds,
};
use crate::facts::LibraryCopy;

/// The follower's process (`gdr-trace follow-libraries`, run only by the tracer): reads its
/// start from stdin, then follows until the socket ends. Exit code 0, or 2 when it was not
/// started by a tracer.
pub fn run_child() -> u8 {
    // SAFETY: a plain prctl call: the tracer's comm, not "exe".
    unsafe { libc::prctl(libc::PR_SET_NAME, c"gdr-trace".as_ptr() as libc::c_ulong, 0, 0, 0) };
    // SAFETY: fd 0 is the socket the tracer made this process's stdin; nothing else owns it.
    let mut sock = unsafe { UnixStream::from(OwnedFd::from_raw_fd(0)) };
    let Some(start) = read_start(&mut sock) else { return 2 };
    // SAFETY: the descriptors the tracer handed over, inherited across exec, adopted once.
    let fds = unsafe { ProgFds::adopt(&start.programs, start.multi.as_ref(), start.provider_ops) };
    raise_open_files();
    let _ = crate::privilege::drop_for_following();
    // Set after the change of uid (which clears it); the tracer may have gone before.
    // SAFETY: plain prctl/getppid calls.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
        if libc::getppid() as u32 != start.parent {
            return 0;
        }
    }
    let mut follower = Follower::from_seed(start.seed);
    follow(&mut follower, &fds, sock);
    // Every hook released at once, from threads of their own: their grace periods overlap
    // where the kernel lets them (uprobe_multi links) instead of following one another.
    crate::teardown::release_all_here(crate::teardown::FOLLOWER_RELEASE_THREADS);
    0
}

/// A descriptor per hook (a link, or a perf event per uprobe) and per file being parsed: the
/// soft limit on open files goes up to the hard one (a default soft limit of 1,024 would end
/// the follower's hooking well before `--max-uprobes`).
fn raise_open_files() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// The first line: what the tracer says to start from. None if it isn't one (not started by
/// a tracer).
fn read_start(sock: &mut UnixStream) -> Option<Start> {
    let _ = sock.set_read_timeout(Some(Duration::from_secs(10)));
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.len() < 1 << 20 {
        match sock.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => return serde_json::from_slice(&line).ok(),
            Ok(1) => line.push(byte[0]),
            _ => return None,
        }
    }
    None
}

/// Follows until the socket ends: pids in, changed copies out.
fn follow(follower: &mut Follower, fds: &ProgFds, mut sock: UnixStream) {
    let ready = LibraryCopy { state: READY.into(), ..Default::default() };
    let _ = sock.write_all(format!("{}\n", serde_json::to_string(&ready).unwrap_or_default()).as_bytes());
    let _ = sock.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let mut end = false;
        match sock.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
        while let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=i).collect();
            match std::str::from_utf8(&line).ok().and_then(|l| l.trim().parse::<u32>().ok()) {
                Some(0) => end = true,
                Some(pid) => follower.note(pid),
                None => {}
            }
        }
        follower.tick(fds);
        let mut out = String::new();
        for c in follower.take_changes() {
            out.push_str(&serde_json::to_string(&c).unwrap_or_default());
            out.push('\n');
        }
        if end {
            let last = LibraryCopy { state: "end".into(), ..Default::default() };
            out.push_str(&serde_json::to_string(&last).unwrap_or_default());
            out.push('\n');
        }
        if !out.is_empty() && sock.write_all(out.as_bytes()).is_err() {
            break;
        }
        // Told first, then the grace periods.
        follower.release();
    }
}
