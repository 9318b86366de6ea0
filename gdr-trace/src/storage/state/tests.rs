use gdr_trace_common::storage::{FileIo, FileIoStats, GdsTally};

use super::*;
use crate::{
    events::{
        storage::{FileClosed, FileOpened},
        Context,
    },
    storage::aggregate::report,
};

pub(crate) fn ctx(pid: u32) -> Context {
    Context { pid, tid: pid, comm: format!("p{pid}"), uid: 0, cgroup_id: 0, ts_ns: 0 }
}

pub(crate) fn id(ino: u64, f_flags: u32) -> Identity {
    Identity { dev: (8 << 20) | 1, ino, f_flags, mode: 0o100644 }
}

pub(crate) fn opened(pid: u32, fd: i32, path: &str, ino: u64, f_flags: u32) -> StorageEvent {
    StorageEvent::Opened(FileOpened {
        ctx: ctx(pid),
        fd,
        dirfd: -100,
        path: path.into(),
        open_flags: f_flags,
        id: id(ino, f_flags),
    })
}

pub(crate) fn stats(reads: u64, bytes: u64) -> FileIoStats {
    let mut s = FileIoStats::zeroed();
    s.reads = reads;
    s.bytes_read = bytes;
    s.seq_reads = reads;
    s.read_hist[3] = reads;
    s
}

pub(crate) fn snap_file(pid: u32, fd: u32, ino: u64, f_flags: u32, s: FileIoStats) -> SnapFile {
    let i = id(ino, f_flags);
    SnapFile {
        pid,
        fd,
        io: FileIo { ino, dev: i.dev, f_flags, mode: i.mode, counted: 1, stats: s, tenant: 0 },
        path: None,
    }
}

pub(crate) fn gds(
    pid: u32,
    op: GdsOp,
    fd: Option<i32>,
    handle: u64,
    ret: i64,
    tally: GdsTally,
) -> StorageEvent {
    StorageEvent::Gds(GdsCall {
        ctx: ctx(pid),
        op,
        source: "uprobe:x".into(),
        fd,
        handle,
        buf: 0,
        length: ret.max(0) as u64,
        file_offset: 0,
        buf_offset: 0,
        ret,
        tally,
        batch: None,
        detail: Default::default(),
    })
}

#[test]
fn live_and_closed_counters_add_up_per_file_across_descriptor_reuse() {
    let mut s = StorageState::new();
    s.record(opened(10, 3, "/d/a", 100, 0));
    s.snapshot(Snapshot { files: vec![snap_file(10, 3, 100, 0, stats(4, 16384))], ..Snapshot::default() });
    // fd 3 closed with its final counters, then reused for another file.
    s.record(StorageEvent::Closed(FileClosed {
        ctx: ctx(10),
        fd: 3,
        id: id(100, 0),
        counters: stats(5, 20480),
    }));
    s.record(opened(10, 3, "/d/b", 200, libc::O_DIRECT as u32));
    s.snapshot(Snapshot {
        files: vec![snap_file(10, 3, 200, libc::O_DIRECT as u32, stats(2, 8192))],
        fills: vec![SnapFill { pid: 10, dev: (8 << 20) | 1, ino: 100, pages: 7, read_pages: 5, path: None }],
        ..Snapshot::default()
    });
    let r = report(&s);
    let p = &r.procs[0];
    let a = p.files.iter().find(|f| f.path == "/d/a").unwrap();
    let b = p.files.iter().find(|f| f.path == "/d/b").unwrap();
    assert_eq!((a.reads, a.bytes_read, a.pages_filled, a.read_pages_filled), (5, 20480, 7, 5));
    assert_eq!(a.cache_hit_ratio, Some(0.0), "5 pages filled by reads for 5 pages read");
    assert_eq!(a.verdict, StorageVerdict::PageCache);
    assert_eq!(a.read_size_hist.get("4KiB"), Some(&5));
    assert_eq!((b.reads, b.bytes_read, b.direct), (2, 8192, true));
    assert_eq!(p.bytes_by_verdict[&StorageVerdict::Direct].bytes, 8192);
    assert_eq!(p.bytes_by_verdict[&StorageVerdict::PageCache].bytes, 20480);
}

#[test]
fn a_snapshot_replaces_live_counters_and_gone_processes_keep_theirs() {
    let mut s = StorageState::new();
    s.snapshot(Snapshot { files: vec![snap_file(7, 4, 1, 0, stats(1, 4096))], ..Snapshot::default() });
    s.snapshot(Snapshot { files: vec![snap_file(7, 4, 1, 0, stats(3, 12288))], ..Snapshot::default() });
    assert_eq!(report(&s).procs[0].files[0].reads, 3, "replaced, not added");
    s.process_gone(7);
    s.snapshot(Snapshot::default());
    let r = report(&s);
    assert_eq!(r.procs[0].files[0].reads, 3, "final counters survive the kernel entries");
    assert!(r.procs[0].exited);
}

