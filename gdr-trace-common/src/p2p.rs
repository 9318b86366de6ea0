//! GPU↔GPU (P2P) and CUDA host-memory wire types: the control calls the libcuda uprobes send one
//! by one ([`CudaEvent`]), and what the kernel keeps so copies are counted there, never sent:
//! contexts and their device, the current context per thread, enabled peer access, device
//! allocations, and the copy counters per (process, device pair, verdict) read at each summary.

/// Bytes of a `CUipcMemHandle` (`char reserved[CU_IPC_HANDLE_SIZE]`).
pub const IPC_HANDLE_LEN: usize = 64;
/// Device allocations remembered per process (for device-to-device `cuMemcpy*`).
pub const MAX_ALLOCS: usize = 16;
/// A device number the kernel could not learn (context created before attach).
pub const DEVICE_UNKNOWN: u32 = u32::MAX;
/// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`: peer access is on, so not a failure.
pub const PEER_ACCESS_ALREADY_ENABLED: i64 = 704;
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
pub const HANDLE_TYPE_POSIX_FD: u64 = 1;

/// Copy verdicts as the kernel counts them.
pub mod verdict {
    /// No peer access between the two devices: the driver stages the copy through host memory.
    pub const STAGED: u32 = 0;
    /// Peer access was enabled between the two devices (either way round).
    pub const DIRECT: u32 = 1;
    /// A context's device was not seen (created before the trace started).
    pub const UNKNOWN: u32 = 2;
}

/// A libcuda control call (payload of `EventKind::CudaCall`); `hdr.hook` says which. 184 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaEvent {
    pub hdr: crate::wire::EventHeader,
    /// The address the call is about: a device pointer, a host pointer, a context.
    pub addr: u64,
    /// Bytes, where the call has a size (0 otherwise).
    pub length: u64,
    /// Per hook: flags, the shareable handle type, the peer context.
    pub flags: u64,
    /// Per hook: the POSIX fd of a shareable handle, the `canAccessPeer` answer.
    pub aux: u64,
    /// The `CUresult` (0 = success); -1 when only the entry was hooked.
    pub ret: i64,
    /// The device of the calling (or created) context; [`DEVICE_UNKNOWN`] if not known.
    pub device: u32,
    /// The peer device (peer access, `cuDeviceCanAccessPeer`); [`DEVICE_UNKNOWN`] otherwise.
    pub peer_device: u32,
    /// A `CUipcMemHandle` (IPC export and import), else zero.
    pub handle: [u8; IPC_HANDLE_LEN],
    /// The file behind a shareable handle's POSIX fd (cuMem export and import): inode number
    /// and kernel `dev_t`, read in the kernel while the fd is open; 0 when unknown.
    pub file_ino: u64,
    pub file_dev: u32,
    pub _pad0: u32,
}

/// Arguments stashed at a libcuda entry for the return probe (the handle of an IPC import
/// travels in [`CudaStash::handle`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaStash {
    pub args: [u64; 6],
    /// The current context's device at entry.
    pub device: u32,
    pub peer_device: u32,
    pub handle: [u8; IPC_HANDLE_LEN],
}

/// A context of a process.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CtxKey {
    pub tgid: u32,
    pub _pad0: u32,
    pub ctx: u64,
}

/// Peer access enabled from `device`'s context to `peer`'s, in a process.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerKey {
    pub tgid: u32,
    pub device: u32,
    pub peer: u32,
    pub _pad0: u32,
}

/// Copies of a process from one device to another, by verdict ([`verdict`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct P2pKey {
    pub tgid: u32,
    pub src_device: u32,
    pub dst_device: u32,
    pub verdict: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct P2pCount {
    pub calls: u64,
    pub bytes: u64,
}

/// Copies between device and host memory of a process, by direction ([`staged_dir`]) and the
/// host-side address (the start of the host buffer each call named): userspace attributes them
/// to the pinned buffers and staging MRs it knows at each summary.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StagedKey {
    pub tgid: u32,
    pub dir: u32,
    pub host: u64,
}

/// [`StagedKey::dir`].
pub mod staged_dir {
    /// `cuMemcpyDtoH*`: device -> host.
    pub const DTOH: u32 = 0;
    /// `cuMemcpyHtoD*`: host -> device.
    pub const HTOD: u32 = 1;
}

/// A process's device allocations (`cuMemAlloc*`), for the device of a `cuMemcpy*` pointer.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocTable {
    pub base: [u64; MAX_ALLOCS],
    pub size: [u64; MAX_ALLOCS],
    pub device: [u32; MAX_ALLOCS],
}

/// Names of the maps userspace reads.
pub mod maps {
    pub const P2P_COPIES: &str = "P2P_COPIES";
    pub const CU_PEER: &str = "CU_PEER";
    pub const STAGED_COPIES: &str = "STAGED_COPIES";
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data, `#[repr(C)]`, integers only, no implicit padding (sizes tested).
    unsafe impl aya::Pod for crate::p2p::CudaEvent {}
    unsafe impl aya::Pod for crate::p2p::P2pKey {}
    unsafe impl aya::Pod for crate::p2p::P2pCount {}
    unsafe impl aya::Pod for crate::p2p::PeerKey {}
    unsafe impl aya::Pod for crate::p2p::StagedKey {}
}

#[cfg(all(test, feature = "user"))]
mod tests {
    use super::*;
    use crate::decode::{decode, encode, Record};

    #[test]
    fn sizes_have_no_implicit_padding() {
        assert_eq!(core::mem::size_of::<CudaEvent>(), 56 + 5 * 8 + 8 + 64 + 16);
        assert_eq!(core::mem::size_of::<CudaStash>(), 6 * 8 + 8 + 64);
        assert_eq!(core::mem::size_of::<CtxKey>(), 16);
        assert_eq!(core::mem::size_of::<PeerKey>(), 16);
        assert_eq!(core::mem::size_of::<P2pKey>(), 16);
        assert_eq!(core::mem::size_of::<StagedKey>(), 16);
        assert_eq!(core::mem::size_of::<AllocTable>(), MAX_ALLOCS * 20);
    }

    #[test]
    fn cuda_event_round_trips_unaligned() {
        let mut ev = CudaEvent {
            hdr: crate::EventHeader::zeroed(),
            addr: 0x7f00_0000_0000,
            length: 4096,
            flags: 1,
            aux: 9,
            ret: 704,
            device: 0,
            peer_device: 1,
            handle: [0; IPC_HANDLE_LEN],
            file_ino: 77,
            file_dev: 5,
            _pad0: 0,
        };
        ev.hdr.kind = crate::EventKind::CudaCall as u32;
        ev.hdr.hook = crate::HookId::CuIpcOpenMemHandle as u32;
        ev.handle[0] = 0xab;
        ev.handle[63] = 0xcd;
        let mut buf = [0u8; 3 + core::mem::size_of::<CudaEvent>()];
        buf[3..].copy_from_slice(encode(&ev));
        assert_eq!(decode(&buf[3..]), Ok(Record::Cuda(ev)));
    }
}
