//! GPU registrations made through libibverbs, as NCCL makes them: rdma-core's real libibverbs
//! and libefa provider on `efa_sim0`, the NIC the simulated driver registers with the running
//! kernel's ib_core (tests/kmod/nic_ibdev.c). `ibv_reg_mr` on GPU memory goes ib_uverbs ->
//! reg_user_mr -> `ib_umem_get_peer` -> nvidia-peermem; `ibv_reg_dmabuf_mr` on a GPU dma-buf goes
//! to the kernel's real `ib_umem_dmabuf_get_pinned`. gdr-trace sees each call from both sides
//! (uprobes on libibverbs, kernel hooks) and must report it as ONE registration with one
//! release; the kernel's own MR list (`rdma res show mr -j`), read while the MR is live, must
//! agree on pid, device and length.

use std::process::Command;

use gdr_trace_tests::{events, kmods::env, kmods::module, kmods::Module, Tracer, Workload};
use serde_json::Value;

use super::{action, driver, sources, src, DEFAULT_BRANCH};

/// The NIC's name (GDRSIM_IBDEV_NAME in tests/kmod/gdrsim_uapi.h).
const NIC: &str = "efa_sim0";

/// One workload run under `gdr-trace watch --json`.
struct Run {
    /// The workload's own records.
    truth: Vec<Value>,
    /// gdr-trace's records.
    recs: Vec<Value>,
    /// What `rdma res show mr -j` listed for the workload while its registration was live.
    kernel_mrs: Vec<Value>,
    tracer: Tracer,
    pid: u32,
}

impl Run {
    /// gdr-trace's records of `event` for the workload's pid.
    fn mine(&self, event: &str) -> Vec<&Value> {
        events(&self.recs, event).into_iter().filter(|r| r["pid"] == self.pid).collect()
    }

    /// The summary, which must count one registration and one release, nothing left live.
    fn one_of_each(&self) -> &Value {
        let sum = self.only("summary");
        assert_eq!(
            (&sum["registrations"], &sum["releases"], &sum["live_bytes"]),
            (&1.into(), &1.into(), &0.into()),
            "{sum}"
        );
        sum
    }

    fn only(&self, event: &str) -> &Value {
        let v = self.mine(event);
        assert_eq!(v.len(), 1, "exactly one {event} of pid {}: {:#?}", self.pid, self.recs);
        v[0]
    }
}

/// The kernel's live MRs of `pid`.
fn kernel_mrs(pid: u32) -> Vec<Value> {
    let out = Command::new("rdma").args(["res", "show", "mr", "-j"]).output().expect("run rdma");
    assert!(out.status.success(), "rdma res show mr: {}", String::from_utf8_lossy(&out.stderr));
    let all: Value = serde_json::from_slice(&out.stdout).expect("rdma -j prints JSON");
    all.as_array().expect("a JSON array").iter().filter(|m| m["pid"] == pid).cloned().collect()
}

fn run(m: Module, args: &[&str], env_extra: &[(&str, &str)], trace_extra: &[&str]) -> Run {
    module(m);
    // Driver 580+, default mode: the client nv_mem claims with nv_mem_acquire_nc.
    driver(DEFAULT_BRANCH, 1);
    let mut all = vec!["--hold-stdin"];
    all.extend_from_slice(args);
    // By name: rxe0 is an RDMA device too.
    let mut envs = vec![("GDRSIM_IBDEV", NIC)];
    envs.extend_from_slice(env_extra);
    let mut w = Workload::spawn_exec(&env("GDR_GDRSIM_WORKLOAD"), &all, &envs);
    let mut targs: Vec<String> = vec!["watch".into(), "--json".into(), "--no-storage".into()];
    targs.extend(trace_extra.iter().map(|s| s.to_string()));
    let mut tracer = Tracer::spawn(&targs);
    w.go();
    let pid = w.pid();
    // Registered and holding: the kernel's list now, then the tracer's record of it (a
    // handshake: it must have read /proc/PID while the process lived), then let it go.
    let (mut truth, held) = w.until_hold();
    assert!(held, "the workload never held: {truth:#?}");
    let kernel_mrs = kernel_mrs(pid);
    let mut recs = tracer.until("the registration", |r| r["event"] == "mr_register" && r["pid"] == pid);
    w.go();
    truth.extend(w.finish());
    recs.extend(tracer.terminate());
    Run { truth, recs, kernel_mrs, tracer, pid }
}