#[test]
fn cufile_calls_are_classified_and_attributed_through_their_handle() {
    let mut s = StorageState::new();
    s.record(opened(5, 9, "/data/x", 42, libc::O_DIRECT as u32));
    let reg = s.record(gds(5, GdsOp::HandleRegister, Some(9), 0xabc, 0, GdsTally::default())).pop().unwrap();
    assert_eq!((reg.verdict, reg.path.as_deref()), (None, Some("/data/x")));
    let nvfs = GdsTally { nvfs_calls: 1, nvfs_bytes: 4096, io_fd: -1, ..GdsTally::default() };
    // No fd from nested I/O: the handle says which file.
    let io = s.record(gds(5, GdsOp::Read, None, 0xabc, 4096, nvfs)).pop().unwrap();
    assert_eq!(
        (io.verdict, io.fd, io.path.as_deref()),
        (Some(StorageVerdict::GdsNvfs), Some(9), Some("/data/x"))
    );
    let compat = GdsTally { posix_calls: 1, posix_bytes: 8192, io_fd: 9, ..GdsTally::default() };
    s.record(gds(5, GdsOp::Read, Some(9), 0xabc, 8192, compat));
    let lost = s
        .record(gds(5, GdsOp::Read, None, 0xdef, 100, GdsTally { io_fd: -1, ..GdsTally::default() }))
        .pop()
        .unwrap();
    assert_eq!(lost.verdict, None);
    let r = report(&s);
    let p = &r.procs[0];
    assert_eq!(p.bytes_by_verdict[&StorageVerdict::GdsNvfs].bytes, 4096);
    // POSIX I/O on an O_DIRECT descriptor, no nvidia-fs, the kernel's P2PDMA not known: its
    // verdict is its mode, unknown (never compat), and no hint calls it compatibility mode.
    assert_eq!(p.bytes_by_verdict[&StorageVerdict::GdsUnknown].bytes, 8192);
    assert!(!p.bytes_by_verdict.contains_key(&StorageVerdict::GdsCompat));
    assert_eq!(p.cufile_unclassified, 1);
    assert_eq!(p.files[0].gds_bytes[&StorageVerdict::GdsUnknown], 8192);
    assert!(!p.hints.iter().any(|h| h.contains("compatibility mode")), "{:?}", p.hints);
    assert!(
        p.hints.iter().any(|h| h.starts_with("67% of cuFile's 12.0 KiB took a path not told")),
        "{:?}",
        p.hints
    );
}

#[test]
fn processes_without_storage_activity_are_not_reported() {
    let mut s = StorageState::new();
    s.record(opened(3, 4, "/etc/passwd", 9, 0));
    assert!(report(&s).is_empty(), "an open alone moves no data");
}

#[test]
fn io_uring_reads_fill_outside_read_syscalls_and_have_no_known_position() {
    let page = crate::storage::aggregate::page_size();
    let fill = |ino: u64, pages: u64| SnapFill {
        pid: 30,
        dev: (8 << 20) | 1,
        ino,
        pages,
        read_pages: 0,
        path: None,
    };
    let mut ring = stats(16, 16 * page * 16);
    ring.seq_reads = 0;
    ring.uring_reads = 16;
    // Read through a ring and never written: every page filled is a read's (a cold file: 0 hits).
    let mut written = ring;
    written.writes = 1;
    written.bytes_written = page;
    let mut s = StorageState::new();
    s.snapshot(Snapshot {
        files: vec![snap_file(30, 3, 300, 0, ring), snap_file(30, 4, 400, 0, written)],
        fills: vec![fill(300, 256), fill(400, 256)],
        uring_loose: vec![(30, UringLoose { reads: 2, bytes_read: 8192, writes: 0, bytes_written: 0 })],
        comms: Default::default(),
        gone: vec![],
        ..Default::default()
    });
    let r = report(&s);
    let p = &r.procs[0];
    let f = |ino: u64| p.files.iter().find(|f| f.ino == ino).unwrap();
    assert_eq!(f(300).cache_hit_ratio, Some(0.0));
    assert_eq!(f(300).io_uring_reads, 16);
    // Written too: fills outside read calls may be the writes', so only reads' fills count.
    assert_eq!(f(400).cache_hit_ratio, Some(1.0));
    assert_eq!((p.io_uring_reads, p.io_uring_unattributed.bytes_read), (32, 8192));
    // No read with a known position: no pattern hint.
    assert!(p.hints.iter().all(|h| !h.contains("random") && !h.contains("sequential")), "{:?}", p.hints);
}

