//! The NDJSON stream follows the JSON Schemas in docs/schema/events/ (one per record
//! type, `gdr-trace.events/1`). Validated on real output: a live `watch --json` on this
//! machine (root, BPF), and every other record type written by the real JSON sink. Recordings
//! (`record -o`) follow docs/schema/recording/ (`recording.rs`).

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Command,
};

use gdr_trace::{
    events::{
        storage::{GdsCall, NvfsIo},
        Context,
    },
    facts::{HookStatus, KernelFacts, LibraryCopy},
    mr::aggregate::Aggregator,
    mr::classify::Verdict,
    mr::correlate::{GpuFreed, GpuPin, Registration, Release},
    p2p::GpuIpc,
    sink::{json::JsonSink, Lost, Output, Sink},
    storage::state::GdsIo,
};
use gdr_trace_tests::gdr_trace;
use serde_json::{json, Value};

#[path = "schema/recorded.rs"]
mod recorded;
#[path = "schema/recording.rs"]
mod recording;

/// Every schema in docs/schema/events/, by record type.
fn schemas() -> BTreeMap<String, jsonschema::Validator> {
    schemas_in("events")
}

/// Every schema in docs/schema/<dir>/, by record type (`properties.event.const`: the file's).
fn schemas_in(dir: &str) -> BTreeMap<String, jsonschema::Validator> {
    let dir = format!("{}/../docs/schema/{dir}", env!("CARGO_MANIFEST_DIR"));
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let Some(event) = name.strip_suffix(".schema.json") else { continue };
        let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(schema["properties"]["event"]["const"], event, "{name}");
        let v = jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{name}: {e}"));
        out.insert(event.to_string(), v);
    }
    out
}

/// Validates every line; returns the record types seen.
fn validate(schemas: &BTreeMap<String, jsonschema::Validator>, ndjson: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in ndjson.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let event = v["event"].as_str().unwrap_or_else(|| panic!("no event: {line}")).to_string();
        let schema = schemas.get(&event).unwrap_or_else(|| panic!("no schema for {event:?}: {line}"));
        let errors: Vec<String> =
            schema.iter_errors(&v).map(|e| format!("{e} at {}", e.instance_path)).collect();
        assert!(errors.is_empty(), "{event} does not follow its schema: {errors:#?}\n{line}");
        seen.insert(event);
    }
    seen
}

fn ctx(pid: u32) -> Context {
    Context { pid, tid: pid, comm: "trainer".into(), uid: 1000, cgroup_id: 7, ts_ns: 1_000_000 }
}

fn facts() -> KernelFacts {
    KernelFacts {
        kernel: "6.1.0".into(),
        vmlinux_btf: true,
        ib_device_name_off: Some(0),
        dmabuf_exporter_readable: true,
        kprobe_unavailable: None,
        fentry_unavailable: None,
        storage_offsets_unknown: vec![],
        peermem: None,
        driver: None,
        fact_sources: vec![gdr_trace::facts::FactSource::device(true, true)],
    }
}

