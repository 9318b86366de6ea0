//! Storage path in the VM (Debian kernels, fentry and kprobes work): GPUDirect Storage through
//! the simulated nvidia-fs (tests/kmod: /dev/nvidia-fs0, `nvfs_ioctl`, `nvfs_direct_io`; the
//! test libcufile's async and batch I/O reaching it from its worker threads),
//! compatibility mode next to it, and the page cache on a real ext4 (loop-mounted: the VM's
//! root is 9p, without O_DIRECT). `cargo xtask test` runs them inside the VM with
//! `--ignored --test-threads=1`; outside it they are ignored, never passed.

#[path = "vm_storage/gds_modes.rs"]
mod gds_modes;
#[path = "vm_storage/nvfs.rs"]
mod nvfs;
mod storage_util;

use std::{path::Path, process::Command, sync::Once};

use gdr_trace_tests::{
    hook,
    kmods::{env, insmod, module, Module},
};
use serde_json::Value;
use storage_util::*;

const MNT: &str = "/mnt/gdr-storage";

fn sh(cmd: &str) {
    let out = Command::new("sh").args(["-c", cmd]).output().expect("sh");
    assert!(
        out.status.success(),
        "{cmd}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// ext4 on a loop device at MNT, once per test process; test files go there.
fn ext4() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for m in env("GDR_STORAGE_KMODS").split(':').filter(|m| !m.is_empty()) {
            insmod(m);
        }
        let mounted = std::fs::read_to_string("/proc/mounts").unwrap().contains(MNT);
        if !mounted {
            sh(&format!(
                "truncate -s 160M /tmp/gdr-storage.img && mkfs.ext4 -q -F /tmp/gdr-storage.img && \
                 mkdir -p {MNT} && mount -o loop /tmp/gdr-storage.img {MNT}"
            ));
        }
        // SAFETY: set before any thread of this test reads the environment.
        unsafe { std::env::set_var("GDR_STORAGE_DIR", MNT) };
    });
}

/// The simulated nvidia-fs: without module BTF (kprobes only, like the real module) or with it
/// (fexit on nvfs_ioctl).
fn driver(want: Module) {
    module(want);
    assert!(Path::new("/dev/nvidia-fs0").exists());
}

fn of<'a>(recs: &'a [Value], event: &str, key: &str, val: &str) -> Vec<&'a Value> {
    by(recs, event).into_iter().filter(|r| r[key] == val).collect()
}

