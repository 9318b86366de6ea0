use gdr_trace_common::storage::{FileIo, FileIoStats, GdsOp, GdsTally};

use super::*;
use crate::{
    events::{
        storage::{GdsCall, GdsDetail},
        Context,
    },
    storage::{
        aggregate::report,
        state::{SnapFile, Snapshot, StorageState},
    },
};

fn line(op: GdsOp, ret: i64, detail: GdsDetail) -> String {
    let call = GdsCall {
        ctx: Context { pid: 7, tid: 7, comm: "job".into(), ..Context::default() },
        op,
        source: "uprobe:x".into(),
        fd: Some(1),
        handle: 0,
        buf: 0,
        length: 8192,
        file_offset: 0,
        buf_offset: 0,
        ret,
        tally: GdsTally { posix_calls: 1, io_fd: 1, ..GdsTally::default() },
        batch: None,
        detail,
    };
    gds_line(&GdsIo {
        call,
        fd: None,
        path: None,
        verdict: None,
        worker: Default::default(),
        mode: Default::default(),
    })
}

#[test]
fn a_call_shows_its_own_fields_and_its_error_in_words() {
    let lib = "/venv/site-packages/nvidia/cufile/lib/libcufile.so.0";
    let d = GdsDetail { library: Some(lib.into()), ..GdsDetail::default() };
    let l = line(GdsOp::DriverOpen, 5033, d);
    assert_eq!(
        l,
        format!(
            "GDS pid 7 (job) tid 7 cuFileDriverOpen ret 5033 CU_FILE_NVFS_SETUP_ERROR (NVFS driver initialization error) => - lib {lib}"
        )
    );
    let l =
        line(GdsOp::BatchGetStatus, 0, GdsDetail { batch_id: 0xab, batch_count: 2, ..GdsDetail::default() });
    assert_eq!(
        l,
        "GDS pid 7 (job) tid 7 cuFileBatchIOGetStatus batch 0xab entries 2 done 8.0 KiB failed 0 ret 0 => -"
    );
    let l = line(GdsOp::BatchDestroy, 0, GdsDetail { batch_id: 0xab, ..GdsDetail::default() });
    assert_eq!(l, "GDS pid 7 (job) tid 7 cuFileBatchIODestroy batch 0xab => -", "void: no ret");
    let l = line(
        GdsOp::StreamRegister,
        5011,
        GdsDetail { stream: 0x5, flags: 0xf, cu_err: 201, ..GdsDetail::default() },
    );
    assert!(l.contains("stream 0x5 flags 0xf ret 5011 CU_FILE_CUDA_DRIVER_ERROR (CUDA Driver API error) cu_err 201 CUDA_ERROR_INVALID_CONTEXT (invalid device context)"), "{l}");
}

#[test]
fn worker_thread_io_is_named_on_the_callers_line() {
    let mut call = GdsCall {
        ctx: Context { pid: 7, tid: 7, comm: "job".into(), ..Context::default() },
        op: GdsOp::ReadAsync,
        source: "uprobe:x".into(),
        fd: Some(3),
        handle: 0,
        buf: 0,
        length: 8192,
        file_offset: 0,
        buf_offset: 0,
        ret: 0,
        tally: GdsTally { posix_calls: 2, posix_bytes: 8192, io_fd: -1, ..GdsTally::default() },
        batch: None,
        detail: GdsDetail::default(),
    };
    call.detail.stream = 0x5;
    let worker = crate::storage::attribute::WorkerShare { calls: 2, bytes: 8192, tids: [11, 12].into() };
    let io = GdsIo {
        call,
        fd: Some(3),
        path: None,
        verdict: Some(crate::storage::classify::StorageVerdict::GdsCompat),
        worker,
        mode: Default::default(),
    };
    let l = gds_line(&io);
    assert!(l.ends_with("=> gds-compat (2 POSIX call(s), 8.0 KiB) [8.0 KiB by 2 worker threads]"), "{l}");
}

#[test]
fn the_busiest_processes_are_shown_and_the_rest_counted() {
    let mut s = StorageState::new();
    let files = (1..=30u32)
        .map(|pid| {
            let mut stats = FileIoStats::zeroed();
            (stats.reads, stats.bytes_read) = (1, u64::from(pid) << 20);
            let io =
                FileIo { ino: pid.into(), dev: 1, f_flags: 0, mode: 0o100644, counted: 1, stats, tenant: 0 };
            SnapFile { pid, fd: 3, io, path: Some(format!("/d/{pid}")) }
        })
        .collect();
    s.snapshot(Snapshot { files, ..Default::default() });
    // --files: the six busiest with their tables, twenty more a line each, the rest counted.
    let text = summary(&report(&s), true, true).unwrap();
    assert!(text.contains("... and 4 more processes with file I/O"), "{text}");
    assert!(text.find("PID 30 ").unwrap() < text.find("PID 29 ").unwrap(), "most bytes first:\n{text}");
    assert!(text.contains("/d/25") && !text.contains("/d/24"), "six tables:\n{text}");
    assert!(text.contains("PID 5 ") && !text.contains("PID 4 "), "{text}");
}

#[test]
fn processes_that_moved_under_64_kib_are_counted_not_listed() {
    // The demo's storage summary was filled with grep and sleep (the loader's library reads).
    let mut s = StorageState::new();
    let files = [(1u32, 1u64 << 20), (2, 4096), (3, 832)]
        .into_iter()
        .map(|(pid, bytes)| {
            let mut stats = FileIoStats::zeroed();
            (stats.reads, stats.bytes_read) = (1, bytes);
            let io =
                FileIo { ino: pid.into(), dev: 1, f_flags: 0, mode: 0o100644, counted: 1, stats, tenant: 0 };
            SnapFile { pid, fd: 3, io, path: Some(format!("/d/{pid}")) }
        })
        .collect();
    s.snapshot(Snapshot { files, ..Default::default() });
    let text = summary(&report(&s), true, false).unwrap();
    assert!(text.contains("PID 1 ") && !text.contains("PID 2 ") && !text.contains("PID 3 "), "{text}");
    assert!(text.contains("... and 2 more processes with file I/O, 2 of them under 64.0 KiB each"), "{text}");
    let all = summary(&report(&s), true, true).unwrap();
    assert!(all.contains("PID 2 ") && all.contains("PID 3 ") && !all.contains("more processes"), "{all}");
}
