//! GPU↔GPU (the third GPUDirect, P2P) and CUDA pinned host memory, pure (no BPF, no I/O):
//! folds libcuda control calls (`events::cuda`) and the kernel's copy counters (read at each
//! summary tick, `live`) into per-process verdicts — `p2p-direct` when peer access was enabled
//! between the two devices when the copy ran, `p2p-staged` when the driver staged it through
//! host memory — matches each import of GPU memory to the process that exported it (by the IPC
//! handle's bytes or the shareable fd's file), and knows which host ranges are CUDA pinned
//! allocations (what a host MR's `host_alloc` says).

pub mod origin;
pub mod report;
pub mod staged;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::events::{
    cuda::{CudaCall, CudaOp},
    Context,
};

pub use origin::{HostMrOrigin, HostOrigin, OriginEvidence};
pub use report::{P2pPair, P2pProcess, P2pReport, PeerAccess};
pub use staged::{StagedBytes, StagedCopies};

/// How a host range was pinned by CUDA (a host MR's `host_alloc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum HostAlloc {
    /// `cuMemHostAlloc` (also for `cuMemAllocHost`).
    #[serde(rename = "cuMemHostAlloc")]
    CuMemHostAlloc,
    #[serde(rename = "cuMemHostRegister")]
    CuMemHostRegister,
}

impl HostAlloc {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CuMemHostAlloc => "cuMemHostAlloc",
            Self::CuMemHostRegister => "cuMemHostRegister",
        }
    }
}

/// Copies of one process from one device to another with one verdict, as the kernel counted
/// them (cumulative since the trace began). `verdict`: `gdr_trace_common::p2p::verdict`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct P2pCopies {
    pub pid: u32,
    pub src_device: u32,
    pub dst_device: u32,
    pub verdict: u32,
    pub calls: u64,
    pub bytes: u64,
}

/// Peer access enabled in a process from `device`'s context to `peer_device`'s (kernel state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PeerEnabled {
    pub pid: u32,
    pub device: u32,
    pub peer_device: u32,
}

/// An import of GPU memory from another process (`cuIpcOpenMemHandle*`,
/// `cuMemImportFromShareableHandle`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuIpc {
    pub ctx: Context,
    /// The importing function.
    pub op: String,
    /// Bytes, where known (the exporter's allocation).
    pub length: Option<u64>,
    /// The process that exported the handle (None: not seen exporting).
    pub exporter_pid: Option<u32>,
    pub exporter_uid: Option<u32>,
    pub exporter_comm: Option<String>,
    pub ret: i64,
}

#[derive(Debug, Clone)]
struct Export {
    pid: u32,
    uid: u32,
    comm: String,
    length: u64,
}

#[derive(Debug, Clone, Copy)]
struct HostRange {
    addr: u64,
    length: u64,
    kind: HostAlloc,
    /// The libcuda call seen, or nvidia.ko's own function (`os_lock_user_pages`: kernel pin,
    /// `nvidia_mmap_sysmem`: kernel map).
    evidence: OriginEvidence,
}

#[derive(Default)]
pub struct P2pState {
    comms: BTreeMap<u32, String>,
    by_handle: HashMap<String, Export>,
    by_file: HashMap<(u64, u64), Export>,
    host: HashMap<u32, Vec<HostRange>>,
    /// Per process, its mappings of nvidia.ko's control node as last read (`origin`).
    kernel_maps: HashMap<u32, Vec<(u64, u64)>>,
    /// The kernel's device <-> host copy counters per process, as last read (cumulative).
    staged: BTreeMap<u32, Vec<StagedCopies>>,
    /// The latest kernel counters and peer access per process.
    copies: BTreeMap<u32, Vec<P2pCopies>>,
    peers: BTreeMap<u32, Vec<PeerEnabled>>,
}

impl P2pState {
    /// One control call; an import of GPU memory comes back as a [`GpuIpc`] for the sinks.
    pub fn record(&mut self, c: &CudaCall) -> Option<GpuIpc> {
        let pid = c.ctx.pid;
        self.comms.entry(pid).or_insert_with(|| c.ctx.comm.clone());
        let export = || Export { pid, uid: c.ctx.uid, comm: c.ctx.comm.clone(), length: c.length };
        match c.op {
            CudaOp::IpcExport if c.ok() => {
                if let Some(h) = &c.handle {
                    self.by_handle.insert(h.clone(), export());
                }
            }
            CudaOp::MemExport if c.ok() => {
                if let Some(f) = c.file {
                    self.by_file.insert(f, export());
                }
            }
            CudaOp::IpcImport | CudaOp::MemImport => {
                let found = match c.op {
                    CudaOp::IpcImport => c.handle.as_ref().and_then(|h| self.by_handle.get(h)),
                    _ => c.file.and_then(|f| self.by_file.get(&f)),
                };
                let length =
                    found.map(|e| e.length).filter(|l| *l > 0).or((c.length > 0).then_some(c.length));
                return Some(GpuIpc {
                    ctx: c.ctx.clone(),
                    op: c.function.clone(),
                    length,
                    exporter_pid: found.map(|e| e.pid),
                    exporter_uid: found.map(|e| e.uid),
                    exporter_comm: found.map(|e| e.comm.clone()),
                    ret: c.ret,
                });
            }
            CudaOp::HostAlloc | CudaOp::HostRegister if c.ok() && c.addr != 0 => {
                let kind = if c.op == CudaOp::HostAlloc {
                    HostAlloc::CuMemHostAlloc
                } else {
                    HostAlloc::CuMemHostRegister
                };
                let evidence = match (c.source.from_kernel(), kind) {
                    (false, _) => OriginEvidence::CallSeen,
                    (true, HostAlloc::CuMemHostAlloc) => OriginEvidence::KernelMap,
                    (true, HostAlloc::CuMemHostRegister) => OriginEvidence::KernelPin,
                };
                let r = HostRange { addr: c.addr, length: c.length, kind, evidence };
                self.host.entry(pid).or_default().push(r);
            }
            CudaOp::HostFree | CudaOp::HostUnregister if c.ok() => {
                if let Some(v) = self.host.get_mut(&pid) {
                    v.retain(|r| r.addr != c.addr);
                }
            }
            _ => {}
        }
        None
    }

