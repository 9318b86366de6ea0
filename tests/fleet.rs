//! Host tests of the fleet and security commands: `report` on good, corrupt and truncated
//! recordings (no privilege), `audit` rating a captured machine's posture with `--fail-on`,
//! `serve` over HTTP and under a real Prometheus, SIGTERM, and the Kubernetes manifests.
//! Registrations themselves need an RDMA device: tests/vm_fleet.rs has those.

use std::{
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use clap::Parser;
use gdr_trace::{
    audit::{container, ProcessFacts},
    events::{Context, MrKind, MrRecord},
    recording::{End, Header, Item, FORMAT},
    sink::Lost,
};
use gdr_trace_tests::{
    events, gdr_trace, gdr_trace_for_anyone, ndjson,
    prom::{
        free_port, http_get, http_get_accept, openmetrics_check, promtool_check, sample_value, Prometheus,
    },
    Tracer,
};
use serde_json::{json, Value};

const ID: &str = "3f2a9c1b7d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";

fn rec(kind: MrKind, source: &str, pid: u32, ts: u64, addr: u64, len: u64, handle: u64) -> MrRecord {
    let ctx = Context { pid, tid: pid, comm: "trainer".into(), uid: 1000, cgroup_id: 7, ts_ns: ts };
    MrRecord {
        access: 7,
        device: Some("mlx5_0".into()),
        ..MrRecord::at(kind, source, ctx, addr, len, handle)
    }
}

/// A recording of one containerised process: a host MR and a GPU (peer-memory) MR with remote
/// write, one released.
fn recording() -> Vec<String> {
    let header = Header {
        format: FORMAT.into(),
        version: "0.1.0".into(),
        host: "gpu-node-7".into(),
        kernel: json!({
            "kernel": "6.1.0-57-amd64",
            "peermem": {
                "module": "nvidia_peermem",
                "param": "/sys/module/nvidia_peermem/parameters/persistent_api_support",
                "persistent_api_support": 1,
                "mode": "persistent"
            }
        }),
        hooks: json!([{ "hook": "ib_umem_get", "attached": "fexit" }, { "hook": "nv_mem_acquire", "attached": null }]),
        target_pid: None,
        posture: Default::default(),
        container_host_markers: vec![],
        started_unix_ms: 1,
        ..Default::default()
    };
    let cgroup = format!("/system.slice/docker-{ID}.scope");
    let facts = ProcessFacts {
        pid: 42,
        comm: "trainer".into(),
        uid: 1000,
        user: Some("alice".into()),
        cgroup_id: 7,
        container: container::parse(&cgroup),
        cgroup: Some(cgroup),
        uses_gpu: Some(true),
    };
    let ms = 1_000_000;
    // nvidia-peermem's default client nv_mem, in the order its calls return: nv_mem_acquire's
    // trial pin and unpin, nv_mem_acquire (1: mine), then nv_mem_get_pages_nc's persistent pin.
    let inside = |hook: &str, ts: u64, ret: i64| {
        let mut e = rec(MrKind::GpuEvidence, hook, 42, ts, 0x7f00_0000_0000, 2 << 20, 0);
        e.aux = 1;
        e.ret = ret;
        e
    };
    let evidence = [
        inside("kprobe:nvidia_p2p_get_pages", 5 * ms, 0),
        inside("kprobe:nvidia_p2p_put_pages", 5 * ms, 0),
        inside("kprobe:nv_mem_acquire", 5 * ms, 1),
        inside("kprobe:nvidia_p2p_get_pages_persistent", 5 * ms + 1, 0),
        inside("kprobe:nv_mem_get_pages_nc", 5 * ms + 1, 0),
    ];
    let mut items = vec![
        Item::Header(header),
        Item::Process(facts),
        Item::Record(rec(MrKind::Register, "fexit:ib_umem_get", 42, ms, 0x1000, 4096, 0xa1)),
        Item::Record(rec(MrKind::Register, "uprobe:ibv_reg_mr", 42, ms + 5, 0x1000, 4096, 0xb1)),
    ];
    items.extend(evidence.into_iter().map(Item::Record));
    items.extend([
        Item::Record(rec(
            MrKind::Register,
            "kprobe:ib_umem_get_peer",
            42,
            5 * ms + 2,
            0x7f00_0000_0000,
            2 << 20,
            0xa2,
        )),
        Item::Record(rec(MrKind::Release, "fentry:ib_umem_release", 42, 400 * ms, 0, 0, 0xa1)),
        Item::Note { message: "interrupted".into() },
        Item::End(End { lost: Lost::default(), records: 9, ended_unix_ms: 2 }),
    ]);
    items.iter().map(|i| serde_json::to_string(i).unwrap()).collect()
}

fn write(name: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("gdr-fleet-{}-{name}", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

/// `gdr-trace report` as nobody: no privilege needed.
fn report(path: &Path, extra: &[&str]) -> (Option<i32>, Vec<Value>, String) {
    let out = Command::new(gdr_trace_for_anyone())
        .arg("report")
        .arg(path)
        .arg("--json")
        .args(extra)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), ndjson(&String::from_utf8_lossy(&out.stdout)), stderr)
}

#[test]
fn report_replays_a_recording_without_privilege_and_gates_on_findings() {
    let p = write("good.ndjson", &(recording().join("\n") + "\n"));
    let (code, recs, err) = report(&p, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(recs[0]["event"], "recording");
    assert_eq!(recs[0]["host"], "gpu-node-7");
    let sums = events(&recs, "summary");
    assert_eq!(sums.len(), 1, "{recs:#?}");
    assert_eq!(sums[0]["pid"], 42);
    assert_eq!(sums[0]["registrations"], 2);
    assert_eq!(sums[0]["by_verdict"]["gpu-peermem"]["bytes"], 2 << 20);
    assert_eq!(sums[0]["by_verdict"]["host"]["live_bytes"], 0, "released");
    assert_eq!(sums[0]["process_verdict"], "gdr");
    assert_eq!(sums[0]["uses_gpu"], true, "GPU use as recorded");
    let f = events(&recs, "finding");
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!((&f[0]["id"], &f[0]["severity"]), (&json!("gpu-remote-write"), &json!("medium")));
    assert_eq!((&f[0]["user"], &f[0]["uid"], &f[0]["pid"]), (&json!("alice"), &json!(1000), &json!(42)));
    assert_eq!(f[0]["container"]["id"], ID);
    assert_eq!(f[0]["evidence"][0]["length"], 2 << 20);
    assert!(events(&recs, "mr_register").is_empty(), "summary and findings only, without --events");
    let (code, recs, _) = report(&p, &["--events", "--fail-on", "medium"]);
    assert_eq!(code, Some(1), "a medium finding fails --fail-on medium");
    let regs = events(&recs, "mr_register");
    assert_eq!(regs.len(), 2);
    assert_eq!(regs[1]["container"]["runtime"], "docker");
    assert_eq!(regs[1]["user"], "alice");
    assert_eq!(
        regs[1]["peer_client"], "nv_mem",
        "nv_mem_get_pages_nc with the recorded persistent mode: the default client nv_mem"
    );
    assert_eq!(regs[1]["verdict"], "gpu-peermem");
    let (code, _, _) = report(&p, &["--fail-on", "high"]);
    assert_eq!(code, Some(0));
    std::fs::remove_file(p).unwrap();
}

/// `report`'s text (the audit's tables and the summary) as people see it: within a terminal of
/// 100 columns with box lines, plain in a pipe.
#[test]
fn report_text_fits_a_100_column_terminal_and_is_plain_in_a_pipe() {
    use gdr_trace_tests::terminal::{flat, has_box_lines, has_escapes, on_terminal, too_wide};
    let path = write("term.ndjson", &(recording().join("\n") + "\n"));
    let mut cmd = Command::new(gdr_trace());
    cmd.arg("report").arg(&path);
    let s = on_terminal(cmd, 100);
    assert_eq!(s.code, Some(0), "{}", s.text);
    assert!(too_wide(&s.text, 100).is_empty(), "{:#?}\n{}", too_wide(&s.text, 100), s.text);
    assert!(has_box_lines(&s.text) && !has_escapes(&s.text), "{}", s.text);
    for part in ["-- who registered what --", "-- findings:", "-- summary --", "alice(1000)", "trainer"] {
        assert!(flat(&s.text).contains(part), "{part}:\n{}", s.text);
    }
    let out = Command::new(gdr_trace()).arg("report").arg(&path).env_remove("COLUMNS").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!has_box_lines(&text) && !has_escapes(&text), "{text}");
    let finding = "GPU memory registered with REMOTE_WRITE: a remote peer can write into it";
    assert!(
        text.lines().any(|l| l.starts_with(" medium ") && l.contains(finding)),
        "one line a row:\n{text}"
    );
    assert_eq!(flat(&text).matches("-- who registered what --").count(), 1, "{text}");
}

#[test]
fn corrupt_and_truncated_recordings_name_the_line_and_report_what_came_before() {
    let lines = recording();
    let mut corrupt = lines.clone();
    corrupt[4] = corrupt[4].replacen("\"pid\":42", "\"pid\":\"forty-two\"", 1);
    let p = write("corrupt.ndjson", &(corrupt.join("\n") + "\n"));
    let (code, recs, err) = report(&p, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("line 5: corrupt record"), "{err}");
    assert!(err.contains("2 record(s) before it are reported above"), "{err}");
    assert_eq!(events(&recs, "summary").len(), 1, "the host MR before the bad line is summarised: {recs:?}");

    let whole = lines.join("\n") + "\n";
    let cut = &whole[..whole.find("fentry:ib_umem_release").unwrap()];
    let p2 = write("truncated.ndjson", cut);
    let (code, recs, err) = report(&p2, &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("line 11: truncated record"), "{err}");
    assert_eq!(events(&recs, "summary")[0]["registrations"], 2);

    let p3 = write("unended.ndjson", &(lines[..lines.len() - 1].join("\n") + "\n"));
    let (code, _, err) = report(&p3, &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("line 12: the recording ends without its end record"), "{err}");

    let p4 = write("not.ndjson", "{\"event\":\"hooks\"}\n");
    let (code, _, err) = report(&p4, &[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("line 1: not a gdr-trace recording"), "{err}");
    for p in [p, p2, p3, p4] {
        std::fs::remove_file(p).unwrap();
    }
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/preflight").join(name)
}

fn audit(machine: &str, fail_on: &str) -> (Option<i32>, Vec<Value>) {
    let root = fixture(machine);
    let out = Command::new(gdr_trace())
        .args(["audit", "--json", "--duration", "1", "--fail-on", fail_on, "--sysfs-root"])
        .arg(root.join("sys"))
        .arg("--proc-root")
        .arg(root.join("proc"))
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    (out.status.code(), ndjson(&String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn audit_rates_the_machine_posture_for_tenants_and_gates_ci() {
    // rail-pix: ACS off on every GPU-NIC switch, IOMMU passthrough: right for GDR, open P2P.
    let (code, recs) = audit("rail-pix", "medium");
    assert_eq!(code, Some(1), "medium posture findings fail --fail-on medium: {recs:#?}");
    let f = events(&recs, "finding");
    let ids: Vec<(&str, &str)> =
        f.iter().map(|f| (f["id"].as_str().unwrap(), f["severity"].as_str().unwrap())).collect();
    // PeerMappingOverride set (GPU-handled IBGDA): low on one tenant, high where tenants share.
    assert_eq!(
        ids,
        [("acs-disabled", "medium"), ("iommu-passthrough", "medium"), ("peer-mapping-override", "low")],
        "{f:#?}"
    );
    assert!(f[2]["evidence"].to_string().contains("PeerMappingOverride=1"), "{}", f[2]);
    assert!(f[0]["evidence"].to_string().contains("/config"), "ACS evidence names config space: {}", f[0]);
    assert!(f[1]["evidence"].to_string().contains("identity"), "{}", f[1]);
    let end = events(&recs, "audit_summary");
    assert_eq!(end[0]["findings"]["medium"], 2);
    assert_eq!(end[0]["worst"], "medium");
    // cross-socket: ACS redirects, IOMMU translates: isolated (info only).
    let (code, recs) = audit("cross-socket", "low");
    assert_eq!(code, Some(0), "{recs:#?}");
    let ids: Vec<&str> = events(&recs, "finding").iter().map(|f| f["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["acs-enabled", "iommu-translating", "peer-mapping-default"]);
}

#[test]
fn record_refuses_before_making_a_file() {
    let p = std::env::temp_dir().join(format!("gdr-fleet-{}-never.ndjson", std::process::id()));
    let out = Command::new(gdr_trace())
        .arg("record")
        .arg("-o")
        .arg(&p)
        .args(["--pid", "999999999"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no process with PID 999999999"));
    let out = Command::new(gdr_trace_for_anyone())
        .arg("record")
        .arg("-o")
        .arg(&p)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("CAP_BPF"));
    assert!(!p.exists(), "no file without a trace");
}

fn serve(port: u16) -> Tracer {
    let addr = format!("127.0.0.1:{port}");
    Tracer::spawn(&["serve", "--json", "--listen", &addr, "--interval", "1"].map(String::from))
}

#[test]
fn serve_answers_metrics_and_healthz_and_ends_cleanly_on_sigterm() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut t = serve(port);
    // What Prometheus 2.42 sends: OpenMetrics first.
    let accept =
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,\
                  text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (status, head, body) = http_get_accept(&addr, "/metrics", Some(accept)).unwrap();
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    openmetrics_check(&body).unwrap();
    assert!(promtool_check(&body).is_err(), "promtool reads only text 0.0.4 (info, # EOF): it can fail");
    // No Accept header (curl, most scrapers): Prometheus text 0.0.4, clean under promtool.
    let (status, head, text) = http_get(&addr, "/metrics").unwrap();
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    assert!(text.contains("# TYPE gdr_trace_build_info gauge\n") && !text.contains("# EOF"), "{text}");
    promtool_check(&text).unwrap();
    let names = gdr_trace_tests::prom::sample_names;
    assert_eq!(names(&text), names(&body), "the same series in both formats");
    assert!(
        body.contains(
            "gdr_trace_hook_attached{hook=\"ibv_reg_mr\",side=\"user\",attach=\"uprobe+uretprobe\"} 1"
        ),
        "{body}"
    );
    assert!(body.contains("gdr_trace_lost_events_total{reason=\"ringbuf_full\"} 0"), "{body}");
    let (status, _, health) = http_get(&addr, "/healthz").unwrap();
    assert_eq!(status, 200, "{health}");
    // Without a kernel registration hook (no ib_core here, or no kprobes nor fentry), the
    // memory type of registrations can't be told: said, as the metric does.
    let told = body.contains("gdr_trace_fact_told{family=\"rdma\",fact=\"memory_type\"} 1");
    assert!(told || body.contains("gdr_trace_fact_told{family=\"rdma\",fact=\"memory_type\"} 0"), "{body}");
    let want =
        if told { "ok: " } else { "warn: memory type of registrations (host or GPU) cannot be told here" };
    assert!(health.starts_with(want), "{health}");
    // Storage not traced here (fentry refused, no --storage): no storage series, and the
    // families say what is on.
    if body.contains("gdr_trace_hook_family_enabled{family=\"storage\"} 0") {
        assert!(!body.contains("gdr_trace_storage"), "{body}");
    }
    assert!(body.contains("gdr_trace_hook_family_enabled{family=\"rdma\"} 1"), "{body}");
    assert_eq!(http_get(&addr, "/nope").unwrap().0, 404);
    let recs = t.terminate();
    let notes: Vec<&Value> = events(&recs, "note");
    assert!(notes.iter().any(|n| n["message"] == "terminated (SIGTERM)"), "{recs:?}");
    assert_eq!(events(&recs, "lost").len(), 1, "the final summary came out");
    assert!(http_get(&addr, "/metrics").is_err(), "the server is gone with the tracer");
}

#[test]
fn prometheus_scrapes_serve() {
    let port = free_port();
    let mut t = serve(port);
    let prom = Prometheus::start(&format!("127.0.0.1:{port}"));
    let up = prom.wait_for("up{job=\"gdr-trace\"}", Duration::from_secs(30), |r| {
        r.first().is_some_and(|s| sample_value(s) == 1.0)
    });
    assert_eq!(up[0]["metric"]["instance"], format!("127.0.0.1:{port}"));
    let hooks = prom
        .wait_for("gdr_trace_hook_attached{hook=\"ibv_reg_mr\"}", Duration::from_secs(10), |r| !r.is_empty());
    assert_eq!(sample_value(&hooks[0]), 1.0);
    assert_eq!(hooks[0]["metric"]["attach"], "uprobe+uretprobe");
    let info = prom.query("gdr_trace_build_info");
    assert_eq!(info[0]["metric"]["version"], env!("CARGO_PKG_VERSION"));
    t.terminate();
}

#[path = "fleet/busy.rs"]
mod busy;
#[path = "fleet/deploy.rs"]
mod deploy;
#[path = "fleet/not_traced.rs"]
mod not_traced;
#[path = "fleet/web.rs"]
mod web;
