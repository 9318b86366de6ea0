//! Typed storage events: what a storage record means, with names instead of numbers.

use gdr_trace_common::{
    decode::c_str,
    storage::{decode::StorageRecord, nvfs, FileIo, FileIoStats, GdsEvent, GdsOp, GdsTally, NvfsEvent},
    EventKind,
};
use serde::{Deserialize, Serialize};

use super::header::{context, source, Context, Source};

/// POSIX I/O counters of a descriptor or a file: the kernel's own (`next_offset` unused here).
pub type Counters = FileIoStats;

/// Which file, as the kernel saw it: device (kernel `dev_t`), inode, open flags, mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub dev: u32,
    pub ino: u64,
    pub f_flags: u32,
    pub mode: u32,
}

impl Identity {
    /// The kernel could not read the file (no BTF offsets): only /proc can tell.
    pub fn is_known(&self) -> bool {
        self.ino != 0 || self.dev != 0
    }
}

impl From<&FileIo> for Identity {
    fn from(f: &FileIo) -> Self {
        Self { dev: f.dev, ino: f.ino, f_flags: f.f_flags, mode: f.mode }
    }
}

/// An `openat` of a regular file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileOpened {
    pub ctx: Context,
    pub fd: i32,
    pub dirfd: i32,
    /// As the process passed it; [`crate::trace::storage_live`] makes it absolute when it can.
    pub path: String,
    pub open_flags: u32,
    pub id: Identity,
}

/// A counted descriptor closed: its final counters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileClosed {
    pub ctx: Context,
    pub fd: i32,
    pub id: Identity,
    pub counters: Counters,
}

/// One cuFile call (one entry of a batch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GdsCall {
    pub ctx: Context,
    pub op: GdsOp,
    /// "uprobe:cuFileRead".
    pub source: Source,
    /// The descriptor: from `CUfileDescr_t` (HandleRegister), else what nested I/O used.
    pub fd: Option<i32>,
    pub handle: u64,
    pub buf: u64,
    pub length: u64,
    pub file_offset: i64,
    pub buf_offset: i64,
    pub ret: i64,
    pub tally: GdsTally,
    /// Batch entries: index and opcode (0 read, 1 write).
    pub batch: Option<(u32, u32)>,
    /// What only some calls have (see [`crate::events::cufile_ops`] for which).
    #[serde(default)]
    pub detail: GdsDetail,
}

/// The arguments and results only some cuFile calls have, and where the call came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GdsDetail {
    /// `CUfileError_t.cu_err`: the CUDA driver's `CUresult`.
    pub cu_err: i32,
    /// `CUfileBatchHandle_t`.
    pub batch_id: u64,
    /// BatchIOSetUp: entries asked for; BatchIOGetStatus: entries returned.
    pub batch_count: u32,
    /// BatchIOGetStatus: returned entries that did not complete.
    pub failed: u32,
    pub flags: u32,
    pub stream: u64,
    /// The called function's address in the process.
    pub func_ip: u64,
    /// The library file the call went to, as the process sees it (its mapping of `func_ip`).
    pub library: Option<String>,
    /// When the call was entered (the record's own time is its return): I/O of the library's
    /// worker threads after this can be the call's.
    #[serde(default)]
    pub entry_ns: u64,
    /// The call's last POSIX I/O's buffer (`tally.io_buf`) lay in GPU memory (a /dev/nvidiaN
    /// mapping of the process) or not, read from /proc/PID/maps while it ran; None: not known.
    #[serde(default)]
    pub dest_gpu: Option<bool>,
}

/// An nvidia-fs ioctl, or one `nvfs_direct_io` chunk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvfsIo {
    pub ctx: Context,
    /// "kprobe:nvfs_ioctl", "tracepoint:ioctl", "fexit:nvfs_direct_io"...
    pub source: Source,
    /// None: `nvfs_direct_io`.
    pub cmd: Option<u32>,
    pub fd: Option<i32>,
    pub ret: i64,
    pub io_ret: i64,
    pub offset: i64,
    pub size: u64,
    pub cpuvaddr: u64,
    pub gpuvaddr: u64,
    pub write: bool,
    pub batch: Option<(u32, u32)>,
    /// Counted in the cuFile call in flight on its thread; false: done by a thread with no call
    /// in flight (a worker of the library), attributed by `storage::attribute`.
    #[serde(default)]
    pub in_call: bool,
    /// Submitted async (`sync` = 0): the driver reports its bytes only at completion.
    #[serde(default)]
    pub async_io: bool,
    /// The completion of an async I/O (`nvfs_io_complete`): `ret` is its bytes, `ctx` the
    /// submitting thread; `offset`, `size`, `cpuvaddr` those of the chunk it completes.
    #[serde(default)]
    pub completion: bool,
    /// A completion's file (device, inode); 0 otherwise.
    #[serde(default)]
    pub dev: u32,
    #[serde(default)]
    pub ino: u64,
}

