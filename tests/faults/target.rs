//! The traced process ending, exec'ing, forking a thousand children, or lingering as a zombie
//! never confuses `attach`: the trace ends when the process and its children are gone (a
//! zombie is gone: it does no more I/O and its parent may never reap it), and each child's I/O
//! is its own, under its own PID. Handshakes only: the hooks record, the workload's exit.

use std::{
    io::Write,
    os::unix::fs::MetadataExt,
    process::{Command, Stdio},
    time::Duration,
};

use gdr_trace_tests::{Tracer, Workload};

fn attach(pid: u32) -> Tracer {
    let args: Vec<String> =
        ["attach", &pid.to_string(), "--json", "--files", "--interval", "0"].map(String::from).to_vec();
    Tracer::spawn(&args)
}

fn state(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()).map(str::to_string)
}

/// A process that exits and is never reaped (its parent, this test, does not wait yet): the
/// trace ends on its own, with the note that says so, exit 0.
#[test]
fn a_zombie_target_ends_the_trace() {
    let mut cat = Command::new("cat").stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
    let pid = cat.id();
    let mut tracer = attach(pid);
    cat.stdin.as_mut().unwrap().write_all(b"x\n").unwrap();
    drop(cat.stdin.take()); // EOF: cat exits; nobody reaps it until the end of the test
    let recs = tracer.finish();
    assert_eq!(state(pid).as_deref(), Some("Z"), "the target should still be a zombie");
    let note = format!("process {pid} and its traced children exited; trace ends");
    assert!(recs.iter().any(|r| r["event"] == "note" && r["message"] == note.as_str()), "{recs:?}");
    cat.wait().unwrap();
}

/// The target forks 1,000 short children that each read a file once, then execs into a reader
/// of another file. Every child's read is under the child's PID (1,000 distinct PIDs, each one
/// read of 4 KiB), the exec'd program's read under the target's own PID, and no other PID's.
#[test]
fn a_thousand_children_and_an_exec_are_each_attributed_to_their_own_pid() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("children.bin"), dir.path().join("exec.bin"));
    std::fs::write(&a, vec![7u8; 4096]).unwrap();
    std::fs::write(&b, vec![9u8; 8192]).unwrap();
    let ino = |p: &std::path::Path| std::fs::metadata(p).unwrap().ino();
    let (ino_a, ino_b) = (ino(&a), ino(&b));
    let script = "read _; i=0; while [ $i -lt 1000 ]; do head -c 4096 \"$0\" >/dev/null; i=$((i+1)); done; exec cat \"$1\" >/dev/null";
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]).arg(&a).arg(&b);
    let mut w = Workload::start(cmd);
    let target = w.pid();
    let mut tracer = attach(target);
    w.go();
    w.out.rest(Duration::from_secs(300), "the workload to end");
    assert!(w.child.wait().unwrap().success());
    let recs = tracer.finish();
    let finals = |ino: u64| -> Vec<&serde_json::Value> {
        recs.iter()
            .filter(|r| r["event"] == "file_io_summary" && r["final"] == true && r["ino"] == ino)
            .collect()
    };
    let children = finals(ino_a);
    let mut pids: Vec<u64> = children.iter().map(|r| r["pid"].as_u64().unwrap()).collect();
    pids.sort_unstable();
    pids.dedup();
    assert_eq!(pids.len(), 1000, "one reader PID per child: {} records", children.len());
    assert!(!pids.contains(&(target as u64)), "the parent never read {}", a.display());
    for r in &children {
        assert_eq!(r["bytes_read"].as_u64(), Some(4096), "{r}");
    }
    let exec = finals(ino_b);
    assert_eq!(exec.len(), 1, "{exec:?}");
    assert_eq!(exec[0]["pid"].as_u64(), Some(target as u64), "the exec'd reader keeps the PID: {}", exec[0]);
    assert_eq!(exec[0]["bytes_read"].as_u64(), Some(8192), "{}", exec[0]);
}
