//! GPU-backed registrations, proven against the simulated NVIDIA driver (tests/kmod) in the VM:
//! every verdict must come out of the real hooks, with kprobes (module without BTF, like a real
//! NVIDIA module) and with fentry/fexit (module with BTF). Run by `cargo xtask test` inside the
//! VM with `--ignored --test-threads=1`; each test loads the module flavour it needs.

#[path = "vm_gpu/peer.rs"]
mod peer;
#[path = "vm_gpu/queues.rs"]
mod queues;
#[path = "vm_gpu/staging.rs"]
mod staging;
#[path = "vm_gpu/verbs.rs"]
mod verbs;

use gdr_trace_tests::{
    events, gdr_trace,
    kmods::{env, module, Module},
    Tracer, Workload,
};
use serde_json::Value;

/// Runs the driver's workload under `gdr-trace attach --json`; returns (workload, tracer) records.
fn traced(m: Module, args: &[&str]) -> (Vec<Value>, Vec<Value>, Tracer) {
    traced_with(m, args, &[], &[])
}

/// The simulated nvidia-peermem's mode parameter (what gdr-trace reads at start, as it reads
/// /sys/module/nvidia_peermem/parameters/persistent_api_support on a GPU node).
const PERSISTENT_API_SUPPORT: &str = "/sys/module/gdrsim/parameters/persistent_api_support";

/// The simulated driver's branch (tests/kmod: nvidia.ko and nvidia-peermem of that release).
const DRIVER_BRANCH: &str = "/sys/module/gdrsim/parameters/driver_branch";

/// The branch the tests run unless they say otherwise: the current production branch.
const DEFAULT_BRANCH: u32 = 580;

/// Sets nvidia-peermem's mode before the tracer starts (the real module reads it at load).
fn peermem_mode(persistent_api_support: u32) {
    std::fs::write(PERSISTENT_API_SUPPORT, persistent_api_support.to_string())
        .unwrap_or_else(|e| panic!("{PERSISTENT_API_SUPPORT}: {e}"));
}

/// Sets the driver branch, then nvidia-peermem's mode (before 560 there is no mode: pass 0).
fn driver(branch: u32, persistent_api_support: u32) {
    std::fs::write(DRIVER_BRANCH, branch.to_string()).unwrap_or_else(|e| panic!("{DRIVER_BRANCH}: {e}"));
    peermem_mode(persistent_api_support);
}

/// The mode gdr-trace read, from its hooks record: the file it read, the value, the mode.
fn assert_mode_read(t: &Tracer, value: u32, mode: &str) {
    let p = &t.hooks["kernel"]["peermem"];
    assert_eq!(p["module"], "gdrsim", "{p}");
    assert_eq!(p["param"], PERSISTENT_API_SUPPORT, "{p}");
    assert_eq!(p["persistent_api_support"], value, "{p}");
    assert_eq!(p["mode"], mode, "{p}");
}

fn traced_with(
    m: Module,
    args: &[&str],
    env_extra: &[(&str, &str)],
    trace_extra: &[&str],
) -> (Vec<Value>, Vec<Value>, Tracer) {
    traced_mode(m, DEFAULT_BRANCH, 1, args, env_extra, trace_extra)
}

fn traced_mode(
    m: Module,
    branch: u32,
    persistent_api_support: u32,
    args: &[&str],
    env_extra: &[(&str, &str)],
    trace_extra: &[&str],
) -> (Vec<Value>, Vec<Value>, Tracer) {
    module(m);
    driver(branch, persistent_api_support);
    let workload = env("GDR_GDRSIM_WORKLOAD");
    // --hold-stdin: stay alive after registering, as a training process does, until the tracer
    // has printed a record of this process (it reads /proc/PID, where the open GPU device is
    // seen, at a process's first record): a handshake, not a sleep.
    let mut all = vec!["--hold-stdin"];
    all.extend_from_slice(args);
    let mut envs = vec![("GDRSIM_IBDEV", "rxe0")];
    envs.extend_from_slice(env_extra);
    let mut w = Workload::spawn_exec(&workload, &all, &envs);
    let mut targs: Vec<String> =
        vec!["attach".into(), w.pid().to_string(), "--json".into(), "--duration".into(), "120".into()];
    targs.extend(trace_extra.iter().map(|s| s.to_string()));
    let mut t = Tracer::spawn(&targs);
    w.go();
    let pid = w.pid();
    let (mut truth, mut recs) = w.hold_until_traced(&mut t, |r| r["pid"] == pid);
    truth.extend(w.finish());
    recs.extend(t.finish());
    (truth, recs, t)
}

