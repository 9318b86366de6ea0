//! Bounded waits on child processes: a test never hangs on one the kernel holds; it says what
//! the process waits on instead.

use std::{
    process::Child,
    time::{Duration, Instant},
};

/// Waits for `child` to exit, at most `limit`; past it, says what each of its threads waits on in
/// the kernel (state, wait channel, kernel stack), so that a hang names its cause.
pub fn wait_bounded(child: &mut Child, limit: Duration) -> Result<std::process::ExitStatus, String> {
    let until = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => return Err(stuck(child.id(), limit)),
            Err(e) => return Err(format!("wait for pid {}: {e}", child.id())),
        }
    }
}

/// What process `pid`'s threads wait on in the kernel.
pub fn stuck(pid: u32, limit: Duration) -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let mut s = format!("pid {pid} still running after {} s:\n", limit.as_secs());
    let tasks =
        std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.flatten().collect()).unwrap_or(Vec::new());
    for t in tasks {
        let dir = t.path();
        let d = dir.display();
        let state =
            read(&format!("{d}/status")).lines().find(|l| l.starts_with("State:")).unwrap_or("").to_string();
        s += &format!(
            "  task {} {} {state} wchan={}\n",
            t.file_name().to_string_lossy(),
            read(&format!("{d}/comm")).trim(),
            read(&format!("{d}/wchan"))
        );
        for l in read(&format!("{d}/stack")).lines().take(16) {
            s += &format!("      {l}\n");
        }
    }
    // And its children's (a helper it waits for).
    let ppid_of = |p: &str| {
        read(&format!("/proc/{p}/stat")).rsplit(") ").next()?.split(' ').nth(1)?.parse::<u32>().ok()
    };
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.parse::<u32>().is_ok() && ppid_of(&name) == Some(pid) {
            s += &format!("child {}", stuck(name.parse().unwrap_or(0), limit));
        }
    }
    s
}

/// Kills a child left running by a failing test, so it can't outlive the test. One the kernel
/// holds past SIGKILL (in D state) is left behind with what it waits on printed, rather than
/// hanging every test after it.
pub fn reap(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
        if let Err(why) = wait_bounded(child, Duration::from_secs(60)) {
            eprintln!("left behind: {why}");
        }
    }
}
