//! What the storage analysis knows, per process and file, folded from records (opens, closes,
//! cuFile and nvidia-fs calls) and from snapshots of the kernel's counter maps. Pure: no BPF,
//! no /proc (the live layer, `trace::storage_live`, hands in what it read).

use std::collections::{BTreeMap, HashMap};

use gdr_trace_common::storage::{GdsOp, UringLoose};

pub use super::file::FileState;
pub use super::snapshot::{SnapFile, SnapFill, Snapshot};
use super::{
    attribute::{Held, Loose, Worker, WorkerShare},
    classify::{classify_gds, StorageVerdict},
    folded::{FillKey, Folded},
};
use crate::events::{
    cufile_ops,
    storage::{GdsCall, Identity, NvfsIo, StorageEvent},
};

/// A file as a process used it: by inode when the kernel could read it, else by descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileRef {
    Inode { dev: u32, ino: u64 },
    Fd(u32),
}

impl FileRef {
    pub fn of(id: &Identity, fd: u32) -> Self {
        if id.is_known() {
            Self::Inode { dev: id.dev, ino: id.ino }
        } else {
            Self::Fd(fd)
        }
    }
}

/// cuFile calls of one process.
#[derive(Debug, Clone, Default)]
pub struct GdsState {
    pub driver_opens: u64,
    pub calls: u64,
    /// Data-moving calls by verdict: (calls, bytes).
    pub by_verdict: BTreeMap<StorageVerdict, (u64, u64)>,
    /// Data-moving calls whose I/O was not seen (neither on their thread nor attributed).
    pub unclassified: u64,
    /// nvidia-fs ioctls (READ/WRITE/BATCH entries/MAP) and direct-I/O bytes seen.
    pub nvfs_ios: u64,
    pub dma_bytes: u64,
    /// CUfileHandle_t -> fd, from cuFileHandleRegister.
    pub handles: HashMap<u64, i32>,
    /// Files cuFile fell back to POSIX on through a descriptor without O_DIRECT.
    pub compat_not_direct: std::collections::BTreeSet<String>,
    /// The library's worker-thread I/O, waiting for (or held with) the calls that queued it.
    pub worker: Worker,
}

#[derive(Debug, Clone, Default)]
pub struct ProcState {
    pub comm: String,
    /// Boxed: a map node holds eleven values, and most processes use one or two files (a
    /// short process with one file held a 5.7 KiB node of inline `FileState`s).
    pub files: BTreeMap<FileRef, Box<FileState>>,
    /// Open descriptors -> files.
    pub fds: HashMap<u32, FileRef>,
    /// Open descriptors -> `f_flags` (O_DIRECT or not), as the kernel read them.
    pub fd_flags: HashMap<u32, u32>,
    pub gds: GdsState,
    /// io_uring reads and writes on registered files, as of the last snapshot.
    pub uring_loose: UringLoose,
    pub exited: bool,
    /// Closed files past the bound, summed (`fold`).
    pub folded: Folded,
    /// What /proc said about its cuFile configuration and mounts (`gds_report`), once.
    pub gds_facts: Option<Box<super::gds_facts::ProcGdsFacts>>,
}

