//! Joins the records of one registration (or release) seen by several hooks into one: the
//! kernel's `ib_umem_get` / `ib_umem_get_peer` / `ib_umem_dmabuf_get*`, libibverbs' `ibv_reg_mr`
//! (possibly nested in `ibv_reg_mr_iova2`), and the GPU-path evidence recorded inside a peer
//! registration (a client's acquire, `nvidia_p2p_get_pages*`).
//!
//! All records of one call come from one thread, back to back, inner returns first. So there
//! is one open item per thread: a record that matches it joins it, anything else closes it.
//! Items close on event time, never on when records happen to be read: once a record stamped
//! [`WINDOW_NS`] after an item's newest record has been pushed (any thread), or once `tick` says
//! that time has passed with every record stamped before it already pushed (the live loop reads
//! the clock, drains the ring buffer, then ticks). `flush` closes everything. Evidence comes
//! before the registration it belongs to (it returns first) and waits for it per thread.

use std::collections::HashMap;

use crate::{
    events::{MrKind, MrRecord, Source},
    facts::PeermemMode,
    hooks::Role,
};

use joined::{push_source, Live};
pub use joined::{GpuFreed, GpuPin, Joined, PeerEvidence, Registration, Release};

/// How long, in event time, an item waits for its other sources.
pub const WINDOW_NS: u64 = 50_000_000;

#[derive(Debug, Default)]
pub struct Correlator {
    next_id: u64,
    open: HashMap<u32, Joined>,
    /// Evidence recorded inside a peer registration, waiting for it, per thread.
    evidence: HashMap<u32, Vec<MrRecord>>,
    /// dma-buf fds exported by CUDA: (pid, fd) -> GPU VA.
    exports: HashMap<(u32, i64), u64>,
    /// Live registrations by kernel and userspace handle.
    by_umem: HashMap<u64, Live>,
    by_mr: HashMap<u64, Live>,
    /// `struct ibv_mr *` -> pid, for releases reported from the kernel's record alone while
    /// `ibv_dereg_mr` had not returned within the window (unpinning a large MR outlasts it):
    /// that return, when it comes, is the same release and is not reported again.
    reported: HashMap<u64, u32>,
    /// Free-callback data -> registration.
    by_p2p_data: HashMap<u64, u64>,
    /// nvidia-peermem's mode (names the persistent client); None: unknown.
    peermem: Option<PeermemMode>,
    /// The newest record timestamp pushed: event time.
    clock: u64,
    /// Per thread: a registration reported from the kernel's record alone (late.rs).
    late: late::Late,
}

impl Correlator {
    /// A process ended: what was kept by its pid goes (its dma-buf exports).
    pub fn forget_process(&mut self, pid: u32) {
        self.exports.retain(|(p, _), _| *p != pid);
        self.reported.retain(|_, p| *p != pid);
        self.late.forget(pid);
    }

    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `rec` is the late libibverbs return of a registration already reported (late.rs):
    /// then its `struct ibv_mr *` is tied to that registration, so the release still joins.
    fn take_late(&mut self, rec: &MrRecord) -> bool {
        let Some(tie) = self.late.take(rec) else { return false };
        if let Some(live) = tie.live {
            self.by_mr.insert(rec.handle, live);
            if let Some(k) = self.by_umem.get_mut(&tie.umem) {
                k.mr = Some(rec.handle);
            }
        }
        true
    }

    /// Names peer clients by nvidia-peermem's `mode` (what the loader read from sysfs).
    pub fn with_peermem(mut self, mode: Option<PeermemMode>) -> Self {
        self.peermem = mode;
        self
    }

    pub fn push(&mut self, rec: MrRecord, out: &mut Vec<Joined>) {
        let ts = rec.ctx.ts_ns;
        self.join(rec, out);
        if ts > self.clock {
            self.clock = ts;
            self.tick(ts, out);
        }
    }

