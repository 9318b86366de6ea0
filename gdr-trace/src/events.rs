//! Typed events: what a ring-buffer record means, with names instead of numbers. Every record
//! is decoded once, here, into one [`Event`]; what /proc knows is added after decoding
//! (`trace::storage_live::StorageLive::enrich`), never during it.

use gdr_trace_common::{
    decode::{c_str, DecodeError, Record},
    EventKind, MrEvent,
};
use serde::{Deserialize, Serialize};

use crate::hooks;

pub mod cuda;
pub mod cufile_errors;
pub mod cufile_ops;
mod header;
pub mod purpose;
pub mod storage;

pub use header::{context, source, Context, Source};
use storage::StorageEvent;

/// One ring-buffer record, of any family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Registrations and releases, GPU-path evidence (peer client, P2P pins), GPU memory freed
    /// or exported: what `correlate` joins.
    Mr(MrRecord),
    /// Opens, closes, cuFile calls, nvidia-fs ioctls and direct I/O: what `storage` folds.
    Storage(StorageEvent),
    /// libcuda control calls (contexts, peer access, IPC, pinned host memory): what `p2p` folds.
    Cuda(cuda::CudaCall),
    /// A traced process mapped a file executable: the library follower looks at its memory
    /// map (handled by the trace loop, never analysed).
    LibraryMapped(Context),
    /// A traced process ended (its thread-group leader exited): per-process state can go once
    /// its last records (closes and releases done by the exit itself) are in.
    Exit(Context),
}

impl Event {
    /// The process it came from.
    pub fn pid(&self) -> u32 {
        use storage::StorageEvent as S;
        match self {
            Event::Mr(r) => r.ctx.pid,
            Event::Storage(S::Opened(e)) => e.ctx.pid,
            Event::Storage(S::Closed(e)) => e.ctx.pid,
            Event::Storage(S::Gds(e)) => e.ctx.pid,
            Event::Storage(S::Nvfs(e)) => e.ctx.pid,
            Event::Storage(S::Worker(e)) => e.ctx.pid,
            Event::Cuda(c) => c.ctx.pid,
            Event::LibraryMapped(ctx) | Event::Exit(ctx) => ctx.pid,
        }
    }
}

/// Decodes a ring-buffer record into its typed event.
pub fn decode(bytes: &[u8]) -> Result<Event, DecodeError> {
    Ok(match gdr_trace_common::decode::decode(bytes)? {
        Record::Mr(kind, ev) => Event::Mr(from_mr(kind, &ev)),
        Record::Storage(s) => Event::Storage(storage::from_record(&s)),
        Record::Cuda(ev) => Event::Cuda(cuda::from_record(&ev).ok_or(DecodeError::UnknownKind(ev.hdr.kind))?),
        Record::LibraryMapped(h) => Event::LibraryMapped(context(&h)),
        Record::Exit(hdr) => Event::Exit(context(&hdr)),
    })
}