impl ProcState {
    /// A call whose I/O is all seen (or that moves none): classified and counted.
    fn finish(&mut self, h: Held) -> GdsIo {
        let Held { call, fd, worker } = h;
        let file = fd.and_then(|fd| self.fds.get(&(fd as u32))).and_then(|r| self.files.get(r));
        let (path, dev) = (file.and_then(|f| f.path.clone()), file.map(|f| f.id.dev));
        let o_direct = fd.and_then(|fd| self.fd_flags.get(&(fd as u32))).map(|fl| is_direct(*fl));
        // One source of truth: the verdict is the call's `gds_mode` (None: no I/O seen).
        let seen = classify_gds(&call);
        let mode = super::gds_report::call_mode(&call, seen, o_direct, dev, self.gds_facts.as_deref());
        let verdict = mode.mode.map(StorageVerdict::of_mode);
        if cufile_ops::moves_data(call.op) {
            let bytes = gds_bytes(&call);
            match verdict {
                Some(v) => {
                    let e = self.gds.by_verdict.entry(v).or_default();
                    e.0 += 1;
                    e.1 += bytes;
                    if let Some(f) =
                        fd.and_then(|fd| self.fds.get(&(fd as u32))).and_then(|r| self.files.get_mut(r))
                    {
                        *f.gds_bytes.entry(v).or_default() += bytes;
                    }
                }
                None => self.gds.unclassified += 1,
            }
        }
        if seen == Some(StorageVerdict::GdsCompat) && o_direct == Some(false) {
            let name = path.clone().unwrap_or_else(|| format!("fd {}", fd.unwrap_or(-1)));
            self.gds.compat_not_direct.insert(name);
        }
        GdsIo { call, fd, path, verdict, worker, mode }
    }
}

/// A cuFile call, classified, with its file: what sinks get.
#[derive(Debug, Clone, PartialEq)]
pub struct GdsIo {
    pub call: GdsCall,
    pub fd: Option<i32>,
    pub path: Option<String>,
    pub verdict: Option<StorageVerdict>,
    /// What the library's worker threads did for this call (included in `call.tally`).
    pub worker: WorkerShare,
    /// Its `gds_mode` and `compat_reason` (`gds_report::call_mode`).
    pub mode: super::gds_report::CallMode,
}

#[derive(Debug, Default)]
pub struct StorageState {
    pub procs: BTreeMap<u32, ProcState>,
    /// cuFile calls classified and not yet handed out (`take_done`).
    done: Vec<GdsIo>,
    /// Fill entries of folded files in the kernel map, with the counts already added (`fold`).
    pub(super) folded_fills: HashMap<FillKey, (u64, u64)>,
}

fn is_direct(f_flags: u32) -> bool {
    f_flags & super::classify::O_DIRECT != 0
}

/// Bytes a data-moving cuFile call moved.
pub fn gds_bytes(c: &GdsCall) -> u64 {
    match c.op {
        GdsOp::Read | GdsOp::Write => c.ret.max(0) as u64,
        GdsOp::ReadAsync | GdsOp::WriteAsync | GdsOp::BatchSubmit if c.ret == 0 => c.length,
        _ => 0,
    }
}

impl StorageState {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    fn proc(&mut self, pid: u32, comm: &str) -> &mut ProcState {
        let p = self.procs.entry(pid).or_default();
        if !comm.is_empty() {
            p.comm = comm.to_string();
        }
        p
    }

    /// Whether a path is known for this inode (the live layer asks before searching /proc).
    pub fn knows_path(&self, pid: u32, dev: u32, ino: u64) -> bool {
        self.procs
            .get(&pid)
            .and_then(|p| p.files.get(&FileRef::Inode { dev, ino }))
            .is_some_and(|f| f.path.is_some())
    }

    /// Folds one record in; returns the cuFile calls classified by it (a call queued to the
    /// library's worker threads is returned once its I/O is seen: `attribute`).
    pub fn record(&mut self, ev: StorageEvent) -> Vec<GdsIo> {
        match ev {
            StorageEvent::Gds(call) => self.gds(call),
            StorageEvent::Nvfs(io) => {
                self.nvfs(&io);
                if io.cmd == Some(gdr_trace_common::storage::nvfs::MAP) && io.ret == 0 {
                    self.proc(io.ctx.pid, "").gds.worker.mapped(io.cpuvaddr, io.gpuvaddr, io.size);
                }
                if let Some(l) = Loose::of_nvfs(&io) {
                    self.loose(io.ctx.pid, l);
                }
            }
            StorageEvent::Worker(w) => self.loose(w.ctx.pid, Loose::of_posix(&w)),
            ev => self.file(ev),
        }
        self.take_done()
    }

