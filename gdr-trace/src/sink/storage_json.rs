//! NDJSON records of the storage path: `gds_io` (each cuFile call), `nvfs_io` (each nvidia-fs
//! ioctl or direct I/O), and, every interval and at the end, `file_io_summary` (each file of each
//! process) and `storage_summary` (each process). Field names are stable.

use serde_json::{json, Value};

use crate::{
    events::{
        cufile_ops::{cuda, error, op_name, shape},
        storage::NvfsIo,
    },
    storage::{aggregate::StorageReport, state::GdsIo},
};

/// One cuFile call: what every call has, then only the arguments and results this one has
/// (`events::cufile_ops::shape`); `ret` stays the number, `error` names it.
pub fn gds_io(io: &GdsIo) -> Value {
    let c = &io.call;
    let x = &c.ctx;
    let t = &c.tally;
    let d = &c.detail;
    let sh = shape(c.op);
    let mut v = json!({
        "event": "gds_io",
        "pid": x.pid, "tid": x.tid, "comm": x.comm, "uid": x.uid, "cgroup_id": x.cgroup_id, "ts_ns": x.ts_ns,
        "op": op_name(c.op),
        "verdict": io.verdict,
        "gds_mode": io.mode.mode,
        "nvfs_ioctls": t.nvfs_calls,
        "nvfs_bytes": t.nvfs_bytes,
        "dma_bytes": t.dma_bytes,
        "posix_calls": t.posix_calls,
        "posix_bytes": t.posix_bytes,
        "library": d.library,
        "source": c.source,
    });
    let mut put = |k: &str, val: Value| v[k] = val;
    if io.worker.calls > 0 {
        // Part of the counts above: done by the library's worker threads, not the caller's.
        let w = &io.worker;
        put("worker_io", json!({ "calls": w.calls, "bytes": w.bytes, "tids": w.tids }));
    }
    if !io.mode.compat_reason.is_empty() {
        put("compat_reason", json!(io.mode.compat_reason));
    }
    if sh.file {
        put("fd", json!(io.fd));
        put("path", json!(io.path));
        put("handle", json!(c.handle));
    }
    if sh.buf {
        put("buf", json!(c.buf));
    }
    if sh.length {
        put("length", json!(c.length));
    }
    if sh.offsets {
        put("file_offset", json!(c.file_offset));
        put("buf_offset", json!(c.buf_offset));
    }
    if sh.flags {
        put("flags", json!(d.flags));
    }
    if sh.stream {
        put("stream", json!(d.stream));
    }
    if sh.batch {
        put("batch", json!(d.batch_id));
    }
    if sh.batch_count {
        put("batch_count", json!(d.batch_count));
    }
    if sh.completion {
        put("completed_bytes", json!(c.length));
        put("failed", json!(d.failed));
    }
    if sh.ret {
        put("ret", json!(c.ret));
        if let Some(e) = error(c) {
            put("error", json!(e.name));
            put("error_text", json!(e.description));
        }
        if let Some(e) = cuda(c) {
            put("cu_err", json!(d.cu_err));
            put("cuda_error", json!(e.name));
        }
    }
    if let Some((index, opcode)) = c.batch {
        v["batch_index"] = json!(index);
        v["batch_op"] = json!(if opcode == 1 { "write" } else { "read" });
    }
    v
}

pub fn nvfs_io(io: &NvfsIo, path: Option<&str>) -> Value {
    let x = &io.ctx;
    let mut v = json!({
        "event": match (io.cmd, io.completion) {
            (Some(_), _) => "nvfs_io",
            (None, true) => "nvfs_io_complete",
            (None, false) => "nvfs_direct_io",
        },
        "pid": x.pid, "tid": x.tid, "comm": x.comm, "uid": x.uid, "cgroup_id": x.cgroup_id, "ts_ns": x.ts_ns,
        "op": if io.write { "write" } else { "read" },
        "size": io.size,
        "offset": io.offset,
        "ret": io.ret,
        "source": io.source,
        "async": io.async_io,
    });
    if let Some(cmd) = io.cmd {
        v["ioctl"] = json!(io.name());
        v["cmd"] = json!(cmd);
        v["fd"] = json!(io.fd);
        v["in_call"] = json!(io.in_call);
        v["path"] = json!(path);
        v["io_ret"] = json!(io.io_ret);
        v["cpuvaddr"] = json!(io.cpuvaddr);
        v["gpuvaddr"] = json!(io.gpuvaddr);
        if let Some((index, count)) = io.batch {
            v["batch_index"] = json!(index);
            v["batch_count"] = json!(count);
        }
    }
    v
}

/// One `storage_summary` per process, after a `file_io_summary` per file of each process that
/// used cuFile or nvidia-fs (`files`: of every process). A busy node's other files are
/// thousands of lines no one asked for; `storage_summary.files` still counts them.
/// The summary's lines, built one at a time as they are written: a final summary of a busy
/// node lists thousands of processes and files, and holding all their JSON trees at once was
/// the run's memory peak (97 MiB in the storage storm's `--interval 0`).
pub fn summary(report: &StorageReport, last: bool, files: bool) -> impl Iterator<Item = Value> + '_ {
    report.procs.iter().flat_map(move |p| {
        let listed = if files || p.uses_gds() { &p.files[..] } else { &[] };
        let files = listed.iter().map(move |f| {
            let mut v = serde_json::to_value(f).unwrap_or_default();
            v["event"] = json!("file_io_summary");
            v["final"] = json!(last);
            v
        });
        files.chain(std::iter::once_with(move || {
            let mut v = serde_json::to_value(p).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.remove("files");
            }
            v["event"] = json!("storage_summary");
            // Every file, listed or not: the count does not shrink when files are folded.
            v["files"] = json!(p.files.len() as u64 + p.files_folded);
            v["final"] = json!(last);
            v
        }))
    })
}

