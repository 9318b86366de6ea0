//! The DaemonSet's capability sets, proven: what CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE each
//! give, and that once attached the tracer keeps only what reading /proc needs.

use super::*;

/// (CapEff, CapPrm) of every thread of `pid`.
fn thread_caps(pid: u32) -> Vec<(u64, u64)> {
    let hex = |status: &str, field: &str| {
        let v = status.lines().find_map(|l| l.strip_prefix(field)).unwrap();
        u64::from_str_radix(v.trim(), 16).unwrap()
    };
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .map(|s| (hex(&s, "CapEff:"), hex(&s, "CapPrm:")))
        .collect()
}

/// CAP_DAC_READ_SEARCH | CAP_SYS_PTRACE: the most any thread may keep after the attach.
const KEPT: u64 = (1 << 2) | (1 << 19);

/// `gdr-trace watch --json` with only the capabilities in `caps` (root's bounding set: what a
/// container with `capabilities.add` gets; "" for all of root's), while the peer-memory
/// workload runs. Also the tracer's threads' capabilities once its hooks are attached.
fn watch_with_caps(caps: &str) -> CapsRun {
    let bounding = if caps.is_empty() { "+all".to_string() } else { format!("-all,{caps}") };
    let mut child = Command::new("setpriv")
        .arg(format!("--bounding-set={bounding}"))
        .arg("--inh-caps=-all")
        .arg(gdr_trace())
        .args(["watch", "--json", "--interval", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let out = Lines::new(child.stdout.take().unwrap());
    let Some(first) = out.hooks_record(Duration::from_secs(240)) else {
        panic!("watch with {caps} exited before attaching: {:?}", child.wait());
    };
    let hooks: Value = serde_json::from_str(&first).unwrap();
    // The thread that loads the library follower's programs keeps its capabilities until it
    // has started the follower (seconds under this emulated CPU), then drops them too: read
    // the threads once it has (or after 120 s, and the test says which kept more).
    let mut caps = thread_caps(child.id());
    let until = std::time::Instant::now() + Duration::from_secs(120);
    while caps.iter().any(|(e, p)| (e | p) & !KEPT != 0) && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        caps = thread_caps(child.id());
    }
    let mut t = Tracer { child, out, hooks: hooks.clone() };
    let mut w = gdrsim(None, &["--hold-stdin", "peer", "2097152"]);
    let seen = run_held(&mut w, &mut t);
    let (recs, code) = stop(&mut t, seen);
    CapsRun { hooks, recs, code, pid: w.pid(), threads: caps }
}

/// What [`watch_with_caps`] saw.
struct CapsRun {
    hooks: Value,
    recs: Vec<Value>,
    code: Option<i32>,
    /// The workload's pid.
    pid: u32,
    /// (CapEff, CapPrm) of each tracer thread once attached.
    threads: Vec<(u64, u64)>,
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn least_capabilities_cap_bpf_and_cap_perfmon_trace_and_sys_ptrace_sees_gpu_use() {
    gdrsim_loaded();
    // Debian's kernel ships perf_event_paranoid 3, and a patch that makes 3 need CAP_SYS_ADMIN:
    // CAP_PERFMON alone can't open kprobes or uprobes there, and gdr-trace says why.
    let level = std::fs::read_to_string(PARANOID).unwrap().trim().parse::<i32>().unwrap();
    eprintln!("kernel.perf_event_paranoid = {level}");
    if level > 2 {
        // Without the storage hooks: their syscall fexit programs need no perf event, so they
        // would attach and the trace would run (the point here is the kprobes and uprobes).
        let out = Command::new("setpriv")
            .args(["--bounding-set=-all,+bpf,+perfmon", "--inh-caps=-all"])
            .arg(gdr_trace())
            .args(["watch", "--duration", "1", "--no-storage"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("Permission denied")
                && err.contains(&format!("kernel.perf_event_paranoid is {level}")),
            "{err}"
        );
    }
    let _restore = Paranoid::set("2");
    let CapsRun { hooks, recs, code, pid, .. } = watch_with_caps("+bpf,+perfmon");
    assert_eq!(code, Some(0));
    let how: Vec<String> = hooks["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| format!("{} {}", h["hook"].as_str().unwrap(), h["attached"].as_str().unwrap_or("NO")))
        .collect();
    eprintln!("CAP_BPF + CAP_PERFMON, paranoid 2: {}", how.join(", "));
    let regs = events(&recs, "mr_register");
    assert_eq!(regs.len(), 1, "{recs:#?}");
    assert_eq!(regs[0]["verdict"], "gpu-peermem", "the kernel hooks see the GPU path: {}", regs[0]);
    let s = events(&recs, "summary");
    let s = s.iter().find(|s| s["pid"] == pid).unwrap();
    assert_eq!(
        s["uses_gpu"],
        Value::Null,
        "without CAP_SYS_PTRACE another process's fds are unreadable: {s}"
    );

    let CapsRun { recs, code, pid, .. } = watch_with_caps("+bpf,+perfmon,+sys_ptrace");
    assert_eq!(code, Some(0));
    let s = events(&recs, "summary");
    let s = s.iter().find(|s| s["pid"] == pid).unwrap();
    assert_eq!(s["uses_gpu"], true, "CAP_SYS_PTRACE: GPU use known: {s}");
    assert_eq!(s["process_verdict"], "gdr");

    let out = Command::new("setpriv")
        .arg("--bounding-set=-all,+bpf")
        .arg(gdr_trace())
        .args(["watch", "--duration", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing CAP_PERFMON"));
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn once_attached_the_tracer_keeps_only_what_reading_proc_needs_and_still_classifies() {
    gdrsim_loaded();
    let _restore = Paranoid::set("2");
    for caps in ["", "+bpf,+perfmon,+sys_ptrace"] {
        let CapsRun { hooks, recs, code, pid, threads } = watch_with_caps(caps);
        assert_eq!(code, Some(0), "{caps:?}");
        let attached = hooks["hooks"].as_array().unwrap().iter().filter(|h| !h["attached"].is_null()).count();
        assert!(attached > 0, "{hooks}");
        assert!(!threads.is_empty());
        for (eff, prm) in &threads {
            assert_eq!(eff & !KEPT, 0, "{caps:?}: a thread kept CapEff {eff:#x}");
            assert_eq!(prm & !KEPT, 0, "{caps:?}: a thread kept CapPrm {prm:#x}");
        }
        // The registration came after the drop: the kernel hooks still deliver, and reading
        // the workload's /proc still tells its GPU use.
        let regs = events(&recs, "mr_register");
        assert_eq!(regs.len(), 1, "{recs:#?}");
        assert_eq!(regs[0]["verdict"], "gpu-peermem", "{}", regs[0]);
        let s = events(&recs, "summary");
        let s = s.iter().find(|s| s["pid"] == pid).unwrap();
        assert_eq!(s["uses_gpu"], true, "{caps:?}: {s}");
        assert_eq!(s["process_verdict"], "gdr");
    }
}
