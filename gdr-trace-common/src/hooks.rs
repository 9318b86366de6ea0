//! Numbers that name hooks and attach modes on the wire. Userspace's hook table maps them to
//! names; the eBPF side stamps them into each record so `sources` can say which hook saw what.

/// Declares `HookId` and its `from_u32` from one list, so a new hook is one line.
macro_rules! hook_ids {
    ($($(#[$doc:meta])* $name:ident = $num:literal,)*) => {
        /// Which function a record was taken at.
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum HookId {
            $($(#[$doc])* $name = $num,)*
        }

        impl HookId {
            pub const ALL: &'static [HookId] = &[$(HookId::$name,)*];

            pub const fn from_u32(v: u32) -> Option<Self> {
                match v {
                    $($num => Some(Self::$name),)*
                    _ => None,
                }
            }
        }
    };
}

hook_ids! {
    // RDMA core and libibverbs (1..=5).
    IbUmemGet = 1,
    IbUmemRelease = 2,
    IbvRegMr = 3,
    IbvRegMrIova2 = 4,
    IbvDeregMr = 5,
    // GPU-backed registrations: peer memory, NVIDIA P2P, dma-buf (6..=19).
    IbUmemGetPeer = 6,
    IbPeerUmemGet = 7,
    NvMemAcquire = 8,
    /// nvidia-peermem 580.65.06+: the persistent client's acquire (its trial pin is persistent).
    NvMemAcquireNc = 9,
    NvMemGetPages = 10,
    NvMemGetPagesNc = 11,
    NvidiaP2pGetPages = 12,
    NvidiaP2pGetPagesPersistent = 13,
    NvidiaP2pPutPages = 14,
    NvidiaP2pPutPagesPersistent = 15,
    NvGetP2pFreeCallback = 16,
    IbUmemDmabufGetPinned = 17,
    IbUmemDmabufGet = 18,
    IbUmemDmabufGetPinnedWithDmaDevice = 19,
    // Storage (20..=39): see the storage block of the hook table.
    CuFileDriverOpen = 20,
    CuFileHandleRegister = 21,
    CuFileBufRegister = 22,
    CuFileRead = 23,
    CuFileWrite = 24,
    CuFileReadAsync = 25,
    CuFileBatchIoSubmit = 26,
    NvfsIoctl = 27,
    NvfsDirectIo = 28,
    SysIoctl = 29,
    SysOpenat = 30,
    SysClose = 31,
    PageCacheFill = 32,
    SysRead = 33,
    SysWrite = 34,
    IoUringSubmit = 35,
    IoUringFileGet = 36,
    IoUringComplete = 37,
    CuFileWriteAsync = 38,
    CuFileBatchIoSetUp = 39,
    // cuFile, continued (90..=99): the rest of the I/O surface of the real libcufile.so.0.
    CuFileBatchIoGetStatus = 90,
    CuFileBatchIoCancel = 91,
    CuFileBatchIoDestroy = 92,
    CuFileStreamRegister = 93,
    CuFileStreamDeregister = 94,
    CuFileHandleDeregister = 95,
    CuFileBufDeregister = 96,
    CuFileDriverClose = 97,
    CuFileDriverCloseV2 = 98,
    // Storage, continued (100..=109).
    /// nvidia-fs `nvfs_io_complete`: where an async I/O's bytes become known.
    NvfsIoComplete = 100,
    // GPU-path userspace hooks (40..=49).
    IbvRegDmabufMr = 40,
    CuMemGetHandleForAddressRange = 41,
    // libcuda: contexts, peer access, copies, IPC, cuMem handles, pinned host memory (60..=89).
    CuCtxCreate = 60,
    CuCtxCreateV3 = 61,
    CuCtxCreateV4 = 62,
    CuDevicePrimaryCtxRetain = 63,
    CuCtxSetCurrent = 64,
    CuCtxPushCurrent = 65,
    CuCtxPopCurrent = 66,
    CuCtxEnablePeerAccess = 67,
    CuCtxDisablePeerAccess = 68,
    CuDeviceCanAccessPeer = 69,
    CuMemcpyPeer = 70,
    CuMemcpy = 71,
    CuMemcpyDtoD = 72,
    CuMemAlloc = 73,
    CuMemFree = 74,
    CuIpcGetMemHandle = 75,
    CuIpcOpenMemHandle = 76,
    CuIpcCloseMemHandle = 77,
    CuMemExportToShareableHandle = 78,
    CuMemImportFromShareableHandle = 79,
    CuMemMap = 80,
    CuMemSetAccess = 81,
    CuMemHostAlloc = 82,
    CuMemAllocHost = 83,
    CuMemHostRegister = 84,
    CuMemFreeHost = 85,
    CuMemHostUnregister = 86,
    /// `cuMemcpyDtoH*`: device -> host copies, counted in the kernel by host address.
    CuMemcpyDtoH = 87,
    /// `cuMemcpyHtoD*`: host -> device copies, counted likewise.
    CuMemcpyHtoD = 88,
    // nvidia.ko: CUDA pinned host memory, in the kernel (120..=129).
    /// `os_lock_user_pages`: host memory pinned for CUDA (cuMemHostRegister).
    OsLockUserPages = 120,
    /// `nvidia_mmap_sysmem`: CUDA pinned system memory mapped into a process (cuMemHostAlloc).
    NvidiaMmapSysmem = 121,
    // Work requests (110..=119): the provider's functions the process's `ibv_context.ops` names.
    /// `ops.post_send` (ibv_post_send): bytes out of (RDMA read: into) the SGEs' MRs.
    ProviderPostSend = 110,
    /// `ops.post_recv` (ibv_post_recv): receive buffers, joined to their completions.
    ProviderPostRecv = 111,
    /// `ops.post_srq_recv` (ibv_post_srq_recv).
    ProviderPostSrqRecv = 112,
    /// `ops.poll_cq` (ibv_poll_cq): receive completions' byte counts.
    ProviderPollCq = 113,
    /// `ibv_open_device` (libibverbs): the new context's ops table, before any work request.
    IbvOpenDevice = 114,
    /// `ibv_qp_to_qp_ex` (libibverbs): the QP's extended work-request functions (`ibv_wr_*`).
    IbvQpToQpEx = 115,
    /// `ibv_qp_ex.wr_rdma_read` (ibv_wr_rdma_read): the next SGE is an RDMA-read destination.
    QpxRdmaRead = 116,
    /// `ibv_qp_ex.wr_set_sge` (ibv_wr_set_sge): one SGE of a work request built with `ibv_wr_*`.
    QpxSetSge = 117,
    /// `ibv_qp_ex.wr_set_sge_list` (ibv_wr_set_sge_list).
    QpxSetSgeList = 118,
    /// `ibv_qp_ex.wr_set_inline_data` (ibv_wr_set_inline_data): copied by the CPU, no MR read.
    QpxSetInlineData = 119,
    // Pins of kernels past 6.12 (140..=149): other names and forms of ib_umem_get and the
    // dma-buf getters (the RDMA pulls for 7.1 and 7.2).
    /// 7.2 series: `ib_umem_get` renamed (a static inline in the 7.2 release).
    IbUmemGetVa = 140,
    /// 7.2: `ib_umem_get_attr_or_va(dev, attrs, attr_id, addr, size, access)`.
    IbUmemGetAttrOrVa = 141,
    /// 7.2: `ib_umem_get_attr(dev, attrs, attr_id, size, access)`.
    IbUmemGetAttr = 142,
    /// 7.2: `ib_umem_get_cq_buf(dev, attrs, size, access)`.
    IbUmemGetCqBuf = 143,
    /// 7.2: `ib_umem_get_cq_buf_or_va(dev, attrs, addr, size, access)`.
    IbUmemGetCqBufOrVa = 144,
    /// 7.2: `ib_umem_get_desc(dev, desc, access)`, where every pin goes through.
    IbUmemGetDesc = 145,
    /// 7.1: `ib_umem_dmabuf_get_pinned_revocable_and_lock(dev, offset, size, fd, access)`.
    IbUmemDmabufGetPinnedRevocableAndLock = 146,
    // Queue memory (130..=139): the verb a pin is made in. Rows of the table, never in a record:
    // they keep each thread's verb (`PIN_VERB`), which pin records carry as their `purpose`.
    /// Memory registration verbs (reg_mr, rereg_mr, reg_dmabuf_mr, REG_MR).
    VerbRegister = 130,
    /// CQ creation and resizing (create_cq, ex_create_cq, resize_cq, CQ_CREATE).
    VerbCq = 131,
    /// QP creation (create_qp, ex_create_qp, QP_CREATE).
    VerbQp = 132,
    /// SRQ creation (create_srq, create_xsrq, SRQ_CREATE).
    VerbSrq = 133,
    /// WQ creation (ex_create_wq, WQ_CREATE).
    VerbWq = 134,
    /// mlx5 DEVX UMEM registration.
    VerbDevxUmem = 135,
    /// A driver's doorbell-record mapping (mlx5_ib_db_map_user and kin).
    DoorbellMap = 136,
    // The tracer's own machinery (50..=59): rows of the table, never in a record.
    /// `sched:sched_process_fork`: follows forks of traced processes into the filter.
    SchedProcessFork = 50,
    /// An fentry program loaded (never attached) to learn whether this kernel allows fentry.
    CapabilityFentry = 51,
    // 52 was the benchmark's floor, now an eBPF object of its own (no hook of gdr-trace's).
    /// `sched:sched_process_exit`: traced tasks leave the filter as they exit.
    SchedProcessExit = 53,
    /// `syscalls:sys_enter_mmap`: marks a thread mapping a file executable (library follower).
    SysEnterMmap = 54,
    /// `syscalls:sys_exit_mmap`: tells userspace which process just mapped a file executable.
    SysExitMmap = 55,
}

/// How the program that produced a record was attached.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttachKind {
    Fentry = 1,
    Fexit = 2,
    Kprobe = 3,
    Kretprobe = 4,
    Uprobe = 5,
    Uretprobe = 6,
    /// A `syscalls:sys_exit_*` or other tracepoint (storage hooks).
    Tracepoint = 7,
}

impl AttachKind {
    pub const fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::Fentry,
            2 => Self::Fexit,
            3 => Self::Kprobe,
            4 => Self::Kretprobe,
            5 => Self::Uprobe,
            6 => Self::Uretprobe,
            7 => Self::Tracepoint,
            _ => return None,
        })
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Fentry => "fentry",
            Self::Fexit => "fexit",
            Self::Kprobe => "kprobe",
            Self::Kretprobe => "kretprobe",
            Self::Uprobe => "uprobe",
            Self::Uretprobe => "uretprobe",
            Self::Tracepoint => "tracepoint",
        }
    }
}