/// Every record type the JSON sink writes, through the sink itself (as a live stream).
fn every_kind() -> String {
    let mut out = Vec::new();
    let mut s = JsonSink::new(&mut out);
    let hook = HookStatus {
        hook: "ib_umem_get",
        side: "kernel",
        location: Some("ib_core".into()),
        attached: Some("fexit".into()),
        reasons: vec![],
    };
    s.start(&facts(), &[hook]);
    let reg =
        Registration { id: 1, ctx: ctx(42), addr: 0x1000, length: 2 << 20, access: 7, ..Default::default() };
    s.emit(&Output::Registered { reg: &reg, verdict: Verdict::GpuPeermem });
    let counts = gdr_trace_common::mr::bytes::ByteCount { bytes_out: 65536, bytes_in: 0, ops: 1, tenant: 0 };
    let rel = Release {
        ctx: ctx(42),
        registration: Some(1),
        lkey: Some(0x1234),
        wr_bytes: Some(counts),
        ..Default::default()
    };
    s.emit(&Output::Released { rel: &rel, owner: Some((42, Verdict::GpuPeermem)) });
    let pin = GpuPin {
        ctx: ctx(43),
        source: "kprobe:nvidia_p2p_get_pages".into(),
        gpu_va: 1 << 40,
        length: 1 << 16,
        ret: 0,
    };
    s.emit(&Output::GpuPin(&pin));
    let freed =
        GpuFreed { ctx: ctx(42), registration: Some(1), source: "kprobe:nv_mem_free_callback".into() };
    s.emit(&Output::GpuFreed { freed: &freed, owner: Some(42) });
    let call: GdsCall = serde_json::from_value(json!({
        "ctx": ctx(44), "op": "Read", "source": "uprobe:cuFileRead", "fd": 3, "handle": 1, "buf": 0,
        "length": 4096, "file_offset": 0, "buf_offset": 0, "ret": 4096,
        "tally": gdr_trace_common::storage::GdsTally { nvfs_calls: 1, nvfs_bytes: 4096, ..Default::default() },
        "batch": null, "detail": gdr_trace::events::storage::GdsDetail::default()
    }))
    .expect("a cuFile call");
    let io = GdsIo {
        call,
        fd: Some(3),
        path: Some("/data/x".into()),
        verdict: None,
        worker: Default::default(),
        mode: Default::default(),
    };
    s.emit(&Output::Gds(&io));
    let nvfs: NvfsIo = serde_json::from_value(json!({
        "ctx": ctx(44), "source": "kprobe:nvfs_ioctl", "cmd": 0x4004_7402u32, "fd": 3, "write": false,
        "size": 4096, "offset": 0, "ret": 0, "io_ret": 4096, "in_call": true, "cpuvaddr": 0, "gpuvaddr": 0,
        "batch": null
    }))
    .expect("an nvidia-fs call");
    s.emit(&Output::Nvfs { io: &nvfs, path: Some("/data/x") });
    let direct = NvfsIo { cmd: None, ..nvfs.clone() };
    s.emit(&Output::Nvfs { io: &direct, path: None });
    let ipc = GpuIpc {
        ctx: ctx(45),
        op: "cuIpcOpenMemHandle".into(),
        length: Some(1 << 20),
        exporter_pid: Some(42),
        exporter_uid: Some(1000),
        exporter_comm: Some("trainer".into()),
        ret: 0,
    };
    s.emit(&Output::GpuIpc(&ipc));
    s.emit(&Output::Note("interrupted"));
    let copy = LibraryCopy {
        library: "libcufile.so.0".into(),
        state: "attached".into(),
        path: "/usr/lib/libcufile.so.0".into(),
        ..Default::default()
    };
    s.emit(&Output::LibraryCopy(&copy));
    // A host MR in CUDA pinned memory allocated before the trace: its origin by the kernel's map.
    let host = Registration {
        id: 2,
        ctx: ctx(42),
        addr: 0x7f00_0000_0000,
        length: 1 << 20,
        host_origin: Some(gdr_trace::p2p::HostMrOrigin::of(None, true)),
        ..Default::default()
    };
    s.emit(&Output::Registered { reg: &host, verdict: Verdict::Host });
    let rel =
        Release { ctx: ctx(42), registration: Some(2), host_origin: host.host_origin, ..Default::default() };
    s.emit(&Output::Released { rel: &rel, owner: Some((42, Verdict::Host)) });
    let mut agg = Aggregator::new();
    agg.registered(&reg, Verdict::GpuPeermem);
    let mut ledger = gdr_trace::mr::bytes::Ledger::default();
    ledger.registered(42, (0, 0x1234), 1, "gpu-peermem");
    ledger.released(42, (0, 0x1234), Some(gdr_trace::mr::bytes::Moved::of(&counts)));
    ledger.registered(42, (0, 0x99), 2, "host");
    let live = gdr_trace_common::mr::bytes::ByteKey { tgid: 42, lkey: 0x99, dev: 0 };
    ledger.reading(&[(live, counts)]);
    agg.set_bytes(&ledger);
    agg.registered(&host, Verdict::Host);
    s.emit(&Output::Summary { agg: &agg, lost: &Lost::default(), last: true });
    // Queue memory: a CQ ring pinned in create_cq, its release, the per-process summary.
    let cq = Registration {
        ctx: ctx(46),
        addr: 0x7f10_0000_0000,
        length: 65536,
        umem: Some(0xffff_8000_0000_1000),
        purpose: gdr_trace::events::purpose::Purpose {
            verb: Some(gdr_trace::events::purpose::Verb::CreateCq),
            doorbell: false,
        },
        sources: vec!["kprobe:ib_umem_get".into()],
        device: Some("mlx5_0".into()),
        ..Default::default()
    };
    let mut queues = gdr_trace::queues::Queues::new(true);
    let qpin = gdr_trace::queues::QueuePin::of(&cq, gdr_trace::queues::QueueKind::Cq, Verdict::Host);
    s.emit(&Output::QueuePin(&qpin));
    queues.pinned(&qpin);
    let unknown = gdr_trace::queues::QueuePin::of(&cq, gdr_trace::queues::QueueKind::Unknown, Verdict::Host);
    s.emit(&Output::QueuePin(&unknown));
    let qrel =
        queues.released(&Release { ctx: ctx(46), umem: cq.umem, ..Default::default() }).expect("a queue's");
    s.emit(&Output::QueueRelease(&qrel));
    s.emit(&Output::QueueSummary { report: &queues.report(), last: true });
    let gate = gdr_trace::gate::Outcome { code: 0, reason: "moved 65536 bytes through GPU memory".into() };
    out.extend_from_slice(format!("{}\n", gdr_trace::gate::record(&gate)).as_bytes());
    String::from_utf8(out).unwrap()
}

