//! Where analysed events go: text for people, NDJSON for machines, the audit, Prometheus
//! metrics, recordings. All receive the same [`Output`]s from the same pipeline.

pub mod audit;
pub mod hooks_text;
pub mod json;
mod lost;
pub mod metrics;
pub mod p2p_text;
pub mod queue_view;
pub mod storage_json;
pub mod storage_text;
pub mod summary_text;
pub mod text;

pub use lost::{tenant_label, Lost, LOST_TENANTS};

use crate::{
    events::{storage::NvfsIo, Event},
    facts::{HookStatus, KernelFacts},
    mr::aggregate::Aggregator,
    mr::classify::Verdict,
    mr::correlate::{GpuFreed, GpuPin, Registration, Release},
    storage::{aggregate::StorageReport, state::GdsIo},
};

/// What the analysis line hands its sinks: registrations, releases, GPU pins and frees,
/// cuFile and nvidia-fs calls, summaries, storage reports, notes.
#[derive(Debug, Clone, Copy)]
pub enum Output<'a> {
    Registered {
        reg: &'a Registration,
        verdict: Verdict,
    },
    /// `owner`: pid and verdict of the registration released, when it was seen.
    Released {
        rel: &'a Release,
        owner: Option<(u32, Verdict)>,
    },
    /// GPU pages pinned for P2P outside any registration (GDS or another caller).
    GpuPin(&'a GpuPin),
    /// GPU memory freed under a live registration (`owner`: its process, when known).
    GpuFreed {
        freed: &'a GpuFreed,
        owner: Option<u32>,
    },
    /// A cuFile call, classified.
    Gds(&'a GdsIo),
    /// An nvidia-fs ioctl or direct I/O (`path`: of the target descriptor, when known).
    Nvfs {
        io: &'a NvfsIo,
        path: Option<&'a str>,
    },
    /// Per-process registration summary: every interval and at the end (`last`).
    Summary {
        agg: &'a Aggregator,
        lost: &'a Lost,
        last: bool,
    },
    /// Per-process storage report: every interval and at the end (`last`).
    StorageSummary {
        report: &'a StorageReport,
        last: bool,
    },
    /// GPU memory imported from another process (CUDA IPC, cuMem shareable handle).
    GpuIpc(&'a crate::p2p::GpuIpc),
    /// Per-process GPU↔GPU copies and peer access: every interval and at the end (`last`).
    P2pSummary {
        report: &'a crate::p2p::P2pReport,
        last: bool,
    },
    /// Queue memory pinned by the kernel (a CQ/QP/SRQ/WQ ring, a doorbell page, a DEVX UMEM,
    /// or a pin of unknown purpose): never a registration.
    QueuePin(&'a crate::queues::QueuePin),
    QueueRelease(&'a crate::queues::QueueRelease),
    /// Per-process queue memory and GPU-initiated networking: every interval and at the end.
    QueueSummary {
        report: &'a crate::queues::QueueReport,
        last: bool,
    },
    /// Something a user should know (the attached process exited, interrupted...).
    Note(&'a str),
    /// A process ended and the pipeline dropped everything it kept for it: sinks drop theirs.
    Exited {
        pid: u32,
    },
    /// A copy of a hooked library was found and hooked (or could not be), or let go when the
    /// last process mapping it exited.
    LibraryCopy(&'a crate::facts::LibraryCopy),
}

/// The end of the line. Analysed outputs come through [`Sink::emit`]; `raw` and `tick` are the
/// raw tap (live tracing only) for sinks that keep the stream itself (recording) or learn
/// about processes while they run (audit, metrics).
pub trait Sink {
    fn start(&mut self, facts: &KernelFacts, hooks: &[HookStatus]);
    fn emit(&mut self, out: &Output<'_>);
    /// A decoded event as it came off the ring buffer, before analysis.
    fn raw(&mut self, _ev: &Event) {}
    /// The correlation clock ticked (recordings keep it for replay).
    fn tick(&mut self, _now_ns: u64) {}
    /// The pipeline closed every open item (the trace's end): recordings keep where.
    fn flushed(&mut self) {}
    /// The kernel's storage counters as read at a summary tick (`last`: the final one).
    fn counters(&mut self, _counters: &crate::counters::Counters, _last: bool) {}
    /// What the trace traces, by its hooks (live sinks learn it at start; a replay from the
    /// recording's header): a family off is "not traced", never "none seen".
    fn traced(&mut self, _hooks: &[HookStatus]) {}
}

/// What a summary says when no hook could see a registration.
pub const RDMA_NOT_TRACED: &str = "memory registrations not traced (no RDMA hook attached)";

/// Sends every call to each of several sinks, in order.
pub struct FanOut<'a>(pub Vec<&'a mut dyn Sink>);

impl Sink for FanOut<'_> {
    fn start(&mut self, facts: &KernelFacts, hooks: &[HookStatus]) {
        self.0.iter_mut().for_each(|s| s.start(facts, hooks));
    }
    fn emit(&mut self, out: &Output<'_>) {
        self.0.iter_mut().for_each(|s| s.emit(out));
    }
    fn traced(&mut self, hooks: &[HookStatus]) {
        self.0.iter_mut().for_each(|s| s.traced(hooks));
    }
    fn raw(&mut self, ev: &Event) {
        self.0.iter_mut().for_each(|s| s.raw(ev));
    }
    fn tick(&mut self, now_ns: u64) {
        self.0.iter_mut().for_each(|s| s.tick(now_ns));
    }
    fn flushed(&mut self) {
        self.0.iter_mut().for_each(|s| s.flushed());
    }
    fn counters(&mut self, counters: &crate::counters::Counters, last: bool) {
        self.0.iter_mut().for_each(|s| s.counters(counters, last));
    }
}

#[cfg(test)]
mod view_tests;
