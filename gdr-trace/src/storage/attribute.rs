//! cuFile I/O done off the calling thread. NVIDIA's libcufile hands stream-ordered calls
//! (`cuFileReadAsync`/`WriteAsync`), batch entries and large reads and writes to its own worker
//! threads: the kernel sees their nvidia-fs ioctls and POSIX I/O on another thread, often after
//! the call returned. The kernel side counts what a thread does inside its own cuFile call (the
//! call's tally); what a thread with no call in flight does on a cuFile descriptor comes here as
//! loose I/O, and is attributed to the call that queued it: same process, same descriptor (the
//! call's `CUfileHandle_t`), same direction, inside the call's file range, for nvidia-fs the
//! same GPU buffer (the ioctl names the shadow buffer `cuFileBufRegister` mapped for it with
//! NVFS_IOCTL_MAP), not before the call
//! started and, for a call that waits for it (`cuFileRead`/`Write`), not after it returned; each
//! call takes no more than the bytes it asked for (what its own thread did counts first).
//!
//! A queued call (async, batch entry) is held until its bytes are all accounted for, or until a
//! call that ends it (its handle, stream or batch released, the driver closed, the process gone,
//! the trace over): its verdict then says which way its bytes went. Pure: no BPF, no /proc.

use std::collections::{BTreeSet, HashMap, VecDeque};

use gdr_trace_common::storage::{nvfs, GdsOp};

use crate::events::storage::{GdsCall, NvfsIo, WorkerIo};

/// Loose I/O kept per process for a call whose record comes later; the oldest goes first.
const LOOSE_MAX: usize = 4096;
/// Queued calls held per process; past this the oldest is released as it is.
const HELD_MAX: usize = 4096;
/// nvidia-fs buffer mappings kept per process (one per registered GPU buffer).
const SHADOWS_MAX: usize = 4096;

/// One read or write of a worker thread on a cuFile descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loose {
    pub tid: u32,
    pub ts_ns: u64,
    pub fd: i32,
    /// File position; None when the I/O had none (read/write at the file position).
    pub offset: Option<i64>,
    /// Bytes done (nvidia-fs `ioctl_return`, or the system call's result).
    pub bytes: u64,
    pub write: bool,
    /// Through nvidia-fs (an ioctl) rather than POSIX.
    pub nvfs: bool,
    /// nvidia-fs: the shadow buffer the ioctl names (`cpuvaddr`); 0 for POSIX.
    pub shadow: u64,
    /// An async nvidia-fs I/O's completion: its bytes, not another call (its ioctl is counted
    /// apart). Its `fd` is -1: the completion knows the file, not the descriptor.
    pub completion: bool,
}

impl Loose {
    /// An nvidia-fs READ/WRITE/BATCH_IO entry that no call on its thread counted, or an async
    /// I/O's completion (the bytes of an entry whose ioctl said none).
    pub fn of_nvfs(io: &NvfsIo) -> Option<Self> {
        let data = matches!(io.cmd, Some(nvfs::READ | nvfs::WRITE | nvfs::BATCH_IO));
        ((data || io.completion) && !io.in_call).then_some(())?;
        Some(Self {
            tid: io.ctx.tid,
            ts_ns: io.ctx.ts_ns,
            fd: if io.completion { -1 } else { io.fd? },
            offset: Some(io.offset),
            // An async ioctl's bytes are its completion's (even when it returned them too).
            bytes: match (io.completion, io.async_io) {
                (true, _) => io.ret.max(0) as u64,
                (false, true) => 0,
                (false, false) => io.io_ret.max(0) as u64,
            },
            write: io.write,
            nvfs: true,
            shadow: io.cpuvaddr,
            completion: io.completion,
        })
    }

    pub fn of_posix(io: &WorkerIo) -> Self {
        Self {
            tid: io.ctx.tid,
            ts_ns: io.ctx.ts_ns,
            fd: io.fd,
            offset: io.offset,
            bytes: io.ret.max(0) as u64,
            write: io.write,
            nvfs: false,
            shadow: 0,
            completion: false,
        }
    }
}

/// What a call's worker threads did for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerShare {
    pub calls: u32,
    pub bytes: u64,
    /// The threads that did it (never the calling thread: its I/O is in the call's tally).
    pub tids: BTreeSet<u32>,
}

/// A data-moving call with its descriptor and what worker threads did for it.
#[derive(Debug, Clone)]
pub struct Held {
    pub call: GdsCall,
    pub fd: Option<i32>,
    pub worker: WorkerShare,
}

/// Per process: queued calls not yet complete, and loose I/O not yet attributed.
#[derive(Debug, Default, Clone)]
pub struct Worker {
    held: Vec<Held>,
    loose: VecDeque<Loose>,
    /// Loose I/O that no call took: (I/Os, bytes).
    pub unattributed: (u64, u64),
    /// nvidia-fs shadow buffer -> the GPU buffer it stands for (base, length), from MAP.
    shadows: HashMap<u64, (u64, u64)>,
}

fn takes_worker_io(op: GdsOp) -> bool {
    matches!(op, GdsOp::Read | GdsOp::Write | GdsOp::ReadAsync | GdsOp::WriteAsync | GdsOp::BatchSubmit)
}

/// Returns before its I/O is done: held until it is.
pub fn is_queued(op: GdsOp) -> bool {
    matches!(op, GdsOp::ReadAsync | GdsOp::WriteAsync | GdsOp::BatchSubmit)
}

fn writes(c: &GdsCall) -> bool {
    match c.op {
        GdsOp::Write | GdsOp::WriteAsync => true,
        GdsOp::BatchSubmit => c.batch.is_some_and(|(_, opcode)| opcode == 1),
        _ => false,
    }
}