/// One decoded MR record from one hook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MrRecord {
    pub ctx: Context,
    pub kind: MrKind,
    /// The hook that saw it: "fexit:ib_umem_get", "uprobe:ibv_reg_mr" to users.
    pub source: Source,
    pub from_kernel: bool,
    pub addr: u64,
    pub length: u64,
    pub iova: u64,
    pub handle: u64,
    pub access: u32,
    /// None on success; the errno on failure (None-but-failed when userspace knows no errno).
    pub errno: Option<i32>,
    pub failed: bool,
    pub device: Option<String>,
    /// Per kind: dma-buf fd (registrations, exports), 1 = inside a peer registration (evidence).
    #[serde(default)]
    pub aux: i64,
    /// dma-buf exporter name, when read.
    #[serde(default)]
    pub label: Option<String>,
    /// The raw return value as recorded (e.g. 1 when a peer client's acquire claimed a range).
    #[serde(default)]
    pub ret: i64,
    /// `ibv_mr.lkey` of a userspace registration (0: none): joins work requests' bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lkey: u32,
    /// The MR's device context (`gdr_trace_common::mr::bytes::dev_tag`; 0: none, or a recording
    /// from before it was kept): with the lkey, the key work requests name the MR by.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dev: u32,
    /// `ibv_dereg_mr`: the work requests' bytes counted against the MR (None: the kernel's
    /// byte map held nothing for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wr_bytes: Option<gdr_trace_common::mr::bytes::ByteCount>,
    /// A kernel pin or its release: the verb it was made in (a registration's or a queue's).
    #[serde(default, skip_serializing_if = "purpose::Purpose::is_none")]
    pub purpose: purpose::Purpose,
    /// A kernel pin: the device number of the uverbs file its verb came through (0: unknown),
    /// which names the device where no BTF does (`trace::pin_device`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub uverbs_dev: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl MrRecord {
    /// A successful record as hook `source` ("fexit:ib_umem_get", "uprobe:ibv_reg_mr") reports
    /// it, for building streams by hand (tests, fixtures): iova = addr, no access flags, device,
    /// label or return value; a kernel pin made in a registration verb (`with_purpose` for
    /// another).
    pub fn at(kind: MrKind, source: &str, ctx: Context, addr: u64, length: u64, handle: u64) -> Self {
        let src = Source::parse(source);
        let registers = kind == MrKind::Register && src.from_kernel();
        let purpose =
            purpose::Purpose { verb: registers.then_some(purpose::Verb::Register), doorbell: false };
        Self {
            ctx,
            kind,
            source: Source::parse(source),
            from_kernel: Source::parse(source).from_kernel(),
            addr,
            length,
            iova: addr,
            handle,
            access: 0,
            errno: None,
            failed: false,
            device: None,
            aux: 0,
            label: None,
            ret: 0,
            lkey: 0,
            dev: 0,
            wr_bytes: None,
            purpose,
            uverbs_dev: 0,
        }
    }

    /// The same record made in another verb (or none: `Purpose::default()`).
    pub fn with_purpose(mut self, purpose: purpose::Purpose) -> Self {
        self.purpose = purpose;
        self
    }
}

