//! Queue memory is never a registration, on a NIC that pins as mlx5_ib does: the simulated
//! `mlx5_0` (tests/kmod/nic_mlx5*.c), driven by rdma-core's stock libmlx5, pins each CQ, QP, SRQ
//! and WQ ring, each doorbell record's page and each DEVX UMEM through the kernel's
//! `ib_umem_get` (mainline) or MLNX_OFED's `ib_umem_get_peer` (`mlx5_ofed=1`), beside the one
//! MR the process registers. gdr-trace must report that MR once, every queue pin as queue
//! memory of its kind (with its exact length, memory and release), and name the GPU-initiated
//! networking a process got (NVSHMEM IBGDA's setup, GPU-handled or its silent CPU fallback).

use gdr_trace_tests::{events, kmods::env, kmods::module, kmods::Module, Tracer, Workload};
use serde_json::Value;

use super::{action, driver, DEFAULT_BRANCH};

const MLX5_OFED: &str = "/sys/module/gdrsim/parameters/mlx5_ofed";

/// The NIC (tests/kmod/nic_mlx5.c).
const NIC: &str = "mlx5_0";

fn ofed(on: bool) {
    std::fs::write(MLX5_OFED, if on { "1" } else { "0" }).unwrap_or_else(|e| panic!("{MLX5_OFED}: {e}"));
}

/// One workload run to its end: its pid, its own records and the lines that are not records
/// (NVSHMEM's warnings, as `ibgda` prints them).
struct Ran {
    pid: u32,
    truth: Vec<Value>,
    other: Vec<String>,
}

/// One tracer (`watch --json`), the workloads one after another, then every record it printed.
fn traced(trace_extra: &[&str], runs: &[&[&str]], envs: &[(&str, &str)]) -> (Vec<Ran>, Vec<Value>, Tracer) {
    let mut args: Vec<String> = ["watch", "--json", "--no-storage"].map(String::from).to_vec();
    args.extend(trace_extra.iter().map(|s| s.to_string()));
    let mut tracer = Tracer::spawn(&args);
    let mut ran = Vec::new();
    for run in runs {
        let mut w = Workload::spawn_exec(&env("GDR_GDRSIM_WORKLOAD"), run, envs);
        w.go();
        let pid = w.pid();
        let lines = w.out.rest(std::time::Duration::from_secs(120), "the workload's output");
        let status = gdr_trace_tests::wait_bounded(&mut w.child, std::time::Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("workload: {e}"));
        assert!(status.success(), "workload {run:?} failed: {status}: {lines:#?}");
        let (truth, other): (Vec<String>, Vec<String>) = lines.into_iter().partition(|l| l.starts_with('{'));
        ran.push(Ran { pid, truth: gdr_trace_tests::ndjson(&truth.join("\n")), other });
    }
    let recs = tracer.terminate();
    (ran, recs, tracer)
}

fn of<'a>(recs: &'a [Value], event: &str, pid: u32) -> Vec<&'a Value> {
    events(recs, event).into_iter().filter(|r| r["pid"] == pid).collect()
}

fn pins<'a>(recs: &'a [Value], pid: u32, kind: &str) -> Vec<&'a Value> {
    of(recs, "queue_pin", pid).into_iter().filter(|r| r["kind"] == kind).collect()
}

/// The process's one registration: the MR it made, seen by libibverbs and the kernel.
fn the_one_mr<'a>(recs: &'a [Value], ran: &Ran, truth_action: &str) -> &'a Value {
    let regs = of(recs, "mr_register", ran.pid);
    assert_eq!(regs.len(), 1, "exactly one registration of pid {}: {regs:#?}", ran.pid);
    let mr = action(&ran.truth, truth_action);
    assert_eq!((&regs[0]["length"], &regs[0]["device"]), (&mr["size"], &NIC.into()), "{}", regs[0]);
    let sum: Vec<&Value> = of(recs, "summary", ran.pid);
    assert_eq!(sum.len(), 1, "{recs:#?}");
    assert_eq!((&sum[0]["registrations"], &sum[0]["releases"]), (&1.into(), &1.into()), "{}", sum[0]);
    regs[0]
}

