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
