use gdr_trace_common::storage::{GdsOp, GdsTally};

use super::*;
use crate::events::Context;

const CALLER: u32 = 10;

fn call(op: GdsOp, off: i64, len: u64, entry: u64, ret_at: u64) -> GdsCall {
    GdsCall {
        ctx: Context { pid: CALLER, tid: CALLER, comm: "app".into(), uid: 0, cgroup_id: 0, ts_ns: ret_at },
        op,
        source: "uprobe:x".into(),
        fd: None,
        handle: 0xabc,
        buf: 0x7000,
        length: len,
        file_offset: off,
        buf_offset: 0,
        ret: if matches!(op, GdsOp::Read | GdsOp::Write) { len as i64 } else { 0 },
        tally: GdsTally { io_fd: -1, ..GdsTally::default() },
        batch: (op == GdsOp::BatchSubmit).then_some((0, 0)),
        detail: crate::events::storage::GdsDetail {
            entry_ns: entry,
            stream: 0x5,
            batch_id: 0xb,
            ..Default::default()
        },
    }
}

fn io(tid: u32, ts: u64, off: i64, bytes: u64, nvfs: bool) -> Loose {
    Loose {
        tid,
        ts_ns: ts,
        fd: 9,
        offset: Some(off),
        bytes,
        write: false,
        nvfs,
        shadow: u64::from(nvfs) * 0x9000,
        completion: false,
    }
}

#[test]
fn an_async_read_is_held_until_its_worker_io_is_seen_then_classified_by_it() {
    let mut w = Worker::default();
    assert!(w.arrived(call(GdsOp::ReadAsync, 0, 128 << 10, 100, 110), Some(9)).is_none(), "held");
    // Another descriptor's I/O, or I/O outside its range, is not its.
    assert!(w.io(Loose { fd: 8, ..io(21, 120, 0, 64 << 10, false) }).is_none());
    assert!(w.io(io(21, 120, 128 << 10, 4096, false)).is_none());
    assert!(w.io(io(21, 130, 0, 64 << 10, false)).is_none(), "half done: still held");
    let h = w.io(io(22, 140, 64 << 10, 64 << 10, false)).expect("complete");
    assert_eq!((h.call.tally.posix_calls, h.call.tally.posix_bytes), (2, 128 << 10));
    assert_eq!((h.worker.calls, h.worker.bytes), (2, 128 << 10));
    assert_eq!(h.worker.tids.iter().copied().collect::<Vec<_>>(), [21, 22]);
    assert_eq!(w.held(), 0);
    assert_eq!(w.release_all().len(), 0);
    assert_eq!(w.unattributed, (2, (64 << 10) + 4096), "what no call took is counted");
}

#[test]
fn worker_io_seen_before_the_call_record_is_claimed_when_it_comes() {
    let mut w = Worker::default();
    // The worker finished before the uretprobe's record was read: kept loose, then claimed.
    assert!(w.io(io(21, 105, 0, 4096, true)).is_none());
    let h = w.arrived(call(GdsOp::ReadAsync, 0, 4096, 100, 110), Some(9)).expect("complete at once");
    assert_eq!((h.call.tally.nvfs_calls, h.call.tally.nvfs_bytes, h.worker.calls), (1, 4096, 1));
    // I/O from before a call started is never its.
    assert!(w.io(io(21, 50, 0, 4096, true)).is_none());
    let h = w.arrived(call(GdsOp::ReadAsync, 0, 4096, 100, 110), Some(9)).map(|h| h.worker.calls);
    assert_eq!(h, None, "held: the earlier I/O is not its");
}

#[test]
fn a_large_read_takes_its_workers_chunks_done_while_it_waited_and_no_more() {
    let mut w = Worker::default();
    for (i, t) in [(0, 21), (1, 22), (2, 23), (3, 24)] {
        assert!(w.io(io(t, 105 + i, i as i64 * 4096, 4096, false)).is_none());
    }
    // A chunk after the call returned belongs to a later call.
    assert!(w.io(io(25, 300, 0, 4096, false)).is_none());
    let h = w.arrived(call(GdsOp::Read, 0, 4 * 4096, 100, 200), Some(9)).expect("a sync call is never held");
    assert_eq!((h.worker.calls, h.worker.bytes, h.worker.tids.len()), (4, 4 * 4096, 4));
    assert_eq!(h.call.tally.posix_calls, 4);
    // Its own thread's tally counts first: a call whose thread did it all takes nothing.
    let mut c = call(GdsOp::Read, 0, 4096, 250, 400);
    c.tally.posix_calls = 1;
    c.tally.posix_bytes = 4096;
    let h = w.arrived(c, Some(9)).unwrap();
    assert_eq!((h.worker.calls, h.call.tally.posix_calls), (0, 1));
}

