//! Faults (host): gdr-trace killed with SIGKILL at any moment — while it attaches, while it
//! traces, while it ticks — leaves nothing in the kernel: no program, no map, no probe event in
//! tracefs; the next run starts clean, and removes the legacy probe events a killed tracer left.
//! Every wait is on a state (a BPF descriptor appeared, a record was printed), never a sleep;
//! the kernel frees a dead process's BPF objects asynchronously, so that is polled with a limit.

use std::{
    collections::BTreeSet,
    io::Write,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use gdr_trace_tests::{gdr_trace, Lines};

#[path = "faults/ends.rs"]
mod ends;
#[path = "faults/target.rs"]
mod target;

/// BPF object ids a process holds descriptors to, from /proc/PID/fdinfo.
#[derive(Default, Debug)]
pub(crate) struct Held {
    pub(crate) progs: BTreeSet<u32>,
    pub(crate) maps: BTreeSet<u32>,
}

pub(crate) fn held(pid: u32) -> Held {
    let mut h = Held::default();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else { return h };
    for e in dir.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else { continue };
        for line in text.lines() {
            let mut it = line.split_whitespace();
            match (it.next(), it.next().and_then(|v| v.parse().ok())) {
                (Some("prog_id:"), Some(id)) => _ = h.progs.insert(id),
                (Some("map_id:"), Some(id)) => _ = h.maps.insert(id),
                _ => {}
            }
        }
    }
    h
}

/// The ids of `h` still loaded in the kernel.
fn still_loaded(h: &Held) -> Held {
    let progs = aya::programs::loaded_programs().flatten().map(|p| p.id()).filter(|id| h.progs.contains(id));
    let maps = aya::maps::loaded_maps().flatten().map(|m| m.id()).filter(|id| h.maps.contains(id));
    Held { progs: progs.collect(), maps: maps.collect() }
}

/// Lines of kprobe_events/uprobe_events naming probes created by process `pid`.
pub(crate) fn probe_events_of(pid: u32) -> Vec<String> {
    let mark = format!("aya_{pid}_");
    ["kprobe_events", "uprobe_events"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(format!("/sys/kernel/tracing/{f}")).ok())
        .flat_map(|t| t.lines().filter(|l| l.contains(&mark)).map(str::to_string).collect::<Vec<_>>())
        .collect()
}

/// gdr-trace with `args`, stdout read line by line, stderr dropped.
fn spawn(args: &[&str]) -> (Child, Lines) {
    let mut child = Command::new(gdr_trace())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn gdr-trace");
    let out = Lines::new(child.stdout.take().unwrap());
    (child, out)
}

fn spawn_watch() -> (Child, Lines) {
    spawn(&["watch", "--json", "--interval", "0.05"])
}

/// Polls until none of `h`'s objects is loaded: its programs within 30 s; its maps within
/// 120 s (the kernel puts a freed program's maps only after an RCU grace period, a tasks-trace
/// one for a sleepable program, which a loaded 2-core machine stretches). A failure names every
/// process still holding one of them.
pub(crate) fn wait_released(h: &Held, stage: &str) {
    let start = Instant::now();
    loop {
        let left = still_loaded(h);
        if left.progs.is_empty() && left.maps.is_empty() {
            return;
        }
        let limit = if left.progs.is_empty() { 120 } else { 30 };
        if start.elapsed() > Duration::from_secs(limit) {
            panic!("{stage}: still loaded after {limit} s: {left:?}; held by {:?}", holders(&left));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `pid (comm)` of every process with a descriptor to one of `h`'s objects.
fn holders(h: &Held) -> Vec<String> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return vec![] };
    procs
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let mine = held(pid);
            mine.progs.intersection(&h.progs).next().is_some()
                || mine.maps.intersection(&h.maps).next().is_some()
        })
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("{pid} ({})", comm.trim())
        })
        .collect()
}

