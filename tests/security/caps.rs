//! Finding 4: once its programs are attached, the tracer keeps only what reading /proc needs,
//! in every thread (the HTTP thread, started before the attach, holds none).

use gdr_trace_tests::{
    prom::{free_port, http_get},
    Tracer,
};

/// CAP_DAC_READ_SEARCH | CAP_SYS_PTRACE.
const KEPT: u64 = (1 << 2) | (1 << 19);

fn caps(status: &str, field: &str) -> u64 {
    let v =
        status.lines().find_map(|l| l.strip_prefix(field)).unwrap_or_else(|| panic!("{field} in {status}"));
    u64::from_str_radix(v.trim(), 16).unwrap()
}

/// (tid, name, CapEff, CapPrm) of every thread of `pid`.
pub fn thread_caps(pid: u32) -> Vec<(String, String, u64, u64)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| {
            let status = std::fs::read_to_string(t.path().join("status")).ok()?;
            let name = status.lines().next().unwrap_or("").to_string();
            Some((
                t.file_name().to_string_lossy().into_owned(),
                name,
                caps(&status, "CapEff:"),
                caps(&status, "CapPrm:"),
            ))
        })
        .collect()
}

#[test]
fn serve_keeps_only_proc_reading_capabilities_once_tracing() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut t = Tracer::spawn(&["serve", "--json", "--listen", &addr, "--interval", "1"].map(String::from));
    assert!(t.attached("ibv_reg_mr").is_some(), "{}", t.hooks);
    let threads = thread_caps(t.child.id());
    assert!(threads.len() >= 2, "main and HTTP threads at least: {threads:?}");
    for (tid, name, eff, prm) in &threads {
        assert_eq!(eff & !KEPT, 0, "thread {tid} ({name}) CapEff {eff:#x}: more than {KEPT:#x}");
        assert_eq!(prm & !KEPT, 0, "thread {tid} ({name}) CapPrm {prm:#x}: more than {KEPT:#x}");
    }
    // Still serving, still tracing.
    let (status, _, body) = http_get(&addr, "/healthz").unwrap();
    assert_eq!(status, 200, "{body}");
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(t.child.id() as i32, libc::SIGTERM) }, 0);
    t.finish();
}

/// The library follower (a process of the tracer's own) parses other users' ELF files: it keeps
/// only what reading /proc and attaching uprobes take, and no_new_privs.
#[test]
fn the_library_follower_keeps_only_its_capabilities() {
    let mut t = Tracer::spawn(&["watch", "--json", "--interval", "1"].map(String::from));
    let tracer = t.child.id();
    let children = std::fs::read_to_string(format!("/proc/{tracer}/task/{tracer}/children")).unwrap();
    let follower: Vec<u32> = children
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "gdr-trace"))
        .collect();
    assert_eq!(follower.len(), 1, "one follower among {children:?}");
    // It drops its capabilities right after the fork: wait until it has (or 10 s have gone).
    let kept = gdr_trace::privilege::KEPT_FOR_FOLLOWING;
    let read = || std::fs::read_to_string(format!("/proc/{}/status", follower[0])).unwrap();
    let mut status = read();
    for _ in 0..200 {
        if caps(&status, "CapPrm:") & !kept == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        status = read();
    }
    let nnp = status.lines().find_map(|l| l.strip_prefix("NoNewPrivs:")).unwrap_or("").trim().to_string();
    assert_eq!(nnp, "1", "{status}");
    for (tid, name, eff, prm) in thread_caps(follower[0]) {
        assert_eq!(eff & !kept, 0, "follower {tid} ({name}) CapEff {eff:#x}: more than {kept:#x}");
        assert_eq!(prm & !kept, 0, "follower {tid} ({name}) CapPrm {prm:#x}: more than {kept:#x}");
        assert_ne!(eff & (1 << 39), 0, "follower {tid} keeps CAP_BPF to attach: {eff:#x}");
    }
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(tracer as i32, libc::SIGTERM) }, 0);
    t.finish();
}
