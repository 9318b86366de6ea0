//! The security reviewer's and the cluster operator's flows against real registrations, in the
//! VM (rxe0, the simulated NVIDIA driver of tests/kmod): `audit` attributing users and
//! containers, `record` + `report` giving the live summary, `serve` scraped by a real
//! Prometheus, and the least capabilities that trace. Run by `cargo xtask test` inside the VM
//! with `--ignored --test-threads=1`.

use std::{
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use gdr_trace_tests::{
    events, gdr_trace, gdr_trace_for_anyone,
    kmods::{env, module, Module},
    ndjson,
    prom::{free_port, http_get, sample_value, Prometheus},
    wait_bounded, Lines, Paranoid, Tracer, Workload, PARANOID,
};
use serde_json::{json, Value};

const DOCKER_ID: &str = "3f2a9c1b7d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";
const CRI_ID: &str = "9e8d7c6b5a49382716059f8e7d6c5b4a39281706f5e4d3c2b1a0918273645546";
const POD: &str = "8a2f4c1e-3b5d-4e6f-9a7b-1c2d3e4f5a6b";
const NOBODY: u32 = 65534;

/// The simulated driver without module BTF: these tests assert kprobe attach modes, which the
/// BTF flavour would turn into fentry.
fn gdrsim_loaded() {
    module(Module::NoBtf);
}

/// gdrsim-workload waiting for "go", as `uid` when given (setpriv execs it: same pid).
fn gdrsim(uid: Option<u32>, args: &[&str]) -> Workload {
    let w = env("GDR_GDRSIM_WORKLOAD");
    let env = [("GDRSIM_IBDEV", "rxe0")];
    match uid {
        None => Workload::spawn_exec(&w, args, &env),
        Some(u) => {
            let u = u.to_string();
            let mut a = vec!["--reuid", &u, "--regid", &u, "--clear-groups", &w];
            a.extend_from_slice(args);
            Workload::spawn_exec("setpriv", &a, &env)
        }
    }
}

/// Moves `pid` into a cgroup (v2, mounted at /sys/fs/cgroup in the VM) named like a container's.
fn into_cgroup(rel: &str, pid: u32) -> PathBuf {
    let dir = Path::new("/sys/fs/cgroup").join(rel);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
    dir
}

fn sigterm(child: &std::process::Child) {
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
}

/// SIGTERM, then every record until exit after those already `seen`; the exit code. No wait
/// first: on a stop the tracer drains the ring and closes every open correlation itself.
fn stop(t: &mut Tracer, mut seen: Vec<Value>) -> (Vec<Value>, Option<i32>) {
    sigterm(&t.child);
    let lines = t.out.rest(Duration::from_secs(120), "gdr-trace to stop");
    seen.extend(ndjson(&lines.join("\n")));
    let status =
        wait_bounded(&mut t.child, Duration::from_secs(120)).unwrap_or_else(|e| panic!("gdr-trace: {e}"));
    (seen, status.code())
}

/// Runs a `--hold-stdin` gdrsim workload to its end, holding its registration until `t` has
/// printed it (`mr_register`: by then the tracer has read the process's /proc, and `record` has
/// written its process facts); the tracer's records read meanwhile.
fn run_held(w: &mut Workload, t: &mut Tracer) -> Vec<Value> {
    w.go();
    let pid = w.pid();
    let (_, recs) = w.hold_until_traced(t, |r| r["event"] == "mr_register" && r["pid"] == pid);
    w.finish();
    recs
}

fn only<'a>(recs: &'a [&'a Value], what: &str, pid: u32) -> &'a Value {
    let v: Vec<&&Value> = recs.iter().filter(|r| r["pid"] == pid).collect();
    assert_eq!(v.len(), 1, "one {what} for pid {pid}: {recs:#?}");
    v[0]
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn audit_attributes_users_and_containers_and_flags_remote_write_on_gpu_memory() {
    gdrsim_loaded();
    let log = std::env::temp_dir().join("gdr-audit-log.ndjson");
    let _ = std::fs::remove_file(&log); // never overwritten: a new name each run
    let mut t = Tracer::spawn(
        &["audit", "--json", "--interval", "0", "--fail-on", "high", "--log", log.to_str().unwrap()]
            .map(String::from),
    );
    // nobody, in a Docker container: GPU memory with REMOTE_WRITE.
    let mut a = gdrsim(Some(NOBODY), &["--hold-stdin", "--access", "7", "peer", "2097152"]);
    let docker = into_cgroup(&format!("system.slice/docker-{DOCKER_ID}.scope"), a.pid());
    // root on the host: GPU memory, local write only.
    let mut b = gdrsim(None, &["--access", "1", "peer", "2097152"]);
    // root in a Kubernetes pod: host memory with REMOTE_WRITE (not GPU memory: no finding).
    let mut c = gdrsim(None, &["--access", "7", "peer-host", "65536"]);
    let pod_ = POD.replace('-', "_");
    let pod = into_cgroup(
        &format!(
            "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{pod_}.slice/cri-containerd-{CRI_ID}.scope"
        ),
        c.pid(),
    );
    let seen = run_held(&mut a, &mut t);
    for w in [&mut b, &mut c] {
        w.go();
        w.finish();
    }
    let (recs, code) = stop(&mut t, seen);
    assert_eq!(code, Some(1), "a high finding fails --fail-on high: {recs:#?}");
    let (ap, bp, cp) = (a.pid(), b.pid(), c.pid());

    let regs = events(&recs, "mr_register");
    assert_eq!(regs.len(), 3, "{regs:#?}");
    let ra = only(&regs, "registration", ap);
    assert_eq!(
        (&ra["uid"], &ra["user"], &ra["verdict"]),
        (&json!(NOBODY), &json!("nobody"), &json!("gpu-peermem"))
    );
    assert_eq!(
        ra["container"],
        json!({ "runtime": "docker", "id": DOCKER_ID, "pod_uid": null, "qos": null })
    );
    assert_eq!(ra["cgroup"], format!("/system.slice/docker-{DOCKER_ID}.scope"));
    assert!(ra["access_flags"].to_string().contains("REMOTE_WRITE"));
    let rb = only(&regs, "registration", bp);
    assert_eq!((&rb["uid"], &rb["user"], &rb["container"]), (&json!(0), &json!("root"), &Value::Null));
    assert_eq!(rb["verdict"], "gpu-peermem");
    let rc = only(&regs, "registration", cp);
    assert_eq!(rc["verdict"], "host");
    assert_eq!(
        rc["container"],
        json!({ "runtime": "containerd", "id": CRI_ID, "pod_uid": POD, "qos": "besteffort" })
    );

    let f = events(&recs, "finding");
    let remote: Vec<&&Value> = f.iter().filter(|f| f["id"] == "gpu-remote-write").collect();
    assert_eq!(remote.len(), 1, "only the GPU memory with REMOTE_WRITE, not the host memory: {f:#?}");
    let r = remote[0];
    assert_eq!((&r["pid"], &r["severity"], &r["user"]), (&json!(ap), &json!("high"), &json!("nobody")));
    assert_eq!(r["container"]["id"], DOCKER_ID);
    assert_eq!(r["evidence"][0]["verdict"], "gpu-peermem");
    let tenants = f.iter().find(|f| f["id"] == "gpu-multi-tenant").expect("two tenants exposed GPU memory");
    let uids: Vec<&Value> = tenants["evidence"].as_array().unwrap().iter().map(|t| &t["uid"]).collect();
    assert_eq!(uids, [&json!(0), &json!(NOBODY)], "{tenants}");
    let out: Vec<&&Value> = f.iter().filter(|f| f["id"] == "uncontained-registration").collect();
    assert_eq!(out.len(), 1, "only the host process is outside a container: {f:#?}");
    assert_eq!((&out[0]["pid"], &out[0]["severity"]), (&json!(bp), &json!("medium")));
    assert_eq!(events(&recs, "audit_summary")[0]["worst"], "high");

    // The audit log: the same registrations and findings.
    let logged = ndjson(&std::fs::read_to_string(&log).unwrap());
    assert_eq!(events(&logged, "mr_register").len(), 3);
    assert_eq!(events(&logged, "finding").len(), f.len());
    assert!(events(&logged, "hooks").is_empty(), "the log has registrations and findings only");
    eprintln!("audit log:\n{}", std::fs::read_to_string(&log).unwrap());
    for d in [docker, pod] {
        let _ = std::fs::remove_dir(d);
    }
}

/// The final summaries and the lost line, without `delivered` (live traces only: a replay
/// does not know what reached userspace).
fn summaries(recs: &[Value]) -> Vec<Value> {
    let mut v: Vec<Value> =
        recs.iter().filter(|r| r["event"] == "summary" || r["event"] == "lost").cloned().collect();
    for r in &mut v {
        if let Some(o) = r.as_object_mut() {
            o.remove("delivered");
            // When the line was written: a live stream's own.
            o.remove("unix_ms");
        }
    }
    v
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn a_live_run_recorded_and_replayed_gives_the_same_summary() {
    gdrsim_loaded();
    let file = std::env::temp_dir().join("gdr-live.ndjson");
    let _ = std::fs::remove_file(&file); // never overwritten: a new name each run
    let mut t = Tracer::spawn(
        &["record", "-o", file.to_str().unwrap(), "--json", "--interval", "1"].map(String::from),
    );
    let mut gpu = gdrsim(None, &["--hold-stdin", "peer", "2097152"]);
    let mut host = gdrsim(None, &["--hold-stdin", "host-mr", "65536"]);
    let mut verbs = Workload::spawn(&["4096:1", "8192:3"]);
    let mut seen = run_held(&mut gpu, &mut t);
    seen.extend(run_held(&mut host, &mut t));
    verbs.go();
    verbs.finish();
    let (live, code) = stop(&mut t, seen);
    assert_eq!(code, Some(0));
    let live_sums = summaries(&live);
    assert_eq!(live_sums.len(), 4, "three processes and the lost line: {live_sums:#?}");

    let text = std::fs::read_to_string(&file).unwrap();
    // No buffer address as it was: each process's are moved by the recording's secret offset.
    let addrs: Vec<u64> = events(&live, "mr_register")
        .iter()
        .filter_map(|r| r["addr"].as_u64())
        .filter(|a| *a > 1 << 32)
        .collect();
    assert!(!addrs.is_empty(), "the live line showed the MRs' addresses");
    for a in &addrs {
        assert!(!text.contains(&a.to_string()), "address {a:#x} written as it was");
    }
    let items = ndjson(&text);
    assert_eq!(items[0]["event"], "header");
    assert_eq!(items[0]["format"], "gdr-trace.recording/2");
    assert!(!items[0]["hooks"].as_array().unwrap().is_empty());
    let end = items.last().unwrap();
    assert_eq!(end["event"], "end");
    assert_eq!(end["records"].as_u64().unwrap() as usize, events(&items, "record").len());
    assert_eq!(events(&items, "process").iter().filter(|p| p["uses_gpu"] == true).count(), 2);

    // The recording is its maker's alone; shared with nobody, as a user would hand it on.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    std::os::unix::fs::chown(&file, Some(NOBODY), Some(NOBODY)).unwrap();
    // Replayed without privilege: the same summaries, field for field.
    let out = Command::new(gdr_trace_for_anyone())
        .arg("report")
        .arg(&file)
        .arg("--json")
        .uid(NOBODY)
        .gid(NOBODY)
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success());
    let replayed = ndjson(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(summaries(&replayed), live_sums);
    let delivered = |recs: &[Value]| events(recs, "lost")[0].get("delivered").and_then(Value::as_u64);
    assert!(delivered(&live).is_some_and(|d| d > 0), "the live lost line says what arrived");
    assert_eq!(delivered(&replayed), None, "a replay does not claim to know");
    let sum = |pid: u32| live_sums.iter().find(|s| s["pid"] == pid).unwrap();
    assert_eq!(sum(gpu.pid())["process_verdict"], "gdr");
    assert_eq!(sum(host.pid())["process_verdict"], "host-staged");
    assert_eq!(sum(verbs.pid())["registrations"], 2);
    let text_report = Command::new(gdr_trace()).arg("report").arg(&file).output().unwrap();
    eprintln!("report (text):\n{}", String::from_utf8_lossy(&text_report.stdout));
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn prometheus_scrapes_registrations_from_serve_with_bounded_series() {
    gdrsim_loaded();
    let port = free_port();
    let target = format!("127.0.0.1:{port}");
    let mut t = Tracer::spawn(
        &["serve", "--json", "--listen", &target, "--interval", "1", "--top", "1"].map(String::from),
    );
    let prom = Prometheus::start(&target);
    let wait = Duration::from_secs(60);
    prom.wait_for("up{job=\"gdr-trace\"}", wait, |r| r.first().is_some_and(|s| sample_value(s) == 1.0));
    // The GPU process holds (its MR registered) until Prometheus has scraped its series: once it
    // exits, its series are retired into "other" a summary later, which a 2 s scrape may miss.
    let mut gpu = gdrsim(None, &["--hold-stdin", "--access", "7", "peer", "2097152"]);
    gpu.go();
    let pid = gpu.pid();
    assert!(gpu.until_hold().1, "the GPU workload held after registering");
    t.until("the GPU workload's registration", |r| r["event"] == "mr_register" && r["pid"] == pid);
    let q = "gdr_trace_registered_bytes_total{comm=\"gdrsim-workload\",verdict=\"gpu-peermem\"}";
    let r = prom.wait_for(q, wait, |r| r.first().is_some_and(|s| sample_value(s) == 2097152.0));
    assert_eq!(r[0]["metric"]["device"], "efa_sim0");
    eprintln!("scraped: {q} => {}", serde_json::to_string(&r).unwrap());
    gpu.go();
    gpu.finish();
    let mut verbs = Workload::spawn(&["4096:1", "8192:3"]);
    verbs.go();
    verbs.finish();
    // --top 1, and both processes have exited: every series ends under comm="other" (an exited
    // identity's series are retired into it), with every registration still counted.
    let q = "gdr_trace_registrations_total{verdict=\"host\"}";
    let r = prom.wait_for(q, wait, |r| {
        r.len() == 1 && r[0]["metric"]["comm"] == "other" && sample_value(&r[0]) == 2.0
    });
    assert_eq!(r[0]["metric"]["device"], "rxe0");
    // Both processes have exited: their identities' series are retired into comm="other" (a
    // tenant's exited processes leave no series behind), and every registration stays counted.
    let q = "count by (comm) (gdr_trace_registrations_total)";
    let comms = prom.wait_for(q, wait, |r| r.len() == 1 && r[0]["metric"]["comm"] == "other");
    assert_eq!(comms.len(), 1, "only other: {comms:?}");
    let q = "sum(gdr_trace_registrations_total)";
    prom.wait_for(q, wait, |r| r.first().is_some_and(|s| sample_value(s) == 3.0));
    let live = prom.wait_for("sum(gdr_trace_live_pinned_bytes)", wait, |r| {
        r.first().is_some_and(|s| sample_value(s) == 0.0)
    });
    assert_eq!(live.len(), 1, "released: nothing pinned");
    let released = prom.wait_for("gdr_trace_releases_total", wait, |r| r.len() == 2);
    let by: Vec<(String, f64)> = released
        .iter()
        .map(|s| (s["metric"]["verdict"].as_str().unwrap().to_string(), sample_value(s)))
        .collect();
    assert!(by.contains(&("gpu-peermem".into(), 1.0)) && by.contains(&("host".into(), 2.0)), "{by:?}");
    let f = prom.query("gdr_trace_findings{id=\"gpu-remote-write\"}");
    assert_eq!((f.len(), sample_value(&f[0])), (1, 1.0), "{f:?}");
    assert_eq!(sample_value(&prom.query("gdr_trace_processes{process_verdict=\"gdr\"}")[0]), 1.0);
    // The verbs workload (past --top 1) and, once exited, the GPU process: both under "other".
    assert_eq!(sample_value(&prom.query("gdr_trace_other_processes")[0]), 2.0);
    let hook = prom.query("gdr_trace_hook_attached{hook=\"ib_umem_get_peer\"}");
    assert_eq!((sample_value(&hook[0]), &hook[0]["metric"]["attach"]), (1.0, &json!("kprobe+kretprobe")));
    assert_eq!(sample_value(&prom.query("gdr_trace_lost_events_total{reason=\"ringbuf_full\"}")[0]), 0.0);

    // SIGTERM: the trace ends cleanly and the server with it.
    let (recs, code) = stop(&mut t, vec![]);
    assert_eq!(code, Some(0));
    assert!(events(&recs, "note").iter().any(|n| n["message"] == "terminated (SIGTERM)"));
    assert!(http_get(&target, "/healthz").is_err());
}

#[path = "vm_fleet/caps.rs"]
mod caps;