#[test]
fn a_close_goes_to_the_file_the_kernel_names_not_a_stale_open_of_that_number() {
    let mut s = StorageState::new();
    // fd 3 opened for /d/a and closed without I/O (no close record), then the number comes
    // back from a call that isn't hooked, for inode 200.
    s.record(opened(10, 3, "/d/a", 100, 0));
    s.record(StorageEvent::Closed(FileClosed {
        ctx: ctx(10),
        fd: 3,
        id: id(200, 0),
        counters: stats(3, 12288),
    }));
    let r = report(&s);
    let files = &r.procs[0].files;
    assert!(files.iter().all(|f| f.path != "/d/a" || f.reads == 0), "{files:#?}");
    let b = files.iter().find(|f| f.ino == 200).expect("inode 200");
    assert_eq!(b.reads, 3);
}

#[test]
fn a_deregistered_handle_names_its_file_once_and_calls_without_a_handle_have_no_fd() {
    let mut s = StorageState::new();
    s.record(opened(4, 5, "/d/ckpt", 9, 0));
    let t = GdsTally { posix_calls: 1, io_fd: 1, ..GdsTally::default() };
    // The library's own I/O inside a driver open (its log on fd 1) is no descriptor of the call.
    let open = s.record(gds(4, GdsOp::DriverOpen, Some(1), 0, 0, t)).pop().unwrap();
    assert_eq!((open.fd, open.verdict), (None, None));
    s.record(gds(4, GdsOp::HandleRegister, Some(5), 0x77, 0, GdsTally::default()));
    let w =
        s.record(gds(4, GdsOp::WriteAsync, None, 0x77, 0, GdsTally { posix_calls: 1, ..t })).pop().unwrap();
    assert_eq!(
        (w.fd, w.path.as_deref(), w.verdict),
        (Some(5), Some("/d/ckpt"), Some(StorageVerdict::GdsCompat))
    );
    let d = s.record(gds(4, GdsOp::HandleDeregister, None, 0x77, 0, GdsTally::default())).pop().unwrap();
    assert_eq!((d.fd, d.path.as_deref(), d.verdict), (Some(5), Some("/d/ckpt"), None));
    let again = s.record(gds(4, GdsOp::Read, None, 0x77, -5027, GdsTally::default())).pop().unwrap();
    assert_eq!(again.fd, None, "the handle is gone: {again:?}");
    let g = &s.procs[&4].gds;
    assert_eq!((g.driver_opens, g.calls, g.unclassified), (1, 5, 1));
    assert_eq!(g.by_verdict[&StorageVerdict::GdsCompat], (1, 0), "WriteAsync counted; ret 0 length 0");
}

/// An async nvidia-fs READ the filesystem finished inline: nvidia-fs completes it there
/// (`nvfs_io_ret` → `nvfs_io_complete`) and returns the bytes as `ioctl_return` as well
/// (gds-nvidia-fs v2.28.4 nvfs-core.c L892 and L2190). The file's GDS bytes count them once; a
/// queued one (ioctl 0, bytes at completion) and a sync one (bytes in the ioctl) the same.
#[test]
fn an_async_read_completed_inline_is_counted_once() {
    use gdr_trace_common::storage::nvfs;
    let nvfs_io = |async_io: bool, completion: bool, io_ret: i64| {
        StorageEvent::Nvfs(NvfsIo {
            ctx: ctx(9),
            source: "kprobe:nvfs_ioctl".into(),
            cmd: (!completion).then_some(nvfs::READ),
            fd: (!completion).then_some(5),
            ret: if completion { io_ret } else { 0 },
            io_ret,
            offset: 0,
            size: 65536,
            cpuvaddr: 0x7000_0000,
            gpuvaddr: 0,
            write: false,
            batch: None,
            in_call: true,
            async_io,
            completion,
            dev: id(77, 0o40000).dev,
            ino: if completion { 77 } else { 0 },
        })
    };
    let bytes = |events: Vec<StorageEvent>| {
        let mut s = StorageState::default();
        s.record(opened(9, 5, "/data/ckpt", 77, 0o40000));
        for e in events {
            s.record(e);
        }
        report(&s).procs[0].files.iter().find(|f| f.path == "/data/ckpt").map_or(0, |f| f.nvfs_bytes)
    };
    // Inline: the completion (in the ioctl's thread) and the ioctl's return both say 64 KiB.
    assert_eq!(bytes(vec![nvfs_io(true, true, 65536), nvfs_io(true, false, 65536)]), 65536);
    // Queued: the ioctl returns 0, the completion comes later.
    assert_eq!(bytes(vec![nvfs_io(true, false, 0), nvfs_io(true, true, 65536)]), 65536);
    // Sync: the ioctl's return is the bytes (its completion is never reported).
    assert_eq!(bytes(vec![nvfs_io(false, false, 65536)]), 65536);
}