/// The kernel's list has exactly this MR of the workload, on the NIC, with its length and keys.
fn assert_kernel_lists(run: &Run, reg: &Value, r: &Value) {
    assert_eq!(run.kernel_mrs.len(), 1, "the kernel lists one MR of pid {}: {:?}", run.pid, run.kernel_mrs);
    let k = &run.kernel_mrs[0];
    assert_eq!((&k["ifname"], &k["mrlen"], &k["comm"]), (&r["device"], &r["length"], &r["comm"]), "{k}");
    let hex = |v: &Value| format!("{:x}", v.as_u64().expect("a key"));
    assert_eq!(
        (k["lkey"].as_str(), k["rkey"].as_str()),
        (Some(&*hex(&reg["lkey"])), Some(&*hex(&reg["rkey"])))
    );
}

/// The registration's one release: joined to it, seen by libibverbs and by the kernel.
fn assert_one_release(run: &Run, r: &Value) {
    let rel = run.only("mr_release");
    assert_eq!(rel["id"], r["id"], "the release is joined to its registration: {rel}");
    assert_eq!((&rel["addr"], &rel["length"], &rel["verdict"]), (&r["addr"], &r["length"], &r["verdict"]));
    assert_eq!(rel["device"], NIC);
    let s = sources(rel);
    for want in ["uprobe:ibv_dereg_mr".to_string(), src(&run.tracer, "ib_umem_release", false)] {
        assert!(s.contains(&want), "missing {want} in {s:?}");
    }
}

/// The user-space sources of a record: exactly the libibverbs call the workload made.
fn user_sources(r: &Value) -> Vec<String> {
    sources(r).into_iter().filter(|s| s.starts_with("uprobe:")).collect()
}

