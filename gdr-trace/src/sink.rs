//! Where analysed events go: text for people, NDJSON for machines, the audit, Prometheus
//! metrics, recordings. All receive the same [`Output`]s from the same pipeline.

pub mod audit;
pub mod hooks_text;
pub mod json;
pub mod metrics;
pub mod p2p_text;
pub mod queue_view;
pub mod storage_json;
pub mod storage_text;
pub mod summary_text;
pub mod text;

use crate::{
    events::{storage::NvfsIo, Event},
    facts::{HookStatus, KernelFacts},
    mr::aggregate::Aggregator,
    mr::classify::Verdict,
    mr::correlate::{GpuFreed, GpuPin, Registration, Release},
    storage::{aggregate::StorageReport, state::GdsIo},
};

/// Records that never reached userspace, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Lost {
    /// The ring buffer was full.
    pub ringbuf_full: u64,
    /// An entry-argument stash was full.
    pub stash_full: u64,
    /// A return probe found no entry arguments.
    pub stash_miss: u64,
    /// A storage counter map was full: some I/O was not counted.
    #[serde(default)]
    pub storage_map_full: u64,
    /// The traced-process map was full: a child of the attached process went untraced.
    #[serde(default)]
    pub tracked_full: u64,
    /// An async nvidia-fs I/O completed with no submission on record (evicted from the LRU
    /// in-flight map, or `nvfs_direct_io` not hookable): its bytes were not attributed.
    #[serde(default)]
    pub nvfs_async_miss: u64,
    /// The per-(process, lkey) byte map was full: a work request's bytes were not counted.
    #[serde(default)]
    pub bytes_map_full: u64,
    /// A work-request chain, SGE list or completion batch longer than the bounded walk: the
    /// rest's bytes were not counted.
    #[serde(default)]
    pub bytes_truncated: u64,
    /// A user sent more records a second than `--events-per-uid` allows: its own records were
    /// dropped (never another user's).
    #[serde(default)]
    pub over_budget: u64,
    /// A ring record had an unknown kind or was shorter than its kind's struct: refused, counted
    /// (a build mismatch between the eBPF object and this binary, or a kernel bug).
    #[serde(default)]
    pub undecodable: u64,
    /// Not a loss: the records that did reach userspace and decode, beside the lost ones, so a
    /// reader can tell what share was lost (`watch --json`'s `lost` line says it as
    /// `delivered`). Live traces only: None in a replay (a recording's `end` line has its own
    /// `records`), so `report` does not claim none arrived.
    #[serde(skip)]
    pub delivered: Option<u64>,
    /// Tracing the whole node: the tenants that lost most (`ringbuf_full` and `over_budget`
    /// records, charged to the tenant whose record or evidence it was), most first, as
    /// (tenant key: uid, or `ROOT_CGROUP` | cgroup id for root; count); zero counts are empty.
    #[serde(skip)]
    pub by_tenant: [(u64, u64); LOST_TENANTS],
}

/// Tenants named in [`Lost::by_tenant`].
pub const LOST_TENANTS: usize = 16;

/// A tenant key as a label: `uid 1001`, or `cgroup 4242` for a root process's cgroup.
pub fn tenant_label(key: u64) -> String {
    if key & gdr_trace_common::ROOT_CGROUP != 0 {
        format!("cgroup {}", key & !gdr_trace_common::ROOT_CGROUP)
    } else {
        format!("uid {key}")
    }
}

impl Lost {
    pub fn from_slots(s: &[u64]) -> Self {
        use gdr_trace_common::lost::*;
        Self {
            ringbuf_full: s[RINGBUF_FULL as usize],
            stash_full: s[STASH_FULL as usize],
            stash_miss: s[STASH_MISS as usize],
            storage_map_full: s[STORAGE_MAP_FULL as usize],
            tracked_full: s[TRACKED_FULL as usize],
            nvfs_async_miss: s[NVFS_ASYNC_MISS as usize],
            bytes_map_full: s[BYTES_MAP_FULL as usize],
            bytes_truncated: s[BYTES_TRUNCATED as usize],
            over_budget: s[OVER_BUDGET as usize],
            undecodable: 0,
            delivered: None,
            by_tenant: [(0, 0); LOST_TENANTS],
        }
    }
    /// Each reason by its serialized name (`ringbuf_full`, ...), with its count.
    pub fn by_reason(&self) -> Vec<(String, u64)> {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(m)) => {
                m.into_iter().map(|(k, v)| (k, v.as_u64().unwrap_or(0))).collect()
            }
            _ => vec![],
        }
    }
    pub fn total(&self) -> u64 {
        self.ringbuf_full
            + self.stash_full
            + self.stash_miss
            + self.storage_map_full
            + self.tracked_full
            + self.nvfs_async_miss
            + self.bytes_map_full
            + self.bytes_truncated
            + self.over_budget
            + self.undecodable
    }
}

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
