//! Per-process totals: registrations, bytes, live pinned bytes, by verdict.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

mod staging;

pub use staging::StagingMr;

use crate::{
    mr::classify::Verdict,
    mr::correlate::{GpuFreed, GpuPin, Registration, Release},
};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerdictTotals {
    pub count: u64,
    pub bytes: u64,
    pub live_bytes: u64,
}

impl VerdictTotals {
    pub fn is_zero(&self) -> bool {
        self.count == 0
    }
}

/// What a process's registrations add up to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcessVerdict {
    /// GPU-backed bytes dominate: GPUDirect RDMA works for this process.
    Gdr,
    /// Uses a GPU but registers only host memory: the silent staging this tool exists to catch.
    HostStaged,
    /// Both GPU and host memory in significant amounts.
    Mixed,
    /// Registers only host memory and uses no GPU (a CPU-only RDMA program).
    Host,
    /// Registers memory of another kind only: on-demand paging, or a dma-buf from another
    /// exporter than NVIDIA's. RDMA, but neither GPU nor host memory.
    Other,
    /// Registers memory whose kind the hooks could not tell (e.g. only the userspace hook
    /// attached): it uses RDMA; which memory stays unknown.
    Unknown,
    /// No successful registration.
    #[default]
    NoRdma,
}

impl ProcessVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gdr => "gdr",
            Self::HostStaged => "host-staged",
            Self::Mixed => "mixed",
            Self::Host => "host",
            Self::Other => "other",
            Self::Unknown => "unknown",
            Self::NoRdma => "no-rdma",
        }
    }
}

/// GPU bytes at or above this share of all registered bytes make a process `gdr`: NCCL registers
/// small host MRs (FIFOs, flush buffers) even when GPUDirect works.
pub const GDR_SHARE: f64 = 0.9;