#[cfg(test)]
mod tests {
    use gdr_trace_common::storage::{GdsOp, GdsTally};

    use super::*;
    use crate::{
        events::{storage::GdsCall, Context},
        storage::{
            classify::StorageVerdict,
            state::{SnapFile, Snapshot, StorageState},
        },
    };

    #[test]
    fn records_carry_the_documented_fields() {
        let call = GdsCall {
            ctx: Context { pid: 1, tid: 2, comm: "x".into(), uid: 0, cgroup_id: 0, ts_ns: 0 },
            op: GdsOp::Read,
            source: "uprobe:cuFileRead".into(),
            fd: Some(3),
            handle: 9,
            buf: 0,
            length: 4096,
            file_offset: 0,
            buf_offset: 0,
            ret: 4096,
            tally: GdsTally { nvfs_calls: 1, ..GdsTally::default() },
            batch: None,
            detail: Default::default(),
        };
        let io = GdsIo {
            call,
            fd: Some(3),
            path: Some("/d".into()),
            verdict: Some(StorageVerdict::GdsNvfs),
            worker: Default::default(),
            mode: Default::default(),
        };
        let v = gds_io(&io);
        for k in ["pid", "tid", "comm", "op", "fd", "path", "length", "file_offset", "ret", "verdict"] {
            assert!(!v[k].is_null(), "gds_io has {k}: {v}");
        }
        assert_eq!(
            (&v["event"], &v["op"], &v["verdict"]),
            (&json!("gds_io"), &json!("cuFileRead"), &json!("gds-nvfs"))
        );

        // A driver open has no descriptor (its nested I/O is the library's own), and its error
        // is named; a CUDA driver error comes with the CUresult's name.
        let mut open = io.call.clone();
        (open.op, open.ret, open.fd) = (GdsOp::DriverOpen, 5011, Some(1));
        open.detail.cu_err = 100;
        let v = gds_io(&GdsIo { call: open, fd: None, path: None, verdict: None, ..io.clone() });
        for k in ["fd", "path", "handle", "length", "file_offset", "buf", "stream", "batch"] {
            assert!(v.get(k).is_none(), "cuFileDriverOpen has no {k}: {v}");
        }
        assert_eq!(
            (&v["ret"], &v["error"], &v["cu_err"], &v["cuda_error"]),
            (&json!(5011), &json!("CU_FILE_CUDA_DRIVER_ERROR"), &json!(100), &json!("CUDA_ERROR_NO_DEVICE"))
        );
        // A void call has no return value; a successful one no error.
        let mut destroy = io.call.clone();
        (destroy.op, destroy.ret) = (GdsOp::BatchDestroy, 0);
        destroy.detail.batch_id = 0xb;
        let v = gds_io(&GdsIo { call: destroy, fd: None, path: None, verdict: None, ..io.clone() });
        assert!(v.get("ret").is_none() && v.get("error").is_none(), "{v}");
        assert_eq!(v["batch"], 0xb);
        let v = gds_io(&io);
        assert!(v.get("error").is_none() && v.get("cuda_error").is_none(), "{v}");
        // cuFileRead's negative returns: a CUfileOpError or an errno.
        for (ret, name) in [(-5027, "CU_FILE_HANDLE_NOT_REGISTERED"), (-(libc::EIO as i64), "EIO")] {
            let mut read = io.call.clone();
            read.ret = ret;
            let v = gds_io(&GdsIo { call: read, ..io.clone() });
            assert_eq!((&v["ret"], &v["error"]), (&json!(ret), &json!(name)), "{v}");
        }

        let mut s = StorageState::new();
        let mut io = gdr_trace_common::storage::FileIo::zeroed();
        io.ino = 5;
        io.stats.reads = 1;
        io.stats.bytes_read = 4096;
        s.snapshot(Snapshot {
            files: vec![SnapFile { pid: 1, fd: 3, io, path: Some("/d".into()) }],
            ..Snapshot::default()
        });
        let report = crate::storage::aggregate::report(&s);
        // A process without cuFile or nvidia-fs: its summary, its files only when asked.
        let recs: Vec<Value> = summary(&report, true, false).collect();
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!((&recs[0]["event"], &recs[0]["files"]), (&json!("storage_summary"), &json!(1)));
        // Folded files (closed, or cut when the process was archived) still count.
        let mut folded = report.clone();
        folded.procs[0].files_folded = 5;
        let recs: Vec<Value> = summary(&folded, true, false).collect();
        assert_eq!(recs[0]["files"], 6, "{recs:?}");
        let recs: Vec<Value> = summary(&report, true, true).collect();
        let f = &recs[0];
        for k in [
            "pid",
            "comm",
            "path",
            "reads",
            "bytes_read",
            "writes",
            "bytes_written",
            "direct",
            "pages_filled",
            "verdict",
        ] {
            assert!(f.get(k).is_some(), "file_io_summary has {k}: {f}");
        }
        assert_eq!(
            (&f["event"], &f["final"], &f["verdict"]),
            (&json!("file_io_summary"), &json!(true), &json!("page-cache"))
        );
        assert_eq!(recs[1]["event"], "storage_summary");
    }
}
