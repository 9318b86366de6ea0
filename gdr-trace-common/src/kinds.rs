//! Every kind of ring-buffer record, declared once: its number, how it is read (its shape) and
//! its payload struct. The eBPF side stamps `EventHeader.kind` with [`EventKind`]; userspace's
//! decoder reads each kind by its shape and checks its exact size.

use crate::{
    mr::MrEvent,
    p2p::CudaEvent,
    storage::records::{FileCloseEvent, FileOpenEvent, GdsEvent, NvfsEvent},
    wire::EventHeader,
};

/// How a kind's record is read: its payload struct and the family that takes it. Kinds of one
/// shape share a decode arm; a new kind of an existing shape is one line of [`record_kinds!`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// [`MrEvent`]: registrations, releases, GPU evidence, queue pins.
    Mr,
    /// [`FileOpenEvent`].
    FileOpen,
    /// [`FileCloseEvent`].
    FileClose,
    /// [`GdsEvent`].
    Gds,
    /// [`NvfsEvent`].
    Nvfs,
    /// [`CudaEvent`].
    Cuda,
    /// The header alone: a file mapped executable.
    Mapped,
    /// The header alone: a traced process ended.
    Exit,
}

/// Every record kind, declared once: its number, its shape and its payload struct. Makes
/// [`EventKind`], its `from_u32`, `shape`, `size` and `ALL`.
macro_rules! record_kinds {
    ($($(#[$doc:meta])* $kind:ident = $n:literal, $shape:ident, $payload:ty;)*) => {
        /// What a record is; the payload type follows from it.
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum EventKind {
            $($(#[$doc])* $kind = $n,)*
        }

        impl EventKind {
            /// Every kind, in number order.
            pub const ALL: &'static [Self] = &[$(Self::$kind),*];

            pub const fn from_u32(v: u32) -> Option<Self> {
                match v {
                    $($n => Some(Self::$kind),)*
                    _ => None,
                }
            }

            /// How its record is read.
            pub const fn shape(self) -> Shape {
                match self {
                    $(Self::$kind => Shape::$shape,)*
                }
            }

            /// Its record's exact size in bytes (header included).
            pub const fn size(self) -> usize {
                match self {
                    $(Self::$kind => core::mem::size_of::<$payload>(),)*
                }
            }
        }
    };
}

record_kinds! {
    /// `ib_umem_get` returned (`handle` = `struct ib_umem *`).
    KernelMrRegister = 1, Mr, MrEvent;
    /// `ib_umem_release` of a umem seen at registration.
    KernelMrRelease = 2, Mr, MrEvent;
    /// `ibv_reg_mr*` returned in userspace (`handle` = `struct ibv_mr *`).
    UserMrRegister = 3, Mr, MrEvent;
    /// `ibv_dereg_mr` returned in userspace.
    UserMrDeregister = 4, Mr, MrEvent;
    /// Evidence on the GPU path (`hook` says which): a peer client's acquire (`ret` = 1
    /// claimed), its get_pages, `nvidia_p2p_get_pages*` / `put_pages*` (`addr` = GPU VA, `ret` =
    /// return value, `handle` = the free-callback data, `aux` = 1 when it ran inside a
    /// peer-memory registration on this thread, 0 = GDS or other).
    KernelGpuEvidence = 5, Mr, MrEvent;
    /// `nv_get_p2p_free_callback`: GPU memory freed under a live registration (`handle` = data).
    KernelGpuFreed = 6, Mr, MrEvent;
    /// `cuMemGetHandleForAddressRange` returned (`addr` = GPU VA, `aux` = dma-buf fd).
    UserGpuExport = 7, Mr, MrEvent;
    /// `openat` of a regular file returned.
    FileOpen = 10, FileOpen, FileOpenEvent;
    /// A counted descriptor was closed.
    FileClose = 11, FileClose, FileCloseEvent;
    /// A cuFile call returned.
    GdsCall = 12, Gds, GdsEvent;
    /// An nvidia-fs ioctl returned.
    NvfsIoctl = 13, Nvfs, NvfsEvent;
    /// `nvfs_direct_io` returned.
    NvfsDirectIo = 14, Nvfs, NvfsEvent;
    /// A POSIX read/write on a descriptor registered with cuFile, by a thread with no cuFile
    /// call in flight (`cmd` 0).
    GdsWorkerIo = 15, Nvfs, NvfsEvent;
    /// An async nvidia-fs I/O completed (`nvfs_io_complete`; `cmd` 0, `ret` = bytes or -errno,
    /// the header of the process that submitted it).
    NvfsComplete = 16, Nvfs, NvfsEvent;
    /// A libcuda control call returned: contexts, peer access, allocations, CUDA IPC and cuMem
    /// handles, pinned host memory.
    CudaCall = 20, Cuda, CudaEvent;
    /// A process mapped a file executable (`hook` = `SysExitMmap`): userspace looks at its
    /// memory map for library copies to hook.
    LibraryMapped = 30, Mapped, EventHeader;
    /// A traced process ended: its thread-group leader passed `sched_process_exit`.
    ProcessExit = 31, Exit, EventHeader;
}
