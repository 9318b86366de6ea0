//! The kernel's set of traced processes (`attach`) forgets tasks as they exit, so
//! it stays bounded by the live ones.

use std::{
    io::{BufRead, BufReader, Write},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use aya::maps::{loaded_maps, HashMap, Map, MapData};
use gdr_trace_tests::Tracer;

/// Keys of the TRACKED map that holds `pid` (other tracers may run: the one tracing `pid`).
fn tracked_holding(pid: u32) -> Option<Vec<u32>> {
    loaded_maps().flatten().filter(|m| m.name_as_str() == Some("TRACKED")).find_map(|m| {
        let data = MapData::from_id(m.id()).ok()?;
        let map = HashMap::<MapData, u32, u8>::try_from(Map::HashMap(data)).ok()?;
        let keys: Vec<u32> = map.keys().flatten().collect();
        keys.contains(&pid).then_some(keys)
    })
}

#[test]
fn exited_children_leave_the_traced_set() {
    // A shell that, on "go", runs 64 short-lived children one after the other.
    let mut sh = Command::new("sh")
        .args(["-c", "read _; i=0; while [ $i -lt 64 ]; do /bin/true; i=$((i+1)); done; echo done; read _"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = sh.id();
    let mut t = Tracer::spawn(
        &["attach", &pid.to_string(), "--json", "--no-storage", "--interval", "0"].map(String::from),
    );
    assert_eq!(t.attached("sched_process_fork").as_deref(), Some("tracepoint"), "{}", t.hooks);
    let mut stdin = sh.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    let mut line = String::new();
    BufReader::new(sh.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "done");
    // Every child has exited (the shell waited for each): the set must shrink back to the shell
    // (and at most one child between fork and exit). Polled until it does; the deadline only
    // guards against a hang (a set that keeps exited tasks never gets there).
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let keys = tracked_holding(pid).expect("a TRACKED map holding the attached shell");
        if keys.len() <= 2 {
            break;
        }
        assert!(Instant::now() < until, "64 exited children still in the traced set: {} entries", keys.len());
        std::thread::yield_now();
    }
    drop(stdin); // the shell ends, and with it the trace
    let _ = sh.wait();
    t.finish();
}
