//! The analysis line, pure (no BPF, no I/O): records -> correlate -> classify -> aggregate ->
//! sink. Live tracing and replay drive the same `Pipeline`.

use crate::{
    counters::Counters,
    events::{cuda::CudaCall, Event, MrRecord},
    mr::aggregate::Aggregator,
    mr::classify::classify,
    mr::correlate::{Correlator, Joined},
    p2p::P2pState,
    queues::{pin_use, PinUse, QueuePin},
    sink::{Lost, Output, Sink},
    storage::{aggregate::report as storage_report, archive::Archive, state::StorageState},
};

/// How long after its exit a process's registration-side state stays: the exit itself releases
/// its memory registrations, and those records come in after the exit's.
pub const EXIT_LINGER_NS: u64 = 1_000_000_000;

/// Tells whether a process uses a GPU (live: /proc; replay: what was recorded).
pub type GpuUseProbe = Box<dyn FnMut(u32) -> Option<bool>>;

/// Reads a process's mappings of nvidia.ko's control node (live: /proc/PID/maps; None: gone).
pub type HostMapsProbe = Box<dyn FnMut(u32) -> Option<Vec<(u64, u64)>>>;

#[derive(Default)]
pub struct Pipeline {
    corr: Correlator,
    agg: Aggregator,
    out: Vec<Joined>,
    gpu_use: Option<GpuUseProbe>,
    host_maps: Option<HostMapsProbe>,
    /// Pids probed at their first record, and what was learned.
    gpu_use_seen: std::collections::HashSet<u32>,
    gpu_use_known: std::collections::HashMap<u32, bool>,
    storage: StorageState,
    storage_archive: Archive,
    p2p: P2pState,
    /// Processes that exited, by exit time, until all they left is dropped (registration side
    /// after [`EXIT_LINGER_NS`], storage after the next summary tick reported them final).
    exits: std::collections::BTreeMap<u32, Exit>,
    /// Page fills of folded files taken out of the kernel map, per pid, until the next snapshot.
    fill_growth: std::collections::BTreeMap<u32, (u64, u64)>,
    /// Bytes moved by work requests, per MR and process.
    bytes: crate::mr::bytes::Ledger,
    /// Queue memory (the pins that are not registrations) and GPU-initiated networking.
    queues: crate::queues::Queues,
}

#[derive(Debug, Clone, Copy)]
struct Exit {
    ts_ns: u64,
    registrations_done: bool,
    /// Its files' page-fill entries were asked for (`exited_fill_keys`).
    fills_asked: bool,
}

impl Pipeline {
    pub fn new() -> Self {
        Self::default()
    }

    /// Names peer clients by nvidia-peermem's mode (what the loader read; recorded in the header).
    pub fn with_peermem(mut self, mode: Option<crate::facts::PeermemMode>) -> Self {
        self.corr = std::mem::take(&mut self.corr).with_peermem(mode);
        self
    }

    /// Says whether I/O memory mapped into the GPU is seen (libcuda hooked): GPU-initiated
    /// networking's doorbell evidence.
    pub fn with_io_mapping_visible(mut self, visible: bool) -> Self {
        self.queues = crate::queues::Queues::new(visible);
        self
    }

    /// Keeps registrations no kernel hook saw apart, as claims (see [`crate::untold::claims_apart`]).
    pub fn with_claims_apart(mut self, apart: bool) -> Self {
        self.agg = std::mem::take(&mut self.agg).with_claims_apart(apart);
        self
    }

    /// Learns GPU use of each process through `probe` (when first seen, and before summaries).
    pub fn with_gpu_use(mut self, probe: GpuUseProbe) -> Self {
        self.gpu_use = Some(probe);
        self
    }

    /// Learns where host MRs' memory came from through `probe` as well as from the CUDA calls
    /// seen: at a process's first record (memory it allocated before the trace) and again at
    /// each host registration whose memory no call explains.
    pub fn with_host_maps(mut self, probe: HostMapsProbe) -> Self {
        self.host_maps = Some(probe);
        self
    }

    fn learn_host_maps(&mut self, pid: u32) {
        learn_host_maps(&mut self.host_maps, &mut self.p2p, pid);
    }

    /// Refreshes GPU use of processes not yet known to use one, and each process's bytes moved
    /// (call before a summary).
    pub fn refresh_gpu_use(&mut self) {
        self.agg.set_bytes(&self.bytes);
        let Some(probe) = self.gpu_use.as_mut() else { return };
        for pid in self.agg.gpu_use_unknown() {
            if let Some(uses) = probe(pid) {
                self.gpu_use_known.insert(pid, uses);
            }
            if let Some(uses) = self.gpu_use_known.get(&pid) {
                self.agg.set_uses_gpu(pid, *uses);
            }
        }
    }

