//! Queue memory (the queue family): what a NIC driver pins for a process's queues through the
//! same `ib_umem_get` a registration goes through (CQ, QP, SRQ and WQ rings, doorbell records'
//! pages, DEVX UMEMs), told from registrations by the verb the kernel pinned them in, never by
//! size or timing. A queue pin is never an MR: it is in no MR count, verdict, byte ledger,
//! metric or audit finding about MRs. Per process, whether its queues are GPU-resident and its
//! doorbell page mapped into the GPU says which GPU-initiated networking it got (`gin`).
//!
//! The shape of every family: `pinned`/`released`/`cuda` take its records as the pipeline
//! hands them on, `exited` drops a process's live state, `report` is the value sinks read.
//! It takes the joined pins of `mr::correlate` and their memory verdicts (`mr::classify`): one
//! join for every pin the kernel makes.

use serde::{Deserialize, Serialize};

use crate::{
    events::{cuda::CudaOp, purpose::Verb, Context, Source},
    hooks::Role,
    mr::{classify::Verdict, correlate::Registration},
};

pub mod gin;
mod state;
#[cfg(test)]
mod tests;

pub use state::{ProcQueues, ProcReport, QueueReport, Queues, Tally};

/// Whether I/O memory mapped into the GPU can be seen with these hooks (libcuda's
/// `cuMemHostRegister`): where it cannot, no mapping seen is not "none made".
pub fn io_mapping_visible(hooks: &[crate::facts::HookStatus]) -> bool {
    hooks.iter().any(|h| {
        h.attached.is_some()
            && crate::hooks::by_function(h.hook).is_some_and(|r| {
                r.call == crate::hooks::Call::Cuda(CudaOp::HostRegister) && r.programs.is_user()
            })
    })
}

/// What a queue pin is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueueKind {
    Cq,
    Qp,
    Srq,
    Wq,
    /// The page of a queue's doorbell record (one pin per page and user context, shared by
    /// the queues whose records are on it).
    Doorbell,
    /// An mlx5 DEVX UMEM: UCX, NVSHMEM IBGDA and DOCA GPUNetIO put rings, doorbell records and
    /// memory keys in them alike.
    DevxUmem,
    /// A pin made in no verb that says (see [`PinUse::Unknown`]): not reported as a registration.
    Unknown,
}

impl QueueKind {
    pub const ALL: [QueueKind; 7] =
        [Self::Cq, Self::Qp, Self::Srq, Self::Wq, Self::Doorbell, Self::DevxUmem, Self::Unknown];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cq => "cq",
            Self::Qp => "qp",
            Self::Srq => "srq",
            Self::Wq => "wq",
            Self::Doorbell => "doorbell",
            Self::DevxUmem => "devx-umem",
            Self::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for QueueKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a kernel pin is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinUse {
    /// A memory registration: made in a registration verb, or libibverbs' registration call
    /// joined it (that call is the verb), or only userspace saw it (no kernel pin to doubt).
    Registration,
    /// A queue's memory, by the verb (or doorbell mapping) it was made in.
    Queue(QueueKind),
}

/// Why a pin's purpose is unknown: pinned by the kernel in no verb a hook saw.
pub const PURPOSE_UNKNOWN: &str =
    "pinned in no registration or queue verb gdr-trace saw (verb hooks missing, or a driver's own method)";

/// What a joined pin is for, from the verb the kernel pinned it in.
pub fn pin_use(r: &Registration) -> PinUse {
    if r.purpose.doorbell {
        return PinUse::Queue(QueueKind::Doorbell);
    }
    match r.purpose.verb {
        Some(Verb::Register) => PinUse::Registration,
        Some(Verb::CreateCq) => PinUse::Queue(QueueKind::Cq),
        Some(Verb::CreateQp) => PinUse::Queue(QueueKind::Qp),
        Some(Verb::CreateSrq) => PinUse::Queue(QueueKind::Srq),
        Some(Verb::CreateWq) => PinUse::Queue(QueueKind::Wq),
        Some(Verb::DevxUmemReg) => PinUse::Queue(QueueKind::DevxUmem),
        None => {
            let user_call = r.sources.iter().any(|s| !s.from_kernel() && registers(s));
            let kernel = r.sources.iter().any(Source::from_kernel);
            if user_call || !kernel {
                PinUse::Registration
            } else {
                PinUse::Queue(QueueKind::Unknown)
            }
        }
    }
}

/// A userspace registration call (`ibv_reg_mr*`, `ibv_reg_dmabuf_mr`).
fn registers(s: &Source) -> bool {
    matches!(s.role(), Some(Role::UserRegister | Role::DmabufRegister))
}

/// One pin of queue memory, as the sinks see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueuePin {
    #[serde(flatten)]
    pub ctx: Context,
    pub kind: QueueKind,
    /// The verb it was pinned in (None: none seen; a doorbell's is its queue's).
    pub verb: Option<Verb>,
    pub device: Option<String>,
    /// User address (a dma-buf's: the offset in the buffer).
    pub addr: u64,
    pub length: u64,
    /// Where its memory is: host, gpu-peermem, gpu-dmabuf, dmabuf-other (or failed).
    pub memory: Verdict,
    pub errno: Option<i32>,
    pub sources: Vec<Source>,
    /// The umem (kernel handle): joins its release. A kernel address: never in output.
    #[serde(skip)]
    pub umem: Option<u64>,
    /// A dma-buf's exporter, and the peer client that claimed GPU memory.
    pub exporter: Option<String>,
    pub peer_client: Option<String>,
    /// Kind unknown: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown: Option<&'static str>,
}

impl QueuePin {
    pub fn of(r: &Registration, kind: QueueKind, memory: Verdict) -> Self {
        Self {
            ctx: r.ctx.clone(),
            kind,
            verb: r.purpose.verb,
            device: r.device.clone(),
            addr: r.addr,
            length: r.length,
            memory,
            errno: r.errno,
            sources: r.sources.clone(),
            umem: r.umem,
            exporter: r.exporter.clone(),
            peer_client: r.peer.client.clone(),
            unknown: (kind == QueueKind::Unknown).then_some(PURPOSE_UNKNOWN),
        }
    }

    pub fn in_gpu_memory(&self) -> bool {
        self.memory.is_gpu()
    }
}

/// A queue pin released (the queue destroyed, the doorbell page's last user gone, the process
/// ended).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueRelease {
    #[serde(flatten)]
    pub ctx: Context,
    /// The process that pinned it (the release may run in another context).
    pub owner: u32,
    pub kind: QueueKind,
    pub memory: Verdict,
    pub device: Option<String>,
    pub length: u64,
    #[serde(skip)]
    pub umem: u64,
    pub sources: Vec<Source>,
}
