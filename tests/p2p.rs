//! GPU↔GPU (P2P) on this machine's kernel (uprobes work on the host): the test libcuda
//! (kmod/libcuda-sim.c + kmod/libcuda-p2p.c: real names, exported variants and signatures) and
//! a workload that copies between devices with and without peer access, and exports and imports
//! GPU memory across two processes of two users. Run as root, one at a time (`cargo xtask test`).

use std::process::Command;

use gdr_trace_tests::{events, hook, Tracer};
use serde_json::{json, Value};

const LIBCUDA: &str = env!("GDR_TEST_LIBCUDA");
const WORKLOAD: &str = env!("GDR_TEST_CUDA_WORKLOAD");

/// Runs the workload with `args` under `gdr-trace watch --json` (every process; the uprobes are
/// on the test libcuda only), stopped by SIGTERM once the workload is done; returns the
/// workload's JSON line and the tracer's records.
fn traced(args: &[&str], extra: &[&str]) -> (Value, Vec<Value>) {
    let (line, mut t) = ran(args, extra);
    (line, t.terminate())
}

/// The workload run to its end under a tracer still running: its JSON line and the tracer.
fn ran(args: &[&str], extra: &[&str]) -> (Value, Tracer) {
    let mut targs: Vec<String> = ["watch", "--json", "--no-storage", "--interval", "1", "--libcuda", LIBCUDA]
        .iter()
        .map(|s| s.to_string())
        .collect();
    targs.extend(extra.iter().map(|s| s.to_string()));
    let t = Tracer::spawn(&targs);
    let out = Command::new(WORKLOAD).args(args).output().expect("run the CUDA workload");
    assert!(out.status.success(), "workload failed: {}", String::from_utf8_lossy(&out.stderr));
    let line: Value = serde_json::from_slice(&out.stdout).expect("the workload prints one JSON line");
    (line, t)
}

fn of_pid<'a>(recs: &'a [Value], event: &str, pid: &Value) -> Vec<&'a Value> {
    events(recs, event).into_iter().filter(|r| r["pid"] == *pid).collect()
}

#[test]
fn p2p_every_exported_variant_of_libcuda_is_hooked() {
    let v = gdr_trace_tests::probes_json(&["--libcuda", LIBCUDA]);
    for (name, how) in [
        ("cuCtxCreate", "uprobe+uretprobe"),
        ("cuDevicePrimaryCtxRetain", "uprobe+uretprobe"),
        ("cuCtxSetCurrent", "uprobe"),
        ("cuCtxPushCurrent", "uprobe"),
        ("cuCtxPopCurrent", "uprobe"),
        ("cuCtxEnablePeerAccess", "uprobe+uretprobe"),
        ("cuDeviceCanAccessPeer", "uprobe+uretprobe"),
        ("cuMemcpyPeer", "uprobe"),
        ("cuMemcpy", "uprobe"),
        ("cuMemcpyDtoD", "uprobe"),
        ("cuMemcpyDtoH", "uprobe"),
        ("cuMemcpyHtoD", "uprobe"),
        ("cuMemAlloc", "uprobe+uretprobe"),
        ("cuIpcGetMemHandle", "uprobe+uretprobe"),
        ("cuIpcOpenMemHandle", "uprobe+uretprobe"),
        ("cuMemExportToShareableHandle", "uprobe+uretprobe"),
        ("cuMemImportFromShareableHandle", "uprobe+uretprobe"),
        ("cuMemHostAlloc", "uprobe+uretprobe"),
        ("cuMemAllocHost", "uprobe+uretprobe"),
        ("cuMemHostRegister", "uprobe+uretprobe"),
    ] {
        let h = hook(&v, name);
        assert_eq!(h["attached"], how, "{h}");
        assert_eq!(h["location"], LIBCUDA, "{h}");
    }
    let reasons = |n| hook(&v, n)["reasons"].to_string();
    let peer = reasons("cuMemcpyPeer");
    for variant in ["cuMemcpyPeer,", "cuMemcpyPeer_ptds", "cuMemcpyPeerAsync,", "cuMemcpyPeerAsync_ptsz"] {
        assert!(peer.contains(variant), "{variant} hooked: {peer}");
    }
    let dtod = reasons("cuMemcpyDtoD");
    assert!(dtod.contains("cuMemcpyDtoD_v2_ptds") && dtod.contains("cuMemcpyDtoDAsync_v2_ptsz"), "{dtod}");
    assert!(reasons("cuIpcOpenMemHandle").contains("cuIpcOpenMemHandle_v2"));
    let dtoh = reasons("cuMemcpyDtoH");
    assert!(dtoh.contains("cuMemcpyDtoH_v2_ptds") && dtoh.contains("cuMemcpyDtoHAsync_v2_ptsz"), "{dtoh}");
    let htod = reasons("cuMemcpyHtoD");
    assert!(htod.contains("cuMemcpyHtoD_v2,") || htod.contains("cuMemcpyHtoD_v2 "), "{htod}");
    // The test libcuda has no cuCtxCreate_v3: a stated reason, not a silent gap.
    let v3 = hook(&v, "cuCtxCreate_v3");
    assert!(v3["attached"].is_null() && v3["reasons"].to_string().contains("cuCtxCreate_v3"), "{v3}");
}

