//! GPU memory through MLNX_OFED peer memory, once per nvidia-peermem flow of the driver matrix
//! (docs/drivers.md), on the simulated driver of that branch (`driver_branch`):
//! - up to 575 (575.64.05), default mode: one client `nv_mem` claiming with `nv_mem_acquire`,
//!   trial pin `nvidia_p2p_get_pages` + `nvidia_p2p_put_pages`;
//! - from 580 (580.65.06), default mode: `nv_mem` claiming with `nv_mem_acquire_nc`, trial pin
//!   `nvidia_p2p_get_pages_persistent` + `nvidia_p2p_put_pages_persistent`;
//! - legacy two-client mode (`persistent_api_support=0`; always before 560): `nv_mem` (with
//!   invalidation support, `nv_mem_acquire`) or `nv_mem_nc` (without: the persistent client,
//!   with its branch's acquire).
//!
//! Each asserts the exact claim hook (`peer_claim`), the verdict, the client name, the trial pin
//! counted as a trial and not as a GDS pin, and the branch gdr-trace found.

use gdr_trace_tests::{events, kmods::Module, Tracer};
use serde_json::Value;

use super::{action, assert_mode_read, only, sources, src, traced_mode};

/// What gdr-trace found about the driver: the simulated nvidia.ko's /proc/driver/nvidia/version
/// (there is no /sys/module/nvidia: the module is gdrsim), the matrix row, the flow expected.
fn assert_branch_found(t: &Tracer, branch: u32, tag: &str, acquire: &str) {
    let d = &t.hooks["kernel"]["driver"];
    assert_eq!(d["branch"], branch, "{d}");
    assert_eq!(d["row"], serde_json::json!([branch, tag]), "{d}");
    assert_eq!(d["nvidia"]["file"], "/proc/driver/nvidia/version", "{d}");
    assert_eq!(d["nvidia"]["version"], tag, "{d}");
    let expected = d["expected"].to_string();
    assert!(expected.contains(&format!("{acquire} (trial")), "{d}");
}

/// The registration record: GPU-backed through the peer path, claimed by `claim`, by `client`.
fn assert_peer(t: &Tracer, recs: &[Value], truth: &[Value], claim: &str, client: &str) -> Value {
    let reg = action(truth, "peer_reg");
    assert_eq!(reg["client"], client, "the module's own answer: {reg}");
    let r = only(recs, "mr_register").clone();
    assert_eq!((&r["pid"], &r["addr"], &r["length"]), (&reg["pid"], &reg["addr"], &2097152.into()), "{r}");
    assert_eq!(r["verdict"], "gpu-peermem", "{r}");
    assert_eq!(r["peer_claim"], src(t, claim, true), "{r}");
    assert_eq!(r["peer_client"], client, "{r}");
    assert_eq!(r["gpu_pages_pinned"], true, "{r}");
    assert_eq!(r["trial_pins"], 1, "the acquire's trial pin, given back: {r}");
    let other = if claim == "nv_mem_acquire" { "nv_mem_acquire_nc" } else { "nv_mem_acquire" };
    assert!(!sources(&r).iter().any(|s| s.ends_with(&format!(":{other}"))), "{other} did not claim: {r}");
    assert!(events(recs, "gpu_pin").is_empty(), "no P2P pin of the registration is GDS's: {recs:#?}");
    r
}

/// The default mode of a branch: `peer` (ALLOW|INVAL_SUPP, as mlx5) on GPU memory.
fn default_flow(m: Module, branch: u32, tag: &str, claim: &str, trial: [&str; 2]) {
    let (truth, recs, t) = traced_mode(m, branch, 1, &["peer", "2097152"], &[], &[]);
    assert_mode_read(&t, 1, "persistent");
    assert_branch_found(&t, branch, tag, claim);
    let r = assert_peer(&t, &recs, &truth, claim, "nv_mem");
    let s = sources(&r);
    for want in [
        src(&t, "ib_umem_get_peer", true),
        src(&t, claim, true),
        src(&t, trial[0], true),
        src(&t, trial[1], false),
        src(&t, "nv_mem_get_pages_nc", true),
        src(&t, "nvidia_p2p_get_pages_persistent", true),
        src(&t, "ib_peer_umem_get", true),
    ] {
        assert!(s.contains(&want), "missing {want} in {s:?}");
    }
    if branch >= 580 {
        // Trial and registration pin are the same call; the legacy API is not called at all.
        let legacy = src(&t, "nvidia_p2p_get_pages", true);
        assert!(!s.contains(&legacy), "{legacy} on 580: {s:?}");
    }
    let rel = only(&recs, "mr_release");
    assert_eq!((&rel["addr"], &rel["verdict"]), (&r["addr"], &r["verdict"]));
    let sum = only(&recs, "summary");
    assert_eq!((&sum["process_verdict"], &sum["live_bytes"]), (&"gdr".into(), &0.into()), "{sum}");
    assert_eq!(
        t.attached(claim).as_deref(),
        Some(if m == Module::Btf { "fexit" } else { "kprobe+kretprobe" }),
        "{}",
        t.hooks
    );
}