    fn join(&mut self, rec: MrRecord, out: &mut Vec<Joined>) {
        match rec.kind {
            MrKind::GpuExport => {
                if !rec.failed && rec.aux >= 0 {
                    self.exports.insert((rec.ctx.pid, rec.aux), rec.addr);
                }
                return;
            }
            MrKind::GpuEvidence if rec.aux == 1 => {
                self.evidence.entry(rec.ctx.tid).or_default().push(rec);
                return;
            }
            MrKind::GpuEvidence => {
                if rec.role() == Some(Role::GpuPinned) {
                    let ret = if rec.failed { rec.errno.map_or(-1, |e| -i64::from(e)) } else { 0 };
                    out.push(Joined::GpuPin(GpuPin {
                        ctx: rec.ctx,
                        source: rec.source,
                        gpu_va: rec.addr,
                        length: rec.length,
                        ret,
                    }));
                }
                return;
            }
            MrKind::GpuFreed => {
                let registration = self.by_p2p_data.get(&rec.handle).copied();
                // The registration comes first, even when it is still waiting for other sources.
                if let Some(id) = registration {
                    let open: Vec<u32> = self
                        .open
                        .iter()
                        .filter(|(_, j)| matches!(j, Joined::Registered(r) if r.id == id))
                        .map(|(t, _)| *t)
                        .collect();
                    out.extend(open.into_iter().filter_map(|t| self.open.remove(&t)));
                }
                out.push(Joined::GpuFreed(GpuFreed { ctx: rec.ctx, registration, source: rec.source }));
                return;
            }
            MrKind::Register | MrKind::Release => {}
        }
        let tid = rec.ctx.tid;
        if let Some(open) = self.open.get_mut(&tid) {
            if joins(open, &rec) {
                self.merge_into(tid, rec);
                return;
            }
            let done = self.open.remove(&tid).expect("present");
            self.late.note_closed(&done);
            out.push(done);
        }
        if self.take_late(&rec) {
            return;
        }
        if rec.kind == MrKind::Release && !rec.from_kernel && self.reported.remove(&rec.handle).is_some() {
            return;
        }
        let item = match rec.kind {
            MrKind::Register => {
                self.next_id += 1;
                Joined::Registered(Registration {
                    id: self.next_id,
                    ctx: rec.ctx.clone(),
                    addr: rec.addr,
                    length: rec.length,
                    iova: rec.iova,
                    access: rec.access,
                    failed: rec.failed,
                    ..Default::default()
                })
            }
            _ => Joined::Released(Release {
                ctx: rec.ctx.clone(),
                addr: rec.addr,
                length: rec.length,
                ..Default::default()
            }),
        };
        self.open.insert(tid, item);
        self.merge_into(tid, rec);
    }

    /// Closes items whose newest record is at least the window older than `now_ns`. The caller
    /// promises every record stamped before `now_ns` has been pushed (live: the clock is read
    /// before the ring buffer is drained; replay: the recorded ticks are such readings).
    pub fn tick(&mut self, now_ns: u64, out: &mut Vec<Joined>) {
        let old: Vec<u32> = self
            .open
            .iter()
            .filter(|(_, j)| now_ns.saturating_sub(ts(j)) >= WINDOW_NS)
            .map(|(tid, _)| *tid)
            .collect();
        let mut items: Vec<Joined> = old.into_iter().filter_map(|t| self.open.remove(&t)).collect();
        items.sort_by_key(ts);
        for j in &items {
            self.late.note_closed(j);
        }
        out.extend(items);
        // Evidence whose registration never came (the registration hook is missing) is dropped.
        self.evidence.retain(|_, v| v.last().is_some_and(|r| now_ns.saturating_sub(r.ctx.ts_ns) < WINDOW_NS));
    }

    pub fn flush(&mut self, out: &mut Vec<Joined>) {
        self.tick(u64::MAX, out);
    }

