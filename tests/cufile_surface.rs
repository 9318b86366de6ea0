//! The whole cuFile I/O surface on the test libcufile (NVIDIA's signatures, compatibility mode
//! here): stream-ordered writes, stream registration, a batch's set-up, status, cancel and
//! destroy, deregistrations and the driver close (which jumps to cuFileDriverClose_v2 inside
//! the library, as NVIDIA's does) each show as one `gds_io` with only the fields the call has;
//! the I/O the async and batch calls queue, and the chunks of a large read, run on the
//! library's worker threads and are attributed to the calls.
//! Host test (uprobes); run as root, one at a time.

mod storage_util;

use serde_json::Value;
use storage_util::*;

/// Compatibility mode whether or not this machine has nvidia-fs (the test library's switch, as
/// `"allow_compat_mode"` + `"force_compat_mode"` in NVIDIA's cufile.json): the expectations below
/// hold on a GPUDirect Storage machine too.
const COMPAT: &[(&str, &str)] = &[("GDR_CUFILE_COMPAT", "1")];

fn ops<'a>(ios: &[&'a Value], op: &str) -> Vec<&'a Value> {
    ios.iter().copied().filter(|g| g["op"] == op).collect()
}

#[test]
fn every_cufile_entry_point_is_one_record_with_its_own_fields() {
    let dir = scratch();
    let f = dir.path().join("data.bin").display().to_string();
    let steps = [
        s(&["cufile-write", &f, "128K", "0", "async"]),
        s(&["cufile-read", &f, "128K", "256K", "batch"]),
        s(&["cufile-close"]),
        s(&["sleep", "300"]),
    ];
    let r = traced_env(&[s(&["create", &f, "1M"])], &steps, &["--libcufile", LIBCUFILE], COMPAT);
    let ios = by(&r.recs, "gds_io");
    let lib = Value::from(LIBCUFILE);
    for g in &ios {
        assert_eq!(g["library"], lib, "every call names the library it went to: {g}");
    }

    let w = ops(&ios, "cuFileWriteAsync");
    assert_eq!(w.len(), 1, "{ios:#?}");
    let w = w[0];
    let truth_w = r.truth.iter().find(|t| t["step"] == "cufile_write").expect("write truth");
    assert_eq!(
        (&w["verdict"], u(&w["length"]), &w["ret"]),
        (&Value::from("gds-compat"), 128 << 10, &Value::from(0))
    );
    assert_eq!((&w["fd"], &w["path"]), (&truth_w["fd"], &Value::from(f.clone())), "{w}");
    assert_eq!(u(&w["posix_bytes"]), 128 << 10, "{w}");
    // Written by the library's worker thread after the call returned, attributed to the call.
    worker_only(w, "posix", 128 << 10, u(&truth_w["tid"]));
    assert_eq!(u(&w["tid"]), u(&truth_w["tid"]), "the record is the caller's call: {w}");
    let sr = ops(&ios, "cuFileStreamRegister");
    let sd = ops(&ios, "cuFileStreamDeregister");
    assert_eq!((sr.len(), sd.len()), (1, 1), "{ios:#?}");
    assert_ne!(u(&sr[0]["stream"]), 0);
    assert_eq!(
        (&sr[0]["stream"], &sd[0]["stream"], &w["stream"]),
        (&w["stream"], &w["stream"], &w["stream"])
    );
    assert_eq!(u(&sr[0]["flags"]), 0xf, "{}", sr[0]);
    for g in [sr[0], sd[0]] {
        assert!(g.get("fd").is_none() && g.get("length").is_none() && g["verdict"].is_null(), "{g}");
    }

    let setup = ops(&ios, "cuFileBatchIOSetUp");
    assert_eq!(setup.len(), 1, "{ios:#?}");
    let batch = &setup[0]["batch"];
    assert_ne!(u(batch), 0, "{}", setup[0]);
    assert_eq!(u(&setup[0]["batch_count"]), 2);
    let status = r.truth.iter().find(|t| t["step"] == "cufile_batch_status").expect("batch truth");
    assert_eq!(batch, &status["batch"]);
    let subs = ops(&ios, "cuFileBatchIOSubmit");
    assert_eq!(subs.len(), 2, "{subs:#?}");
    assert!(subs.iter().all(|e| &e["batch"] == batch && e["verdict"] == "gds-compat"), "{subs:#?}");
    let truth_r = r.truth.iter().find(|t| t["step"] == "cufile_read").expect("read truth");
    for e in &subs {
        worker_only(e, "posix", 64 << 10, u(&truth_r["tid"]));
    }
    let st = ops(&ios, "cuFileBatchIOGetStatus");
    assert_eq!(st.len(), 1, "{ios:#?}");
    let st = st[0];
    assert_eq!(
        (&st["batch"], &st["batch_count"], &st["completed_bytes"]),
        (batch, &status["nr"], &status["done"]),
        "{st}"
    );
    assert_eq!((u(&st["completed_bytes"]), u(&st["failed"])), (128 << 10, 0), "{st}");
    for op in ["cuFileBatchIOCancel", "cuFileBatchIODestroy"] {
        let c = ops(&ios, op);
        assert_eq!(c.len(), 1, "{op}: {ios:#?}");
        assert_eq!(&c[0]["batch"], batch, "{}", c[0]);
    }
    let destroy = ops(&ios, "cuFileBatchIODestroy")[0];
    assert!(destroy.get("ret").is_none(), "a void call has no return value: {destroy}");

    let dereg = ops(&ios, "cuFileHandleDeregister");
    let regs = ops(&ios, "cuFileHandleRegister");
    assert_eq!((dereg.len(), regs.len()), (2, 2), "{ios:#?}");
    for (d, reg) in dereg.iter().zip(&regs) {
        assert_eq!((&d["handle"], &d["fd"], &d["path"]), (&reg["handle"], &reg["fd"], &reg["path"]), "{d}");
        assert!(d.get("ret").is_none(), "{d}");
    }
    let bufs = ops(&ios, "cuFileBufDeregister");
    assert_eq!(bufs.len(), 2, "{ios:#?}");
    assert!(
        bufs.iter().all(|b| b["ret"] == 0 && b.get("buf").is_some() && b.get("fd").is_none()),
        "{bufs:#?}"
    );

    // cuFileDriverClose jumps to cuFileDriverClose_v2 inside the library: one call, as made.
    let close: Vec<&&Value> =
        ios.iter().filter(|g| g["op"].as_str().unwrap().starts_with("cuFileDriverClose")).collect();
    assert_eq!(close.len(), 1, "{close:#?}");
    assert_eq!((&close[0]["op"], &close[0]["ret"]), (&Value::from("cuFileDriverClose"), &Value::from(0)));

    // Only data-moving calls count: 128K written async + 2 x 64K batch entries.
    let sum = by(&r.recs, "storage_summary");
    let sum = sum.iter().find(|s| s["final"] == true).expect("final storage_summary");
    let compat = &sum["bytes_by_verdict"]["gds-compat"];
    assert_eq!((u(&compat["bytes"]), u(&compat["calls"])), (256 << 10, 3), "{sum}");
}