    /// One decoded event, of any family.
    pub fn push(&mut self, ev: Event, sink: &mut dyn Sink) {
        match ev {
            Event::Mr(rec) => self.record(rec, sink),
            Event::Storage(s) => self.storage(s, sink),
            Event::Cuda(c) => self.cuda(&c, sink),
            Event::Exit(ctx) => {
                let e = Exit { ts_ns: ctx.ts_ns, registrations_done: false, fills_asked: false };
                self.exits.insert(ctx.pid, e);
            }
            // The trace loop's business (which library copies to hook), not analysis.
            Event::LibraryMapped(_) => {}
        }
    }

    /// Drops the registration side of processes that exited over [`EXIT_LINGER_NS`] ago, and
    /// tells the sinks of those with nothing left anywhere.
    fn prune_exits(&mut self, now_ns: u64, sink: &mut dyn Sink) {
        for (pid, e) in self.exits.iter_mut() {
            if !e.registrations_done && e.ts_ns.saturating_add(EXIT_LINGER_NS) <= now_ns {
                e.registrations_done = true;
                self.corr.forget_process(*pid);
                self.queues.exited(*pid);
                for gone in self.agg.exited(*pid) {
                    self.bytes.forget(gone);
                    self.gpu_use_seen.remove(&gone);
                    self.gpu_use_known.remove(&gone);
                }
                // No summary kept: nothing to learn of it any more.
                if !self.agg.has(*pid) {
                    self.gpu_use_seen.remove(pid);
                    self.gpu_use_known.remove(pid);
                }
            }
        }
        let storage = &self.storage;
        let done: Vec<u32> = self
            .exits
            .iter()
            .filter(|(pid, e)| e.registrations_done && !storage.procs.contains_key(pid))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in done {
            self.exits.remove(&pid);
            sink.emit(&Output::Exited { pid });
        }
    }

    /// Per-pid entries held: (processes with registration summaries, of those exited (final),
    /// processes with storage state, storage reports kept, exits pending, GPU-use entries).
    pub fn held(&self) -> [usize; 6] {
        let (procs, archived) = self.agg.held();
        [
            procs,
            archived,
            self.storage.procs.len(),
            self.storage_archive.reports().len(),
            self.exits.len(),
            self.gpu_use_seen.len() + self.gpu_use_known.len(),
        ]
    }

    /// A libcuda control call: imports of GPU memory from another process go to the sinks.
    pub fn cuda(&mut self, c: &CudaCall, sink: &mut dyn Sink) {
        self.queues.cuda(c);
        if let Some(ipc) = self.p2p.record(c) {
            sink.emit(&Output::GpuIpc(&ipc));
        }
    }

    pub fn p2p_state(&self) -> &P2pState {
        &self.p2p
    }

    pub fn record(&mut self, rec: MrRecord, sink: &mut dyn Sink) {
        // Learn GPU use and the pinned host mappings while the process surely runs: at its
        // first record.
        let pid = rec.ctx.pid;
        if (self.gpu_use.is_some() || self.host_maps.is_some()) && self.gpu_use_seen.insert(pid) {
            if let Some(uses) = self.gpu_use.as_mut().and_then(|probe| probe(pid)) {
                self.gpu_use_known.insert(pid, uses);
            }
            self.learn_host_maps(pid);
        }
        self.corr.push(rec, &mut self.out);
        self.deliver(sink);
    }

    /// Closes items whose other sources did not come within the window (`now_ns`: CLOCK_MONOTONIC).
    pub fn tick(&mut self, now_ns: u64, sink: &mut dyn Sink) {
        self.corr.tick(now_ns, &mut self.out);
        self.deliver(sink);
        self.prune_exits(now_ns, sink);
    }

    pub fn finish(&mut self, sink: &mut dyn Sink) {
        sink.flushed();
        self.corr.flush(&mut self.out);
        self.deliver(sink);
    }

    pub fn aggregator(&self) -> &Aggregator {
        &self.agg
    }

    /// The summary tick (every interval, and `last` at the end): the kernel's counters as read
    /// now go to the raw tap (recordings keep them) and into the storage state; then the storage
    /// report, GPU use of new processes, and the per-process summary with the lost records.
    pub fn summary_tick(
        &mut self,
        counters: impl Into<Counters>,
        lost: &Lost,
        last: bool,
        sink: &mut dyn Sink,
    ) {
        let counters = counters.into();
        sink.counters(&counters, last);
        // The counters just read are after the exits already seen: those processes' are final,
        // unless the kernel maps still hold them for a process not yet reaped (then the next
        // read says `gone`, and only then: its entries would come back otherwise).
        let s = &counters.storage;
        let gone: std::collections::HashSet<u32> = s.gone.iter().copied().collect();
        let in_maps: std::collections::HashSet<u32> = (s.files.iter().map(|f| f.pid))
            .chain(s.fills.iter().map(|f| f.pid))
            .chain(s.uring_loose.iter().map(|(pid, _)| *pid))
            .collect();
        self.counters(counters);
        for pid in self.exits.keys().filter(|p| !in_maps.contains(p) || gone.contains(p)) {
            self.storage.process_gone(*pid);
        }
        if last {
            // cuFile calls still waiting for their worker-thread I/O: reported as they stand.
            self.storage.release_all();
        }
        for io in self.storage.take_done() {
            sink.emit(&Output::Gds(&io));
        }
        let mut report = storage_report(&self.storage);
        let finished: Vec<u32> = report.procs.iter().filter(|p| p.exited).map(|p| p.pid).collect();
        report.procs.extend(self.storage_archive.reports().iter().cloned());
        // By pid, whether or not a process was dropped yet (live and replay prune at other times).
        report.procs.sort_by_key(|p| (p.pid, !p.archived));
        sink.emit(&Output::StorageSummary { report: &report, last });
        self.archive_storage(&finished, report);
        sink.emit(&Output::P2pSummary { report: &self.p2p.report(), last });
        sink.emit(&Output::QueueSummary { report: &self.queues.report(), last });
        self.refresh_gpu_use();
        for (pid, pinned, all) in self.p2p.staged_copies() {
            self.agg.staged(pid, &pinned, &all);
        }
        sink.emit(&Output::Summary { agg: &self.agg, lost, last });
    }

