//! The library follower in a process of its own. The tracer drops CAP_BPF, CAP_PERFMON and
//! CAP_SYS_ADMIN once its hooks are attached (`privilege::drop_after_attach`), but hooking a
//! library copy found later needs some of them (`privilege::KEPT_FOR_FOLLOWING` says which and
//! why). So, before the drop, the tracer forks a follower that keeps those and the loaded
//! programs, and does nothing else: it is told over a socket
//! which process mapped a file executable, scans, attaches and detaches (`follow::Follower`),
//! and answers with one JSON line per copy that changed. Its hooks are its own descriptors:
//! they go when it does, and it goes with the tracer (end of the socket, or the parent-death
//! signal). The tracer's hooks, which came with the fork, it closes at once.

use std::{
    io::{Read, Write},
    os::unix::net::UnixStream,
    time::Duration,
};

use aya::Ebpf;

use super::follow::Follower;
use crate::facts::LibraryCopy;

/// The follower's first line: its programs are loaded and it listens.
const READY: &str = "ready";

/// The tracer's end.
pub struct Remote {
    sock: Option<UnixStream>,
    buf: Vec<u8>,
    /// The follower said it has loaded its programs and listens (before that it has hooked
    /// nothing, so at the end there is nothing to wait for).
    ready: bool,
    /// Why there is no follower process (said once, as a copy-less note).
    pub unavailable: Option<String>,
    /// The follower's pid: one of gdr-trace's own processes, never reported.
    pub pid: Option<u32>,
}

impl Remote {
    /// Forks the follower. Call before dropping capabilities, with no other thread holding a
    /// lock the follower needs (the trace loop's start: the loader's threads are joined).
    pub fn spawn(follower: &mut Follower, ebpf: &mut Ebpf) -> Self {
        if !follower.follows_any() {
            return Self::with(None, None);
        }
        let (ours, theirs) = match UnixStream::pair() {
            Ok(p) => p,
            Err(e) => return Self::none(format!("socketpair: {e}")),
        };
        let parent = std::process::id();
        // SAFETY: fork; the child runs only the follower and exits without returning.
        match unsafe { libc::fork() } {
            -1 => Self::none(format!("fork: {}", std::io::Error::last_os_error())),
            0 => {
                drop(ours);
                child(follower, ebpf, theirs, parent)
            }
            pid => {
                drop(theirs);
                let _ = ours.set_nonblocking(true);
                // Its reads (/proc/PID/maps, BTF, kallsyms) are not the workload's I/O.
                let pid = pid as u32;
                if let Err(e) = super::self_pids::own_process(ebpf, gdr_trace_common::SELF_SLOT_FOLLOWER, pid)
                {
                    tracing::warn!("the library follower's I/O may be reported: {e}");
                }
                Self { pid: Some(pid), ..Self::with(Some(ours), None) }
            }
        }
    }

    fn with(sock: Option<UnixStream>, unavailable: Option<String>) -> Self {
        Self { sock, buf: vec![], ready: false, unavailable, pid: None }
    }

    fn none(why: String) -> Self {
        Self::with(None, Some(format!("library follower not started: {why}")))
    }

    /// The kernel said `pid` mapped a file executable.
    pub fn note(&mut self, pid: u32) {
        if let Some(s) = self.sock.as_mut() {
            let _ = s.write_all(format!("{pid}\n").as_bytes());
        }
    }

    /// The copies the follower attached, failed on or let go since the last call.
    pub fn take_changes(&mut self) -> Vec<LibraryCopy> {
        let Some(s) = self.sock.as_mut() else { return vec![] };
        let mut chunk = [0u8; 8192];
        loop {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
        let Some(end) = self.buf.iter().rposition(|b| *b == b'\n') else { return vec![] };
        let lines: Vec<u8> = self.buf.drain(..=end).collect();
        let mut out: Vec<LibraryCopy> =
            lines.split(|b| *b == b'\n').filter_map(|l| serde_json::from_slice(l).ok()).collect();
        if out.iter().any(|c| c.state == READY) {
            self.ready = true;
            out.retain(|c| c.state != READY);
        }
        out
    }

    /// Asks the follower for its last word (copies of exited processes let go) and waits a
    /// little for it.
    /// A follower still loading its programs (seconds under an emulated CPU) has hooked no
    /// copy and has nothing to say: not waited for.
    pub fn finish(&mut self) -> Vec<LibraryCopy> {
        self.note(0);
        let mut out = self.take_changes();
        if !self.ready {
            return out;
        }
        // Detaching takes an RCU grace period per probe: up to 3 s for the answer.
        for _ in 0..120 {
            std::thread::sleep(Duration::from_millis(25));
            out.extend(self.take_changes());
            if out.iter().any(|c| c.state == "end") {
                break;
            }
        }
        out.retain(|c| c.state != "end");
        out
    }
}

/// The tracer's own hooks (its perf events and BPF links) came with the fork: closed here, so
/// that only the tracer holds them. Held here too, the follower's exit would release whatever
/// the tracer had already let go (a grace period each, 70-180 ms: seconds for a start's hooks,
/// docs/performance.md) and keep a hooked kernel module in use until then. The follower never
/// touches those links (copies found at start stay hooked; it detaches only its own), and it
/// ends with `_exit`, so nothing of its copy of the loader uses the numbers closed here.
fn close_inherited_hooks() {
    for fd in crate::teardown::detaching_fds() {
        // SAFETY: closes a descriptor this process holds and will not use.
        unsafe { libc::close(fd) };
    }
}

fn child(follower: &mut Follower, ebpf: &mut Ebpf, mut sock: UnixStream, parent: u32) -> ! {
    // SAFETY: plain prctl/getppid/dup2/open calls; then the follower's own work, which
    // touches no lock another thread of the tracer could have held at fork (it does not log).
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
        if libc::getppid() as u32 != parent {
            libc::_exit(0);
        }
        // Not the tracer's output: a reader of it must see its end when the tracer ends.
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        for fd in 0..3 {
            libc::dup2(null, fd);
        }
    }
    close_inherited_hooks();
    let _ = crate::privilege::drop_for_following();
    follower.preload(ebpf);
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
        follower.tick(ebpf);
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
        follower.release(ebpf);
    }
    // SAFETY: ends the follower; its descriptors (and so its hooks) go with it.
    unsafe { libc::_exit(0) }
}
