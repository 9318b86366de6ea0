//! CUDA staging buffers registered with the NIC, where the memory came from: the test libcuda's
//! pinned host memory is the simulated nvidia.ko's (mmap of /dev/nvidiactl ->
//! nvidia_mmap_sysmem -> vm_insert_page; cuMemHostRegister -> os_lock_user_pages), so a tracer
//! attached after the allocations still names them from the kernel's map of the process.

use gdr_trace_tests::{
    events,
    kmods::{module, Module},
    Tracer, Workload,
};
use serde_json::Value;

const SIZE: u64 = 1 << 20;
const COPIES: u64 = 3;

fn workload() -> Workload {
    let mut cmd = std::process::Command::new(env!("GDR_TEST_CUDA_WORKLOAD"));
    cmd.args(["staged", &SIZE.to_string(), &COPIES.to_string()]).env("GDRSIM_IBDEV", "rxe0");
    Workload::start(cmd)
}

/// The staged workload, started (exec'd) only after "go": traced from its first instruction.
fn staged_from_the_start() -> Workload {
    Workload::spawn_exec(
        env!("GDR_TEST_CUDA_WORKLOAD"),
        &["staged", &SIZE.to_string(), &COPIES.to_string()],
        &[("GDRSIM_IBDEV", "rxe0")],
    )
}

fn tracer(pid: u32, extra: &[&str]) -> Tracer {
    let pid = pid.to_string();
    let mut targs = vec!["attach", &pid, "--json", "--duration", "120"];
    targs.extend_from_slice(if extra.is_empty() { &["--libcuda", env!("GDR_TEST_LIBCUDA")] } else { extra });
    Tracer::spawn(&targs.iter().map(|s| s.to_string()).collect::<Vec<_>>())
}

/// The workload's hold record of `step` (it then waits for a line on stdin).
fn held(w: &mut Workload, step: &str) -> Value {
    let (truth, holding) = w.until_hold();
    let last = truth.last().cloned().unwrap_or_default();
    assert!(holding && last["step"] == step, "the workload did not reach {step}: {truth:#?}");
    last
}

/// Lets the workload register its buffers, holds it there until the tracer printed both MRs
/// (the tracer reads /proc/PID/maps as it delivers them), then lets it finish. Returns the
/// workload's registered-step record and every tracer record.
fn register_and_finish(w: &mut Workload, t: &mut Tracer, pid: u32) -> (Value, Vec<Value>) {
    w.go();
    let registered = held(w, "registered");
    let mine = |r: &Value| r["event"] == "mr_register" && r["pid"] == pid;
    let mut recs = t.until("an MR of the workload", mine);
    if events(&recs, "mr_register").iter().filter(|r| r["pid"] == pid).count() < 2 {
        recs.extend(t.until("the second MR of the workload", mine));
    }
    w.go();
    w.finish();
    recs.extend(t.finish());
    (registered, recs)
}

fn mr_at<'a>(recs: &'a [Value], pid: u32, addr: &Value) -> &'a Value {
    events(recs, "mr_register")
        .into_iter()
        .find(|r| r["pid"] == pid && &r["addr"] == addr)
        .unwrap_or_else(|| panic!("no MR of {pid} at {addr}: {recs:#?}"))
}

fn summary(recs: &[Value], pid: u32) -> &Value {
    events(recs, "summary").into_iter().rev().find(|s| s["pid"] == pid).expect("a summary of the workload")
}

/// NCCL allocates its staging buffers at start-up; `attach` an hour later sees no
/// cuMemHostAlloc. The kernel's map of the process still says the buffer is nvidia.ko's
/// pinned system memory: `cuda-pinned` by `kernel map`, and the process is host-staged.
/// Memory pinned in place by cuMemHostRegister before attach stays an anonymous mapping:
/// `other` (only the call or nvidia.ko's pin, seen while tracing, can tell it).
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn attach_after_the_allocations_still_names_the_pinned_buffers() {
    module(Module::NoBtf);
    let mut w = workload();
    let pid = w.pid();
    let alloc = held(&mut w, "allocated");
    let mut t = tracer(pid, &[]);
    let (_, recs) = register_and_finish(&mut w, &mut t, pid);
    let pinned = mr_at(&recs, pid, &alloc["pinned"]);
    assert_eq!(pinned["verdict"], "host", "{pinned}");
    assert_eq!(pinned["length"], SIZE, "{pinned}");
    assert_eq!(pinned["host_origin"], "cuda-pinned", "{pinned}");
    assert_eq!(pinned["origin_evidence"], "kernel map", "{pinned}");
    assert!(pinned.get("host_alloc").is_none(), "no cuMemHostAlloc was seen: {pinned}");
    let released = events(&recs, "mr_release").into_iter().find(|r| r["id"] == pinned["id"]);
    let released = released.unwrap_or_else(|| panic!("no release of {pinned}: {recs:#?}"));
    assert_eq!(
        (released["host_origin"].as_str(), released["origin_evidence"].as_str()),
        (Some("cuda-pinned"), Some("kernel map"))
    );
    let registered = mr_at(&recs, pid, &alloc["registered"]);
    assert_eq!(registered["host_origin"], "other", "{registered}");
    let s = summary(&recs, pid);
    assert_eq!(s["process_verdict"], "host-staged", "{s}");
    let staging = s["staging_mrs"].as_array().expect("staging_mrs");
    assert_eq!(staging.len(), 1, "{s}");
    assert_eq!(staging[0]["addr"], alloc["pinned"], "{s}");
    assert_eq!(
        (staging[0]["origin"].as_str(), staging[0]["evidence"].as_str()),
        (Some("cuda-pinned"), Some("kernel map"))
    );
}

