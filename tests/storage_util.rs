//! Helpers for the storage tests (host and VM): the storage workload under `gdr-trace attach`,
//! and lookups in what both printed.

#![allow(dead_code)] // each test binary uses its part

use std::{path::PathBuf, process::Command, time::Duration};

use gdr_trace_tests::{Tracer, Workload};
use serde_json::Value;

/// The test libcufile.so.0 (built by tests/build.rs).
pub const LIBCUFILE: &str = env!("GDR_TEST_LIBCUFILE");

pub fn workload_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("GDR_STORAGE_WORKLOAD_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("current_exe");
    let p = exe.parent().and_then(|d| d.parent()).expect("target/<profile>").join("gdr-storage-workload");
    assert!(p.exists(), "{} is not built: run `cargo build --bins` (cargo xtask test does)", p.display());
    p
}

/// What the workload and the tracer printed.
pub struct Run {
    pub pid: u32,
    pub truth: Vec<Value>,
    pub recs: Vec<Value>,
    pub tracer: Tracer,
}

/// The storage workload, waiting for "go" after its setup steps (their records are read).
pub fn storage_workload(setup: &[String], steps: &[String], env: &[(&str, &str)]) -> Workload {
    storage_workload_as(&workload_bin(), setup, steps, env)
}

/// As [`storage_workload`], run as `program` (a link to it: a command name of its own).
pub fn storage_workload_as(
    program: &std::path::Path,
    setup: &[String],
    steps: &[String],
    env: &[(&str, &str)],
) -> Workload {
    let mut cmd = Command::new(program);
    cmd.args(setup).arg("go").args(steps).envs(env.iter().copied());
    storage_workload_cmd(cmd)
}

/// The storage workload as `cmd` builds it (another user, ...), once it is ready.
pub fn storage_workload_cmd(cmd: Command) -> Workload {
    let w = Workload::start(cmd);
    loop {
        let l = w
            .out
            .next(Duration::from_secs(60), "the workload's ready line")
            .expect("workload exited in setup");
        let v: Value = serde_json::from_str(&l).expect("workload prints JSON");
        if v["event"] == "ready" {
            return w;
        }
    }
}

/// Runs `steps` (after `setup`) under `gdr-trace attach PID --json` plus `extra` arguments.
pub fn traced(setup: &[String], steps: &[String], extra: &[&str]) -> Run {
    traced_env(setup, steps, extra, &[])
}

pub fn traced_env(setup: &[String], steps: &[String], extra: &[&str], env: &[(&str, &str)]) -> Run {
    let mut w = storage_workload(setup, steps, env);
    let pid = w.pid();
    let mut args: Vec<String> =
        ["attach", &pid.to_string(), "--json", "--files", "--duration", "120", "--interval", "0"]
            .map(String::from)
            .to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut tracer = Tracer::spawn(&args);
    w.go();
    let truth = w.finish();
    let recs = tracer.finish();
    Run { pid, truth, recs, tracer }
}

/// `traced_env` for cuFile steps whose process's facts matter (its configuration, mounts):
/// the workload opens the cuFile driver and holds until the tracer has shown that call (it
/// reads /proc/PID then, so the process must still be there), then runs `steps`. `tracer`:
/// the tracer's arguments, "PID" standing for the workload's (`attach PID`, `record --pid PID`).
pub fn traced_held(setup: &[String], steps: &[String], tracer: &[&str], env: &[(&str, &str)]) -> Run {
    let mut all = vec!["cufile-open".to_string(), "hold".to_string()];
    all.extend(steps.iter().cloned());
    let mut w = storage_workload(setup, &all, env);
    let pid = w.pid();
    let mut args: Vec<String> =
        tracer.iter().map(|s| if *s == "PID" { pid.to_string() } else { s.to_string() }).collect();
    args.extend(["--json", "--files", "--duration", "120", "--interval", "0"].map(String::from));
    let mut t = Tracer::spawn(&args);
    w.go();
    let (mut truth, mut recs) =
        w.hold_until_traced(&mut t, |v| v["event"] == "gds_io" && v["op"] == "cuFileDriverOpen");
    truth.extend(w.finish());
    recs.extend(t.finish());
    Run { pid, truth, recs, tracer: t }
}

pub fn by<'a>(recs: &'a [Value], event: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["event"] == event).collect()
}

/// The final `file_io_summary` of `path`.
pub fn file<'a>(recs: &'a [Value], path: &str) -> &'a Value {
    recs.iter()
        .filter(|r| r["event"] == "file_io_summary" && r["final"] == true)
        .find(|r| r["path"] == path)
        .unwrap_or_else(|| {
            let paths: Vec<&Value> = by(recs, "file_io_summary").iter().map(|r| &r["path"]).collect();
            panic!("no final file_io_summary for {path}; have {paths:?}")
        })
}

