//! GPU-backed registrations, proven against the simulated NVIDIA driver (tests/kmod) in the VM:
//! every verdict must come out of the real hooks, with kprobes (module without BTF, like a real
//! NVIDIA module) and with fentry/fexit (module with BTF). Run by `cargo xtask test` inside the
//! VM with `--ignored --test-threads=1`; each test loads the module flavour it needs.

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

/// Sets nvidia-peermem's mode before the tracer starts (the real module reads it at load).
fn peermem_mode(persistent_api_support: u32) {
    std::fs::write(PERSISTENT_API_SUPPORT, persistent_api_support.to_string())
        .unwrap_or_else(|e| panic!("{PERSISTENT_API_SUPPORT}: {e}"));
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
    traced_mode(m, 1, args, env_extra, trace_extra)
}

fn traced_mode(
    m: Module,
    persistent_api_support: u32,
    args: &[&str],
    env_extra: &[(&str, &str)],
    trace_extra: &[&str],
) -> (Vec<Value>, Vec<Value>, Tracer) {
    module(m);
    peermem_mode(persistent_api_support);
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

fn peer_gpu_registration(m: Module) {
    let (truth, recs, t) = traced(m, &["peer", "2097152"]);
    let reg = action(&truth, "peer_reg");
    let r = only(&recs, "mr_register");
    assert_eq!(r["pid"], reg["pid"]);
    assert_eq!(r["comm"], "gdrsim-workload");
    assert_eq!(r["addr"], reg["addr"]);
    assert_eq!(r["length"], 2097152);
    assert_eq!(r["access"], 7);
    assert_eq!(r["device"], "mlx5_sim0", "device name read through ib_core's BTF");
    assert_eq!(r["verdict"], "gpu-peermem", "{r}");
    assert_mode_read(&t, 1, "persistent");
    assert_eq!(reg["client"], "nv_mem", "the module's own answer: its default client");
    assert_eq!(r["peer_client"], "nv_mem", "nv_mem_get_pages_nc in the default mode: client nv_mem");
    assert_eq!(r["gpu_pages_pinned"], true);
    let s = sources(r);
    for want in [
        src(&t, "ib_umem_get_peer", true),
        src(&t, "nv_mem_acquire", true),
        // nv_mem_acquire's trial pin (legacy API, given back at once) ...
        src(&t, "nvidia_p2p_get_pages", true),
        src(&t, "nvidia_p2p_put_pages", false),
        // ... then the registration's own, persistent pin.
        src(&t, "nv_mem_get_pages_nc", true),
        src(&t, "nvidia_p2p_get_pages_persistent", true),
        src(&t, "ib_peer_umem_get", true),
    ] {
        assert!(s.contains(&want), "missing {want} in {s:?}");
    }
    let rel = only(&recs, "mr_release");
    assert_eq!((&rel["addr"], &rel["length"], &rel["verdict"]), (&reg["addr"], &r["length"], &r["verdict"]));
    let sum = only(&recs, "summary");
    assert_eq!(sum["process_verdict"], "gdr");
    assert_eq!(sum["uses_gpu"], true);
    assert_eq!(sum["live_bytes"], 0, "released: live pinned bytes back to 0");
    assert_eq!(sum["by_verdict"]["gpu-peermem"]["bytes"], 2097152);
    assert!(events(&recs, "gpu_pin").is_empty(), "the P2P pins belong to the registration, not GDS");
    assert_eq!(
        t.attached("ib_umem_get_peer").as_deref(),
        Some(if m == Module::Btf { "fentry+fexit" } else { "kprobe+kretprobe" })
    );
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
    for name in [
        "ib_umem_get_peer",
        "nv_mem_acquire",
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

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn peer_memory_gpu_registration_kprobe() {
    peer_gpu_registration(Module::NoBtf);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn peer_memory_gpu_registration_fentry() {
    peer_gpu_registration(Module::Btf);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn legacy_peer_api_and_gpu_memory_freed_under_a_live_registration() {
    let (truth, recs, t) = traced_mode(Module::NoBtf, 0, &["free-callback", "2097152"], &[], &[]);
    peermem_mode(1);
    assert_mode_read(&t, 0, "legacy");
    let reg = action(&truth, "peer_reg");
    let r = only(&recs, "mr_register");
    assert_eq!(r["verdict"], "gpu-peermem");
    assert_eq!(r["addr"], reg["addr"]);
    assert_eq!(reg["client"], "nv_mem");
    assert_eq!(r["peer_client"], "nv_mem", "legacy API with invalidation support: the nv_mem client");
    for want in ["kprobe:nv_mem_acquire", "kprobe:nv_mem_get_pages", "kprobe:nvidia_p2p_get_pages"] {
        assert!(sources(r).contains(&want.to_string()), "missing {want}: {r}");
    }
    let freed = only(&recs, "gpu_freed");
    assert_eq!(
        freed["id"], r["id"],
        "the free callback is tied to the registration by its data (7th argument)"
    );
    assert_eq!(freed["pid"], r["pid"]);
    assert_eq!(only(&recs, "summary")["gpu_freed_under_registration"], 1);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn legacy_peer_api_without_invalidation_support_is_the_nv_mem_nc_client() {
    // IB_PEER_MEM_ALLOW without IB_PEER_MEM_INVAL_SUPP: ib_core skips nv_mem (it needs
    // invalidation), so nv_mem_nc takes the range and pins with the persistent API.
    let (truth, recs, t) =
        traced_mode(Module::NoBtf, 0, &["--flags", "1", "peer-legacy", "2097152"], &[], &[]);
    peermem_mode(1);
    assert_mode_read(&t, 0, "legacy");
    let reg = action(&truth, "peer_reg");
    assert_eq!(reg["client"], "nv_mem_nc", "the module's own answer");
    let r = only(&recs, "mr_register");
    assert_eq!(r["verdict"], "gpu-peermem", "{r}");
    assert_eq!(r["peer_client"], "nv_mem_nc", "nv_mem_get_pages_nc in legacy mode: client nv_mem_nc");
    let s = sources(r);
    for want in
        ["kprobe:nv_mem_acquire", "kprobe:nv_mem_get_pages_nc", "kprobe:nvidia_p2p_get_pages_persistent"]
    {
        assert!(s.contains(&want.to_string()), "missing {want} in {s:?}");
    }
    assert!(!s.contains(&"kprobe:nv_mem_get_pages".to_string()), "nv_mem did not pin: {s:?}");
    assert!(events(&recs, "gpu_pin").is_empty(), "the trial pin is not a GDS pin: {recs:#?}");
}

fn dmabuf(m: Module, which: &str, verdict: &str, exporter: &str) {
    let (truth, recs, _) = traced(m, &["dmabuf", which, "2097152"]);
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
    assert_eq!(sum["process_verdict"], if verdict == "gpu-dmabuf" { "gdr" } else { "no-rdma" });
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn dmabuf_from_nvidia_is_gpu_dmabuf() {
    dmabuf(Module::NoBtf, "nv", "gpu-dmabuf", "nv_dmabuf");
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn dmabuf_from_older_nvidia_driver_is_gpu_dmabuf_fentry() {
    dmabuf(Module::Btf, "nvidia", "gpu-dmabuf", "nvidia");
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn dmabuf_from_another_exporter_is_dmabuf_other() {
    dmabuf(Module::NoBtf, "other", "dmabuf-other", "fake_exporter");
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
    // gds-nvidia-fs v2.22+ default use_legacy_p2p_allocation=1 (v2.17-v2.20: always).
    assert_eq!(pins[0]["function"], "nvidia_p2p_get_pages");
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
/// libibverbs on rxe0; the test libcuda (no module needed).
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn cuda_pinned_host_memory_registered_on_rxe0_carries_host_alloc() {
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