pub fn process_verdict(gpu_bytes: u64, host_bytes: u64, uses_gpu: bool) -> ProcessVerdict {
    let total = gpu_bytes + host_bytes;
    if total == 0 {
        ProcessVerdict::NoRdma
    } else if gpu_bytes == 0 {
        if uses_gpu {
            ProcessVerdict::HostStaged
        } else {
            ProcessVerdict::Host
        }
    } else if gpu_bytes as f64 >= GDR_SHARE * total as f64 {
        ProcessVerdict::Gdr
    } else {
        ProcessVerdict::Mixed
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProcessSummary {
    pub pid: u32,
    pub comm: String,
    pub registrations: u64,
    pub releases: u64,
    pub failed: u64,
    pub bytes_registered: u64,
    pub live_bytes: u64,
    pub by_verdict: BTreeMap<Verdict, VerdictTotals>,
    /// The process has an NVIDIA device open or libcuda mapped (None: not known).
    pub uses_gpu: Option<bool>,
    pub process_verdict: ProcessVerdict,
    /// GPU pages pinned for P2P outside any registration (GPUDirect Storage or another caller).
    pub gpu_pins_outside_rdma: u64,
    pub gpu_pin_bytes_outside_rdma: u64,
    /// GPU memory freed while a registration still used it.
    pub gpu_freed_under_registration: u64,
    /// Host MRs in CUDA pinned or CUDA registered host memory: the evidence of `host-staged`
    /// (a CUDA staging buffer registered with the NIC), each with its origin's evidence.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub staging_mrs: Vec<StagingMr>,
    /// Bytes its work requests moved, by the verdict of the MR they named (`wr_bytes`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub bytes_by_verdict: BTreeMap<String, crate::mr::bytes::Moved>,
    /// Bytes copied device -> host and host -> device through pinned host memory (cuMemcpyDtoH*,
    /// cuMemcpyHtoD* whose host side is a CUDA pinned buffer or a staging MR's memory).
    pub staged_bytes: crate::p2p::StagedBytes,
    /// Registrations only a libibverbs uprobe saw where a kernel hook would have seen a real
    /// one: what the process claimed, in none of the totals above or its verdict.
    #[serde(skip_serializing_if = "VerdictTotals::is_zero")]
    pub unverified: VerdictTotals,
}

impl ProcessSummary {
    fn update_verdict(&mut self) {
        let bytes = |v: Verdict| self.by_verdict.get(&v).map_or(0, |t| t.bytes);
        let gpu = bytes(Verdict::GpuPeermem) + bytes(Verdict::GpuDmabuf);
        let host = bytes(Verdict::Host);
        // A host MR in CUDA pinned host memory proves GPU use, whatever /proc said.
        let uses_gpu = self.uses_gpu.unwrap_or(false) || !self.staging_mrs.is_empty();
        self.process_verdict = match process_verdict(gpu, host, uses_gpu) {
            // Registered, but neither GPU nor host memory: never "no RDMA".
            ProcessVerdict::NoRdma => {
                let count = |v: Verdict| self.by_verdict.get(&v).map_or(0, |t| t.count);
                if count(Verdict::Unknown) > 0 {
                    ProcessVerdict::Unknown
                } else if count(Verdict::DmabufOther) + count(Verdict::Odp) > 0 {
                    ProcessVerdict::Other
                } else {
                    ProcessVerdict::NoRdma
                }
            }
            v => v,
        };
    }
}

// Summaries of exited processes kept: the largest by bytes registered, at most the bound every
// family keeps; past it the smallest are dropped and only counted.
use crate::archive::MAX_ARCHIVED;

#[derive(Debug, Default)]
pub struct Aggregator {
    procs: BTreeMap<u32, ProcessSummary>,
    /// Live registrations: id -> (owner pid, verdict, length).
    live: HashMap<u64, (u32, Verdict, u64)>,
    /// Live claims (`ProcessSummary::unverified`): id -> (owner pid, length).
    live_claims: HashMap<u64, (u32, u64)>,
    /// Whether a registration no kernel hook saw is only a claim: a kernel registration hook
    /// attached (or no RDMA core is here at all, so nothing real could be registered).
    claims_apart: bool,
    /// Live MRs' work-request bytes so far (pid, registration id, counts): `mr_bytes` records.
    pub live_mr_bytes: Vec<(u32, u64, crate::mr::bytes::Moved)>,
    /// Live host registrations' origins, by id (for their release records).
    origins: HashMap<u64, crate::p2p::HostMrOrigin>,
    /// Processes that exited whose summaries are kept (final), at most [`MAX_ARCHIVED`].
    exited: std::collections::BTreeSet<u32>,
    /// Exited processes whose summaries were dropped past that bound, by process verdict.
    forgotten: BTreeMap<ProcessVerdict, u64>,
    /// What their work requests had moved, by MR verdict: node totals never go down.
    forgotten_bytes: BTreeMap<String, crate::mr::bytes::Moved>,
}

impl Aggregator {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registrations no kernel hook saw are claims, kept apart ([`Self::claims_apart`]).
    pub fn with_claims_apart(mut self, apart: bool) -> Self {
        self.claims_apart = apart;
        self
    }

    fn process(&mut self, pid: u32, comm: &str) -> &mut ProcessSummary {
        let p = self.procs.entry(pid).or_insert_with(|| ProcessSummary { pid, ..Default::default() });
        if p.comm.is_empty() {
            p.comm = comm.to_string();
        }
        p
    }

    /// Whether a process uses a GPU (learned by the caller, e.g. from /proc).
    pub fn set_uses_gpu(&mut self, pid: u32, uses: bool) {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.uses_gpu = Some(uses);
            p.update_verdict();
        }
    }

    /// Pids whose GPU use is not known to be true yet.
    pub fn gpu_use_unknown(&self) -> Vec<u32> {
        self.procs.values().filter(|p| p.uses_gpu != Some(true)).map(|p| p.pid).collect()
    }

    pub fn gpu_pinned(&mut self, pin: &GpuPin) {
        let p = self.process(pin.ctx.pid, &pin.ctx.comm);
        if pin.ret == 0 {
            p.gpu_pins_outside_rdma += 1;
            p.gpu_pin_bytes_outside_rdma += pin.length;
        }
    }

    /// Returns the owner of the registration whose GPU memory was freed, when known.
    pub fn gpu_freed(&mut self, freed: &GpuFreed) -> Option<u32> {
        let (pid, _, _) = *self.live.get(&freed.registration?)?;
        self.procs.get_mut(&pid)?.gpu_freed_under_registration += 1;
        Some(pid)
    }

    pub fn registered(&mut self, reg: &Registration, verdict: Verdict) {
        // Failed calls move nothing, and on-demand paging pins nothing for a kernel hook to see.
        let kernel_would_see = !matches!(verdict, Verdict::Failed | Verdict::Probe | Verdict::Odp);
        if self.claims_apart && kernel_would_see && !reg.sources.iter().any(|s| s.from_kernel()) {
            let p = self.process(reg.ctx.pid, &reg.ctx.comm);
            p.unverified.count += 1;
            p.unverified.bytes += reg.length;
            p.unverified.live_bytes += reg.length;
            self.live_claims.insert(reg.id, (reg.ctx.pid, reg.length));
            return;
        }
        let p = self.process(reg.ctx.pid, &reg.ctx.comm);
        p.registrations += 1;
        let t = p.by_verdict.entry(verdict).or_default();
        t.count += 1;
        if matches!(verdict, Verdict::Failed | Verdict::Probe) {
            p.failed += u64::from(verdict == Verdict::Failed);
            return;
        }
        t.bytes += reg.length;
        t.live_bytes += reg.length;
        if let Some(o) = reg.host_origin.filter(|o| o.is_cuda()) {
            let (id, addr, length, host_alloc) = (reg.id, reg.addr, reg.length, reg.host_alloc);
            p.staging_mrs.push(StagingMr {
                id,
                addr,
                length,
                host_alloc,
                origin: o.origin,
                evidence: o.evidence,
                staged_bytes_dtoh: 0,
                staged_bytes_htod: 0,
            });
        }
        p.bytes_registered += reg.length;
        p.live_bytes += reg.length;
        p.update_verdict();
        self.live.insert(reg.id, (reg.ctx.pid, verdict, reg.length));
        if let Some(o) = reg.host_origin {
            self.origins.insert(reg.id, o);
        }
    }

    /// The origin of a live host registration (taken with its release).
    pub fn origin_of(&self, registration: Option<u64>) -> Option<crate::p2p::HostMrOrigin> {
        self.origins.get(&registration?).copied()
    }

    /// Returns the owner and verdict of the released registration, when known.
    pub fn released(&mut self, rel: &Release) -> Option<(u32, Verdict)> {
        if let Some((pid, len)) = self.live_claims.remove(&rel.registration?) {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.unverified.live_bytes = p.unverified.live_bytes.saturating_sub(len);
            }
            return None;
        }
        self.origins.remove(&rel.registration?);
        let (pid, verdict, len) = self.live.remove(&rel.registration?)?;
        let p = self.procs.get_mut(&pid)?;
        p.releases += 1;
        p.live_bytes = p.live_bytes.saturating_sub(len);
        if let Some(t) = p.by_verdict.get_mut(&verdict) {
            t.live_bytes = t.live_bytes.saturating_sub(len);
        }
        Some((pid, verdict))
    }

    /// A process's device <-> host copies as the kernel counted them so far (see
    /// [`crate::p2p::P2pState::staged_copies`]); a process with no registration is left out.
    pub fn staged(
        &mut self,
        pid: u32,
        pinned: &[crate::p2p::StagedCopies],
        all: &[crate::p2p::StagedCopies],
    ) {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.staged_bytes = staging::staged_bytes(&mut p.staging_mrs, pinned, all);
        }
    }

    /// Every process seen and kept (the final summaries of exited ones included), by pid.
    pub fn summaries(&self) -> impl Iterator<Item = &ProcessSummary> {
        self.procs.values()
    }

    /// Exited processes whose summaries were dropped past [`MAX_ARCHIVED`], by process verdict.
    pub fn forgotten(&self) -> &BTreeMap<ProcessVerdict, u64> {
        &self.forgotten
    }

    /// Processes held (running, or exited and kept), and of those the exited ones.
    pub fn held(&self) -> (usize, usize) {
        (self.procs.len(), self.exited.len())
    }

    /// A process ended and its last records are in: its summary is final, kept while among the
    /// [`MAX_ARCHIVED`] largest exited ones; returns the pids dropped for good (only counted).
    pub fn exited(&mut self, pid: u32) -> Vec<u32> {
        self.live.retain(|_, (owner, _, _)| *owner != pid);
        self.live_claims.retain(|_, (owner, _)| *owner != pid);
        let live = &self.live;
        self.origins.retain(|id, _| live.contains_key(id));
        if !self.procs.contains_key(&pid) {
            return vec![];
        }
        self.exited.insert(pid);
        let mut dropped = Vec::new();
        while self.exited.len() > MAX_ARCHIVED {
            let kept = self
                .exited
                .iter()
                .map(|&p| (p, self.procs.get(&p).map_or(0, |s| s.bytes_registered), u64::from(p)));
            let Some(smallest) = crate::archive::to_drop(kept) else { break };
            self.exited.remove(&smallest);
            if let Some(gone) = self.procs.remove(&smallest) {
                *self.forgotten.entry(gone.process_verdict).or_default() += 1;
                for (k, m) in gone.bytes_by_verdict {
                    self.forgotten_bytes.entry(k).or_default().add(m);
                }
            }
            dropped.push(smallest);
        }
        dropped
    }

    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    /// Bytes moved by work requests on this node since the start, by MR verdict: every process
    /// summarised now and those dropped past [`MAX_ARCHIVED`] (a counter's total).
    pub fn bytes_total(&self) -> BTreeMap<String, crate::mr::bytes::Moved> {
        let mut total = self.forgotten_bytes.clone();
        for (k, m) in self.procs.values().flat_map(|p| p.bytes_by_verdict.iter()) {
            total.entry(k.clone()).or_default().add(*m);
        }
        total
    }

    /// Each process's bytes moved as `ledger` has them now (a process with bytes and no
    /// registration seen gets a summary: it registered before the trace began).
    pub fn set_bytes(&mut self, ledger: &crate::mr::bytes::Ledger) {
        for pid in ledger.pids() {
            self.process(pid, "");
        }
        for p in self.procs.values_mut() {
            p.bytes_by_verdict = ledger.by_verdict(p.pid);
        }
        self.live_mr_bytes = ledger.live_mrs();
    }

    /// Whether a summary of `pid` is held.
    pub fn has(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }
}

#[cfg(test)]
mod tests;
