//! The hook table's meaning columns: what a hook's records prove ([`Role`]) and which path it
//! watches ([`Path`]). Analysis matches on these, never on a hook's name.

/// What a hook's records prove.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The kernel pinned user pages for a registration (`ib_umem_get`).
    UmemPinned,
    /// A umem of any kind was released.
    UmemReleased,
    /// A registration from userspace (libibverbs).
    UserRegister,
    /// A deregistration from userspace.
    UserDeregister,
    /// Work requests and completions in the provider library: bytes per MR (`BYTES` map).
    WorkRequest,
    /// A device context opened: where its provider's functions are (`PROVIDER_OPS`).
    ProviderContext,
    /// A registration on a peer-memory kernel (MLNX_OFED): the evidence below belongs to it.
    PeerRegister,
    /// Pinning failed and the peer-memory path was entered.
    PeerEntered,
    /// A peer client's acquire: returns 1 when the range is its (GPU) memory. nvidia-peermem's
    /// `nv_mem_acquire`: either client up to driver 575, the legacy `nv_mem` from 580.65.06.
    PeerClient,
    /// The persistent client's acquire (`nv_mem_acquire_nc`, nvidia-peermem 580.65.06+): returns
    /// 1 when the range is GPU memory; the client is `nv_mem` by default, `nv_mem_nc` in legacy
    /// mode. Its trial pin uses the persistent API.
    PeerClientPersistent,
    /// The invalidatable peer client (nvidia-peermem's legacy `nv_mem`) pinned the GPU pages.
    PeerPages,
    /// The persistent peer client pinned the GPU pages: named `nv_mem` in nvidia-peermem's
    /// default mode, `nv_mem_nc` in legacy mode (see `facts::PeermemMode`).
    PeerPagesPersistent,
    /// GPU pages pinned for P2P (inside a registration: evidence; outside: GDS or other).
    GpuPinned,
    /// GPU pages unpinned.
    GpuUnpinned,
    /// GPU memory freed under a live registration.
    GpuFreeCallback,
    /// A dma-buf registration (kernel getters, which nest, and libibverbs).
    DmabufRegister,
    /// CUDA exported GPU memory as a dma-buf fd.
    GpuExport,
    /// A CUDA context created or retained: its device (libcuda).
    CudaContext,
    /// The calling thread's current context changed (tracked in the kernel, never sent).
    CudaCurrentContext,
    /// Peer access enabled/disabled between two contexts' devices, or asked about.
    PeerAccess,
    /// A GPU↔GPU copy, classified and counted in the kernel (p2p-direct / p2p-staged).
    PeerCopy,
    /// Device memory allocated or freed (the device of a copy's pointers).
    CudaAlloc,
    /// GPU memory exported to / imported from another process (CUDA IPC, cuMem handles).
    GpuIpc,
    /// Pinned host memory allocated, registered or freed through CUDA (staging buffers).
    CudaHostMemory,
    /// A cuFile call.
    CuFileCall,
    /// An nvidia-fs ioctl or direct I/O.
    NvfsCall,
    /// A regular file opened.
    FileOpen,
    /// A counted descriptor closed.
    FileClose,
    /// POSIX reads and writes, counted in the kernel.
    PosixCounter,
    /// Pages filled into the page cache, counted in the kernel.
    PageCacheFill,
    /// io_uring requests followed to their file, counted in the kernel.
    UringCounter,
    /// The verb a thread is in, or a driver's doorbell-record mapping: what a pin made inside
    /// is for (kept in the kernel, never sent: pin records carry it).
    PinVerb,
    /// The process filter's fork follower (attached only for one process).
    ForkTracker,
    /// The process filter's exit follower: exited tasks leave it (attached with the fork follower).
    ExitUntracker,
    /// The library follower: a traced process mapped a file executable (a library copy to
    /// look for in its memory map).
    LibraryMapper,
    /// A program loaded, never attached, to learn what the kernel allows.
    CapabilityProbe,
}

/// Which path a hook watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    /// RDMA memory registrations (host or GPU memory).
    Rdma,
    /// The GPU side of a registration: peer memory, NVIDIA P2P, dma-buf, CUDA.
    Gpu,
    /// GPU↔GPU: contexts, peer access, peer copies, CUDA IPC, CUDA pinned host memory.
    P2p,
    /// File I/O: cuFile, nvidia-fs, POSIX, page cache, io_uring.
    Storage,
    /// The tracer itself (process filter, capability probes): attached by the loader, not
    /// listed among the hooks.
    Tracer,
}