/// cuFile through nvidia-fs: every data call is gds-nvfs, proven by the driver's ioctls (and,
/// where its direct I/O is hooked, by the bytes it moved). The batch's entries are async: their
/// bytes are known where `nvfs_io_complete` and `nvfs_direct_io` are hooked (`async_known`),
/// never from the entries (the driver doesn't write them back).
/// Returns the tracer's hooks record.
fn gds_nvfs(
    d: Module,
    extra: &[&str],
    ioctl_source: &str,
    direct_io_hooked: bool,
    async_known: bool,
) -> Value {
    ext4();
    driver(d);
    let dir = scratch();
    let f = dir.path().join("shard.bin").display().to_string();
    let setup = [s(&["create", &f, "1M"])];
    let steps = [
        s(&["cufile-read", &f, "256K", "64K"]),
        s(&["cufile-write", &f, "64K", "0"]),
        s(&["cufile-read", &f, "128K", "512K", "batch"]),
        s(&["cufile-read", &f, "128K", "0", "async"]),
    ];
    let mut args = vec!["--libcufile", LIBCUFILE];
    args.extend(extra);
    let r = traced(&setup, &steps, &args);
    let hooks = &r.tracer.hooks;
    let truths: Vec<&Value> = r.truth.iter().filter(|t| t["size"].is_u64() && t["fd"].is_i64()).collect();
    assert!(truths.iter().all(|t| t["ret"] != -1), "the workload's cuFile calls worked: {truths:#?}");

    let read = of(&r.recs, "gds_io", "op", "cuFileRead");
    assert_eq!(read.len(), 1, "{read:#?}");
    let g = read[0];
    assert_eq!(
        (u(&g["length"]), u(&g["file_offset"]), u(&g["ret"])),
        (256 << 10, 64 << 10, 256 << 10),
        "{g}"
    );
    assert_eq!(
        (&g["verdict"], &g["path"], &g["fd"]),
        (&Value::from("gds-nvfs"), &Value::from(f.clone()), &truths[0]["fd"])
    );
    assert_eq!((u(&g["nvfs_ioctls"]), u(&g["nvfs_bytes"]), u(&g["posix_calls"])), (1, 256 << 10, 0), "{g}");
    if direct_io_hooked {
        assert_eq!(u(&g["dma_bytes"]), 256 << 10, "nvfs_direct_io moved the bytes: {g}");
    } else {
        assert_eq!(u(&g["dma_bytes"]), 0, "without nvfs_direct_io the moved bytes are not known: {g}");
    }
    let w = of(&r.recs, "gds_io", "op", "cuFileWrite");
    assert_eq!(
        (&w[0]["verdict"], u(&w[0]["ret"]), u(&w[0]["nvfs_bytes"])),
        (&Value::from("gds-nvfs"), 64 << 10, 64 << 10)
    );
    assert!(g.get("worker_io").is_none(), "a 256 KiB read is done on the caller's thread: {g}");
    // The batch (async BATCH_IO entries) and the async read ran on the library's worker threads
    // after their calls returned: their ioctls are attributed to them, not to the thread; the
    // entries' bytes come from their completions.
    let batch_bytes = if async_known { 64 << 10 } else { 0 };
    let b = of(&r.recs, "gds_io", "op", "cuFileBatchIOSubmit");
    assert_eq!(b.len(), 2, "{b:#?}");
    assert!(b.iter().all(|e| e["verdict"] == "gds-nvfs" && u(&e["length"]) == 64 << 10), "{b:#?}");
    for e in &b {
        worker_only(e, "nvfs", batch_bytes, u(&truths[2]["tid"]));
        assert_eq!(u(&e["nvfs_ioctls"]), 1, "its entry of the BATCH_IO: {e}");
    }
    let a = of(&r.recs, "gds_io", "op", "cuFileReadAsync");
    assert_eq!((&a[0]["verdict"], u(&a[0]["nvfs_bytes"])), (&Value::from("gds-nvfs"), 128 << 10));
    worker_only(a[0], "nvfs", 128 << 10, u(&truths[3]["tid"]));
    assert_eq!((u(&a[0]["nvfs_ioctls"]), u(&a[0]["tid"])), (1, u(&truths[3]["tid"])), "{}", a[0]);
    for reg in of(&r.recs, "gds_io", "op", "cuFileBufRegister") {
        assert_eq!(reg["verdict"], "gds-nvfs", "MAP ioctl issued: {reg}");
    }

    let ios = by(&r.recs, "nvfs_io");
    let ioctl = |name: &str| -> Vec<&Value> { ios.iter().copied().filter(|i| i["ioctl"] == name).collect() };
    let rd = ioctl("READ");
    assert_eq!(rd.len(), 2, "cuFileRead and cuFileReadAsync: {rd:#?}");
    // cuFileRead's on its own thread inside the call; cuFileReadAsync's on a worker, outside any.
    assert_eq!((&rd[0]["in_call"], u(&rd[0]["tid"])), (&Value::from(true), u(&truths[0]["tid"])), "{rd:#?}");
    assert_eq!(rd[1]["in_call"], false, "{rd:#?}");
    assert_ne!(u(&rd[1]["tid"]), u(&truths[3]["tid"]), "{rd:#?}");
    assert_eq!(
        (u(&rd[0]["size"]), u(&rd[0]["offset"]), u(&rd[0]["io_ret"])),
        (256 << 10, 64 << 10, 256 << 10)
    );
    assert_eq!(
        (&rd[0]["fd"], &rd[0]["path"], &rd[0]["source"]),
        (&truths[0]["fd"], &Value::from(f.clone()), &Value::from(ioctl_source))
    );
    assert_eq!(ioctl("WRITE").len(), 1);
    // Both entries use one buffer, and nvidia-fs runs one I/O per buffer at a time: the library
    // issues them in two BATCH_IO rounds of one entry.
    let bt = ioctl("BATCH_IO");
    assert_eq!(bt.len(), 2, "{bt:#?}");
    assert!(bt.iter().all(|e| e["in_call"] == false && u(&e["tid"]) != u(&truths[2]["tid"])), "{bt:#?}");
    assert!(bt.iter().all(|e| e["async"] == true && u(&e["io_ret"]) == 0), "never written back: {bt:#?}");
    assert_eq!(
        (u(&bt[1]["batch_index"]), u(&bt[1]["batch_count"]), u(&bt[1]["offset"])),
        (0, 1, (512 + 64) << 10)
    );
    assert_eq!(ioctl("MAP").len(), 4, "one per cuFileBufRegister");
    let dio = by(&r.recs, "nvfs_direct_io");
    if direct_io_hooked {
        let moved: u64 = dio.iter().map(|d| d["ret"].as_i64().unwrap().max(0) as u64).sum();
        assert_eq!(moved, (256 + 64 + 128) << 10, "the sync chunks' returns: {dio:#?}");
    } else {
        assert!(dio.is_empty());
    }
    let done: u64 = by(&r.recs, "nvfs_io_complete").iter().map(|d| u(&d["ret"])).sum();
    assert_eq!(done, 2 * batch_bytes, "the batch entries' completions");

    let x = file(&r.recs, &f);
    assert_eq!(
        (&x["verdict"], u(&x["bytes_read"]), u(&x["pages_filled"])),
        (&Value::from("gds-nvfs"), 0, 0),
        "{x}"
    );
    let nvfs_bytes = ((256 + 64 + 128) << 10) + 2 * batch_bytes;
    assert_eq!(u(&x["nvfs_bytes"]), nvfs_bytes, "{x}");
    let sum = by(&r.recs, "storage_summary");
    let sum = sum.iter().find(|s| s["final"] == true && u(&s["pid"]) == u64::from(r.pid)).unwrap();
    // A queued call counts the bytes it asked for (its completion's are in nvfs_bytes).
    assert_eq!(u(&sum["bytes_by_verdict"]["gds-nvfs"]["bytes"]), (256 + 64 + 128 + 128) << 10, "{sum}");
    assert!(sum["bytes_by_verdict"].get("gds-compat").is_none(), "{sum}");
    assert!(sum["hints"].to_string().contains("went through nvidia-fs (GPUDirect Storage)"), "{sum}");
    // Where nvfs_direct_io was inlined away, the async requests' starts come from nvfs_ioctl's
    // entry: every completion finds its submission.
    let lost = &by(&r.recs, "lost")[0];
    assert_eq!((u(&lost["total"]), u(&lost["by_reason"]["nvfs_async_miss"])), (0, 0), "{lost}");
    hooks.clone()
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_gds_nvfs_with_driver_kprobes_and_syscall_fexit() {
    gds_nvfs(Module::NoBtf, &[], "kprobe:nvfs_ioctl", true, true);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_gds_nvfs_from_the_ioctl_syscall_where_the_driver_cannot_be_hooked() {
    // fentry only, and the module has no BTF: nvfs_ioctl can't be hooked, the ioctl system call can.
    gds_nvfs(Module::NoBtf, &["--attach-mode", "fentry"], "fexit:ioctl", false, false);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_gds_nvfs_with_fexit_on_a_driver_with_btf() {
    gds_nvfs(Module::Btf, &["--attach-mode", "fentry"], "fexit:nvfs_ioctl", true, true);
    driver(Module::NoBtf);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_gds_nvfs_where_the_driver_inlined_nvfs_direct_io() {
    // The inlined build (tests/kmod `make inline`): nvfs_direct_io, static with one call site in
    // gds-nvidia-fs, has no symbol. gdr-trace says why and still proves every cuFile call
    // gds-nvfs from nvfs_ioctl, and the async and batch bytes from their completions (the
    // requests' starts recorded at nvfs_ioctl's entry); only the driver's count of the sync
    // chunks' direct I/O is missing.
    let h = gds_nvfs(Module::Inlined, &[], "kprobe:nvfs_ioctl", false, true);
    let dio = hook(&h, "nvfs_direct_io");
    assert!(dio["attached"].is_null(), "{dio}");
    assert!(
        dio["reasons"].to_string().contains("symbol nvfs_direct_io not in /proc/kallsyms"),
        "the stated reason: {dio}"
    );
    assert_eq!(hook(&h, "nvfs_ioctl")["attached"], "kprobe+kretprobe", "{h}");
    driver(Module::NoBtf);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_hooks_say_how_they_attached() {
    ext4();
    driver(Module::NoBtf);
    let r = traced(&[], &[], &["--libcufile", LIBCUFILE]);
    let h = &r.tracer.hooks;
    assert_eq!(hook(h, "nvfs_ioctl")["attached"], "kprobe+kretprobe", "{h}");
    assert_eq!(hook(h, "nvfs_direct_io")["attached"], "kprobe+kretprobe", "{h}");
    assert_eq!(hook(h, "nvfs_io_complete")["attached"], "kprobe", "{h}");
    let ioctl = hook(h, "ioctl");
    assert!(ioctl["attached"].is_null() && ioctl["reasons"].to_string().contains("not needed"), "{ioctl}");
    for name in ["openat, openat2", "close", "read, pread64, readv, preadv, preadv2"] {
        assert_eq!(hook(h, name)["attached"], "fexit", "fexit where the kernel allows it: {h}");
    }
    let r = traced(&[], &[], &["--attach-mode", "kprobe"]);
    assert_eq!(hook(&r.tracer.hooks, "openat, openat2")["attached"], "tracepoint");
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_page_cache_on_ext4_with_syscall_fexit() {
    ext4();
    page_cache_scenario(&[]);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_io_uring_reads_on_ext4() {
    ext4();
    uring_scenario(&[]);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_page_cache_on_ext4_with_syscall_tracepoints() {
    ext4();
    page_cache_scenario(&["--attach-mode", "kprobe"]);
}

#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_cufile_falls_back_to_compat_on_a_file_without_o_direct() {
    ext4();
    driver(Module::NoBtf);
    let dir = scratch();
    let f = dir.path().join("buffered.bin").display().to_string();
    let r = traced(
        &[s(&["create", &f, "1M"])],
        &[s(&["cufile-read", &f, "1M", "0", "buffered"])],
        &["--libcufile", LIBCUFILE],
    );
    let g = of(&r.recs, "gds_io", "op", "cuFileRead");
    assert_eq!(
        (&g[0]["verdict"], u(&g[0]["posix_bytes"]), u(&g[0]["nvfs_ioctls"])),
        (&Value::from("gds-compat"), 1 << 20, 0),
        "{g:#?}"
    );
    assert!(of(&r.recs, "nvfs_io", "ioctl", "READ").is_empty());
    let sum = by(&r.recs, "storage_summary");
    let hints = sum.iter().find(|s| s["final"] == true && u(&s["pid"]) == u64::from(r.pid)).unwrap()["hints"]
        .to_string();
    assert!(hints.contains("compatibility mode: 100% of 1.0 MiB") && hints.contains(&f), "{hints}");
    assert!(hints.contains("not opened with O_DIRECT"), "{hints}");
    let x = file(&r.recs, &f);
    assert_eq!(
        (&x["verdict"], u(&x["bytes_read"]), u(&x["read_pages_filled"])),
        (&Value::from("page-cache"), 1 << 20, 256),
        "{x}"
    );
}

/// `serve` exports the storage path by default where fentry makes its hooks cheap: exact bytes
/// by verdict for the workload, GDS through the simulated nvidia-fs next to compatibility mode.
#[test]
#[ignore = "needs the VM test bed: cargo xtask test"]
fn vm_storage_serve_exports_storage_metrics_by_default_with_fentry() {
    use gdr_trace_tests::prom::{free_port, http_get, promtool_check, samples};
    ext4();
    driver(Module::NoBtf);
    let dir = scratch();
    let (f, g) =
        (dir.path().join("s.bin").display().to_string(), dir.path().join("g.bin").display().to_string());
    let of_workload = |text: &str, name: &str, verdict: &str| -> f64 {
        let mine = |l: &std::collections::BTreeMap<String, String>| l["comm"] == "gdr-storage-wor";
        samples(text, name).iter().filter(|(l, _)| mine(l) && l["verdict"] == verdict).map(|(_, v)| v).sum()
    };
    // Started (libraries loaded, file made) before the trace: only the reads count.
    let mut w = storage_workload(&[s(&["create", &f, "1M"])], &[s(&["read", &f, "64K", "16"])], &[]);
    let addr = format!("127.0.0.1:{}", free_port());
    let args = ["serve", "--json", "--listen", &addr, "--interval", "1", "--libcufile", LIBCUFILE];
    let mut t = gdr_trace_tests::Tracer::spawn(&args.map(String::from));
    assert_eq!(t.attached("read, pread64, readv, preadv, preadv2").as_deref(), Some("fexit"), "{}", t.hooks);
    // Scrapes until the exact values asserted are there (a count that overshoots never matches;
    // the deadline guards against a hang, it measures nothing); the final summaries, read after
    // the tracer drained its ring, are checked against them below, so a late count fails too.
    let scraped = |done: &dyn Fn(&str) -> bool| -> String {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let text = http_get(&addr, "/metrics").unwrap().2;
            if done(&text) {
                return text;
            }
            assert!(std::time::Instant::now() < until, "not in the scrape:\n{text}");
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
    };
    let first_pid = w.pid();
    w.go();
    w.finish();
    let bytes = "gdr_trace_storage_bytes_total";
    let calls = "gdr_trace_storage_calls_total";
    let text = scraped(&|t| {
        of_workload(t, bytes, "page-cache") == (1 << 20) as f64 && of_workload(t, calls, "page-cache") == 16.0
    });
    assert_eq!(of_workload(&text, bytes, "page-cache"), (1 << 20) as f64, "{text}");
    assert_eq!(of_workload(&text, "gdr_trace_storage_calls_total", "page-cache"), 16.0, "{text}");
    // cuFile: O_DIRECT through nvidia-fs (gds-nvfs), a buffered descriptor in compatibility mode.
    let steps = [s(&["cufile-read", &g, "256K", "0"]), s(&["cufile-read", &g, "128K", "0", "buffered"])];
    let mut w = storage_workload(&[s(&["create", &g, "1M"])], &steps, &[]);
    let second_pid = w.pid();
    w.go();
    w.finish();
    let text = scraped(&|t| {
        of_workload(t, bytes, "gds-nvfs") == (256 << 10) as f64
            && of_workload(t, bytes, "gds-compat") == (128 << 10) as f64
            && of_workload(t, calls, "gds-compat") == 1.0
    });
    assert_eq!(of_workload(&text, bytes, "gds-nvfs"), (256 << 10) as f64, "{text}");
    assert_eq!(of_workload(&text, bytes, "gds-compat"), (128 << 10) as f64, "{text}");
    assert_eq!(of_workload(&text, "gdr_trace_storage_calls_total", "gds-compat"), 1.0, "{text}");
    promtool_check(&text).unwrap();
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(t.child.id() as i32, libc::SIGTERM) }, 0);
    let recs = t.finish();
    // Nothing came after what was asserted: each workload's final summary holds the same bytes.
    let fin = |pid: u32, verdict: &str| -> f64 {
        let r =
            recs.iter().find(|r| r["event"] == "storage_summary" && r["final"] == true && r["pid"] == pid);
        r.map_or(0.0, |r| r["bytes_by_verdict"][verdict]["bytes"].as_f64().unwrap_or(0.0))
    };
    assert_eq!(fin(first_pid, "page-cache"), (1 << 20) as f64, "the reader's final summary");
    assert_eq!(fin(second_pid, "gds-nvfs"), (256 << 10) as f64, "the cuFile workload's final summary");
    assert_eq!(fin(second_pid, "gds-compat"), (128 << 10) as f64, "the cuFile workload's final summary");
}