/// A queue pin of `kind`: one, in `memory`, of the length the workload's ring has, on the NIC,
/// pinned in `verb`, and released.
fn assert_pin(recs: &[Value], pid: u32, kind: &str, verb: &str, length: &Value, memory: &str) -> Value {
    let p = pins(recs, pid, kind);
    assert_eq!(p.len(), 1, "one {kind} pin of pid {pid}: {:#?}", of(recs, "queue_pin", pid));
    let p = p[0].clone();
    assert_eq!((&p["length"], &p["memory"], &p["device"]), (length, &memory.into(), &NIC.into()), "{p}");
    assert_eq!(p["verb"], verb, "{p}");
    let released: Vec<&Value> = events(recs, "queue_release")
        .into_iter()
        .filter(|r| r["owner"] == pid && r["kind"] == kind)
        .collect();
    assert_eq!(released.len(), 1, "the {kind} pin released once: {released:#?}");
    assert_eq!((&released[0]["length"], &released[0]["memory"]), (length, &memory.into()));
    p
}

fn gin(recs: &[Value], pid: u32) -> &Value {
    let q = of(recs, "queue_summary", pid);
    assert_eq!(q.len(), 1, "one queue summary of pid {pid}: {recs:#?}");
    &q[0]["gin"]
}

/// Mainline mlx5: a CQ, an RC QP, an SRQ and a WQ in host memory (their doorbell records share
/// one page: one pin), DEVX UMEMs of host memory and of a GPU dma-buf, and one 64 KiB MR.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn queue_pins_of_a_mlx5_nic_are_queue_memory_beside_one_mr() {
    module(Module::NoBtf);
    driver(DEFAULT_BRANCH, 1);
    ofed(false);
    let envs = [("GDRSIM_IBDEV", NIC)];
    let runs: [&[&str]; 3] =
        [&["mlx5-queues"], &["devx-umem", "host", "65536"], &["devx-umem", "dmabuf", "1048576"]];
    let (ran, recs, _t) = traced(&[], &runs, &envs);
    let q = &ran[0];
    let mr = the_one_mr(&recs, q, "ibv_reg_mr");
    assert_eq!(mr["verdict"], "host", "{mr}");
    let (cq, qp) = (action(&q.truth, "ibv_create_cq"), action(&q.truth, "ibv_create_qp"));
    let (srq, wq) = (action(&q.truth, "ibv_create_srq"), action(&q.truth, "ibv_create_wq"));
    assert_pin(&recs, q.pid, "cq", "create_cq", &cq["size"], "host");
    assert_pin(&recs, q.pid, "qp", "create_qp", &qp["size"], "host");
    assert_pin(&recs, q.pid, "srq", "create_srq", &srq["size"], "host");
    assert_pin(&recs, q.pid, "wq", "create_wq", &wq["size"], "host");
    // One page for the four doorbell records: one pin, in the verb of the first queue on it.
    let db = assert_pin(&recs, q.pid, "doorbell", "create_cq", &4096.into(), "host");
    assert_eq!(db["addr"].as_u64().unwrap(), cq["dbrec"].as_u64().unwrap() & !4095, "{db}");
    assert_eq!(of(&recs, "queue_pin", q.pid).len(), 5, "no other pin: {:#?}", of(&recs, "queue_pin", q.pid));
    assert_eq!(gin(&recs, q.pid)["mode"], "host-queues");
    // DEVX UMEMs: their own kind, never an MR.
    for (r, memory) in [(&ran[1], "host"), (&ran[2], "gpu-dmabuf")] {
        assert!(of(&recs, "mr_register", r.pid).is_empty(), "{recs:#?}");
        let umem = action(&r.truth, "devx_umem_reg");
        let p = assert_pin(&recs, r.pid, "devx-umem", "devx_umem_reg", &umem["size"], memory);
        if memory == "gpu-dmabuf" {
            assert_eq!(p["exporter"], "nv_dmabuf", "{p}");
            assert_eq!(gin(&recs, r.pid)["mode"], "cpu-assisted", "GPU-resident, no doorbell mapping");
        }
    }
}

/// A pin made in no uverbs verb (the simulated driver's own ioctl calling ib_umem_get_peer on GPU
/// memory) is not a registration: queue memory of unknown purpose, with the reason, its memory
/// still told (GPU through nvidia-peermem); the process has no MR at all.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn a_pin_made_in_no_verb_is_never_taken_for_a_registration() {
    module(Module::NoBtf);
    driver(DEFAULT_BRANCH, 1);
    let runs: [&[&str]; 1] = [&["ioctl-peer", "2097152"]];
    let (ran, recs, _t) = traced(&[], &runs, &[]);
    let pid = ran[0].pid;
    assert!(of(&recs, "mr_register", pid).is_empty(), "{recs:#?}");
    assert!(of(&recs, "summary", pid).is_empty(), "no registration summary: {recs:#?}");
    let p = pins(&recs, pid, "unknown");
    assert_eq!(p.len(), 1, "{:#?}", of(&recs, "queue_pin", pid));
    assert_eq!(
        (&p[0]["memory"], &p[0]["length"], &p[0]["verb"]),
        (&"gpu-peermem".into(), &2097152.into(), &Value::Null)
    );
    assert!(p[0]["unknown"].as_str().unwrap().contains("no registration or queue verb"), "{}", p[0]);
    assert!(gin(&recs, pid).is_null(), "no queue memory proper, no GPU-initiated networking");
}

