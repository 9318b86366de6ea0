//! The simulated nvidia-fs driven as libcufile drives it (gdrsim-workload issues the ioctls),
//! one test per flow of gds-nvidia-fs v2.17.0..v2.28.4 (src/nvfs-core.c, src/nvfs-batch.c):
//! a sync READ (the bytes in `ioctl_return` and in `nvfs_direct_io`'s return), an async READ
//! (`nvfs_direct_io` returns -EIOCBQUEUED; the bytes reach only `nvfs_io_complete`, on the
//! filesystem's completion context, and the fence page), and a BATCH_IO of two async entries
//! (the driver copies back only the batch header: the entries' `ioctl_return` stay as the
//! caller left them). Exact bytes from the workload's truth and from gdr-trace, and the
//! release's pinning call (v2.17-v2.20: `nvidia_p2p_get_pages`; v2.22+: the same by default,
//! `nvidia_p2p_get_pages_persistent` with `use_legacy_p2p_allocation=0`).

use gdr_trace_tests::{kmods::env, Tracer, Workload};
use serde_json::Value;

use super::*;

const PARAMS: &str = "/sys/module/gdrsim/parameters";

fn param(name: &str, value: &str) {
    let p = format!("{PARAMS}/{name}");
    std::fs::write(&p, value).unwrap_or_else(|e| panic!("{p}: {e}"));
}

/// The simulated driver's count of async completions that ran on a task other than the
/// submitter's (`/proc/driver/nvidia-fs/stats`).
fn completions_elsewhere() -> u64 {
    let stats = std::fs::read_to_string("/proc/driver/nvidia-fs/stats").unwrap();
    let line = stats.lines().find(|l| l.starts_with("Async completions on another task:")).expect(&stats);
    line.rsplit(':').next().unwrap().trim().parse().expect(line)
}

struct Run {
    truth: Vec<Value>,
    recs: Vec<Value>,
    path: String,
    pid: u64,
    elsewhere: u64,
}

fn read_param(name: &str) -> String {
    let p = format!("{PARAMS}/{name}");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}")).trim().to_string()
}

/// `cmd` on a fresh 1 MiB file on ext4, under `release` (and `use_legacy_p2p_allocation`).
fn run(cmd: &str, size: &str, release: &str, legacy: u32) -> Run {
    run_with(cmd, size, release, Some(legacy), 0, true)
}

/// [`run`], with the pinning API as the module chose it at load (`legacy` None), the
/// filesystem ending async requests as `completion` says (`fs_async_completion`: 0 queued, 1
/// inline, 2 failed inline), and the workload expected to succeed or not.
fn run_with(cmd: &str, size: &str, release: &str, legacy: Option<u32>, completion: u32, ok: bool) -> Run {
    ext4();
    driver(Module::NoBtf);
    let chosen = read_param("use_legacy_p2p_allocation");
    param("nvfs_release", release);
    if let Some(l) = legacy {
        param("use_legacy_p2p_allocation", &l.to_string());
    }
    param("fs_async_completion", &completion.to_string());
    let dir = scratch();
    let path = dir.path().join("nvfs.bin").display().to_string();
    std::fs::write(&path, vec![0x5a_u8; 1 << 20]).unwrap();
    let before = completions_elsewhere();
    let mut w = Workload::spawn_exec(&env("GDR_GDRSIM_WORKLOAD"), &["--hold-stdin", cmd, &path, size], &[]);
    let pid = w.pid();
    let args = ["attach", &pid.to_string(), "--json", "--duration", "120", "--interval", "0"];
    let mut t = Tracer::spawn(&args.map(String::from));
    w.go();
    let (mut truth, mut recs) = w.hold_until_traced(&mut t, |r| r["pid"] == pid);
    let lines = w.out.rest(std::time::Duration::from_secs(120), "workload output");
    let status = gdr_trace_tests::wait_bounded(&mut w.child, std::time::Duration::from_secs(60)).unwrap();
    assert_eq!(status.success(), ok, "the workload's exit: {status}: {lines:#?}");
    truth.extend(gdr_trace_tests::ndjson(&lines.join("\n")));
    recs.extend(t.finish());
    param("nvfs_release", "2.28.4");
    param("use_legacy_p2p_allocation", &chosen);
    param("fs_async_completion", "0");
    let elsewhere = completions_elsewhere() - before;
    Run { truth, recs, path, pid: u64::from(pid), elsewhere }
}

fn action<'a>(truth: &'a [Value], name: &str) -> &'a Value {
    truth.iter().find(|t| t["action"] == name).unwrap_or_else(|| panic!("no {name} in {truth:#?}"))
}

fn ioctls<'a>(r: &'a Run, name: &str) -> Vec<&'a Value> {
    by(&r.recs, "nvfs_io").into_iter().filter(|i| i["ioctl"] == name).collect()
}