/// The workload's own record of step `step` on `path`.
pub fn truth<'a>(truth: &'a [Value], step: &str, path: &str) -> &'a Value {
    truth
        .iter()
        .find(|r| r["step"] == step && r["path"] == path)
        .unwrap_or_else(|| panic!("no {step} of {path} in {truth:#?}"))
}

/// All of a call's bytes came from worker threads (none is the caller's) through `via`
/// ("posix": compatibility mode, "nvfs": nvidia-fs ioctls), each worker I/O one call of that
/// kind (a whole chunk: regular files do not read short here).
pub fn worker_only(g: &Value, via: &str, bytes: u64, caller: u64) {
    let w = &g["worker_io"];
    let calls = if via == "nvfs" { "nvfs_ioctls" } else { "posix_calls" };
    assert_eq!((u(&w["bytes"]), u(&g[format!("{via}_bytes")])), (bytes, bytes), "all by workers: {g}");
    assert_eq!(u(&w["calls"]), u(&g[calls]), "{g}");
    let tids: Vec<u64> = w["tids"].as_array().unwrap_or_else(|| panic!("tids: {g}")).iter().map(u).collect();
    assert!(!tids.is_empty() && !tids.contains(&caller), "worker threads, not the caller {caller}: {g}");
}

pub fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

pub fn s(parts: &[&str]) -> String {
    parts.join(":")
}

