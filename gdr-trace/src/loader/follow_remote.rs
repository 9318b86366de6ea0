//! The library follower in a process of its own. The tracer drops CAP_BPF, CAP_PERFMON and
//! CAP_SYS_ADMIN once its hooks are attached (`privilege::drop_after_attach`), but hooking a
//! library copy found later needs some of them (`privilege::KEPT_FOR_FOLLOWING` says which and
//! why). So, before the drop, the tracer starts a thread that keeps them while it loads the
//! programs the follower may attach (the trace does not wait: seconds under an emulated CPU),
//! then starts the follower: this very executable, exec'd (`follow-libraries`, hidden), never a
//! fork of the multithreaded tracer, inheriting only a socket (its stdin) and those programs'
//! descriptors (`prog_fds`): no other program, no link, no map but the one it reads. The thread
//! then drops its capabilities and waits for the end (the follower's parent-death signal is
//! that thread's exit), and hands the `Ebpf` back. The follower is told over the socket what it
//! starts from (`follow::Seed`, one JSON line), then which process mapped a file executable; it
//! scans, attaches and detaches (`follow::Follower`) and answers with one JSON line per copy
//! that changed. Its hooks are its own perf events: they go when it does, and it goes with the
//! tracer (end of the socket, or the parent-death signal).

use std::{
    io::{Read, Write},
    os::{
        fd::OwnedFd,
        unix::{net::UnixStream, process::CommandExt},
    },
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicBool, AtomicU32, Ordering},
        mpsc::Receiver,
        Arc,
    },
    time::Duration,
};

use aya::{
    maps::{HashMap as BpfHashMap, MapData},
    Ebpf,
};
use gdr_trace_common::maps;

use super::{
    follow::{Follower, Seed},
    map_set::MapSet,
    prog_fds::{Handed, MultiHanded, ProgFds},
    uprobe_multi,
};
use crate::facts::LibraryCopy;

/// The follower's first line: it has taken its programs and listens.
pub(super) const READY: &str = "ready";

/// What the follower reads first: its seed, the programs handed over, the tracer's pid.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct Start {
    pub seed: Seed,
    pub programs: Vec<Handed>,
    /// The dispatcher and the hooks' slots, where the kernel makes uprobe_multi links.
    pub multi: Option<MultiHanded>,
    pub provider_ops: Option<i32>,
    pub parent: u32,
}

/// The tracer's end.
pub struct Remote {
    sock: Option<UnixStream>,
    buf: Vec<u8>,
    /// The follower said it has taken its programs and listens (before that it has hooked
    /// nothing, so at the end there is nothing to wait for).
    ready: bool,
    /// Why there is no follower process (said once, as a copy-less note).
    pub unavailable: Option<String>,
    /// The follower's pid once started (0 before): one of gdr-trace's own processes, never
    /// reported.
    pid: Arc<AtomicU32>,
    /// The kernel's rate limit on "mapped a file executable" rows: a process told about is
    /// removed from it first, so a mapping made after the follower reads its maps is told again.
    pending: Option<BpfHashMap<MapData, u32, u8>>,
    /// The thread that loads the programs and starts the follower, then waits for the end
    /// (the follower's parent-death signal is that thread's exit); it hands the `Ebpf` back.
    starter: Option<Starter>,
    /// The `Ebpf`, when no thread took it.
    ebpf: Option<Ebpf>,
    /// Processes to tell the follower about once it runs.
    queued: Vec<u32>,
}

struct Starter {
    thread: Option<std::thread::JoinHandle<Ebpf>>,
    /// Stop loading (the trace ended first), or, once started, end.
    stop: Arc<AtomicBool>,
    /// Dropped at the end: the thread's wait ends.
    end: Option<std::sync::mpsc::Sender<()>>,
}

