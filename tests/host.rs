//! Host tests: the real kernel of the build machine (tracepoints and uprobes work, kprobes and
//! fentry may not). Run as root, one at a time: `cargo xtask test` does that.

#[path = "host/expected.rs"]
mod expected;
#[path = "host/term.rs"]
mod term;
#[path = "host/untold.rs"]
mod untold;

use std::{
    os::unix::process::CommandExt,
    process::{Command, Stdio},
};

use gdr_trace_tests::{events, gdr_trace, hook, ndjson, Tracer};
use serde_json::Value;

fn probes_json() -> Value {
    gdr_trace_tests::probes_json(&[])
}

#[test]
fn probes_reports_every_hook_exactly_as_this_kernel_and_its_libraries_allow() {
    let v = probes_json();
    let has_kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe/type").exists();
    assert_eq!(v["kernel"]["kprobe_unavailable"].is_string(), !has_kprobes, "{}", v["kernel"]);
    expected::check_every_hook(&v);
    // libibverbs is part of the test bed (the MR workload links it): its hooks attach.
    for name in ["ibv_reg_mr", "ibv_reg_mr_iova2", "ibv_dereg_mr"] {
        let h = hook(&v, name);
        assert_eq!(h["attached"], "uprobe+uretprobe", "{h}");
        assert!(h["location"].as_str().unwrap().contains("libibverbs.so"), "{h}");
    }
}

#[test]
fn probes_can_be_forced_to_kprobe_mode_and_says_why_not() {
    let out = Command::new(gdr_trace())
        .args(["probes", "--json", "--attach-mode", "kprobe"])
        .output()
        .expect("run probes");
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let h = hook(&v, "ib_umem_get");
    for r in h["reasons"].as_array().unwrap() {
        let r = r.as_str().unwrap();
        assert!(!r.starts_with("fentry:") && !r.starts_with("fexit:"), "kprobe mode never tries fentry: {r}");
    }
}

#[test]
fn unknown_pid_is_a_clear_error_with_exit_2() {
    let out = Command::new(gdr_trace()).args(["attach", "999999999", "--duration", "1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no process with PID 999999999"), "{err}");
}

#[test]
fn a_process_gone_while_the_hooks_attach_is_an_error_not_an_empty_trace() {
    use std::io::{BufRead, BufReader};
    // It printed "tracing pid N" without a name and exited 0, as if the process did nothing.
    let mut target = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = target.id().to_string();
    let mut tracer = Command::new(gdr_trace())
        .args(["attach", &pid, "--duration", "5"])
        .env("GDR_TRACE_LOG", "gdr_trace::loader=debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(tracer.stderr.take().unwrap());
    let mut seen = String::new();
    // The target goes once the object is loaded, before its hooks attach.
    while err.read_line(&mut seen).unwrap() > 0 && !seen.contains("object loaded after") {}
    target.kill().unwrap();
    target.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let out = tracer.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "stdout: {stdout}\nstderr: {seen}{rest}");
    assert!(rest.contains(&format!("process {pid} (sleep) exited while the hooks attached")), "{rest}");
    assert!(!stdout.contains("tracing pid"), "{stdout}");
}

#[test]
fn without_privilege_it_names_the_capabilities_and_exits_2() {
    let out =
        Command::new(gdr_trace()).args(["watch", "--duration", "1"]).uid(65534).gid(65534).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CAP_BPF") && err.contains("CAP_PERFMON"), "{err}");
    // serve said "listening on ..." first, then failed.
    let out = Command::new(gdr_trace())
        .args(["serve", "--listen", "127.0.0.1:0", "--duration", "1"])
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains("CAP_BPF") && !err.contains("listening"), "{err}");
}

#[test]
fn bad_arguments_exit_2() {
    let out = Command::new(gdr_trace()).args(["watch", "--duration", "-1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(gdr_trace()).args(["attach", "not-a-pid"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn watch_json_runs_for_its_duration_and_reports_nothing_lost() {
    let out = Command::new(gdr_trace())
        .args(["watch", "--json", "--duration", "1"])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success());
    let recs = ndjson(&String::from_utf8_lossy(&out.stdout));
    // A versioned stream with a clock: the header first, then every record with
    // its wall-clock time.
    let h = &recs[0];
    assert_eq!(
        (h["event"].as_str(), h["schema"].as_str()),
        (Some("header"), Some("gdr-trace.events/1")),
        "{h}"
    );
    assert_eq!(h["version"], env!("CARGO_PKG_VERSION"));
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(h["boot_id"], boot.trim());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(h["hostname"], host.trim());
    let start = h["started_unix_ms"].as_u64().expect("anchor");
    for r in &recs {
        let t = r["unix_ms"].as_u64().unwrap_or_else(|| panic!("no wall-clock time: {r}"));
        assert!((start..start + 60_000).contains(&t), "{t} not within a minute of {start}: {r}");
    }
    assert_eq!(recs[1]["event"], "hooks");
    let lost = events(&recs, "lost");
    assert_eq!(lost.len(), 1, "one lost record at the end: {recs:?}");
    assert_eq!(lost[0]["total"], 0);
    // Every reason, and how many records did arrive beside them.
    let reasons = [
        "ringbuf_full",
        "stash_full",
        "stash_miss",
        "storage_map_full",
        "tracked_full",
        "undecodable",
        "nvfs_async_miss",
        "bytes_map_full",
        "bytes_truncated",
        "over_budget",
    ];
    for r in reasons {
        assert_eq!(lost[0]["by_reason"][r], 0, "{r} in {}", lost[0]);
    }
    assert_eq!(lost[0]["by_reason"].as_object().map(|m| m.len()), Some(reasons.len()), "{}", lost[0]);
    assert!(lost[0]["delivered"].is_u64(), "delivered: {}", lost[0]);
}

#[test]
fn attached_process_exiting_ends_the_trace_with_a_note() {
    // It exits when its stdin closes, which the test does once the tracer has attached.
    let mut target = Command::new("cat").stdin(std::process::Stdio::piped()).spawn().unwrap();
    let mut t = Tracer::spawn(&[
        "attach".into(),
        target.id().to_string(),
        "--json".into(),
        "--duration".into(),
        "120".into(),
    ]);
    drop(target.stdin.take());
    target.wait().unwrap();
    let recs = t.finish();
    let notes = events(&recs, "note");
    assert!(
        notes.iter().any(|n| n["message"].as_str().unwrap().contains("exited")),
        "expected an 'exited' note: {recs:?}"
    );
    assert_eq!(events(&recs, "lost").len(), 1);
}

/// `--interval` equal to `--duration` prints the summary once (the final one), and
/// with the storage hooks left out, storage is "not traced", never "no file I/O seen".
#[test]
fn one_summary_when_interval_equals_duration_and_storage_off_is_not_traced() {
    let out = Command::new(gdr_trace())
        .args(["watch", "--duration", "1", "--interval", "1", "--no-storage"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.matches("-- so far").count(), 0, "no interim copy of the final summary:\n{text}");
    assert_eq!(text.matches("-- summary").count(), 1, "{text}");
    assert!(!text.contains("no file I/O seen"), "{text}");
    assert!(text.contains("-- storage: not traced (storage hooks left out) --"), "{text}");
    // The banner counts what was left out on purpose apart from what could not attach.
    assert!(text.contains("left out on purpose"), "{text}");
    assert!(!text.contains("! not attached: openat"), "{text}");
}