fn pin_function(r: &Run) -> String {
    let pins = by(&r.recs, "gpu_pin");
    assert_eq!(pins.len(), r.truth.iter().filter(|t| t["action"] == "nvfs_map").count(), "{pins:#?}");
    pins[0]["function"].as_str().unwrap().to_string()
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_nvfs_sync_read_bytes_from_ioctl_return_and_direct_io() {
    let r = run("nvfs-read", "256K", "2.17.0", 1);
    let t = action(&r.truth, "nvfs_read");
    assert_eq!((&t["ok"], u(&t["bytes"]), u(&t["ioctl_return"])), (&Value::from(true), 256 << 10, 256 << 10));
    let rd = ioctls(&r, "READ");
    assert_eq!(rd.len(), 1, "{rd:#?}");
    assert_eq!((u(&rd[0]["io_ret"]), &rd[0]["async"]), (256 << 10, &Value::from(false)), "{}", rd[0]);
    let dio: u64 = by(&r.recs, "nvfs_direct_io").iter().map(|d| u(&d["ret"])).sum();
    assert_eq!(dio, 256 << 10);
    assert!(by(&r.recs, "nvfs_io_complete").is_empty(), "sync I/O completes inline: no async record");
    assert_eq!(r.elsewhere, 0);
    assert_eq!(u(&file(&r.recs, &r.path)["nvfs_bytes"]), 256 << 10);
    assert_eq!(pin_function(&r), "nvidia_p2p_get_pages", "v2.17 has no persistent pinning");
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_nvfs_async_read_bytes_from_nvfs_io_complete() {
    let r = run("nvfs-read-async", "128K", "2.28.4", 0);
    let t = action(&r.truth, "nvfs_read_async");
    // ioctl_return 0: queued; the bytes reached the fence page from the completion.
    assert_eq!((&t["ok"], u(&t["bytes"]), u(&t["ioctl_return"])), (&Value::from(true), 128 << 10, 0), "{t}");
    assert_eq!(r.elsewhere, 1, "the completion ran on the filesystem's context, not the submitter");
    let rd = ioctls(&r, "READ");
    assert_eq!((u(&rd[0]["io_ret"]), &rd[0]["async"]), (0, &Value::from(true)), "{}", rd[0]);
    let done = by(&r.recs, "nvfs_io_complete");
    assert_eq!(done.len(), 1, "{done:#?}");
    assert_eq!(
        (u(&done[0]["ret"]), u(&done[0]["pid"]), u(&done[0]["offset"]), u(&done[0]["size"])),
        (128 << 10, r.pid, 0, 128 << 10),
        "the submitter's, with the driver's bytes: {}",
        done[0]
    );
    let dio = by(&r.recs, "nvfs_direct_io");
    assert!(dio.iter().all(|d| d["ret"] == -529), "nvfs_direct_io returned -EIOCBQUEUED: {dio:#?}");
    assert_eq!(u(&file(&r.recs, &r.path)["nvfs_bytes"]), 128 << 10);
    assert_eq!(pin_function(&r), "nvidia_p2p_get_pages_persistent", "v2.28 with use_legacy_p2p_allocation=0");
    assert_eq!(by(&r.recs, "lost")[0]["total"], 0);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_nvfs_batch_bytes_from_completions_not_entries() {
    let r = run("nvfs-batch", "128K", "2.26.6", 1);
    let t = action(&r.truth, "nvfs_batch");
    assert_eq!((&t["ok"], u(&t["ret0"]), u(&t["ret1"])), (&Value::from(true), 64 << 10, 64 << 10), "{t}");
    assert_eq!(
        (&t["entry_ioctl_return0"], &t["entry_ioctl_return1"]),
        (&Value::from(-7777), &Value::from(-7777)),
        "the driver never writes an entry's ioctl_return: {t}"
    );
    assert_eq!(r.elsewhere, 2);
    let bt = ioctls(&r, "BATCH_IO");
    assert_eq!(bt.len(), 2, "{bt:#?}");
    assert!(bt.iter().all(|e| u(&e["io_ret"]) == 0 && e["async"] == true), "{bt:#?}");
    let mut done: Vec<(u64, u64)> =
        by(&r.recs, "nvfs_io_complete").iter().map(|d| (u(&d["offset"]), u(&d["ret"]))).collect();
    done.sort();
    assert_eq!(done, [(0, 64 << 10), (64 << 10, 64 << 10)]);
    assert_eq!(u(&file(&r.recs, &r.path)["nvfs_bytes"]), 128 << 10);
    assert_eq!(pin_function(&r), "nvidia_p2p_get_pages");
    assert_eq!(by(&r.recs, "lost")[0]["total"], 0);
}

/// gds-nvidia-fs's `nvfs_init` (v2.23.1+) chooses the pinning API at load: the persistent one
/// from NVIDIA driver 555 (and on x86-64 bare metal): what real GPU servers run. With driver
/// 580 loaded the module chose it here (a VM: the hypervisor rule alone would not): GDS pins are
/// `nvidia_p2p_get_pages_persistent`, reported as GPU pins outside RDMA; the legacy API (the
/// parameter written back to 1, as an administrator may) pins with `nvidia_p2p_get_pages`.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_nvfs_pins_with_the_api_nvfs_init_chose() {
    // Loaded afresh: nvfs_init chooses at load.
    gdr_trace_tests::kmods::module(Module::Absent);
    driver(Module::NoBtf);
    assert_eq!(read_param("use_legacy_p2p_allocation"), "0", "nvfs_init with driver 580 loaded");
    let r = run_with("nvfs-read", "128K", "2.28.4", None, 0, true);
    assert_eq!(pin_function(&r), "nvidia_p2p_get_pages_persistent");
    let pins = by(&r.recs, "gpu_pin");
    assert_eq!(
        (&pins[0]["caller"], u(&pins[0]["length"])),
        (&Value::from("gds-or-other"), 128 << 10),
        "{pins:#?}"
    );
    let sum = by(&r.recs, "summary");
    assert_eq!(u(&sum[0]["gpu_pins_outside_rdma"]), 1, "{sum:#?}");
    let legacy = run_with("nvfs-read", "128K", "2.28.4", Some(1), 0, true);
    assert_eq!(pin_function(&legacy), "nvidia_p2p_get_pages");
    assert_eq!(read_param("use_legacy_p2p_allocation"), "0", "restored");
}

/// An async READ the filesystem finishes inline: nvidia-fs completes it there and returns its
/// bytes in `ioctl_return` as well. Counted once: the file's GDS bytes are the bytes read.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_nvfs_async_read_completed_inline_is_counted_once() {
    let r = run_with("nvfs-read-async", "128K", "2.28.4", None, 1, true);
    let t = action(&r.truth, "nvfs_read_async");
    assert_eq!((u(&t["bytes"]), u(&t["ioctl_return"])), (128 << 10, 128 << 10), "both say it: {t}");
    assert_eq!(r.elsewhere, 0, "completed on the submitting task");
    let done = by(&r.recs, "nvfs_io_complete");
    assert_eq!(done.len(), 1, "{done:#?}");
    assert_eq!((u(&done[0]["ret"]), u(&done[0]["pid"])), (128 << 10, r.pid));
    let rd = ioctls(&r, "READ");
    assert_eq!((u(&rd[0]["io_ret"]), &rd[0]["async"]), (128 << 10, &Value::from(true)), "{}", rd[0]);
    assert_eq!(u(&file(&r.recs, &r.path)["nvfs_bytes"]), 128 << 10, "once, not twice");
    assert_eq!(u(&process(&r)["nvfs_dma_bytes"]), 128 << 10, "per process, once");
    assert_eq!(by(&r.recs, "lost")[0]["total"], 0);
}

/// The process's final `storage_summary`.
fn process(r: &Run) -> &Value {
    let all = by(&r.recs, "storage_summary");
    let last = all.into_iter().rev().find(|s| s["final"] == true && u(&s["pid"]) == r.pid);
    last.unwrap_or_else(|| panic!("no final storage_summary of {}", r.pid))
}

/// An async READ that fails inline: one completion with the error, no bytes, the request freed
/// once (the module survives; the fence page says the error).
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_nvfs_async_read_failed_inline_moves_nothing() {
    let r = run_with("nvfs-read-async", "128K", "2.28.4", None, 2, false);
    let t = action(&r.truth, "nvfs_read_async");
    assert_eq!((&t["ok"], &t["ioctl_return"]), (&Value::from(false), &Value::from(-5)), "{t}");
    let done = by(&r.recs, "nvfs_io_complete");
    assert_eq!((done.len(), &done[0]["ret"]), (1, &Value::from(-5)), "{done:#?}");
    let bytes: u64 = by(&r.recs, "file_io_summary")
        .iter()
        .filter(|f| f["final"] == true && f["path"] == r.path.as_str())
        .map(|f| u(&f["nvfs_bytes"]))
        .sum();
    assert_eq!(bytes, 0, "nothing moved");
}

/// A BATCH_IO of two async entries the filesystem finishes inline: each entry's bytes once
/// (the batch's header is all the driver writes back).
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_nvfs_batch_completed_inline_is_counted_once() {
    let r = run_with("nvfs-batch", "128K", "2.28.4", None, 1, true);
    let t = action(&r.truth, "nvfs_batch");
    assert_eq!((u(&t["ret0"]), u(&t["ret1"])), (64 << 10, 64 << 10), "{t}");
    let done: u64 = by(&r.recs, "nvfs_io_complete").iter().map(|d| u(&d["ret"])).sum();
    assert_eq!(done, 128 << 10);
    assert_eq!(u(&file(&r.recs, &r.path)["nvfs_bytes"]), 128 << 10);
    assert_eq!(u(&process(&r)["nvfs_dma_bytes"]), 128 << 10, "per process, once");
}