    /// Hands each family its part of the kernel's counters (replay: a recorded reading).
    pub fn counters(&mut self, counters: impl Into<Counters>) {
        let counters = counters.into();
        self.p2p.counters(&counters.p2p, &counters.peer_access, &counters.storage.comms);
        self.bytes.reading(&counters.bytes);
        self.p2p.staged_counters(&counters.staged);
        self.storage.snapshot(counters.storage);
    }

    fn deliver(&mut self, sink: &mut dyn Sink) {
        for j in self.out.drain(..) {
            match j {
                Joined::Registered(r) => {
                    if let PinUse::Queue(kind) = pin_use(&r) {
                        let pin = QueuePin::of(&r, kind, classify(&r));
                        self.queues.pinned(&pin);
                        sink.emit(&Output::QueuePin(&pin));
                        continue;
                    }
                    let mut r = r;
                    let v = classify(&r);
                    // A host MR inside a CUDA pinned host allocation: a staging buffer, by evidence
                    // (the CUDA call seen, else the kernel's map of the process, read again now).
                    if v == crate::mr::classify::Verdict::Host {
                        let (pid, addr, len) = (r.ctx.pid, r.addr, r.length);
                        r.host_alloc = self.p2p.host_alloc(pid, addr, len);
                        if r.host_alloc.is_none() {
                            learn_host_maps(&mut self.host_maps, &mut self.p2p, pid);
                        }
                        r.host_origin = Some(self.p2p.host_origin(pid, addr, len));
                    }
                    self.agg.registered(&r, v);
                    if let Some(lkey) = r.lkey.filter(|_| !r.failed) {
                        // CUDA pinned or registered host memory, by the call seen or the kernel.
                        let pinned = r.host_alloc.is_some()
                            || r.host_origin.is_some_and(|o| o.origin != crate::p2p::HostOrigin::Other);
                        let key = crate::mr::bytes::label(v, pinned);
                        self.bytes.registered(r.ctx.pid, (r.dev, lkey), r.id, key);
                    }
                    if let Some(uses) = self.gpu_use_known.get(&r.ctx.pid) {
                        self.agg.set_uses_gpu(r.ctx.pid, *uses);
                    }
                    sink.emit(&Output::Registered { reg: &r, verdict: v });
                }
                Joined::Released(mut r) => {
                    if let Some(rel) = self.queues.released(&r) {
                        sink.emit(&Output::QueueRelease(&rel));
                        continue;
                    }
                    r.host_origin = self.agg.origin_of(r.registration);
                    let owner = self.agg.released(&r);
                    if let Some(lkey) = r.lkey {
                        let pid = owner.map_or(r.ctx.pid, |o| o.0);
                        let counts = r.wr_bytes.as_ref().map(crate::mr::bytes::Moved::of);
                        self.bytes.released(pid, (r.dev, lkey), counts);
                    }
                    sink.emit(&Output::Released { rel: &r, owner });
                }
                Joined::GpuPin(p) => {
                    self.agg.gpu_pinned(&p);
                    // Pinning GPU pages proves it uses a GPU, whether or not /proc can still
                    // say so (a short GDS job is gone before its summary).
                    if p.ret == 0 {
                        self.gpu_use_known.insert(p.ctx.pid, true);
                    }
                    if let Some(uses) = self.gpu_use_known.get(&p.ctx.pid) {
                        self.agg.set_uses_gpu(p.ctx.pid, *uses);
                    }
                    sink.emit(&Output::GpuPin(&p));
                }
                Joined::GpuFreed(f) => {
                    let owner = self.agg.gpu_freed(&f);
                    sink.emit(&Output::GpuFreed { freed: &f, owner });
                }
            }
        }
    }
}

fn learn_host_maps(probe: &mut Option<HostMapsProbe>, p2p: &mut P2pState, pid: u32) {
    if let Some(ranges) = probe.as_mut().and_then(|probe| probe(pid)) {
        p2p.set_kernel_maps(pid, ranges);
    }
}

mod storage_glue;
#[cfg(test)]
mod tests;

pub use crate::clock::monotonic_ns;