#[test]
fn releasing_calls_end_what_they_own_and_nothing_else() {
    let mut w = Worker::default();
    let mut b = call(GdsOp::BatchSubmit, 0, 4096, 1, 2);
    assert!(w.arrived(b.clone(), Some(9)).is_none());
    b.detail.batch_id = 0xc;
    assert!(w.arrived(b, Some(9)).is_none());
    assert!(w.arrived(call(GdsOp::WriteAsync, 0, 4096, 1, 2), Some(9)).is_none());
    let mut cancel = call(GdsOp::BatchDestroy, 0, 0, 3, 4);
    assert_eq!(w.ended_by(&cancel).len(), 1, "only batch 0xb");
    cancel.op = GdsOp::StreamDeregister;
    let ended = w.ended_by(&cancel);
    assert_eq!((ended.len(), ended[0].call.op), (1, GdsOp::WriteAsync));
    assert_eq!(w.held(), 1);
    let close = call(GdsOp::DriverClose, 0, 0, 5, 6);
    assert_eq!(w.ended_by(&close).len(), 1);
    // A failed submit queued nothing: reported at once.
    let mut failed = call(GdsOp::ReadAsync, 0, 4096, 7, 8);
    failed.ret = 5022;
    assert!(w.arrived(failed, Some(9)).is_some());
}

#[test]
fn nvidia_fs_io_goes_to_the_call_on_the_gpu_buffer_its_shadow_stands_for() {
    let mut w = Worker::default();
    w.mapped(0x9000, 0x7000, 0x1000);
    w.mapped(0xa000, 0x20000, 0x1000);
    let mut other = call(GdsOp::ReadAsync, 0, 4096, 100, 110);
    other.buf = 0x20000;
    assert!(w.arrived(other, Some(9)).is_none());
    assert!(w.arrived(call(GdsOp::ReadAsync, 0, 4096, 100, 110), Some(9)).is_none());
    // Same descriptor, range and time: only the buffer tells them apart (0x9000 maps 0x7000).
    let h = w.io(io(21, 120, 0, 4096, true)).expect("the call on 0x7000");
    assert_eq!(h.call.buf, 0x7000);
    let h = w.io(Loose { shadow: 0xa000, ..io(22, 121, 0, 4096, true) }).expect("the call on 0x20000");
    assert_eq!(h.call.buf, 0x20000);
    // Deregistered: the shadow no longer names a buffer, so only descriptor and range count.
    w.unmapped(0x7000);
    assert!(w.arrived(call(GdsOp::ReadAsync, 0, 4096, 200, 210), Some(9)).is_none());
    assert!(w.io(Loose { shadow: 0x9000, ..io(23, 220, 0, 4096, true) }).is_some());
}

#[test]
fn an_async_batch_entry_takes_its_completion_bytes_and_its_ioctl_in_either_order() {
    let mut w = Worker::default();
    w.mapped(0x9000, 0x7000, 0x10000);
    let entry = |off: i64| {
        let mut c = call(GdsOp::BatchSubmit, off, 4096, 100, 110);
        c.batch = Some((0, 0));
        c
    };
    // The completion (no descriptor: -1) comes before the entry's BATCH_IO ioctl record.
    assert!(w.arrived(entry(0), Some(9)).is_none());
    let done = Loose { fd: -1, completion: true, ..io(21, 120, 0, 4096, true) };
    assert!(w.io(done.clone()).is_none(), "bytes all seen, but not its ioctl yet: still held");
    let h = w.io(Loose { bytes: 0, ..io(21, 121, 0, 4096, true) }).expect("complete with its ioctl");
    assert_eq!((h.call.tally.nvfs_calls, h.call.tally.nvfs_bytes), (1, 4096));
    assert_eq!(h.worker.calls, 1, "the completion is bytes, not another call");
    // The usual order: the ioctl says no bytes, the completion brings them.
    assert!(w.arrived(entry(4096), Some(9)).is_none());
    assert!(w.io(Loose { bytes: 0, ..io(22, 130, 4096, 4096, true) }).is_none());
    let h = w.io(Loose { offset: Some(4096), ts_ns: 131, ..done }).expect("completed by its bytes");
    assert_eq!((h.call.tally.nvfs_calls, h.call.tally.nvfs_bytes), (1, 4096));
}