    /// cuFile calls classified since the last take (also by `snapshot` and `process_gone`).
    pub fn take_done(&mut self) -> Vec<GdsIo> {
        std::mem::take(&mut self.done)
    }

    /// Every held call, as it stands (the trace is over).
    pub fn release_all(&mut self) {
        for p in self.procs.values_mut() {
            for h in p.gds.worker.release_all() {
                self.done.push(p.finish(h));
            }
        }
    }

    fn loose(&mut self, pid: u32, l: Loose) {
        let p = self.proc(pid, "");
        let io = p.gds.worker.io(l).map(|h| p.finish(h));
        self.done.extend(io);
    }

    fn file(&mut self, ev: StorageEvent) {
        match ev {
            StorageEvent::Opened(o) => {
                let fref = FileRef::of(&o.id, o.fd as u32);
                let p = self.proc(o.ctx.pid, &o.ctx.comm);
                p.fds.insert(o.fd as u32, fref);
                p.fd_flags.insert(o.fd as u32, o.id.f_flags);
                let f = p.files.entry(fref).or_default();
                f.id = o.id;
                if !o.path.is_empty() {
                    f.path = Some(o.path);
                }
            }
            StorageEvent::Closed(c) => {
                let p = self.proc(c.ctx.pid, &c.ctx.comm);
                let fd = c.fd as u32;
                // The kernel's identity wins: the open record of this number may be stale (a
                // descriptor closed without I/O sends no close record, and its number can come
                // back from a call we don't hook).
                let opened = p.fds.remove(&fd);
                let fref =
                    if c.id.is_known() { FileRef::of(&c.id, fd) } else { opened.unwrap_or(FileRef::Fd(fd)) };
                p.fd_flags.remove(&fd);
                let f = p.files.entry(fref).or_default();
                f.closed.add(&c.counters);
                if is_direct(c.id.f_flags) {
                    f.closed_direct.add(&c.counters);
                }
                f.live.remove(&fd);
                if !f.id.is_known() {
                    f.id = c.id;
                }
                self.fold(c.ctx.pid);
            }
            _ => {}
        }
    }

    fn gds(&mut self, call: GdsCall) {
        let p = self.proc(call.ctx.pid, &call.ctx.comm);
        p.gds.calls += 1;
        let shape = cufile_ops::shape(call.op);
        // Only calls on a CUfileHandle_t have a descriptor (nested I/O of a driver open is the
        // library's own: its configuration, its log).
        let mut fd = if shape.file { call.fd } else { None };
        match call.op {
            GdsOp::DriverOpen => p.gds.driver_opens += 1,
            GdsOp::HandleRegister => {
                if let Some(fd) = call.fd.filter(|_| call.ret == 0) {
                    p.gds.handles.insert(call.handle, fd);
                }
            }
            GdsOp::HandleDeregister => fd = p.gds.handles.get(&call.handle).copied(),
            _ if shape.file => fd = fd.or_else(|| p.gds.handles.get(&call.handle).copied()),
            _ => {}
        }
        // Held calls this one ends are reported first (their I/O was all before it).
        let mut out: Vec<GdsIo> = p.gds.worker.ended_by(&call).into_iter().map(|h| p.finish(h)).collect();
        match call.op {
            GdsOp::HandleDeregister => _ = p.gds.handles.remove(&call.handle),
            GdsOp::BufDeregister => p.gds.worker.unmapped(call.buf),
            _ => {}
        }
        out.extend(p.gds.worker.arrived(call, fd).map(|h| p.finish(h)));
        self.done.extend(out);
    }