    /// The latest pinned host range seen (by a call or in the kernel) `[addr, addr + length)`
    /// lies in, if any.
    fn host_range(&self, pid: u32, addr: u64, length: u64, calls_only: bool) -> Option<&HostRange> {
        let end = addr.checked_add(length)?;
        self.host.get(&pid)?.iter().rev().find(|r| {
            addr >= r.addr
                && end <= r.addr.saturating_add(r.length)
                && (!calls_only || r.evidence == OriginEvidence::CallSeen)
        })
    }

    /// The CUDA call that pinned the host memory `[addr, addr + length)` lies in, if seen.
    pub fn host_alloc(&self, pid: u32, addr: u64, length: u64) -> Option<HostAlloc> {
        self.host_range(pid, addr, length, true).map(|r| r.kind)
    }

    /// A process's mappings of nvidia.ko's control node, as just read from /proc/PID/maps. Kept
    /// after the process exits, as its copy counters are (its final summary's staged bytes are
    /// added up after the exit); a new process of the same pid replaces them at its first record.
    pub fn set_kernel_maps(&mut self, pid: u32, ranges: Vec<(u64, u64)>) {
        self.kernel_maps.insert(pid, ranges);
    }

    /// A host MR's origin: the CUDA call seen, else nvidia.ko's function seen (pin, map), else
    /// the kernel's map as last read from /proc.
    pub fn host_origin(&self, pid: u32, addr: u64, length: u64) -> HostMrOrigin {
        if let Some(r) =
            self.host_range(pid, addr, length, true).or(self.host_range(pid, addr, length, false))
        {
            let origin = match r.kind {
                HostAlloc::CuMemHostAlloc => HostOrigin::CudaPinned,
                HostAlloc::CuMemHostRegister => HostOrigin::CudaRegistered,
            };
            return HostMrOrigin { origin, evidence: Some(r.evidence) };
        }
        let mapped = self.kernel_maps.get(&pid).is_some_and(|r| origin::covered(r, addr, length));
        HostMrOrigin::of(None, mapped)
    }

    /// Folds the kernel's device <-> host copy counters as read at a summary tick (cumulative:
    /// each replaces the last per process; a process that left the map keeps its last counts).
    pub fn staged_counters(&mut self, copies: &[StagedCopies]) {
        let mut seen: BTreeMap<u32, Vec<StagedCopies>> = BTreeMap::new();
        for c in copies {
            seen.entry(c.pid).or_default().push(*c);
        }
        self.staged.extend(seen);
    }

    /// Each process's device <-> host copies whose host side lies in pinned host memory it
    /// knows (a CUDA call seen, or nvidia.ko's mapping), for [`crate::mr::aggregate`].
    pub fn staged_copies(&self) -> impl Iterator<Item = (u32, Vec<StagedCopies>, Vec<StagedCopies>)> + '_ {
        self.staged.iter().map(|(pid, copies)| {
            let pinned = |c: &&StagedCopies| {
                self.host_range(*pid, c.host, 1, false).is_some()
                    || self.kernel_maps.get(pid).is_some_and(|r| origin::covered(r, c.host, 1))
            };
            let known: Vec<StagedCopies> = copies.iter().filter(pinned).copied().collect();
            (*pid, known, copies.clone())
        })
    }

    /// Folds the kernel's counters as read at a summary tick (cumulative: each replaces the
    /// last per process; a process that left the maps keeps its last counts).
    pub fn counters(&mut self, copies: &[P2pCopies], peers: &[PeerEnabled], comms: &HashMap<u32, String>) {
        let mut seen: BTreeMap<u32, (Vec<P2pCopies>, Vec<PeerEnabled>)> = BTreeMap::new();
        for c in copies {
            seen.entry(c.pid).or_default().0.push(*c);
        }
        for p in peers {
            seen.entry(p.pid).or_default().1.push(*p);
        }
        // A process in the maps: its counters and peer access as they are now.
        for (pid, (c, p)) in seen {
            if !c.is_empty() {
                self.copies.insert(pid, c);
            }
            self.peers.insert(pid, p);
        }
        for (pid, comm) in comms {
            self.comms.entry(*pid).or_insert_with(|| comm.clone());
        }
    }

    pub fn report(&self) -> P2pReport {
        report::build(&self.copies, &self.peers, &self.comms)
    }
}