fn action<'a>(truth: &'a [Value], name: &str) -> &'a Value {
    truth.iter().find(|r| r["action"] == name).unwrap_or_else(|| panic!("no {name} in {truth:#?}"))
}

fn sources(r: &Value) -> Vec<String> {
    r["sources"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

fn only<'a>(recs: &'a [Value], event: &str) -> &'a Value {
    let v = events(recs, event);
    assert_eq!(v.len(), 1, "exactly one {event}: {recs:#?}");
    v[0]
}

/// A hook's record source as the tracer attached it (its hooks record): "fexit:NAME" or
/// "kprobe:NAME" for the return side, "fentry:NAME" or "kprobe:NAME" for the entry side.
/// (On 6.1, fentry can't take functions of more than six arguments: those are kprobes.)
fn src(t: &Tracer, name: &str, ret: bool) -> String {
    let how = t.attached(name).unwrap_or_else(|| panic!("{name} not attached: {}", t.hooks));
    let kind = match (how.contains("fentry") || how.contains("fexit"), ret) {
        (true, true) => "fexit",
        (true, false) => "fentry",
        (false, _) => "kprobe",
    };
    format!("{kind}:{name}")
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn a_without_the_driver_gpu_hooks_are_reported_missing_not_errors() {
    module(Module::Absent);
    let out = std::process::Command::new(gdr_trace()).args(["probes", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let hooks = v["hooks"].as_array().unwrap();
    assert!(v["kernel"]["peermem"].is_null(), "no peer client module, no mode: {}", v["kernel"]);
    let d = &v["kernel"]["driver"];
    assert!(d["branch"].is_null(), "no driver, no branch: {d}");
    assert!(d["nvidia"]["reason"].as_str().unwrap().contains("/sys/module/nvidia/version missing"), "{d}");
    for name in [
        "ib_umem_get_peer",
        "nv_mem_acquire",
        "nv_mem_acquire_nc",
        "nv_mem_get_pages_nc",
        "nvidia_p2p_get_pages",
        "nv_get_p2p_free_callback",
    ] {
        let h = hooks.iter().find(|h| h["hook"] == name).unwrap();
        assert!(h["attached"].is_null(), "{h}");
        assert!(h["reasons"].to_string().contains("not in /proc/kallsyms"), "{h}");
    }
    let h = hooks.iter().find(|h| h["hook"] == "ib_umem_dmabuf_get_pinned").unwrap();
    assert!(!h["attached"].is_null(), "the real kernel's dma-buf getter attaches: {h}");
}

/// A dma-buf registration on the simulated driver of `branch` (its exporter's name is that
/// branch's: `nv_dmabuf` from 580, `nvidia` before).
fn dmabuf(m: Module, branch: u32, which: &str, verdict: &str, exporter: &str) {
    let (truth, recs, _) = traced_mode(m, branch, 1, &["dmabuf", which, "2097152"], &[], &[]);
    let reg = action(&truth, "dmabuf_reg");
    let r = only(&recs, "mr_register");
    assert_eq!(r["verdict"], verdict, "{r}");
    assert_eq!(r["exporter"], exporter);
    assert_eq!(r["dmabuf_fd"], reg["fd"]);
    assert_eq!(r["length"], 2097152);
    assert_eq!(r["pid"], reg["pid"]);
    assert!(sources(r).iter().any(|s| s.ends_with(":ib_umem_dmabuf_get_pinned")), "{r}");
    assert_eq!(only(&recs, "mr_release")["verdict"], verdict);
    let sum = only(&recs, "summary");
    assert_eq!(sum["live_bytes"], 0);
    assert_eq!(sum["process_verdict"], if verdict == "gpu-dmabuf" { "gdr" } else { "other" });
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn dmabuf_from_nvidia_is_gpu_dmabuf() {
    dmabuf(Module::NoBtf, 580, "nv", "gpu-dmabuf", "nv_dmabuf");
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn dmabuf_from_older_nvidia_driver_is_gpu_dmabuf_fentry() {
    dmabuf(Module::Btf, 575, "nvidia", "gpu-dmabuf", "nvidia");
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn dmabuf_from_another_exporter_is_dmabuf_other() {
    dmabuf(Module::NoBtf, DEFAULT_BRANCH, "other", "dmabuf-other", "fake_exporter");
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn nccls_dmabuf_probe_is_a_probe_not_a_failure() {
    let (_, recs, _) = traced(Module::NoBtf, &["dmabuf-probe"]);
    let r = only(&recs, "mr_register");
    assert_eq!(r["verdict"], "probe", "{r}");
    assert_eq!(r["dmabuf_fd"], -1);
    assert_eq!(only(&recs, "summary")["failed"], 0);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn host_memory_while_holding_the_gpu_is_host_staged() {
    let (truth, recs, _) = traced(Module::NoBtf, &["host-mr", "65536"]);
    let mr = action(&truth, "host_mr");
    let r = only(&recs, "mr_register");
    assert_eq!(r["verdict"], "host");
    assert_eq!(r["addr"], mr["addr"]);
    assert_eq!(r["device"], "rxe0");
    let sum = only(&recs, "summary");
    assert_eq!(sum["uses_gpu"], true, "/dev/nvidiactl is open");
    assert_eq!(sum["process_verdict"], "host-staged");
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn gds_p2p_pins_are_not_registrations() {
    let (truth, recs, _) = traced(Module::NoBtf, &["nvfs-read", "/etc/os-release", "4096"]);
    let map = action(&truth, "nvfs_map");
    assert!(events(&recs, "mr_register").is_empty(), "{recs:#?}");
    let pins = events(&recs, "gpu_pin");
    assert_eq!(pins.len(), 1, "{recs:#?}");
    assert_eq!(pins[0]["caller"], "gds-or-other");
    // gds-nvidia-fs v2.23.1+: nvfs_init chose the API at load (vm_storage tests both).
    let legacy = std::fs::read_to_string("/sys/module/gdrsim/parameters/use_legacy_p2p_allocation")
        .expect("gdrsim loaded");
    let chosen =
        if legacy.trim() == "1" { "nvidia_p2p_get_pages" } else { "nvidia_p2p_get_pages_persistent" };
    assert_eq!(pins[0]["function"], chosen, "use_legacy_p2p_allocation={legacy}");
    assert_eq!(pins[0]["gpu_va"], map["gpuvaddr"]);
    assert_eq!(only(&recs, "summary")["gpu_pins_outside_rdma"], 1);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn dmabuf_exported_through_libcuda_is_tied_to_its_gpu_allocation() {
    let libcuda = env("GDR_GDRSIM_LIBCUDA");
    let (truth, recs, t) = traced_with(
        Module::NoBtf,
        &["dmabuf", "nv", "2097152"],
        &[("GDRSIM_LIBCUDA", &libcuda)],
        &["--libcuda", &libcuda],
    );
    assert_eq!(
        t.attached("cuMemGetHandleForAddressRange").as_deref(),
        Some("uprobe+uretprobe"),
        "{}",
        t.hooks
    );
    let export = action(&truth, "dmabuf_export");
    let r = only(&recs, "mr_register");
    assert_eq!(r["verdict"], "gpu-dmabuf");
    assert_eq!(r["dmabuf_fd"], export["fd"]);
    assert_eq!(r["gpu_va"], export["va"], "the dma-buf MR is tied back to the GPU allocation");
}

/// NCCL with GPUDirect RDMA off registers CUDA pinned host buffers with the NIC: each such MR
/// says how CUDA pinned it (`host_alloc`), and they are the evidence of `host-staged`. Real
/// libibverbs on rxe0; the test libcuda, whose pinned host memory comes from the simulated
/// nvidia.ko (mmap of /dev/nvidiactl, os_lock_user_pages).
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn cuda_pinned_host_memory_registered_on_rxe0_carries_host_alloc() {
    module(Module::NoBtf);
    let libcuda = env!("GDR_TEST_LIBCUDA");
    // By name: the simulated driver, when loaded, registers a second RDMA device (efa_sim0).
    let mut w =
        Workload::spawn_exec(env!("GDR_TEST_CUDA_WORKLOAD"), &["host-mr"], &[("GDRSIM_IBDEV", "rxe0")]);
    let targs: Vec<String> =
        ["attach", &w.pid().to_string(), "--json", "--duration", "120", "--libcuda", libcuda]
            .iter()
            .map(|s| s.to_string())
            .collect();
    let mut t = Tracer::spawn(&targs);
    assert_eq!(t.attached("cuMemHostAlloc").as_deref(), Some("uprobe+uretprobe"), "{}", t.hooks);
    w.go();
    let truth = w.finish();
    let recs = t.finish();
    let truth = &truth[0];
    assert!(truth["skipped"].is_null(), "the workload registered nothing: {truth}");
    let regs = events(&recs, "mr_register");
    assert_eq!(regs.len(), 5, "{recs:#?}");
    let at = |what: &str| {
        *regs
            .iter()
            .find(|r| r["addr"] == truth[what])
            .unwrap_or_else(|| panic!("no MR at {what}: {regs:#?}"))
    };
    for (what, len, how) in [
        ("pinned", 4u64 << 20, "cuMemHostAlloc"),
        ("pinned_slice", 1 << 20, "cuMemHostAlloc"),
        ("alloc_host", 64 << 10, "cuMemHostAlloc"),
        ("registered", 1 << 20, "cuMemHostRegister"),
    ] {
        let r = at(what);
        assert_eq!((r["length"].as_u64(), r["verdict"].as_str()), (Some(len), Some("host")), "{what}: {r}");
        assert_eq!(r["host_alloc"], how, "{what}: {r}");
        assert_eq!(r["device"], "rxe0");
    }
    let plain = at("malloc");
    assert!(plain.get("host_alloc").is_none(), "plain malloc'd memory is no CUDA allocation: {plain}");
    let s = events(&recs, "summary").into_iter().find(|s| s["pid"] == truth["pid"]).expect("a summary");
    assert_eq!(s["process_verdict"], "host-staged", "{s}");
    let cited: Vec<u64> =
        s["staging_mrs"].as_array().unwrap().iter().map(|m| m["length"].as_u64().unwrap()).collect();
    assert_eq!(cited, vec![4 << 20, 1 << 20, 64 << 10, 1 << 20], "{s}");
}

/// The simulated nvidia.ko exports dma-bufs under its branch's name only (nv-dmabuf.c:
/// `nv_dmabuf` from 580.65.06, the module name `nvidia` before): an export under the other
/// branch's name is refused, so no test can see a name its branch never gives.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn the_simulated_exporter_has_its_branchs_name_only() {
    module(Module::NoBtf);
    let export = |which: &str| {
        std::process::Command::new(env("GDR_GDRSIM_WORKLOAD"))
            .args(["dmabuf", which, "65536"])
            .output()
            .expect("gdrsim-workload runs")
            .status
            .success()
    };
    for (branch, ok, refused) in [(580, "nv", "nvidia"), (575, "nvidia", "nv")] {
        driver(branch, 1);
        assert!(export(ok), "{branch}: {ok} refused");
        assert!(!export(refused), "{branch}: {refused} exported");
    }
    driver(DEFAULT_BRANCH, 1);
}