    fn nvfs(&mut self, io: &NvfsIo) {
        let p = self.proc(io.ctx.pid, &io.ctx.comm);
        if io.cmd.is_none() {
            p.gds.dma_bytes += io.ret.max(0) as u64;
            // An async I/O's bytes, which its ioctl could not report: to its file, by inode.
            if io.completion && io.ino != 0 {
                if let Some(f) = p.files.get_mut(&FileRef::Inode { dev: io.dev, ino: io.ino }) {
                    f.nvfs_bytes += io.ret.max(0) as u64;
                }
            }
            return;
        }
        p.gds.nvfs_ios += 1;
        // An async request's bytes come with its completion, also when the filesystem finished it
        // inline and the ioctl returned them too (counted once).
        if io.async_io {
            return;
        }
        if let Some(f) = io.fd.and_then(|fd| p.fds.get(&(fd as u32))).and_then(|r| p.files.get_mut(r)) {
            f.nvfs_bytes += io.io_ret.max(0) as u64;
        }
    }

    /// The path of an open descriptor, if known (for nvfs_io output).
    pub fn fd_path(&self, pid: u32, fd: i32) -> Option<String> {
        let p = self.procs.get(&pid)?;
        p.files.get(p.fds.get(&(fd as u32))?)?.path.clone()
    }

    /// Replaces the open descriptors' counters and the page-fill counts with the kernel's.
    pub fn snapshot(&mut self, snap: Snapshot) {
        for p in self.procs.values_mut() {
            for f in p.files.values_mut() {
                f.live.clear();
            }
        }
        for s in snap.files {
            let id = Identity::from(&s.io);
            let fref = FileRef::of(&id, s.fd);
            let comm = snap.comms.get(&s.pid).cloned().unwrap_or_default();
            let p = self.proc(s.pid, &comm);
            // The kernel's identity wins over a stale open record (fd reused unseen).
            p.fds.insert(s.fd, fref);
            p.fd_flags.insert(s.fd, s.io.f_flags);
            let f = p.files.entry(fref).or_default();
            f.live.insert(s.fd, (s.io.stats, is_direct(s.io.f_flags)));
            if id.is_known() || !f.id.is_known() {
                f.id = id;
            }
            if f.path.is_none() {
                f.path = s.path;
            }
        }
        for (pid, loose) in snap.uring_loose {
            let comm = snap.comms.get(&pid).cloned().unwrap_or_default();
            self.proc(pid, &comm).uring_loose = loose;
        }
        self.folded_growth(&snap.folded_growth);
        for (pid, facts) in snap.gds_facts {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.gds_facts = Some(Box::new(facts));
            }
        }
        let fills: std::collections::HashSet<FillKey> =
            snap.fills.iter().map(|f| (f.pid, f.dev, f.ino)).collect();
        for fill in snap.fills {
            if self.folded_fill(&fill) {
                continue;
            }
            let comm = snap.comms.get(&fill.pid).cloned().unwrap_or_default();
            let f = self
                .proc(fill.pid, &comm)
                .files
                .entry(FileRef::Inode { dev: fill.dev, ino: fill.ino })
                .or_default();
            f.pages_filled = fill.pages;
            f.read_pages_filled = fill.read_pages;
            if f.id.ino == 0 {
                f.id.dev = fill.dev;
                f.id.ino = fill.ino;
            }
            if f.path.is_none() {
                f.path = fill.path;
            }
        }
        for pid in snap.gone {
            self.process_gone(pid);
        }
        self.prune_folded_fills(&fills);
        let pids: Vec<u32> = self.procs.keys().copied().collect();
        for pid in pids {
            self.fold(pid);
        }
    }

    /// A process is gone: its open descriptors' last counters become final (the live layer then
    /// drops its kernel entries).
    pub fn process_gone(&mut self, pid: u32) {
        let Some(p) = self.procs.get_mut(&pid) else { return };
        for h in p.gds.worker.release_all() {
            let io = p.finish(h);
            self.done.push(io);
        }
        p.exited = true;
        p.fds.clear();
        p.fd_flags.clear();
        for f in p.files.values_mut() {
            let live = std::mem::take(&mut f.live);
            for (c, direct) in live.values() {
                f.closed.add(c);
                if *direct {
                    f.closed_direct.add(c);
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
