//! How a trace ends when it is told to (SIGTERM, SIGINT, SIGHUP) at any moment — before the
//! first hook loads, while attaching, while tracing — and when its reader goes away (`| head`):
//! always exit 0, the final records written where they can be, nothing left in the kernel.
//! Every wait is on a state (a signal action installed, a BPF descriptor held, a record
//! printed), never a sleep.

use std::{
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use gdr_trace_tests::{gdr_trace, ndjson, Lines};

use super::{held, probe_events_of, spawn, wait_released, Held};

/// Whether `pid` has an action installed for `sig` (its SigCgt mask in /proc/PID/status).
fn catches(pid: u32, sig: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return false };
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (sig - 1)) != 0)
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok() {
        assert!(Instant::now() < deadline, "not within 60 s: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0, "kill {sig}");
}

/// Reads the rest of the output, waits for exit 0, and checks the end records: the note that
/// says why (when there is one), then the final `lost` record; then that nothing stays loaded.
fn ends_cleanly(mut child: Child, out: Lines, h: &Held, note: Option<&str>, stage: &str) {
    let pid = child.id();
    let recs = ndjson(&out.rest(Duration::from_secs(120), "gdr-trace to end").join("\n"));
    let status = child.wait().unwrap();
    assert!(status.success(), "{stage}: exit {status}; records: {recs:?}");
    let opening: Vec<serde_json::Value> = recs.iter().take(2).map(|r| r["event"].clone()).collect();
    assert_eq!(opening, ["header", "hooks"], "{stage}: {recs:?}");
    if let Some(note) = note {
        assert!(
            recs.iter().any(|r| r["event"] == "note" && r["message"] == note),
            "{stage}: no note {note:?}: {recs:?}"
        );
    }
    assert_eq!(
        recs.last().map(|r| r["event"].clone()),
        Some("lost".into()),
        "{stage}: no final summary: {recs:?}"
    );
    wait_released(h, stage);
    assert_eq!(probe_events_of(pid), Vec::<String>::new(), "{stage}: probe events left in tracefs");
}

#[test]
fn sigterm_sigint_sighup_before_any_hook_loads_end_cleanly() {
    for (sig, note) in [
        (libc::SIGTERM, "terminated (SIGTERM)"),
        (libc::SIGINT, "interrupted"),
        (libc::SIGHUP, "hung up (SIGHUP)"),
    ] {
        let (child, out) = spawn(&["watch", "--json"]);
        // The action is installed before anything is loaded; the signal arrives now.
        wait_until("signal action installed", || catches(child.id(), sig));
        let h = held(child.id());
        signal(&child, sig);
        ends_cleanly(child, out, &h, Some(note), &format!("signal {sig} at start-up"));
    }
}

#[test]
fn sigterm_while_attaching_ends_cleanly() {
    let (child, out) = spawn(&["watch", "--json"]);
    // The first program descriptor exists: the loader is attaching.
    wait_until("a BPF program loaded", || !held(child.id()).progs.is_empty());
    signal(&child, libc::SIGTERM);
    // Every object it ever held, to check after the end: take them now and at the hooks record.
    let h = held(child.id());
    ends_cleanly(child, out, &h, Some("terminated (SIGTERM)"), "SIGTERM while attaching");
}

#[test]
fn sighup_while_tracing_ends_with_the_final_summary() {
    let (child, out) = spawn(&["watch", "--json", "--interval", "0.05"]);
    let first = out.hooks_record(Duration::from_secs(60)).expect("hooks record");
    assert!(first.contains("\"hooks\""), "{first}");
    let h = held(child.id());
    signal(&child, libc::SIGHUP);
    let rest: Vec<String> = out.rest(Duration::from_secs(120), "gdr-trace to end");
    let mut child = child;
    assert!(child.wait().unwrap().success());
    let recs = ndjson(&rest.join("\n"));
    assert!(recs.iter().any(|r| r["event"] == "note" && r["message"] == "hung up (SIGHUP)"), "{recs:?}");
    assert_eq!(recs.last().map(|r| r["event"].clone()), Some("lost".into()), "{recs:?}");
    wait_released(&h, "SIGHUP while tracing");
}

/// `gdr-trace watch --json | head -1`: the reader takes one line and goes; the trace ends with
/// exit 0 (not SIGPIPE, not a panic), at its next write (EPIPE) or, on an idle stream, when the
/// loop sees the pipe's read end closed.
#[test]
fn a_closed_stdout_pipe_ends_the_trace_with_exit_0() {
    // `--no-storage`: an idle stream (nothing to write after the header and the hooks record on
    // a host without RDMA); the reader takes both and goes, so only the tracer noticing the
    // closed pipe by itself ends it, not a failed write.
    for (format, lines) in [(&["--json"][..], 1), (&[][..], 1), (&["--json", "--no-storage"][..], 2)] {
        let mut child = Command::new(gdr_trace())
            .args(["watch", "--interval", "0.05"])
            .args(format)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn gdr-trace");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        for _ in 0..lines {
            let mut line = String::new();
            out.read_line(&mut line).expect("a line");
            assert!(!line.is_empty());
        }
        drop(out); // the pipe's read end is closed
        let h = held(child.id());
        let err = Lines::new_stderr(child.stderr.take().unwrap());
        let stderr = err.rest(Duration::from_secs(120), "gdr-trace to end");
        let status = child.wait().unwrap();
        assert!(status.success(), "{format:?}: exit {status}; stderr: {stderr:?}");
        assert!(!stderr.iter().any(|l| l.contains("panicked")), "{stderr:?}");
        wait_released(&h, "closed pipe");
    }
}