/// SIGKILL, then every BPF object the tracer held must be gone (polled: the kernel frees them
/// after the last descriptor closes) and no probe event of it left in tracefs.
fn kill_and_check(mut child: Child, h: Held, stage: &str) {
    let pid = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!h.progs.is_empty(), "{stage}: the tracer held no program when killed: {h:?}");
    wait_released(&h, stage);
    assert_eq!(probe_events_of(pid), Vec::<String>::new(), "{stage}: probe events left in tracefs");
}

#[test]
fn sigkill_while_attaching_tracing_or_ticking_leaves_nothing_behind() {
    // While attaching: the first program descriptor exists, the hooks record is not printed yet.
    let (child, _out) = spawn_watch();
    let deadline = Instant::now() + Duration::from_secs(60);
    let h = loop {
        let h = held(child.id());
        if !h.progs.is_empty() {
            break h;
        }
        assert!(Instant::now() < deadline, "no BPF program loaded within 60 s");
        std::thread::sleep(Duration::from_millis(1));
    };
    kill_and_check(child, h, "attaching");

    // While tracing: after the hooks record.
    let (child, out) = spawn_watch();
    let first = out.hooks_record(Duration::from_secs(60)).expect("hooks record");
    assert!(first.contains("\"hooks\""), "{first}");
    let h = held(child.id());
    kill_and_check(child, h, "tracing");

    // While ticking: after some periodic summaries (every 50 ms). A tick prints only what
    // changed, so a reader keeps file I/O going (an idle machine would print nothing).
    let mut reader = Command::new("sh")
        .args(["-c", "while :; do cat /etc/os-release; done"])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn a reader");
    let (child, out) = spawn_watch();
    out.hooks_record(Duration::from_secs(60)).expect("hooks record");
    for _ in 0..3 {
        out.next(Duration::from_secs(30), "a periodic record").expect("periodic record");
    }
    let h = held(child.id());
    kill_and_check(child, h, "ticking");
    reader.kill().unwrap();
    reader.wait().unwrap();

    // The next run starts and attaches as usual.
    let out = Command::new(gdr_trace()).args(["probes", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A normal end hands the hooks to a short-lived child that detaches them after gdr-trace has
/// exited (src/teardown.rs): they must all be gone soon after, and that child must hold
/// nothing the caller waits on (the test reads stdout to its end, which needs every writer gone).
#[test]
fn a_normal_end_releases_every_hook() {
    let (mut child, out) = spawn(&["watch", "--json", "--duration", "1"]);
    out.hooks_record(Duration::from_secs(60)).expect("hooks record");
    let h = held(child.id());
    assert!(!h.progs.is_empty(), "{h:?}");
    out.rest(Duration::from_secs(60), "gdr-trace to end");
    assert!(child.wait().unwrap().success());
    wait_released(&h, "after a normal end");
}

/// A legacy probe event named as aya names them, for a process that does not exist: what a
/// tracer killed on a kernel without the uprobe PMU leaves. The next start removes it.
#[test]
fn a_killed_tracers_legacy_probe_events_are_removed_at_start() {
    let events = "/sys/kernel/tracing/uprobe_events";
    let dead_pid = 99_999_999; // above any pid_max: never a live process
    let name = format!("uprobes/aya_{dead_pid}_p_gdr_fault_test_0x0_0");
    let mut f = std::fs::OpenOptions::new().append(true).open(events).expect("uprobe_events");
    let target = std::fs::canonicalize(gdr_trace()).unwrap();
    // One write per command: tracefs parses each write(2) on its own.
    f.write_all(format!("p:{name} {}:0x1000\n", target.display()).as_bytes())
        .expect("add a legacy uprobe event");
    drop(f);
    assert_eq!(probe_events_of(dead_pid).len(), 1);
    let out = Command::new(gdr_trace()).args(["probes", "--json"]).output().unwrap();
    let left = probe_events_of(dead_pid);
    if !left.is_empty() {
        // Leave the machine as found even when the assertion below fails.
        let _ = std::fs::OpenOptions::new()
            .append(true)
            .open(events)
            .and_then(|mut f| f.write_all(format!("-:{name}\n").as_bytes()));
    }
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(left, Vec::<String>::new(), "the dead tracer's probe event is still in {events}");
}
