//! cuFile without nvidia-fs on this machine: compatibility mode, call by call.

use std::path::Path;

use serde_json::Value;

use super::storage_util::*;

#[test]
fn cufile_without_nvidia_fs_is_compatibility_mode() {
    assert!(!Path::new("/dev/nvidia-fs0").exists(), "this test is for a machine without nvidia-fs");
    let dir = scratch();
    let f = dir.path().join("data.bin").display().to_string();
    let setup = [s(&["create", &f, "1M"])];
    let steps = [
        s(&["cufile-read", &f, "256K", "64K"]),
        s(&["cufile-read", &f, "128K", "0", "async"]),
        s(&["cufile-read", &f, "128K", "512K", "batch"]),
        s(&["cufile-write", &f, "64K", "0"]),
    ];
    let r = traced(&setup, &steps, &["--libcufile", LIBCUFILE]);
    for h in ["cuFileRead", "cuFileReadAsync", "cuFileBatchIOSubmit", "cuFileWrite", "cuFileHandleRegister"] {
        assert_eq!(r.tracer.attached(h).as_deref(), Some("uprobe+uretprobe"), "{h}: {}", r.tracer.hooks);
    }
    let ios = by(&r.recs, "gds_io");
    let of = |op: &str| -> Vec<&Value> { ios.iter().copied().filter(|g| g["op"] == op).collect() };
    assert_eq!(of("cuFileDriverOpen").len(), 1);
    let truths: Vec<&Value> =
        r.truth.iter().filter(|t| t["step"] == "cufile_read" || t["step"] == "cufile_write").collect();
    let regs = of("cuFileHandleRegister");
    assert_eq!(regs.len(), truths.len(), "{regs:#?}");
    for (reg, t) in regs.iter().zip(&truths) {
        assert_eq!(
            (&reg["fd"], &reg["path"], &reg["ret"]),
            (&t["fd"], &Value::from(f.clone()), &Value::from(0))
        );
        assert!(reg["verdict"].is_null());
    }
    let read = of("cuFileRead");
    assert_eq!(read.len(), 1, "{read:#?}");
    let g = read[0];
    assert_eq!(
        (u(&g["length"]), u(&g["file_offset"]), u(&g["ret"])),
        (256 << 10, 64 << 10, 256 << 10),
        "{g}"
    );
    assert_eq!((&g["verdict"], &g["path"]), (&Value::from("gds-compat"), &Value::from(f.clone())), "{g}");
    assert_eq!(g["fd"], truths[0]["fd"]);
    assert_eq!((u(&g["posix_bytes"]), u(&g["nvfs_ioctls"])), (256 << 10, 0), "{g}");
    assert_eq!((u(&g["pid"]), &g["source"]), (r.pid as u64, &Value::from("uprobe:cuFileRead")));
    // Done on the caller's thread, inside the call: no worker I/O.
    assert!(g.get("worker_io").is_none(), "{g}");
    assert_eq!(u(&g["tid"]), u(&truths[0]["tid"]), "{g}");
    // The async read and the batch entries ran on the library's worker threads after their
    // calls returned: each is still one record on the caller's thread, classified by the
    // worker I/O attributed to it (by descriptor and file range), with the workers named.
    let a = of("cuFileReadAsync");
    assert_eq!(
        (a.len(), &a[0]["verdict"], u(&a[0]["length"])),
        (1, &Value::from("gds-compat"), 128 << 10),
        "{a:#?}"
    );
    let caller = u(&truths[1]["tid"]);
    assert_eq!(u(&truths[1]["ret"]), 128 << 10, "the worker wrote *bytes_read_p: {:?}", truths[1]);
    assert_eq!((u(&a[0]["tid"]), u(&a[0]["posix_bytes"])), (caller, 128 << 10), "{}", a[0]);
    worker_only(a[0], "posix", 128 << 10, caller);
    // Each entry is reported when its I/O is seen: in the order they complete.
    let mut b = of("cuFileBatchIOSubmit");
    b.sort_by_key(|e| u(&e["batch_index"]));
    assert_eq!(b.len(), 2, "one record per batch entry: {b:#?}");
    for (i, e) in b.iter().enumerate() {
        assert_eq!((u(&e["batch_index"]), u(&e["length"])), (i as u64, 64 << 10), "{e}");
        assert_eq!(u(&e["file_offset"]), (512 << 10) + i as u64 * (64 << 10));
        assert_eq!(e["verdict"], "gds-compat");
        worker_only(e, "posix", 64 << 10, u(&truths[2]["tid"]));
    }
    let w = of("cuFileWrite");
    assert_eq!((w.len(), &w[0]["verdict"], u(&w[0]["ret"])), (1, &Value::from("gds-compat"), 64 << 10));
    assert!(by(&r.recs, "nvfs_io").is_empty());

    let sum = by(&r.recs, "storage_summary");
    let sum = sum.iter().find(|s| s["final"] == true).expect("final storage_summary");
    let compat = &sum["bytes_by_verdict"]["gds-compat"];
    assert_eq!((u(&compat["bytes"]), u(&compat["calls"])), ((256 + 128 + 128 + 64) << 10, 5), "{sum}");
    let left = &sum["cufile_worker_unattributed"];
    assert_eq!((u(&left["calls"]), u(&left["bytes"]), u(&sum["cufile_unclassified"])), (0, 0, 0), "{sum}");
    let hints = sum["hints"].to_string();
    assert!(
        hints.contains("cuFile is in compatibility mode: 100% of 576.0 KiB went through POSIX"),
        "{hints}"
    );
    // cuFile's POSIX I/O is the file's POSIX I/O too.
    let x = file(&r.recs, &f);
    assert_eq!(u(&x["bytes_read"]), (256 + 128 + 128) << 10, "{x}");
    assert_eq!(u(&x["gds_bytes"]["gds-compat"]), (256 + 128 + 128 + 64) << 10, "{x}");
    assert_eq!(x["verdict"], "direct", "cuFile opened it O_DIRECT: {x}");
    // O_DIRECT POSIX I/O with no nvidia-fs ioctl: compat only because this kernel cannot do
    // PCI P2PDMA (Debian's kernels are built without it), and it says so; the verdict agrees.
    let p2p = gdr_trace::preflight::gds_mounts::kernel_p2pdma(
        &gdr_trace::preflight::fs::Fs::new(Path::new("/sys"), Path::new("/proc")).unwrap(),
    );
    if p2p.usable() == Some(false) {
        assert_eq!(
            (&g["gds_mode"], &x["gds_mode"]),
            (&Value::from("gds-compat"), &Value::from("gds-compat")),
            "{x}"
        );
        assert_eq!(x["compat_reason"], serde_json::json!(["nvidia-fs-absent", "kernel-no-p2pdma"]), "{x}");
        assert!(hints.contains(&format!("p2pdma not possible: {}", p2p.why())), "{hints}");
    } else {
        // It could be PCI P2PDMA into GPU memory: unknown, never called compat.
        assert_eq!(
            (&g["gds_mode"], &x["gds_mode"]),
            (&Value::from("unknown"), &Value::from("unknown")),
            "{x}"
        );
        assert!(hints.contains("may be PCI P2PDMA"), "{hints}");
    }
    assert_eq!(g["verdict"], if p2p.usable() == Some(false) { "gds-compat" } else { "gds-unknown" }, "{g}");
}

/// The process's own configuration, as it sees it: force_compat_mode from the cufile.json its
/// CUFILE_ENV_PATH_JSON names, on each call and on its file.
#[test]
fn cufile_force_compat_mode_from_the_process_configuration() {
    let dir = scratch();
    let f = dir.path().join("forced.bin").display().to_string();
    let json = dir.path().join("cufile.json").display().to_string();
    std::fs::write(&json, "{ // comments are allowed\n \"properties\": { \"force_compat_mode\": true } }\n")
        .unwrap();
    let r = traced_held(
        &[s(&["create", &f, "1M"])],
        &[s(&["cufile-read", &f, "256K", "0"])],
        &["attach", "PID", "--libcufile", LIBCUFILE],
        &[("CUFILE_ENV_PATH_JSON", &json)],
    );
    let g = by(&r.recs, "gds_io").into_iter().find(|g| g["op"] == "cuFileRead").expect("the read");
    assert_eq!(g["gds_mode"], "gds-compat", "{g}");
    assert_eq!(g["compat_reason"][0], "force-compat-mode", "{g}");
    assert_eq!(file(&r.recs, &f)["compat_reason"][0], "force-compat-mode");
}