/// Bytes the call has been seen to move so far.
fn accounted(c: &GdsCall) -> u64 {
    c.tally.nvfs_bytes + c.tally.posix_bytes
}

impl Held {
    /// All its bytes seen, and for nvidia-fs bytes the ioctl that asked for them too (an async
    /// entry's completion can come before its BATCH_IO ioctl has returned).
    fn complete(&self) -> bool {
        let t = &self.call.tally;
        accounted(&self.call) >= self.call.length && (t.nvfs_bytes == 0 || t.nvfs_calls > 0)
    }

    /// Whether `l` is this call's I/O (`gpu`: the GPU buffer `l` names, when known; `until`: the
    /// call's return, for a call that waited).
    fn owns(&self, l: &Loose, gpu: Option<(u64, u64)>, until: Option<u64>) -> bool {
        let c = &self.call;
        let end = c.file_offset.saturating_add(c.length as i64);
        (l.fd < 0 || self.fd == Some(l.fd))
            && gpu.is_none_or(|(base, len)| c.buf >= base && c.buf < base.saturating_add(len))
            && writes(c) == l.write
            && !self.complete()
            && l.ts_ns >= c.detail.entry_ns
            && until.is_none_or(|u| l.ts_ns <= u)
            && l.offset.is_none_or(|o| o >= c.file_offset && o < end)
    }

    fn credit(&mut self, l: &Loose) {
        let t = &mut self.call.tally;
        if l.nvfs {
            t.nvfs_calls += u32::from(!l.completion);
            t.nvfs_bytes += l.bytes;
        } else {
            t.posix_calls += 1;
            t.posix_bytes += l.bytes;
        }
        self.worker.calls += u32::from(!l.completion);
        self.worker.bytes += l.bytes;
        self.worker.tids.insert(l.tid);
    }
}

impl Worker {
    /// A data-moving call returned: it takes the loose I/O that is its. Returned when complete
    /// or not queued; else held (a call it displaces past the bound is returned instead).
    pub fn arrived(&mut self, call: GdsCall, fd: Option<i32>) -> Option<Held> {
        let mut h = Held { call, fd, worker: WorkerShare::default() };
        if !takes_worker_io(h.call.op) {
            return Some(h);
        }
        let queued = is_queued(h.call.op) && h.call.ret == 0;
        let until = (!queued).then_some(h.call.ctx.ts_ns);
        let mut i = 0;
        while i < self.loose.len() && !h.complete() {
            if h.owns(&self.loose[i], self.gpu(&self.loose[i]), until) {
                let l = self.loose.remove(i).expect("in range");
                h.credit(&l);
            } else {
                i += 1;
            }
        }
        if !queued || h.complete() {
            return Some(h);
        }
        self.held.push(h);
        (self.held.len() > HELD_MAX).then(|| self.held.remove(0))
    }

    /// Loose I/O: credited to the oldest held call it belongs to (returned if that completes
    /// it), else kept for a call whose record is still to come.
    pub fn io(&mut self, l: Loose) -> Option<Held> {
        let gpu = self.gpu(&l);
        if let Some(i) = self.held.iter().position(|h| h.owns(&l, gpu, None)) {
            self.held[i].credit(&l);
            return self.held[i].complete().then(|| self.held.remove(i));
        }
        self.loose.push_back(l);
        if self.loose.len() > LOOSE_MAX {
            if let Some(old) = self.loose.pop_front() {
                self.unattributed.0 += 1;
                self.unattributed.1 += old.bytes;
            }
        }
        None
    }

    /// The GPU buffer an nvidia-fs I/O names through its shadow buffer, when MAP was seen.
    fn gpu(&self, l: &Loose) -> Option<(u64, u64)> {
        (l.shadow != 0).then(|| self.shadows.get(&l.shadow).copied()).flatten()
    }

    /// A successful NVFS_IOCTL_MAP (`cuFileBufRegister`): `shadow` stands for [gpu, gpu + len).
    pub fn mapped(&mut self, shadow: u64, gpu: u64, len: u64) {
        if shadow != 0 && (self.shadows.len() < SHADOWS_MAX || self.shadows.contains_key(&shadow)) {
            self.shadows.insert(shadow, (gpu, len));
        }
    }

    /// `cuFileBufDeregister(gpu)`: its shadow buffer may be reused for another.
    pub fn unmapped(&mut self, gpu: u64) {
        self.shadows.retain(|_, (base, _)| *base != gpu);
    }

    /// Held calls that `call` ends: its handle, stream or batch released, or the driver closed.
    pub fn ended_by(&mut self, call: &GdsCall) -> Vec<Held> {
        let ends = |h: &Held| match call.op {
            GdsOp::HandleDeregister => h.call.handle == call.handle,
            GdsOp::StreamDeregister => {
                h.call.op != GdsOp::BatchSubmit && h.call.detail.stream == call.detail.stream
            }
            GdsOp::BatchCancel | GdsOp::BatchDestroy => {
                h.call.op == GdsOp::BatchSubmit && h.call.detail.batch_id == call.detail.batch_id
            }
            GdsOp::DriverClose | GdsOp::DriverCloseV2 => true,
            _ => false,
        };
        let (out, keep): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.held).into_iter().partition(ends);
        self.held = keep;
        out
    }

    /// Every held call (the process is gone, or the trace is over); what no call took is counted.
    pub fn release_all(&mut self) -> Vec<Held> {
        for l in self.loose.drain(..) {
            self.unattributed.0 += 1;
            self.unattributed.1 += l.bytes;
        }
        std::mem::take(&mut self.held)
    }

    pub fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests;
