//! A recording written in-process by the real recording sink (`RecordingSink`) from the real
//! pipeline: one of each line a recording can hold (header, process facts, MR records, CUDA
//! calls, every storage event, ticks, an exit, a note, the flush, the kernel's counters, storage
//! summaries and the end), as the live line feeds them.

use gdr_trace::{
    audit::{identity::Resolver, Posture},
    counters::Counters,
    events::{
        cuda::{CudaCall, CudaOp},
        storage::{FileClosed, FileOpened, GdsCall, Identity, NvfsIo, StorageEvent, WorkerIo},
        Context, Event, MrKind, MrRecord, Source,
    },
    facts::HookStatus,
    p2p::{staged::StagedDir, P2pCopies, PeerEnabled, StagedCopies},
    pipeline::Pipeline,
    recording::RecordingSink,
    sink::{Lost, Output, Sink},
    storage::{
        gds_facts::ProcGdsFacts,
        state::{SnapFile, SnapFill, Snapshot},
    },
};
use gdr_trace_common::storage::{FileIo, FileIoStats, GdsOp, GdsTally, UringLoose};
use gdr_trace_common::{
    mr::bytes::{ByteCount, ByteKey},
    AttachKind, HookId,
};
use serde_json::json;

const MS: u64 = 1_000_000;
/// Where the process pinned host memory (an address like a real one).
const HOST_ALLOC: u64 = 0x7f3a_5c00_0000;
const DEV: u32 = (259 << 20) | 1;

/// This test process (its /proc entry gives the `process` line real facts), at `ts_ns`.
fn me(ts_ns: u64) -> Context {
    let pid = std::process::id();
    Context { pid, tid: pid, comm: "trainer".into(), uid: 0, cgroup_id: 1, ts_ns }
}

fn cuda(op: CudaOp, function: &str, ts: u64, addr: u64, handle: Option<String>) -> Event {
    Event::Cuda(CudaCall {
        ctx: me(ts),
        op,
        function: function.into(),
        source: format!("uprobe:{function}").as_str().into(),
        addr,
        length: 1 << 20,
        flags: 0,
        aux: 9,
        ret: 0,
        device: Some(0),
        peer_device: None,
        handle,
        file: Some((u64::from(DEV), 77)),
    })
}

fn stats(reads: u64) -> FileIoStats {
    let mut s = FileIoStats::zeroed();
    (s.reads, s.bytes_read, s.seq_reads, s.read_hist[3]) = (reads, reads * 8192, reads, reads);
    s
}

fn id(ino: u64, f_flags: u32) -> Identity {
    Identity { dev: DEV, ino, f_flags, mode: 0o100644 }
}

/// Every storage event the live line decodes: an open, a cuFile read with its nvidia-fs ioctl
/// and DMA, a worker thread's read, an O_DIRECT file's open and close.
fn storage(ts: u64) -> Vec<Event> {
    let opened = |fd: i32, path: &str, ino: u64, flags: u32| {
        let ev = FileOpened {
            ctx: me(ts),
            fd,
            dirfd: -100,
            path: path.into(),
            open_flags: flags,
            id: id(ino, flags),
        };
        Event::Storage(StorageEvent::Opened(ev))
    };
    let tally = GdsTally { nvfs_calls: 1, nvfs_bytes: 4096, dma_bytes: 4096, io_fd: 3, ..Default::default() };
    let gds: GdsCall = serde_json::from_value(json!({
        "ctx": me(ts + 1), "op": GdsOp::Read, "source": "uprobe:cuFileRead", "fd": 3, "handle": 1,
        "buf": HOST_ALLOC + 0x10_0000, "length": 4096, "file_offset": 0, "buf_offset": 0, "ret": 4096,
        "tally": tally, "batch": null,
        "detail": { "cu_err": 0, "batch_id": 0, "batch_count": 0, "failed": 0, "flags": 0, "stream": 0,
                    "func_ip": 0x7f00_0000_1000u64, "library": "/usr/lib/libcufile.so.0",
                    "entry_ns": ts, "dest_gpu": true }
    }))
    .expect("a cuFile call");
    let nvfs = NvfsIo {
        ctx: me(ts + 1),
        source: "kprobe:nvfs_ioctl".into(),
        cmd: Some(0x4004_7402),
        fd: Some(3),
        ret: 0,
        io_ret: 4096,
        offset: 0,
        size: 4096,
        cpuvaddr: HOST_ALLOC + 0x10_0000,
        gpuvaddr: 1 << 40,
        write: false,
        batch: None,
        in_call: true,
        async_io: false,
        completion: false,
        dev: 0,
        ino: 0,
    };
    let direct = NvfsIo { cmd: None, source: "fexit:nvfs_direct_io".into(), ..nvfs.clone() };
    let worker = WorkerIo {
        ctx: Context { tid: std::process::id() + 1, ..me(ts + 2) },
        source: Source::new(HookId::SysRead, AttachKind::Tracepoint),
        fd: 3,
        ret: 4096,
        offset: Some(4096),
        write: false,
    };
    let closed =
        FileClosed { ctx: me(ts + 3), fd: 4, id: id(200, libc::O_DIRECT as u32), counters: stats(3) };
    vec![
        opened(3, "/data/shard.bin", 100, 0),
        opened(4, "/data/direct.bin", 200, libc::O_DIRECT as u32),
        Event::Storage(StorageEvent::Nvfs(nvfs)),
        Event::Storage(StorageEvent::Nvfs(direct)),
        Event::Storage(StorageEvent::Gds(gds)),
        Event::Storage(StorageEvent::Worker(worker)),
        Event::Storage(StorageEvent::Closed(closed)),
    ]
}

