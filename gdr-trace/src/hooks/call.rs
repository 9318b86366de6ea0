//! What a library call's records are, as one column of its row: the cuFile operation and the
//! arguments and results it has (sinks show those and nothing else: a driver open has no
//! descriptor), or the libcuda control call. Adding a cuFile or CUDA hook is its row (with
//! this column) and its program; nothing else names the function again.

use gdr_trace_common::storage::GdsOp;
use serde::{Deserialize, Serialize};

/// The operation a row's records are (`Call::None` for every other hook).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    None,
    CuFile(GdsOp, Shape),
    Cuda(CudaOp),
}

/// Which fields a cuFile call has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    /// A `CUfileHandle_t`, and so a descriptor and a file.
    pub file: bool,
    /// A buffer address.
    pub buf: bool,
    /// A length (registration) or a size with file and buffer offsets (I/O).
    pub length: bool,
    pub offsets: bool,
    pub flags: bool,
    pub stream: bool,
    /// A `CUfileBatchHandle_t`.
    pub batch: bool,
    /// Entries asked for (SetUp) or returned (GetStatus).
    pub batch_count: bool,
    /// GetStatus: bytes completed and entries failed.
    pub completion: bool,
    /// A return value (every call but the two that return `void`).
    pub ret: bool,
}

impl Shape {
    /// A return value and nothing else (the driver calls).
    pub const NONE: Shape = Shape {
        file: false,
        buf: false,
        length: false,
        offsets: false,
        flags: false,
        stream: false,
        batch: false,
        batch_count: false,
        completion: false,
        ret: true,
    };
    /// cuFileRead / cuFileWrite: a file, a buffer, a size and both offsets.
    pub const IO: Shape = Shape { file: true, buf: true, length: true, offsets: true, ..Shape::NONE };
}

/// Which libcuda control call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CudaOp {
    ContextCreate,
    PrimaryContextRetain,
    PeerEnable,
    PeerDisable,
    CanAccessPeer,
    Alloc,
    Free,
    IpcExport,
    IpcImport,
    IpcClose,
    MemExport,
    MemImport,
    MemMap,
    MemSetAccess,
    /// `cuMemHostAlloc` or `cuMemAllocHost`.
    HostAlloc,
    HostRegister,
    HostFree,
    HostUnregister,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::{Path, Role, HOOKS};

    /// Every cuFile operation is one row's, named by that row's function; every cuFile call row
    /// says its operation; the CUDA rows say theirs.
    #[test]
    fn each_operation_is_one_rows_column() {
        for op in GdsOp::ALL {
            let rows: Vec<&str> = HOOKS
                .iter()
                .filter(|h| matches!(h.call, Call::CuFile(o, _) if o == op))
                .map(|h| h.function)
                .collect();
            assert_eq!(rows.len(), 1, "{op:?}: {rows:?}");
        }
        for h in HOOKS {
            let cufile = h.role == Role::CuFileCall;
            assert_eq!(cufile, matches!(h.call, Call::CuFile(..)), "{}", h.function);
            if matches!(h.call, Call::Cuda(_)) {
                assert_eq!(h.path, Path::P2p, "{}", h.function);
            }
        }
        let io = HOOKS.iter().find(|h| h.function == "cuFileRead").map(|h| h.call);
        assert_eq!(io, Some(Call::CuFile(GdsOp::Read, Shape::IO)));
        let alloc: Vec<&str> =
            HOOKS.iter().filter(|h| h.call == Call::Cuda(CudaOp::HostAlloc)).map(|h| h.function).collect();
        assert_eq!(alloc, ["cuMemHostAlloc", "cuMemAllocHost", "nvidia_mmap_sysmem"]);
    }
}