#[test]
fn every_record_type_follows_its_schema() {
    let schemas = schemas();
    let seen = validate(&schemas, &every_kind());
    for want in [
        "header",
        "hooks",
        "mr_register",
        "mr_release",
        "gpu_pin",
        "gpu_freed",
        "gds_io",
        "nvfs_io",
        "nvfs_direct_io",
        "gpu_ipc",
        "note",
        "library_copy",
        "summary",
        "lost",
        "queue_pin",
        "queue_release",
        "queue_summary",
        "gate",
        "mr_bytes",
    ] {
        assert!(seen.contains(want), "{want} not written: {seen:?}");
    }
    // A schema that checks nothing would pass anything: a record without its fields fails.
    let bad = r#"{"event":"mr_register","unix_ms":1,"pid":1}"#;
    let v: Value = serde_json::from_str(bad).unwrap();
    assert!(!schemas["mr_register"].is_valid(&v), "an incomplete record must fail");
    // The origin's words are the schema's: a wrong one fails.
    let mut host: Value = every_kind()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["event"] == "mr_register" && v["host_origin"].is_string())
        .expect("a host MR with its origin");
    assert_eq!(
        (host["host_origin"].as_str(), host["origin_evidence"].as_str()),
        (Some("cuda-pinned"), Some("kernel map"))
    );
    assert!(schemas["mr_register"].is_valid(&host));
    host["origin_evidence"] = "maps".into();
    assert!(!schemas["mr_register"].is_valid(&host), "an unknown evidence must fail");
}

#[test]
fn a_live_watch_stream_follows_the_schemas() {
    // File I/O of its own while the tracer runs (the machine may be idle otherwise): a process
    // that writes and reads back a file on a real filesystem every 50 ms for 6 s.
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("schema-io.bin");
    let script = format!(
        "for i in $(seq 1 120); do echo $i > '{0}'; cat '{0}' > /dev/null; sleep 0.05; done",
        file.display()
    );
    let mut io = Command::new("sh").args(["-c", &script]).spawn().unwrap();
    let out = Command::new(gdr_trace())
        .args(["watch", "--json", "--files", "--duration", "2", "--interval", "1"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success());
    // File I/O while it traces: the storage records appear.
    let text = String::from_utf8(out.stdout).unwrap();
    let seen = validate(&schemas(), &text);
    for want in ["header", "hooks", "lost"] {
        assert!(seen.contains(want), "{want}: {seen:?}");
    }
    assert!(io.wait().unwrap().success());
    assert!(
        seen.contains("file_io_summary") && seen.contains("storage_summary"),
        "the writer's file I/O: {seen:?}"
    );
}

/// `audit --json` and `report --json`: their own records (each finding, the audit summary, the
/// replayed recording's first record) follow their schemas too, with a wall-clock time each.
#[test]
fn audit_and_report_streams_follow_the_schemas() {
    use gdr_trace::{audit::Posture, sink::audit::AuditSink};
    let schemas = schemas();
    // A GPU registration a remote peer can write: a finding, rated in-process.
    let (mut inner, mut out) = (Vec::new(), Vec::new());
    {
        let mut sink =
            AuditSink::new(Box::new(JsonSink::new(&mut inner)), Box::new(&mut out), true, Posture::default());
        sink.start(&facts(), &[]);
        let reg = Registration { id: 1, ctx: ctx(42), length: 1 << 20, access: 1 | 2, ..Default::default() };
        sink.emit(&Output::Registered { reg: &reg, verdict: Verdict::GpuPeermem });
        let mut agg = Aggregator::new();
        agg.registered(&reg, Verdict::GpuPeermem);
        sink.emit(&Output::Summary { agg: &agg, lost: &Lost::default(), last: true });
    }
    let text = String::from_utf8(out).unwrap();
    let seen = validate(&schemas, &text);
    assert!(seen.contains("finding") && seen.contains("audit_summary"), "{seen:?}\n{text}");
    // A real recording of this machine, replayed.
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("schema-report.ndjson");
    // `record` never overwrites: a file left by an earlier run of this test goes first.
    let _ = std::fs::remove_file(&file);
    let rec = Command::new(gdr_trace())
        .arg("record")
        .arg("-o")
        .arg(&file)
        .args(["--duration", "1", "--interval", "0"])
        .output()
        .unwrap();
    assert!(rec.status.success(), "{}", String::from_utf8_lossy(&rec.stderr));
    let rep = Command::new(gdr_trace()).arg("report").arg("--json").arg(&file).output().unwrap();
    let text = String::from_utf8(rep.stdout).unwrap();
    let seen = validate(&schemas, &text);
    assert!(
        seen.contains("recording") && seen.contains("audit_summary") && seen.contains("lost"),
        "{seen:?}"
    );
    assert!(text.lines().next().is_some_and(|l| l.contains("\"event\":\"recording\"")), "{text}");
}