/// NCCL with GPUDirect RDMA off: device -> pinned host buffer (cuMemcpyDtoH) -> NIC. Traced from
/// the start, the pinned MR is `cuda-pinned` by the call seen, the process host-staged, and the
/// kernel's copy counters give the staged bytes per process and per staging MR, to the byte.
/// The cuMemHostRegister'd buffer is `cuda-registered` and its copy counts too.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn copies_through_a_pinned_buffer_registered_with_the_nic_are_staged_bytes() {
    module(Module::NoBtf);
    let mut w = staged_from_the_start();
    let pid = w.pid();
    let mut t = tracer(pid, &[]);
    for hook in ["cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemHostAlloc"] {
        assert!(t.attached(hook).is_some_and(|a| a.contains("uprobe")), "{hook}: {}", t.hooks);
    }
    w.go(); // exec
    let alloc = held(&mut w, "allocated");
    let (done, recs) = register_and_finish(&mut w, &mut t, pid);
    let (dtoh_pinned, htod_pinned, dtoh_registered) = (COPIES * SIZE, SIZE / 2, SIZE);
    assert_eq!(
        (done["dtoh_pinned"].as_u64(), done["htod_pinned"].as_u64(), done["dtoh_registered"].as_u64()),
        (Some(dtoh_pinned), Some(htod_pinned), Some(dtoh_registered)),
        "{done}"
    );
    let pinned = mr_at(&recs, pid, &alloc["pinned"]);
    assert_eq!(
        (pinned["host_origin"].as_str(), pinned["origin_evidence"].as_str()),
        (Some("cuda-pinned"), Some("call seen"))
    );
    assert_eq!(pinned["host_alloc"], "cuMemHostAlloc", "{pinned}");
    let registered = mr_at(&recs, pid, &alloc["registered"]);
    assert_eq!(
        (registered["host_origin"].as_str(), registered["origin_evidence"].as_str()),
        (Some("cuda-registered"), Some("call seen"))
    );
    let s = summary(&recs, pid);
    assert_eq!(s["process_verdict"], "host-staged", "{s}");
    assert_eq!(s["staged_bytes"]["dtoh"].as_u64(), Some(dtoh_pinned + dtoh_registered), "{s}");
    assert_eq!(s["staged_bytes"]["htod"].as_u64(), Some(htod_pinned), "{s}");
    let mrs = s["staging_mrs"].as_array().expect("staging_mrs");
    let mr = |addr: &Value| mrs.iter().find(|m| &m["addr"] == addr).unwrap_or_else(|| panic!("{addr}: {s}"));
    let p = mr(&alloc["pinned"]);
    assert_eq!(
        (p["staged_bytes_dtoh"].as_u64(), p["staged_bytes_htod"].as_u64()),
        (Some(dtoh_pinned), Some(htod_pinned))
    );
    let r = mr(&alloc["registered"]);
    assert_eq!(
        (r["staged_bytes_dtoh"].as_u64(), r["staged_bytes_htod"].as_u64()),
        (Some(dtoh_registered), Some(0))
    );
}

/// Kernel hooks only (no libcuda call seen): nvidia.ko's own functions name the buffers as they
/// are made, `nvidia_mmap_sysmem` the pinned one (kernel map) and `os_lock_user_pages` the one
/// CUDA pinned in place (kernel pin), which /proc/PID/maps alone could not tell.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn with_kernel_hooks_only_nvidia_kos_pin_and_map_name_the_staging_buffers() {
    module(Module::NoBtf);
    let mut w = staged_from_the_start();
    let pid = w.pid();
    let mut t = tracer(pid, &["--no-uprobes"]);
    for hook in ["os_lock_user_pages", "nvidia_mmap_sysmem"] {
        assert_eq!(t.attached(hook).as_deref(), Some("kprobe+kretprobe"), "{hook}: {}", t.hooks);
    }
    assert_eq!(t.attached("cuMemHostAlloc"), None, "{}", t.hooks);
    w.go(); // exec
    let alloc = held(&mut w, "allocated");
    let (_, recs) = register_and_finish(&mut w, &mut t, pid);
    let pinned = mr_at(&recs, pid, &alloc["pinned"]);
    assert_eq!(
        (pinned["host_origin"].as_str(), pinned["origin_evidence"].as_str()),
        (Some("cuda-pinned"), Some("kernel map"))
    );
    assert!(pinned.get("host_alloc").is_none(), "{pinned}");
    let registered = mr_at(&recs, pid, &alloc["registered"]);
    assert_eq!(
        (registered["host_origin"].as_str(), registered["origin_evidence"].as_str()),
        (Some("cuda-registered"), Some("kernel pin"))
    );
    let s = summary(&recs, pid);
    assert_eq!(s["process_verdict"], "host-staged", "{s}");
    assert_eq!(s["staging_mrs"].as_array().map(Vec::len), Some(2), "{s}");
}

/// A build that inlined the static `nvidia_mmap_sysmem` (one call site in every branch) has no
/// symbol for it: the hook says so and stays off; `os_lock_user_pages` (global) attaches.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn an_inlined_nvidia_mmap_sysmem_is_reported_missing_and_os_lock_user_pages_still_attaches() {
    module(Module::Inlined);
    let v = gdr_trace_tests::probes_json(&[]);
    let hook =
        |name: &str| v["hooks"].as_array().unwrap().iter().find(|h| h["hook"] == name).cloned().unwrap();
    let sysmem = hook("nvidia_mmap_sysmem");
    assert!(sysmem["attached"].is_null(), "{sysmem}");
    assert!(sysmem["reasons"].to_string().contains("not in /proc/kallsyms"), "{sysmem}");
    assert_eq!(hook("os_lock_user_pages")["attached"], "kprobe+kretprobe");
    module(Module::NoBtf);
}