    fn merge_into(&mut self, tid: u32, rec: MrRecord) {
        let Some(item) = self.open.get_mut(&tid) else { return };
        match item {
            Joined::Registered(r) => {
                push_source(&mut r.sources, rec.source);
                if !rec.from_kernel && !rec.failed && rec.lkey != 0 {
                    (r.lkey, r.dev) = (Some(rec.lkey), rec.dev);
                }
                // The kernel's name for the device wins over one read from the caller's memory.
                if rec.from_kernel && rec.device.is_some() {
                    r.device.clone_from(&rec.device);
                    r.device_from_kernel = true;
                } else if r.device.is_none() {
                    r.device.clone_from(&rec.device);
                }
                if rec.role() == Some(Role::DmabufRegister) {
                    r.dmabuf_fd = Some(rec.aux);
                    if rec.label.is_some() {
                        r.exporter.clone_from(&rec.label);
                    }
                    if let Some(va) = self.exports.get(&(rec.ctx.pid, rec.aux)) {
                        r.gpu_va = Some(*va);
                    }
                }
                if rec.from_kernel {
                    // The kernel's view of the call wins: its errno, its evidence, its verb.
                    if !rec.purpose.is_none() {
                        r.purpose = rec.purpose;
                    }
                    r.failed = rec.failed;
                    r.errno = rec.errno;
                    if rec.role() == Some(Role::PeerRegister) {
                        let ev = self.evidence.remove(&tid).unwrap_or_default();
                        peer::apply_evidence(r, ev, self.peermem);
                    }
                    if !rec.failed {
                        r.kernel_pinned = true;
                        r.umem = Some(rec.handle);
                        let live = Live::of(r);
                        self.by_umem.insert(rec.handle, live);
                        for d in &r.peer.p2p_data {
                            self.by_p2p_data.insert(*d, r.id);
                        }
                    }
                } else {
                    r.iova = rec.iova;
                    if !rec.failed {
                        r.mr = Some(rec.handle);
                        let live = Live::of(r);
                        self.by_mr.insert(rec.handle, live);
                        if let Some(k) = r.umem.and_then(|u| self.by_umem.get_mut(&u)) {
                            k.mr = Some(rec.handle);
                        }
                    } else if r.sources.len() == 1 {
                        r.failed = true;
                    }
                }
            }
            Joined::Released(r) => {
                push_source(&mut r.sources, rec.source);
                if r.device.is_none() {
                    r.device.clone_from(&rec.device);
                }
                let table = if rec.from_kernel { &mut self.by_umem } else { &mut self.by_mr };
                if let Some(live) = table.remove(&rec.handle) {
                    if let Some(mr) = live.mr.filter(|_| rec.from_kernel) {
                        // Reported now, whether or not libibverbs' return joins in time.
                        self.by_mr.remove(&mr);
                        self.reported.insert(mr, rec.ctx.pid);
                    }
                    r.registration = Some(live.id);
                    r.addr = live.addr;
                    r.length = live.length;
                    if r.device.is_none() {
                        r.device = live.device;
                    }
                    self.by_p2p_data.retain(|_, id| *id != live.id);
                }
                if rec.from_kernel {
                    r.umem = Some(rec.handle);
                    r.purpose = rec.purpose;
                } else {
                    self.reported.remove(&rec.handle);
                    r.mr = Some(rec.handle);
                    r.lkey = (rec.lkey != 0).then_some(rec.lkey);
                    r.dev = rec.dev;
                    r.wr_bytes = rec.wr_bytes;
                }
            }
            Joined::GpuPin(_) | Joined::GpuFreed(_) => {}
        }
    }
}

fn ts(j: &Joined) -> u64 {
    match j {
        Joined::Registered(r) => r.ctx.ts_ns,
        Joined::Released(r) => r.ctx.ts_ns,
        Joined::GpuPin(p) => p.ctx.ts_ns,
        Joined::GpuFreed(f) => f.ctx.ts_ns,
    }
}

/// Whether a record is another view of the open item.
fn joins(open: &Joined, rec: &MrRecord) -> bool {
    // A hook that already spoke for the item starts a new item; so does a second kernel record,
    // unless it is the same umem (ib_umem_dmabuf_get nested in ib_umem_dmabuf_get_pinned).
    let seen = |sources: &[Source], nested: bool| {
        sources.contains(&rec.source)
            || (rec.from_kernel && sources.iter().any(Source::from_kernel) && !nested)
    };
    match (open, rec.kind) {
        (Joined::Registered(r), MrKind::Register) => {
            // Pin hooks nest (ib_umem_dmabuf_get_pinned calls ib_umem_dmabuf_get; 7.2's
            // ib_umem_get_attr_or_va calls ib_umem_get_desc, which calls the dma-buf getter): the
            // same umem, or the same failure of the same dma-buf fd.
            let same_umem = rec.from_kernel && rec.handle != 0 && r.umem == Some(rec.handle);
            let same_failure = rec.role() == Some(Role::DmabufRegister)
                && rec.failed
                && r.failed
                && r.dmabuf_fd == Some(rec.aux)
                && r.errno == rec.errno;
            let nested = same_umem || same_failure;
            // An outer hook that takes no address (7.2's descriptor getter) reads it from the umem:
            // the same pin, by its umem, whatever its arguments said.
            (same_umem || (r.addr == rec.addr && r.length == rec.length)) && !seen(&r.sources, nested)
        }
        (Joined::Released(r), MrKind::Release) => {
            !seen(&r.sources, false) && (r.length == rec.length || rec.length == 0 || r.length == 0)
        }
        _ => false,
    }
}

mod joined;
mod late;
mod peer;
#[cfg(test)]
mod peer_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod verbs_tests;
