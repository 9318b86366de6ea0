//! A busy node's recording, for tests (this crate's and the integration tests'): `procs`
//! processes each open and read `files` files, one summary tick with the kernel's counters, the
//! final one. Written by the real recording sink from the real pipeline.

use gdr_trace_common::storage::{FileIo, FileIoStats};

use super::{Header, Item, RecordingSink};
use crate::{
    audit::{identity::Resolver, Posture},
    events::{
        storage::{FileOpened, Identity, StorageEvent},
        Context, Event,
    },
    pipeline::Pipeline,
    sink::{json::JsonSink, FanOut, Lost, Sink},
    storage::state::{SnapFile, Snapshot},
};

/// Writes the header and the recording into `file`; returns what the live line printed as NDJSON.
pub fn busy_node(procs: u32, files: u32, file: &mut Vec<u8>) -> Vec<u8> {
    serde_json::to_writer(&mut *file, &Item::Header(Header { host: "busy".into(), ..Default::default() }))
        .expect("a header serialises");
    file.push(b'\n');
    let mut live = Vec::new();
    let mut rs = RecordingSink::new(
        &mut *file,
        None,
        Posture::default(),
        vec![],
        Resolver::new("/nonexistent".as_ref()),
    );
    let mut js = JsonSink::new(&mut live).files(true);
    let mut fan = FanOut(vec![&mut rs as &mut dyn Sink, &mut js]);
    let mut pipeline = Pipeline::new();
    let mut snap = Snapshot::default();
    for pid in 10_000..10_000 + procs {
        let ctx = Context { pid, tid: pid, comm: format!("w{pid}"), uid: 0, cgroup_id: 0, ts_ns: 0 };
        for fd in 3..3 + files {
            let ino = u64::from(pid) * 100 + u64::from(fd);
            let id = Identity { dev: (259 << 20) | 1, ino, f_flags: 0, mode: 0o100644 };
            let ev = Event::Storage(StorageEvent::Opened(FileOpened {
                ctx: ctx.clone(),
                fd: fd as i32,
                dirfd: -100,
                path: format!("/scratch/job-{pid}/part-{fd}.tfrecord"),
                open_flags: 0,
                id,
            }));
            fan.raw(&ev);
            pipeline.push(ev, &mut fan);
            let mut stats = FileIoStats::zeroed();
            stats.reads = u64::from(fd);
            stats.bytes_read = 4096 * u64::from(fd);
            let io = FileIo { ino, dev: id.dev, f_flags: 0, mode: id.mode, counted: 1, stats, tenant: 0 };
            snap.files.push(SnapFile { pid, fd, io, path: None });
        }
        snap.comms.insert(pid, format!("w{pid}"));
    }
    let lost = Lost::default();
    let snap = crate::counters::Counters { storage: snap, ..Default::default() };
    pipeline.summary_tick(snap.clone(), &lost, false, &mut fan);
    pipeline.finish(&mut fan);
    pipeline.summary_tick(snap, &lost, true, &mut fan);
    drop(fan);
    assert!(rs.error.is_none(), "the recording sink failed: {:?}", rs.error);
    live
}