/// MLNX_OFED: every queue pin goes through ib_umem_get_peer, so a QP ring and its doorbell
/// record in GPU memory (a GPU-resident-queue library's allocator) reach nvidia-peermem. The
/// ring is queue memory in the GPU, the process's one MR stays a host registration.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn ofed_puts_a_gpu_qp_ring_through_peer_memory_and_it_is_not_a_registration() {
    module(Module::NoBtf);
    driver(DEFAULT_BRANCH, 1);
    ofed(true);
    let envs = [("GDRSIM_IBDEV", NIC)];
    let runs: [&[&str]; 2] = [&["mlx5-queues", "--gpu-qp", "--gpu-dbr"], &["devx-umem", "gpu", "2097152"]];
    let (ran, recs, t) = traced(&[], &runs, &envs);
    ofed(false);
    let q = &ran[0];
    let mr = the_one_mr(&recs, q, "ibv_reg_mr");
    assert_eq!(mr["verdict"], "host", "{mr}");
    let qp = action(&q.truth, "ibv_create_qp");
    let p = assert_pin(&recs, q.pid, "qp", "create_qp", &qp["size"], "gpu-peermem");
    assert_eq!(p["peer_client"], "nv_mem", "{p}");
    let peer = super::src(&t, "ib_umem_get_peer", true);
    assert!(p["sources"].as_array().unwrap().iter().any(|s| *s == peer.as_str()), "{p}");
    // Two doorbell pages: the host one of the CQ/SRQ/WQ records, the QP's in GPU memory.
    let mut dbs: Vec<&str> =
        pins(&recs, q.pid, "doorbell").iter().map(|d| d["memory"].as_str().unwrap()).collect();
    dbs.sort();
    assert_eq!(dbs, ["gpu-peermem", "host"]);
    let g = gin(&recs, q.pid);
    assert_eq!(g["mode"], "cpu-assisted", "{g}");
    assert!(g["evidence"][0].as_str().unwrap().contains("qp in gpu-peermem"), "{g}");
    // A DEVX UMEM of GPU memory through the peer path.
    let umem = action(&ran[1].truth, "devx_umem_reg");
    assert_pin(&recs, ran[1].pid, "devx-umem", "devx_umem_reg", &umem["size"], "gpu-peermem");
    assert!(of(&recs, "mr_register", ran[1].pid).is_empty());
}

/// NVSHMEM IBGDA's setup: the send ring and doorbell records in GPU memory as dma-buf DEVX
/// UMEMs, a host CQ, the GPU heap registered (the one MR), then the NIC's doorbell page mapped
/// into the GPU (`cuMemHostRegister(..., IOMEMORY)`): GPU-handled as root; refused without
/// CAP_SYS_ADMIN and PeerMappingOverride (CUresult 800), the silent CPU-assisted fallback;
/// allowed again by PeerMappingOverride=1.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn ibgda_is_named_gpu_handled_or_cpu_assisted_by_the_doorbell_mapping() {
    module(Module::NoBtf);
    driver(DEFAULT_BRANCH, 1);
    ofed(false);
    let dwords = "/sys/module/gdrsim/parameters/nv_registry_dwords";
    std::fs::write(dwords, "").unwrap();
    let libcuda = env("GDR_GDRSIM_LIBCUDA");
    let envs = [("GDRSIM_IBDEV", NIC), ("GDRSIM_LIBCUDA", libcuda.as_str())];
    let runs: [&[&str]; 2] = [&["ibgda"], &["ibgda", "--no-sys-admin"]];
    let (ran, recs, _t) = traced(&["--libcuda", &libcuda], &runs, &envs);
    for (r, mode, ret) in [(&ran[0], "gpu-handled", 0), (&ran[1], "cpu-assisted", 800)] {
        assert_eq!(action(&r.truth, "cu_mem_host_register")["cuda_error"], ret, "{:#?}", r.truth);
        let mr = the_one_mr(&recs, r, "ibv_reg_dmabuf_mr");
        assert_eq!(mr["verdict"], "gpu-dmabuf", "the GPU heap: {mr}");
        let umems = pins(&recs, r.pid, "devx-umem");
        assert_eq!(umems.len(), 2, "send ring and doorbell records: {umems:#?}");
        assert!(umems.iter().all(|u| u["memory"] == "gpu-dmabuf"), "{umems:#?}");
        let g = gin(&recs, r.pid);
        assert_eq!(g["mode"], mode, "{g}");
        let evidence = g["evidence"].to_string();
        assert!(evidence.contains(if ret == 0 { "ok" } else { "CUresult 800" }), "{evidence}");
        // What NVSHMEM says of the fallback, and all it says.
        let warned =
            r.other.iter().any(|l| l.contains("cudaHostRegister with IoMemory failed with error=800"));
        assert_eq!(warned, ret != 0, "{:?}", r.other);
    }
    // PeerMappingOverride=1: the same unprivileged process maps the doorbell.
    std::fs::write(dwords, "PeerMappingOverride=1;").unwrap();
    let runs: [&[&str]; 1] = [&["ibgda", "--no-sys-admin"]];
    let (ran, recs, _t) = traced(&["--libcuda", &libcuda], &runs, &envs);
    std::fs::write(dwords, "").unwrap();
    assert_eq!(gin(&recs, ran[0].pid)["mode"], "gpu-handled");
}