impl Drop for Starter {
    /// Whatever ends the trace (an error too) stops a load still going.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Remote {
    /// Starts, on a thread that keeps this thread's capabilities, the loading of the programs
    /// the follower may attach (seconds under an emulated CPU: the trace does not wait for it)
    /// and then the follower. Call before dropping capabilities. `kmaps`: the maps, for the
    /// follower's own-process slot and the pending rows.
    pub fn spawn(follower: &Follower, ebpf: Ebpf, kmaps: &MapSet) -> Self {
        if !follower.follows_any() {
            return Self { ebpf: Some(ebpf), ..Self::with(None, None) };
        }
        let (ours, theirs) = match UnixStream::pair() {
            Ok(p) => p,
            Err(e) => return Self { ebpf: Some(ebpf), ..Self::none(format!("socketpair: {e}")) },
        };
        let Ok(writer) = ours.try_clone() else {
            return Self { ebpf: Some(ebpf), ..Self::none("socket: no second handle".into()) };
        };
        let _ = ours.set_nonblocking(true);
        let pid = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (end, wait) = std::sync::mpsc::channel::<()>();
        let job = Job {
            programs: follower.programs(),
            seed: follower.seed(),
            own: kmaps.dup(maps::SELF_PIDS),
            // The `Ebpf` the thread gets has no map left (`MapSet::take_all`): this one is
            // handed to it.
            provider_ops: kmaps.dup(gdr_trace_common::mr::bytes::maps::PROVIDER_OPS),
            // Every map, to relocate the programs loaded for uprobe_multi links against.
            maps: (!follower.perf_uprobes_only()).then(|| kmaps.dup_all()),
            pid: pid.clone(),
            stop: stop.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("gdr-follow-start".into())
            .spawn(move || job.run(ebpf, theirs, writer, wait));
        let thread = match thread {
            Ok(t) => t,
            // The `Ebpf` went with the closure: the start's hooks are detached; said so.
            Err(e) => return Self::none(format!("thread: {e} (the start's hooks went with it)")),
        };
        let pending = kmaps.dup(maps::LIB_PENDING).and_then(|m| BpfHashMap::try_from(m).ok());
        Self {
            pid,
            pending,
            starter: Some(Starter { thread: Some(thread), stop, end: Some(end) }),
            ..Self::with(Some(ours), None)
        }
    }

    fn with(sock: Option<UnixStream>, unavailable: Option<String>) -> Self {
        Self {
            sock,
            buf: vec![],
            ready: false,
            unavailable,
            pid: Default::default(),
            pending: None,
            starter: None,
            ebpf: None,
            queued: vec![],
        }
    }

    fn none(why: String) -> Self {
        Self::with(None, Some(format!("library follower not started: {why}")))
    }

    /// The follower's pid, once it runs.
    pub fn pid(&self) -> Option<u32> {
        Some(self.pid.load(Ordering::Acquire)).filter(|p| *p != 0)
    }

    /// The end of the trace: a follower not started yet never is, and the `Ebpf` comes back
    /// (its programs' links still attached).
    pub fn end(&mut self) -> Option<Ebpf> {
        self.sock = None;
        if let Some(mut s) = self.starter.take() {
            s.stop.store(true, Ordering::Relaxed);
            s.end = None;
            return s.thread.take().and_then(|t| t.join().ok());
        }
        self.ebpf.take()
    }

    /// The kernel said `pid` mapped a file executable.
    /// Told once the follower runs (its first line must be where to start): kept until then.
    pub fn note(&mut self, pid: u32) {
        if let Some(p) = self.pending.as_mut() {
            let _ = p.remove(&pid);
        }
        // Bounded: the follower's full scan finds whatever is left out.
        if !self.queued.contains(&pid) && self.queued.len() < 4096 {
            self.queued.push(pid);
        }
        if self.pid().is_none() {
            return;
        }
        if let Some(s) = self.sock.as_mut() {
            let lines: String = self.queued.drain(..).map(|p| format!("{p}\n")).collect();
            let _ = s.write_all(lines.as_bytes());
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
    /// little for it. A follower that never said it was ready has hooked nothing and has
    /// nothing to say: not waited for.
    pub fn finish(&mut self) -> Vec<LibraryCopy> {
        if let Some(s) = &self.starter {
            s.stop.store(true, Ordering::Relaxed);
        }
        self.note(0);
        let mut out = self.take_changes();
        if self.ready {
            // Detaching takes an RCU grace period per probe: up to 3 s for the answer.
            for _ in 0..120 {
                std::thread::sleep(Duration::from_millis(25));
                out.extend(self.take_changes());
                if out.iter().any(|c| c.state == "end") {
                    break;
                }
            }
        }
        out.retain(|c| c.state != "end");
        out
    }
}

/// What the starting thread does.
struct Job {
    programs: Vec<(&'static str, bool)>,
    seed: Seed,
    /// `SELF_PIDS`, to name the follower to the kernel programs.
    own: Option<aya::maps::Map>,
    /// `PROVIDER_OPS`, which the follower reads.
    provider_ops: Option<aya::maps::Map>,
    /// The object's maps, where uprobe_multi links are tried (dropped once loaded).
    maps: Option<MapSet>,
    pid: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
}

impl Job {
    /// Loads the programs, starts the follower and tells it where to start, drops this
    /// thread's capabilities, then waits for the end; hands the `Ebpf` back.
    fn run(self, mut ebpf: Ebpf, theirs: UnixStream, writer: UnixStream, wait: Receiver<()>) -> Ebpf {
        // Only what loading takes, from the start (the follower's come from the bounding set).
        crate::privilege::narrow_this_thread(crate::privilege::FOR_LOADING);
        let child = self.start(&mut ebpf, theirs, writer);
        crate::privilege::drop_all_in_this_thread();
        if let Some(child) = child {
            // The follower goes when this thread does (its parent-death signal): at the end.
            let _ = wait.recv();
            drop(child);
        }
        ebpf
    }

    /// The follower started and told where to start; None if the trace ended first or the
    /// exec failed (said in the log).
    fn start(
        self,
        ebpf: &mut Ebpf,
        theirs: UnixStream,
        mut writer: UnixStream,
    ) -> Option<std::process::Child> {
        let multi = self.maps.and_then(|maps| {
            uprobe_multi::load(&maps, &self.programs, &self.stop)
                .inspect_err(|e| {
                    tracing::info!("library copies found after start get perf-event uprobes: {e}")
                })
                .ok()
        });
        let fds = ProgFds::local(ebpf, &self.programs, &self.stop, self.provider_ops, multi);
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let (handed, multi, provider_ops, inherit) = fds.handed();
        let child = start_process(theirs, inherit)
            .inspect_err(|e| tracing::warn!("library follower not started: {e}"))
            .ok()?;
        let pid = child.id();
        // Its reads (/proc/PID/maps, the libraries it opens) are not the workload's I/O.
        if let Some(m) = self.own {
            if let Err(e) = super::self_pids::own_process_in(m, gdr_trace_common::SELF_SLOT_FOLLOWER, pid) {
                tracing::warn!("the library follower's I/O may be reported: {e}");
            }
        }
        let start =
            Start { seed: self.seed, programs: handed, multi, provider_ops, parent: std::process::id() };
        let line = serde_json::to_string(&start).unwrap_or_default() + "\n";
        let _ = writer.write_all(line.as_bytes());
        // Then the tracer may tell it about processes (after the first line).
        self.pid.store(pid, Ordering::Release);
        Some(child)
    }
}

/// Execs this very executable as the follower: its stdin is `sock`, its stdout and stderr
/// /dev/null; of the tracer's descriptors it keeps only `raw` (the programs handed over): in the
/// child between fork and exec (async-signal-safe calls only), every descriptor from 3 up is
/// made close-on-exec (even one the tracer inherited without it), then these are cleared of it.
fn start_process(sock: UnixStream, raw: Vec<i32>) -> Result<std::process::Child, String> {
    let mut cmd = Command::new("/proc/self/exe");
    cmd.arg("follow-libraries")
        .env_clear()
        .stdin(Stdio::from(OwnedFd::from(sock)))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: runs in the forked child before exec; fcntl is async-signal-safe and `raw` was
    // allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // close_range(3, ~0, CLOSE_RANGE_CLOEXEC): Linux 5.11 and later; before, what the
            // tracer inherited without close-on-exec is inherited too.
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 1u32 << 2);
            for &fd in &raw {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| format!("exec /proc/self/exe follow-libraries: {e}"))
}