/// A POSIX read or write on a descriptor registered with cuFile, done by a thread with no cuFile
/// call in flight: the library's worker threads doing what a call queued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerIo {
    pub ctx: Context,
    /// "tracepoint:read", "fexit:write"...
    pub source: Source,
    pub fd: i32,
    /// Bytes, or -errno.
    pub ret: i64,
    /// File position (pread/pwrite); None: the call has none (read/write at the file position).
    pub offset: Option<i64>,
    pub write: bool,
}

impl NvfsIo {
    pub fn name(&self) -> &'static str {
        match self.cmd {
            Some(cmd) => nvfs::name(cmd),
            None if self.completion => "io_complete",
            None => "direct_io",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StorageEvent {
    Opened(FileOpened),
    Closed(FileClosed),
    Gds(GdsCall),
    Nvfs(NvfsIo),
    Worker(WorkerIo),
}

pub fn from_record(rec: &StorageRecord) -> StorageEvent {
    match rec {
        StorageRecord::Open(o) => StorageEvent::Opened(FileOpened {
            ctx: context(&o.hdr),
            fd: o.fd,
            dirfd: o.dirfd,
            path: c_str(&o.path).to_string(),
            open_flags: o.open_flags,
            id: Identity { dev: o.dev, ino: o.ino, f_flags: o.f_flags, mode: o.mode },
        }),
        StorageRecord::Close(c) => StorageEvent::Closed(FileClosed {
            ctx: context(&c.hdr),
            fd: c.fd,
            id: Identity::from(&c.file),
            counters: c.file.stats,
        }),
        StorageRecord::Gds(g) => StorageEvent::Gds(gds(g)),
        StorageRecord::Nvfs(EventKind::GdsWorkerIo, n) => StorageEvent::Worker(WorkerIo {
            ctx: context(&n.hdr),
            source: source(&n.hdr),
            fd: n.fd,
            ret: n.ret,
            offset: (n.offset >= 0).then_some(n.offset),
            write: n.op == 1,
        }),
        StorageRecord::Nvfs(kind, n) => StorageEvent::Nvfs(nvfs_io(*kind, n)),
    }
}

fn gds(g: &GdsEvent) -> GdsCall {
    let a = &g.args;
    let op = GdsOp::from_u32(a.op).unwrap_or(GdsOp::Read);
    let fd = if a.fd >= 0 { Some(a.fd) } else { (a.tally.io_fd >= 0).then_some(a.tally.io_fd) };
    GdsCall {
        ctx: context(&g.hdr),
        op,
        source: source(&g.hdr),
        fd,
        handle: a.handle,
        buf: a.buf,
        length: a.length,
        file_offset: a.file_offset,
        buf_offset: a.buf_offset,
        ret: g.ret,
        tally: a.tally,
        batch: (op == GdsOp::BatchSubmit).then_some((g.batch_index, g.batch_opcode)),
        detail: GdsDetail {
            cu_err: g.cu_err,
            batch_id: a.batch_id,
            batch_count: a.batch_count,
            failed: a.failed,
            flags: a.flags,
            stream: a.stream,
            func_ip: a.func_ip,
            library: None,
            entry_ns: a.entry_ns,
            dest_gpu: None,
        },
    }
}

fn nvfs_io(kind: EventKind, n: &NvfsEvent) -> NvfsIo {
    NvfsIo {
        ctx: context(&n.hdr),
        source: source(&n.hdr),
        cmd: (kind == EventKind::NvfsIoctl).then_some(n.cmd),
        fd: (n.fd >= 0).then_some(n.fd),
        ret: n.ret,
        io_ret: n.io_ret,
        offset: n.offset,
        size: n.size,
        cpuvaddr: n.cpuvaddr,
        gpuvaddr: n.gpuvaddr,
        write: n.op == 1,
        batch: (n.batch_count > 0).then_some((n.batch_index, n.batch_count)),
        in_call: n.in_call != 0,
        async_io: n.async_io != 0,
        completion: kind == EventKind::NvfsComplete,
        dev: n.dev,
        ino: n.ino,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gdr_trace_common::{storage::GdsArgs, AttachKind, EventHeader, HookId};

    fn hdr(kind: EventKind, hook: HookId, attach: AttachKind) -> EventHeader {
        let mut h = EventHeader::zeroed();
        h.kind = kind as u32;
        h.hook = hook as u32;
        h.attach = attach as u32;
        h.pid = 7;
        h.comm[..3].copy_from_slice(b"dlr");
        h
    }

    #[test]
    fn gds_fd_comes_from_the_descriptor_or_nested_io() {
        let mut a = GdsArgs { op: GdsOp::Read as u32, fd: -1, ..GdsArgs::default() };
        a.tally.io_fd = 9;
        a.tally.posix_calls = 1;
        let ev = GdsEvent {
            hdr: hdr(EventKind::GdsCall, HookId::CuFileRead, AttachKind::Uretprobe),
            args: a,
            ret: 4096,
            ..Default::default()
        };
        let StorageEvent::Gds(g) = from_record(&StorageRecord::Gds(ev)) else { panic!() };
        assert_eq!(g.source, "uprobe:cuFileRead");
        assert_eq!(g.fd, Some(9));
        assert_eq!(g.ctx.comm, "dlr");
        assert_eq!(g.batch, None);
    }

    #[test]
    fn nvfs_names() {
        let n = NvfsEvent {
            hdr: hdr(EventKind::NvfsIoctl, HookId::SysIoctl, AttachKind::Tracepoint),
            cmd: nvfs::READ,
            fd: 5,
            io_ret: 4096,
            size: 4096,
            ..Default::default()
        };
        let StorageEvent::Nvfs(io) = from_record(&StorageRecord::Nvfs(EventKind::NvfsIoctl, n)) else {
            panic!()
        };
        assert_eq!((io.name(), io.source.to_string().as_str(), io.fd), ("READ", "tracepoint:ioctl", Some(5)));
        let StorageEvent::Nvfs(d) = from_record(&StorageRecord::Nvfs(EventKind::NvfsDirectIo, n)) else {
            panic!()
        };
        assert_eq!(d.name(), "direct_io");
        let StorageEvent::Nvfs(c) = from_record(&StorageRecord::Nvfs(EventKind::NvfsComplete, n)) else {
            panic!()
        };
        assert_eq!((c.name(), c.completion, c.cmd), ("io_complete", true, None));
    }

    #[test]
    fn worker_io_and_in_call_decode() {
        let mut n = NvfsEvent {
            hdr: hdr(EventKind::GdsWorkerIo, HookId::SysRead, AttachKind::Fexit),
            fd: 7,
            ret: 65536,
            io_ret: 65536,
            offset: -1,
            size: 65536,
            ..Default::default()
        };
        let StorageEvent::Worker(w) = from_record(&StorageRecord::Nvfs(EventKind::GdsWorkerIo, n)) else {
            panic!("a worker's POSIX I/O")
        };
        assert_eq!((w.fd, w.ret, w.offset, w.write), (7, 65536, None, false), "{w:?}");
        n.offset = 4096;
        n.op = 1;
        let StorageEvent::Worker(w) = from_record(&StorageRecord::Nvfs(EventKind::GdsWorkerIo, n)) else {
            panic!()
        };
        assert_eq!((w.offset, w.write), (Some(4096), true));
        n.hdr.kind = EventKind::NvfsIoctl as u32;
        n.cmd = nvfs::READ;
        for (flag, in_call) in [(0, false), (1, true)] {
            n.in_call = flag;
            let StorageEvent::Nvfs(io) = from_record(&StorageRecord::Nvfs(EventKind::NvfsIoctl, n)) else {
                panic!()
            };
            assert_eq!(io.in_call, in_call);
        }
    }
}