/// The kernel's counters at a summary tick: files, page fills, io_uring, processes, GPU copies,
/// peer access, staged copies and work requests' bytes.
fn counters(gone: bool) -> Counters {
    let pid = std::process::id();
    let io =
        |ino, f_flags, stats| FileIo { ino, dev: DEV, f_flags, mode: 0o100644, counted: 1, stats, tenant: 0 };
    let storage = Snapshot {
        files: vec![
            SnapFile { pid, fd: 3, io: io(100, 0, stats(4)), path: Some("/data/shard.bin".into()) },
            SnapFile { pid, fd: 5, io: io(300, 0, stats(1)), path: None },
        ],
        fills: vec![SnapFill { pid, dev: DEV, ino: 100, pages: 8, read_pages: 8, path: None }],
        uring_loose: vec![(pid, UringLoose { reads: 2, bytes_read: 8192, ..Default::default() })],
        comms: [(pid, "trainer".to_string())].into(),
        gone: if gone { vec![pid] } else { vec![] },
        folded_growth: vec![(pid, 4, 2)],
        gds_facts: vec![(pid, ProcGdsFacts::default())],
    };
    let bytes = (
        ByteKey { tgid: pid, lkey: 0x51, dev: 7 },
        ByteCount { bytes_out: 65536, bytes_in: 0, ops: 1, tenant: 0 },
    );
    Counters {
        storage,
        p2p: vec![P2pCopies { pid, src_device: 0, dst_device: 1, verdict: 1, calls: 2, bytes: 1 << 20 }],
        peer_access: vec![PeerEnabled { pid, device: 0, peer_device: 1 }],
        staged: vec![StagedCopies { pid, dir: StagedDir::Dtoh, host: HOST_ALLOC, calls: 1, bytes: 4096 }],
        bytes: vec![bytes],
    }
}

/// The recording, as `record -o` writes it.
pub fn recording() -> String {
    let mut file = Vec::new();
    let posture: Posture = serde_json::from_value(json!({ "items": [{
        "id": "iommu-off", "single_tenant": "info", "multi_tenant": "high", "summary": "IOMMU off",
        "evidence": [{ "path": "/sys/class/iommu", "value": "empty" }], "hint": null
    }]}))
    .expect("a posture");
    let mut rs = RecordingSink::new(
        &mut file,
        Some(std::process::id()),
        posture,
        vec!["run/containerd/containerd.sock".into()],
        Resolver::new("/etc/passwd".as_ref()),
    );
    let hook = HookStatus {
        hook: "ib_umem_get",
        side: "kernel",
        location: Some("ib_core".into()),
        attached: Some("fexit".into()),
        reasons: vec![],
    };
    rs.start(&super::facts(), &[hook]);
    // GPU use is learnt at the interim summary: the process's facts are written again then.
    let mut pipeline = Pipeline::new().with_gpu_use(Box::new(|_| Some(true)));
    let at = |pipeline: &mut Pipeline, rs: &mut RecordingSink<&mut Vec<u8>>, now: u64, evs: Vec<Event>| {
        rs.tick(now);
        pipeline.tick(now, rs);
        for ev in evs {
            rs.raw(&ev);
            pipeline.push(ev, rs);
        }
    };
    let reg = |kind, source: &str, ts, addr, handle| MrRecord {
        access: 7,
        device: Some("mlx5_0".into()),
        ..MrRecord::at(kind, source, me(ts), addr, 4096, handle)
    };
    let handle = Some("0123456789abcdef".repeat(8));
    let first = vec![
        cuda(CudaOp::HostAlloc, "cuMemHostAlloc", MS, HOST_ALLOC, None),
        Event::Mr(MrRecord {
            uverbs_dev: (231 << 20) | 192,
            ..reg(MrKind::Register, "fexit:ib_umem_get", MS, HOST_ALLOC + 0x1000, 0xa1)
        }),
        Event::Mr(MrRecord {
            lkey: 0x51,
            dev: 7,
            ..reg(MrKind::Register, "uprobe:ibv_reg_mr", MS + 10, HOST_ALLOC + 0x1000, 0xb1)
        }),
        cuda(CudaOp::IpcExport, "cuIpcGetMemHandle", MS + 20, 1 << 40, handle),
    ];
    at(&mut pipeline, &mut rs, MS, first);
    at(&mut pipeline, &mut rs, 2 * MS, storage(2 * MS));
    pipeline.summary_tick(counters(false), &Lost::default(), false, &mut rs);
    let moved = ByteCount { bytes_out: 65536, bytes_in: 7, ops: 1, tenant: 0 };
    let release = vec![
        Event::Mr(reg(MrKind::Release, "fentry:ib_umem_release", 300 * MS, 0, 0xa1)),
        Event::Mr(MrRecord {
            lkey: 0x51,
            dev: 7,
            wr_bytes: Some(moved),
            ..reg(MrKind::Release, "uprobe:ibv_dereg_mr", 300 * MS + 10, 0, 0xb1)
        }),
        Event::Exit(me(400 * MS)),
    ];
    at(&mut pipeline, &mut rs, 300 * MS, release);
    for t in (500..3000).step_by(500) {
        at(&mut pipeline, &mut rs, t * MS, vec![]);
    }
    rs.emit(&Output::Note("interrupted"));
    pipeline.finish(&mut rs);
    let mut lost = Lost::of(gdr_trace_common::lost::RINGBUF_FULL, 2);
    lost.add(gdr_trace_common::lost::STASH_MISS, 1);
    pipeline.summary_tick(counters(true), &lost, true, &mut rs);
    assert!(rs.error.is_none(), "the recording sink failed: {:?}", rs.error);
    drop(rs);
    String::from_utf8(file).expect("UTF-8")
}