/// A fresh directory for test files on a filesystem with O_DIRECT and a page cache:
/// `$GDR_STORAGE_DIR` (the VM's ext4 mount) or the temp dir.
pub fn scratch() -> tempfile::TempDir {
    let base = std::env::var_os("GDR_STORAGE_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new().prefix("gdr-storage-").tempdir_in(base).expect("temp dir")
}

/// Cold reads fill the cache, warm reads hit it, O_DIRECT fills nothing: exact counts.
pub fn page_cache_scenario(extra: &[&str]) {
    let dir = scratch();
    let p = |n: &str| dir.path().join(n).display().to_string();
    let (cold, warm, direct) = (p("cold.bin"), p("warm.bin"), p("direct.bin"));
    let setup = [
        s(&["create", &cold, "1M"]),
        s(&["create", &warm, "1M"]),
        s(&["create", &direct, "1M"]),
        s(&["read", &warm, "64K", "16"]),
    ];
    let steps = [
        s(&["read", &cold, "4K", "256"]),
        s(&["read", &warm, "4K", "256", "pread"]),
        s(&["read", &direct, "4K", "256", "direct"]),
    ];
    // Preconditions, from the workload's own mincore: the cache was as intended. Memory
    // pressure on a busy machine can evict a page between the workload's steps; then the run
    // did not test what it meant to, and it runs again (the tool is judged only on good runs).
    let cache = |r: &Run| {
        [
            &truth(&r.truth, "read", &cold)["cached_before"],
            &truth(&r.truth, "read", &cold)["cached_after"],
            &truth(&r.truth, "read", &warm)["cached_before"],
            &truth(&r.truth, "read", &direct)["cached_after"],
        ]
        .map(u)
    };
    let mut tries = 0;
    let r = loop {
        let r = traced(&setup, &steps, extra);
        let seen = cache(&r);
        tries += 1;
        if seen == [0, 256, 256, 0] {
            break r;
        }
        assert!(tries < 3, "the page cache was never as intended in {tries} runs: {seen:?}");
        eprintln!(
            "page cache not as intended (cold before/after, warm before, direct after = {seen:?}); again"
        );
    };

    let c = file(&r.recs, &cold);
    assert_eq!((u(&c["reads"]), u(&c["bytes_read"]), u(&c["seq_reads"])), (256, 1 << 20, 256), "{c}");
    assert_eq!(u(&c["pages_filled"]), 256, "a cold 1 MiB file fills 256 pages: {c}");
    assert_eq!(u(&c["read_pages_filled"]), 256, "all of them inside read(2): {c}");
    assert_eq!(c["cache_hit_ratio"], 0.0);
    assert_eq!((&c["verdict"], &c["direct"]), (&Value::from("page-cache"), &Value::from(false)));
    assert_eq!(c["read_size_hist"], serde_json::json!({ "4KiB": 256 }));

    let w = file(&r.recs, &warm);
    assert_eq!((u(&w["reads"]), u(&w["bytes_read"])), (256, 1 << 20), "{w}");
    // Sequential preads: each CPU keeps its own position, so a move to another CPU in the middle
    // of the stream may count one read as not sequential.
    assert!(u(&w["seq_reads"]) >= 253, "{w}");
    assert_eq!(u(&w["pages_filled"]), 0, "warm reads fill nothing: {w}");
    assert_eq!(w["cache_hit_ratio"], 1.0);
    assert_eq!(w["verdict"], "page-cache");

    let d = file(&r.recs, &direct);
    assert_eq!((u(&d["reads"]), u(&d["bytes_read"])), (256, 1 << 20), "{d}");
    assert_eq!(u(&d["pages_filled"]), 0, "O_DIRECT fills nothing: {d}");
    assert_eq!((&d["verdict"], &d["direct"]), (&Value::from("direct"), &Value::from(true)));

    for f in [c, w, d] {
        assert_eq!(u(&f["pid"]), r.pid as u64);
        assert_eq!(f["comm"], "gdr-storage-wor");
        assert_eq!((u(&f["writes"]), u(&f["read_errors"])), (0, 0));
    }
    let sum = by(&r.recs, "storage_summary");
    let sum = sum
        .iter()
        .find(|s| u(&s["pid"]) == r.pid as u64 && s["final"] == true)
        .expect("final storage_summary");
    assert_eq!(u(&sum["bytes_by_verdict"]["page-cache"]["bytes"]), 2 << 20);
    assert_eq!(u(&sum["bytes_by_verdict"]["direct"]["bytes"]), 1 << 20);
    // Page faults on the program's own files may add pages outside read(2); reads filled 256.
    assert_eq!(u(&sum["read_pages_filled"]), 256, "{sum}");
    assert!(sum["bytes_by_verdict"].get("gds-compat").is_none(), "{sum}");
    assert_eq!(by(&r.recs, "lost")[0]["total"], 0);
}

/// io_uring reads (not system calls) are counted on their file, with exact bytes; reads on a
/// registered file (no descriptor in the request) are counted for the process instead.
pub fn uring_scenario(extra: &[&str]) {
    let dir = scratch();
    let p = |n: &str| dir.path().join(n).display().to_string();
    let (plain, fixed) = (p("uring.bin"), p("uring-fixed.bin"));
    let setup = [s(&["create", &plain, "1M"]), s(&["create", &fixed, "512K"])];
    let steps = [s(&["uring-read", &plain, "64K", "16"]), s(&["uring-read", &fixed, "64K", "8", "fixed"])];
    let r = traced(&setup, &steps, extra);
    for name in ["io_uring_submit_req", "io_uring_file_get", "io_uring_complete"] {
        assert_eq!(r.tracer.attached(name).as_deref(), Some("tracepoint"), "{name}: {}", r.tracer.hooks);
    }
    assert_eq!(u(&truth(&r.truth, "uring_read", &plain)["bytes"]), 1 << 20);
    assert_eq!(u(&truth(&r.truth, "uring_read", &fixed)["bytes"]), 512 << 10);

    let x = file(&r.recs, &plain);
    assert_eq!((u(&x["reads"]), u(&x["bytes_read"]), u(&x["io_uring_reads"])), (16, 1 << 20, 16), "{x}");
    assert_eq!(x["read_size_hist"], serde_json::json!({ "64KiB": 16 }), "{x}");
    assert_eq!(u(&x["pages_filled"]), 256, "a cold 1 MiB file fills 256 pages: {x}");
    // Filled outside any read system call, but by these reads: a cold file has no hits.
    assert_eq!(x["cache_hit_ratio"], 0.0, "{x}");
    assert_eq!(u(&x["seq_reads"]), 0, "io_uring positions are unknown: never called sequential: {x}");
    assert_eq!(x["verdict"], "page-cache", "{x}");
    // The registered file's reads have no descriptor: none is credited to it...
    let credited = by(&r.recs, "file_io_summary")
        .iter()
        .find(|f| f["path"] == fixed.as_str() && f["final"] == true)
        .map_or(0, |f| u(&f["reads"]));
    assert_eq!(credited, 0, "reads through a registered file are credited to no file");
    // ... but the process has them, with exact bytes.
    let sum = by(&r.recs, "storage_summary");
    let sum =
        sum.iter().find(|s| u(&s["pid"]) == r.pid as u64 && s["final"] == true).expect("storage_summary");
    let loose = &sum["io_uring_unattributed"];
    assert_eq!((u(&loose["reads"]), u(&loose["bytes_read"])), (8, 512 << 10), "{sum}");
    assert_eq!(u(&loose["writes"]), 0, "{sum}");
    assert_eq!(by(&r.recs, "lost")[0]["total"], 0);
}
