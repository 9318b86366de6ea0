//! Typed libcuda control calls: what a `CudaEvent` record means (contexts, peer access,
//! allocations, CUDA IPC and cuMem handles, pinned host memory). Copies are not here: the
//! kernel counts them (`trace::p2p_live`).

use gdr_trace_common::{
    p2p::{CudaEvent, DEVICE_UNKNOWN},
    HookId,
};
use serde::{Deserialize, Serialize};

use super::header::{context, source, Context, Source};

pub use crate::hooks::CudaOp;

/// The control call a hook's records are (its row's `Call::Cuda`), if it is one.
pub fn cuda_op(id: HookId) -> Option<CudaOp> {
    match crate::hooks::by_id(id).call {
        crate::hooks::Call::Cuda(op) => Some(op),
        _ => None,
    }
}

/// One libcuda control call, as it returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaCall {
    pub ctx: Context,
    pub op: CudaOp,
    /// The hooked function ("cuIpcOpenMemHandle").
    pub function: String,
    /// "uprobe:cuIpcOpenMemHandle".
    pub source: Source,
    /// The pointer or context the call is about (the imported mapping of an import).
    pub addr: u64,
    pub length: u64,
    /// Per call: flags, the shareable handle type.
    pub flags: u64,
    /// The POSIX fd of a shareable handle (export, import); the `canAccessPeer` answer.
    pub aux: i64,
    /// `CUresult` (0 = success).
    pub ret: i64,
    pub device: Option<u32>,
    pub peer_device: Option<u32>,
    /// The `CUipcMemHandle` as hex (IPC export and import).
    pub handle: Option<String>,
    /// The file behind the shareable fd (kernel `dev_t`, inode), read by the kernel at the call.
    #[serde(default)]
    pub file: Option<(u64, u64)>,
}

impl CudaCall {
    pub fn ok(&self) -> bool {
        self.ret == 0
    }
}

fn dev(d: u32) -> Option<u32> {
    (d != DEVICE_UNKNOWN).then_some(d)
}

/// The typed call of a record (None: a hook number that is not a libcuda control call).
pub fn from_record(ev: &CudaEvent) -> Option<CudaCall> {
    let id = HookId::from_u32(ev.hdr.hook)?;
    let op = cuda_op(id)?;
    let handle = matches!(op, CudaOp::IpcExport | CudaOp::IpcImport)
        .then(|| ev.handle.iter().map(|b| format!("{b:02x}")).collect::<String>());
    Some(CudaCall {
        ctx: context(&ev.hdr),
        op,
        function: crate::hooks::by_id(id).function.to_string(),
        source: source(&ev.hdr),
        addr: ev.addr,
        length: ev.length,
        flags: ev.flags,
        aux: ev.aux as i64,
        ret: ev.ret,
        device: dev(ev.device),
        peer_device: dev(ev.peer_device),
        handle,
        file: (ev.file_ino != 0).then_some((u64::from(ev.file_dev), ev.file_ino)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gdr_trace_common::{decode::encode, p2p::IPC_HANDLE_LEN, AttachKind, EventHeader, EventKind};

    #[test]
    fn decodes_an_ipc_import_with_its_handle() {
        let mut ev = CudaEvent {
            hdr: EventHeader::zeroed(),
            addr: 0x7000_0000,
            length: 0,
            flags: 1,
            aux: 0,
            ret: 0,
            device: 1,
            peer_device: DEVICE_UNKNOWN,
            handle: [0; IPC_HANDLE_LEN],
            file_ino: 0,
            file_dev: 0,
            _pad0: 0,
        };
        ev.hdr.kind = EventKind::CudaCall as u32;
        ev.hdr.hook = HookId::CuIpcOpenMemHandle as u32;
        ev.hdr.attach = AttachKind::Uretprobe as u32;
        ev.handle[0] = 0xab;
        let crate::events::Event::Cuda(c) = crate::events::decode(encode(&ev)).unwrap() else { panic!() };
        assert_eq!(c.op, CudaOp::IpcImport);
        assert_eq!(c.source, "uprobe:cuIpcOpenMemHandle");
        assert_eq!(c.device, Some(1));
        assert_eq!(c.peer_device, None);
        let h = c.handle.unwrap();
        assert_eq!(h.len(), 128);
        assert!(h.starts_with("ab00"));
    }
}