const LEGACY_TRIAL: [&str; 2] = ["nvidia_p2p_get_pages", "nvidia_p2p_put_pages"];
const PERSISTENT_TRIAL: [&str; 2] = ["nvidia_p2p_get_pages_persistent", "nvidia_p2p_put_pages_persistent"];

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn peer_flow_575_default_kprobe() {
    default_flow(Module::NoBtf, 575, "575.64.05", "nv_mem_acquire", LEGACY_TRIAL);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn peer_flow_575_default_fentry() {
    default_flow(Module::Btf, 575, "575.64.05", "nv_mem_acquire", LEGACY_TRIAL);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn peer_flow_580_default_kprobe() {
    default_flow(Module::NoBtf, 580, "580.65.06", "nv_mem_acquire_nc", PERSISTENT_TRIAL);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn peer_flow_580_default_fentry() {
    default_flow(Module::Btf, 580, "580.65.06", "nv_mem_acquire_nc", PERSISTENT_TRIAL);
}

/// Legacy mode with invalidation support: the client `nv_mem` (nv_mem_acquire on every branch),
/// then the GPU memory freed under the live registration (its free callback).
fn legacy_nv_mem(branch: u32, tag: &str) {
    let (truth, recs, t) = traced_mode(Module::NoBtf, branch, 0, &["free-callback", "2097152"], &[], &[]);
    assert_mode_read(&t, 0, "legacy");
    assert_branch_found(&t, branch, tag, "nv_mem_acquire");
    let r = assert_peer(&t, &recs, &truth, "nv_mem_acquire", "nv_mem");
    for want in ["kprobe:nv_mem_get_pages", "kprobe:nvidia_p2p_get_pages", "kprobe:nvidia_p2p_put_pages"] {
        assert!(sources(&r).contains(&want.to_string()), "missing {want}: {r}");
    }
    let freed = only(&recs, "gpu_freed");
    assert_eq!(
        freed["id"], r["id"],
        "the free callback is tied to the registration by its data (7th argument)"
    );
    assert_eq!(only(&recs, "summary")["gpu_freed_under_registration"], 1);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn peer_flow_legacy_575_nv_mem_and_free_callback() {
    legacy_nv_mem(575, "575.64.05");
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn peer_flow_legacy_580_nv_mem_and_free_callback() {
    legacy_nv_mem(580, "580.65.06");
}

/// Legacy mode without invalidation support (IB_PEER_MEM_ALLOW only): ib_core skips `nv_mem`,
/// so `nv_mem_nc` takes the range with its branch's acquire and pins with the persistent API.
fn legacy_nv_mem_nc(branch: u32, tag: &str, claim: &str, trial: [&str; 2]) {
    let args = ["--flags", "1", "peer-legacy", "2097152"];
    let (truth, recs, t) = traced_mode(Module::NoBtf, branch, 0, &args, &[], &[]);
    assert_mode_read(&t, 0, "legacy");
    assert_branch_found(&t, branch, tag, claim);
    let r = assert_peer(&t, &recs, &truth, claim, "nv_mem_nc");
    let s = sources(&r);
    for want in [trial[0], trial[1], "nv_mem_get_pages_nc", "nvidia_p2p_get_pages_persistent"] {
        assert!(s.contains(&format!("kprobe:{want}")), "missing {want} in {s:?}");
    }
    assert!(!s.contains(&"kprobe:nv_mem_get_pages".to_string()), "nv_mem did not pin: {s:?}");
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn peer_flow_legacy_575_without_invalidation_is_nv_mem_nc() {
    legacy_nv_mem_nc(575, "575.64.05", "nv_mem_acquire", LEGACY_TRIAL);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn peer_flow_legacy_580_without_invalidation_is_nv_mem_nc() {
    legacy_nv_mem_nc(580, "580.65.06", "nv_mem_acquire_nc", PERSISTENT_TRIAL);
}

/// 535 (and 550): no persistent_api_support at all, two clients always; with invalidation
/// support `nv_mem` takes the range. gdr-trace reads the parameter's absence as legacy; the
/// simulation shows it as 0.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn peer_flow_535_two_clients_always() {
    let (truth, recs, t) = traced_mode(Module::NoBtf, 535, 0, &["peer", "2097152"], &[], &[]);
    assert_branch_found(&t, 535, "535.288.01", "nv_mem_acquire");
    assert_peer(&t, &recs, &truth, "nv_mem_acquire", "nv_mem");
}