/// /sys/kernel/btf with vmlinux's BTF alone, as on a node whose RDMA stack is MLNX_OFED's DKMS
/// build (no module BTF), until dropped.
struct NoModuleBtf;

impl NoModuleBtf {
    fn hide() -> Self {
        let dir = "/tmp/vmlinux-btf-only";
        let sh = format!(
            "mkdir -p {dir} && cp /sys/kernel/btf/vmlinux {dir}/ && mount --bind {dir} /sys/kernel/btf"
        );
        let ok = std::process::Command::new("sh").args(["-c", &sh]).status().unwrap().success();
        assert!(ok, "hiding module BTF");
        assert!(!std::path::Path::new("/sys/kernel/btf/ib_core").exists());
        Self
    }
}

impl Drop for NoModuleBtf {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("/sys/kernel/btf").status();
    }
}

/// Without module BTF (MLNX_OFED's usual build) `struct ib_device` and `struct ib_umem_dmabuf`
/// are unknown: the device of every pin still comes out (the uverbs file its verb came
/// through), so does a dma-buf MR's exporter (through its fd) and with it its verdict, and
/// `probes` says each fact came from a fallback.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn without_module_btf_devices_exporters_and_verdicts_still_come_out() {
    module(Module::NoBtf);
    driver(DEFAULT_BRANCH, 1);
    ofed(true);
    let _btf = NoModuleBtf::hide();
    let libcuda = env("GDR_GDRSIM_LIBCUDA");
    let envs = [("GDRSIM_IBDEV", NIC), ("GDRSIM_LIBCUDA", libcuda.as_str())];
    let runs: [&[&str]; 2] = [&["mlx5-queues", "--gpu-qp"], &["devx-umem", "dmabuf", "1048576"]];
    let (ran, recs, t) = traced(&["--libcuda", &libcuda], &runs, &envs);
    ofed(false);
    let sources = &t.hooks["kernel"]["fact_sources"];
    for fact in sources.as_array().unwrap() {
        assert_eq!(fact["fallback"], true, "no module BTF: every fact from its fallback: {sources}");
    }
    assert!(sources.to_string().contains("uverbs file"), "{sources}");
    assert!(sources.to_string().contains("the registration's fd"), "{sources}");
    assert!(t.hooks["kernel"]["ib_device_name_off"].is_null(), "{}", t.hooks["kernel"]);
    // ib_umem_get, in ib_uverbs, without its BTF: kprobes.
    assert_eq!(t.attached("ib_umem_get").as_deref(), Some("kprobe+kretprobe"));
    let q = &ran[0];
    let mr = the_one_mr(&recs, q, "ibv_reg_mr");
    assert_eq!(mr["verdict"], "host");
    let qp = action(&q.truth, "ibv_create_qp");
    let p = assert_pin(&recs, q.pid, "qp", "create_qp", &qp["size"], "gpu-peermem");
    assert_eq!(p["device"], NIC, "by its uverbs file: {p}");
    let umem = action(&ran[1].truth, "devx_umem_reg");
    let d = assert_pin(&recs, ran[1].pid, "devx-umem", "devx_umem_reg", &umem["size"], "gpu-dmabuf");
    assert_eq!(d["exporter"], "nv_dmabuf", "by the registration's fd: {d}");
}