#[test]
fn p2p_copies_are_counted_per_device_pair_with_their_verdict() {
    let (n, size) = (5u64, 8192u64);
    let (w, mut t) = ran(&["copy", &n.to_string(), &size.to_string()], &[]);
    let pid = &w["pid"];
    // The interval's summary first (a handshake), then the final one.
    let mut recs = t.until("an interval p2p_summary of the workload", |r| {
        r["event"] == "p2p_summary" && r["pid"] == *pid && r["final"] == false
    });
    recs.extend(t.terminate());
    let summaries = of_pid(&recs, "p2p_summary", pid);
    let last = summaries.iter().rev().find(|s| s["final"] == true).expect("a final p2p_summary");
    assert_eq!(last["comm"], "gdr-cuda-worklo");
    let pair =
        |src: u64, dst: u64, verdict: &str| json!({"src_device": src, "dst_device": dst, "verdict": verdict});
    let mut got: Vec<Value> = last["pairs"].as_array().unwrap().clone();
    for g in &mut got {
        assert!(g["calls"].is_u64() && g["bytes"].is_u64(), "{g}");
    }
    let want = [
        (pair(0, 1, "p2p-direct"), n, n * size),
        (pair(0, 1, "p2p-staged"), n + 1, (n + 1) * size),
        (pair(1, 0, "p2p-direct"), 1, size),
        (pair(1, 2, "p2p-direct"), 2, 2 * size),
    ];
    assert_eq!(got.len(), want.len(), "exactly these pairs (the 0->0 copy is not P2P): {got:?}");
    for (p, calls, bytes) in want {
        let g = got
            .iter()
            .find(|g| {
                g["src_device"] == p["src_device"]
                    && g["dst_device"] == p["dst_device"]
                    && g["verdict"] == p["verdict"]
            })
            .unwrap_or_else(|| panic!("no pair {p} in {got:?}"));
        assert_eq!((g["calls"].as_u64(), g["bytes"].as_u64()), (Some(calls), Some(bytes)), "{p}: {g}");
    }
    // 0->1 was disabled again; 1->2 stays enabled (enabled from a pushed context).
    assert_eq!(last["peer_access"], json!([{"device": 1, "peer_device": 2}]));
    assert!(summaries.iter().any(|s| s["final"] == false), "a p2p_summary every --interval too");
    assert_eq!(events(&recs, "lost")[0]["total"], 0);
}

#[test]
fn p2p_imports_name_their_exporter_and_another_users_import_is_a_finding() {
    let size = 1u64 << 20;
    let (w, recs) = traced(&["ipc", &size.to_string(), "65534"], &[]);
    let importer = &w["importer_pid"];
    let ipc = of_pid(&recs, "gpu_ipc", importer);
    assert_eq!(ipc.len(), 2, "a CUDA IPC and a cuMem import: {ipc:?}");
    let by_op = |op: &str| *ipc.iter().find(|r| r["op"] == op).unwrap_or_else(|| panic!("no {op}: {ipc:?}"));
    let cuda_ipc = by_op("cuIpcOpenMemHandle");
    assert_eq!(cuda_ipc["exporter_pid"], w["exporter_pid"], "matched by the handle's 64 bytes: {cuda_ipc}");
    assert_eq!(cuda_ipc["uid"], 65534);
    assert_eq!(cuda_ipc["exporter_uid"], 0);
    assert_eq!(cuda_ipc["length"], size, "{cuda_ipc}");
    assert_eq!(cuda_ipc["ret"], 0);
    let cumem = by_op("cuMemImportFromShareableHandle");
    assert_eq!(cumem["exporter_pid"], w["exporter_pid"], "matched by the fd's file: {cumem}");
    assert_eq!(cumem["ret"], 0);

    // The same run through `audit`: another user's GPU memory imported is a finding.
    let mut t = Tracer::spawn(&["audit", "--json", "--no-storage", "--libcuda", LIBCUDA].map(String::from));
    let w2 = Command::new(WORKLOAD).args(["ipc", "4096", "65534"]).output().unwrap();
    assert!(w2.status.success());
    let w2: Value = serde_json::from_slice(&w2.stdout).unwrap();
    let recs = t.terminate();
    let f: Vec<&Value> =
        events(&recs, "finding").into_iter().filter(|f| f["id"] == "gpu-ipc-cross-user").collect();
    assert_eq!(f.len(), 1, "{recs:?}");
    assert_eq!(f[0]["pid"], w2["importer_pid"]);
    assert_eq!(f[0]["severity"], "high");
    assert_eq!(f[0]["evidence"][0]["exporter_pid"], w2["exporter_pid"], "{}", f[0]);
}

#[test]
fn p2p_a_same_user_import_is_matched_too() {
    // Exporter and importer both root: reported, matched, no cross-user finding.
    let (w, recs) = traced(&["ipc", "4096", "0"], &[]);
    let ipc = of_pid(&recs, "gpu_ipc", &w["importer_pid"]);
    assert_eq!(ipc.len(), 2, "{ipc:?}");
    assert!(ipc.iter().all(|r| r["exporter_pid"] == w["exporter_pid"] && r["uid"] == 0), "{ipc:?}");
}