fn verbs_peer(m: Module) {
    let run = run(m, &["verbs-peer", "2097152"], &[], &[]);
    let reg = action(&run.truth, "ibv_reg_mr");
    assert_eq!((reg["device"].as_str(), reg["memory"].as_str()), (Some(NIC), Some("gpu")));
    let r = run.only("mr_register");
    assert_eq!((&r["addr"], &r["iova"], &r["length"]), (&reg["addr"], &reg["addr"], &reg["size"]), "{r}");
    assert_eq!((&r["tid"], &r["comm"], &r["access"]), (&reg["tid"], &reg["comm"], &reg["access"]));
    assert_eq!(r["device"], NIC, "{r}");
    assert_eq!(r["verdict"], "gpu-peermem", "{r}");
    assert_eq!(r["peer_client"], "nv_mem", "{r}");
    assert_eq!(r["gpu_pages_pinned"], true, "{r}");
    // The workload calls ibv_reg_mr with run-time access flags: verbs.h sends that to
    // ibv_reg_mr_iova2, once.
    assert_eq!(user_sources(r), ["uprobe:ibv_reg_mr_iova2"], "{r}");
    let s = sources(r);
    let t = &run.tracer;
    for want in [
        src(t, "ib_umem_get_peer", true),
        src(t, "ib_peer_umem_get", true),
        src(t, "nv_mem_acquire_nc", true),
        src(t, "nv_mem_get_pages_nc", true),
        src(t, "nvidia_p2p_get_pages_persistent", true),
    ] {
        assert!(s.contains(&want), "missing {want} in {s:?}");
    }
    assert_one_release(&run, r);
    assert_kernel_lists(&run, reg, r);
    let sum = run.one_of_each();
    assert_eq!(sum["by_verdict"]["gpu-peermem"]["bytes"], 2097152, "{sum}");
    assert_eq!(sum["process_verdict"], "gdr");
    assert!(run.mine("gpu_pin").is_empty(), "the P2P pins belong to the registration: {:#?}", run.recs);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn ibv_reg_mr_on_gpu_memory_is_one_peer_registration_kprobe() {
    verbs_peer(Module::NoBtf);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn ibv_reg_mr_on_gpu_memory_is_one_peer_registration_fentry() {
    verbs_peer(Module::Btf);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn ibv_reg_dmabuf_mr_on_a_gpu_dmabuf_is_one_dmabuf_registration() {
    let libcuda = env("GDR_GDRSIM_LIBCUDA");
    let run = run(
        Module::NoBtf,
        &["verbs-dmabuf", "nv", "2097152", "65536"],
        &[("GDRSIM_LIBCUDA", &libcuda)],
        &["--libcuda", &libcuda],
    );
    let export = action(&run.truth, "dmabuf_export");
    let reg = action(&run.truth, "ibv_reg_dmabuf_mr");
    assert_eq!(reg["device"], NIC);
    let r = run.only("mr_register");
    // A dma-buf MR's address is its offset into the dma-buf; NCCL passes the GPU address as iova.
    assert_eq!((&r["addr"], &r["length"], &r["iova"]), (&reg["offset"], &reg["size"], &reg["iova"]), "{r}");
    assert_eq!((&r["tid"], &r["access"], &r["device"]), (&reg["tid"], &reg["access"], &NIC.into()));
    assert_eq!(r["verdict"], "gpu-dmabuf", "{r}");
    assert_eq!((&r["exporter"], &r["dmabuf_fd"]), (&"nv_dmabuf".into(), &reg["fd"]), "{r}");
    assert_eq!(r["gpu_va"], export["va"], "tied to the GPU allocation by cuMemGetHandleForAddressRange: {r}");
    assert_eq!(user_sources(r), ["uprobe:ibv_reg_dmabuf_mr"], "{r}");
    let s = sources(r);
    let want = src(&run.tracer, "ib_umem_dmabuf_get_pinned", true);
    assert!(s.contains(&want), "missing {want} in {s:?}");
    assert!(r.get("peer_client").is_none(), "no peer client for a dma-buf: {r}");
    assert_one_release(&run, r);
    assert_kernel_lists(&run, reg, r);
    let sum = run.one_of_each();
    assert_eq!(sum["process_verdict"], "gdr", "{sum}");
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn ibv_reg_mr_on_host_memory_through_the_peer_memory_kernel_is_host() {
    let run = run(Module::NoBtf, &["verbs-host", "65536"], &[], &[]);
    let reg = action(&run.truth, "ibv_reg_mr");
    let r = run.only("mr_register");
    assert_eq!((&r["addr"], &r["length"], &r["device"]), (&reg["addr"], &reg["size"], &NIC.into()), "{r}");
    assert_eq!(r["verdict"], "host", "pinned by ib_umem_get_peer, no peer client asked: {r}");
    assert!(r.get("peer_client").is_none(), "{r}");
    assert_eq!(user_sources(r), ["uprobe:ibv_reg_mr_iova2"], "{r}");
    assert!(sources(r).contains(&src(&run.tracer, "ib_umem_get_peer", true)), "{r}");
    assert_one_release(&run, r);
    assert_kernel_lists(&run, reg, r);
}

/// What `--sends N` posted (`ibv_post_send` record): (bytes, work requests).
fn posted(truth: &[Value]) -> (u64, u64) {
    let p = action(truth, "ibv_post_send");
    assert_eq!((&p["ok"], &p["device"], &p["failed_at"]), (&true.into(), &NIC.into(), &"".into()), "{p}");
    (p["bytes"].as_u64().expect("bytes"), p["sends"].as_u64().expect("sends"))
}

/// A GPU MR that work requests use: the workload posts SENDs from its GPU memory (peer-memory
/// registration) on a UD QP of efa_sim0 through rdma-core's libefa (`efa_post_send`, found in
/// the context's ops table and hooked by file + offset at start). Every byte is counted to the
/// MR and to the process as GPU bytes, one operation per work request.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn sends_posted_from_a_gpu_mr_are_counted_as_gpu_bytes() {
    let run = run(Module::NoBtf, &["--sends", "24", "verbs-peer", "2097152"], &[], &[]);
    let (bytes, ops) = posted(&run.truth);
    assert_eq!((bytes, ops), (24 * 4096, 24), "what the workload says it posted");
    let r = run.only("mr_register");
    assert_eq!(r["verdict"], "gpu-peermem", "{r}");
    let rel = run.only("mr_release");
    assert_eq!(
        (&rel["bytes_out"], &rel["bytes_in"], &rel["ops"]),
        (&bytes.into(), &0.into(), &ops.into()),
        "{rel}"
    );
    let sum = run.one_of_each();
    let by = &sum["bytes_by_verdict"];
    assert_eq!(by.as_object().map(|o| o.len()), Some(1), "GPU bytes only: {sum}");
    assert_eq!(
        (&by["gpu-peermem"]["out"], &by["gpu-peermem"]["in"], &by["gpu-peermem"]["ops"]),
        (&bytes.into(), &0.into(), &ops.into()),
        "{sum}"
    );
    assert_eq!(sum["gdr_byte_ratio"], 1.0, "{sum}");
    assert_eq!(sum["process_verdict"], "gdr", "{sum}");
}

/// `attach PID --expect gdr`: a process posting from a GPU dma-buf MR passes the gate (exit 0)
/// while it still runs, with the GPU bytes in its one-line reason.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn the_gdr_gate_passes_a_process_sending_from_gpu_memory() {
    module(Module::NoBtf);
    driver(DEFAULT_BRANCH, 1);
    let libcuda = env("GDR_GDRSIM_LIBCUDA");
    let args = ["--hold-stdin", "--sends", "8", "verbs-dmabuf", "nv", "2097152"];
    let envs = [("GDRSIM_IBDEV", NIC), ("GDRSIM_LIBCUDA", libcuda.as_str())];
    let mut w = Workload::spawn_exec(&env("GDR_GDRSIM_WORKLOAD"), &args, &envs);
    let pid = w.pid().to_string();
    let gate = [
        "attach",
        &pid,
        "--expect",
        "gdr",
        "--within",
        "60s",
        "--json",
        "--no-storage",
        "--libcuda",
        &libcuda,
    ];
    let mut tracer = Tracer::spawn(&gate.map(String::from));
    w.go();
    let (truth, held) = w.until_hold();
    assert!(held, "the workload never held: {truth:#?}");
    let (bytes, _) = posted(&truth);
    // It passes while the workload holds its MR: no release, no exit needed.
    let lines = tracer.out.rest(std::time::Duration::from_secs(60), "the gate's end");
    let code = gdr_trace_tests::wait_bounded(&mut tracer.child, std::time::Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("gdr-trace: {e}"))
        .code();
    w.go();
    w.finish();
    let recs = gdr_trace_tests::ndjson(&lines.join("\n"));
    let g = events(&recs, "gate");
    assert_eq!(g.len(), 1, "one gate record: {recs:#?}");
    let want = format!("moved {bytes} bytes through GPU memory (gpu-dmabuf) of {bytes} in all");
    assert_eq!(
        (g[0]["result"].as_str(), g[0]["reason"].as_str()),
        (Some("pass"), Some(want.as_str())),
        "{recs:#?}"
    );
    assert_eq!(code, Some(0), "the gate's exit code");
}