/// A large cuFileRead (8 MiB: cufile.json's default `min_io_threshold_size_kb`) is split in 4
/// chunks the library's workers read while the call waits: one record, its bytes all from
/// worker threads; the small read after it is the caller's own.
#[test]
fn a_large_cufile_read_is_attributed_to_the_call_its_workers_read_for() {
    let dir = scratch();
    let f = dir.path().join("big.bin").display().to_string();
    let steps = [s(&["cufile-read", &f, "8M", "4M"]), s(&["cufile-read", &f, "64K", "0"])];
    let r = traced_env(&[s(&["create", &f, "16M"])], &steps, &["--libcufile", LIBCUFILE], COMPAT);
    let reads: Vec<&Value> = by(&r.recs, "gds_io").into_iter().filter(|g| g["op"] == "cuFileRead").collect();
    assert_eq!(reads.len(), 2, "{reads:#?}");
    let big = reads[0];
    assert_eq!(
        (u(&big["length"]), u(&big["ret"]), u(&big["file_offset"])),
        (8 << 20, 8 << 20, 4 << 20),
        "{big}"
    );
    assert_eq!(big["verdict"], "gds-compat", "{big}");
    let caller = u(&truth(&r.truth, "cufile_read", &f)["tid"]);
    worker_only(big, "posix", 8 << 20, caller);
    assert_eq!(u(&big["worker_io"]["calls"]), 4, "four 2 MiB chunks: {big}");
    let small = reads[1];
    assert_eq!(
        (u(&small["posix_bytes"]), &small["verdict"]),
        (64 << 10, &Value::from("gds-compat")),
        "{small}"
    );
    assert!(small.get("worker_io").is_none(), "{small}");
    let sum = by(&r.recs, "storage_summary");
    let sum = sum.iter().find(|s| s["final"] == true).expect("final storage_summary");
    let compat = &sum["bytes_by_verdict"]["gds-compat"];
    assert_eq!((u(&compat["bytes"]), u(&compat["calls"])), ((8 << 20) + (64 << 10), 2), "{sum}");
    assert_eq!(u(&sum["cufile_worker_unattributed"]["bytes"]), 0, "{sum}");
    assert_eq!(u(&file(&r.recs, &f)["bytes_read"]), (8 << 20) + (64 << 10));
}