impl MrRecord {
    /// What the hook that made this record proves (its row of the hook table).
    pub fn role(&self) -> Option<hooks::Role> {
        self.source.role()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MrKind {
    Register,
    Release,
    /// A GPU-path call (peer client, NVIDIA P2P) that is evidence for a registration.
    GpuEvidence,
    /// GPU memory freed under a live registration.
    GpuFreed,
    /// CUDA exported GPU memory as a dma-buf fd.
    GpuExport,
}

pub fn from_mr(kind: EventKind, ev: &MrEvent) -> MrRecord {
    let h = &ev.hdr;
    let from_kernel = matches!(
        kind,
        EventKind::KernelMrRegister
            | EventKind::KernelMrRelease
            | EventKind::KernelGpuEvidence
            | EventKind::KernelGpuFreed
    );
    let device = c_str(&ev.device);
    let label = c_str(&ev.label);
    MrRecord {
        ctx: context(h),
        kind: match kind {
            EventKind::KernelMrRegister | EventKind::UserMrRegister => MrKind::Register,
            EventKind::KernelMrRelease | EventKind::UserMrDeregister => MrKind::Release,
            EventKind::KernelGpuEvidence => MrKind::GpuEvidence,
            EventKind::KernelGpuFreed => MrKind::GpuFreed,
            EventKind::UserGpuExport => MrKind::GpuExport,
            _ => unreachable!("only MR kinds are decoded as MrEvent"),
        },
        source: source(h),
        from_kernel,
        addr: ev.addr,
        length: ev.length,
        iova: ev.iova,
        handle: ev.handle,
        access: ev.access,
        errno: (ev.ret < -1).then_some(-ev.ret as i32),
        failed: ev.ret < 0,
        device: (!device.is_empty()).then(|| device.to_string()),
        aux: ev.aux as i64,
        label: (!label.is_empty()).then(|| label.to_string()),
        ret: ev.ret,
        lkey: ev.lkey,
        dev: ev.dev,
        wr_bytes: (ev.wr_seen != 0).then_some(gdr_trace_common::mr::bytes::ByteCount {
            bytes_out: ev.bytes_out,
            bytes_in: ev.bytes_in,
            ops: ev.ops,
            tenant: 0,
        }),
        purpose: purpose::Purpose::from_wire(ev.purpose),
        uverbs_dev: ev.uverbs_dev,
    }
}

/// `enum ib_uverbs_access_flags` / `ibv_access_flags` names, lowest bit first (uapi
/// rdma/ib_user_ioctl_verbs.h: the optional flags start at bit 20, relaxed ordering first;
/// perftest asks for it on every MR).
pub const ACCESS_FLAGS: &[(u32, &str)] = &[
    (1 << 0, "LOCAL_WRITE"),
    (1 << 1, "REMOTE_WRITE"),
    (1 << 2, "REMOTE_READ"),
    (1 << 3, "REMOTE_ATOMIC"),
    (1 << 4, "MW_BIND"),
    (1 << 5, "ZERO_BASED"),
    (1 << 6, "ON_DEMAND"),
    (1 << 7, "HUGETLB"),
    (1 << 8, "FLUSH_GLOBAL"),
    (1 << 9, "FLUSH_PERSISTENT"),
    (1 << 20, "RELAXED_ORDERING"),
];

/// Flag names for an access mask; unknown bits appear as `0x...`.
pub fn access_names(access: u32) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = access;
    for (bit, name) in ACCESS_FLAGS {
        if access & bit != 0 {
            out.push((*name).to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        out.push(format!("{rest:#x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gdr_trace_common::{decode::encode, AttachKind, HookId};

    fn from_bytes(bytes: &[u8]) -> Result<MrRecord, DecodeError> {
        match decode(bytes)? {
            Event::Mr(r) => Ok(r),
            other => panic!("not an MR event: {other:?}"),
        }
    }

    /// Whatever the kernel hands over — any kind number, any length, any bytes (ids, ops and
    /// flags out of range, comm without NUL) — decoding refuses it with an error or makes an
    /// event of it: never a panic. The trace loop counts each refusal (`lost::UNDECODABLE`).
    #[test]
    fn garbage_records_are_refused_or_decoded_never_a_panic() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut refused, mut decoded) = (0, 0);
        for kind in 0..24u32 {
            for len in 0..=160usize {
                let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                if len >= 4 {
                    bytes[..4].copy_from_slice(&kind.to_ne_bytes());
                }
                match decode(&bytes) {
                    Ok(_) => decoded += 1,
                    Err(DecodeError::TooShort { need, got }) => {
                        assert!(got < need && got == len);
                        refused += 1
                    }
                    Err(DecodeError::TooLong { want, got }) => {
                        assert!(got > want && got == len);
                        refused += 1
                    }
                    Err(DecodeError::UnknownKind(k)) => {
                        assert_eq!(k, kind);
                        refused += 1
                    }
                }
            }
        }
        assert!(refused > 0 && decoded > 0, "refused {refused}, decoded {decoded}");
    }

    #[test]
    fn names_access_flags() {
        assert_eq!(access_names(0), Vec::<String>::new());
        assert_eq!(access_names(0b111), ["LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ"]);
        assert_eq!(access_names((1 << 10) | (1 << 20)), ["RELAXED_ORDERING", "0x400"]);
    }

    #[test]
    fn decodes_kernel_failure_with_errno() {
        let mut ev = MrEvent::zeroed();
        ev.hdr.kind = EventKind::KernelMrRegister as u32;
        ev.hdr.hook = HookId::IbUmemGet as u32;
        ev.hdr.attach = AttachKind::Kretprobe as u32;
        ev.hdr.pid = 7;
        ev.ret = -14;
        ev.length = 4096;
        let r = from_bytes(encode(&ev)).unwrap();
        assert_eq!(r.source, "kprobe:ib_umem_get");
        assert!(r.failed && r.from_kernel);
        assert_eq!(r.errno, Some(14));
        assert_eq!(r.kind, MrKind::Register);
        assert_eq!(r.device, None);
    }

    #[test]
    fn decodes_user_release() {
        let mut ev = MrEvent::zeroed();
        ev.hdr.kind = EventKind::UserMrDeregister as u32;
        ev.hdr.hook = HookId::IbvDeregMr as u32;
        ev.hdr.attach = AttachKind::Uretprobe as u32;
        ev.device[..4].copy_from_slice(b"rxe0");
        let r = from_bytes(encode(&ev)).unwrap();
        assert_eq!(r.source, "uprobe:ibv_dereg_mr");
        assert_eq!(r.kind, MrKind::Release);
        assert!(!r.failed && !r.from_kernel);
        assert_eq!(r.device.as_deref(), Some("rxe0"));
    }
}
