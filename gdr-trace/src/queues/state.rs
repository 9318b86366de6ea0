//! The queue family's state: live queue pins by umem, per-process tallies by kind and memory,
//! I/O-memory mappings into the GPU, and the report every sink reads.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::{
    gin::{self, Gin, IoMapping, CU_MEMHOSTREGISTER_IOMEMORY},
    QueueKind, QueuePin, QueueRelease,
};
use crate::{
    archive::{to_drop, MAX_ARCHIVED},
    events::cuda::{CudaCall, CudaOp},
    mr::{classify::Verdict, correlate::Release},
};

/// Pins of one kind in one kind of memory, by one process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// Pins made (failed ones under `Verdict::Failed`), and their bytes.
    pub pins: u64,
    pub bytes: u64,
    /// Still pinned now.
    pub live: u64,
    pub live_bytes: u64,
}

/// One process's queue memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProcQueues {
    pub pid: u32,
    pub comm: String,
    pub uid: u32,
    #[serde(serialize_with = "tallies")]
    pub tallies: BTreeMap<(QueueKind, Verdict), Tally>,
    /// `cuMemHostRegister(..., CU_MEMHOSTREGISTER_IOMEMORY)` calls: a doorbell page mapped (or
    /// not) into the GPU.
    pub io_mappings: Vec<IoMapping>,
    pub exited: bool,
    /// Order it was archived in (exited processes' reports are kept, bounded).
    #[serde(skip)]
    archived_at: u64,
}

fn tallies<S: serde::Serializer>(t: &BTreeMap<(QueueKind, Verdict), Tally>, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Row<'a> {
        kind: QueueKind,
        memory: Verdict,
        #[serde(flatten)]
        tally: &'a Tally,
    }
    s.collect_seq(t.iter().map(|((kind, memory), tally)| Row { kind: *kind, memory: *memory, tally }))
}

impl ProcQueues {
    /// Pins of every kind but `Unknown` (queue memory proper).
    pub fn queue_pins(&self) -> u64 {
        self.tallies.iter().filter(|((k, _), _)| *k != QueueKind::Unknown).map(|(_, t)| t.pins).sum()
    }

    pub fn unknown_pins(&self) -> u64 {
        self.tallies.iter().filter(|((k, _), _)| *k == QueueKind::Unknown).map(|(_, t)| t.pins).sum()
    }

    pub fn live_bytes(&self) -> u64 {
        self.tallies.values().map(|t| t.live_bytes).sum()
    }

    /// What weighs it when exited reports are bounded: the bytes it pinned.
    fn weight(&self) -> u64 {
        self.tallies.values().map(|t| t.bytes).sum()
    }
}

/// Every process's queue memory and GPU-initiated networking, as sinks read it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QueueReport {
    pub procs: Vec<ProcReport>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcReport {
    #[serde(flatten)]
    pub queues: ProcQueues,
    /// GPU-initiated networking (None: no queue memory pinned).
    pub gin: Option<Gin>,
}

/// The family's state.
#[derive(Debug, Default)]
pub struct Queues {
    /// Live pins by umem, with the process that made them.
    live: HashMap<u64, QueuePin>,
    procs: BTreeMap<u32, ProcQueues>,
    /// Final reports of exited processes, bounded (`archive`).
    archived: BTreeMap<u32, ProcQueues>,
    archived_n: u64,
    /// Whether libcuda's `cuMemHostRegister` is hooked (no mapping seen then means none made).
    mapping_visible: bool,
}

impl Queues {
    pub fn new(mapping_visible: bool) -> Self {
        Self { mapping_visible, ..Self::default() }
    }

    fn process(&mut self, pid: u32, comm: &str, uid: u32) -> &mut ProcQueues {
        self.procs.entry(pid).or_insert_with(|| ProcQueues {
            pid,
            comm: comm.into(),
            uid,
            ..Default::default()
        })
    }

    /// A pin of queue memory.
    pub fn pinned(&mut self, pin: &QueuePin) {
        let failed = pin.errno.is_some() || pin.memory == Verdict::Failed;
        let p = self.process(pin.ctx.pid, &pin.ctx.comm, pin.ctx.uid);
        let t = p.tallies.entry((pin.kind, pin.memory)).or_default();
        t.pins += 1;
        if failed {
            return;
        }
        t.bytes += pin.length;
        t.live += 1;
        t.live_bytes += pin.length;
        if let Some(umem) = pin.umem {
            self.live.insert(umem, pin.clone());
        }
    }

    /// A release: the queue pin it ends, if it is one.
    pub fn released(&mut self, rel: &Release) -> Option<QueueRelease> {
        let pin = self.live.remove(&rel.umem?)?;
        let owner = pin.ctx.pid;
        if let Some(t) = self.procs.get_mut(&owner).and_then(|p| p.tallies.get_mut(&(pin.kind, pin.memory))) {
            t.live = t.live.saturating_sub(1);
            t.live_bytes = t.live_bytes.saturating_sub(pin.length);
        }
        Some(QueueRelease {
            ctx: rel.ctx.clone(),
            owner,
            kind: pin.kind,
            memory: pin.memory,
            device: pin.device,
            length: pin.length,
            umem: pin.umem.unwrap_or_default(),
            sources: rel.sources.clone(),
        })
    }

    /// A libcuda call: I/O memory registered for the GPU (the NIC's doorbell page), or not.
    pub fn cuda(&mut self, c: &CudaCall) {
        if c.op != CudaOp::HostRegister || c.flags & CU_MEMHOSTREGISTER_IOMEMORY == 0 {
            return;
        }
        let m = IoMapping { addr: c.addr, length: c.length, ret: c.ret, source: c.source };
        self.process(c.ctx.pid, &c.ctx.comm, c.ctx.uid).io_mappings.push(m);
    }

    /// A process ended and its releases are in: its report is final (kept, bounded).
    pub fn exited(&mut self, pid: u32) {
        self.live.retain(|_, p| p.ctx.pid != pid);
        let Some(mut p) = self.procs.remove(&pid) else { return };
        p.exited = true;
        self.archived_n += 1;
        p.archived_at = self.archived_n;
        self.archived.insert(pid, p);
        while self.archived.len() > MAX_ARCHIVED {
            let kept = self.archived.values().map(|p| (p.pid, p.weight(), p.archived_at));
            let Some(pid) = to_drop(kept) else { break };
            self.archived.remove(&pid);
        }
    }

    pub fn report(&self) -> QueueReport {
        let mut procs: Vec<ProcReport> = self
            .procs
            .values()
            .chain(self.archived.values())
            .filter(|p| !p.tallies.is_empty() || !p.io_mappings.is_empty())
            .map(|p| ProcReport { queues: p.clone(), gin: gin::decide(p, self.mapping_visible) })
            .collect();
        procs.sort_by_key(|p| (p.queues.pid, p.queues.exited));
        QueueReport { procs }
    }

    /// Processes with state, and exited ones kept.
    pub fn held(&self) -> (usize, usize) {
        (self.procs.len(), self.archived.len())
    }
}
